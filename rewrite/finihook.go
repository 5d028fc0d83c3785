package rewrite

import (
	"debug/elf"

	"github.com/stint-project/stint/rewrite/place"
)

// A statically linked executable has no DT_FINI, so nothing told the
// runtime that the program was leaving: the trace lacked its end marker
// and the redundancy log lost what was recorded since its last save.
// glibc calls _fini (the .fini section) from exit, so the rewriter hooks
// it: a run of instructions of .fini at least 5 bytes long moves to a
// trampoline (ending in a jump back, or in the moved ret), and its place
// starts with a jump to the blob's DT_FINI stub, whose "original DT_FINI"
// is that trampoline. The planner keeps away from .fini (its few
// instructions are reserved, its ret unprobed, reported as such), and the
// run starts where no planner patch reads or writes its bytes (a jump
// just before .fini may read .fini's first bytes as its rel32).

type finiHook struct {
	lo, hi int    // .fini's instructions: c.insts[lo:hi]
	addr   uint64 // start of the moved run
	insts  []int  // the instructions moved
	cover  uint64 // bytes they span
	tramp  uint64 // link vaddr of their trampoline
	code   []byte
}

// planFiniHook reserves .fini's instructions. nil: no hook (not a static
// executable, or no .fini).
func (rw *rewriter) planFiniHook() *finiHook {
	f, c := rw.f, rw.c
	if !rw.exec || f.prog(elf.PT_DYNAMIC) != nil {
		return nil
	}
	s := f.section(".fini")
	if s == nil || s.Size < 5 {
		return nil
	}
	lo := c.index(s.Addr)
	if lo < 0 || c.insts[lo].Addr != s.Addr {
		return nil
	}
	hi := lo
	for hi < len(c.insts) && c.insts[hi].Addr+uint64(c.insts[hi].Len()) <= s.Addr+s.Size {
		hi++
	}
	for k := lo; k < hi; k++ {
		c.insts[k].Flags |= place.InstUntouchable
		c.insts[k].Flags &^= place.InstRelocatable
	}
	return &finiHook{lo: lo, hi: hi}
}

// reserved reports whether instruction i is reserved for the hook.
func (h *finiHook) reserved(i int) bool { return h != nil && i >= h.lo && i < h.hi }

// placeFiniHook picks the run to move and allocates its trampoline.
func (rw *rewriter) placeFiniHook(h *finiHook, writes []place.Write) bool {
	c := rw.c
	movable := func(i int, last bool) bool {
		if c.kinds[i] == kRet {
			return last
		}
		d, ok := decodeOne(c.insts[i].Bytes)
		return c.kinds[i] == kOther && ok && d.PCRel == 0
	}
next:
	for start := h.lo; start < h.hi; start++ {
		var insts []int
		cover := uint64(0)
		addr := c.insts[start].Addr
		for i := start; cover < 5; i++ {
			if i >= h.hi || !movable(i, cover+uint64(c.insts[i].Len()) >= 5) {
				continue next
			}
			insts = append(insts, i)
			cover += uint64(c.insts[i].Len())
			if c.kinds[i] == kRet && cover < 5 {
				continue next
			}
		}
		for _, w := range writes {
			if w.Addr < addr+cover && w.Addr+uint64(len(w.Bytes))+4 > addr {
				continue next
			}
		}
		h.addr, h.insts, h.cover = addr, insts, cover
		h.tramp = rw.rxCursor
		a := &asm{base: h.tramp}
		for k, i := range insts {
			in := &c.insts[i]
			if k < len(insts)-1 {
				a.emit(in.Bytes...)
			} else {
				a.relocate(in, c.kinds[i], 0, rw.pic) // jumps back, or is the ret
			}
		}
		if a.err != nil {
			return false
		}
		h.code = a.b
		rw.rxCursor = alignUp(rw.rxCursor+uint64(len(a.b)), 16)
		return true
	}
	return false
}

// patch writes the hook into out: the run jumps to the DT_FINI stub.
func (h *finiHook) patch(f *elfFile, out []byte, rxOff, rxVaddr, entryFini uint64) bool {
	off, ok := f.offsetOf(h.addr, h.cover)
	if !ok {
		return false
	}
	a := &asm{base: h.addr}
	a.jmp(entryFini)
	if a.err != nil {
		return false
	}
	copy(out[off:], a.b)
	for k := uint64(len(a.b)); k < h.cover; k++ {
		out[off+k] = 0xcc
	}
	copy(out[rxOff+(h.tramp-rxVaddr):], h.code)
	return true
}
