package report

// TimeHist counts events in time buckets of a width that doubles
// whenever there would be more than maxBuckets of them, so that a long
// run costs bounded memory.
type TimeHist struct {
	Width  uint64           // ns per bucket (0 until the first Add: 1 ms)
	Counts map[uint64]int64 // by time / Width
}

const maxBuckets = 1 << 14

// Add counts an event at time t (ns).
func (h *TimeHist) Add(t uint64) {
	if h.Counts == nil {
		h.Width, h.Counts = 1_000_000, map[uint64]int64{}
	}
	h.Counts[t/h.Width]++
	for len(h.Counts) > maxBuckets {
		wider := make(map[uint64]int64, len(h.Counts)/2+1)
		for b, n := range h.Counts {
			wider[b/2] += n
		}
		h.Width, h.Counts = h.Width*2, wider
	}
}
