package rewrite

import (
	"fmt"
	"slices"

	"github.com/stint-project/stint/internal/blocks"
	"github.com/stint-project/stint/rewrite/facts"
	"github.com/stint-project/stint/rewrite/place"
	"github.com/stint-project/stint/rewrite/policy"
	"github.com/stint-project/stint/runtime"
)

// patchSet is what placement changed in the original code, as the
// runtime sees it: one patch per modified instruction.
type patchSet struct {
	rec     *policy.PatchRecs // by instruction index
	order   []int             // the modified instructions in address order
	idx     []int32           // by instruction index: its patch index, -1 = none (a dense table: looked up per site and per stub)
	evicted []bool            // by instruction index: moved for another site's tactic
	pairs   []runtime.Read    // (reader, read) patch pairs the runtime must order
}

// collectPatches builds the patches from the planner's writes (bytes
// written with their own value are no change) and lets the plan decide
// which of them the off-switch may undo and redo.
func collectPatches(c *facts.Code, p *place.Planner, plan *policy.Plan, patched []bool) (*patchSet, error) {
	ps := &patchSet{rec: blocks.New[policy.PatchRec](len(c.Insts)), idx: make([]int32, len(c.Insts)), evicted: make([]bool, len(c.Insts))}
	for i := range ps.idx {
		ps.idx[i] = -1
	}
	for _, w := range p.Writes {
		for k, b := range w.Bytes {
			a := w.Addr + uint64(k)
			i := c.Index(a)
			if i < 0 {
				return nil, fmt.Errorf("planner wrote outside the decoded code at %#x", a)
			}
			in := &c.Insts[i]
			if in.Bytes()[a-in.Addr] == b {
				continue
			}
			pr := ps.rec.Get(i)
			if pr == nil {
				pr = ps.rec.Add(i)
				*pr = policy.PatchRec{Inst: i, Lo: a, Hi: a + 1}
				ps.order = append(ps.order, i)
			}
			pr.Lo = min(pr.Lo, a)
			pr.Hi = max(pr.Hi, a+1)
		}
	}
	slices.Sort(ps.order)
	for _, i := range p.Evicted {
		ps.evicted[i] = true
	}
	plan.KeepPeeks(p, ps.rec)
	read := make([]bool, len(c.Insts))
	for _, r := range p.Reads {
		read[r[1]] = true
	}
	for k, i := range ps.order {
		ps.idx[i] = int32(k)
		pr := ps.rec.Get(i)
		if pr.Hi-pr.Lo > 16 {
			return nil, fmt.Errorf("patch of %#x modifies %d bytes", c.Insts[i].Addr, pr.Hi-pr.Lo)
		}
		if patched[i] {
			pr.NProbes = plan.NProbes(i)
		}
		// Padding writes (neither site nor evicted) are never executed
		// and need no restoring.
		pr.Restorable = !read[i] && (patched[i] || ps.evicted[i])
	}
	ps.pairs = plan.Switchable(p, ps.order, ps.rec, patched, ps.evicted, read)
	plan.Watch(ps.rec)
	return ps, nil
}

// patchIndex returns instruction i's patch index, or runtime.NoPatch.
func (ps *patchSet) patchIndex(i int) uint32 {
	if k := ps.idx[i]; k >= 0 {
		return uint32(k)
	}
	return runtime.NoPatch
}

// switchable reports whether instruction i's patch is switchable.
func (ps *patchSet) switchable(i int) bool {
	pr := ps.rec.Get(i)
	return pr != nil && pr.Switchable
}

// numberProbes numbers the probes of the patched sites, in address
// order, and returns how many there are.
func numberProbes(c *facts.Code, tt *trampTable, plan *policy.Plan, patched, evicted []bool) (int, error) {
	n := 0
	for i, site := range tt.isSite {
		if !site || !(patched[i] || evicted[i]) {
			continue
		}
		t := tt.tramp(i)
		if t == nil {
			return 0, fmt.Errorf("site %#x patched without a trampoline", c.Insts[i].Addr)
		}
		t.probe0 = int32(n)
		n += plan.NSlots(i)
	}
	return n, nil
}

// runtimePatches returns the patch table; seen counts, per patch index,
// its probes and how many of them are open-ended ones of a site the
// --skip-covered log saw, which makes a switchable patch cold
// (STINT_PATCH_COLD: the runtime starts it off).
func (ps *patchSet) runtimePatches(c *facts.Code, seen [][2]int) (out []runtime.Patch, cold int) {
	out = make([]runtime.Patch, len(ps.order))
	for k, i := range ps.order {
		pr := ps.rec.Get(i)
		rp := &out[k]
		rp.Addr = pr.Lo
		rp.Len = byte(pr.Hi - pr.Lo)
		if pr.Restorable {
			rp.Flags = runtime.PatchRestorable
		}
		if pr.Lo == c.Insts[i].Addr {
			rp.Flags |= runtime.PatchAtStart
		}
		if pr.Switchable {
			rp.Flags |= runtime.PatchSwitch
		}
		if pr.Sync {
			rp.Flags |= runtime.PatchSync
		}
		if pr.Readee {
			rp.Flags |= runtime.PatchRead
		}
		if pr.Reader {
			rp.Flags |= runtime.PatchReader
		}
		if n := seen[k]; pr.Switchable && !pr.Sync && !pr.Readee && n[0] > 0 && n[1] == n[0] {
			rp.Flags |= runtime.PatchCold
			cold++
		}
		rp.NProbes = uint16(pr.NProbes)
		rp.Remaining = uint32(pr.NProbes)
		in := &c.Insts[i]
		copy(rp.Orig[:], in.Bytes()[pr.Lo-in.Addr:pr.Hi-in.Addr])
	}
	return out, cold
}
