package elfout

import (
	"debug/elf"
	"sort"

	"github.com/stint-project/stint/rewrite/elfin"
)

func putProg(b []byte, p elfin.Prog64) {
	elfin.LE.PutUint32(b[0:], uint32(p.Type))
	elfin.LE.PutUint32(b[4:], uint32(p.Flags))
	elfin.LE.PutUint64(b[8:], p.Off)
	elfin.LE.PutUint64(b[16:], p.Vaddr)
	elfin.LE.PutUint64(b[24:], p.Paddr)
	elfin.LE.PutUint64(b[32:], p.Filesz)
	elfin.LE.PutUint64(b[40:], p.Memsz)
	elfin.LE.PutUint64(b[48:], p.Align)
}

// programHeaders returns the output's program headers: the input's, with
// PT_PHDR moved to the R segment, PT_DYNAMIC to newDyn (when moved), our
// PT_LOADs (RX, R, RW and the reserve) sorted in among the others where
// the first PT_LOAD was, and the marker PT_NOTE last.
func programHeaders(f *elfin.File, fr *Frame, l *Layout, noteLen int, newDyn *elfin.Prog64) []elfin.Prog64 {
	rVaddr, rOff, nph := l.RVaddr, l.ROff, l.NPh
	var out []elfin.Prog64
	var loads []elfin.Prog64
	for _, p := range f.Progs {
		switch p.Type {
		case elf.PT_PHDR:
			p.Off, p.Vaddr, p.Paddr = rOff, rVaddr, rVaddr
			p.Filesz, p.Memsz = uint64(nph)*elfin.PhdrSize, uint64(nph)*elfin.PhdrSize
			out = append([]elfin.Prog64{p}, out...)
		case elf.PT_LOAD:
			loads = append(loads, p)
		case elf.PT_DYNAMIC:
			if newDyn != nil {
				p = *newDyn
			}
			out = append(out, p)
		default:
			out = append(out, p)
		}
	}
	load := func(fl elf.ProgFlag, off, vaddr, size uint64) elfin.Prog64 {
		return elfin.Prog64{Type: elf.PT_LOAD, Flags: fl, Off: off, Vaddr: vaddr, Paddr: vaddr, Filesz: size, Memsz: size, Align: PageSize}
	}
	loads = append(loads,
		load(elf.PF_R|elf.PF_X, l.RXOff, l.RXVaddr, l.RXSize),
		load(elf.PF_R, rOff, rVaddr, l.RSize),
		load(elf.PF_R|elf.PF_W, l.RWOff, l.RWVaddr, l.RWSize))
	if fr.HasReserve {
		// The reserve maps a page of the RX segment's file bytes: not
		// the program headers' page, or the kernel (which takes the last
		// PT_LOAD holding e_phoff) would report AT_PHDR there.
		loads = append(loads, load(elf.PF_R, l.RXOff, fr.Reserve, PageSize))
	}
	sort.SliceStable(loads, func(i, j int) bool { return loads[i].Vaddr < loads[j].Vaddr })
	// Insert the loads where the first original PT_LOAD was, keeping
	// PT_PHDR and PT_INTERP before them.
	pos := 0
	for pos < len(out) && (out[pos].Type == elf.PT_PHDR || out[pos].Type == elf.PT_INTERP) {
		pos++
	}
	// Preserve the original relative order of the other headers.
	rest := append([]elfin.Prog64{}, out[pos:]...)
	out = append(append(out[:pos], loads...), rest...)
	noteOff := l.NoteOff
	out = append(out, elfin.Prog64{Type: elf.PT_NOTE, Flags: elf.PF_R, Off: rOff + noteOff, Vaddr: rVaddr + noteOff,
		Paddr: rVaddr + noteOff, Filesz: uint64(noteLen), Memsz: uint64(noteLen), Align: 4})
	return out
}
