package policy

import (
	"github.com/stint-project/stint/rewrite/facts"
	"github.com/stint-project/stint/rewrite/place"
	"github.com/stint-project/stint/runtime"
)

// Pre-call sites.
//
// An indirect call probed at the call itself runs from its trampoline,
// where it is emulated: the original return address pushed, then a jump
// to the target. The program sees its own return address, but the
// processor's return-stack predictor saw no call: the callee's ret
// mispredicts, and so does every ret above it until the stacks agree
// again.
//
// So where it can, the rewriter probes an indirect call (in a call
// chain or a sampled call tool, a direct call too: their trampolines
// would emulate direct calls too) at the instruction before it, or at
// the start of a run of up to maxPreRun plain instructions before it
// that make the 5 bytes of a jmp rel32 (preCallSite; a single shorter
// instruction needs a punned jump through a stub, which costs more than
// the mispredictions, so a direct call gets no pre-call site then: the
// sqlite3 workload's call chain took 0.70 of the time without pre-calls
// of 5 bytes, and runs took it to about 0.9 of that): the run executes
// from the trampoline, then the call's probe with the call's operand as
// it now stands, then a jump back to the call, which runs in place
// (package tramp, PreCall). The event is the call's (src = the call).
// This holds only if nothing reaches the call or the run's instructions
// after the first but by falling through, and the call's bytes stay as
// they are (it is marked untouchable, so no patch modifies or evicts it;
// a pun may still read it).

// planPreCalls replaces, in sites (sorted instruction indices), each
// indirect call that can be probed from the instruction before it by
// that instruction, and notes the pair in p.preCall.
func (p *Plan) planPreCalls(sites []int) []int {
	if p.opts.EmulateIndirectCalls || (p.opts.Tool != runtime.ToolBranch && p.opts.Tool != runtime.ToolCall) || p.entries != nil {
		return sites
	}
	c := p.fx.Code
	p.preCall = map[int]int{}
	for k, j := range sites {
		if !p.preCalled(c.Kinds[j]) || j == 0 {
			continue
		}
		i := p.preCallSite(j)
		call := &c.Insts[j]
		if i < 0 {
			continue
		}
		if fr, ok := p.fx.FDEOf(call.Addr); ok && fr.LSDA {
			continue // a landing pad may be anywhere in such a function
		}
		call.Flags |= place.InstUntouchable
		p.preCall[i] = j
		p.mark(&p.preAt, i)
		sites[k] = i
		p.PreCalls++
	}
	return sites
}

// preCallSite returns the pre-call site of call j: the instruction
// before it when that is 5 bytes or more (a jmp rel32 in place); where
// runs are allowed (runs), else the nearest one up to maxPreRun before
// from which the plain instructions up to j make 5 bytes, which its
// trampoline then runs (PreRunEnd: the run's bytes are its to
// overwrite); else, for an indirect call, the one before it (patched
// with a pun through a stub), and for a direct call none: its
// trampoline emulates it. Half of the sqlite3 workload's direct calls
// come after two plain instructions that make 5 bytes, a fifth after
// one. Every instruction of the run falls into the next, and nothing
// else reaches any of them but the first.
func (p *Plan) preCallSite(j int) int {
	c := p.fx.Code
	if !p.preCallable(j-1, j) {
		return -1
	}
	if c.Insts[j-1].Len() >= 5 {
		return j - 1
	}
	if p.runs() && !p.noRun[j] {
		for i := j - 2; i >= 0 && i >= j-maxPreRun; i-- {
			if !p.preCallable(i, i+1) {
				break
			}
			if c.Insts[j].Addr-c.Insts[i].Addr >= 5 {
				return i
			}
		}
	}
	if c.Kinds[j] == facts.IndCall {
		return j - 1
	}
	return -1
}

// AvoidPreRuns makes the calls in calls take no pre-call site with a run
// (a run's bytes may be the room a neighbour needed in an earlier
// placement), before the sites are planned.
func (p *Plan) AvoidPreRuns(calls map[int]bool) { p.noRun = calls }

// PreRunsNear returns the calls whose pre-call sites have a run (more
// than one instruction), placed or given up, starting within span bytes
// of address a.
func (p *Plan) PreRunsNear(a uint64, span uint64) []int {
	if !p.runs() {
		return nil
	}
	c := p.fx.Code
	near := func(i int) bool { return c.Insts[i].Addr+span >= a && c.Insts[i].Addr <= a+span }
	var out []int
	for i, j := range p.preCall {
		if j-i > 1 && near(i) {
			out = append(out, j)
		}
	}
	for _, r := range p.lostRuns {
		if near(r[0]) {
			out = append(out, r[1])
		}
	}
	return out
}

// preCallOfCall returns the pre-call site that probes call j, if any.
func (p *Plan) preCallOfCall(j int) (int, bool) {
	for i := j - 1; i >= 0 && i >= j-maxPreRun; i-- {
		if call, ok := p.preCallOf(i); ok && call == j {
			return i, true
		}
	}
	return 0, false
}

// preCalled reports whether a call of kind k is probed from the
// instruction before it where it can be: an indirect call, and in a
// call chain or a sampled call tool a direct one too. (A complete branch
// trace's direct calls too, with runs, took the same time: 1.04 and
// 0.95 of it in 30 and 20 pairs, with three more sites left unpatched.)
func (p *Plan) preCalled(k facts.Kind) bool {
	return k == facts.IndCall || k == facts.Call && (p.calls || p.opts.Countdown)
}

// runs reports whether a pre-call site may run several instructions
// before its call (preCallSite): where direct calls are pre-called,
// unless turned off (--no-opt pre), but not in a Go executable, whose
// runtime must find the faults it turns into panics at its own
// addresses (a nil dereference moved into a trampoline killed the
// panicking goroutines fixture with "unexpected return pc").
func (p *Plan) runs() bool {
	return (p.calls || p.opts.Countdown) && !p.fx.Module.Go && !p.opts.NoPreRuns
}

// preCallable reports whether indirect call j can be probed from
// instruction i = j-1: i is a plain instruction that can run from a
// trampoline and falls into j, and nothing else leads to j (no direct
// branch, function start or possible indirect target).
func (p *Plan) preCallable(i, j int) bool {
	if _, ok := p.paths[i]; ok {
		return false // an entry or resume site already
	}
	return p.preSiteable(i, j)
}

// preSiteable is preCallable, an entry or resume site at i allowed.
func (p *Plan) preSiteable(i, j int) bool {
	c := p.fx.Code
	in, call := &c.Insts[i], &c.Insts[j]
	if c.Kinds[i] != facts.Other || in.Addr+uint64(in.Len()) != call.Addr {
		return false
	}
	if in.Flags&(place.InstUntouchable|place.InstPadding) != 0 || in.Flags&place.InstRelocatable == 0 {
		return false
	}
	if call.Flags&(place.InstTarget|place.InstUntouchable) != 0 || c.Starts[call.Addr] || p.fx.IndirectTargets().Has(call.Addr) {
		return false
	}
	fini := p.fx.Fini
	if p.fx.Early[i] || p.fx.Early[j] || fini.Reserved(i) || fini.Reserved(j) || facts.IsEndbr(in.Bytes()) {
		return false
	}
	return true
}

// preCallOf returns the indirect call pre-call site i probes; ok is
// false when i is no pre-call site (the filter first: most are not).
func (p *Plan) preCallOf(i int) (call int, ok bool) {
	if !maybe(p.preAt, i) {
		return 0, false
	}
	call, ok = p.preCall[i]
	return call, ok
}

// PreSiteOf returns the branch that pre-site i probes: an indirect call,
// or a compact trace's jcc or ret the planner could not patch in place
// (marks.go).
func (p *Plan) PreSiteOf(i int) (branch int, ok bool) {
	if !maybe(p.preAt, i) {
		return 0, false
	}
	if branch, ok = p.preCall[i]; ok {
		return branch, ok
	}
	branch, ok = p.preBranch[i]
	return branch, ok
}

// UnPreSite gives up pre-site i, which placement could not patch, and
// returns its branch, to be probed where it is after all (a call
// untouchable no more: nothing above it wrote its bytes, and nothing
// below it has been placed yet).
func (p *Plan) UnPreSite(i int) int {
	if j, ok := p.preBranch[i]; ok {
		delete(p.preBranch, i)
		return j
	}
	j := p.preCall[i]
	delete(p.preCall, i)
	if j-i > 1 {
		p.lostRuns = append(p.lostRuns, [2]int{i, j})
	}
	p.PreCalls--
	p.fx.Code.Insts[j].Flags &^= place.InstUntouchable
	return j
}
