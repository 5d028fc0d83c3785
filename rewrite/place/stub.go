package place

// TEMPORARY placeholder so that package rewrite compiles while the real
// planner (tactics.go, addrspace.go) is written. Only B1 is implemented.
// The owner of this package replaces this file.

import "errors"

// Range is a half-open address range [Lo, Hi).
type Range struct{ Lo, Hi uint64 }

// AddrSpace hands out stub addresses inside allowed ranges.
type AddrSpace struct {
	allowed []Range
	used    []Range
}

// NewAddrSpace returns a space where stubs may go anywhere in allowed.
func NewAddrSpace(allowed []Range) *AddrSpace { return &AddrSpace{allowed: allowed} }

// Reserve marks r as occupied.
func (s *AddrSpace) Reserve(r Range) { s.used = append(s.used, r) }

// Chunks returns the page-aligned ranges that must be mapped to hold every
// stub handed out, grouped so that their number stays small.
func (s *AddrSpace) Chunks(pageSize uint64) []Range { return nil }

// ErrTooShort: the instruction is shorter than a jmp rel32 and no tactic applied.
var ErrTooShort = errors.New("instruction too short for jmp rel32 and no tactic applied")

// Patch redirects instruction i to Near(i).
func (p *Planner) Patch(i int) (Tactic, error) {
	if p.Tactics == nil {
		p.Tactics = make([]Tactic, len(p.Insts))
	}
	in := &p.Insts[i]
	if in.Flags&InstUntouchable != 0 {
		return TacticNone, errors.New("untouchable")
	}
	if in.Len() < 5 {
		return TacticNone, ErrTooShort
	}
	target := p.Near(i)
	rel := int64(target) - int64(in.Addr+5)
	b := make([]byte, in.Len())
	b[0] = 0xe9
	for k := 0; k < 4; k++ {
		b[1+k] = byte(rel >> (8 * k))
	}
	for k := 5; k < len(b); k++ {
		b[k] = 0xcc
	}
	p.Writes = append(p.Writes, Write{Addr: in.Addr, Bytes: b})
	p.Tactics[i] = TacticB1
	return TacticB1, nil
}
