package tramp

import (
	"unsafe"

	"github.com/stint-project/stint/rewrite/facts"
	"github.com/stint-project/stint/rewrite/place"
	"github.com/stint-project/stint/runtime"
)

// thunk emits the probe call (docs/DESIGN.md §4) behind the gate check: when
// the gate word is STINT_GATE_CLOSED (budget spent) it steps over the
// call. setRSI, when non-nil, emits the instruction(s) that load the
// destination or value into %rsi; it runs while every register but %rsp
// holds the program's value (rsp is 144 bytes lower).
//
//	lea -0x80(%rsp),%rsp ; push %rcx ; [gateCheck closed]
//	pop %rcx ; push %rdi ; push %rsi ; [setRSI] ; lea probe(%rip),%rdi
//	call stint_probe_entry ; pop %rsi ; pop %rdi ; jmp out
//	closed: pop %rcx
//	out: lea 0x80(%rsp),%rsp
//
// No flag changes on either path: lea and jrcxz leave the flags alone.
func (a *Asm) thunk(probe, entry uint64, setRSI func()) {
	a.Emit(0x48, 0x8d, 0x64, 0x24, 0x80) // lea -0x80(%rsp),%rsp
	a.Emit(0x51)                         // push %rcx
	closedField := a.gateCheck()
	skipField := a.countdown(probe)
	a.Emit(0x59) // pop %rcx
	a.probeCall(probe, entry, setRSI)
	a.Emit(0xeb, 0x01) // jmp out
	a.patchRel8(closedField, a.off())
	if skipField >= 0 {
		a.patchRel8(skipField, a.off())
	}
	a.Emit(0x59)                                           // closed: pop %rcx
	a.Emit(0x48, 0x8d, 0xa4, 0x24, 0x80, 0x00, 0x00, 0x00) // out: lea 0x80(%rsp),%rsp
}

// countdown emits, when a.Countdown, a sampled call's countdown: the
// probe's Cache2 word is decremented, and while it stays at 0 or above
// the runtime is skipped (a jns whose rel8, returned, the caller points
// at its path that pops %rcx); below 0 it falls through to the call.
// The sampler sets the word to its next skip. The decrement is atomic
// (two threads on one call site, non-atomic, lost 6% of the calls'
// counts on the calls fixture), so it changes the flags: only call
// sites get it, where the flags are dead (the callee may change them).
//
//	lock decq cache2(%rip) ; jns skip
//
// It returns -1 when a.Countdown is off.
func (a *Asm) countdown(probe uint64) (skipField int) {
	if !a.Countdown {
		return -1
	}
	a.Emit(0xf0, 0x48, 0xff, 0x0d) // lock decq cache2(%rip)
	a.rel32(probe+probeCaches[1], 0)
	a.Emit(0x79, 0x00) // jns skip
	return a.off() - 1
}

// gateCheck emits the gate check of stint_abi.h, with %rcx free:
//
//	mov gate(%rip),%rcx ; lea -1(%rcx),%rcx ; jrcxz closed
//
// and returns the offset of the jrcxz's rel8 for the caller to point at
// its closed path. a.Gate is the word the site reads: word 1 for sites
// the off-switch may undo (STINT_PATCH_SWITCH), else word 0.
func (a *Asm) gateCheck() (closedField int) {
	a.Emit(0x48, 0x8b, 0x0d) // mov gate(%rip),%rcx
	a.rel32(a.Gate, 0)
	a.Emit(0x48, 0x8d, 0x49, 0xff) // lea -1(%rcx),%rcx
	a.Emit(0xe3, 0x00)             // jrcxz closed
	return a.off() - 1
}

// callOnly emits the thunk without the gate check, for paths that
// checked the gate already.
func (a *Asm) callOnly(probe, entry uint64, setRSI func()) {
	a.Emit(0x48, 0x8d, 0x64, 0x24, 0x80) // lea -0x80(%rsp),%rsp
	a.probeCall(probe, entry, setRSI)
	a.Emit(0x48, 0x8d, 0xa4, 0x24, 0x80, 0x00, 0x00, 0x00) // lea 0x80(%rsp),%rsp
}

// probeCall emits the call itself, below the red zone: save %rdi and
// %rsi, load the destination or value (setRSI) and the probe, call the
// runtime, restore.
func (a *Asm) probeCall(probe, entry uint64, setRSI func()) {
	a.Emit(0x57, 0x56) // push %rdi; push %rsi
	if setRSI != nil {
		setRSI()
	}
	a.Emit(0x48, 0x8d, 0x3d) // lea probe(%rip),%rdi
	a.rel32(probe, 0)
	a.Emit(0xe8) // call stint_probe_entry
	a.rel32(entry, 0)
	a.Emit(0x5e, 0x5f) // pop %rsi; pop %rdi
}

// thunkFrame is how far below the program's %rsp a thunk runs.
const thunkFrame = 128 + 16

// SIB bytes of lea 1(%base,%rcx): scale 1, index %rcx, base %rsi or %rax.
const (
	sibBaseRSI = 0x0e
	sibBaseRAX = 0x08
)

// cacheCompares emits the inline cache check of probe: the destination
// in a register (sib: sibBaseRSI or sibBaseRAX) compared with each of
// the probe's four cache entries with flag-free instructions, each a
// jrcxz to a hit whose rel8 is appended to a.extraHits:
//
//	mov cacheN(%rip),%rcx ; not %rcx ; lea 1(%reg,%rcx),%rcx ; jrcxz hit
func (a *Asm) cacheCompares(probe uint64, sib byte) {
	for _, off := range probeCaches {
		a.Emit(0x48, 0x8b, 0x0d) // mov cacheN(%rip),%rcx
		a.rel32(probe+off, 0)
		a.Emit(0x48, 0xf7, 0xd1)            // not %rcx
		a.Emit(0x48, 0x8d, 0x4c, sib, 0x01) // lea 1(%reg,%rcx),%rcx
		a.Emit(0xe3, 0x00)                  // jrcxz hit
		a.extraHits = append(a.extraHits, a.off()-1)
	}
}

// probeCaches are the offsets in struct stint_probe of the four
// destinations an indirect or ret probe recorded last, most recent first,
// which the inline check compares in turn: cache, cache2 and, in probes
// without a direct destination, arm and arm_to.
var probeCaches = []uint64{
	uint64(unsafe.Offsetof(runtime.Probe{}.Cache)),
	uint64(unsafe.Offsetof(runtime.Probe{}.Cache2)),
	uint64(unsafe.Offsetof(runtime.Probe{}.Arm)),
	uint64(unsafe.Offsetof(runtime.Probe{}.ArmTo)),
}

// patchExtraHits points the pending hit jumps of the first cache compare
// at the current offset.
func (a *Asm) patchExtraHits() {
	for _, f := range a.extraHits {
		a.patchRel8(f, a.off())
	}
	a.extraHits = a.extraHits[:0]
}

// retCacheCheck emits the inline fast path of a ret probe: it compares the
// return address at (%rsp) with the probe's cache (the destination the
// runtime last recorded) and ends in a jrcxz, taken when they are equal,
// whose rel8 is the last byte emitted (patched by the caller). Neither
// path changes a flag (flags can be live across a ret in hand-written
// code): the comparison is rax + ~cache + 1 with not and lea, tested by
// jrcxz. It steps over the red zone like a thunk and leaves %rax and %rcx
// pushed; both paths then run cacheRestore. Before the comparison it
// checks the gate (see thunk): closed, it goes straight to the hit path;
// it returns the offset of that jump's rel8 for the caller to patch.
//
// A ret probe is never retired, so without this every ret would run the
// whole thunk. The runtime sets cache on every recording call in default
// mode and never in --every mode, where it stays 0 (no return address),
// so there the check always falls through to the thunk.
func (a *Asm) retCacheCheck(probe uint64) (gateField int) {
	a.Emit(0x48, 0x8d, 0x64, 0x24, 0x80)                   // lea -0x80(%rsp),%rsp
	a.Emit(0x50, 0x51)                                     // push %rax; push %rcx
	gateField = a.gateCheck()                              // closed: to the hit path
	a.Emit(0x48, 0x8b, 0x84, 0x24, 0x90, 0x00, 0x00, 0x00) // mov 0x90(%rsp),%rax
	a.cacheCompares(probe, sibBaseRAX)
	a.extraHits = a.extraHits[:len(a.extraHits)-1] // the last is the caller's hit field
	return gateField
}

// cacheRestore undoes retCacheCheck's stack changes.
func (a *Asm) cacheRestore() {
	a.Emit(0x59, 0x58)                                     // pop %rcx; pop %rax
	a.Emit(0x48, 0x8d, 0xa4, 0x24, 0x80, 0x00, 0x00, 0x00) // lea 0x80(%rsp),%rsp
}

// EntryProbe emits a sampled call tool's entry probe (policy.EntrySites)
// at run[0], a function's first instruction (facts.Kind k, direct target
// tgt), which runs here with the plain instructions after it in run.
// Flags are dead at a function's entry (a call leaves them undefined),
// so its fast path compares and counts down in memory, with no register
// and no stack; the probe call, with the return address the function
// was entered with in %rsi, is cold code:
//
//	cmpq $1,gate(%rip) ; je body            # closed
//	lock decq cache2(%rip) ; js cold        # the countdown
//	body: [run] ; jmp next
//	cold: lea -0x80(%rsp),%rsp ; push %rdi ; push %rsi
//	      mov 0x90(%rsp),%rsi ; lea probe(%rip),%rdi ; call stint_probe_entry
//	      pop %rsi ; pop %rdi ; lea 0x80(%rsp),%rsp ; jmp body
//
// The trampolines a workload runs stay short: the thunk (80 bytes with
// the call) cost MariaDB under OLTP as much as the calls it skipped.
func (a *Asm) EntryProbe(run []place.Inst, k facts.Kind, tgt uint64, probes []uint64, entry uint64, pic bool) []Probe {
	in, probe := &run[0], firstProbe(probes)
	a.Emit(0x48, 0x83, 0x3d) // cmpq $1,gate(%rip)
	a.rel32(a.Gate, 1)
	a.Emit(0x01)
	a.Emit(0x74, 0x00) // je body
	closed := a.off() - 1
	if a.Stripes != nil {
		a.stripeCountdown(probe)
	} else {
		a.Emit(0xf0, 0x48, 0xff, 0x0d) // lock decq cache2(%rip)
		a.rel32(probe+probeCaches[1], 0)
	}
	a.Emit(0x0f, 0x88) // js cold
	slow := a.off()
	a.u32(0)
	a.patchRel8(closed, a.off())
	body := a.pc()
	if len(run) > 1 {
		for q := range run {
			a.RelocateBody(&run[q])
		}
		last := &run[len(run)-1]
		a.Jmp(last.Addr + uint64(last.Len()))
	} else {
		a.Relocate(in, k, tgt, pic)
	}
	a.later(func(c *Asm) {
		a.PatchRel(slow, c.pc())
		c.callOnly(probe, entry, func() {
			c.Emit(0x48, 0x8b, 0xb4, 0x24) // mov thunkFrame(%rsp),%rsi
			c.u32(thunkFrame)
		})
		c.Jmp(body)
	})
	return []Probe{{Kind: runtime.KCall, Flags: runtime.PFDirect | runtime.PFEntry, Dst: in.Addr, Arm: -1}}
}

// Stripes is what an entry probe needs to count down in the calling
// thread's stripe (STINT_MF_STRIPES): where the probe records start,
// how many there are, and the link vaddr of the module's cd_base.
type Stripes struct {
	ProbesAt uint64
	NProbes  int
	CDBaseAt uint64
}

// stripeCountdown emits an entry probe's countdown in its slot of the
// calling thread's stripe, with the sign flag set when it went below 0
// and clear when the module has no slots yet (cd_base 0: nothing is
// counted before the runtime maps them). At a function's entry the red
// zone is free: %rax and %rcx are saved there.
//
//	mov %rax,-8(%rsp) ; mov cd_base(%rip),%rax ; test %rax,%rax ; jz out
//	mov %rcx,-16(%rsp) ; mov %fs:0,%rcx ; shr $12,%rcx ; and $15,%ecx
//	imul $stride,%ecx,%ecx ; lock decq 32*idx+8(%rax,%rcx) ; mov -16(%rsp),%rcx
//	out: mov -8(%rsp),%rax
func (a *Asm) stripeCountdown(probe uint64) {
	st := a.Stripes
	idx := uint64(0)
	if probe >= st.ProbesAt {
		idx = (probe - st.ProbesAt) / runtime.ProbeStructSize
	}
	a.Emit(0x48, 0x89, 0x44, 0x24, 0xf8) // mov %rax,-8(%rsp)
	a.Emit(0x48, 0x8b, 0x05)             // mov cd_base(%rip),%rax
	a.rel32(st.CDBaseAt, 0)
	a.Emit(0x48, 0x85, 0xc0) // test %rax,%rax
	a.Emit(0x74, 0x00)       // jz out
	out := a.off() - 1
	a.Emit(0x48, 0x89, 0x4c, 0x24, 0xf0)                         // mov %rcx,-16(%rsp)
	a.Emit(0x64, 0x48, 0x8b, 0x0c, 0x25, 0x00, 0x00, 0x00, 0x00) // mov %fs:0,%rcx
	a.Emit(0x48, 0xc1, 0xe9, runtime.StripeShift)                // shr $12,%rcx
	a.Emit(0x83, 0xe1, runtime.Stripes-1)                        // and $15,%ecx
	a.Emit(0x69, 0xc9)                                           // imul $stride,%ecx,%ecx
	a.u32(uint32(st.NProbes * runtime.StripeSlot))
	a.Emit(0xf0, 0x48, 0xff, 0x8c, 0x08) // lock decq disp32(%rax,%rcx)
	a.u32(uint32(idx*runtime.StripeSlot + 8))
	a.Emit(0x48, 0x8b, 0x4c, 0x24, 0xf0) // mov -16(%rsp),%rcx
	a.patchRel8(out, a.off())
	a.Emit(0x48, 0x8b, 0x44, 0x24, 0xf8) // out: mov -8(%rsp),%rax
}
