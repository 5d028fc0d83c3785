package oracle

import "golang.org/x/arch/x86/x86asm"

// class is what an instruction does to control flow.
type class uint8

const (
	clsOther class = iota
	clsJcc
	clsJmp
	clsCall
	clsRet
	clsIndJmp
	clsIndCall
	clsSyscall
)

// inst is a decoded instruction, cached by address.
type inst struct {
	len    uint64
	cls    class
	op     x86asm.Op
	target uint64 // absolute target of a direct transfer
	ok     bool   // decoded
}

// decodeAt decodes the instruction whose bytes are code, at address pc.
func decodeAt(code []byte, pc uint64) *inst {
	if isEndbr(code) {
		return &inst{len: 4, ok: true}
	}
	in, err := x86asm.Decode(code, 64)
	if err != nil || in.Len == 0 || in.Op == 0 {
		// x86asm reports instructions it does not know (endbr64 among
		// them) as a one-byte Op 0; none of them transfers control.
		return &inst{}
	}
	d := &inst{len: uint64(in.Len), op: in.Op, ok: true}
	rel, direct := in.Args[0].(x86asm.Rel)
	switch in.Op {
	case x86asm.JA, x86asm.JAE, x86asm.JB, x86asm.JBE, x86asm.JE, x86asm.JNE,
		x86asm.JG, x86asm.JGE, x86asm.JL, x86asm.JLE, x86asm.JO, x86asm.JNO,
		x86asm.JP, x86asm.JNP, x86asm.JS, x86asm.JNS,
		x86asm.JCXZ, x86asm.JECXZ, x86asm.JRCXZ,
		x86asm.LOOP, x86asm.LOOPE, x86asm.LOOPNE:
		d.cls = clsJcc
	case x86asm.JMP:
		d.cls = clsIndJmp
		if direct {
			d.cls = clsJmp
		}
	case x86asm.CALL:
		d.cls = clsIndCall
		if direct {
			d.cls = clsCall
		}
	case x86asm.RET:
		d.cls = clsRet
	case x86asm.SYSCALL:
		d.cls = clsSyscall
	}
	if direct && (d.cls == clsJcc || d.cls == clsJmp || d.cls == clsCall) {
		d.target = pc + d.len + uint64(int64(rel))
	}
	return d
}

// transfer reports whether the instruction transfers control (so that the
// next instruction executed starts a block).
func (d *inst) transfer() bool { return d.cls >= clsJcc && d.cls <= clsIndCall }

// rflags bits.
const (
	flagCF = 1 << 0
	flagPF = 1 << 2
	flagZF = 1 << 6
	flagSF = 1 << 7
	flagOF = 1 << 11
)

// jccTaken evaluates the condition of a conditional jump from the
// registers before it executed: used when the target equals the
// fall-through, so the next rip cannot tell.
func jccTaken(op x86asm.Op, rflags, rcx uint64) bool {
	cf := rflags&flagCF != 0
	pf := rflags&flagPF != 0
	zf := rflags&flagZF != 0
	sf := rflags&flagSF != 0
	of := rflags&flagOF != 0
	switch op {
	case x86asm.JO:
		return of
	case x86asm.JNO:
		return !of
	case x86asm.JB:
		return cf
	case x86asm.JAE:
		return !cf
	case x86asm.JE:
		return zf
	case x86asm.JNE:
		return !zf
	case x86asm.JBE:
		return cf || zf
	case x86asm.JA:
		return !cf && !zf
	case x86asm.JS:
		return sf
	case x86asm.JNS:
		return !sf
	case x86asm.JP:
		return pf
	case x86asm.JNP:
		return !pf
	case x86asm.JL:
		return sf != of
	case x86asm.JGE:
		return sf == of
	case x86asm.JLE:
		return zf || sf != of
	case x86asm.JG:
		return !zf && sf == of
	case x86asm.JCXZ:
		return rcx&0xffff == 0
	case x86asm.JECXZ:
		return rcx&0xffffffff == 0
	case x86asm.JRCXZ:
		return rcx == 0
	case x86asm.LOOP:
		return rcx-1 != 0
	case x86asm.LOOPE:
		return rcx-1 != 0 && zf
	case x86asm.LOOPNE:
		return rcx-1 != 0 && !zf
	}
	return false
}

// isEndbr reports whether code starts with endbr64 or endbr32.
func isEndbr(code []byte) bool {
	return len(code) >= 4 && code[0] == 0xf3 && code[1] == 0x0f && code[2] == 0x1e && (code[3] == 0xfa || code[3] == 0xfb)
}
