package tramp

import (
	"fmt"

	"github.com/stint-project/stint/rewrite/facts"
	"github.com/stint-project/stint/rewrite/place"
	"github.com/stint-project/stint/runtime"
)

// Probe describes one probe of a site, before layout.
type Probe struct {
	Kind  runtime.Kind
	Flags uint8  // STINT_PF_*
	Dst   uint64 // link vaddr if direct
	Arm   int    // offset of the arm's rel32 in the trampoline, -1 = none
	ArmTo uint64 // link vaddr
}

// firstProbe returns a site's first probe, 0 while sizing (no probes
// yet).
func firstProbe(probes []uint64) uint64 {
	if len(probes) == 0 {
		return 0
	}
	return probes[0]
}

// siteTramp emits the probe trampoline of a site. probes holds the link
// vaddrs of the site's probes (placeholders when sizing); it returns the
// probe descriptions.
func (a *Asm) Site(t runtime.Tool, in *place.Inst, k facts.Kind, tgt uint64, probes []uint64, entry uint64, pic bool) []Probe {
	next := in.Addr + uint64(in.Len())
	p := func(i int) uint64 {
		if i < len(probes) {
			return probes[i]
		}
		return 0
	}
	if t == runtime.ToolBlock && a.Counts != nil {
		a.count(a.Counts.counter(p(0)), a.Counts.FlagsDead, a.Counts.Atomic)
		if a.Counts.Run != nil {
			a.countRun(a.Counts.Run, a.Counts.Chain, pic)
		} else {
			a.Relocate(in, k, tgt, pic)
		}
		return []Probe{{Kind: runtime.KBlock, Flags: runtime.PFDirect, Dst: in.Addr, Arm: -1}}
	}
	if t == runtime.ToolBlock {
		a.Emit(0xe9)
		arm := a.off()
		a.rel32(a.pc()+4, 0)
		a.thunk(p(0), entry, nil)
		body := a.pc()
		a.Relocate(in, k, tgt, pic)
		return []Probe{{Kind: runtime.KBlock, Flags: runtime.PFDirect, Dst: in.Addr, Arm: arm, ArmTo: body}}
	}
	switch k {
	case facts.Jcc, facts.Jcxz:
		return a.jccArms(in, k, tgt, p(0), p(1), entry)
	case facts.Jmp, facts.Call:
		a.Emit(0xe9)
		arm := a.off()
		if a.Inline && a.Calls && k == facts.Call {
			a.rel32(a.pc()+4, 0)
			if !a.callsProbe(in, k, p(0), entry, next) {
				return nil
			}
		} else if a.Inline && k == facts.Call {
			// the arm jumps over the inline push's exit stub
			a.u32(0)
			slow := &exit{stub: -1}
			a.stubAhead(slow)
			a.PatchRel(arm, a.pc())
			a.pathsPush(p(0), entry, in.Addr, next, slow)
		} else {
			a.rel32(a.pc()+4, 0)
			a.thunk(p(0), entry, nil)
		}
		body := a.pc()
		if k == facts.Jmp {
			a.Jmp(tgt)
			return []Probe{{Kind: runtime.KJmp, Flags: runtime.PFDirect, Dst: tgt, Arm: arm, ArmTo: tgt}}
		}
		a.pushRet(next, pic)
		a.jmpOn(tgt)
		return []Probe{{Kind: runtime.KCall, Flags: runtime.PFDirect, Dst: tgt, Arm: arm, ArmTo: body}}
	case facts.Ret:
		return a.retSite(in, p(0), entry)
	case facts.IndJmp, facts.IndCall:
		if a.Inline && a.Calls && k == facts.IndCall {
			if !a.callsProbe(in, k, p(0), entry, next) {
				return nil
			}
			a.Relocate(in, k, tgt, pic)
			return []Probe{{Kind: runtime.KIndCall, Arm: -1}}
		}
		branch := func(c *Asm) { c.Relocate(in, k, tgt, pic) }
		var sp Probe
		ok := false
		switch {
		case a.Inline && k == facts.IndJmp && a.Predict != 0:
			sp, ok = a.pathsPredicted(in, p(0), entry, branch)
		case a.Inline:
			sp, ok = a.pathsIndirect(in, k, p(0), entry, next, branch)
		default:
			sp, ok = a.indirectThunk(in, k, p(0), entry, func() { branch(a) })
			if k == facts.IndJmp && a.Predict != 0 {
				sp.Flags, sp.Dst = runtime.PFPredict, a.Predict // the runtime compares
			}
		}
		if !ok {
			return nil
		}
		return []Probe{sp}
	case facts.Syscall:
		a.thunk(p(0), entry, func() {
			a.Emit(0x48, 0x89, 0xc6) // mov %rax,%rsi
		})
		a.Relocate(in, k, tgt, pic)
		return []Probe{{Kind: runtime.KSyscall, Flags: runtime.PFValue, Arm: -1}}
	}
	a.setErr(fmt.Errorf("no trampoline for %v", k))
	return nil
}

// retSite emits ret in with its probe.
func (a *Asm) retSite(in *place.Inst, probe, entry uint64) []Probe {
	if a.Inline {
		if a.Calls {
			a.callsProbe(in, facts.Ret, probe, entry, 0)
		} else {
			a.pathsRet(probe, entry)
		}
		a.Emit(in.Bytes()...)
		a.flushNear()
		return []Probe{{Kind: runtime.KRet, Arm: -1}}
	}
	gateField := a.retCacheCheck(probe)
	hitField := a.off() - 1
	a.cacheRestore()
	a.callOnly(probe, entry, func() {
		a.Emit(0x48, 0x8b, 0xb4, 0x24, thunkFrame, 0, 0, 0) // mov 144(%rsp),%rsi
	})
	a.Emit(in.Bytes()...)
	a.patchRel8(hitField, a.off())
	a.patchRel8(gateField, a.off())
	a.patchExtraHits()
	a.cacheRestore()
	a.Emit(in.Bytes()...)
	return []Probe{{Kind: runtime.KRet, Arm: -1}}
}

// jccArms emits jcc in (kind k, target tgt) with an arm per outcome: the
// outcome's probe (probeT, probeNT), then a jump to its destination.
func (a *Asm) jccArms(in *place.Inst, k facts.Kind, tgt, probeT, probeNT, entry uint64) []Probe {
	next := in.Addr + uint64(in.Len())
	if a.Inline && k == facts.Jcc {
		return a.jccFallThrough(in, tgt, probeT, probeNT, entry)
	}
	var tArm, ntArm int
	// Placeholders for the thunk addresses; patched below.
	if k == facts.Jcc {
		a.Emit(0x0f, 0x80|jccCond(in.Bytes()))
		tArm = a.off()
		a.u32(0)
		a.Emit(0xe9)
		ntArm = a.off()
		a.u32(0)
	} else {
		ntArm, tArm = a.jcxzPlaceholder(in.Bytes())
	}
	thunkT := a.pc()
	a.arm(probeT, entry, true)
	a.Jmp(tgt)
	a.flushNear()
	thunkNT := a.pc()
	a.arm(probeNT, entry, false)
	a.Jmp(next)
	a.flushNear()
	a.PatchRel(tArm, thunkT)
	a.PatchRel(ntArm, thunkNT)
	return []Probe{
		{Kind: runtime.KJccTaken, Flags: runtime.PFDirect, Dst: tgt, Arm: tArm, ArmTo: tgt},
		{Kind: runtime.KJccNotTaken, Flags: runtime.PFDirect, Dst: next, Arm: ntArm, ArmTo: next},
	}
}

// jccFallThrough is jccArms for a compact trace's inline arms, whose
// probes never retire (--every): the not-taken arm follows the jcc, so
// that neither outcome takes a branch the original did not.
func (a *Asm) jccFallThrough(in *place.Inst, tgt, probeT, probeNT, entry uint64) []Probe {
	next := in.Addr + uint64(in.Len())
	a.Emit(0x0f, 0x80|jccCond(in.Bytes()))
	tArm := a.off()
	a.u32(0)
	a.armTo(probeNT, entry, false, next)
	a.jmpOn(next)
	a.flushNear()
	a.PatchRel(tArm, a.pc())
	a.armTo(probeT, entry, true, tgt)
	a.jmpOn(tgt)
	a.flushNear()
	return []Probe{
		{Kind: runtime.KJccTaken, Flags: runtime.PFDirect, Dst: tgt, Arm: tArm, ArmTo: tgt},
		{Kind: runtime.KJccNotTaken, Flags: runtime.PFDirect, Dst: next, Arm: -1},
	}
}

// PreBranch emits the trampoline of a compact trace's pre-site for a jcc
// or ret the planner could not patch in place (policy/marks.go): run,
// the plain instructions before branch j, relocated, then j with its
// probes. Nothing else reaches run's later instructions or j, whose
// bytes in place are dead.
func (a *Asm) PreBranch(run []place.Inst, kinds []facts.Kind, j *place.Inst, jk facts.Kind, tgt uint64, probes []uint64, entry uint64) []Probe {
	a.relocateRun(run, kinds)
	return a.branchAfter(j, jk, tgt, probes, entry)
}

// relocateRun emits the plain instructions run, relocated.
func (a *Asm) relocateRun(run []place.Inst, kinds []facts.Kind) {
	for q := range run {
		if kinds[q] != facts.Other {
			a.setErr(fmt.Errorf("%v at %#x is not a plain instruction", kinds[q], run[q].Addr))
			return
		}
		a.RelocateBody(&run[q])
	}
}

// branchAfter emits jcc or ret j with its probes, after a pre-site's
// instruction.
func (a *Asm) branchAfter(j *place.Inst, jk facts.Kind, tgt uint64, probes []uint64, entry uint64) []Probe {
	var pv [2]uint64
	copy(pv[:], probes)
	if jk == facts.Ret {
		return a.retSite(j, pv[0], entry)
	}
	return a.jccArms(j, jk, tgt, pv[0], pv[1], entry)
}

// PathsProbe emits the trampoline of a compact complete trace's entry,
// resume or mark probe (kind k; a mark's is a jcc outcome's, whose bit it
// appends) at instruction in: the probe (an entry's %rsi is the return
// address at the program's (%rsp)), then in relocated. None ever
// retires, so there is no arm.
func (a *Asm) PathsProbe(k runtime.Kind, in *place.Inst, fk facts.Kind, tgt uint64, probes []uint64, entry uint64, pic bool) []Probe {
	flags := a.pathsCall(k, firstProbe(probes), entry, in.Addr)
	a.Relocate(in, fk, tgt, pic)
	a.flushNear()
	return []Probe{{Kind: k, Flags: flags, Arm: -1}}
}

// PathsPreBranch emits the trampoline of an entry or resume probe's
// instruction that is also branch j's pre-site: the probe, run (that
// instruction and the ones up to j) relocated, then j with its probes
// (probes: the probe's, then j's).
func (a *Asm) PathsPreBranch(k runtime.Kind, run []place.Inst, kinds []facts.Kind, j *place.Inst, jk facts.Kind, tgt uint64, probes []uint64, entry uint64) []Probe {
	var probe uint64
	if len(probes) > 0 {
		probe, probes = probes[0], probes[1:]
	}
	flags := a.pathsCall(k, probe, entry, run[0].Addr)
	if a.nearPending() {
		// the probe's stubs go here, jumped over: the run and the
		// branch may be too long for a short jump past them
		a.Emit(0xeb, 0)
		over := a.off() - 1
		a.flushNear()
		a.patchRel8(over, a.off())
	}
	a.relocateRun(run, kinds)
	return append([]Probe{{Kind: k, Flags: flags, Arm: -1}}, a.branchAfter(j, jk, tgt, probes, entry)...)
}

// pathsCall emits probe's part of a compact trace's entry, resume or
// mark probe (kind k) at src and returns the probe's flags.
func (a *Asm) pathsCall(k runtime.Kind, probe, entry, src uint64) uint8 {
	switch {
	case k == runtime.KJccTaken || k == runtime.KJccNotTaken:
		a.arm(probe, entry, k == runtime.KJccTaken)
	case k == runtime.KEntry && a.Inline:
		a.pathsEntry(probe, entry)
		return runtime.PFValue
	case k == runtime.KEntry:
		a.thunk(probe, entry, a.loadRet)
		return runtime.PFValue
	case a.Inline:
		a.pathsResume(probe, entry, src)
	default:
		a.thunk(probe, entry, nil)
	}
	return 0
}

// indirectThunk emits the probe of indirect jmp or call in (facts.Kind k)
// with an inline cache check between loading %rsi and the call:
//
//	<thunk up to %rsi> ; push %rcx ; compare %rsi with cache ;
//	jrcxz hit ; pop %rcx ; <rest of thunk> ; exit
//	hit: pop %rcx ; pop %rsi ; pop %rdi ; lea 0x80(%rsp),%rsp ; exit
//
// exit emits what follows the probe on both paths and never falls
// through: the relocated original, or a jump back to it (preCallTramp).
func (a *Asm) indirectThunk(in *place.Inst, k facts.Kind, probe, entry uint64, exit func()) (Probe, bool) {
	op, _, err := facts.ParseRM(in)
	if err != nil {
		a.setErr(err)
		return Probe{}, false
	}
	a.Emit(0x48, 0x8d, 0x64, 0x24, 0x80)      // lea -0x80(%rsp),%rsp
	a.Emit(0x57, 0x56)                        // push %rdi; push %rsi
	a.encodeRM(op, true, 0x8b, 6, thunkFrame) // mov OP,%rsi (a register operand ignores the frame)
	a.Emit(0x51)                              // push %rcx
	gateField := a.gateCheck()                // closed: to the hit path
	a.cacheCompares(probe, sibBaseRSI)
	hitField := a.extraHits[len(a.extraHits)-1]
	a.extraHits = a.extraHits[:len(a.extraHits)-1]
	if skip := a.countdown(probe); skip >= 0 {
		a.extraHits = append(a.extraHits, skip) // skipped: the hit path, as a cache hit
	}
	a.Emit(0x59)             // pop %rcx
	a.Emit(0x48, 0x8d, 0x3d) // lea probe(%rip),%rdi
	a.rel32(probe, 0)
	a.Emit(0xe8) // call stint_probe_entry
	a.rel32(entry, 0)
	a.Emit(0x5e, 0x5f)                                     // pop %rsi; pop %rdi
	a.Emit(0x48, 0x8d, 0xa4, 0x24, 0x80, 0x00, 0x00, 0x00) // lea 0x80(%rsp),%rsp
	exit()
	a.patchRel8(hitField, a.off())
	a.patchRel8(gateField, a.off())
	a.patchExtraHits()
	a.Emit(0x59, 0x5e, 0x5f)                               // pop %rcx; pop %rsi; pop %rdi
	a.Emit(0x48, 0x8d, 0xa4, 0x24, 0x80, 0x00, 0x00, 0x00) // lea 0x80(%rsp),%rsp
	exit()
	sp := Probe{Kind: runtime.KIndJmp, Arm: -1}
	if k == facts.IndCall {
		sp.Kind = runtime.KIndCall
	}
	if op.RIPRel && op.Seg == 0 {
		sp.Flags, sp.Dst = runtime.PFSlot, uint64(int64(op.Next)+op.Disp)
	}
	return sp, true
}

// PreCall emits the trampoline of a pre-call site (policy, precall.go):
// the plain instructions of run (facts.Kinds ks), the first patched, run
// here, then the probe of the call that follows them (facts.Kind ck: an
// indirect call, or in a call chain or a sampled call tool a direct one
// too, to tgt), with the call's operand as it now stands, then a jump
// back to the call, which runs in place. A call emulated in a trampoline
// (push the return address, jmp) leaves the return-stack predictor one
// entry short, so the callee's ret and every ret above it mispredict;
// run in place, the call pushes what its ret will pop, and the program
// still sees its own return address.
func (a *Asm) PreCall(run []place.Inst, ks []facts.Kind, call *place.Inst, ck facts.Kind, tgt uint64, probes []uint64, entry uint64, pic bool) []Probe {
	probe := firstProbe(probes)
	for q := range run {
		if ks[q] != facts.Other {
			a.setErr(fmt.Errorf("%v at %#x is not a plain instruction", ks[q], run[q].Addr))
			return nil
		}
		a.RelocateBody(&run[q])
	}
	if a.Inline && a.Calls {
		if !a.callsProbe(call, ck, probe, entry, call.Addr+uint64(call.Len())) {
			return nil
		}
		a.Jmp(call.Addr)
		if ck == facts.Call {
			return []Probe{{Kind: runtime.KCall, Flags: runtime.PFDirect, Dst: tgt, Arm: -1}}
		}
		return []Probe{{Kind: runtime.KIndCall, Arm: -1}}
	}
	if ck == facts.Call {
		// a sampled call tool's: the thunk (counting down), then the call
		a.thunk(probe, entry, nil)
		a.Jmp(call.Addr)
		return []Probe{{Kind: runtime.KCall, Flags: runtime.PFDirect, Dst: tgt, Arm: -1}}
	}
	if a.Inline {
		sp, ok := a.pathsIndirect(call, facts.IndCall, probe, entry, call.Addr+uint64(call.Len()), func(c *Asm) { c.Jmp(call.Addr) })
		if !ok {
			return nil
		}
		return []Probe{sp}
	}
	sp, ok := a.indirectThunk(call, facts.IndCall, probe, entry, func() { a.Jmp(call.Addr) })
	if !ok {
		return nil
	}
	return []Probe{sp}
}

func (a *Asm) jcxzPlaceholder(b []byte) (ntField, tField int) {
	a.Emit(b[:len(b)-1]...)
	a.Emit(5)
	a.Emit(0xe9)
	ntField = a.off()
	a.u32(0)
	a.Emit(0xe9)
	tField = a.off()
	a.u32(0)
	return
}
