package policy

import (
	"github.com/stint-project/stint/rewrite/facts"
	"github.com/stint-project/stint/rewrite/place"
	"github.com/stint-project/stint/runtime"
)

// Compact complete traces (rewrite --every with tool branch; the
// runtime's STINT_MF_PATHS). The runtime appends only what the path
// needs and a decoder walks the code for the rest, so the sites are:
//
//   - jccs (one outcome bit), rets (a bit, or their destination when the
//     runtime's call stack says otherwise), indirect jmps and calls
//     (their destination): what the code does not imply;
//   - direct calls: nothing in the trace, but the runtime pushes their
//     return address, which compresses the ret;
//   - entry probes at function starts: silent unless the thread comes
//     from code without probes (a callback, a new thread: a SYNC) or a
//     signal handler starts (an ASYNC);
//   - resume probes where a call that may leave the instrumented code
//     returns: silent when it returns where the call stack says, a SYNC
//     when something else lands there (longjmp).
//
// Direct jmps are not probed: the decoder follows them.

// PathsSites returns the sites of a compact complete trace, in address
// order, and notes which of them are entry and resume probes.
func (p *Plan) PathsSites() []int {
	c := p.fx.Code
	p.paths = map[int]runtime.Kind{}
	site := make([]bool, len(c.Insts))
	for i, k := range c.Kinds {
		site[i] = k.IsBranch() && k != facts.Jmp
	}
	mark := func(i int, k runtime.Kind) {
		if i < 0 || i >= len(c.Insts) || site[i] || c.Kinds[i] == facts.Bad || c.Insts[i].Flags&place.InstPadding != 0 || facts.IsRestorer(c, i) {
			return // a restorer is only ever returned to, by the kernel (facts.markRestorers)
		}
		site[i] = true
		p.paths[i] = k
	}
	for s := range c.Starts {
		if i := c.Index(s); i >= 0 && c.Insts[i].Addr == s {
			mark(i, runtime.KEntry)
		}
	}
	leaves := map[uint64]bool{}
	for i, k := range c.Kinds {
		if k != facts.Call && k != facts.IndCall || i+1 >= len(c.Insts) {
			continue
		}
		next := &c.Insts[i+1]
		if next.Addr != c.Insts[i].Addr+uint64(c.Insts[i].Len()) {
			continue
		}
		if k == facts.IndCall || p.mayLeave(c.Targets[i], leaves) {
			mark(i+1, runtime.KResume)
		}
	}
	var out []int
	for i, s := range site {
		if s {
			out = append(out, i)
		}
	}
	return out
}

// CallsSites makes the plan a compact call chain's (tool call; the
// runtime's STINT_MF_CALLS): its sites are the tool's, the calls and
// rets, each of which appends its own address; no entry or resume
// probes, since the decoder walks no code.
func (p *Plan) CallsSites(sites []int) []int {
	p.paths = map[int]runtime.Kind{}
	p.calls = true
	return sites
}

// Calls says whether the plan is a compact call chain's.
func (p *Plan) Calls() bool { return p.calls }

// PathsProbe says whether site i is an entry or a resume probe of a
// compact complete trace, and which.
func (p *Plan) PathsProbe(i int) (runtime.Kind, bool) {
	k, ok := p.paths[i]
	return k, ok
}

// Paths says whether the plan is a compact complete trace's.
func (p *Plan) Paths() bool { return p.paths != nil }

// Countdown says whether call probes count down before calling the
// runtime (a sampled call tool: STINT_MF_COUNTDOWN).
func (p *Plan) Countdown() bool { return p.opts.Countdown }

// Inline says whether the compact trace's probes append inline (unless
// rewrite --no-opt=ppi).
func (p *Plan) Inline() bool { return p.paths != nil && !p.opts.NoPPI }

// mayLeave reports whether a direct call to callee may return from code
// without probes, so that its return lands unseen: the callee is a PLT
// stub (jmp through a slot, after an endbr64 or not), or its function
// jumps out of itself (a tail call, through a pointer or to another
// function, which may itself be a stub). Worked out once per callee.
func (p *Plan) mayLeave(callee uint64, memo map[uint64]bool) bool {
	if v, ok := memo[callee]; ok {
		return v
	}
	c := p.fx.Code
	v := true
	if i := c.Index(callee); i >= 0 && c.Insts[i].Addr == callee {
		if facts.IsEndbr(c.Insts[i].Bytes()) && i+1 < len(c.Insts) {
			i++
		}
		if c.Kinds[i] != facts.IndJmp {
			v = p.jumpsOut(callee)
		}
	}
	memo[callee] = v
	return v
}

// jumpsOut reports whether the function at start has an indirect jmp or
// a jmp that leaves its FDE's range; without an FDE, true.
func (p *Plan) jumpsOut(start uint64) bool {
	fr, ok := p.fx.FDEOf(start)
	if !ok {
		return true
	}
	c := p.fx.Code
	for i := c.Index(fr.Lo); i >= 0 && i < len(c.Insts) && c.Insts[i].Addr < fr.Hi; i++ {
		switch c.Kinds[i] {
		case facts.IndJmp:
			return true
		case facts.Jmp:
			if t := c.Targets[i]; t < fr.Lo || t >= fr.Hi {
				return true
			}
		}
	}
	return false
}
