package policy

import (
	"cmp"
	"slices"

	"github.com/stint-project/stint/internal/blocks"
	"github.com/stint-project/stint/rewrite/facts"
	"github.com/stint-project/stint/rewrite/place"
	"github.com/stint-project/stint/runtime"
)

// PatchRecs are the patch records of a module's modified instructions,
// by instruction index (Get: nil = not modified).
type PatchRecs = blocks.Table[PatchRec]

// PatchRec is the record of one modified instruction's patch.
type PatchRec struct {
	Inst       int    // the instruction it modifies
	Lo, Hi     uint64 // modified byte range [Lo, Hi)
	NProbes    int
	Restorable bool
	Switchable bool
	Sync       bool // switchable with the jmp-to-self + membarrier sequence
	Readee     bool // switchable, and other patches' puns read it (STINT_PATCH_READ)
	Reader     bool // its pun reads a switchable readee (STINT_PATCH_READER)
}

// KeepPeeks adds to p.Reads the peeks (Planner.Peeks) that matter: a pun
// that reads bytes its readee's patch wrote with their own values reads
// the same whichever form that patch has, but not while the bytes are
// being written, if a sequence writes them (the runtime's jmp-to-self,
// for a patch that straddles a word). A patch that fits one aligned word
// is written by one store, so a pun that only peeks at it does not
// depend on it: neither is a reader nor a readee for it. On libsqlite3
// those are rets whose pun reads the opcode of a following jmp rel32
// whose patch changed only its rel32.
func (pc *Plan) KeepPeeks(p *place.Planner, modified *PatchRecs) {
	strong := make(map[[2]int]bool, len(p.Reads))
	for _, r := range p.Reads {
		strong[r] = true
	}
	for _, r := range p.Peeks {
		switch pr := modified.Get(r[1]); {
		case strong[r]:
		case pr != nil && !OneWord(pr.Lo, pr.Hi-pr.Lo):
			p.Reads = append(p.Reads, r)
		default:
			pc.Peeks++
		}
	}
}

// maxReadDepth bounds chains of switchable readees (a readee whose own
// pun reads another): the runtime switches one link of a chain per pass,
// with a membarrier between passes.
const maxReadDepth = 4

// Switchable decides which patches the off-switch may undo and redo while
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
//
// patchOrder lists the modified instructions in ascending order: a
// pair's patch indices are their places in it.
func (pc *Plan) Switchable(p *place.Planner, patchOrder []int, modified *PatchRecs, patched, evicted, read []bool) []runtime.Read {
	c := pc.fx.Code
	allowed := !pc.opts.Every && !pc.opts.Context
	// fits extends a patch to its instruction's first byte when that lets
	// threads be parked there, and reports whether the runtime can write it.
	readsEvicted := make([]bool, modified.Keys())
	for _, r := range p.Reads {
		if r[0] != r[1] && evicted[r[1]] {
			readsEvicted[r[0]] = true
		}
	}
	fits := func(i int, readee bool) bool {
		pr, in := modified.Get(i), &c.Insts[i]
		if !OneWord(pr.Lo, pr.Hi-pr.Lo) && pr.Lo > in.Addr && pr.Hi-in.Addr <= 16 {
			// The patch left the instruction's first bytes as they were
			// (a jmp rel32 whose opcode stays): take them in, so that the
			// patch starts where threads can be parked. Writing a byte's
			// own value back changes nothing.
			pr.Lo = in.Addr
		}
		if OneWord(pr.Lo, pr.Hi-pr.Lo) {
			return true
		}
		// No sync site may read an instruction evicted for it: the
		// evicted bytes are not switched with it, and its original
		// instruction falls through into them. A self-mode-only one (not
		// parkable, or without --switch-sync) must be no readee either:
		// readees are switched with threads parked.
		parkable := pr.Lo == in.Addr && pr.Hi-pr.Lo >= 3 && pr.Lo&15 != 15
		edge := pc.isEdge(i)
		self := !readee && pr.NProbes > 0 && (edge || directProbes(pc.opts.Tool, c.Kinds[i]))
		pr.Sync = pr.Hi-pr.Lo <= 16 && !readsEvicted[i] && (pc.opts.SwitchSync && parkable || self)
		return pr.Sync
	}
	readers := map[int][]int{} // read instruction -> reader instructions
	for _, r := range p.Reads {
		if r[0] != r[1] && modified.Get(r[1]) != nil {
			readers[r[1]] = append(readers[r[1]], r[0])
		}
	}
	for _, i := range patchOrder {
		pr := modified.Get(i)
		if pr.Restorable && pr.NProbes > 0 && allowed {
			pr.Switchable = fits(i, false)
		}
	}
	// Readees, in rounds: one is decided once all its readers are (a
	// reader may itself be a readee), from what earlier rounds decided.
	pending, npending := make([]bool, len(c.Insts)), 0 // by instruction
	for _, i := range patchOrder {
		if read[i] && (patched[i] || evicted[i]) && allowed {
			pending[i] = true
			npending++
		}
	}
	for round := 0; round < maxReadDepth && npending > 0; round++ {
		var now, out []int
		for _, i := range patchOrder {
			if !pending[i] {
				continue
			}
			ok, ready := true, true
			for _, r := range readers[i] {
				rp := modified.Get(r)
				switch {
				case rp == nil || p.Tactics[r] == place.TacticT3:
					ok = false
				case pending[r]:
					ready = false
				case !rp.Switchable || rp.Sync:
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
			pending[i] = false
		}
		npending -= len(out) + len(now)
		for _, i := range now {
			pending[i] = false
			if fits(i, true) {
				modified.Get(i).Switchable = true
				modified.Get(i).Readee = true
			}
		}
		if len(now) == 0 && len(out) == 0 {
			break // a cycle: what is left stays patched
		}
	}
	patchIdx := func(i int) int { k, _ := slices.BinarySearch(patchOrder, i); return k } // patchOrder is sorted
	var pairs []runtime.Read
	for _, i := range patchOrder {
		if !modified.Get(i).Readee {
			continue
		}
		for _, r := range readers[i] {
			modified.Get(r).Reader = true
			pairs = append(pairs, runtime.Read{Reader: uint32(patchIdx(r)), Read: uint32(patchIdx(i))})
		}
	}
	slices.SortFunc(pairs, func(a, b runtime.Read) int {
		return cmp.Or(cmp.Compare(a.Reader, b.Reader), cmp.Compare(a.Read, b.Read))
	})
	return slices.Compact(pairs)
}

// directProbes reports whether every probe of a site of kind k has a
// static destination and a calling arm (STINT_PF_DIRECT).
func directProbes(t runtime.Tool, k facts.Kind) bool {
	switch k {
	case facts.Jcc, facts.Jcxz, facts.Jmp, facts.Call:
		return true
	}
	return t == runtime.ToolBlock
}

// NSlots returns how many probe records instruction i's site has:
// NProbes, and a watched jcc's STINT_PF_DELEG probe.
func (pc *Plan) NSlots(i int) int {
	if pc.Watched(i) {
		return pc.NProbes(i) + 1
	}
	return pc.NProbes(i)
}

// Watch picks the watched jccs: a switchable jcc patch
// with one outcome probed elsewhere (Deleg) and one here. That
// outcome's arm would go straight on, and a site whose only probe never
// fires would never reach the runtime, so the off-switch would never
// list it: it would stay patched all run, its detour on every run of the
// delegated side (on sqlite3, the fall-through of a jcc whose taken
// side never comes, as hot as the loop around it). Its probe for the
// delegated outcome never records (the edge probe or the log has it);
// it starts watched (the runtime's PROBE_WATCHED), as an outcome the log
// holds does, so its first runs list the site and, if the program keeps
// running it, leave it to the windows.
func (pc *Plan) Watch(modified *PatchRecs) {
	if pc.edges == nil {
		return
	}
	for k := range pc.edges.Len() {
		r := pc.edges.Nth(k)
		r.watch = false
		if !r.delegated || r.deleg[0] == r.deleg[1] {
			continue
		}
		if pr := modified.Get(int(r.inst)); pr != nil && pr.Switchable {
			r.watch = true
			pc.Delegated++
		}
	}
}

// NProbes returns how many probes instruction i's site has that can
// record: an edge site one, a jcc two less those its edge sites or the
// --skip-covered log took (Deleg), any other site nprobes. The
// patch's remaining count starts there.
func (pc *Plan) NProbes(i int) int {
	if pc.isEdge(i) {
		return 1
	}
	n := pc.SiteSlots(pc.opts.Tool, i)
	for _, x := range pc.Deleg(i) {
		if x {
			n--
		}
	}
	return n
}

// SiteSlots returns how many probe slots site i's trampoline has with
// tool t: its branch's (a pre-site's branch's), and an entry or resume
// probe's before them at a pre-site that is one.
func (pc *Plan) SiteSlots(t runtime.Tool, i int) int {
	if _, ok := pc.entries[i]; ok {
		return 1 // whatever its first instruction
	}
	k, extra := pc.fx.Code.Kinds[i], 0
	if j, ok := pc.preBranch[i]; ok {
		k = pc.fx.Code.Kinds[j]
		if _, pk := pc.paths[i]; pk {
			extra = 1
		}
	}
	return SiteProbes(t, k) + extra
}

// OneWord reports whether n bytes at addr lie in one aligned 8- or 16-byte
// word, so that one atomic store (the runtime's stint_restore_atomic) can
// write them all.
func OneWord(addr, n uint64) bool {
	return n > 0 && (addr+n <= addr&^7+8 || addr+n <= addr&^15+16)
}

// nprobes returns how many probes a site of facts.Kind k has.
func SiteProbes(t runtime.Tool, k facts.Kind) int {
	if t != runtime.ToolBlock && (k == facts.Jcc || k == facts.Jcxz) {
		return 2
	}
	return 1
}
