package cov

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/stint-project/stint/analysis/merge"
	"github.com/stint-project/stint/formats"
)

var demo = formats.Module{ID: 0, Path: "/nonexistent/demo", BuildID: "d00d", Base: 0x5000, Size: 0x10000, Rewritten: true}

// e is distinct event number n of the demo module.
func e(n uint64) formats.Event {
	return formats.Event{Kind: formats.KindJccTaken, TID: 1, Src: 0x1000 + 16*n, Dst: 0x2000 + n}
}

func rec(k formats.Kind, time, src, dst, value uint64) formats.Event {
	return formats.Event{Kind: k, Time: time, SrcModule: formats.NoModule, DstModule: formats.NoModule, Src: src, Dst: dst, Value: value}
}

func write(t testing.TB, dir, name, buildID string, events ...formats.Event) string {
	t.Helper()
	var buf bytes.Buffer
	w, err := formats.NewWriter(&buf, formats.Run{Binary: "/nonexistent/demo", BuildID: buildID, Tool: "branch", PID: 7}, []formats.Module{demo}, formats.WithBatchRows(3))
	if err != nil {
		t.Fatal(err)
	}
	w.Write(events...)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// fixture: F = e1..e10; run 1 = e1..e4 (e2 twice) + an extra event,
// with three periods (overshoots 0, 2 µs, 5 µs) and a run time of 1.1 s;
// run 2 = e3, e5, e6, e7 (e3 redundant), and its log refused e1 (which
// run 1 recorded) and e8 (which no run recorded: a false negative).
func fixture(t testing.TB) (dir, full, r1, r2 string) {
	dir = t.TempDir()
	var fe []formats.Event
	for n := uint64(1); n <= 10; n++ {
		fe = append(fe, e(n), e(n)) // repeats count once
	}
	fe = append(fe, rec(formats.KindRunEnd, 9, 0, 0, 1e9))
	full = write(t, dir, "full.arrow", "d00d", fe...)
	x := e(99)
	r1 = write(t, dir, "r1.arrow", "d00d",
		rec(formats.KindPeriod, 100, 0, 10000, 9000), rec(formats.KindPeriodStats, 100, 2, 3, 100),
		e(1), e(2), e(2), x,
		rec(formats.KindPeriod, 200, 1, 10000, 12000), rec(formats.KindPeriodStats, 200, 2, 4, 100),
		e(3), e(4),
		rec(formats.KindPeriod, 300, 2, 10000, 15000),
		rec(formats.KindRunEnd, 400, 0, 0, 1.1e9))
	refused := func(n uint64) formats.Event { x := e(n); x.Kind += formats.KindRefusedBase; return x }
	r2 = write(t, dir, "r2.arrow", "d00d", e(3), e(5), refused(1), e(6), e(7), refused(8))
	return
}

func near(a, b float64) bool { return a-b < 1e-9 && b-a < 1e-9 }

func TestCompareKnownAnswers(t *testing.T) {
	_, full, r1, r2 := fixture(t)
	rep, err := Compare(context.Background(), []string{r1, r2}, full, Options{NativeNS: 1e9 / 2})
	if err != nil {
		t.Fatal(err)
	}
	if rep.FullEvents != 10 || rep.Covered != 7 || !near(rep.Coverage, 0.7) || rep.Extra != 1 {
		t.Errorf("report: full %d covered %d coverage %v extra %d; want 10, 7, 0.7, 1", rep.FullEvents, rep.Covered, rep.Coverage, rep.Extra)
	}
	want := []struct {
		events, redundant, rejected, missed, extra int
		cov, cum, fp, fn, missedRatio              float64
		refused, refusedUnrecorded                 int
	}{
		{5, 0, 6, 6, 1, 0.4, 0.4, 0, 0, 1, 0, 0},
		{4, 1, 6, 3, 0, 0.4, 0.7, 0.25, 0.5, 0.5, 2, 1},
	}
	if len(rep.Runs) != 2 {
		t.Fatalf("%d runs, want 2", len(rep.Runs))
	}
	for i, w := range want {
		h := rep.Runs[i]
		if h.Events != w.events || h.Redundant != w.redundant || h.Rejected != w.rejected || h.Missed != w.missed || h.Extra != w.extra ||
			!near(h.Coverage, w.cov) || !near(h.CumulativeCoverage, w.cum) || !near(h.FalsePositiveRatio, w.fp) || !near(h.FalseNegativeRatio, w.fn) ||
			!near(h.MissedRatio, w.missedRatio) || h.Refused != w.refused || h.RefusedUnrecorded != w.refusedUnrecorded {
			t.Errorf("run %d: have %+v\nwant %+v", i, h, w)
		}
	}
	h := rep.Runs[0]
	if h.Periods != 3 || h.Overshoots != 2 || h.MedianUS != 2 || h.P99US != 5 || h.MaxUS != 5 || h.Suppressed != 7 {
		t.Errorf("run 0 overshoot: have %+v, want 3 periods, 2 overshoots, median 2, p99 5, max 5, 7 suppressed", h.Overshoot)
	}
	if h.SlowdownFull == nil || !near(*h.SlowdownFull, 1.1) || h.SlowdownNative == nil || !near(*h.SlowdownNative, 2.2) {
		t.Errorf("run 0 slowdowns: %v %v, want 1.1 and 2.2", h.SlowdownFull, h.SlowdownNative)
	}
	if rep.Runs[1].SlowdownFull != nil {
		t.Errorf("run 1 has no run end but a slowdown %v", *rep.Runs[1].SlowdownFull)
	}
	if rep.Overshoot.Overshoots != 2 || rep.Overshoot.Periods != 3 {
		t.Errorf("overall overshoot %+v", rep.Overshoot)
	}
	if len(rep.Modules) != 1 || rep.Modules[0].Full != 10 || rep.Modules[0].Covered != 7 {
		t.Errorf("modules %+v", rep.Modules)
	}
}

// TestCompareMerged: merging the runs, then comparing, equals comparing
// the inputs.
func TestCompareMerged(t *testing.T) {
	dir, full, r1, r2 := fixture(t)
	m := filepath.Join(dir, "m.arrow")
	f, _ := os.Create(m)
	if _, err := merge.Merge(context.Background(), f, []string{r1, r2}); err != nil {
		t.Fatal(err)
	}
	f.Close()
	a, err := Compare(context.Background(), []string{r1, r2}, full, Options{})
	if err != nil {
		t.Fatal(err)
	}
	b, err := Compare(context.Background(), []string{m}, full, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(b.Runs) != 2 || a.Coverage != b.Coverage {
		t.Fatalf("merged: %d runs coverage %v; inputs: coverage %v", len(b.Runs), b.Coverage, a.Coverage)
	}
	for i := range a.Runs {
		x, y := a.Runs[i], b.Runs[i]
		x.File, y.File, x.Run, y.Run = "", "", 0, 0
		x.SlowdownFull, y.SlowdownFull = nil, nil
		if x != y {
			t.Errorf("run %d: inputs %+v\nmerged %+v", i, x, y)
		}
	}
}

func TestCompareErrors(t *testing.T) {
	dir, full, r1, _ := fixture(t)
	other := write(t, dir, "other.arrow", "beef", e(1))
	if _, err := Compare(context.Background(), []string{r1, other}, full, Options{}); !errors.Is(err, ErrDifferentBinaries) {
		t.Errorf("different binaries: err %v", err)
	}
	bad := filepath.Join(dir, "bad.arrow")
	os.WriteFile(bad, []byte("garbage, not arrow"), 0o644)
	if _, err := Compare(context.Background(), []string{bad}, full, Options{}); err == nil || !bytes.Contains([]byte(err.Error()), []byte("bad.arrow")) {
		t.Errorf("damaged: err %v, want one naming bad.arrow", err)
	}
	data, _ := os.ReadFile(r1)
	cut := filepath.Join(dir, "cut.arrow")
	os.WriteFile(cut, data[:len(data)-20], 0o644)
	rep, err := Compare(context.Background(), []string{cut}, full, Options{})
	if err != nil || len(rep.Warnings) != 1 {
		t.Errorf("cut: err %v, warnings %v; want a warning", err, rep)
	}
}

// TestCompareLargeTable: enough distinct events for the table to be
// looked up region by region (see state.read), with known answers.
func TestCompareLargeTable(t *testing.T) {
	dir := t.TempDir()
	const n = 40000
	var full, r1, r2 []formats.Event
	for i := uint64(0); i < n; i++ {
		full = append(full, e(i))
	}
	for rep := 0; rep < 2; rep++ {
		for i := uint64(0); i < n/2; i++ {
			r1 = append(r1, e(i))
		}
	}
	r1 = append(r1, e(10*n)) // extra
	for i := uint64(n / 4); i < 3*n/4; i++ {
		r2 = append(r2, e(i))
	}
	refused := func(i uint64) formats.Event { x := e(i); x.Kind += formats.KindRefusedBase; return x }
	r2 = append(r2, refused(1), refused(n-1))
	writeBig := func(name string, evs []formats.Event) string {
		var buf bytes.Buffer
		w, err := formats.NewWriter(&buf, formats.Run{Binary: "/nonexistent/demo", BuildID: "d00d", Tool: "branch"}, []formats.Module{demo})
		if err != nil {
			t.Fatal(err)
		}
		w.Write(evs...)
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, name)
		os.WriteFile(p, buf.Bytes(), 0o644)
		return p
	}
	rep, err := Compare(context.Background(), []string{writeBig("r1.arrow", r1), writeBig("r2.arrow", r2)}, writeBig("full.arrow", full), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if rep.FullEvents != n || rep.Covered != 3*n/4 || rep.Extra != 1 {
		t.Errorf("full %d covered %d extra %d; want %d, %d, 1", rep.FullEvents, rep.Covered, rep.Extra, n, 3*n/4)
	}
	a, b := rep.Runs[0], rep.Runs[1]
	if a.Events != n/2+1 || a.Redundant != 0 || a.Extra != 1 || !near(a.Coverage, 0.5) {
		t.Errorf("run 1: %+v", a)
	}
	if b.Events != n/2 || b.Redundant != n/4 || !near(b.CumulativeCoverage, 0.75) || b.Refused != 2 || b.RefusedUnrecorded != 1 {
		t.Errorf("run 2: %+v", b)
	}
}

func TestRank(t *testing.T) {
	for _, tc := range []struct {
		xs      []float64
		p, want float64
	}{
		{[]float64{7}, 0.5, 7},
		{[]float64{1, 2}, 0.5, 1}, // even count: the lower median
		{[]float64{1, 2, 3}, 0.5, 2},
		{[]float64{1, 2, 3, 4}, 0.99, 4},
		{seqf(100), 0.99, 99}, // 1..100: the 99th value
		{seqf(101), 0.99, 100},
		{[]float64{1, 2, 3}, 1, 3},
	} {
		if have := Rank(tc.xs, tc.p); have != tc.want {
			t.Errorf("Rank(%v, %v) = %v, want %v", tc.xs, tc.p, have, tc.want)
		}
	}
	if have := Rank([]uint64{10, 30}, 0.5); have != 10 {
		t.Errorf("Rank of uint64 = %d, want 10", have)
	}
}

func seqf(n int) []float64 {
	xs := make([]float64, n)
	for i := range xs {
		xs[i] = float64(i + 1)
	}
	return xs
}

// TestCompareBlockCounts: a block-count run (rewrite --tool block
// --counts) covers the blocks whose count moved, as a block trace's
// block events would, against a full run of block events.
func TestCompareBlockCounts(t *testing.T) {
	dir := t.TempDir()
	block := func(a uint64) formats.Event {
		return formats.Event{Kind: formats.KindBlock, TID: 1, SrcModule: 0, Src: a, DstModule: 0, Dst: a}
	}
	count := func(a, n uint64) formats.Event {
		return formats.Event{Kind: formats.KindBlockCount, SrcModule: 0, Src: a, DstModule: formats.NoModule, Dst: n, Value: n}
	}
	full := write(t, dir, "full.arrow", "d00d", block(0x100), block(0x140), block(0x180), block(0x1c0))
	run := write(t, dir, "counts.arrow", "d00d", count(0x100, 5), count(0x180, 1), count(0x200, 3))
	rep, err := Compare(context.Background(), []string{run}, full, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if rep.FullEvents != 4 || rep.Covered != 2 || rep.Extra != 1 {
		t.Errorf("full %d, covered %d, extra %d; want 4, 2 and 1 (0x200)", rep.FullEvents, rep.Covered, rep.Extra)
	}
}
