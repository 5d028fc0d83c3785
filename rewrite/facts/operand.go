package facts

import (
	"errors"

	"github.com/stint-project/stint/rewrite/elfin"
	"github.com/stint-project/stint/rewrite/place"
)

// RMOp is the r/m operand of an FF /2 or FF /4 instruction.
type RMOp struct {
	Seg      byte // 0x64/0x65 segment prefix or 0
	Rex      byte // 0 if none
	Mod, RM  byte
	SIB      byte
	HasSIB   bool
	Disp     int64
	DispSize int
	RIPRel   bool
	Next     uint64 // address after the original instruction
}

// ErrIndirectForm: an indirect branch operand the trampolines cannot rebuild.
var ErrIndirectForm = errors.New("unsupported indirect branch operand")

// ParseRM parses the operand of an indirect jmp or call (FF /4, FF /2)
// and returns it with the ModRM reg field.
func ParseRM(in *place.Inst) (*RMOp, byte, error) {
	b := in.Bytes()
	op := &RMOp{Next: in.Addr + uint64(len(b))}
	i := 0
	for ; i < len(b); i++ {
		switch c := b[i]; c {
		case 0x64, 0x65:
			op.Seg = c
			continue
		case 0x2e, 0x3e, 0x26, 0x36, 0xf2: // notrack / branch hints / bnd: dropped
			continue
		case 0x66, 0x67, 0xf0, 0xf3:
			return nil, 0, ErrIndirectForm
		}
		break
	}
	if i < len(b) && b[i]&0xf0 == 0x40 {
		op.Rex = b[i]
		i++
	}
	if i+2 > len(b) || b[i] != 0xff {
		return nil, 0, ErrIndirectForm
	}
	m := b[i+1]
	i += 2
	op.Mod, op.RM = m>>6, m&7
	reg := (m >> 3) & 7
	if op.Mod == 3 {
		if op.RM == 4 && op.Rex&1 == 0 {
			return nil, 0, errors.New("indirect branch through %rsp")
		}
		return op, reg, nil
	}
	if op.RM == 4 {
		if i >= len(b) {
			return nil, 0, ErrIndirectForm
		}
		op.HasSIB, op.SIB = true, b[i]
		i++
	}
	switch {
	case op.Mod == 1:
		op.DispSize = 1
	case op.Mod == 2:
		op.DispSize = 4
	case op.Mod == 0 && op.RM == 5:
		op.DispSize, op.RIPRel = 4, true
	case op.Mod == 0 && op.HasSIB && op.SIB&7 == 5:
		op.DispSize = 4
	}
	if i+op.DispSize != len(b) {
		return nil, 0, ErrIndirectForm
	}
	switch op.DispSize {
	case 1:
		op.Disp = int64(int8(b[i]))
	case 4:
		op.Disp = int64(int32(elfin.LE.Uint32(b[i:])))
	}
	return op, reg, nil
}

// RSPBased: the operand's base register is %rsp.
func (op *RMOp) RSPBased() bool {
	return op.Mod != 3 && op.HasSIB && op.SIB&7 == 4 && op.Rex&1 == 0
}

// Relocatable reports why an instruction cannot run from a trampoline.
func Relocatable(in *place.Inst, k Kind) error {
	switch k {
	case Bad:
		return errors.New("undecodable")
	case Far:
		return errors.New("far transfer or trap")
	case PCRelOther:
		return errors.New("unsupported pc-relative instruction")
	case IndJmp, IndCall:
		op, _, err := ParseRM(in)
		if err != nil {
			return err
		}
		if k == IndCall && op.RSPBased() && op.Disp < 0 {
			return errors.New("indirect call through memory below %rsp")
		}
	}
	return nil
}
