package rewrite

import (
	"cmp"
	"slices"

	"github.com/stint-project/stint/rewrite/place"
)

// maxReadDepth bounds chains of switchable readees (a readee whose own
// pun reads another): the runtime switches one link of a chain per pass,
// with a membarrier between passes.
const maxReadDepth = 4

// planSwitch decides which patches the off-switch may undo and redo while
// threads run them (stint_abi.h, STINT_PATCH_SWITCH), and returns the
// (reader, read) pairs, as patch indices, that the runtime must order
// (struct stint_read).
//
// A patch qualifies when one atomic store can write it (its bytes in one
// aligned 8- or 16-byte word: a load base is page aligned, so the
// alignment holds at run time too) or, as a STINT_PATCH_SYNC site, when
// the program's only thread can write it (self mode: any patch, since a
// patch never spans more than its own instruction) and, with more
// threads, hold it on (its calling arms sent straight, sw_mute: every
// probe must be direct) or, with --switch-sync, have the jmp-to-self +
// membarrier sequence write it (the runtime's "parkable": it starts at
// its instruction's first byte, where threads wait, is at least 3 bytes
// long, and its first two bytes fit one aligned 16-byte word; such a
// site may have indirect probes). Never in --every or context mode,
// whose probes must always fire.
//
// A patch that no other patch reads (restorable) qualifies on that alone
// if it has probes. A patch whose bytes other patches' puns read
// (STINT_PATCH_READ) qualifies too, probes or not (an evicted
// instruction), when each of its readers qualifies, is not itself
// switched with threads parked, and reads it through a pun, not by
// landing in it: a T3 site's short jump lands on a pad inside its
// neighbour, where a thread may rest for as long as it is descheduled, so
// the neighbour must never change. The runtime switches readers off
// before what they read, and what they read on before them.
func (rw *rewriter) planSwitch(p *place.Planner, patchOrder []int, modified []*patchRec, patched, evicted, read []bool) []pairIdx {
	c := rw.c
	allowed := !rw.opts.Every && !rw.opts.Context
	// fits extends a patch to its instruction's first byte when that lets
	// threads be parked there, and reports whether the runtime can write it.
	readsEvicted := make([]bool, len(modified))
	for _, r := range p.Reads {
		if r[0] != r[1] && evicted[r[1]] {
			readsEvicted[r[0]] = true
		}
	}
	fits := func(i int, readee bool) bool {
		pr, in := modified[i], &c.insts[i]
		if !oneWord(pr.lo, pr.hi-pr.lo) && pr.lo > in.Addr && pr.hi-in.Addr <= 16 {
			// The patch left the instruction's first bytes as they were
			// (a jmp rel32 whose opcode stays): take them in, so that the
			// patch starts where threads can be parked. Writing a byte's
			// own value back changes nothing.
			pr.lo = in.Addr
		}
		if oneWord(pr.lo, pr.hi-pr.lo) {
			return true
		}
		// No sync site may read an instruction evicted for it: the
		// evicted bytes are not switched with it, and its original
		// instruction falls through into them. A self-mode-only one (not
		// parkable, or without --switch-sync) must be no readee either:
		// readees are switched with threads parked.
		parkable := pr.lo == in.Addr && pr.hi-pr.lo >= 3 && pr.lo&15 != 15
		_, edge := rw.edgeOf[i]
		self := !readee && pr.nprobes > 0 && (edge || directProbes(rw.opts.Tool, c.kinds[i]))
		pr.sync = pr.hi-pr.lo <= 16 && !readsEvicted[i] && (rw.opts.SwitchSync && parkable || self)
		return pr.sync
	}
	readers := map[int][]int{} // read instruction -> reader instructions
	for _, r := range p.Reads {
		if r[0] != r[1] && modified[r[1]] != nil {
			readers[r[1]] = append(readers[r[1]], r[0])
		}
	}
	for _, i := range patchOrder {
		pr := modified[i]
		if pr.restorable && pr.nprobes > 0 && allowed {
			pr.switchable = fits(i, false)
		}
	}
	// Readees, in rounds: one is decided once all its readers are (a
	// reader may itself be a readee), from what earlier rounds decided.
	pending := map[int]bool{}
	for _, i := range patchOrder {
		if read[i] && (patched[i] || evicted[i]) && allowed {
			pending[i] = true
		}
	}
	for round := 0; round < maxReadDepth && len(pending) > 0; round++ {
		var now, out []int
		for _, i := range patchOrder {
			if !pending[i] {
				continue
			}
			ok, ready := true, true
			for _, r := range readers[i] {
				rp := modified[r]
				switch {
				case rp == nil || p.Tactics[r] == place.TacticT3:
					ok = false
				case pending[r]:
					ready = false
				case !rp.switchable || rp.sync:
					ok = false
				}
			}
			switch {
			case !ok:
				out = append(out, i)
			case ready:
				now = append(now, i)
			}
		}
		for _, i := range out {
			delete(pending, i)
		}
		for _, i := range now {
			delete(pending, i)
			if fits(i, true) {
				modified[i].switchable = true
				modified[i].readee = true
			}
		}
		if len(now) == 0 && len(out) == 0 {
			break // a cycle: what is left stays patched
		}
	}
	patchIdx := make(map[int]int, len(patchOrder))
	for k, i := range patchOrder {
		patchIdx[i] = k
	}
	var pairs []pairIdx
	for _, i := range patchOrder {
		if !modified[i].readee {
			continue
		}
		for _, r := range readers[i] {
			modified[r].reader = true
			pairs = append(pairs, pairIdx{reader: uint32(patchIdx[r]), read: uint32(patchIdx[i])})
		}
	}
	slices.SortFunc(pairs, func(a, b pairIdx) int { return cmp.Or(cmp.Compare(a.reader, b.reader), cmp.Compare(a.read, b.read)) })
	return slices.Compact(pairs)
}

// directProbes reports whether every probe of a site of kind k has a
// static destination and a calling arm (STINT_PF_DIRECT).
func directProbes(t Tool, k kind) bool {
	switch k {
	case kJcc, kJcxz, kJmp, kCall:
		return true
	}
	return t == ToolBlock
}

// pairIdx is a struct stint_read: patch reader's pun reads patch read.
type pairIdx struct{ reader, read uint32 }
