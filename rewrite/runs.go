package rewrite

import (
	"github.com/stint-project/stint/rewrite/facts"
	"github.com/stint-project/stint/rewrite/place"
	"github.com/stint-project/stint/rewrite/tramp"
)

// Counted runs (rewrite --counts; INS-OP's dynamic probe coalescing,
// "dpc"): a block site's trampoline relocates its block and every block
// after it entered only by falling through a jcc, each counted where it
// starts, so one jump in and one out serve the run (a jump in per block
// executed before). Its exits go straight into the trampolines of the
// blocks they reach. The counts stay exact: every block still counts
// where it starts, and an inner block keeps its own site for entries the
// run does not make. INS-OP coalesces along Pin's traces with fix-ups at
// their exits; a static rewriter's run is the same trace, laid out once.
const (
	runMaxBlocks = 32  // blocks of one run
	runMaxInsts  = 256 // instructions of one run: each is relocated twice at most
)

// runInner reports whether instruction i starts a block entered only by
// falling through the jcc before it (a later block of a run).
func (tt *trampTable) runInner(i int) bool {
	c := tt.code
	return i > 0 && c.Kinds[i-1] == facts.Jcc && c.Insts[i].Flags&place.InstTarget == 0 &&
		c.Insts[i-1].Addr+uint64(c.Insts[i-1].Len()) == c.Insts[i].Addr
}

// runStops reports whether instruction i stays out of runs: a call (its
// return address must be the original code's, and a pushed one breaks
// the return predictor), a syscall or jcxz (rare), or one no trampoline
// may run.
func (tt *trampTable) runStops(i int) bool {
	c := tt.code
	switch c.Kinds[i] {
	case facts.Call, facts.IndCall, facts.Syscall, facts.Jcxz:
		return true
	}
	in := &c.Insts[i]
	if in.Flags&(place.InstUntouchable|place.InstPadding) != 0 || tt.fx.Early[i] || tt.fx.Fini.Reserved(i) {
		return true
	}
	return facts.Relocatable(in, c.Kinds[i]) != nil
}

// countRun returns the steps of site i's counted run, its head first
// (nil: the trampoline relocates site i's instruction alone). counter
// returns the counter of the block starting at instruction j (0: it has
// none, and the run stops before it). Sizing, every block has one: the
// run emitted is then never longer than the one sized.
func (tt *trampTable) countRun(i int, counter func(j int) uint64) []tramp.RunStep {
	c := tt.code
	if !tt.dpc || tt.runInner(i) || tt.runStops(i) {
		return nil
	}
	var steps []tramp.RunStep
	var ctr uint64
	for m, blocks := i, 1; ; m++ {
		steps = append(steps, tramp.RunStep{In: &c.Insts[m], Kind: c.Kinds[m], Tgt: c.Targets[m], Count: ctr,
			FlagsDead: ctr != 0 && !tt.noPCS && c.FlagsDead(m)})
		k, n := c.Kinds[m], m+1
		if k.IsUncond() || len(steps) == runMaxInsts || n == len(c.Insts) ||
			c.Insts[m].Addr+uint64(c.Insts[m].Len()) != c.Insts[n].Addr || tt.runStops(n) {
			break
		}
		ctr = 0
		if k == facts.Jcc {
			if !tt.runInner(n) || blocks == runMaxBlocks {
				break
			}
			if ctr = counter(n); ctr == 0 {
				break
			}
			blocks++
		} else if c.Insts[n].Flags&place.InstTarget != 0 {
			break
		}
	}
	return steps
}

// placedSite returns the trampoline of site j once placement patched
// it and its probes are numbered (nil otherwise): what runs instruction
// j when jumped to, with its probe.
func (tt *trampTable) placedSite(j int) *trampoline {
	if t := tt.tramp(j); t != nil && t.site && t.probe0 >= 0 && tt.isSite[j] {
		return t
	}
	return nil
}

// runCounter returns, once every site's probes are numbered, the
// counter of the block starting at instruction j (0: none) with the
// counters at countsAt.
func (tt *trampTable) runCounter(countsAt uint64) func(j int) uint64 {
	return func(j int) uint64 {
		if t := tt.placedSite(j); t != nil {
			return countsAt + uint64(t.probe0)*8
		}
		return 0
	}
}

// runChain returns, once every trampoline is placed, the address a
// run's branch to addr goes to: the trampoline of the site starting
// there (it runs what addr would), else addr.
func (tt *trampTable) runChain(addr uint64) uint64 {
	if j := tt.code.Index(addr); j >= 0 && tt.code.Insts[j].Addr == addr {
		return tt.chainAt(j)
	}
	return addr
}

// chainAt is runChain for instruction j.
func (tt *trampTable) chainAt(j int) uint64 {
	if t := tt.placedSite(j); t != nil {
		return t.addr
	}
	return tt.code.Insts[j].Addr
}
