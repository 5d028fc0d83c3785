package tramp

import "github.com/stint-project/stint/runtime"

// arm emits a jcc outcome's probe: the thunk, or the inline append
// (pathsBit).
func (a *Asm) arm(probe, entry uint64, taken bool) {
	if a.Inline {
		a.pathsBit(probe, entry, taken)
		return
	}
	if a.Paths {
		a.thunk(probe, entry, a.noValue)
		return
	}
	a.thunk(probe, entry, nil)
}

// armTo is arm for an outcome that goes next to dst: with the flags dead
// there, the inline append may change them (pathsBitFlags).
func (a *Asm) armTo(probe, entry uint64, taken bool, dst uint64) {
	if a.Inline && !a.Static && a.FlagsDead != nil && a.FlagsDead(dst) {
		a.pathsBitFlags(probe, entry, taken)
		return
	}
	a.arm(probe, entry, taken)
}

// noValue zeroes %rsi for a probe call that passes no value: a compact
// trace's runtime reads FLUSH there (mov $0,%esi: no flag changes).
func (a *Asm) noValue() { a.Emit(0xbe); a.u32(0) }

// pathsBit emits a compact trace's jcc arm: the outcome bit shifted into
// the thread's pending word without a call, when the thread block
// behind %gs is this thread's and may take it (its key is this thread's
// %fs base, runtime/include/stint_abi.h); else, or when the word fills
// up, the probe call, in the trampoline's cold code (cold.go). No flag
// changes on any path (rdfsbase, mov, not, lea, movzbl, jrcxz and jmp
// leave them alone): each test leaves 0 in %rcx when it passes
// (unlessZero).
//
//	lea -0x80(%rsp),%rsp ; push %rcx ; push %rdx
//	mov %fs:0,%rcx ; mov %gs:KEY,%rdx ; not %rdx ; lea 1(%rcx,%rdx),%rcx
//	jrcxz 1f ; jmp slow ; 1:
//	mov %gs:TNT,%rdx ; mov (%rdx),%rcx ; lea [1](%rcx,%rcx),%rcx
//	mov %rcx,(%rdx)                              (the runtime's paths.c
//	                                              knows these four)
//	movzbl FULL/8(%rdx),%ecx ; jrcxz 1f ; jmp full ; 1:
//	pop %rdx ; pop %rcx ; lea 0x80(%rsp),%rsp
//	out: ... (a jmp: then the stubs slow: jmp cold1 ; full: jmp cold2)
//	cold1: pop %rdx ; pop %rcx ; lea 0x80(%rsp),%rsp ; <thunk, %rsi = 0> ; jmp out
//	cold2: pop %rdx ; pop %rcx ; lea 0x80(%rsp),%rsp ; <call, %rsi = FLUSH> ; jmp out
func (a *Asm) pathsBit(probe, entry uint64, taken bool) {
	slow := a.keyCheck()
	a.tntAppend(taken)
	a.bitEnd(slow, probe, entry, (*Asm).noValue)
}

// pathsBitFlags is pathsBit where the status flags are dead (INS-OP's
// partial context switch): the key and the full word are tested with
// cmp and jne, whose fast path takes no branch, where jrcxz takes one
// on each test. The four instructions of tntAppend are the same (the
// runtime's paths_complete_arm knows them).
//
//	lea -0x80(%rsp),%rsp ; push %rcx ; push %rdx
//	mov %fs:0,%rcx ; cmp %gs:KEY,%rcx ; jne slow
//	<tntAppend> ; cmpb $0,FULL/8(%rdx) ; jne full
//	pop %rdx ; pop %rcx ; lea 0x80(%rsp),%rsp
func (a *Asm) pathsBitFlags(probe, entry uint64, taken bool) {
	slow, full := a.newExit(), a.newExit()
	a.save()
	a.tipThreadBase()                    // mov %fs:0,%rcx (armTo: not Static)
	a.Emit(0x65, 0x48, 0x3b, 0x0c, 0x25) // cmp %gs:KEY,%rcx
	a.u32(runtime.PathsKeyOff)
	a.shortTo(0x75, slow) // jne slow
	a.tntAppend(taken)
	a.Emit(0x80, 0x7a, byte(runtime.PathsTNTFull/8), 0) // cmpb $0,FULL/8(%rdx)
	a.shortTo(0x75, full)                               // jne full
	a.bitEndFull(slow, full, probe, entry, (*Asm).noValue)
}

// bitEnd ends a path that appended a bit: on to what follows when the
// pending word has room; the flush call when it is full and the slow
// end for slow, both cold.
func (a *Asm) bitEnd(slow *exit, probe, entry uint64, setRSI func(*Asm)) {
	a.bitEndFull(slow, a.fullCheck(), probe, entry, setRSI)
}

// bitEndFull is bitEnd once the full word's test (exit full) is made.
func (a *Asm) bitEndFull(slow, full *exit, probe, entry uint64, setRSI func(*Asm)) {
	a.undo()
	out := a.pc()
	a.slowEnd(slow, probe, entry, setRSI, out)
	a.later(func(c *Asm) {
		a.toCold(full, c)
		c.undo()
		c.callOnly(probe, entry, func() { c.Emit(0xbe); c.u32(runtime.PathsFlush) }) // mov $FLUSH,%esi
		c.Jmp(out)
	})
}

// undo pops what keyCheck pushed and steps back over the red zone.
func (a *Asm) undo() {
	a.Emit(0x5a, 0x59)                                     // pop %rdx; pop %rcx
	a.Emit(0x48, 0x8d, 0xa4, 0x24, 0x80, 0x00, 0x00, 0x00) // lea 0x80(%rsp),%rsp
}

// keyCheck steps over the red zone, saves %rcx and %rdx, and compares
// the thread's %fs base with its block's key: equal, it falls through
// (the fast path); else it leaves by the exit it returns.
//
//	lea -0x80(%rsp),%rsp ; push %rcx ; push %rdx
//	mov %fs:0,%rcx (static: rdgsbase %rcx ; jrcxz slow ; rdfsbase %rcx)
//	mov %gs:KEY,%rdx ; not %rdx ; lea 1(%rcx,%rdx),%rcx ; jrcxz 1f ; jmp slow ; 1:
func (a *Asm) keyCheck() *exit {
	slow := a.newExit()
	a.keyCheckTo(slow)
	return slow
}

// keyCheckTo is keyCheck with exit slow.
func (a *Asm) keyCheckTo(slow *exit) {
	a.save()
	a.keyTest(slow)
}

// save steps over the red zone and saves %rcx and %rdx; undo takes
// them back.
//
//	lea -0x80(%rsp),%rsp ; push %rcx ; push %rdx
func (a *Asm) save() {
	a.Emit(0x48, 0x8d, 0x64, 0x24, 0x80) // lea -0x80(%rsp),%rsp
	a.Emit(0x51, 0x52)                   // push %rcx; push %rdx
}

// keyTest is keyCheck's test, with %rcx and %rdx saved already.
func (a *Asm) keyTest(slow *exit) {
	if a.Static {
		a.Emit(0xf3, 0x48, 0x0f, 0xae, 0xc9) // rdgsbase %rcx
		a.shortTo(0xe3, slow)                // jrcxz slow: no block yet (a thread the runtime has not seen)
		a.Emit(0xf3, 0x48, 0x0f, 0xae, 0xc1) // rdfsbase %rcx
	} else {
		// %gs is never 0 here (the runtime gives every thread a block
		// before the module's code runs) and %fs:0 is the thread
		// pointer (the x86-64 TLS ABI): two loads, against 6.5 ns for
		// rdgsbase and rdfsbase on this machine's VM
		a.Emit(0x64, 0x48, 0x8b, 0x0c, 0x25) // mov %fs:0,%rcx
		a.u32(0)
	}
	a.Emit(0x65, 0x48, 0x8b, 0x14, 0x25) // mov %gs:KEY,%rdx
	a.u32(runtime.PathsKeyOff)
	a.Emit(0x48, 0xf7, 0xd2)             // not %rdx
	a.Emit(0x48, 0x8d, 0x4c, 0x11, 0x01) // lea 1(%rcx,%rdx),%rcx: %fs - key
	a.unlessZero(slow)
}

// unlessZero leaves by exit e unless %rcx is 0, with no flag changed:
// jrcxz over a short jmp to e's stub. The fast path takes the jrcxz: a
// loop instruction (rcx - 1, taken unless 0) falls through instead, but
// its seven micro-ops cost more than the taken branch (gzip's complete
// trace, whose hottest loop runs from trampoline to trampoline: 0.586
// of the time with loop).
//
//	jrcxz 1f ; jmp e ; 1:
func (a *Asm) unlessZero(e *exit) {
	a.Emit(0xe3, 0x02)
	a.shortTo(0xeb, e)
}

// jmp32 emits a jmp whose rel32 is patched later, and returns the field.
func (a *Asm) jmp32() int {
	a.Emit(0xe9)
	f := a.off()
	a.u32(0)
	return f
}

// tntAppend shifts an outcome bit into the pending word (the four
// instructions the runtime's paths_complete_arm recognises):
//
//	mov %gs:TNT,%rdx ; mov (%rdx),%rcx ; lea [1](%rcx,%rcx),%rcx ; mov %rcx,(%rdx)
func (a *Asm) tntAppend(taken bool) {
	a.Emit(0x65, 0x48, 0x8b, 0x14, 0x25) // mov %gs:TNT,%rdx
	a.u32(runtime.PathsTNTOff)
	a.Emit(0x48, 0x8b, 0x0a) // mov (%rdx),%rcx
	if taken {
		a.Emit(0x48, 0x8d, 0x4c, 0x09, 0x01) // lea 1(%rcx,%rcx),%rcx
	} else {
		a.Emit(0x48, 0x8d, 0x0c, 0x09) // lea (%rcx,%rcx),%rcx
	}
	a.Emit(0x48, 0x89, 0x0a) // mov %rcx,(%rdx)
}

// fullCheck, after tntAppend, falls through when the pending word is
// not full and leaves by the exit it returns when it is.
//
//	movzbl FULL/8(%rdx),%ecx ; jrcxz 1f ; jmp full ; 1:
func (a *Asm) fullCheck() *exit {
	full := a.newExit()
	a.Emit(0x0f, 0xb6, 0x4a, byte(runtime.PathsTNTFull/8)) // movzbl FULL/8(%rdx),%ecx
	a.unlessZero(full)
	return full
}

// topCompare, after keyCheck, compares the program's return address at
// its (%rsp) with the call stack's top entry: equal, it falls through;
// else it leaves by exit slow.
//
//	movzbl %gs:TOP,%ecx ; mov %gs:STACK(,%rcx,8),%rdx ; not %rdx
//	mov 0x90(%rsp),%rcx ; lea 1(%rcx,%rdx),%rcx ; jrcxz 1f ; jmp slow ; 1:
func (a *Asm) topCompare(slow *exit) {
	a.topTest()
	a.unlessZero(slow)
}

// topTest leaves 0 in %rcx when the program's return address at its
// (%rsp) is the call stack's top (keyCheck's frame).
func (a *Asm) topTest() {
	a.topIs(func() { a.Emit(0x48, 0x8b, 0x8c, 0x24, 0x90, 0x00, 0x00, 0x00) }) // mov 0x90(%rsp),%rcx
}

// topIs leaves 0 in %rcx when the address load puts in %rcx is the call
// stack's top, with no flag changed.
//
//	movzbl %gs:TOP,%ecx ; mov %gs:STACK(,%rcx,8),%rdx ; not %rdx ; <load> ; lea 1(%rcx,%rdx),%rcx
func (a *Asm) topIs(load func()) {
	a.Emit(0x65, 0x0f, 0xb6, 0x0c, 0x25) // movzbl %gs:TOP,%ecx
	a.u32(runtime.PathsTopOff)
	a.Emit(0x65, 0x48, 0x8b, 0x14, 0xcd) // mov %gs:STACK(,%rcx,8),%rdx
	a.u32(runtime.PathsStackOff)
	a.Emit(0x48, 0xf7, 0xd2) // not %rdx
	load()
	a.Emit(0x48, 0x8d, 0x4c, 0x11, 0x01) // lea 1(%rcx,%rdx),%rcx: load - top
}

// topMove moves the call stack's top by d (1: a push's slot, -1: a pop),
// leaving the new top's index in %ecx.
//
//	movzbl %gs:TOP,%ecx ; lea d(%rcx),%ecx ; mov %cl,%gs:TOP ; movzbl %cl,%ecx
func (a *Asm) topMove(d int8) {
	a.Emit(0x65, 0x0f, 0xb6, 0x0c, 0x25) // movzbl %gs:TOP,%ecx
	a.u32(runtime.PathsTopOff)
	a.Emit(0x8d, 0x49, byte(d))    // lea d(%rcx),%ecx
	a.Emit(0x65, 0x88, 0x0c, 0x25) // mov %cl,%gs:TOP
	a.u32(runtime.PathsTopOff)
	a.Emit(0x0f, 0xb6, 0xc9) // movzbl %cl,%ecx
}

// slowEnd queues the cold slow end exit slow leads to: undo, the probe
// call (the thunk, behind the gate check; setRSI, when not nil, loads
// %rsi), a jump back to out.
func (a *Asm) slowEnd(slow *exit, probe, entry uint64, setRSI func(*Asm), out uint64) {
	a.later(func(c *Asm) {
		a.toCold(slow, c)
		c.undo()
		var rsi func()
		if setRSI != nil {
			rsi = func() { setRSI(c) }
		}
		c.thunk(probe, entry, rsi)
		c.Jmp(out)
	})
}

// loadRet loads the program's return address into %rsi for a probe call.
func (a *Asm) loadRet() { a.Emit(0x48, 0x8b, 0xb4, 0x24, thunkFrame, 0, 0, 0) } // mov 144(%rsp),%rsi

// pathsPush emits a compact trace's direct call probe: its return
// address ret pushed on the thread's call stack inline, else the call.
// Its exit's stub comes ahead of it (the call's trampoline jumps over it).
//
//	slow: jmp cold ; <keyCheck> ; <topMove +1> ; lea ret(%rip),%rdx ; mov %rdx,%gs:STACK(,%rcx,8)
//	mov %gs:TAIL,%rcx ; lea src(%rip),%rdx ; mov %rdx,(%rcx)
//	mov %gs:TNT,%rdx ; mov (%rdx),%rdx ; mov %rdx,8(%rcx)
//	<undo> ; out: ... ; cold: <undo> ; <thunk> ; jmp out
func (a *Asm) pathsPush(probe, entry, src, ret uint64, slow *exit) {
	a.keyCheckTo(slow)
	a.topMove(1)
	a.Emit(0x48, 0x8d, 0x15) // lea ret(%rip),%rdx
	a.rel32(ret, 0)
	a.Emit(0x65, 0x48, 0x89, 0x14, 0xcd) // mov %rdx,%gs:STACK(,%rcx,8)
	a.u32(runtime.PathsStackOff)
	a.tailAt(src) // this call ran
	a.undo()
	a.slowEnd(slow, probe, entry, nil, a.pc())
}

// tailAt writes the chunk's tail: the silent probe at src ran last, with
// the pending bits then (a thread that dies now got there).
//
//	mov %gs:TAIL,%rcx ; lea src(%rip),%rdx ; mov %rdx,(%rcx)
//	mov %gs:TNT,%rdx ; mov (%rdx),%rdx ; mov %rdx,8(%rcx)
func (a *Asm) tailAt(src uint64) {
	a.Emit(0x65, 0x48, 0x8b, 0x0c, 0x25) // mov %gs:TAIL,%rcx
	a.u32(runtime.PathsTailOff)
	a.Emit(0x48, 0x8d, 0x15) // lea src(%rip),%rdx
	a.rel32(src, 0)
	a.Emit(0x48, 0x89, 0x11)             // mov %rdx,(%rcx)
	a.Emit(0x65, 0x48, 0x8b, 0x14, 0x25) // mov %gs:TNT,%rdx
	a.u32(runtime.PathsTNTOff)
	a.Emit(0x48, 0x8b, 0x12)       // mov (%rdx),%rdx
	a.Emit(0x48, 0x89, 0x51, 0x08) // mov %rdx,8(%rcx)
}

// pathsEntry emits a compact trace's function entry probe: nothing when
// the return address at the program's (%rsp) is the call stack's top (a
// call the stack saw), else the call with it in %rsi.
func (a *Asm) pathsEntry(probe, entry uint64) {
	slow := a.keyCheck()
	a.topCompare(slow)
	a.undo()
	a.slowEnd(slow, probe, entry, (*Asm).loadRet, a.pc())
}

// pathsResume emits a compact trace's resume probe at src: nothing
// while the thread may append inline (it is not outside instrumented
// code); in cold code, when its key says it left through an inline or
// runtime TIP (fs + KEY_OUT) and src is on top of the call stack, the
// runtime's pop (back from the call on top: paths.c), with the key
// taken meanwhile, as an inline TIP takes it; else the call.
//
//	<keyCheck> ; <undo> ; out: ...
//	cold: lea KEY_OUT(%rcx),%rcx ; jrcxz 1f ; jmp slow ; 1: movq $TIP,%gs:KEY
//	movzbl %gs:TOP,%ecx ; mov %gs:STACK(,%rcx,8),%rdx ; not %rdx
//	lea src(%rip),%rcx ; lea 1(%rcx,%rdx),%rcx ; jrcxz pop
//	mov %fs:0,%rcx ; lea KEY_OUT(%rcx),%rcx ; mov %rcx,%gs:KEY ; jmp slow
//	pop: <topMove -1> ; <tailAt src> ; movl $0,%gs:OUTSIDE
//	mov %fs:0,%rcx ; mov %rcx,%gs:KEY ; <undo> ; jmp out
//	slow: <undo> ; <thunk> ; jmp out
func (a *Asm) pathsResume(probe, entry, src uint64) {
	other := a.keyCheck()
	a.undo()
	out := a.pc()
	a.later(func(c *Asm) {
		a.toCold(other, c)
		c.Emit(0x48, 0x8d, 0x49, runtime.PathsKeyOut) // lea KEY_OUT(%rcx),%rcx: 0 when key = fs + KEY_OUT
		c.Emit(0xe3, 0x05)                            // jrcxz over the jmp
		slow := []int{c.jmp32()}
		c.takeKey()
		c.topIs(func() { // lea src(%rip),%rcx
			c.Emit(0x48, 0x8d, 0x0d)
			c.rel32(src, 0)
		})
		c.Emit(0xe3, 0) // jrcxz pop
		pop := c.off() - 1
		c.giveKey(runtime.PathsKeyOut) // given back
		slow = append(slow, c.jmp32())
		c.patchRel8(pop, c.off())
		c.topMove(-1)
		c.tailAt(src)
		c.gsStore32(runtime.PathsOutside, 0)
		c.giveKey(0) // inside again
		c.undo()
		c.Jmp(out)
		c.patchAll(slow, c.pc())
		c.undo()
		c.thunk(probe, entry, nil)
		c.Jmp(out)
	})
}

// pathsRet emits a compact trace's ret probe (the ret follows it): when
// the return address is the call stack's top, pop it and append bit 1
// inline; else the call with the return address in %rsi.
func (a *Asm) pathsRet(probe, entry uint64) {
	slow := a.keyCheck()
	a.topCompare(slow)
	a.topMove(-1)
	a.tntAppend(true)
	a.bitEnd(slow, probe, entry, (*Asm).loadRet)
}
