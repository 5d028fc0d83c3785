package tramp

import (
	"github.com/stint-project/stint/rewrite/facts"
	"github.com/stint-project/stint/rewrite/place"
	"github.com/stint-project/stint/runtime"
)

// callsProbe emits a call chain's probe (STINT_MF_CALLS) of the call,
// indirect call or ret in (facts.Kind k), appended inline as the
// runtime's paths_calls_event does: a call pushes its return address ret
// on the thread's call stack and appends a TIP of its own address, an
// indirect call then a TIP of its destination; a ret whose return
// address is the stack's top pops it and appends a RET_TIP of its own
// address. Anything else goes to the runtime, in the cold code: the block
// is not this thread's, a ret to elsewhere, a PSB due, under 32 bytes
// left in the chunk. The flags are saved as pathsIndirect saves them,
// and the key reads STINT_PATHS_KEY_TIP while the packet is appended (a
// signal handler's probes meanwhile call the runtime, which counts them
// lost). What follows the probe (the call or the ret) comes after it on
// both paths.
//
//	lea -0x80(%rsp),%rsp ; push %rax, %rcx, %rdx, %rsi, %rdi ; [mov OP,%rsi]
//	lahf ; seto %al ; <%fs base> ; cmp %gs:KEY,%rcx ; jne slow
//	movq $TIP,%gs:KEY ; <room>
//	call: <topMove +1> ; lea ret(%rip),%rdi ; mov %rdi,%gs:STACK(,%rcx,8)
//	ret: movzbl %gs:TOP,%ecx ; mov %gs:STACK(,%rcx,8),%rdi ; cmp 168(%rsp),%rdi ; jne taken ; <topMove -1>
//	[push %rsi] ; lea src(%rip),%rsi ; <append> ; [pop %rsi ; <append>]
//	<%fs base> ; mov %rcx,%gs:KEY ; <restore> ; out:
//	cold: taken: <%fs base> ; mov %rcx,%gs:KEY ; slow: <restore> ; <thunk> ; jmp out
func (a *Asm) callsProbe(in *place.Inst, k facts.Kind, probe, entry, ret uint64) bool {
	var op *facts.RMOp
	var load func()
	if k == facts.IndCall {
		var err error
		if op, _, err = facts.ParseRM(in); err != nil {
			a.setErr(err)
			return false
		}
		load = func() { a.encodeRM(op, true, 0x8b, 6, tipFrame) } // mov OP,%rsi
	}
	slow := a.tipEnter(load)
	taken := a.roomChecks()
	pkt := byte(pktTIP)
	second := -1
	if k == facts.Ret {
		a.Emit(0x65, 0x0f, 0xb6, 0x0c, 0x25) // movzbl %gs:TOP,%ecx
		a.u32(runtime.PathsTopOff)
		a.Emit(0x65, 0x48, 0x8b, 0x3c, 0xcd) // mov %gs:STACK(,%rcx,8),%rdi
		a.u32(runtime.PathsStackOff)
		a.Emit(0x48, 0x3b, 0xbc, 0x24) // cmp 168(%rsp),%rdi
		a.u32(tipFrame)
		second = a.jcc32(0x85) // jne second
		a.topMove(-1)
		pkt = pktRetTIP
	} else {
		a.topMove(1)
		a.Emit(0x48, 0x8d, 0x3d) // lea ret(%rip),%rdi
		a.rel32(ret, 0)
		a.Emit(0x65, 0x48, 0x89, 0x3c, 0xcd) // mov %rdi,%gs:STACK(,%rcx,8)
		a.u32(runtime.PathsStackOff)
	}
	if k == facts.IndCall {
		a.Emit(0x56) // push %rsi: the destination
	}
	a.Emit(0x48, 0x8d, 0x35) // lea src(%rip),%rsi
	a.rel32(in.Addr, 0)
	a.tipAppend(pkt)
	if k == facts.IndCall {
		a.Emit(0x5e) // pop %rsi
		a.tipAppend(pktTIP)
	}
	a.tipLeave()
	out := a.pc()
	takenAt := a.tipCold(taken, slow, func(c *Asm) {
		var value func()
		switch k {
		case facts.IndCall:
			value = func() { c.encodeRM(op, true, 0x8b, 6, thunkFrame) } // mov OP,%rsi
		case facts.Ret:
			value = c.loadRet
		}
		c.thunk(probe, entry, value)
		c.Jmp(out)
	})
	if second >= 0 {
		a.retBelowTop(second, in.Addr, out, takenAt)
	}
	return true
}

// retBelowTop queues, in the cold code, a call chain's ret whose return
// address is not the call stack's top (second: the rel32 of the jne
// that leaves for it, %ecx the top's index) but the entry below it: a
// call left the instrumented code (libc through the PLT) and came back
// by a ret without a probe, so its entry stayed. Inline, as the
// runtime's paths_calls_event does it: pop both, then a TIP of the ret's
// own address src and one of the return address; back to out. Any other
// ret goes on to the probe's slow path at takenAt (tipCold's, queued
// before: the key given back, the probe call, which unwinds). The chunk
// has room (roomChecks asked for 32 bytes).
//
//	lea -1(%rcx),%ecx ; movzbl %cl,%ecx ; mov %gs:STACK(,%rcx,8),%rdi ; cmp 168(%rsp),%rdi ; jne taken
//	<topMove -2> ; lea src(%rip),%rsi ; <append> ; mov 168(%rsp),%rsi ; <append> ; <tipLeave> ; jmp out
func (a *Asm) retBelowTop(second int, src, out uint64, takenAt *uint64) {
	a.later(func(c *Asm) {
		a.PatchRel(second, c.pc())
		c.Emit(0x8d, 0x49, 0xff, 0x0f, 0xb6, 0xc9) // lea -1(%rcx),%ecx ; movzbl %cl,%ecx
		c.Emit(0x65, 0x48, 0x8b, 0x3c, 0xcd)       // mov %gs:STACK(,%rcx,8),%rdi
		c.u32(runtime.PathsStackOff)
		c.Emit(0x48, 0x3b, 0xbc, 0x24) // cmp 168(%rsp),%rdi
		c.u32(tipFrame)
		c.PatchRel(c.jcc32(0x85), *takenAt) // jne taken
		c.topMove(-2)
		c.Emit(0x48, 0x8d, 0x35) // lea src(%rip),%rsi
		c.rel32(src, 0)
		c.tipAppend(pktTIP)
		c.Emit(0x48, 0x8b, 0xb4, 0x24) // mov 168(%rsp),%rsi
		c.u32(tipFrame)
		c.tipAppend(pktTIP)
		c.tipLeave()
		c.Jmp(out)
	})
}
