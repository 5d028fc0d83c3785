package rewrite

import "github.com/stint-project/stint/rewrite/place"

// Pre-call sites.
//
// An indirect call probed at the call itself runs from its trampoline,
// where it is emulated: the original return address pushed, then a jump
// to the target. The program sees its own return address, but the
// processor's return-stack predictor saw no call: the callee's ret
// mispredicts, and so does every ret above it until the stacks agree
// again. On the sqlite3 workload (malloc and free through function
// pointers, B-tree cell parsers, VFS methods) leaving the indirect calls
// unprobed made a budgeted run 1.91x -> 1.80x native, 1.57x -> 1.50x with
// the budget at 1 us.
//
// So where it can, the rewriter probes an indirect call at the
// instruction before it: that instruction runs from the trampoline, then
// the call's probe with the call's operand as it now stands, then a jump
// back to the call, which runs in place (tramp.go, preCallTramp). The
// event is the call's (src = the call), as before. This holds only if
// nothing reaches the call but by falling through from that instruction,
// and the call's bytes stay as they are (it is marked untouchable, so no
// patch modifies or evicts it; a pun may still read it).

// planPreCalls replaces, in sites (sorted instruction indices), each
// indirect call that can be probed from the instruction before it by
// that instruction, and notes the pair in rw.preCall.
func (rw *rewriter) planPreCalls(sites []int) []int {
	if rw.opts.EmulateIndirectCalls || (rw.opts.Tool != ToolBranch && rw.opts.Tool != ToolCall) {
		return sites
	}
	c := rw.c
	var indirect map[uint64]bool
	fdes := rw.f.fdeRanges()
	rw.preCall = map[int]int{}
	for k, j := range sites {
		if c.kinds[j] != kIndCall || j == 0 {
			continue
		}
		if indirect == nil {
			indirect = rw.indirectTargets()
		}
		i := j - 1
		call := &c.insts[j]
		if !rw.preCallable(i, j, indirect) {
			continue
		}
		if fr, ok := fdeOf(fdes, call.Addr); ok && fr.lsda {
			continue // a landing pad may be anywhere in such a function
		}
		call.Flags |= place.InstUntouchable
		rw.preCall[i] = j
		sites[k] = i
		rw.st.PreCalls++
	}
	return sites
}

// preCallable reports whether indirect call j can be probed from
// instruction i = j-1: i is a plain instruction that can run from a
// trampoline and falls into j, and nothing else leads to j (no direct
// branch, function start or possible indirect target).
func (rw *rewriter) preCallable(i, j int, indirect map[uint64]bool) bool {
	c := rw.c
	in, call := &c.insts[i], &c.insts[j]
	if c.kinds[i] != kOther || in.Addr+uint64(in.Len()) != call.Addr {
		return false
	}
	if in.Flags&(place.InstUntouchable|place.InstPadding) != 0 || in.Flags&place.InstRelocatable == 0 {
		return false
	}
	if call.Flags&(place.InstTarget|place.InstUntouchable) != 0 || c.starts[call.Addr] || indirect[call.Addr] {
		return false
	}
	if rw.early[i] || rw.early[j] || rw.fini.reserved(i) || rw.fini.reserved(j) || isEndbr(in.Bytes) {
		return false
	}
	return true
}

// siteTramp emits (or sizes) the trampoline of site i with tool t.
func (rw *rewriter) siteTramp(a *asm, t Tool, i int, probes []uint64, entry uint64) []siteProbe {
	c := rw.c
	if j, ok := rw.preCall[i]; ok {
		return a.preCallTramp(&c.insts[i], c.kinds[i], &c.insts[j], probes, entry, rw.pic)
	}
	return a.siteTramp(t, &c.insts[i], c.kinds[i], c.targets[i], probes, entry, rw.pic)
}

// unPreCall gives up pre-call site i, which the planner could not patch:
// its call j becomes an ordinary site (untouchable no more: nothing
// above it wrote its bytes, and nothing below it has been planned yet).
// False if the call cannot have a trampoline either.
func (rw *rewriter) unPreCall(i, j int) bool {
	c := rw.c
	delete(rw.preCall, i)
	rw.st.PreCalls--
	rw.isSite[i] = false
	c.insts[j].Flags &^= place.InstUntouchable
	a := &asm{sizing: true}
	sp := rw.siteTramp(a, rw.opts.Tool, j, nil, 0)
	if a.err != nil {
		return false
	}
	rw.siteArms[j] = nil
	for _, pr := range sp {
		if pr.arm >= 0 {
			rw.siteArms[j] = append(rw.siteArms[j], pr.arm)
		}
	}
	rw.isSite[j] = true
	rw.siteSize[j] = len(a.b)
	return true
}
