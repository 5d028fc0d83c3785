package rewrite

import (
	"debug/elf"

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
// The rewriter reserves everything reachable from those entries through
// direct branches and calls (indirect ones and PLT calls leave the set):
// those instructions are neither probed nor patched by a neighbour's
// tactic, and the sites among them are reported as failed with their
// reason. Without this, a rewritten libc.so.6 crashed every program.

// earlyEntries returns the link vaddrs of code that runs before the
// module's initializer.
func (f *elfFile) earlyEntries() []uint64 {
	var out []uint64
	for _, s := range f.dynSymbols() {
		if s.Value == 0 || s.Section == elf.SHN_UNDEF {
			continue
		}
		if elf.ST_TYPE(s.Info) == elf.STT_GNU_IFUNC || s.Name == "__libc_early_init" {
			out = append(out, s.Value)
		}
	}
	f.relas(func(_ uint64, t elf.R_X86_64, _ uint32, addend uint64) {
		if t == elf.R_X86_64_IRELATIVE {
			out = append(out, addend)
		}
	})
	return out
}

// planEarly marks the instructions reachable from the early entries
// untouchable and returns them (nil: none).
func (rw *rewriter) planEarly() map[int]bool {
	if !rw.shared {
		return nil
	}
	c := rw.c
	var work []int
	for _, a := range rw.f.earlyEntries() {
		if i := c.index(a); i >= 0 && c.insts[i].Addr == a {
			work = append(work, i)
		}
	}
	if len(work) == 0 {
		return nil
	}
	early := map[int]bool{}
	push := func(target uint64) {
		if j := c.index(target); j >= 0 && c.insts[j].Addr == target && !early[j] {
			work = append(work, j)
		}
	}
	for len(work) > 0 {
		i := work[len(work)-1]
		work = work[:len(work)-1]
		for ; i < len(c.insts) && !early[i]; i++ {
			early[i] = true
			k := c.kinds[i]
			if t := c.targets[i]; t != 0 && (k == kJcc || k == kJcxz || k == kJmp || k == kCall) {
				push(t)
			}
			if k.isUncond() || k == kBad {
				break
			}
			if i+1 < len(c.insts) && c.insts[i+1].Addr != c.insts[i].Addr+uint64(c.insts[i].Len()) {
				break
			}
		}
	}
	for i := range early {
		c.insts[i].Flags |= place.InstUntouchable
		c.insts[i].Flags &^= place.InstRelocatable
	}
	return early
}
