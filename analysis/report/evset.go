package report

import "math/bits"

// evSet is the loader's set of distinct events, each with the last run
// (global index) that recorded one. With half a million distinct events
// a Go map of 32-byte keys to pointers cost a cache miss for the bucket
// and another for the value; here a slot holds the key packed as
// analysis/cov's table packs it (kind:4 | src module:12 | src:48, dst
// module:12 | dst:48: every event in practice) and the run beside it,
// 24 bytes, in one open-addressing array. A key that does not pack goes
// to wide, a Go map.
type evSet struct {
	slots []evSlot // w0 == 0: empty (a kind is never 0)
	mask  uint64
	n     int
	wide  map[evKey]*int32
	grown func() // called after the slots moved (pointers into them are stale)
}

type evSlot struct {
	w0, w1 uint64
	last   int32
}

const (
	evAddrBits = 48
	evModBits  = 12
	evNoMod    = 1<<evModBits - 1 // the packed module of no module
)

func newEvSet() *evSet {
	const size = 1 << 10
	return &evSet{slots: make([]evSlot, size), mask: size - 1, wide: map[evKey]*int32{}}
}

// evPack packs key; ok is false when it does not pack.
func evPack(k evKey) (w0, w1 uint64, ok bool) {
	sm, dm := uint64(evNoMod), uint64(evNoMod)
	if k.srcMod >= 0 {
		sm = uint64(k.srcMod)
	}
	if k.dstMod >= 0 {
		dm = uint64(k.dstMod)
	}
	wideMod := k.srcMod >= evNoMod || k.dstMod >= evNoMod
	if k.kind == 0 || k.kind > 15 || (k.src|k.dst)>>evAddrBits != 0 || wideMod {
		return 0, 0, false
	}
	return uint64(k.kind)<<60 | sm<<evAddrBits | k.src, dm<<evAddrBits | k.dst, true
}

func evHash(w0, w1 uint64) uint64 {
	hi, lo := bits.Mul64(w0^0x9e3779b97f4a7c15, 0xbf58476d1ce4e5b9)
	hi, lo = bits.Mul64(hi^lo^w1, 0x94d049bb133111eb)
	return hi ^ lo
}

// last returns where key's last run is kept, or nil if key is not in
// the set. The pointer holds until the next add.
func (s *evSet) last(key evKey) *int32 {
	w0, w1, ok := evPack(key)
	if !ok {
		return s.wide[key]
	}
	for i := evHash(w0, w1) & s.mask; ; i = (i + 1) & s.mask {
		e := &s.slots[i]
		if e.w0 == w0 && e.w1 == w1 {
			return &e.last
		}
		if e.w0 == 0 {
			return nil
		}
	}
}

// add puts key, not in the set, in it with last run g.
func (s *evSet) add(key evKey, g int32) {
	w0, w1, ok := evPack(key)
	if !ok {
		v := g
		s.wide[key] = &v
		return
	}
	if 4*(s.n+1) > 3*len(s.slots) {
		s.grow()
	}
	s.put(w0, w1, g)
	s.n++
}

// put stores a key known to be absent.
func (s *evSet) put(w0, w1 uint64, g int32) {
	for i := evHash(w0, w1) & s.mask; ; i = (i + 1) & s.mask {
		if e := &s.slots[i]; e.w0 == 0 {
			e.w0, e.w1, e.last = w0, w1, g
			return
		}
	}
}

func (s *evSet) grow() {
	old := s.slots
	s.slots, s.mask = make([]evSlot, 2*len(old)), uint64(2*len(old)-1)
	for _, e := range old {
		if e.w0 != 0 {
			s.put(e.w0, e.w1, e.last)
		}
	}
	if s.grown != nil {
		s.grown()
	}
}

// len returns the number of distinct events.
func (s *evSet) len() int { return s.n + len(s.wide) }

// each calls fn with every key.
func (s *evSet) each(fn func(evKey)) {
	mod := func(m uint64) int32 {
		if m == evNoMod {
			return -1
		}
		return int32(m)
	}
	for _, e := range s.slots {
		if e.w0 != 0 {
			fn(evKey{kind: uint8(e.w0 >> 60), srcMod: mod(e.w0 >> evAddrBits & evNoMod), dstMod: mod(e.w1 >> evAddrBits & evNoMod),
				src: e.w0 & (1<<evAddrBits - 1), dst: e.w1 & (1<<evAddrBits - 1)})
		}
	}
	for k := range s.wide {
		fn(k)
	}
}
