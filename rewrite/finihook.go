package rewrite

import (
	"github.com/stint-project/stint/rewrite/elfout"
	"github.com/stint-project/stint/rewrite/facts"
	"github.com/stint-project/stint/rewrite/place"
	"github.com/stint-project/stint/rewrite/tramp"
)

// A statically linked executable has no DT_FINI, so nothing told the
// runtime that the program was leaving: the trace lacked its end marker
// and the redundancy log lost what was recorded since its last save.
// glibc calls _fini (the .fini section) from exit, so the rewriter hooks
// it: a run of instructions of .fini at least 5 bytes long moves to a
// trampoline (ending in a jump back, or in the moved ret), and its place
// starts with a jump to the blob's DT_FINI stub, whose "original DT_FINI"
// is that trampoline. Placement keeps away from .fini (facts.Fini: its
// few instructions are reserved, its ret unprobed, reported as such), and
// the run starts where no planner patch reads or writes its bytes (a jump
// just before .fini may read .fini's first bytes as its rel32).

// placeFiniHook picks the run of .fini to move, encodes its trampoline at
// tt's cursor (advancing it) and the jump to entryFini that replaces it.
// nil: no run fits.
func placeFiniHook(fx *facts.Facts, tt *trampTable, writes []place.Write, entryFini uint64) *elfout.FiniHook {
	h, c := fx.Fini, fx.Code
	if h == nil {
		return nil
	}
	movable := func(i int, last bool) bool {
		if c.Kinds[i] == facts.Ret {
			return last
		}
		d, ok := facts.DecodeOne(c.Insts[i].Bytes())
		return c.Kinds[i] == facts.Other && ok && d.PCRel == 0
	}
next:
	for start := h.Lo; start < h.Hi; start++ {
		var insts []int
		cover := uint64(0)
		addr := c.Insts[start].Addr
		for i := start; cover < 5; i++ {
			if i >= h.Hi || !movable(i, cover+uint64(c.Insts[i].Len()) >= 5) {
				continue next
			}
			insts = append(insts, i)
			cover += uint64(c.Insts[i].Len())
			if c.Kinds[i] == facts.Ret && cover < 5 {
				continue next
			}
		}
		for _, w := range writes {
			if w.Addr < addr+cover && w.Addr+uint64(len(w.Bytes))+4 > addr {
				continue next
			}
		}
		return finiHookAt(fx, tt, insts, addr, cover, entryFini)
	}
	return nil
}

// finiHookAt encodes the hook that moves insts (cover bytes at addr).
func finiHookAt(fx *facts.Facts, tt *trampTable, insts []int, addr, cover, entryFini uint64) *elfout.FiniHook {
	c := fx.Code
	a := &tramp.Asm{Base: tt.cursor}
	for k, i := range insts {
		in := &c.Insts[i]
		if k < len(insts)-1 {
			a.Emit(in.Bytes()...)
		} else {
			a.Relocate(in, c.Kinds[i], 0, fx.Module.PIC) // jumps back, or is the ret
		}
	}
	if a.Err != nil {
		return nil
	}
	h := &elfout.FiniHook{Addr: addr, Cover: cover, TrampAddr: tt.cursor, Code: a.B}
	tt.cursor = elfout.AlignUp(tt.cursor+uint64(len(a.B)), 16)
	j := &tramp.Asm{Base: addr}
	j.Jmp(entryFini)
	if j.Err != nil {
		return nil
	}
	for uint64(len(j.B)) < cover {
		j.Emit(0xcc)
	}
	h.Jump = j.B
	return h
}
