package rewrite

import (
	"math/bits"

	"github.com/stint-project/stint/formats"
	"github.com/stint-project/stint/internal/blocks"
	"github.com/stint-project/stint/rewrite/elfout"
	"github.com/stint-project/stint/rewrite/facts"
	"github.com/stint-project/stint/rewrite/policy"
	"github.com/stint-project/stint/rewrite/tramp"
	"github.com/stint-project/stint/runtime"
)

// trampoline is one trampoline in the RX segment: a site's probe
// trampoline or an evicted instruction's relocated copy.
type trampoline struct {
	addr   uint64
	cold   uint64 // offset of its cold code in the cold region
	size   int32
	probe0 int32 // first probe index, -1 until numbered
	inst   int32 // the instruction it runs
	site   bool
}

// sizing is what sizing a site's trampoline found.
type sizing struct {
	arms       uint64 // bit k set = an arm's rel32 field at an offset ≡ k (mod 64) in the trampoline
	size, cold int32  // bytes of the trampoline and of its cold code (tramp/cold.go)
}

// trampTable sizes the sites' trampolines and allocates trampolines in
// the RX segment as placement asks for them (place.Planner.Near). Every
// encoding has a length that does not depend on where it is placed, so a
// trampoline is sized once and encoded once every address is known.
type trampTable struct {
	code   *facts.Code
	plan   *policy.Plan
	pic    bool
	static bool    // !Module.FS0IsThreadPointer (tramp.Asm.Static)
	counts bool    // block sites count inline (rewrite --counts)
	atomic bool    // with counts: locked increments (rewrite --counts-atomic)
	noPPI  bool    // with counts: the runtime counts (rewrite --no-opt ppi)
	noPCS  bool    // the flags are saved everywhere (rewrite --no-opt pcs)
	dpc    bool    // with counts: counted runs (runs.go; off: rewrite --no-opt dpc)
	link   bool    // a compact trace's tails (links.go; off: rewrite --no-opt link)
	pred   bool    // a compact trace's predicted indirect jmps (predicted; off: rewrite --no-opt pred)
	stripe bool    // entry probes count down per stripe of threads (STINT_MF_STRIPES)
	sites  []int32 // a call chain's: by instruction index, its number among the calls and rets (callSite), nil until needed
	stop   []bool  // by instruction index: a candidate site, where tails end
	fx     *facts.Facts
	isSite []bool                    // by instruction index
	sized  *blocks.Table[sizing]     // by instruction index: the site's sizing (sizeSite)
	at     *blocks.Table[trampoline] // by instruction index: its near trampoline, numbered in allocation order
	cursor uint64                    // where the next trampoline goes
	// The cold region follows every trampoline (and the .fini hook's):
	// coldBase is fixed by seal, once nothing more is allocated.
	coldLen  uint64
	coldBase uint64
	sizer    tramp.Asm // sizeSite's, recycled from site to site
}

func newTrampTable(fx *facts.Facts, plan *policy.Plan, start uint64) *trampTable {
	n := len(fx.Code.Insts)
	return &trampTable{code: fx.Code, fx: fx, plan: plan, pic: fx.Module.PIC, static: !fx.Module.FS0IsThreadPointer(), cursor: start,
		isSite: make([]bool, n), sized: blocks.New[sizing](n), at: blocks.New[trampoline](n)}
}

// emitSite emits (or sizes) the trampoline of site i with tool t: a
// compact trace's entry, resume or mark probe, a pre-site's (the
// instruction before an indirect call, a jcc or a ret, probing it) or an
// ordinary one.
func (tt *trampTable) emitSite(a *tramp.Asm, t runtime.Tool, i int, probes []uint64, entry uint64) []tramp.Probe {
	a.Predict = tt.predicted(i)
	if tt.plan.Calls() && tt.plan.Inline() {
		a.CallSite = tt.callSite
	}
	sp := tt.emitProbes(a, t, i, probes, entry)
	a.FlushCold()
	return sp
}

func (tt *trampTable) emitProbes(a *tramp.Asm, t runtime.Tool, i int, probes []uint64, entry uint64) []tramp.Probe {
	c := tt.code
	if last, ok := tt.plan.EntryProbe(i); ok {
		return a.EntryProbe(c.Insts[i:last+1], c.Kinds[i], c.Targets[i], probes, entry, tt.pic)
	}
	if k, ok := tt.plan.PathsProbe(i); ok {
		if j, pre := tt.plan.PreSiteOf(i); pre {
			return a.PathsPreBranch(k, c.Insts[i:j], c.Kinds[i:j], &c.Insts[j], c.Kinds[j], c.Targets[j], probes, entry)
		}
		return a.PathsProbe(k, &c.Insts[i], c.Kinds[i], c.Targets[i], probes, entry, tt.pic)
	}
	if j, ok := tt.plan.PreSiteOf(i); ok && (c.Kinds[j] == facts.IndCall || c.Kinds[j] == facts.Call) {
		return a.PreCall(c.Insts[i:j], c.Kinds[i:j], &c.Insts[j], c.Kinds[j], c.Targets[j], probes, entry, tt.pic)
	} else if ok {
		return a.PreBranch(c.Insts[i:j], c.Kinds[i:j], &c.Insts[j], c.Kinds[j], c.Targets[j], probes, entry)
	}
	return a.Site(t, &c.Insts[i], c.Kinds[i], c.Targets[i], probes, entry, tt.pic)
}

// sizeSite sizes site i's trampoline with tool t and marks i a site; it
// fails when the site can have no trampoline.
func (tt *trampTable) sizeSite(t runtime.Tool, i int) error {
	a := &tt.sizer
	a.Recycle(tramp.Asm{Sizing: true, Inline: tt.plan.Inline(), Paths: tt.plan.Paths(), Calls: tt.plan.Calls(), Static: tt.static, Countdown: tt.plan.Countdown(),
		FlagsDead: tt.flagsDead})
	if tt.stripe {
		a.Stripes = &tramp.Stripes{} // the same sizes as the real ones
	}
	a.Counts = tt.countsAt(i, 0, 0, false)
	a.Tail = tt.tails(false)
	sp := tt.emitSite(a, t, i, nil, 0)
	if a.Err != nil {
		return a.Err
	}
	sz := tt.sized.Add(i)
	*sz = sizing{size: int32(len(a.B)), cold: int32(len(a.Cold.B))}
	for _, pr := range sp {
		if pr.Arm >= 0 {
			sz.arms |= 1 << (pr.Arm & 63)
		}
	}
	tt.isSite[i] = true
	return nil
}

// sizeSites sizes the candidate sites and returns those that can have a
// trampoline; the plan records the others.
func (tt *trampTable) sizeSites(t runtime.Tool, sites []int) []int {
	var ok []int
	for _, i := range sites {
		if err := tt.sizeSite(t, i); err != nil {
			tt.plan.Refuse(i, err)
			continue
		}
		ok = append(ok, i)
	}
	return ok
}

// sizeEdges sizes the destination probes among ok, each a block probe.
func (tt *trampTable) sizeEdges(ok []int) {
	for _, i := range ok {
		if _, edge := tt.plan.EdgeOf(i); edge {
			tt.sizeSite(runtime.ToolBlock, i) // relocatable, checked by AddEdges
		}
	}
}

// tramp returns the near trampoline of instruction i, nil if it has none.
func (tt *trampTable) tramp(i int) *trampoline { return tt.at.Get(i) }

// coldSize returns the bytes of site i's cold code (0: none).
func (tt *trampTable) coldSize(i int) int {
	if sz := tt.sized.Get(i); sz != nil {
		return int(sz.cold)
	}
	return 0
}

// near allocates the near trampoline of instruction i (Planner.Near).
func (tt *trampTable) near(i int) uint64 {
	if t := tt.tramp(i); t != nil {
		return t.addr
	}
	t := tt.at.Add(i)
	*t = trampoline{addr: tt.cursor, site: tt.isSite[i], probe0: -1, inst: int32(i)}
	if t.site {
		sz := tt.sized.Get(i)
		t.size = sz.size
		t.cold = tt.coldLen
		tt.coldLen += uint64(sz.cold)
		// The runtime retargets an arm with one 4-byte store, which it
		// only does when the rel32 stays inside a 64-byte line (else the
		// probe keeps calling in): move the trampoline until every arm
		// does. The skipped bytes stay int3.
		for k := 0; k < 64 && armsCrossLine(t.addr, sz.arms); k++ {
			t.addr++
		}
		tt.cursor = t.addr
	} else {
		a := &tramp.Asm{Sizing: true}
		// Errors surface when an evicted instruction is emitted.
		a.Relocate(&tt.code.Insts[i], tt.code.Kinds[i], tt.code.Targets[i], tt.pic)
		t.size = int32(len(a.B))
	}
	tt.cursor += uint64(t.size)
	return t.addr
}

// armsCrossLine reports whether a trampoline at addr would have an arm's
// rel32 (at offsets whose residues mod 64 arms has bits for) straddle a
// 64-byte line.
func armsCrossLine(addr uint64, arms uint64) bool {
	for ; arms != 0; arms &= arms - 1 {
		if (addr+uint64(bits.TrailingZeros64(arms)))&63 > 60 {
			return true
		}
	}
	return false
}

// seal places the cold region after the last trampoline, on a 64-byte
// line, and returns its end: the end of the module's trampolines.
func (tt *trampTable) seal() uint64 {
	tt.coldBase = elfout.AlignUp(tt.cursor, 64)
	return tt.coldBase + tt.coldLen
}

// countsAt returns what site i's trampoline needs to count its block
// (nil: it does not count) with the counters at countsAt for the probe
// records at probesAt, once every trampoline is placed (placed; else
// placeholders, for sizing).
func (tt *trampTable) countsAt(i int, countsAt, probesAt uint64, placed bool) *tramp.Counts {
	if !tt.counts {
		return nil
	}
	if tt.noPPI {
		return nil // the runtime counts (record.c)
	}
	ct := &tramp.Counts{CountsAt: countsAt, ProbesAt: probesAt, FlagsDead: !tt.noPCS && tt.code.FlagsDead(i), Atomic: tt.atomic,
		Chain: func(a uint64) uint64 { return a }}
	counter := func(int) uint64 { return 1 }
	if placed {
		counter, ct.Chain = tt.runCounter(countsAt), tt.runChain
	}
	ct.Run = tt.countRun(i, counter)
	return ct
}

// predicted returns the likely destination of site i when it is a
// compact trace's indirect jmp that has one, else 0: a PLT stub's jmp
// through the slot of a function the module defines
// (facts.PLTCallees). Its probe appends a bit when the jmp goes there
// (libsqlite3 calls its own exported functions through its PLT: 1.34 M
// of the sqlite3 workload's 2.34 M indirect jmps, each a TIP of 3 bytes
// or more otherwise), and the branch map says so (BranchPredicted).
func (tt *trampTable) predicted(i int) uint64 {
	c := tt.code
	if !tt.pred || c.Kinds[i] != facts.IndJmp {
		return 0
	}
	if _, ok := tt.plan.PathsProbe(i); ok {
		return 0
	}
	if _, ok := tt.plan.PreSiteOf(i); ok {
		return 0
	}
	fn, ok := tt.fx.PLTCallees()[c.Insts[i].Addr]
	if j := c.Index(fn); !ok || j < 0 || c.Insts[j].Addr != fn || c.Kinds[j] == facts.Bad {
		return 0
	}
	return fn
}

// callSite returns, for a call chain's inline probes, the number of the
// call or ret at addr among the module's direct calls and rets (what its
// SITE packet says) and whether a call pushes nothing (noPush).
func (tt *trampTable) callSite(addr uint64) (idx uint32, noPush, ok bool) {
	c := tt.code
	i := c.Index(addr)
	if i < 0 || c.Insts[i].Addr != addr || c.Kinds[i] != facts.Call && c.Kinds[i] != facts.Ret {
		return 0, false, false
	}
	if tt.sites == nil {
		// numbered as the decoder numbers the branch map's direct calls
		// and rets (analysis/paths, module.sites)
		tt.sites = make([]int32, len(c.Insts))
		n := int32(0)
		for j, k := range c.Kinds {
			tt.sites[j] = n
			if k == facts.Call || k == facts.Ret {
				n++
			}
		}
	}
	if tt.sites[i] >= formats.MaxSite {
		return 0, false, false
	}
	return uint32(tt.sites[i]), tt.noPush(i), true
}

// noPush reports whether a call chain's direct call i pushes nothing on
// the call stack: it calls a PLT stub to a function the module does not
// define, which returns through a ret without a probe (a stale entry
// otherwise, which the caller's own ret would find on top).
func (tt *trampTable) noPush(i int) bool {
	c := tt.code
	if i < 0 || !tt.plan.Calls() || c.Kinds[i] != facts.Call {
		return false
	}
	t := c.Targets[i]
	j := c.Index(t)
	if j < 0 || c.Insts[j].Addr != t {
		return false
	}
	if facts.IsEndbr(c.Insts[j].Bytes()) && j+1 < len(c.Insts) {
		j++
	}
	if c.Kinds[j] != facts.IndJmp || !tt.fx.IsPLTSlotJmp(j) {
		return false
	}
	_, local := tt.fx.PLTCallees()[c.Insts[j].Addr]
	return !local
}

// flagsDead reports whether the status flags are dead at addr, an
// instruction's start (facts.Code.FlagsDead), unless --no-opt pcs; the
// sizing and the encoding of a trampoline ask it the same.
func (tt *trampTable) flagsDead(addr uint64) bool {
	i := tt.code.Index(addr)
	return !tt.noPCS && i >= 0 && tt.code.Insts[i].Addr == addr && tt.code.FlagsDead(i)
}
