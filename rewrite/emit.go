package rewrite

import (
	"errors"
	"fmt"
	"slices"

	"github.com/stint-project/stint/rewrite/elfin"
	"github.com/stint-project/stint/rewrite/elfout"
	"github.com/stint-project/stint/rewrite/facts"
	"github.com/stint-project/stint/rewrite/policy"
	"github.com/stint-project/stint/rewrite/tramp"
	"github.com/stint-project/stint/runtime"
)

// emitter encodes the trampolines and the probe records once the layout
// has fixed every address.
type emitter struct {
	fx      *facts.Facts
	plan    *policy.Plan
	tt      *trampTable
	ps      *patchSet
	entry   uint64        // stint_probe_entry's link vaddr
	im      *elfout.Image // the output (elfout.Prepare): trampolines and probe records go there
	retWord []uint32      // by instruction: stint_probe.rets of its direct probes (0: none)
	nprobe  int           // probe records
	logged  []uint32      // direct probes whose outcome the --skip-covered log has
	seen    [][2]int      // per patch index: probes, and open-ended ones the log saw
	open    [][2]uint32   // (probe, patch) of each open-ended probe the log saw (coldList)
}

// coldList returns, in order, the open-ended probes whose patch is cold
// (runtime.PatchCold): the runtime lists them off at load, as a walk
// over every probe record would.
func (e *emitter) coldList(patches []runtime.Patch) []uint32 {
	var out []uint32
	for _, o := range e.open {
		if patches[o[1]].Flags&runtime.PatchCold != 0 {
			out = append(out, o[0])
		}
	}
	slices.Sort(out)
	return out
}

// releaseEvery trampolines, the emitter lets the output's written pages
// go (elfout.Image.Release): a file-backed output then stays out of
// memory but for the last few megabytes written (cc1plus: 1.3 M
// trampolines, about 120 bytes and a 64-byte probe record each).
const releaseEvery = 1 << 16

// emit encodes every allocated trampoline: a patched site's probe
// trampoline (filling its probe records) or an evicted instruction's
// relocated copy, each in its place in the output (elfout.Image.RX,
// at its size: an assembler appends there). Trampolines of the planner's
// failed attempts stay int3.
func (e *emitter) emit() error {
	c := e.fx.Code
	tails := e.tt.tails(true)
	for k := range e.tt.at.Len() {
		if k%releaseEvery == releaseEvery-1 {
			e.im.Release()
		}
		t := e.tt.at.Nth(k)
		i := int(t.inst)
		in := &c.Insts[i]
		a := &tramp.Asm{B: e.im.RX(t.addr, int(t.size)), Base: t.addr, Gate: e.im.Layout.GateAt, Inline: e.plan.Inline(), Paths: e.plan.Paths(), Calls: e.plan.Calls(), Static: !e.fx.Module.FS0IsThreadPointer(),
			Countdown: e.plan.Countdown(), TextLo: e.fx.Module.TextLo, TextHi: e.fx.Module.TextHi, Module: e.im.Layout.RWVaddr,
			FlagsDead: e.tt.flagsDead}
		if e.tt.stripe {
			a.Stripes = &tramp.Stripes{ProbesAt: e.im.Layout.ProbesAt, NProbes: e.nprobe, CDBaseAt: e.im.Layout.RWVaddr + runtime.ModOffCDBase}
		}
		if e.ps.switchable(i) {
			a.Gate = e.im.Layout.GateAt + runtime.GateWord1
		}
		a.Cold = a.ColdAt(e.tt.coldBase + t.cold)
		a.Cold.B = e.im.RX(a.Cold.Base, e.tt.coldSize(i))
		a.Counts = e.tt.countsAt(i, e.im.Layout.CountsAt, e.im.Layout.ProbesAt, true)
		a.Tail = tails
		if t.addr+uint64(t.size) > e.tt.coldBase {
			return fmt.Errorf("trampoline for %#x: allocated after the cold region was placed", in.Addr)
		}
		switch {
		case t.site && t.probe0 >= 0:
			if err := e.site(a, i, t); err != nil {
				return err
			}
			if a.Counts != nil && a.Counts.Run != nil {
				for len(a.B) < int(t.size) {
					a.Emit(0xcc) // a run stopped before a block with no counter
				}
			}
		case !e.ps.evicted[i]:
			continue // a failed attempt of the planner: leave int3
		default:
			a.Relocate(in, c.Kinds[i], c.Targets[i], e.fx.Module.PIC)
			if t.site && len(a.B) <= int(t.size) {
				// sized as a site that ended up with no probes (a jcc
				// its destination probes took over, an edge site that
				// failed), then evicted
				for len(a.B) < int(t.size) {
					a.Emit(0xcc)
				}
			}
		}
		if a.Err != nil {
			return fmt.Errorf("trampoline for %#x: %w", in.Addr, a.Err)
		}
		if len(a.B) != int(t.size) {
			return fmt.Errorf("trampoline for %#x: %d bytes, sized %d", in.Addr, len(a.B), t.size)
		}
		if t.site && t.probe0 >= 0 && len(a.Cold.B) != e.tt.coldSize(i) {
			return fmt.Errorf("trampoline for %#x: %d bytes of cold code, sized %d", in.Addr, len(a.Cold.B), e.tt.coldSize(i))
		}
	}
	return nil
}

// site emits site i's trampoline t and fills its probe records.
//
// The trampoline has a probe slot per outcome; an outcome with no probe
// here (Plan.Deleg) gets another probe's address in its dead thunk and an
// arm that goes straight on. The site's probes are numbered from
// t.probe0, in slot order. A watched site (Plan.Watched) keeps the slot's
// probe, flagged STINT_PF_DELEG.
func (e *emitter) site(a *tramp.Asm, i int, t *trampoline) error {
	c, plan := e.fx.Code, e.plan
	tool, src := plan.Tool(), c.Insts[i].Addr
	edge, isEdge := plan.EdgeOf(i)
	if isEdge {
		tool, src = runtime.ToolBlock, c.Insts[edge.Jcc].Addr
	}
	if j, pre := plan.PreSiteOf(i); pre {
		src = c.Insts[j].Addr
	}
	n := plan.SiteSlots(tool, i)
	deleg := plan.Deleg(i)
	skip := deleg
	if plan.Watched(i) {
		skip = [2]bool{}
	}
	probeAt := func(k int) uint64 { return e.im.Layout.ProbesAt + uint64(int(t.probe0)+k)*runtime.ProbeStructSize }
	pv := make([]uint64, n)
	kept := 0
	for k := range pv {
		pv[k] = probeAt(0) // a skipped slot's dead thunk
		if k >= 2 || !skip[k] {
			pv[k] = probeAt(kept)
			kept++
		}
	}
	if kept == 0 || kept != plan.NSlots(i) {
		return fmt.Errorf("site %#x: %d probes, want %d", c.Insts[i].Addr, kept, plan.NSlots(i))
	}
	sp := e.tt.emitSite(a, tool, i, pv, e.entry)
	if a.Err == nil && len(sp) != n {
		a.Err = errors.New("probe count mismatch")
	}
	var probed []tramp.Probe
	for k, s := range sp {
		if k < 2 && skip[k] {
			a.PatchRel(s.Arm, s.ArmTo)
			continue
		}
		if isEdge {
			s.Kind = runtime.KJccTaken + runtime.Kind(edge.Outcome)
		}
		if k < 2 && deleg[k] {
			s.Flags |= runtime.PFDeleg
		}
		probed = append(probed, s)
	}
	for k, s := range probed {
		at := src
		if s.Kind == runtime.KEntry || s.Kind == runtime.KResume {
			at = c.Insts[i].Addr // its own (an entry or resume probe's at a pre-site)
		}
		e.probe(a, i, t, int(t.probe0)+k, at, s)
	}
	return nil
}

// probe writes probe record idx, of site i's trampoline t, for probe s.
func (e *emitter) probe(a *tramp.Asm, i int, t *trampoline, idx int, src uint64, s tramp.Probe) {
	pr := &runtime.Probe{Src: src}
	if s.Flags&runtime.PFSlot != 0 && !e.fx.StableSlot(s.Dst) {
		s.Flags &^= runtime.PFSlot
	}
	var lazy uint32 // stint_probe.rets of a lazily bound final slot's probe
	if s.Flags&runtime.PFSlot != 0 {
		if e.fx.FinalSlot(s.Dst) {
			s.Flags |= runtime.PFFinal
		} else if v, ok := e.fx.LazySlot(s.Dst); ok && !e.plan.Paths() && v < 1<<32-1 {
			// (a compact trace's probes use rets for the call's length)
			s.Flags |= runtime.PFFinal
			lazy = uint32(v + 1)
		}
	}
	if s.Flags&(runtime.PFDirect|runtime.PFSlot|runtime.PFPredict) != 0 {
		pr.Dst = s.Dst
	}
	if s.Arm >= 0 {
		pr.Arm = t.addr + uint64(s.Arm)
		pr.ArmTo = s.ArmTo
		if e.ps.switchable(i) && s.Flags&runtime.PFDirect != 0 {
			// the thunk, where the off-switch sends the arm back (the
			// runtime does not read every arm at load to learn it)
			rel := int32(elfin.LE.Uint32(a.B[s.Arm:]))
			pr.Cache = t.addr + uint64(s.Arm) + 4 + uint64(int64(rel))
		}
	}
	pr.ModuleBack = uint32(e.im.Layout.ProbesAt + uint64(idx)*runtime.ProbeStructSize - e.im.Layout.RWVaddr)
	pr.Patch = e.ps.patchIndex(i)
	if pr.Patch != runtime.NoPatch {
		n := e.seen[pr.Patch]
		n[0]++
		if e.plan.SeenOpen(src, s.Kind) {
			n[1]++
			e.open = append(e.open, [2]uint32{uint32(idx), pr.Patch})
		}
		e.seen[pr.Patch] = n
	}
	pr.Kind = uint8(s.Kind)
	pr.Flags = s.Flags
	if s.Kind == runtime.KCall && e.plan.Calls() && e.tt.noPush(e.fx.Code.Index(src)) {
		pr.Flags |= runtime.PFNoPush // as the branch map says (pathMap)
	}
	if s.Flags&runtime.PFDeleg != 0 {
		pr.State = runtime.ProbeWatched
	} else if s.Flags&runtime.PFDirect != 0 && e.plan.Logged(src, s.Dst, s.Kind) {
		e.logged = append(e.logged, uint32(idx))
	}
	if w := e.retWord[i]; w != 0 && s.Flags&runtime.PFDirect != 0 {
		pr.Rets = w
	}
	if lazy != 0 {
		pr.Rets = lazy
	}
	if e.plan.Paths() && (s.Kind == runtime.KCall || s.Kind == runtime.KIndCall) {
		// the runtime pushes src + the call's length (STINT_MF_PATHS)
		c := e.fx.Code
		pr.Rets = uint32(c.Insts[c.Index(src)].Len()) << 28
	}
	pr.Put(e.im.Probe(idx))
}
