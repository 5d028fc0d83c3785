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
// chain or a sampled call tool, a direct call too when the instruction
// before it is 5 bytes or more: their trampolines would emulate direct
// calls too, but a shorter instruction needs a punned jump through a
// stub, which costs more than the mispredictions: the sqlite3 workload's
// call chain took 0.70 of the time without them) at the instruction before it: that
// instruction runs from the trampoline, then the call's probe with the call's operand as it now stands, then a jump
// back to the call, which runs in place (package tramp, PreCall). The
// event is the call's (src = the call). This holds only if nothing
// reaches the call but by falling through from that instruction, and the
// call's bytes stay as they are (it is marked untouchable, so no patch
// modifies or evicts it; a pun may still read it).

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
		i := j - 1
		call := &c.Insts[j]
		if !p.preCallable(i, j) || c.Kinds[j] == facts.Call && c.Insts[i].Len() < 5 {
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

// preCalled reports whether a call of kind k is probed from the
// instruction before it where it can be: an indirect call, and in a
// call chain or a sampled call tool a direct one too.
func (p *Plan) preCalled(k facts.Kind) bool {
	return k == facts.IndCall || k == facts.Call && (p.calls || p.opts.Countdown)
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
	p.PreCalls--
	p.fx.Code.Insts[j].Flags &^= place.InstUntouchable
	return j
}
