package policy

import (
	"fmt"
	"slices"

	"github.com/stint-project/stint/rewrite/facts"
	"github.com/stint-project/stint/rewrite/place"
)

// Entry probes (a sampled call tool; the runtime's STINT_MF_ENTRIES).
//
// A call probed at the call site runs from its trampoline, where a
// direct call is emulated (its return address pushed, a jump) unless
// the instruction before it can take the probe (precall.go): the
// processor's return-stack predictor misses the call, and every call
// site the workload runs adds a trampoline to its code's footprint.
// MariaDB under OLTP kept 0.32 of its throughput with every call site
// counting down and almost no samples taken.
//
// So a sampled call tool probes the functions instead: a probe at each
// function start and each direct call's target, whose event is the call
// that entered it (the runtime reads the return address and finds the
// call that ends there: the thesis's sample). The calls run in place,
// a function has one trampoline however many sites call it, and its
// probe counts down to the function's next sample, so a reservoir per
// function skips in its trampoline too.
//
// A function whose start is also the head of one of its own loops (a
// branch inside it jumps back to its first instruction) would count
// each iteration as a call: it gets no probe, and the rewrite says how
// many there are.

// EntrySites returns the entry sites of a sampled call tool, in address
// order, and notes them (EntryProbe).
func (p *Plan) EntrySites() []int {
	c := p.fx.Code
	entries := map[uint64]bool{}
	for s := range c.Starts {
		entries[s] = true
	}
	for i, k := range c.Kinds {
		if k == facts.Call && c.Targets[i] != 0 {
			entries[c.Targets[i]] = true
		}
	}
	starts := make([]uint64, 0, len(entries))
	for s := range entries {
		starts = append(starts, s)
	}
	slices.Sort(starts)
	looped := p.loopedEntries(starts, entries)
	p.entries = map[int]int{}
	var out []int
	for _, s := range starts {
		i := c.Index(s)
		if i < 0 || c.Insts[i].Addr != s || looped[s] || c.Kinds[i] == facts.Bad ||
			c.Insts[i].Flags&place.InstPadding != 0 || facts.IsRestorer(c, i) {
			continue
		}
		p.entries[i] = i
		if last := p.entryRun(i); last > i {
			p.entries[i] = last
		}
		out = append(out, i)
	}
	if len(looped) > 0 {
		what := "functions start"
		if len(looped) == 1 {
			what = "function starts"
		}
		p.Notes = append(p.Notes, fmt.Sprintf("%d %s with a loop's head: calls to them are not sampled", len(looped), what))
	}
	return out
}

// loopedEntries returns the entries (starts, sorted) that a direct
// branch inside their own function jumps to: after the entry and
// before the next one.
func (p *Plan) loopedEntries(starts []uint64, entries map[uint64]bool) map[uint64]bool {
	c := p.fx.Code
	looped := map[uint64]bool{}
	for i, k := range c.Kinds {
		t := c.Targets[i]
		if k != facts.Jmp && k != facts.Jcc && k != facts.Jcxz || !entries[t] {
			continue
		}
		a := c.Insts[i].Addr
		j, _ := slices.BinarySearch(starts, t)
		if a > t && (j+1 == len(starts) || a < starts[j+1]) {
			looped[t] = true
		}
	}
	return looped
}

// maxEntryRun bounds the instructions an entry's trampoline runs.
const maxEntryRun = 4

// entryRun returns the last instruction of the run entry site i's
// trampoline runs: the plain instructions from i on until they make the
// 5 bytes of a jmp rel32, which then needs no pun through a stub (most
// functions start with a push or an endbr64); i when they do not.
// Nothing else may reach the instructions after i.
func (p *Plan) entryRun(i int) int {
	c := p.fx.Code
	if !p.entryRunnable(i) {
		return i
	}
	n := c.Insts[i].Len()
	for q := i + 1; q < len(c.Insts) && q < i+maxEntryRun && n < 5; q++ {
		in := &c.Insts[q]
		prev := &c.Insts[q-1]
		if prev.Addr+uint64(prev.Len()) != in.Addr || !p.entryRunnable(q) || in.Flags&place.InstTarget != 0 ||
			c.Starts[in.Addr] || p.fx.IndirectTargets().Has(in.Addr) {
			return i
		}
		n += in.Len()
		if n >= 5 {
			return q
		}
	}
	return i
}

// entryRunnable reports whether instruction q can run from an entry's
// trampoline as part of its run.
func (p *Plan) entryRunnable(q int) bool {
	in := &p.fx.Code.Insts[q]
	const off = place.InstUntouchable | place.InstPadding | place.InstData | place.InstRemapped
	return p.fx.Code.Kinds[q] == facts.Other && in.Flags&off == 0 && in.Flags&place.InstRelocatable != 0 &&
		!p.fx.Early[q] && !p.fx.Fini.Reserved(q)
}

// EntryProbe says whether site i is a sampled call tool's entry probe,
// and returns the last instruction its trampoline runs.
func (p *Plan) EntryProbe(i int) (last int, ok bool) {
	last, ok = p.entries[i]
	return last, ok
}

// entryRunEnd returns, for entry site i with a run, the end of its run:
// the bytes after i up to there run only from its trampoline
// (place.Planner.Run); 0 for any other instruction.
func (p *Plan) entryRunEnd(i int) int64 {
	last, ok := p.entries[i]
	if !ok || last == i {
		return 0
	}
	in := &p.fx.Code.Insts[last]
	return int64(in.Addr) + int64(in.Len())
}
