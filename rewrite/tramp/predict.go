package tramp

import (
	"github.com/stint-project/stint/rewrite/facts"
	"github.com/stint-project/stint/rewrite/place"
	"github.com/stint-project/stint/runtime"
)

// pathsPredicted emits a compact trace's indirect jmp in whose likely
// destination is a.Predict (a PLT stub's jmp to a function the module
// defines, which another module may still interpose): when it goes
// there, outcome bit 1 appended inline, as a jcc's taken arm appends
// it, and a direct jump on (into the destination's trampoline, with
// fragment linking). Anywhere else, and on the slow paths, the probe
// call in cold code with the destination in %rsi (the runtime appends
// bit 1 or the TIP: STINT_PF_PREDICT), then the jmp itself (branch).
// No flag changes.
//
//	lea -0x80(%rsp),%rsp ; push %rcx ; push %rdx
//	mov OP,%rcx ; lea PRED(%rip),%rdx ; not %rdx ; lea 1(%rcx,%rdx),%rcx
//	jrcxz 1f ; jmp other ; 1: <keyTest> ; <tntAppend 1> ; <fullCheck>
//	<undo> ; <jmpOn PRED>
//	other, slow: <undo> ; <thunk, %rsi = OP> ; <branch>
//	full: <undo> ; <call, %rsi = FLUSH> ; jmp PRED
func (a *Asm) pathsPredicted(in *place.Inst, probe, entry uint64, branch func(c *Asm)) (Probe, bool) {
	op, _, err := facts.ParseRM(in)
	if err != nil {
		a.setErr(err)
		return Probe{}, false
	}
	pred := a.Predict
	slow := a.newExit()
	a.save()
	a.encodeRM(op, true, 0x8b, 1, 0x80+16) // mov OP,%rcx (%rcx and %rdx not changed yet)
	a.Emit(0x48, 0x8d, 0x15)               // lea PRED(%rip),%rdx
	a.rel32(pred, 0)
	a.Emit(0x48, 0xf7, 0xd2)             // not %rdx
	a.Emit(0x48, 0x8d, 0x4c, 0x11, 0x01) // lea 1(%rcx,%rdx),%rcx: destination - PRED
	a.unlessZero(slow)
	a.keyTest(slow)
	a.tntAppend(true)
	full := a.fullCheck()
	a.undo()
	a.jmpOn(pred)
	a.later(func(c *Asm) {
		a.toCold(slow, c)
		c.undo()
		c.thunk(probe, entry, func() { c.encodeRM(op, true, 0x8b, 6, thunkFrame) }) // mov OP,%rsi
		branch(c)
	})
	a.later(func(c *Asm) {
		a.toCold(full, c)
		c.undo()
		c.callOnly(probe, entry, func() { c.Emit(0xbe); c.u32(runtime.PathsFlush) }) // mov $FLUSH,%esi
		c.Jmp(pred)
	})
	return Probe{Kind: runtime.KIndJmp, Flags: runtime.PFPredict, Dst: pred, Arm: -1}, true
}
