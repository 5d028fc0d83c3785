package tramp

import (
	"fmt"

	"github.com/stint-project/stint/rewrite/elfin"
	"github.com/stint-project/stint/rewrite/facts"
	"github.com/stint-project/stint/rewrite/place"
)

// pushRet pushes the return address ret as a call would. Fixed-address
// executables with a small address use push imm32; otherwise the address
// is formed rip-relatively (flags untouched: lea/mov/push/pop only).
func (a *Asm) pushRet(ret uint64, pic bool) {
	if !pic && ret < 0x80000000 {
		a.Emit(0x68)
		a.u32(uint32(ret))
		return
	}
	a.Emit(0x48, 0x8d, 0x64, 0x24, 0xf8) // lea -8(%rsp),%rsp
	a.Emit(0x50)                         // push %rax
	a.Emit(0x48, 0x8d, 0x05)             // lea ret(%rip),%rax
	a.rel32(ret, 0)
	a.Emit(0x48, 0x89, 0x44, 0x24, 0x08) // mov %rax,8(%rsp)
	a.Emit(0x58)                         // pop %rax
}

// encode emits [seg] [REX] opcode modrm [sib] [disp] with the given reg
// field, the same operand as the original evaluated at this location with
// %rsp lower by rspAdj bytes.
func (a *Asm) encodeRM(op *facts.RMOp, rexW bool, opcode byte, reg byte, rspAdj int64) {
	if op.Seg != 0 && op.Mod != 3 {
		a.Emit(op.Seg)
	}
	rex := op.Rex & 0x03 // keep X and B
	if rexW {
		rex |= 0x08
	} else {
		rex |= op.Rex & 0x08
	}
	if rex != 0 || op.Rex != 0 {
		a.Emit(0x40 | rex)
	}
	a.Emit(opcode)
	switch {
	case op.Mod == 3:
		a.Emit(0xc0 | reg<<3 | op.RM)
	case op.RIPRel:
		a.Emit(reg<<3 | 5)
		a.rel32(op.Next+uint64(op.Disp), 0)
	case op.RSPBased() && rspAdj != 0:
		a.Emit(0x80 | reg<<3 | op.RM)
		a.Emit(op.SIB)
		a.u32(uint32(int32(op.Disp + rspAdj)))
	default:
		a.Emit(op.Mod<<6 | reg<<3 | op.RM)
		if op.HasSIB {
			a.Emit(op.SIB)
		}
		switch op.DispSize {
		case 1:
			a.Emit(byte(op.Disp))
		case 4:
			a.u32(uint32(int32(op.Disp)))
		}
	}
}

// relocate emits instruction in (facts.Kind k, direct target tgt) so that it
// behaves as at its original address, then jumps back unless control
// never falls through.
func (a *Asm) Relocate(in *place.Inst, k facts.Kind, tgt uint64, pic bool) {
	a.relocateOn(in, k, tgt, in.Addr+uint64(in.Len()), pic)
}

// relocateOn is Relocate with execution going on at on, where it falls
// through: the instruction after in, or a trampoline that runs it (a
// call still pushes the original return address).
func (a *Asm) relocateOn(in *place.Inst, k facts.Kind, tgt, on uint64, pic bool) {
	next := in.Addr + uint64(in.Len())
	b := in.Bytes()
	switch k {
	case facts.Jcc:
		a.jccTo(in, tgt)
		a.Jmp(on)
	case facts.Jcxz:
		a.jcxz(b, on, tgt)
	case facts.Jmp:
		a.Jmp(tgt)
	case facts.Call:
		a.pushRet(next, pic)
		a.Jmp(tgt)
	case facts.Ret:
		a.Emit(b...)
	case facts.IndJmp:
		op, _, err := facts.ParseRM(in)
		if err != nil {
			a.setErr(err)
			return
		}
		a.encodeRM(op, false, 0xff, 4, 0)
	case facts.IndCall:
		op, _, err := facts.ParseRM(in)
		if err != nil {
			a.setErr(err)
			return
		}
		a.pushRet(next, pic)
		a.encodeRM(op, false, 0xff, 4, 8)
	default:
		a.RelocateBody(in)
		a.Jmp(on)
	}
}

// jccTo emits jcc in as a jcc rel32 to dst.
func (a *Asm) jccTo(in *place.Inst, dst uint64) {
	a.Emit(0x0f, 0x80|jccCond(in.Bytes()))
	a.rel32(dst, 0)
}

// relocateBody emits instruction in (one that is no branch) so that it
// behaves as at its original address: its rip-relative operand, if
// any, is fixed; nothing follows it.
func (a *Asm) RelocateBody(in *place.Inst) {
	next := in.Addr + uint64(in.Len())
	b := in.Bytes()
	{
		d, ok := facts.DecodeOne(b)
		start := a.off()
		a.Emit(b...)
		if ok && d.PCRel == 4 {
			// RIP-relative memory operand: fix the displacement.
			disp := int64(int32(elfin.LE.Uint32(b[d.PCRelOff:])))
			target := next + uint64(disp)
			newEnd := a.pc()
			nd := int64(target - newEnd)
			if !a.Sizing && nd != int64(int32(nd)) {
				a.setErr(fmt.Errorf("rip-relative operand of %#x out of range", in.Addr))
			}
			elfin.LE.PutUint32(a.B[start+d.PCRelOff:], uint32(int32(nd)))
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
func (a *Asm) jcxz(b []byte, notTaken, taken uint64) (ntField, tField int) {
	a.Emit(b[:len(b)-1]...) // prefixes + opcode
	a.Emit(5)
	ntField = a.off() + 1
	a.Jmp(notTaken)
	tField = a.off() + 1
	a.Jmp(taken)
	return
}
