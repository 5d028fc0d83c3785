package cov

import (
	"bufio"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"testing"

	"github.com/stint-project/stint/analysis/merge"
	"github.com/stint-project/stint/formats"
)

// The reference: Compare's definitions (see the package documentation)
// computed with Go maps over events read one by one, with modules
// identified by name. TestCompareReference checks Compare against it on
// large random traces.

type refKey struct {
	kind   formats.Kind
	srcMod string // "b:" build-id, "p:" path, "": no module
	src    uint64
	dstMod string
	dst    uint64 // the syscall number for a syscall
}

// uniEvent is an event of a random trace's universe: modules are
// indexes in refModules (-1: none).
type uniEvent struct {
	kind     formats.Kind
	sm, dm   int
	src, dst uint64
}

type refRun struct {
	events  map[refKey]bool
	refused []refKey // one per refusal row, in order
}

// refRead returns the distinct events of each run of a file (a trace
// or a merged trace), in run order.
func refRead(t *testing.T, name string) []refRun {
	t.Helper()
	r, err := merge.Open(name)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	mods := map[uint16]formats.Module{}
	for _, m := range r.Modules() {
		mods[m.ID] = m
	}
	modName := func(id uint16) string {
		m, ok := mods[id]
		switch {
		case !ok:
			return "" // NoModule, or an id not in the table: no module
		case m.BuildID != "":
			return "b:" + m.BuildID
		}
		return "p:" + m.Path
	}
	runs := make([]refRun, len(r.Runs()))
	for i := range runs {
		runs[i].events = map[refKey]bool{}
	}
	for r.Next() {
		b := r.Batch()
		for i := range b.Kind {
			e := b.Event(i)
			kind, refused := e.Kind.Refused()
			if !refused {
				kind = e.Kind
			}
			if !kind.Valid() {
				continue
			}
			dst := e.Dst
			if kind == formats.KindSyscall {
				dst = e.Value
			}
			k := refKey{kind: kind, srcMod: modName(e.SrcModule), src: e.Src, dstMod: modName(e.DstModule), dst: dst}
			run := &runs[b.RunOf(i)]
			if refused {
				run.refused = append(run.refused, k)
			} else {
				run.events[k] = true
			}
		}
	}
	if err := r.Err(); err != nil {
		t.Fatal(err)
	}
	return runs
}

type refCounts struct {
	events, redundant, rejected, missed, extra, refused, refusedUnrecorded int
	cov, cum                                                               float64
}

// refCompare computes the counts of each run and the overall ones.
func refCompare(t *testing.T, runFiles []string, fullFile string) (runs []refCounts, full, covered, extra int, byMod map[string][2]int) {
	full0 := map[refKey]bool{}
	for _, r := range refRead(t, fullFile) {
		for k := range r.events {
			full0[k] = true
		}
	}
	full = len(full0)
	ratio := func(a, b int) float64 {
		if b == 0 {
			return 0
		}
		return float64(a) / float64(b)
	}
	union := map[refKey]bool{}
	for _, f := range runFiles {
		for _, r := range refRead(t, f) {
			var c refCounts
			cov := 0
			for k := range r.events {
				c.events++
				if union[k] {
					c.redundant++
				}
				if full0[k] {
					cov++
				} else {
					c.extra++
				}
			}
			for _, k := range r.refused {
				c.refused++
				if !union[k] {
					c.refusedUnrecorded++
				}
			}
			for k := range r.events {
				union[k] = true
			}
			cum := 0
			for k := range full0 {
				if union[k] {
					cum++
				}
			}
			c.rejected, c.missed = full-cov, full-cum
			c.cov, c.cum = ratio(cov, full), ratio(cum, full)
			runs = append(runs, c)
		}
	}
	byMod = map[string][2]int{}
	for k := range full0 {
		m := byMod[k.srcMod]
		m[0]++
		if union[k] {
			m[1]++
			covered++
		}
		byMod[k.srcMod] = m
	}
	for k := range union {
		if !full0[k] {
			extra++
		}
	}
	return
}

// refModules are the random traces' modules; each file lists them in an
// order of its own, so their ids differ from file to file.
var refModules = []formats.Module{
	{Path: "/r/prog", BuildID: "a1", Base: 0x555500000000, Size: 1 << 40, Rewritten: true},
	{Path: "/r/libb.so", Base: 0x7f0000000000, Size: 1 << 30}, // no build-id: known by path
	{Path: "/r/libc.so.6", BuildID: "c3", Base: 0x7f1000000000, Size: 1 << 30},
	{Path: "/r/other-path-same-id", BuildID: "c3", Base: 0x7f2000000000, Size: 1 << 20}, // the same module as libc.so.6
}

// refUniverse returns n distinct events as (kind, module index or -1,
// src, module index or -1, dst or syscall number), some of them with
// addresses or syscall numbers too wide for a compact key.
func refUniverse(rng *rand.Rand, n int) []uniEvent {
	seen := map[uniEvent]bool{}
	var out []uniEvent
	mod := func() int {
		if rng.IntN(10) == 0 {
			return -1
		}
		return rng.IntN(len(refModules) - 1) // the duplicate is used by files, not chosen here
	}
	for len(out) < n {
		k := uniEvent{kind: formats.Kind(1 + rng.IntN(int(formats.MaxKind))), sm: mod(), dm: mod()}
		k.src = uint64(rng.IntN(1 << 16))
		k.dst = k.src + uint64(rng.IntN(64))
		switch rng.IntN(40) {
		case 0:
			k.src |= 1 << (48 + rng.IntN(16)) // wider than 48 bits
		case 1:
			k.dst = rng.Uint64() // anything, e.g. an absolute address
		case 2:
			k.src = uint64(rng.IntN(4)) // crowded: the same few sources
		}
		if k.kind == formats.KindSyscall {
			k.dst = uint64(rng.IntN(400))
			if rng.IntN(20) == 0 {
				k.dst = rng.Uint64()
			}
		}
		if seen[k] {
			continue
		}
		seen[k] = true
		out = append(out, k)
	}
	return out
}

// refWrite writes a plain trace of the events picked from u (refusal
// rows for the picks in refuse), with the module table in the order
// perm and period rows here and there.
func refWrite(t *testing.T, rng *rand.Rand, path string, u []uniEvent, picks []int, refuse []int, perm []int, batchRows int) {
	t.Helper()
	var mods []formats.Module
	id := make([]uint16, len(refModules))
	for i, p := range perm {
		m := refModules[p]
		m.ID = uint16(3 * i) // sparse ids: 1, 2, 4, ... are not in the table
		id[p] = m.ID
		mods = append(mods, m)
	}
	local := func(ix int) uint16 {
		switch {
		case ix < 0 && rng.IntN(3) == 0:
			return 1 // not in the table: no module, like NoModule
		case ix < 0:
			return formats.NoModule
		case ix == 2 && rng.IntN(2) == 0:
			return id[3] // libc under its other path: the same build-id
		}
		return id[ix]
	}
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	bw := bufio.NewWriter(f)
	w, err := formats.NewWriter(bw, formats.Run{Binary: "/r/prog", BuildID: "a1", Tool: "branch", PID: int64(rng.IntN(1 << 20))}, mods, formats.WithBatchRows(batchRows))
	if err != nil {
		t.Fatal(err)
	}
	ev := func(k uniEvent) formats.Event {
		e := formats.Event{Kind: k.kind, TID: 1, Time: uint64(rng.IntN(1e9)), SrcModule: local(k.sm), Src: k.src, DstModule: local(k.dm), Dst: k.dst}
		if k.kind == formats.KindSyscall {
			e.Dst, e.Value = rng.Uint64N(3), k.dst // dst is not part of a syscall's identity
		}
		return e
	}
	var period uint64
	for i, p := range picks {
		if i%5000 == 0 {
			w.Write(rec(formats.KindPeriod, 1, period, 10000, uint64(rng.IntN(12000))), rec(formats.KindPeriodStats, 1, 5, 3, 100))
			period++
		}
		if err := w.Write(ev(u[p])); err != nil {
			t.Fatal(err)
		}
		if len(refuse) > 0 && rng.IntN(len(picks)/len(refuse)+1) == 0 {
			e := ev(u[refuse[0]])
			e.Kind += formats.KindRefusedBase
			refuse = refuse[1:]
			w.Write(e)
		}
	}
	w.Write(rec(formats.KindRunEnd, 1, 0, 0, uint64(1e9+rng.IntN(1e9))))
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if err := bw.Flush(); err != nil {
		t.Fatal(err)
	}
	f.Close()
}

// refPicks returns n picks from a universe of size u: a skewed choice
// (a few events are frequent) with runs of repeats and of neighbours, as
// a loop makes, restricted to [lo, hi) of the universe.
func refPicks(rng *rand.Rand, n, lo, hi int) []int {
	out := make([]int, 0, n)
	for len(out) < n {
		var p int
		switch rng.IntN(4) {
		case 0:
			p = lo + int(float64(hi-lo)*rng.Float64()*rng.Float64()) // skewed to lo
		default:
			p = lo + rng.IntN(hi-lo)
		}
		for r := rng.IntN(4); r >= 0 && len(out) < n; r-- {
			out = append(out, min(hi-1, p+rng.IntN(3)))
		}
	}
	return out
}

func TestCompareReference(t *testing.T) {
	for _, c := range []struct {
		name      string
		fullShare float64 // of the universe, the part the full run draws from
		modules   int     // modules interned before the comparison
	}{
		{"full run covers most", 0.9, 0},
		{"runs mostly extra", 0.05, 0}, // the table grows during the runs
		{"modules do not pack", 0.9, 5000},
	} {
		t.Run(c.name, func(t *testing.T) { testReference(t, c.fullShare, c.modules) })
	}
}

// testReference compares random traces with Compare and with the
// reference. With modules > 0, the comparison starts from a state that
// holds that many other modules, so that the traces' modules get global
// indexes too large to pack.
func testReference(t *testing.T, fullShare float64, modules int) {
	n, events := 150_000, 400_000
	if testing.Short() {
		n, events = 20_000, 60_000
	}
	rng := rand.New(rand.NewPCG(5, 6))
	dir := t.TempDir()
	u := refUniverse(rng, n)
	// The full run and five runs: r1 and r2 plain files, r3..r5 merged
	// into one file. Each run covers part of the universe and some
	// events beyond the full run's (extra).
	full := filepath.Join(dir, "full.arrow")
	refWrite(t, rng, full, u, refPicks(rng, 2*events, 0, int(float64(n)*fullShare)), nil, []int{0, 1, 2, 3}, 1<<16)
	perms := [][]int{{2, 0, 3, 1}, {1, 3, 0, 2}, {3, 2, 1, 0}, {0, 2, 1, 3}, {1, 0, 3, 2}}
	var plain []string
	for i, perm := range perms {
		p := filepath.Join(dir, fmt.Sprintf("r%d.arrow", i+1))
		lo := rng.IntN(n / 3)
		refuse := refPicks(rng, 200, 0, n)
		rows := []int{1 << 16, 777, 1 << 16, 5000, 1 << 12}[i]
		refWrite(t, rng, p, u, refPicks(rng, events/(i+1), lo, lo+n*2/3), refuse, perm, rows)
		plain = append(plain, p)
	}
	m := filepath.Join(dir, "m.arrow")
	f, err := os.Create(m)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := merge.Merge(context.Background(), f, plain[2:]); err != nil {
		t.Fatal(err)
	}
	f.Close()
	inputs := []string{plain[0], plain[1], m}

	s := newState()
	for i := range modules {
		s.intern(formats.Module{Path: fmt.Sprintf("/elsewhere/%d.so", i)})
	}
	rep, err := s.compare(context.Background(), inputs, full, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if modules > 0 {
		// Only the keys with no module at either end pack.
		for _, e := range s.events.slots {
			if e.w0 != 0 && (e.w0>>addrBits&noMod != noMod || e.w1>>addrBits&noMod != noMod) {
				t.Fatalf("packed key %#x %#x has a module", e.w0, e.w1)
			}
		}
		if len(s.events.wide) < s.events.n {
			t.Errorf("%d packed keys, %d wide: want most keys wide", s.events.n, len(s.events.wide))
		}
	}
	want, nF, covered, extra, byMod := refCompare(t, inputs, full)
	if rep.FullEvents != nF || rep.Covered != covered || rep.Extra != extra {
		t.Errorf("full %d covered %d extra %d; reference %d, %d, %d", rep.FullEvents, rep.Covered, rep.Extra, nF, covered, extra)
	}
	if len(rep.Runs) != len(want) {
		t.Fatalf("%d runs, reference %d", len(rep.Runs), len(want))
	}
	for i, w := range want {
		h := rep.Runs[i]
		got := refCounts{h.Events, h.Redundant, h.Rejected, h.Missed, h.Extra, h.Refused, h.RefusedUnrecorded, h.Coverage, h.CumulativeCoverage}
		if got != w {
			t.Errorf("run %d:\nhave %+v\nwant %+v", i, got, w)
		}
		if h.Periods == 0 || h.TimeNS == 0 {
			t.Errorf("run %d: %d periods, time %d: the record rows were lost", i, h.Periods, h.TimeNS)
		}
	}
	// By module: Compare names a module by the first path its build-id
	// was seen with (the full run's file lists libc.so.6 first).
	var have, wantMods []string
	for _, m := range rep.Modules {
		have = append(have, fmt.Sprintf("%s %d/%d", m.Module, m.Covered, m.Full))
	}
	paths := map[string]string{"b:a1": "/r/prog", "p:/r/libb.so": "/r/libb.so", "b:c3": "/r/libc.so.6", "": "(no module)"}
	for mod, c := range byMod {
		name, ok := paths[mod]
		if !ok {
			t.Fatalf("reference: module %q", mod)
		}
		wantMods = append(wantMods, fmt.Sprintf("%s %d/%d", name, c[1], c[0]))
	}
	sort.Strings(have)
	sort.Strings(wantMods)
	if fmt.Sprint(have) != fmt.Sprint(wantMods) {
		t.Errorf("modules:\nhave %v\nwant %v", have, wantMods)
	}
	t.Logf("%d distinct in the full run, %d covered, %d extra; runs %+v", nF, covered, extra, want)
}
