package rewrite

import (
	"errors"
	"fmt"

	"github.com/stint-project/stint/rewrite/place"
	"github.com/stint-project/stint/runtime"
	"golang.org/x/arch/x86/x86asm"
)

// Trampolines (docs/DESIGN.md §3). Every encoding below has a length that
// does not depend on where it is placed, so a trampoline is sized once
// (with asm.sizing set) and encoded for real once every address is known.

// asm is a tiny x86-64 emitter for the few instructions trampolines use.
type asm struct {
	b      []byte
	base   uint64 // link vaddr of b[0]
	sizing bool   // addresses are placeholders: skip range checks
	gate   uint64 // link vaddr of the gate word (struct stint_module.gate_vaddr)
	err    error

	extraHits []int // rel8 fields of cache compares still to point at the hit path
}

func (a *asm) pc() uint64     { return a.base + uint64(len(a.b)) }
func (a *asm) emit(b ...byte) { a.b = append(a.b, b...) }
func (a *asm) off() int       { return len(a.b) }
func (a *asm) setErr(err error) {
	if a.err == nil {
		a.err = err
	}
}

func (a *asm) u32(v uint32) { a.b = append(a.b, byte(v), byte(v>>8), byte(v>>16), byte(v>>24)) }

// rel32 emits a rel32 field whose instruction ends `after` bytes past the
// field's end (for fields followed by an immediate).
func (a *asm) rel32(target uint64, after int) {
	end := a.pc() + 4 + uint64(after)
	d := int64(target - end)
	if !a.sizing && d != int64(int32(d)) {
		a.setErr(fmt.Errorf("rel32 from %#x to %#x out of range", end, target))
	}
	a.u32(uint32(int32(d)))
}

func (a *asm) jmp(target uint64) { a.emit(0xe9); a.rel32(target, 0) }

// thunk emits the probe call (DESIGN.md §3) behind the gate check: when
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
func (a *asm) thunk(probe, entry uint64, setRSI func()) {
	a.emit(0x48, 0x8d, 0x64, 0x24, 0x80) // lea -0x80(%rsp),%rsp
	a.emit(0x51)                         // push %rcx
	closedField := a.gateCheck()
	a.emit(0x59) // pop %rcx
	a.probeCall(probe, entry, setRSI)
	a.emit(0xeb, 0x01) // jmp out
	a.patchRel8(closedField, a.off())
	a.emit(0x59)                                           // closed: pop %rcx
	a.emit(0x48, 0x8d, 0xa4, 0x24, 0x80, 0x00, 0x00, 0x00) // out: lea 0x80(%rsp),%rsp
}

// gateCheck emits the gate check of stint_abi.h, with %rcx free:
//
//	mov gate(%rip),%rcx ; lea -1(%rcx),%rcx ; jrcxz closed
//
// and returns the offset of the jrcxz's rel8 for the caller to point at
// its closed path. a.gate is the word the site reads: word 1 for sites
// the off-switch may undo (STINT_PATCH_SWITCH), else word 0.
func (a *asm) gateCheck() (closedField int) {
	a.emit(0x48, 0x8b, 0x0d) // mov gate(%rip),%rcx
	a.rel32(a.gate, 0)
	a.emit(0x48, 0x8d, 0x49, 0xff) // lea -1(%rcx),%rcx
	a.emit(0xe3, 0x00)             // jrcxz closed
	return a.off() - 1
}

// callOnly emits the thunk without the gate check, for paths that
// checked the gate already.
func (a *asm) callOnly(probe, entry uint64, setRSI func()) {
	a.emit(0x48, 0x8d, 0x64, 0x24, 0x80) // lea -0x80(%rsp),%rsp
	a.probeCall(probe, entry, setRSI)
	a.emit(0x48, 0x8d, 0xa4, 0x24, 0x80, 0x00, 0x00, 0x00) // lea 0x80(%rsp),%rsp
}

// probeCall emits the call itself, below the red zone: save %rdi and
// %rsi, load the destination or value (setRSI) and the probe, call the
// runtime, restore.
func (a *asm) probeCall(probe, entry uint64, setRSI func()) {
	a.emit(0x57, 0x56) // push %rdi; push %rsi
	if setRSI != nil {
		setRSI()
	}
	a.emit(0x48, 0x8d, 0x3d) // lea probe(%rip),%rdi
	a.rel32(probe, 0)
	a.emit(0xe8) // call stint_probe_entry
	a.rel32(entry, 0)
	a.emit(0x5e, 0x5f) // pop %rsi; pop %rdi
}

// thunkFrame is how far below the program's %rsp a thunk runs.
const thunkFrame = 128 + 16

// pushRet pushes the return address ret as a call would. Fixed-address
// executables with a small address use push imm32; otherwise the address
// is formed rip-relatively (flags untouched: lea/mov/push/pop only).
func (a *asm) pushRet(ret uint64, pic bool) {
	if !pic && ret < 0x80000000 {
		a.emit(0x68)
		a.u32(uint32(ret))
		return
	}
	a.emit(0x48, 0x8d, 0x64, 0x24, 0xf8) // lea -8(%rsp),%rsp
	a.emit(0x50)                         // push %rax
	a.emit(0x48, 0x8d, 0x05)             // lea ret(%rip),%rax
	a.rel32(ret, 0)
	a.emit(0x48, 0x89, 0x44, 0x24, 0x08) // mov %rax,8(%rsp)
	a.emit(0x58)                         // pop %rax
}

// rmOp is the r/m operand of an FF /2 or FF /4 instruction.
type rmOp struct {
	seg      byte // 0x64/0x65 segment prefix or 0
	rex      byte // 0 if none
	mod, rm  byte
	sib      byte
	hasSIB   bool
	disp     int64
	dispSize int
	ripRel   bool
	next     uint64 // address after the original instruction
}

var errIndirectForm = errors.New("unsupported indirect branch operand")

func parseRM(in *place.Inst) (*rmOp, byte, error) {
	b := in.Bytes
	op := &rmOp{next: in.Addr + uint64(len(b))}
	i := 0
	for ; i < len(b); i++ {
		switch c := b[i]; c {
		case 0x64, 0x65:
			op.seg = c
			continue
		case 0x2e, 0x3e, 0x26, 0x36, 0xf2: // notrack / branch hints / bnd: dropped
			continue
		case 0x66, 0x67, 0xf0, 0xf3:
			return nil, 0, errIndirectForm
		}
		break
	}
	if i < len(b) && b[i]&0xf0 == 0x40 {
		op.rex = b[i]
		i++
	}
	if i+2 > len(b) || b[i] != 0xff {
		return nil, 0, errIndirectForm
	}
	m := b[i+1]
	i += 2
	op.mod, op.rm = m>>6, m&7
	reg := (m >> 3) & 7
	if op.mod == 3 {
		if op.rm == 4 && op.rex&1 == 0 {
			return nil, 0, errors.New("indirect branch through %rsp")
		}
		return op, reg, nil
	}
	if op.rm == 4 {
		if i >= len(b) {
			return nil, 0, errIndirectForm
		}
		op.hasSIB, op.sib = true, b[i]
		i++
	}
	switch {
	case op.mod == 1:
		op.dispSize = 1
	case op.mod == 2:
		op.dispSize = 4
	case op.mod == 0 && op.rm == 5:
		op.dispSize, op.ripRel = 4, true
	case op.mod == 0 && op.hasSIB && op.sib&7 == 5:
		op.dispSize = 4
	}
	if i+op.dispSize != len(b) {
		return nil, 0, errIndirectForm
	}
	switch op.dispSize {
	case 1:
		op.disp = int64(int8(b[i]))
	case 4:
		op.disp = int64(int32(le.Uint32(b[i:])))
	}
	return op, reg, nil
}

// rspBased: the operand's base register is %rsp.
func (op *rmOp) rspBased() bool {
	return op.mod != 3 && op.hasSIB && op.sib&7 == 4 && op.rex&1 == 0
}

// encode emits [seg] [REX] opcode modrm [sib] [disp] with the given reg
// field, the same operand as the original evaluated at this location with
// %rsp lower by rspAdj bytes.
func (a *asm) encodeRM(op *rmOp, rexW bool, opcode byte, reg byte, rspAdj int64) {
	if op.seg != 0 && op.mod != 3 {
		a.emit(op.seg)
	}
	rex := op.rex & 0x03 // keep X and B
	if rexW {
		rex |= 0x08
	} else {
		rex |= op.rex & 0x08
	}
	if rex != 0 || op.rex != 0 {
		a.emit(0x40 | rex)
	}
	a.emit(opcode)
	switch {
	case op.mod == 3:
		a.emit(0xc0 | reg<<3 | op.rm)
	case op.ripRel:
		a.emit(reg<<3 | 5)
		a.rel32(op.next+uint64(op.disp), 0)
	case op.rspBased() && rspAdj != 0:
		a.emit(0x80 | reg<<3 | op.rm)
		a.emit(op.sib)
		a.u32(uint32(int32(op.disp + rspAdj)))
	default:
		a.emit(op.mod<<6 | reg<<3 | op.rm)
		if op.hasSIB {
			a.emit(op.sib)
		}
		switch op.dispSize {
		case 1:
			a.emit(byte(op.disp))
		case 4:
			a.u32(uint32(int32(op.disp)))
		}
	}
}

// relocatable reports why an instruction cannot run from a trampoline.
func relocatable(in *place.Inst, k kind) error {
	switch k {
	case kBad:
		return errors.New("undecodable")
	case kFar:
		return errors.New("far transfer or trap")
	case kPCRelOther:
		return errors.New("unsupported pc-relative instruction")
	case kIndJmp, kIndCall:
		op, _, err := parseRM(in)
		if err != nil {
			return err
		}
		if k == kIndCall && op.rspBased() && op.disp < 0 {
			return errors.New("indirect call through memory below %rsp")
		}
	}
	return nil
}

// relocate emits instruction in (kind k, direct target tgt) so that it
// behaves as at its original address, then jumps back unless control
// never falls through.
func (a *asm) relocate(in *place.Inst, k kind, tgt uint64, pic bool) {
	next := in.Addr + uint64(in.Len())
	b := in.Bytes
	switch k {
	case kJcc:
		a.emit(0x0f, 0x80|jccCond(b))
		a.rel32(tgt, 0)
		a.jmp(next)
	case kJcxz:
		a.jcxz(b, next, tgt)
	case kJmp:
		a.jmp(tgt)
	case kCall:
		a.pushRet(next, pic)
		a.jmp(tgt)
	case kRet:
		a.emit(b...)
	case kIndJmp:
		op, _, err := parseRM(in)
		if err != nil {
			a.setErr(err)
			return
		}
		a.encodeRM(op, false, 0xff, 4, 0)
	case kIndCall:
		op, _, err := parseRM(in)
		if err != nil {
			a.setErr(err)
			return
		}
		a.pushRet(next, pic)
		a.encodeRM(op, false, 0xff, 4, 8)
	default:
		a.relocateBody(in)
		a.jmp(next)
	}
}

// relocateBody emits instruction in (one that is no branch) so that it
// behaves as at its original address: its rip-relative operand, if
// any, is fixed; nothing follows it.
func (a *asm) relocateBody(in *place.Inst) {
	next := in.Addr + uint64(in.Len())
	b := in.Bytes
	{
		d, ok := decodeOne(b)
		start := a.off()
		a.emit(b...)
		if ok && d.PCRel == 4 {
			// RIP-relative memory operand: fix the displacement.
			disp := int64(int32(le.Uint32(b[d.PCRelOff:])))
			target := next + uint64(disp)
			newEnd := a.pc()
			nd := int64(target - newEnd)
			if !a.sizing && nd != int64(int32(nd)) {
				a.setErr(fmt.Errorf("rip-relative operand of %#x out of range", in.Addr))
			}
			le.PutUint32(a.b[start+d.PCRelOff:], uint32(int32(nd)))
		} else if ok && d.PCRel != 0 {
			a.setErr(fmt.Errorf("unsupported pc-relative operand at %#x", in.Addr))
		}
	}
}

// jccCond returns the condition code of a jcc (7x rel8 or 0f 8x rel32).
// A jcc's rel field is its last 1 or 4 bytes; the opcode precedes it.
func jccCond(b []byte) byte {
	if len(b) >= 6 && b[len(b)-6] == 0x0f && b[len(b)-5]&0xf0 == 0x80 {
		return b[len(b)-5] & 0x0f
	}
	return b[len(b)-2] & 0x0f
}

// jcxz emits op(+prefix) rel8 -> over; jmp notTaken; over: jmp taken.
// It returns the offsets of the two rel32 fields.
func (a *asm) jcxz(b []byte, notTaken, taken uint64) (ntField, tField int) {
	a.emit(b[:len(b)-1]...) // prefixes + opcode
	a.emit(5)
	ntField = a.off() + 1
	a.jmp(notTaken)
	tField = a.off() + 1
	a.jmp(taken)
	return
}

// siteProbe describes one probe of a site, before layout.
type siteProbe struct {
	kind  uint8
	flags uint8
	dst   uint64 // link vaddr if direct
	arm   int    // offset of the arm's rel32 in the trampoline, -1 = none
	armTo uint64 // link vaddr
}

// Probe kinds (STINT_K_*) and flags (STINT_PF_*).
const (
	kJccTaken    = 1
	kJccNotTaken = 2
	kDirJmp      = 3
	kDirCall     = 4
	kRetKind     = 5
	kIndJmpKind  = 6
	kIndCallKind = 7
	kSyscallKind = 8
	kBlockKind   = 9

	pfDirect = runtime.PFDirect
	pfValue  = runtime.PFValue
	pfSlot   = runtime.PFSlot // dst is the slot of a jmp/call *disp(%rip); see rewriter.stableSlot
)

// siteTramp emits the probe trampoline of a site. probes holds the link
// vaddrs of the site's probes (placeholders when sizing); it returns the
// probe descriptions.
func (a *asm) siteTramp(t Tool, in *place.Inst, k kind, tgt uint64, probes []uint64, entry uint64, pic bool) []siteProbe {
	next := in.Addr + uint64(in.Len())
	p := func(i int) uint64 {
		if i < len(probes) {
			return probes[i]
		}
		return 0
	}
	if t == ToolBlock {
		a.emit(0xe9)
		arm := a.off()
		a.rel32(a.pc()+4, 0)
		a.thunk(p(0), entry, nil)
		body := a.pc()
		a.relocate(in, k, tgt, pic)
		return []siteProbe{{kind: kBlockKind, flags: pfDirect, dst: in.Addr, arm: arm, armTo: body}}
	}
	switch k {
	case kJcc, kJcxz:
		var tArm, ntArm int
		// Placeholders for the thunk addresses; patched below.
		if k == kJcc {
			a.emit(0x0f, 0x80|jccCond(in.Bytes))
			tArm = a.off()
			a.u32(0)
			a.emit(0xe9)
			ntArm = a.off()
			a.u32(0)
		} else {
			ntArm, tArm = a.jcxzPlaceholder(in.Bytes)
		}
		thunkT := a.pc()
		a.thunk(p(0), entry, nil)
		a.jmp(tgt)
		thunkNT := a.pc()
		a.thunk(p(1), entry, nil)
		a.jmp(next)
		a.patchRel(tArm, thunkT)
		a.patchRel(ntArm, thunkNT)
		return []siteProbe{
			{kind: kJccTaken, flags: pfDirect, dst: tgt, arm: tArm, armTo: tgt},
			{kind: kJccNotTaken, flags: pfDirect, dst: next, arm: ntArm, armTo: next},
		}
	case kJmp, kCall:
		a.emit(0xe9)
		arm := a.off()
		a.rel32(a.pc()+4, 0)
		a.thunk(p(0), entry, nil)
		body := a.pc()
		if k == kJmp {
			a.jmp(tgt)
			return []siteProbe{{kind: kDirJmp, flags: pfDirect, dst: tgt, arm: arm, armTo: tgt}}
		}
		a.pushRet(next, pic)
		a.jmp(tgt)
		return []siteProbe{{kind: kDirCall, flags: pfDirect, dst: tgt, arm: arm, armTo: body}}
	case kRet:
		gateField := a.retCacheCheck(p(0))
		hitField := a.off() - 1
		a.cacheRestore()
		a.callOnly(p(0), entry, func() {
			a.emit(0x48, 0x8b, 0xb4, 0x24, thunkFrame, 0, 0, 0) // mov 144(%rsp),%rsi
		})
		a.emit(in.Bytes...)
		a.patchRel8(hitField, a.off())
		a.patchRel8(gateField, a.off())
		a.patchExtraHits()
		a.cacheRestore()
		a.emit(in.Bytes...)
		return []siteProbe{{kind: kRetKind, arm: -1}}
	case kIndJmp, kIndCall:
		sp, ok := a.indirectThunk(in, k, p(0), entry, func() { a.relocate(in, k, tgt, pic) })
		if !ok {
			return nil
		}
		return []siteProbe{sp}
	case kSyscall:
		a.thunk(p(0), entry, func() {
			a.emit(0x48, 0x89, 0xc6) // mov %rax,%rsi
		})
		a.relocate(in, k, tgt, pic)
		return []siteProbe{{kind: kSyscallKind, flags: pfValue, arm: -1}}
	}
	a.setErr(fmt.Errorf("no trampoline for %v", k))
	return nil
}

// indirectThunk emits the probe of indirect jmp or call in (kind k)
// with an inline cache check between loading %rsi and the call:
//
//	<thunk up to %rsi> ; push %rcx ; compare %rsi with cache ;
//	jrcxz hit ; pop %rcx ; <rest of thunk> ; exit
//	hit: pop %rcx ; pop %rsi ; pop %rdi ; lea 0x80(%rsp),%rsp ; exit
//
// exit emits what follows the probe on both paths and never falls
// through: the relocated original, or a jump back to it (preCallTramp).
func (a *asm) indirectThunk(in *place.Inst, k kind, probe, entry uint64, exit func()) (siteProbe, bool) {
	op, _, err := parseRM(in)
	if err != nil {
		a.setErr(err)
		return siteProbe{}, false
	}
	a.emit(0x48, 0x8d, 0x64, 0x24, 0x80) // lea -0x80(%rsp),%rsp
	a.emit(0x57, 0x56)                   // push %rdi; push %rsi
	if op.mod == 3 {
		a.encodeRM(op, true, 0x8b, 6, 0) // mov %reg,%rsi
	} else {
		a.encodeRM(op, true, 0x8b, 6, thunkFrame) // mov OP,%rsi
	}
	a.emit(0x51)               // push %rcx
	gateField := a.gateCheck() // closed: to the hit path
	a.cacheCompares(probe, sibBaseRSI)
	hitField := a.extraHits[len(a.extraHits)-1]
	a.extraHits = a.extraHits[:len(a.extraHits)-1]
	a.emit(0x59)             // pop %rcx
	a.emit(0x48, 0x8d, 0x3d) // lea probe(%rip),%rdi
	a.rel32(probe, 0)
	a.emit(0xe8) // call stint_probe_entry
	a.rel32(entry, 0)
	a.emit(0x5e, 0x5f)                                     // pop %rsi; pop %rdi
	a.emit(0x48, 0x8d, 0xa4, 0x24, 0x80, 0x00, 0x00, 0x00) // lea 0x80(%rsp),%rsp
	exit()
	a.patchRel8(hitField, a.off())
	a.patchRel8(gateField, a.off())
	a.patchExtraHits()
	a.emit(0x59, 0x5e, 0x5f)                               // pop %rcx; pop %rsi; pop %rdi
	a.emit(0x48, 0x8d, 0xa4, 0x24, 0x80, 0x00, 0x00, 0x00) // lea 0x80(%rsp),%rsp
	exit()
	sp := siteProbe{kind: kIndJmpKind, arm: -1}
	if k == kIndCall {
		sp.kind = kIndCallKind
	}
	if op.ripRel && op.seg == 0 {
		sp.flags, sp.dst = pfSlot, uint64(int64(op.next)+op.disp)
	}
	return sp, true
}

// preCallTramp emits the trampoline of a pre-call site (rewriter.
// preCall): instruction in (kind k), patched, runs here, then the probe
// of the indirect call that follows it, with the call's operand as it
// now stands, then a jump back to the call, which runs in place. A call
// emulated in a trampoline (push the return address, jmp) leaves the
// return-stack predictor one entry short, so the callee's ret and every
// ret above it mispredict; run in place, the call pushes what its ret
// will pop, and the program still sees its own return address.
func (a *asm) preCallTramp(in *place.Inst, k kind, call *place.Inst, probes []uint64, entry uint64, pic bool) []siteProbe {
	var probe uint64
	if len(probes) > 0 {
		probe = probes[0]
	}
	if k != kOther {
		a.setErr(fmt.Errorf("%v at %#x is not a plain instruction", k, in.Addr))
		return nil
	}
	a.relocateBody(in)
	sp, ok := a.indirectThunk(call, kIndCall, probe, entry, func() { a.jmp(call.Addr) })
	if !ok {
		return nil
	}
	return []siteProbe{sp}
}

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
func (a *asm) cacheCompares(probe uint64, sib byte) {
	for _, off := range append([]uint64{probeCacheOff}, probeCacheMore...) {
		a.emit(0x48, 0x8b, 0x0d) // mov cacheN(%rip),%rcx
		a.rel32(probe+off, 0)
		a.emit(0x48, 0xf7, 0xd1)            // not %rcx
		a.emit(0x48, 0x8d, 0x4c, sib, 0x01) // lea 1(%reg,%rcx),%rcx
		a.emit(0xe3, 0x00)                  // jrcxz hit
		a.extraHits = append(a.extraHits, a.off()-1)
	}
}

// probeCacheOff is offsetof(struct stint_probe, cache); with cache2 and,
// in probes without a direct destination, the arm and arm_to fields, the
// four destinations an indirect or ret probe recorded last, most recent
// first, which the inline check compares in turn (probeCacheMore: the
// other three).
const (
	probeCacheOff  = 48
	probeCache2Off = 56
)

var probeCacheMore = []uint64{probeCache2Off, 16, 24}

// patchExtraHits points the pending hit jumps of the first cache compare
// at the current offset.
func (a *asm) patchExtraHits() {
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
func (a *asm) retCacheCheck(probe uint64) (gateField int) {
	a.emit(0x48, 0x8d, 0x64, 0x24, 0x80)                   // lea -0x80(%rsp),%rsp
	a.emit(0x50, 0x51)                                     // push %rax; push %rcx
	gateField = a.gateCheck()                              // closed: to the hit path
	a.emit(0x48, 0x8b, 0x84, 0x24, 0x90, 0x00, 0x00, 0x00) // mov 0x90(%rsp),%rax
	a.cacheCompares(probe, sibBaseRAX)
	a.extraHits = a.extraHits[:len(a.extraHits)-1] // the last is the caller's hit field
	return gateField
}

// cacheRestore undoes retCacheCheck's stack changes.
func (a *asm) cacheRestore() {
	a.emit(0x59, 0x58)                                     // pop %rcx; pop %rax
	a.emit(0x48, 0x8d, 0xa4, 0x24, 0x80, 0x00, 0x00, 0x00) // lea 0x80(%rsp),%rsp
}

// patchRel8 sets the rel8 field at offset off to reach offset to.
func (a *asm) patchRel8(off, to int) {
	d := to - (off + 1)
	if d != int(int8(d)) {
		a.setErr(fmt.Errorf("rel8 of %d bytes out of range", d))
	}
	a.b[off] = byte(int8(d))
}

func (a *asm) jcxzPlaceholder(b []byte) (ntField, tField int) {
	a.emit(b[:len(b)-1]...)
	a.emit(5)
	a.emit(0xe9)
	ntField = a.off()
	a.u32(0)
	a.emit(0xe9)
	tField = a.off()
	a.u32(0)
	return
}

// patchRel sets the rel32 field at offset off to reach target.
func (a *asm) patchRel(off int, target uint64) {
	end := a.base + uint64(off) + 4
	d := int64(target - end)
	if !a.sizing && d != int64(int32(d)) {
		a.setErr(fmt.Errorf("rel32 to %#x out of range", target))
	}
	le.PutUint32(a.b[off:], uint32(int32(d)))
}

// nprobes returns how many probes a site of kind k has.
func nprobes(t Tool, k kind) int {
	if t != ToolBlock && (k == kJcc || k == kJcxz) {
		return 2
	}
	return 1
}

func (k kind) String() string {
	return [...]string{"bad", "other", "jcc", "jcxz", "jmp", "call", "ret", "indirect jmp", "indirect call", "syscall", "far", "pc-relative"}[k]
}

var _ = x86asm.NOP
