package facts

import (
	"bytes"
	"debug/elf"

	"github.com/stint-project/stint/rewrite/elfin"
	"github.com/stint-project/stint/rewrite/place"
)

// Code of a shared object can run before its DT_INIT, which is where the
// runtime maps the module's stub chunks: a punned jump there would land
// in unmapped memory. Two kinds of code are known to run that early:
//
//   - IFUNC resolvers, called by the dynamic loader while it relocates
//     (the addends of R_X86_64_IRELATIVE relocations, and dynamic
//     symbols of type STT_GNU_IFUNC, resolved for other modules);
//   - glibc's __libc_early_init, which ld.so calls after relocation and
//     before any initializer.
//
// Everything reachable from those entries through direct branches and
// calls (indirect ones and PLT calls leave the set) is reserved: neither
// probed nor patched by a neighbour's tactic. Without this, a rewritten
// libc.so.6 crashed every program.

// earlyEntries returns the link vaddrs of code that runs before the
// module's initializer.
func earlyEntries(f *elfin.File) []uint64 {
	var out []uint64
	for _, s := range f.DynSymbols() {
		if s.Value == 0 || s.Section == elf.SHN_UNDEF {
			continue
		}
		if elf.ST_TYPE(s.Info) == elf.STT_GNU_IFUNC || s.Name == "__libc_early_init" {
			out = append(out, s.Value)
		}
	}
	f.Relas(func(_ uint64, t elf.R_X86_64, _ uint32, addend uint64) {
		if t == elf.R_X86_64_IRELATIVE {
			out = append(out, addend)
		}
	})
	return out
}

// definesLibcStart reports whether the module defines __libc_start_main
// (in its dynamic symbols or, unstripped, its symbol table).
func definesLibcStart(f *elfin.File) bool {
	const name = "__libc_start_main"
	found := false
	f.Syms(func(s elfin.Sym) {
		if !found && s.Shndx != uint16(elf.SHN_UNDEF) && s.Value != 0 && len(s.Name) > len(name) &&
			string(s.Name[:len(name)]) == name && s.Name[len(name)] == 0 {
			found = true
		}
	})
	return found
}

// markEarly marks the instructions reachable from the early entries
// untouchable and returns them (nil: none).
func markEarly(f *elfin.File, c *Code) map[int]bool {
	var work []int
	for _, a := range earlyEntries(f) {
		if i := c.Index(a); i >= 0 && c.Insts[i].Addr == a {
			work = append(work, i)
		}
	}
	if len(work) == 0 {
		return nil
	}
	early := map[int]bool{}
	push := func(target uint64) {
		if j := c.Index(target); j >= 0 && c.Insts[j].Addr == target && !early[j] {
			work = append(work, j)
		}
	}
	for len(work) > 0 {
		i := work[len(work)-1]
		work = work[:len(work)-1]
		for ; i < len(c.Insts) && !early[i]; i++ {
			early[i] = true
			k := c.Kinds[i]
			if t := c.Targets[i]; t != 0 && (k == Jcc || k == Jcxz || k == Jmp || k == Call) {
				push(t)
			}
			if k.IsUncond() || k == Bad {
				break
			}
			if i+1 < len(c.Insts) && c.Insts[i+1].Addr != c.Insts[i].Addr+uint64(c.Insts[i].Len()) {
				break
			}
		}
	}
	for i := range early {
		c.Insts[i].Flags |= place.InstUntouchable
		c.Insts[i].Flags &^= place.InstRelocatable
	}
	return early
}

// Fini is .fini's instruction range, Code.Insts[Lo:Hi], in a static
// executable. It has no DT_FINI, so nothing tells the runtime that the
// program is leaving; glibc calls _fini from exit, so the rewriter hooks
// .fini (see package rewrite's fini hook) and keeps every other patch away
// from it: its instructions are reserved, its ret unprobed.
type Fini struct {
	Lo, Hi int
	Addr   uint64 // .fini's address
}

// Reserved reports whether instruction i is reserved for the hook.
func (h *Fini) Reserved(i int) bool { return h != nil && i >= h.Lo && i < h.Hi }

// AfterEnd reports whether the instruction at addr lies in .fini: the
// module's DT_FINI function, which its finaliser calls after the
// runtime's has ended the run (its run-end row, the log saved), so that
// a probe there would record past the end. (A static executable's .fini
// holds the exit hook: Fini.)
func (fx *Facts) AfterEnd(addr uint64) bool {
	return addr >= fx.fini[0] && addr < fx.fini[1]
}

// FiniStraight reports whether .fini is DT_FINI's code and runs straight
// to its ret, its last instruction, with the stack as it found it
// (glibc's crti/crtn: endbr64, sub $8,%rsp, add $8,%rsp, ret): then its
// one site's outcome is known before it runs, and the runtime's
// finaliser records it (stint_module.fini_probe).
func (fx *Facts) FiniStraight() bool { return fx.finiStraight }

// finiStraight computes FiniStraight for the module f, whose DT_FINI is
// finiAt (0: none).
func finiStraight(c *Code, fini [2]uint64, finiAt uint64) bool {
	lo := c.Index(fini[0])
	if finiAt == 0 || finiAt != fini[0] || lo < 0 || c.Insts[lo].Addr != fini[0] {
		return false
	}
	depth := 0
	for i := lo; i < len(c.Insts) && c.Insts[i].Addr < fini[1]; i++ {
		b := c.Insts[i].Bytes()
		switch {
		case bytes.Equal(b, []byte{0xf3, 0x0f, 0x1e, 0xfa}): // endbr64
		case len(b) == 4 && b[0] == 0x48 && b[1] == 0x83 && b[2] == 0xec && b[3] < 0x80: // sub $imm8,%rsp
			depth += int(b[3])
		case len(b) == 4 && b[0] == 0x48 && b[1] == 0x83 && b[2] == 0xc4 && b[3] < 0x80: // add $imm8,%rsp
			depth -= int(b[3])
		case len(b) == 1 && b[0] == 0xc3:
			return depth == 0 && c.Insts[i].Addr+1 == fini[1]
		default:
			return false
		}
	}
	return false
}

// markFini reserves .fini's instructions. nil: no .fini fit to hook.
func markFini(f *elfin.File, c *Code) *Fini {
	s := f.Section(".fini")
	if s == nil || s.Size < 5 {
		return nil
	}
	lo := c.Index(s.Addr)
	if lo < 0 || c.Insts[lo].Addr != s.Addr {
		return nil
	}
	hi := lo
	for hi < len(c.Insts) && c.Insts[hi].Addr+uint64(c.Insts[hi].Len()) <= s.Addr+s.Size {
		hi++
	}
	for k := lo; k < hi; k++ {
		c.Insts[k].Flags |= place.InstUntouchable
		c.Insts[k].Flags &^= place.InstRelocatable
	}
	return &Fini{Lo: lo, Hi: hi, Addr: s.Addr}
}
