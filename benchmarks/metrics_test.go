package benchmarks

import (
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/stint-project/stint/formats"
	"github.com/stint-project/stint/formats/redlog"
)

func set(srcs ...uint64) EventSet {
	s := EventSet{}
	for _, a := range srcs {
		s[EventKey{Kind: formats.KindJmp, Src: a, Dst: a + 1}] = struct{}{}
	}
	return s
}

func near(a, b float64) bool { return math.Abs(a-b) < 1e-9 }

func TestCompareRuns(t *testing.T) {
	full := set(1, 2, 3, 4, 5, 6, 7, 8, 9, 10)
	runs := []EventSet{
		set(1, 2, 3, 4),       // 4 new
		set(3, 4, 5, 6, 7),    // 3, 4 again; 5, 6, 7 new
		set(1, 8, 9, 10, 100), // 1 again; 8, 9, 10 new; 100 not in full
	}
	want := []RunMetrics{
		// rejected = 6 (5..10), none recorded before
		{Events: 4, Coverage: 0.4, Cumulative: 0.4, FalsePositive: 0, FalseNegative: 1},
		// rejected = 1, 2, 8, 9, 10; new among them: 8, 9, 10
		{Events: 5, Coverage: 0.5, Cumulative: 0.7, FalsePositive: 0.4, FalseNegative: 0.6},
		// rejected = 2..7, all recorded before
		{Events: 5, Coverage: 0.4, Cumulative: 1.0, FalsePositive: 0.2, FalseNegative: 0, Extra: 1},
	}
	have := CompareRuns(runs, full)
	for i := range want {
		h, w := have[i], want[i]
		if h.Events != w.Events || h.Extra != w.Extra || !near(h.Coverage, w.Coverage) || !near(h.Cumulative, w.Cumulative) ||
			!near(h.FalsePositive, w.FalsePositive) || !near(h.FalseNegative, w.FalseNegative) {
			t.Errorf("run %d: have %+v, want %+v", i+1, h, w)
		}
	}
	if have := CompareRuns([]EventSet{{}}, EventSet{}); have[0] != (RunMetrics{}) {
		t.Errorf("empty: have %+v, want zeros", have[0])
	}
}

func TestDistribution(t *testing.T) {
	for _, tc := range []struct {
		ns   []uint64
		want Dist
	}{
		{nil, Dist{}},
		{[]uint64{3000}, Dist{N: 1, Median: 3, P99: 3, Max: 3}},
		{[]uint64{4000, 1000, 2000, 3000}, Dist{N: 4, Median: 2.5, P99: 4, Max: 4}},
		// 200 values 1..200 µs: the 99th percentile by nearest rank is the 198th.
		{func() []uint64 {
			var v []uint64
			for i := uint64(200); i >= 1; i-- {
				v = append(v, i*1000)
			}
			return v
		}(), Dist{N: 200, Median: 100.5, P99: 198, Max: 200}},
	} {
		if have := Distribution(tc.ns); have != tc.want {
			t.Errorf("Distribution(%d values): have %+v, want %+v", len(tc.ns), have, tc.want)
		}
	}
}

func TestGeoMean(t *testing.T) {
	for _, tc := range []struct {
		xs   []float64
		want float64
	}{
		{nil, 0},
		{[]float64{2, 8}, 4},
		{[]float64{1, 0, 1}, 1}, // non-positive values are left out
	} {
		if have := GeoMean(tc.xs); !near(have, tc.want) {
			t.Errorf("GeoMean(%v): have %v, want %v", tc.xs, have, tc.want)
		}
	}
}

// writeTrace writes a hand-made trace of a process whose module table
// lists mods (ids in order) to dir/name.
func writeTrace(t *testing.T, dir, name string, mods []formats.Module, events []formats.Event) {
	t.Helper()
	f, err := os.Create(filepath.Join(dir, name))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	w, err := formats.NewWriter(f, formats.Run{Binary: "/bin/x", Tool: "branch", BudgetNS: 1e6, PeriodNS: 1e7}, mods)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Write(events...); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
}

const (
	bidA = "aa01"
	bidB = "bb02"
)

func TestReadRunDir(t *testing.T) {
	dir := t.TempDir()
	rec := func(k formats.Kind, time, src, dst, val uint64) formats.Event {
		return formats.Event{Kind: k, Time: time, SrcModule: formats.NoModule, DstModule: formats.NoModule, Src: src, Dst: dst, Value: val}
	}
	// Process 1: module A is id 0, B is id 1.
	writeTrace(t, dir, "x.1.arrow", []formats.Module{{ID: 0, Path: "/a", BuildID: bidA}, {ID: 1, Path: "/b", BuildID: bidB}}, []formats.Event{
		{Kind: formats.KindCall, SrcModule: 0, Src: 0x10, DstModule: 1, Dst: 0x20},
		rec(formats.KindPeriod, 100, 0, 1000, 1500),  // overshoot 500 ns
		rec(formats.KindPeriodStats, 100, 7, 3, 900), // recorded 7, suppressed 3
		{Kind: formats.KindJccTaken, SrcModule: 0, Src: 0x30, DstModule: 0, Dst: 0x40},
		rec(formats.KindPeriod, 200, 1, 1000, 800),
		rec(formats.KindRunEnd, 300, 0, 0, 5e6),
	})
	// Process 2 (a fork): the same modules with the ids swapped, one
	// event already seen in process 1 and one new.
	writeTrace(t, dir, "x.2.arrow", []formats.Module{{ID: 0, Path: "/b", BuildID: bidB}, {ID: 1, Path: "/a", BuildID: bidA}}, []formats.Event{
		{Kind: formats.KindCall, SrcModule: 1, Src: 0x10, DstModule: 0, Dst: 0x20},
		{Kind: formats.KindRet, SrcModule: 0, Src: 0x28, DstModule: formats.NoModule, Dst: 0x7fff0000},
		rec(formats.KindRunEnd, 300, 0, 0, 7e6),
	})
	in := &Interner{}
	rt, err := ReadRunDir(dir, in)
	if err != nil {
		t.Fatal(err)
	}
	if len(rt.Files) != 2 || len(rt.Events) != 3 {
		t.Errorf("have %d files, %d distinct events; want 2, 3", len(rt.Files), len(rt.Events))
	}
	if len(rt.Periods) != 2 {
		t.Fatalf("have %d periods, want 2", len(rt.Periods))
	}
	if p := rt.Periods[0]; p.Overshoot != 500 || p.Recorded != 7 || p.Suppressed != 3 || p.Enabled != 900 {
		t.Errorf("period 0: have %+v", p)
	}
	if have, want := Distribution(Overshoots(rt.Periods)), (Dist{N: 2, Median: 0.25, P99: 0.5, Max: 0.5}); have != want {
		t.Errorf("overshoots: have %+v, want %+v", have, want)
	}
	if rt.RunTimeNS != 7e6 {
		t.Errorf("run time: have %d, want 7e6", rt.RunTimeNS)
	}
	a, b := in.ids["b:"+bidA], in.ids["b:"+bidB]
	if _, ok := rt.Events[EventKey{Kind: formats.KindCall, SrcMod: a, Src: 0x10, DstMod: b, Dst: 0x20}]; !ok {
		t.Errorf("the call from A to B is missing: %v", rt.Events)
	}
	if in.BuildID(a) != bidA || in.BuildID(noMod) != "" {
		t.Errorf("BuildID: have %q, %q", in.BuildID(a), in.BuildID(noMod))
	}
	if _, err := ReadRunDir(t.TempDir(), in); err == nil {
		t.Error("an empty directory read without error")
	}
	os.WriteFile(filepath.Join(dir, "x.3.arrow"), []byte("not arrow"), 0o644)
	if _, err := ReadRunDir(dir, in); err == nil {
		t.Error("a damaged trace read without error")
	}
}

func TestLogFalseNegatives(t *testing.T) {
	in := &Interner{}
	a := in.id(&formats.Module{BuildID: bidA})
	b := in.id(&formats.Module{BuildID: bidB})
	e1 := EventKey{Kind: formats.KindCall, SrcMod: a, Src: 0x10, DstMod: b, Dst: 0x20}
	e2 := EventKey{Kind: formats.KindJmp, SrcMod: a, Src: 0x30, DstMod: a, Dst: 0x40}
	e3 := EventKey{Kind: formats.KindRet, SrcMod: a, Src: 0x50, DstMod: noMod, Dst: 0x7000}
	full := EventSet{e1: {}, e2: {}, e3: {}}
	bb, _ := redlog.ParseBuildID(bidB)
	ab, _ := redlog.ParseBuildID(bidA)
	log := filepath.Join(t.TempDir(), "x.stlog")
	// The log holds e1 and e3; only e1 was recorded by an earlier run.
	if _, err := redlog.Append(log, redlog.Exact, map[string][]redlog.Entry{bidA: {
		{A: 0x10, B: 0x20, DstMod: redlog.BuildIDHash(bb), Kind: uint32(formats.KindCall)},
		{A: 0x50, B: 0x7000, Kind: uint32(formats.KindRet)},
		{A: 0x30, B: 0x40, DstMod: redlog.BuildIDHash(ab) + 1, Kind: uint32(formats.KindJmp)}, // another destination module
	}}); err != nil {
		t.Fatal(err)
	}
	fn, rej, ok, err := LogFalseNegatives(log, full, EventSet{e1: {}}, in)
	if err != nil || !ok {
		t.Fatalf("have ok %v, err %v", ok, err)
	}
	if rej != 2 || !near(fn, 0.5) {
		t.Errorf("have %d rejected, FN %v; want 2, 0.5", rej, fn)
	}
	region := filepath.Join(t.TempDir(), "r.stlog")
	if _, err := redlog.Append(region, redlog.Hash, map[string][]redlog.Entry{bidA: {{A: 0x10, B: 4}}}); err != nil {
		t.Fatal(err)
	}
	if _, _, ok, err := LogFalseNegatives(region, full, nil, in); ok || err != nil {
		t.Errorf("region log: have ok %v, err %v; want false, nil", ok, err)
	}
	if _, _, _, err := LogFalseNegatives(filepath.Join(t.TempDir(), "none"), full, nil, in); err == nil {
		t.Error("a missing log gave no error")
	}
}
