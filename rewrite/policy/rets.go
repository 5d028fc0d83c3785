package policy

import (
	"debug/elf"

	"github.com/stint-project/stint/rewrite/elfin"
	"github.com/stint-project/stint/rewrite/facts"
	"github.com/stint-project/stint/runtime"
)

// Callee returns (ABI field stint_probe.rets, STINT_MF_RETS).
//
// A direct call retires once its one outcome is recorded, in this run or
// from the log at the next run's load. Its callee's return to the call's
// next instruction is a ret site's outcome, and a ret site is open-ended:
// the off-switch keeps it on only during the windows. A call that runs
// outside them (or runs in a later run only then) returns unrecorded, and
// with the call retired nothing new runs to ask for it: on sqlite3 these
// returns were half of what two runs missed. So the rewriter lists, per
// callee, the ret probes it may return through; the runtime switches
// those ret sites on when a call whose return is not yet recorded runs,
// and keeps a logged call's site patched until that return is recorded
// (runtime/src/rets.c).
//
// Each of a function's other direct probes (jccs, their destination
// probes, jmps) carries the list of the function's own sites instead
// (call length 0): its rets and those of the functions it tail-jumps to,
// as for a callee, its indirect jumps and calls, and its jccs unless that
// makes the list longer than retsMaxOwnJcc (then it goes without them).
// When one of them records a new outcome after the window, new code is
// running, and the runtime switches those sites on: what follows it in
// the function may be new too (runtime/src/budget.c, sw_after_record).
//
// A callee's rets are those in its FDE's range, and those of every
// function it reaches by a direct jump out of that range, through a PLT
// stub too (facts.ClosureRets): tail calls, and gcc's .cold parts, which have
// FDEs of their own. Transitively. A
// callee without an FDE, or whose closure is too large, gets no list: the
// runtime then treats its calls as before. An indirect tail call is not
// followed; its target's rets are simply not in the list.

const (
	retsMaxRets   = 32  // ret probes in one list
	retsMaxOwn    = 64  // open-ended probes in one own list without jccs
	retsMaxOwnJcc = 256 // probes in one own list with its jccs
	retsOffBits   = 28  // stint_probe.rets: offset + 1 below, call length above
)

// coldRets returns the addresses of the rets that only new code of this
// module can give a new destination, with the runtime told of it: every
// direct call that may return through one carries a list holding it
// (ret_expect switches it on when the call is new or its return is
// still to see), and no other way in is known. A ret stays out when its
// function (or one tail-jumping to it) is reached otherwise: its address
// is taken (a relocation, a rip-relative reference, a table, any word of
// a fixed-address module), or a call with no list (too long, or past a
// tail call through a pointer) reaches it. Such rets keep their windows
// (STINT_PATCH_COLD is for the others). Not counted: callers in other
// modules of an exported function, whose new return goes unseen.
// Counting them (libsqlite3's own calls go through the PLT to exported
// functions) left 800 of a skip-covered rewrite's patches cold instead
// of 1,309, nearly all of them indirect jumps; without them, after two
// runs of the sqlite3 workload's skip-covered series, 99.62% of the
// full run's events with the cold sites off against 99.65% with
// STINT_COLD=0 (6 pairs).
func (p *Plan) coldRets() map[uint64]bool {
	c, f := p.fx.Code, p.fx.File
	if len(p.fx.FDEs) == 0 {
		return nil
	}
	var warm []uint64 // function starts reached other than by a listed call
	isFunc := func(a uint64) bool {
		fr, ok := p.fx.FDEOf(a)
		return ok && fr.Lo == a
	}
	p.fx.IndirectTargets().Each(func(a uint64) {
		if isFunc(a) {
			warm = append(warm, a)
		}
	})
	syms := f.DynSymbols()
	f.Relas(func(_ uint64, t elf.R_X86_64, k uint32, _ uint64) {
		// a symbol's address taken by a data or GOT word (a JUMP_SLOT is
		// a PLT call: pltCallees)
		if t != elf.R_X86_64_JMP_SLOT && k != 0 && int(k) <= len(syms) {
			if sym := syms[k-1]; sym.Section != elf.SHN_UNDEF && isFunc(sym.Value) {
				warm = append(warm, sym.Value)
			}
		}
	})
	for i := range c.Insts {
		in := &c.Insts[i]
		b := in.Bytes()
		// any disp32(%rip) operand naming a function start: lea, mov
		// into a register or memory
		for o := 0; o+5 <= len(b); o++ {
			if b[o]&0xc7 == 0x05 && o > 0 {
				if t := in.Addr + uint64(len(b)) + uint64(int64(int32(elfin.LE.Uint32(b[o+1:])))); t != in.Addr+uint64(len(b)) && isFunc(t) {
					warm = append(warm, t)
				}
			}
		}
	}
	listed := map[int]bool{}
	done := map[uint64]bool{}
	for i := range c.Insts {
		if c.Kinds[i] != facts.Call || done[c.Targets[i]] {
			continue
		}
		done[c.Targets[i]] = true
		rets, funcs, ok := p.fx.ClosureRets(c.Targets[i])
		if !ok || len(rets) > retsMaxRets {
			warm = append(warm, funcs...)
			continue
		}
		for _, r := range rets {
			listed[r] = true
		}
	}
	hot := map[int]bool{}
	for _, a := range warm {
		rets, _, _ := p.fx.ClosureRets(a)
		for _, r := range rets {
			hot[r] = true
		}
	}
	out := map[uint64]bool{}
	for r := range listed {
		if !hot[r] {
			out[c.Insts[r].Addr] = true
		}
	}
	return out
}

// RetLists builds the rets table and, per direct probe's site, its
// stint_probe.rets word (word, by instruction index; 0 = none, and nil
// when there are none at all); n counts the sites with a word, calls the
// call sites among them. probeOf gives a site's probe index, or -1 when
// the site has none. Lists are shared by the calls of one callee and by
// the sites of one function; one without probes, or too long, is left
// out.
func (pc *Plan) RetLists(probeOf func(i int) int) (table, word []uint32, n, calls int) {
	if pc.opts.Tool != runtime.ToolBranch && pc.opts.Tool != runtime.ToolCall || pc.opts.Every || pc.opts.Context {
		return nil, nil, 0, 0
	}
	c := pc.fx.Code
	if len(pc.fx.FDEs) == 0 {
		return nil, nil, 0, 0
	}
	word = make([]uint32, len(c.Insts))
	// add appends the list of sites' probes, returning its offset + 1,
	// or 0 when it has no probes or more than max
	add := func(sites []int, max int) uint32 {
		var ps []uint32
		for _, r := range sites {
			p := probeOf(r)
			if p < 0 && r > 0 {
				if i, pre := pc.preCallOfCall(r); pre {
					p = probeOf(i) // a call probed before it (precall.go)
				}
			}
			if p >= 0 {
				ps = append(ps, uint32(p))
			}
		}
		if len(ps) == 0 || len(ps) > max || len(table)+1 >= 1<<retsOffBits-1 {
			return 0
		}
		off := uint32(len(table)) + 1
		table = append(table, uint32(len(ps)))
		table = append(table, ps...)
		return off
	}
	byCallee := map[uint64]uint32{} // callee -> offset + 1, 0 = no list
	byFunc := map[uint64]uint32{}   // FDE start -> offset + 1 of its own list
	for i := range c.Insts {
		k := c.Kinds[i]
		if _, pre := pc.preCallOf(i); pre || k == facts.Ret || k == facts.IndJmp || k == facts.IndCall || probeOf(i) < 0 {
			continue
		}
		if k != facts.Call {
			fr, ok := pc.fx.FDEOf(c.Insts[i].Addr)
			if !ok {
				continue
			}
			off, done := byFunc[fr.Lo]
			if !done {
				open, jccs := pc.fx.OwnSites(fr)
				if off = add(append(open, jccs...), retsMaxOwnJcc); off == 0 {
					off = add(open, retsMaxOwn)
				}
				byFunc[fr.Lo] = off
			}
			if off != 0 {
				word[i] = off
				n++
			}
			continue
		}
		callee := c.Targets[i]
		off, done := byCallee[callee]
		if !done {
			if rets, ok := pc.fx.CalleeRets(callee); ok {
				off = add(rets, retsMaxRets)
			}
			byCallee[callee] = off
		}
		if l := c.Insts[i].Len(); off != 0 && l < 16 {
			word[i] = off | uint32(l)<<retsOffBits
			n++
			calls++
		}
	}
	return table, word, n, calls
}
