package tramp

import (
	"github.com/stint-project/stint/rewrite/facts"
	"github.com/stint-project/stint/rewrite/place"
	"github.com/stint-project/stint/runtime"
)

// tipFrame is how far below the program's %rsp an inline TIP runs: the
// red zone and %rax, %rcx, %rdx, %rsi, %rdi.
const tipFrame = 128 + 40

// pathsIndirect emits a compact trace's indirect jmp or call (in,
// facts.Kind k) with its TIP appended inline (INS-OP's partial payload
// inlining for the packet the runtime wrote on every indirect branch):
// for a call its return address ret pushed on the thread's call stack,
// the pending bits flushed as a TNT packet, then the destination XOR the
// last address in as few bytes as it needs, as pk_tip does; branch
// emits the branch (relocated, or a jump back to it for a pre-call site). The
// flags are saved with lahf and seto (DynamoRIO's way: popf is slow) and
// restored with add and sahf. It goes to the runtime, in the cold code,
// when the block is not this thread's, the destination leaves the
// module's code (the thread goes outside), a PSB is due, or the chunk
// has under 32 bytes left.
func (a *Asm) pathsIndirect(in *place.Inst, k facts.Kind, probe, entry, ret uint64, branch func(c *Asm)) (Probe, bool) {
	op, _, err := facts.ParseRM(in)
	if err != nil {
		a.setErr(err)
		return Probe{}, false
	}
	load := func(c *Asm, frame int64) func() {
		return func() { c.encodeRM(op, true, 0x8b, 6, frame) } // mov OP,%rsi
	}
	push := func(c *Asm) {
		if k == facts.IndCall {
			c.topMove(1)
			c.Emit(0x48, 0x8d, 0x3d) // lea ret(%rip),%rdi
			c.rel32(ret, 0)
			c.Emit(0x65, 0x48, 0x89, 0x3c, 0xcd) // mov %rdi,%gs:STACK(,%rcx,8)
			c.u32(runtime.PathsStackOff)
		}
	}
	slow := a.tipEnter(load(a, tipFrame))
	out, taken := a.tipChecks()
	push(a)
	a.tipFlush()
	a.tipAppend(pktTIP)
	a.tipLeave()
	branch(a)
	takenAt := a.tipCold(taken, slow, func(c *Asm) {
		c.thunk(probe, entry, load(c, thunkFrame))
		branch(c)
	})
	a.later(func(c *Asm) {
		a.PatchRel(out, c.pc())
		c.tipLeaves(*takenAt, push)
		branch(c)
	})
	sp := Probe{Kind: runtime.KIndJmp, Arm: -1}
	if k == facts.IndCall {
		sp.Kind = runtime.KIndCall
	}
	return sp, true
}

// tipEnter starts an inline TIP append: below the red zone, %rax, %rcx,
// %rdx, %rsi and %rdi saved, load run (when not nil: it loads %rsi),
// the flags saved with lahf and seto (DynamoRIO's way: popf is slow),
// and the key taken when the thread block is this thread's: it then
// says an inline TIP appends (%fs is never STINT_PATHS_KEY_TIP), so the
// thread's own probes in a signal handler meanwhile call the runtime,
// which counts them lost, as while it appends itself. It returns the
// jumps to the slow path taken before the key is.
func (a *Asm) tipEnter(load func()) (slow []int) {
	a.Emit(0x48, 0x8d, 0x64, 0x24, 0x80) // lea -0x80(%rsp),%rsp
	a.Emit(0x50, 0x51, 0x52, 0x56, 0x57) // push %rax, %rcx, %rdx, %rsi, %rdi
	if load != nil {
		load()
	}
	a.Emit(0x9f, 0x0f, 0x90, 0xc0) // lahf ; seto %al
	a.tipThreadBase()
	if a.Static {
		slow = append(slow, a.tipNoBlock())
	}
	a.gsOp(0x3b, 0x0c, runtime.PathsKeyOff) // cmp %gs:KEY,%rcx
	slow = append(slow, a.jcc32(0x85))      // jne slow
	a.takeKey()
	return slow
}

// tipLeave gives the key back and restores what tipEnter saved.
func (a *Asm) tipLeave() {
	a.giveKey(0)
	a.tipRestore()
}

// takeKey makes the block's key STINT_PATHS_KEY_TIP (%fs never is), so
// that the thread's probes in a signal handler meanwhile call the
// runtime, which counts them lost.
//
//	movq $TIP,%gs:KEY
func (a *Asm) takeKey() {
	a.Emit(0x65, 0x48, 0xc7, 0x04, 0x25)
	a.u32(runtime.PathsKeyOff)
	a.u32(runtime.PathsKeyTIP)
}

// giveKey sets the key to the thread's %fs base plus off (0: inside,
// runtime.PathsKeyOut: outside), leaving that in %rcx.
//
//	<%fs base> ; [lea off(%rcx),%rcx] ; mov %rcx,%gs:KEY
func (a *Asm) giveKey(off byte) {
	a.tipThreadBase()
	if off != 0 {
		a.Emit(0x48, 0x8d, 0x49, off) // lea off(%rcx),%rcx
	}
	a.gsOp(0x89, 0x0c, runtime.PathsKeyOff) // mov %rcx,%gs:KEY
}

// tipCold queues the slow path of an inline TIP append: the jumps taken
// with the key taken give it back, then with slow's restore what
// tipEnter saved and go on with then (the probe call and what follows).
// It returns where the taken jumps land, known once the cold code is
// emitted (for cold code queued after it).
func (a *Asm) tipCold(taken, slow []int, then func(c *Asm)) (takenAt *uint64) {
	takenAt = new(uint64)
	a.later(func(c *Asm) {
		*takenAt = c.pc()
		a.patchAll(taken, c.pc())
		c.giveKey(0)
		a.patchAll(slow, c.pc())
		c.tipRestore()
		then(c)
	})
	return takenAt
}

// tipThreadBase loads the thread's %fs base into %rcx (flags saved).
func (a *Asm) tipThreadBase() {
	if a.Static {
		a.Emit(0xf3, 0x48, 0x0f, 0xae, 0xc1) // rdfsbase %rcx
		return
	}
	a.Emit(0x64, 0x48, 0x8b, 0x0c, 0x25) // mov %fs:0,%rcx
	a.u32(0)
}

// tipNoBlock, in a static executable, goes to the slow path when the
// thread has no block yet (%gs is 0), then reloads %fs's base; it
// returns the rel32 field of that jump.
func (a *Asm) tipNoBlock() int {
	a.Emit(0xf3, 0x48, 0x0f, 0xae, 0xc9) // rdgsbase %rcx
	a.Emit(0x48, 0x85, 0xc9)             // test %rcx,%rcx
	f := a.jcc32(0x84)                   // jz slow
	a.tipThreadBase()
	return f
}

// tipChecks, with the key taken, goes to the jump out when the
// destination in %rsi lies outside [TextLo, TextHi), and to the
// returned jumps taken when there is no room (roomChecks); it leaves
// the chunk's cursor in %rdx.
//
//	<textCheck jae out> ; <roomChecks>
func (a *Asm) tipChecks() (out int, taken []int) {
	out = a.textCheck(0x83) // jae out
	return out, a.roomChecks()
}

// textCheck compares the destination in %rsi with the module's code
// [TextLo, TextHi) and emits jcc op (0x83 jae: outside, 0x82 jb: inside)
// whose rel32 field it returns.
//
//	lea textLo(%rip),%rcx ; mov %rsi,%rdx ; sub %rcx,%rdx ; cmp $SIZE,%rdx ; jcc
func (a *Asm) textCheck(op byte) int {
	a.Emit(0x48, 0x8d, 0x0d) // lea textLo(%rip),%rcx
	a.rel32(a.TextLo, 0)
	a.Emit(0x48, 0x89, 0xf2, 0x48, 0x29, 0xca) // mov %rsi,%rdx ; sub %rcx,%rdx
	a.Emit(0x48, 0x81, 0xfa)                   // cmp $SIZE,%rdx
	a.u32(uint32(a.TextHi - a.TextLo))
	return a.jcc32(op)
}

// outRange goes to taken unless the destination in %rsi lies in the
// thread's out range (a module without probes that the runtime has put
// in the module table: paths.c, paths_inside_out).
//
//	mov %rsi,%rdx ; sub %gs:OUT_LO,%rdx ; cmp %gs:OUT_SIZE,%rdx ; jae taken
func (a *Asm) outRange(taken uint64) {
	a.Emit(0x48, 0x89, 0xf2)                  // mov %rsi,%rdx
	a.gsOp(0x2b, 0x14, runtime.PathsOutLoOff) // sub %gs:OUT_LO,%rdx
	a.gsOp(0x3b, 0x14, runtime.PathsOutSzOff) // cmp %gs:OUT_SIZE,%rdx
	a.PatchRel(a.jcc32(0x83), taken)          // jae taken
}

// tipLeaves, cold code that tipChecks's jump out reaches, appends the
// TIP of a destination %rsi outside the module's code when it lies in
// the thread's out range (the runtime's last leave found a module
// without probes there, paths.c): the thread leaves instrumented code,
// as the runtime's paths_leave would have it, its key then fs +
// KEY_OUT (its resume probe pops inline). Elsewhere, or when the room
// checks fail, to taken (the slow path, with the key taken). push
// emits what an indirect call does before its TIP.
//
//	mov %rsi,%rdx ; sub %gs:OUT_LO,%rdx ; cmp %gs:OUT_SIZE,%rdx ; jae taken
//	<roomChecks> ; <push> ; <tipFlush> ; <tipAppend> ; movl $1,%gs:OUTSIDE
//	mov %fs:0,%rcx ; lea KEY_OUT(%rcx),%rcx ; mov %rcx,%gs:KEY ; <tipRestore>
func (a *Asm) tipLeaves(taken uint64, push func(c *Asm)) {
	a.outRange(taken)
	for _, f := range a.roomChecks() {
		a.PatchRel(f, taken)
	}
	push(a)
	a.tipFlush()
	a.tipAppend(pktTIP)
	a.gsStore32(runtime.PathsOutside, 1)
	a.giveKey(runtime.PathsKeyOut)
	a.tipRestore()
}

// gsStore32 stores the 32-bit v at %gs:off (flags untouched).
func (a *Asm) gsStore32(off, v uint32) {
	a.Emit(0x65, 0xc7, 0x04, 0x25) // movl $v,%gs:off
	a.u32(off)
	a.u32(v)
}

// roomChecks goes to the returned jump when the runtime's count of
// inline appends left (STINT_PATHS_ROOM_OFF: none while a PSB is due,
// and none within 32 bytes of the chunk's end) has under
// STINT_PATHS_ROOM_TIP units, else takes them; it leaves the chunk's
// cursor in %rdx. The flags are saved.
//
//	mov %gs:ROOM,%rcx ; cmp $TIP,%rcx ; jb ; lea -TIP(%rcx),%rcx ; mov %rcx,%gs:ROOM ; mov %gs:CUR,%rdx
func (a *Asm) roomChecks() []int {
	a.gsOp(0x8b, 0x0c, runtime.PathsRoomOff)             // mov %gs:ROOM,%rcx
	a.Emit(0x48, 0x83, 0xf9, runtime.PathsRoomTIP)       // cmp $TIP,%rcx
	out := []int{a.jcc32(0x82)}                          // jb
	a.Emit(0x48, 0x8d, 0x49, 0x100-runtime.PathsRoomTIP) // lea -TIP(%rcx),%rcx
	a.gsOp(0x89, 0x0c, runtime.PathsRoomOff)             // mov %rcx,%gs:ROOM
	a.gsOp(0x8b, 0x14, runtime.PathsCurOff)              // mov %gs:CUR,%rdx
	return out
}

// tipFlush writes the pending bits (their word's address in %rdi) at
// the cursor %rdx as a short TNT (up to 6 bits) or a TNT of as many
// bytes as they and their leading 1 take (8 stored, the ones past those
// 0), and empties the word, as pk_flush does.
//
//	mov %gs:TNT,%rdi ; mov (%rdi),%rcx ; cmp $1,%rcx ; jbe done
//	movq $1,(%rdi) ; cmp $0x7f,%rcx ; ja long
//	lea 1(%rcx,%rcx),%ecx ; mov %cl,(%rdx) ; lea 1(%rdx),%rdx ; jmp done
//	long: mov %rcx,1(%rdx) ; bsr %rcx,%rcx ; shr $3,%ecx
//	lea 0x42(%rcx,%rcx),%edi ; mov %dil,(%rdx) ; lea 2(%rdx,%rcx),%rdx
//	done:
func (a *Asm) tipFlush() {
	a.gsOp(0x8b, 0x3c, runtime.PathsTNTOff) // mov %gs:TNT,%rdi
	a.Emit(0x48, 0x8b, 0x0f)                // mov (%rdi),%rcx
	a.Emit(0x48, 0x83, 0xf9, 0x01, 0x76, 0) // cmp $1,%rcx ; jbe done
	done := a.off() - 1
	a.Emit(0x48, 0xc7, 0x07, 1, 0, 0, 0)    // movq $1,(%rdi)
	a.Emit(0x48, 0x83, 0xf9, 0x7f, 0x77, 0) // cmp $0x7f,%rcx ; ja long
	long := a.off() - 1
	a.Emit(0x8d, 0x4c, 0x09, 0x01, 0x88, 0x0a) // lea 1(%rcx,%rcx),%ecx ; mov %cl,(%rdx)
	a.Emit(0x48, 0x8d, 0x52, 0x01, 0xeb, 0)    // lea 1(%rdx),%rdx ; jmp done
	short := a.off() - 1
	a.patchRel8(long, a.off())
	a.Emit(0x48, 0x89, 0x4a, 0x01)                       // mov %rcx,1(%rdx)
	a.Emit(0x48, 0x0f, 0xbd, 0xc9, 0xc1, 0xe9, 0x03)     // bsr %rcx,%rcx ; shr $3,%ecx
	a.Emit(0x8d, 0x7c, 0x09, pktTNT+2, 0x40, 0x88, 0x3a) // lea 0x42(%rcx,%rcx),%edi ; mov %dil,(%rdx)
	a.Emit(0x48, 0x8d, 0x54, 0x0a, 0x02)                 // lea 2(%rdx,%rcx),%rdx
	a.patchRel8(done, a.off())
	a.patchRel8(short, a.off())
}

// Packet opcodes (formats/packets.go).
const (
	pktTNT    = 0x40
	pktTIP    = 0x20
	pktRetTIP = 0x60
)

// tipAppend writes a TIP (op pktTIP) or RET_TIP (pktRetTIP) of the
// address %rsi at the cursor %rdx: the address XOR the last address, k =
// its significant bytes, as op+2k and those k bytes (8 are stored: the
// ones past k are 0, the PAD the chunk holds there); then the cursor,
// the last address, and the chunk's tail (no silent probe since this
// packet, no pending bits).
//
//	mov %gs:LAST,%rcx ; xor %rsi,%rcx ; mov %rsi,%gs:LAST
//	xor %edi,%edi ; test %rcx,%rcx ; jz k0 ; bsr %rcx,%rdi ; shr $3,%edi ; lea 1(%rdi),%edi
//	k0: mov %rcx,1(%rdx) ; lea op(%rdi,%rdi),%ecx ; mov %cl,(%rdx)
//	lea 1(%rdx,%rdi),%rdx ; mov %rdx,%gs:CUR
//	mov %gs:TAIL,%rcx ; movq $0,(%rcx) ; movq $1,8(%rcx)
func (a *Asm) tipAppend(op byte) {
	a.gsOp(0x8b, 0x0c, runtime.PathsLastOff) // mov %gs:LAST,%rcx
	a.Emit(0x48, 0x31, 0xf1)                 // xor %rsi,%rcx
	a.gsOp(0x89, 0x34, runtime.PathsLastOff) // mov %rsi,%gs:LAST
	a.Emit(0x31, 0xff, 0x48, 0x85, 0xc9)     // xor %edi,%edi ; test %rcx,%rcx
	a.Emit(0x74, 0)                          // jz k0
	k0 := a.off() - 1
	a.Emit(0x48, 0x0f, 0xbd, 0xf9, 0xc1, 0xef, 0x03, 0x8d, 0x7f, 0x01) // bsr %rcx,%rdi ; shr $3,%edi ; lea 1(%rdi),%edi
	a.patchRel8(k0, a.off())
	a.Emit(0x48, 0x89, 0x4a, 0x01)             // mov %rcx,1(%rdx)
	a.Emit(0x8d, 0x4c, 0x3f, op, 0x88, 0x0a)   // lea op(%rdi,%rdi),%ecx ; mov %cl,(%rdx)
	a.Emit(0x48, 0x8d, 0x54, 0x3a, 0x01)       // lea 1(%rdx,%rdi),%rdx
	a.gsOp(0x89, 0x14, runtime.PathsCurOff)    // mov %rdx,%gs:CUR
	a.gsOp(0x8b, 0x0c, runtime.PathsTailOff)   // mov %gs:TAIL,%rcx
	a.Emit(0x48, 0xc7, 0x01, 0, 0, 0, 0)       // movq $0,(%rcx)
	a.Emit(0x48, 0xc7, 0x41, 0x08, 1, 0, 0, 0) // movq $1,8(%rcx)
}

// tipRestore gives the flags and the registers back and steps back over
// the red zone.
//
//	add $0x7f,%al ; sahf ; pop %rdi, %rsi, %rdx, %rcx, %rax ; lea 0x80(%rsp),%rsp
func (a *Asm) tipRestore() {
	a.Emit(0x04, 0x7f, 0x9e)
	a.Emit(0x5f, 0x5e, 0x5a, 0x59, 0x58)
	a.Emit(0x48, 0x8d, 0xa4, 0x24, 0x80, 0x00, 0x00, 0x00)
}

// gsOp emits a REX.W op with a %gs:disp32 operand and ModRM byte modrm
// (its reg field set, r/m = SIB, no base, no index).
func (a *Asm) gsOp(op, modrm byte, disp uint32) {
	a.Emit(0x65, 0x48, op, modrm, 0x25)
	a.u32(disp)
}

// jcc32 emits a jcc rel32 (0x0f, op) whose field is patched later, and
// returns the field.
func (a *Asm) jcc32(op byte) int {
	a.Emit(0x0f, op)
	f := a.off()
	a.u32(0)
	return f
}
