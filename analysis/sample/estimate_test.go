package sample

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stint-project/stint/formats"
)

func call(time uint64, from, to uint64) formats.Event {
	return formats.Event{Kind: formats.KindSampledBase + formats.KindCall, Time: time, Src: from, Dst: to}
}

func setRow(time uint64, mod uint16, stratum, n, k uint64) formats.Event {
	return formats.Event{Kind: formats.KindSampleSet, Time: time, SrcModule: mod, Src: stratum, Dst: n, Value: k}
}

// TestReservoirExact: a reservoir per function counts its function's
// calls exactly; its samples give the callers' shares.
func TestReservoirExact(t *testing.T) {
	e := NewEstimator()
	e.Add(call(10, 0xa, 0xf)) // before the run's row: kept until it comes
	e.Add(formats.Event{Kind: formats.KindSampleRun, Src: formats.SampleReservoir, Dst: 200000, Value: 1e9})
	for i := 1; i < 60; i++ {
		e.Add(call(10, 0xa, 0xf))
	}
	for i := 0; i < 40; i++ {
		e.Add(call(10, 0xb, 0xf))
	}
	e.Add(setRow(10, 0, 0xf, 1000, 100))
	for i := 0; i < 8; i++ { // a second interval
		e.Add(call(20, 0xb, 0xf))
	}
	e.Add(setRow(20, 0, 0xf, 8, 8))
	e.Add(call(30, 0xc, 0xd)) // no sample-set row
	es := e.Estimates()
	if len(es) != 2 || es[0].Loc.Addr != 0xf || !es[0].Exact || es[0].Est != 1008 || es[0].Low != 1008 || es[0].High != 1008 {
		t.Fatalf("estimates %+v, want calls to 0xf: 1008 exactly first", es)
	}
	sh := map[uint64]float64{}
	for _, o := range es[0].Outcomes {
		sh[o.Loc.Addr] = o.Est
	}
	if sh[0xa] != 600 || sh[0xb] != 408 {
		t.Errorf("callers %v, want 0xa 600 and 0xb 408", sh)
	}
	if r := e.Run(); r.Intervals != 2 || r.Sets != 2 || r.Samples != 109 || r.Events != 1008 || r.Unmatched != 1 {
		t.Errorf("run %+v", r)
	}
}

// TestRateInterval: rate's one stream per interval: a target's count is
// its share of the samples times the events, with the variance of a
// sample drawn without replacement.
func TestRateInterval(t *testing.T) {
	e := NewEstimator()
	e.Add(formats.Event{Kind: formats.KindSampleRun, Src: formats.SampleRate, Dst: 200000, Value: 1e9})
	for i := 0; i < 100; i++ {
		e.Add(call(5, 0xa, 0xf))
		e.Add(call(5, 0xa, 0xe))
	}
	e.Add(setRow(5, formats.NoModule, 0, 1000, 200))
	es := e.Estimates()
	if len(es) != 2 {
		t.Fatalf("%d estimates", len(es))
	}
	half := 1.959964 * math.Sqrt(1000*1000*(1-0.2)*0.25/199)
	for _, x := range es {
		if x.Exact || x.Est != 500 || math.Abs(x.High-500-half) > 1e-6 || math.Abs(500-x.Low-half) > 1e-6 {
			t.Errorf("%+v: want 500 ± %.2f, not exact", x.Count, half)
		}
	}
}

func TestTVD(t *testing.T) {
	p := map[string]float64{"a": 6, "b": 3, "c": 1}
	q := map[string]float64{"a": 0.5, "b": 0.5}
	if d := TVD(p, q); math.Abs(d-0.2) > 1e-12 {
		t.Errorf("TVD %v, want 0.2", d)
	}
	if d := TVD(p, p); d != 0 {
		t.Errorf("TVD of p with itself %v", d)
	}
}

// TestShareCoverage: a caller's share estimated from a rate-like sample
// (one stratum holding every function's calls, 100 of 1,000 taken each
// interval, without replacement) has a 95% interval that holds the
// true share (30%) in about 95% of 2,000 seeded replications: the share
// is a ratio of two estimates from the same samples (taking the
// function's count as known gave 97.2%, too wide).
func TestShareCoverage(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	pop := make([][2]uint64, 0, 1000) // (caller, callee)
	for i := 0; i < 1000; i++ {
		switch {
		case i < 180:
			pop = append(pop, [2]uint64{0x1, 0xf})
		case i < 600:
			pop = append(pop, [2]uint64{0x2, 0xf})
		default:
			pop = append(pop, [2]uint64{0x3, 0xe})
		}
	}
	const reps, intervals, k = 2000, 5, 100
	hit := 0
	for r := 0; r < reps; r++ {
		e := NewEstimator()
		e.Add(formats.Event{Kind: formats.KindSampleRun, Src: formats.SampleRate, Dst: 100000, Value: 1e9})
		for iv := uint64(1); iv <= intervals; iv++ {
			for _, j := range rng.Perm(len(pop))[:k] {
				e.Add(call(iv, pop[j][0], pop[j][1]))
			}
			e.Add(setRow(iv, formats.NoModule, 0, uint64(len(pop)), k))
		}
		for _, es := range e.Estimates() {
			if es.Loc.Addr != 0xf {
				continue
			}
			for _, o := range es.Outcomes {
				if o.Loc.Addr == 0x1 && o.ShareLow <= 0.3 && 0.3 <= o.ShareHigh {
					hit++
				}
			}
		}
	}
	if c := float64(hit) / reps; c < 0.93 || c > 0.97 {
		t.Errorf("the 95%% interval of the share held the true one in %.1f%% of %d replications", 100*c, reps)
	}
}
