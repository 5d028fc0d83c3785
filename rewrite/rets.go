package rewrite

import (
	"bytes"
	"cmp"
	"debug/elf"
	"slices"
	"sort"
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
// stub too (see below): tail calls, and gcc's .cold parts, which have
// FDEs of their own. Transitively. A
// callee without an FDE, or whose closure is too large, gets no list: the
// runtime then treats its calls as before. An indirect tail call is not
// followed; its target's rets are simply not in the list.

const (
	retsMaxFuncs  = 8   // functions in one callee's closure
	retsMaxRets   = 32  // ret probes in one list
	retsMaxOwn    = 64  // open-ended probes in one own list without jccs
	retsMaxOwnJcc = 256 // probes in one own list with its jccs
	retsOffBits   = 28  // stint_probe.rets: offset + 1 below, call length above
)

// fdeRanges returns the module's FDE ranges sorted by start, overlaps
// and empty ranges dropped. .eh_frame is read once; callers must not
// modify the slice.
func (f *elfFile) fdeRanges() []fdeRange {
	if f.fdesRead {
		return f.fdes
	}
	f.fdesRead = true
	s := f.section(".eh_frame")
	if s == nil || s.Type != elf.SHT_PROGBITS {
		return nil
	}
	var out []fdeRange
	for _, r := range ehFrameFDEs(f.sectData(s), s.Addr) {
		if r.hi > r.lo {
			out = append(out, r)
		}
	}
	slices.SortFunc(out, func(a, b fdeRange) int { return cmp.Compare(a.lo, b.lo) })
	f.fdes = dropOverlaps(out, func(r fdeRange) (uint64, uint64) { return r.lo, r.hi })
	return f.fdes
}

// fdeOf returns the range holding a, or false.
func fdeOf(fdes []fdeRange, a uint64) (fdeRange, bool) {
	i := sort.Search(len(fdes), func(i int) bool { return fdes[i].lo > a }) - 1
	if i < 0 || a >= fdes[i].hi {
		return fdeRange{}, false
	}
	return fdes[i], true
}

// pltCallees maps the address of each PLT stub (its jmp, and an endbr64
// before it) whose slot's JUMP_SLOT relocation names a function the
// module defines to that function (GLOB_DAT: the .plt.got stubs).
func (rw *rewriter) pltCallees() map[uint64]uint64 {
	syms := rw.f.dynSymbols()
	slot := map[uint64]uint64{} // GOT slot -> function
	rw.f.relas(func(off uint64, t elf.R_X86_64, k uint32, _ uint64) {
		// k: symbol index; dynSymbols drops the null symbol
		if t != elf.R_X86_64_JMP_SLOT && t != elf.R_X86_64_GLOB_DAT || k == 0 || int(k) > len(syms) {
			return
		}
		if sym := syms[k-1]; sym.Value != 0 && sym.Section != elf.SHN_UNDEF && elf.ST_TYPE(sym.Info) == elf.STT_FUNC {
			slot[off] = sym.Value
		}
	})
	if len(slot) == 0 {
		return nil
	}
	c := rw.c
	out := map[uint64]uint64{}
	for i := range c.insts {
		if c.kinds[i] != kIndJmp {
			continue
		}
		in := &c.insts[i]
		op, _, err := parseRM(in)
		if err != nil || !op.ripRel || op.seg != 0 {
			continue
		}
		fn, ok := slot[uint64(int64(op.next)+op.disp)]
		if !ok {
			continue
		}
		out[in.Addr] = fn
		if i > 0 && bytes.Equal(c.insts[i-1].Bytes, []byte{0xf3, 0x0f, 0x1e, 0xfa}) {
			out[c.insts[i-1].Addr] = fn
		}
	}
	return out
}

// calleeRets returns the instruction indices of the rets callee may
// return through (see above), and false when it cannot say.
func (c *code) calleeRets(fdes []fdeRange, plt map[uint64]uint64, callee uint64) ([]int, bool) {
	rets, _, ok := c.closureRets(fdes, plt, callee)
	if !ok {
		return nil, false
	}
	return rets, true
}

// closureRets walks callee's closure as calleeRets does and returns the
// rets and the FDE starts it reached; false when it stopped short (no
// FDE, too many functions, a tail call through a pointer), with what it
// had reached by then.
func (c *code) closureRets(fdes []fdeRange, plt map[uint64]uint64, callee uint64) (rets []int, funcs []uint64, ok bool) {
	queue := []uint64{callee}
	for len(queue) > 0 {
		a := queue[0]
		queue = queue[1:]
		if fn, ok := plt[a]; ok {
			a = fn
		}
		fr, ok := fdeOf(fdes, a)
		if !ok {
			return rets, funcs, false
		}
		if slices.Contains(funcs, fr.lo) {
			continue
		}
		if len(funcs) == retsMaxFuncs {
			return rets, funcs, false
		}
		funcs = append(funcs, fr.lo)
		i := sort.Search(len(c.insts), func(i int) bool { return c.insts[i].Addr >= fr.lo })
		for ; i < len(c.insts) && c.insts[i].Addr < fr.hi; i++ {
			switch c.kinds[i] {
			case kRet:
				rets = append(rets, i)
			case kIndJmp:
				// through memory that is not a fixed slot: a tail call
				// through a function pointer (sqlite3_mutex_enter's),
				// whose callee's rets are unknown. A jump table jumps
				// through a register, after its load.
				if op, _, err := parseRM(&c.insts[i]); err == nil && op.mod != 3 && !op.ripRel {
					return rets, funcs, false
				}
			case kJmp, kJcc, kJcxz:
				if t := c.targets[i]; t != 0 && (t < fr.lo || t >= fr.hi) {
					queue = append(queue, t)
				}
			}
		}
	}
	return rets, funcs, true
}

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
func (rw *rewriter) coldRets() map[uint64]bool {
	c, f := rw.c, rw.f
	fdes := f.fdeRanges()
	if len(fdes) == 0 {
		return nil
	}
	plt := rw.pltCallees()
	var warm []uint64 // function starts reached other than by a listed call
	isFunc := func(a uint64) bool {
		fr, ok := fdeOf(fdes, a)
		return ok && fr.lo == a
	}
	for a := range rw.indirectTargets() {
		if isFunc(a) {
			warm = append(warm, a)
		}
	}
	syms := f.dynSymbols()
	f.relas(func(_ uint64, t elf.R_X86_64, k uint32, _ uint64) {
		// a symbol's address taken by a data or GOT word (a JUMP_SLOT is
		// a PLT call: pltCallees)
		if t != elf.R_X86_64_JMP_SLOT && k != 0 && int(k) <= len(syms) {
			if sym := syms[k-1]; sym.Section != elf.SHN_UNDEF && isFunc(sym.Value) {
				warm = append(warm, sym.Value)
			}
		}
	})
	for i := range c.insts {
		in := &c.insts[i]
		b := in.Bytes
		// any disp32(%rip) operand naming a function start: lea, mov
		// into a register or memory
		for o := 0; o+5 <= len(b); o++ {
			if b[o]&0xc7 == 0x05 && o > 0 {
				if t := in.Addr + uint64(len(b)) + uint64(int64(int32(le.Uint32(b[o+1:])))); t != in.Addr+uint64(len(b)) && isFunc(t) {
					warm = append(warm, t)
				}
			}
		}
	}
	listed := map[int]bool{}
	done := map[uint64]bool{}
	for i := range c.insts {
		if c.kinds[i] != kCall || done[c.targets[i]] {
			continue
		}
		done[c.targets[i]] = true
		rets, funcs, ok := c.closureRets(fdes, plt, c.targets[i])
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
		rets, _, _ := c.closureRets(fdes, plt, a)
		for _, r := range rets {
			hot[r] = true
		}
	}
	out := map[uint64]bool{}
	for r := range listed {
		if !hot[r] {
			out[c.insts[r].Addr] = true
		}
	}
	return out
}

// ownSites returns the instruction indices of the open-ended sites of
// the function in FDE range fr, and of its jccs (see above).
func (c *code) ownSites(fdes []fdeRange, plt map[uint64]uint64, fr fdeRange) (open, jccs []int) {
	open, _ = c.calleeRets(fdes, plt, fr.lo)
	i := sort.Search(len(c.insts), func(i int) bool { return c.insts[i].Addr >= fr.lo })
	for ; i < len(c.insts) && c.insts[i].Addr < fr.hi; i++ {
		switch k := c.kinds[i]; {
		case k == kIndJmp || k == kIndCall || k == kRet && !slices.Contains(open, i):
			open = append(open, i)
		case k == kJcc || k == kJcxz:
			jccs = append(jccs, i)
		}
	}
	return open, jccs
}

// retLists builds the rets table and, per direct probe's site
// (instruction index), its stint_probe.rets word; calls counts the call
// sites among them. probeOf gives a site's probe index, or -1 when the
// site has none. Lists are shared by the calls of one callee and by the
// sites of one function; one without probes, or too long, is left out.
func (rw *rewriter) retLists(probeOf func(i int) int) (table []uint32, word map[int]uint32, calls int) {
	if rw.opts.Tool != ToolBranch && rw.opts.Tool != ToolCall || rw.opts.Every || rw.opts.Context {
		return nil, nil, 0
	}
	c := rw.c
	fdes := rw.f.fdeRanges()
	if len(fdes) == 0 {
		return nil, nil, 0
	}
	plt := rw.pltCallees()
	word = map[int]uint32{}
	// add appends the list of sites' probes, returning its offset + 1,
	// or 0 when it has no probes or more than max
	add := func(sites []int, max int) uint32 {
		var ps []uint32
		for _, r := range sites {
			p := probeOf(r)
			if p < 0 && r > 0 && rw.preCall[r-1] == r {
				p = probeOf(r - 1) // an indirect call probed before it (precall.go)
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
	for i := range c.insts {
		k := c.kinds[i]
		if _, pre := rw.preCall[i]; pre || k == kRet || k == kIndJmp || k == kIndCall || probeOf(i) < 0 {
			continue
		}
		if k != kCall {
			fr, ok := fdeOf(fdes, c.insts[i].Addr)
			if !ok {
				continue
			}
			off, done := byFunc[fr.lo]
			if !done {
				open, jccs := c.ownSites(fdes, plt, fr)
				if off = add(append(open, jccs...), retsMaxOwnJcc); off == 0 {
					off = add(open, retsMaxOwn)
				}
				byFunc[fr.lo] = off
			}
			if off != 0 {
				word[i] = off
			}
			continue
		}
		callee := c.targets[i]
		off, done := byCallee[callee]
		if !done {
			if rets, ok := c.calleeRets(fdes, plt, callee); ok {
				off = add(rets, retsMaxRets)
			}
			byCallee[callee] = off
		}
		if n := c.insts[i].Len(); off != 0 && n < 16 {
			word[i] = off | uint32(n)<<retsOffBits
			calls++
		}
	}
	return table, word, calls
}
