package tramp

import (
	"github.com/stint-project/stint/formats"
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
	if k != facts.IndCall && a.CallSite != nil {
		if idx, noPush, ok := a.CallSite(in.Addr); ok {
			a.callsSite(k, idx, noPush, probe, entry, ret)
			return true
		}
	}
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
	out := -1
	if k == facts.IndCall {
		// a destination outside the module and the thread's out range
		// goes to the runtime, which puts its module in the table
		out = a.textCheck(0x83) // jae out
	}
	back := a.pc()
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
	a.setCurMod()
	a.Emit(0x48, 0x8d, 0x35) // lea src(%rip),%rsi
	a.rel32(in.Addr, 0)
	a.tipAppend(pkt)
	if k == facts.IndCall {
		a.Emit(0x5e) // pop %rsi
		a.tipAppend(pktTIP)
	}
	a.tipLeave()
	outAt := a.pc()
	takenAt := a.tipCold(taken, slow, func(c *Asm) {
		var value func()
		switch k {
		case facts.IndCall:
			value = func() { c.encodeRM(op, true, 0x8b, 6, thunkFrame) } // mov OP,%rsi
		case facts.Ret:
			value = c.loadRet
		}
		c.thunk(probe, entry, value)
		c.Jmp(outAt)
	})
	if second >= 0 {
		a.retBelowTop(second, in.Addr, outAt, takenAt)
	}
	if out >= 0 {
		a.later(func(c *Asm) {
			a.PatchRel(out, c.pc())
			c.outRange(*takenAt)
			c.Jmp(back)
		})
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
		// the return address, where the runtime's module table has it
		c.Emit(0x48, 0x8b, 0xb4, 0x24) // mov 168(%rsp),%rsi
		c.u32(tipFrame)
		inside := c.textCheck(0x82) // jb inside
		c.outRange(*takenAt)
		c.PatchRel(inside, c.pc())
		c.topMove(-2)
		c.setCurMod()
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

// setCurMod makes a's module the one the thread's SITE packets index
// (a packet naming one of its probes' addresses follows).
//
//	lea MODULE(%rip),%rcx ; mov %rcx,%gs:CURMOD
func (a *Asm) setCurMod() {
	a.Emit(0x48, 0x8d, 0x0d) // lea MODULE(%rip),%rcx
	a.rel32(a.Module, 0)
	a.gsOp(0x89, 0x0c, runtime.PathsCurMod)
}

// callsSite emits a call chain's probe of a direct call (k facts.Call;
// its return address ret pushed on the call stack unless noPush) or a
// ret (to the call stack's top: popped) as a SITE packet of its number
// idx among the module's direct calls and rets, with no flag changed: when the block is this thread's, the
// thread's SITE packets index this module, there is room (the runtime's
// count of inline appends left, STINT_PATHS_ROOM_OFF) and, for a ret,
// its return address is the top. The key reads STINT_PATHS_KEY_TIP
// while it appends, as an inline TIP's does. Else the probe call, in
// cold code.
//
//	lea -0x80(%rsp),%rsp ; push %rcx ; push %rdx ; <keyTest> (slow)
//	movq $TIP,%gs:KEY
//	lea MODULE(%rip),%rdx ; not %rdx ; mov %gs:CURMOD,%rcx ; lea 1(%rcx,%rdx),%rcx ; jrcxz 1f ; jmp taken ; 1:
//	mov %gs:ROOM,%rcx ; jrcxz taken
//	ret: <topCompare> (taken) ; <topMove -1>      call: <topMove +1> ; lea ret(%rip),%rdx ; mov %rdx,%gs:STACK(,%rcx,8)
//	mov %gs:ROOM,%rcx ; lea -1(%rcx),%rcx ; mov %rcx,%gs:ROOM
//	mov %gs:CUR,%rdx ; movw/movl $SITE,(%rdx) ; lea n(%rdx),%rdx ; mov %rdx,%gs:CUR
//	mov %fs:0,%rcx ; mov %rcx,%gs:KEY ; <undo> ; out:
//	cold: taken: mov %fs:0,%rcx ; mov %rcx,%gs:KEY ; slow: <undo> ; <thunk> ; jmp out
func (a *Asm) callsSite(k facts.Kind, idx uint32, noPush bool, probe, entry, ret uint64) {
	// the short jumps' stubs first, jumped over: the code below is too
	// long for them to reach its end
	a.Emit(0xeb, 10) // jmp over
	slow, taken := &exit{stub: -1}, &exit{stub: -1}
	a.stubAhead(slow)
	a.stubAhead(taken)
	a.keyCheckTo(slow)
	a.takeKey()
	a.gsOp(0x8b, 0x0c, runtime.PathsRoomOff) // mov %gs:ROOM,%rcx
	a.shortTo(0xe3, taken)                   // jrcxz taken: no room
	a.Emit(0x48, 0x8d, 0x15)                 // lea MODULE(%rip),%rdx
	a.rel32(a.Module, 0)
	a.Emit(0x48, 0xf7, 0xd2)                // not %rdx
	a.gsOp(0x8b, 0x0c, runtime.PathsCurMod) // mov %gs:CURMOD,%rcx
	a.Emit(0x48, 0x8d, 0x4c, 0x11, 0x01)    // lea 1(%rcx,%rdx),%rcx
	a.unlessZeroFar(taken)
	if k == facts.Ret {
		a.topTest()
		a.unlessZeroFar(taken)
		a.topMove(-1)
	} else if !noPush {
		a.topMove(1)
		a.Emit(0x48, 0x8d, 0x15) // lea ret(%rip),%rdx
		a.rel32(ret, 0)
		a.Emit(0x65, 0x48, 0x89, 0x14, 0xcd) // mov %rdx,%gs:STACK(,%rcx,8)
		a.u32(runtime.PathsStackOff)
	}
	a.gsOp(0x8b, 0x0c, runtime.PathsRoomOff) // mov %gs:ROOM,%rcx
	a.Emit(0x48, 0x8d, 0x49, 0xff)           // lea -1(%rcx),%rcx
	a.gsOp(0x89, 0x0c, runtime.PathsRoomOff) // mov %rcx,%gs:ROOM
	a.gsOp(0x8b, 0x14, runtime.PathsCurOff)  // mov %gs:CUR,%rdx
	site := formats.SiteBytes(idx)
	if len(site) == 2 {
		a.Emit(0x66, 0xc7, 0x02, site[0], site[1]) // movw $SITE,(%rdx)
	} else {
		a.Emit(0xc7, 0x02, site[0], site[1], site[2], 0) // movl $SITE,(%rdx): its 4th byte is PAD
	}
	a.Emit(0x48, 0x8d, 0x52, byte(len(site))) // lea n(%rdx),%rdx
	a.gsOp(0x89, 0x14, runtime.PathsCurOff)   // mov %rdx,%gs:CUR
	a.giveKey(0)
	a.undo()
	out := a.pc()
	a.later(func(c *Asm) {
		a.toCold(taken, c)
		c.giveKey(0)
		a.toCold(slow, c)
		c.undo()
		var value func()
		if k == facts.Ret {
			value = c.loadRet
		}
		c.thunk(probe, entry, value)
		c.Jmp(out)
	})
}

// unlessZeroFar is unlessZero with a jmp rel32 to e's cold code: for a
// test too far from e's stub.
//
//	jrcxz 1f ; jmp cold ; 1:
func (a *Asm) unlessZeroFar(e *exit) {
	a.Emit(0xe3, 0x05)
	e.long = append(e.long, a.jmp32())
}
