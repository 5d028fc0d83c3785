package facts

import "golang.org/x/arch/x86/x86asm"

// The status flags, as bits.
const (
	flagCF = 1 << iota
	flagPF
	flagAF
	flagZF
	flagSF
	flagOF
	flagsAll = 1<<iota - 1
)

// flagUse is what an instruction does with the status flags: the ones
// it reads and the ones it leaves defined or undefined (either way, no
// later reader can depend on their value from before it).
type flagUse struct{ read, write uint8 }

// flagUses lists the instructions FlagsDead knows. Any other one counts
// as reading every flag, so that what the table leaves out costs speed,
// never correctness.
var flagUses = func() map[x86asm.Op]flagUse {
	m := map[x86asm.Op]flagUse{}
	for _, op := range []x86asm.Op{x86asm.ADD, x86asm.SUB, x86asm.CMP, x86asm.TEST, x86asm.AND, x86asm.OR,
		x86asm.XOR, x86asm.NEG, x86asm.IMUL, x86asm.MUL, x86asm.DIV, x86asm.IDIV, x86asm.BSF, x86asm.BSR,
		x86asm.TZCNT, x86asm.LZCNT, x86asm.POPCNT, x86asm.BT, x86asm.BTS, x86asm.BTR, x86asm.BTC,
		x86asm.CMPXCHG, x86asm.XADD, x86asm.UCOMISS, x86asm.UCOMISD, x86asm.COMISS, x86asm.COMISD, x86asm.PTEST} {
		m[op] = flagUse{write: flagsAll}
	}
	for _, op := range []x86asm.Op{x86asm.INC, x86asm.DEC} {
		m[op] = flagUse{write: flagsAll &^ flagCF}
	}
	for _, op := range []x86asm.Op{x86asm.ADC, x86asm.SBB} {
		m[op] = flagUse{read: flagCF, write: flagsAll}
	}
	for _, op := range []x86asm.Op{x86asm.MOV, x86asm.MOVZX, x86asm.MOVSX, x86asm.MOVSXD, x86asm.LEA, x86asm.PUSH,
		x86asm.POP, x86asm.NOP, x86asm.XCHG, x86asm.NOT, x86asm.BSWAP, x86asm.CBW, x86asm.CWDE, x86asm.CDQE,
		x86asm.CWD, x86asm.CDQ, x86asm.CQO, x86asm.MOVAPS, x86asm.MOVAPD, x86asm.MOVUPS, x86asm.MOVUPD,
		x86asm.MOVDQA, x86asm.MOVDQU, x86asm.MOVQ, x86asm.MOVD, x86asm.MOVSS, x86asm.MOVSD_XMM, x86asm.MOVHPS,
		x86asm.MOVLPS, x86asm.MOVHPD, x86asm.MOVLPD, x86asm.PXOR, x86asm.XORPS, x86asm.XORPD, x86asm.ANDPS,
		x86asm.ANDPD, x86asm.ADDSD, x86asm.SUBSD, x86asm.MULSD, x86asm.DIVSD, x86asm.ADDSS, x86asm.SUBSS,
		x86asm.MULSS, x86asm.DIVSS, x86asm.CVTSI2SD, x86asm.CVTSI2SS, x86asm.CVTTSD2SI, x86asm.CVTSD2SS,
		x86asm.CVTSS2SD, x86asm.PSHUFD, x86asm.PUNPCKLQDQ, x86asm.PADDQ, x86asm.PADDD, x86asm.PCMPEQB,
		x86asm.PMOVMSKB, x86asm.PREFETCHT0, x86asm.PREFETCHNTA} {
		m[op] = flagUse{}
	}
	return m
}()

// FlagsDead reports whether the status flags are dead before
// instruction i: on the straight line of plain instructions from i, each
// flag is written before any instruction reads it. A control transfer,
// an undecodable instruction or one the table does not know ends the
// line with the flags live (a transfer's destination may read them).
// Bounded to a few instructions: blocks are short.
func (c *Code) FlagsDead(i int) bool {
	if c.flagsDead == nil {
		c.flagsDead = make([]uint8, len(c.Insts))
	}
	if v := c.flagsDead[i]; v != 0 {
		return v == flagsDeadYes
	}
	dead := c.flagsDeadAt(i)
	c.flagsDead[i] = flagsDeadNo
	if dead {
		c.flagsDead[i] = flagsDeadYes
	}
	return dead
}

// FlagsDead's answers, kept: a trampoline asks once to size it and once
// to encode it, and decoding the line again cost a compact rewrite of
// libsqlite3 a third of its time.
const (
	flagsDeadNo  = 1
	flagsDeadYes = 2
)

// flagsDeadAt is FlagsDead, worked out.
func (c *Code) flagsDeadAt(i int) bool {
	var killed uint8
	for j := i; j < len(c.Insts) && j < i+16; j++ {
		if c.Kinds[j] != Other {
			return false
		}
		if j > i && c.Insts[j].Addr != c.Insts[j-1].Addr+uint64(c.Insts[j-1].Len()) {
			return false // a gap: not one straight line
		}
		in, err := x86asm.Decode(c.Insts[j].Bytes(), 64)
		if err != nil {
			return false
		}
		u, ok := flagUses[in.Op]
		if !ok || u.read&^killed != 0 {
			return false
		}
		killed |= u.write
		if killed == flagsAll {
			return true
		}
	}
	return false
}
