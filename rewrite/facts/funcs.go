package facts

import (
	"bytes"
	"cmp"
	"debug/elf"
	"slices"
	"sort"

	"github.com/stint-project/stint/internal/ehframe"
	"github.com/stint-project/stint/rewrite/elfin"
)

// functionStarts collects function entry points from the symbol tables,
// .eh_frame (or, without it, .eh_frame_hdr) and the entry points.
func functionStarts(f *elfin.File) []uint64 {
	var out []uint64
	f.Syms(func(s elfin.Sym) {
		if t := elf.SymType(s.Info & 0xf); (t == elf.STT_FUNC || t == 10 /* STT_GNU_IFUNC */) && s.Shndx != 0 && s.Value != 0 {
			out = append(out, s.Value)
		}
	})
	if s := f.Section(".eh_frame"); s != nil && s.Type == elf.SHT_PROGBITS {
		out = append(out, ehframe.Starts(f.SectData(s), s.Addr)...)
	} else if p := f.Prog(elf.PT_GNU_EH_FRAME); p != nil {
		starts, _ := ehframe.HdrStarts(f.Data[p.Off:p.Off+p.Filesz], p.Vaddr)
		out = append(out, starts...)
	}
	if f.Hdr.Entry != 0 {
		out = append(out, f.Hdr.Entry)
	}
	d := f.Dynamic()
	for _, t := range []elf.DynTag{elf.DT_INIT, elf.DT_FINI} {
		if v, ok := elfin.DynVal(d, t); ok && v != 0 {
			out = append(out, v)
		}
	}
	return out
}

// fdeRanges returns the module's FDE ranges sorted by start, overlaps and
// empty ranges dropped.
func fdeRanges(f *elfin.File) []ehframe.FDE {
	s := f.Section(".eh_frame")
	if s == nil || s.Type != elf.SHT_PROGBITS {
		return nil
	}
	var out []ehframe.FDE
	for _, r := range ehframe.FDEs(f.SectData(s), s.Addr) {
		if r.Hi > r.Lo {
			out = append(out, r)
		}
	}
	slices.SortFunc(out, func(a, b ehframe.FDE) int { return cmp.Compare(a.Lo, b.Lo) })
	return dropOverlaps(out, func(r ehframe.FDE) (uint64, uint64) { return r.Lo, r.Hi })
}

// FDEOf returns the FDE range holding a, or false.
func (fx *Facts) FDEOf(a uint64) (ehframe.FDE, bool) {
	fdes := fx.FDEs
	i := sort.Search(len(fdes), func(i int) bool { return fdes[i].Lo > a }) - 1
	if i < 0 || a >= fdes[i].Hi {
		return ehframe.FDE{}, false
	}
	return fdes[i], true
}

// PLTCallees maps the address of each PLT stub (its jmp, and an endbr64
// before it) whose slot's JUMP_SLOT relocation names a function the
// module defines to that function (GLOB_DAT: the .plt.got stubs). It is
// worked out once.
func (fx *Facts) PLTCallees() map[uint64]uint64 {
	if !fx.pltDone {
		fx.pltDone = true
		fx.plt = pltCallees(fx.File, fx.Code)
	}
	return fx.plt
}

func pltCallees(f *elfin.File, c *Code) map[uint64]uint64 {
	syms := f.DynSymbols()
	slot := map[uint64]uint64{} // GOT slot -> function
	f.Relas(func(off uint64, t elf.R_X86_64, k uint32, _ uint64) {
		// k: symbol index; DynSymbols drops the null symbol
		if t != elf.R_X86_64_JMP_SLOT && t != elf.R_X86_64_GLOB_DAT || k == 0 || int(k) > len(syms) {
			return
		}
		if sym := syms[k-1]; sym.Value != 0 && sym.Section != elf.SHN_UNDEF && elf.ST_TYPE(sym.Info) == elf.STT_FUNC {
			slot[off] = sym.Value
		}
	})
	if len(slot) == 0 {
		return nil
	}
	out := map[uint64]uint64{}
	for i := range c.Insts {
		if c.Kinds[i] != IndJmp {
			continue
		}
		in := &c.Insts[i]
		op, _, err := ParseRM(in)
		if err != nil || !op.RIPRel || op.Seg != 0 {
			continue
		}
		fn, ok := slot[uint64(int64(op.Next)+op.Disp)]
		if !ok {
			continue
		}
		out[in.Addr] = fn
		if i > 0 && bytes.Equal(c.Insts[i-1].Bytes(), []byte{0xf3, 0x0f, 0x1e, 0xfa}) {
			out[c.Insts[i-1].Addr] = fn
		}
	}
	return out
}

// IsPLTSlotJmp reports whether instruction i is a jmp through a GOT slot
// the dynamic linker binds (a JUMP_SLOT or GLOB_DAT relocation): a PLT
// stub's jmp to whichever function is bound there.
func (fx *Facts) IsPLTSlotJmp(i int) bool {
	c := fx.Code
	if i < 0 || i >= len(c.Insts) || c.Kinds[i] != IndJmp {
		return false
	}
	if fx.bound == nil {
		fx.bound = map[uint64]bool{}
		fx.File.Relas(func(off uint64, t elf.R_X86_64, _ uint32, _ uint64) {
			if t == elf.R_X86_64_JMP_SLOT || t == elf.R_X86_64_GLOB_DAT {
				fx.bound[off] = true
			}
		})
	}
	op, _, err := ParseRM(&c.Insts[i])
	return err == nil && op.RIPRel && op.Seg == 0 && fx.bound[uint64(int64(op.Next)+op.Disp)]
}

// MaxClosureFuncs bounds the functions ClosureRets follows from one callee.
const MaxClosureFuncs = 8

// ClosureRets returns the instruction indices of the rets a call to
// callee may return through: those in its FDE's range, and those of every
// function it reaches by a direct jump out of that range, through a PLT
// stub too (tail calls, and gcc's .cold parts, which have FDEs of their
// own), transitively. It also returns the FDE starts it reached, and
// false when it stopped short (no FDE, more than MaxClosureFuncs
// functions, a tail call through a pointer), with what it had reached by
// then.
func (fx *Facts) ClosureRets(callee uint64) (rets []int, funcs []uint64, ok bool) {
	c, plt := fx.Code, fx.PLTCallees()
	queue := []uint64{callee}
	for len(queue) > 0 {
		a := queue[0]
		queue = queue[1:]
		if fn, ok := plt[a]; ok {
			a = fn
		}
		fr, ok := fx.FDEOf(a)
		if !ok {
			return rets, funcs, false
		}
		if slices.Contains(funcs, fr.Lo) {
			continue
		}
		if len(funcs) == MaxClosureFuncs {
			return rets, funcs, false
		}
		funcs = append(funcs, fr.Lo)
		i := sort.Search(len(c.Insts), func(i int) bool { return c.Insts[i].Addr >= fr.Lo })
		for ; i < len(c.Insts) && c.Insts[i].Addr < fr.Hi; i++ {
			switch c.Kinds[i] {
			case Ret:
				rets = append(rets, i)
			case IndJmp:
				// through memory that is not a fixed slot: a tail call
				// through a function pointer (sqlite3_mutex_enter's),
				// whose callee's rets are unknown. A jump table jumps
				// through a register, after its load.
				if op, _, err := ParseRM(&c.Insts[i]); err == nil && op.Mod != 3 && !op.RIPRel {
					return rets, funcs, false
				}
			case Jmp, Jcc, Jcxz:
				if t := c.Targets[i]; t != 0 && (t < fr.Lo || t >= fr.Hi) {
					queue = append(queue, t)
				}
			}
		}
	}
	return rets, funcs, true
}

// CalleeRets returns ClosureRets' rets, and false when it cannot say.
func (fx *Facts) CalleeRets(callee uint64) ([]int, bool) {
	rets, _, ok := fx.ClosureRets(callee)
	if !ok {
		return nil, false
	}
	return rets, true
}

// OwnSites returns the instruction indices of the open-ended sites of the
// function in FDE range fr (its callee rets, indirect jumps and calls,
// its other rets) and of its jccs.
func (fx *Facts) OwnSites(fr ehframe.FDE) (open, jccs []int) {
	c := fx.Code
	open, _ = fx.CalleeRets(fr.Lo)
	i := sort.Search(len(c.Insts), func(i int) bool { return c.Insts[i].Addr >= fr.Lo })
	for ; i < len(c.Insts) && c.Insts[i].Addr < fr.Hi; i++ {
		switch k := c.Kinds[i]; {
		case k == IndJmp || k == IndCall || k == Ret && !slices.Contains(open, i):
			open = append(open, i)
		case k == Jcc || k == Jcxz:
			jccs = append(jccs, i)
		}
	}
	return open, jccs
}

// v8Builtins returns the span of V8's embedded builtins (its symbols
// Builtins_*), empty when f has none. V8 maps those pages again from
// the file at another address for its short builtin calls (node does,
// on a machine with 4 GiB or more): a jump to a trampoline patched
// there runs from the copy with its rel32 pointing nowhere, and even a
// run that restored every patch runs the file's patched copy.
func v8Builtins(f *elfin.File) (lo, hi uint64) {
	lo = ^uint64(0)
	f.Syms(func(s elfin.Sym) {
		if s.Table == elf.SHT_SYMTAB && elf.SymType(s.Info&0xf) == elf.STT_FUNC && s.Value != 0 &&
			bytes.HasPrefix(s.Name, []byte("Builtins_")) {
			lo, hi = min(lo, s.Value), max(hi, s.Value+s.Size)
		}
	})
	if hi <= lo {
		return 0, 0
	}
	return lo, hi
}
