package elfout

import (
	"debug/elf"

	"github.com/stint-project/stint/rewrite/elfin"
	"github.com/stint-project/stint/rewrite/facts"
)

// DynPlan is what happens to the dynamic section.
type DynPlan struct {
	Entries []elfin.DynEntry // the original entries up to DT_NULL (nil: no PT_DYNAMIC)
	Preinit bool             // initialise the runtime from DT_PREINIT_ARRAY
	Rela    []byte           // PIE with preinit: the DT_RELA table, to copy and extend
	Notes   []string
}

// PlanDynamic decides what happens to the dynamic section of f, a module
// m. It is moved to the RW segment (it cannot grow in place) with our
// DT_INIT/DT_FINI and, for a dynamic executable, a DT_PREINIT_ARRAY that
// initialises the runtime before any library constructor runs (they may
// call into the executable's patched code, whose stubs exist only once
// the runtime has mapped its chunks).
func PlanDynamic(f *elfin.File, m facts.Module) (*DynPlan, error) {
	dp := &DynPlan{}
	if f.Prog(elf.PT_DYNAMIC) == nil {
		return dp, nil
	}
	for _, e := range f.Dynamic() {
		if e.Tag == elf.DT_NULL {
			break
		}
		dp.Entries = append(dp.Entries, e)
	}
	if dp.Entries == nil {
		dp.Entries = []elfin.DynEntry{}
	}
	if !m.Exec || m.Static {
		return dp, nil
	}
	if _, ok := elfin.DynVal(dp.Entries, elf.DT_PREINIT_ARRAY); ok {
		dp.Notes = append(dp.Notes, "executable has DT_PREINIT_ARRAY: runtime starts at e_entry, after library constructors")
		return dp, nil
	}
	if m.PIC {
		// The array entry must be relocated: copy DT_RELA and append an
		// R_X86_64_RELATIVE for it.
		rela, ok1 := elfin.DynVal(dp.Entries, elf.DT_RELA)
		relasz, ok2 := elfin.DynVal(dp.Entries, elf.DT_RELASZ)
		if !ok1 || !ok2 || relasz%24 != 0 {
			dp.Notes = append(dp.Notes, "PIE without DT_RELA: runtime starts at e_entry, after library constructors")
			return dp, nil
		}
		// Some linkers count .rela.plt in DT_RELASZ; ld.so then skips
		// it in the DT_RELA range, which it could not once we move it.
		if jmp, ok := elfin.DynVal(dp.Entries, elf.DT_JMPREL); ok {
			if psz, ok := elfin.DynVal(dp.Entries, elf.DT_PLTRELSZ); ok && jmp+psz == rela+relasz && psz <= relasz {
				relasz -= psz
			}
		}
		off, ok := f.OffsetOf(rela, relasz)
		if !ok {
			return nil, elfin.Errorf(0, elfin.ErrTruncated, "DT_RELA %#x+%#x is not in the file", rela, relasz)
		}
		dp.Rela = f.Data[off : off+relasz]
	}
	dp.Preinit = true
	return dp, nil
}
