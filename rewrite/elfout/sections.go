package elfout

import (
	"debug/elf"

	"github.com/stint-project/stint/rewrite/elfin"
)

// sections appends a new section name table and section header table
// with .stint (the marker note), .stint.text, .stint.data and the extra
// sections (their contents before the name table), or returns
// a note on why the section headers are left as they are.
func sections(f *elfin.File, out []byte, l *Layout, noteLen uint64, newDyn *elfin.Prog64, extra []Section) ([]byte, string) {
	if len(f.Sects) == 0 || f.ExtendedShnum || int(f.Hdr.Shstrndx) >= len(f.Sects) || f.Hdr.Shstrndx == 0 ||
		len(f.Sects)+3+len(extra) >= int(elf.SHN_LORESERVE) {
		return out, "section headers left unchanged (marker note in PT_NOTE only)"
	}
	noteVaddr, noteOff := l.RVaddr+l.NoteOff, l.ROff+l.NoteOff
	str := f.Sects[f.Hdr.Shstrndx]
	names := append([]byte{}, f.SectData(&str)...)
	if len(names) == 0 || names[len(names)-1] != 0 {
		names = append(names, 0)
	}
	add := func(s string) uint32 {
		off := uint32(len(names))
		names = append(append(names, s...), 0)
		return off
	}
	sects := append([]elfin.Sect64{}, f.Sects...)
	sects = append(sects,
		elfin.Sect64{Name: add(".stint"), Type: elf.SHT_NOTE, Flags: elf.SHF_ALLOC, Addr: noteVaddr, Off: noteOff, Size: noteLen, Addralign: 4},
		elfin.Sect64{Name: add(".stint.text"), Type: elf.SHT_PROGBITS, Flags: elf.SHF_ALLOC | elf.SHF_EXECINSTR, Addr: l.RXVaddr, Off: l.RXOff, Size: l.RXSize, Addralign: 16},
		elfin.Sect64{Name: add(".stint.data"), Type: elf.SHT_PROGBITS, Flags: elf.SHF_ALLOC | elf.SHF_WRITE, Addr: l.RWVaddr, Off: l.RWOff, Size: l.RWSize, Addralign: 64},
	)
	if newDyn != nil {
		for k := range sects {
			if sects[k].Type == elf.SHT_DYNAMIC {
				sects[k].Addr, sects[k].Off, sects[k].Size = newDyn.Vaddr, newDyn.Off, newDyn.Filesz
			}
		}
	}
	for _, x := range extra {
		for uint64(len(out))%8 != 0 {
			out = append(out, 0)
		}
		sects = append(sects, elfin.Sect64{Name: add(x.Name), Type: elf.SHT_PROGBITS, Off: uint64(len(out)), Size: uint64(len(x.Data)), Addralign: 8})
		out = append(out, x.Data...)
	}
	strOff := uint64(len(out))
	out = append(out, names...)
	sects[f.Hdr.Shstrndx].Off = strOff
	sects[f.Hdr.Shstrndx].Size = uint64(len(names))
	for uint64(len(out))%8 != 0 {
		out = append(out, 0)
	}
	shOff := uint64(len(out))
	for _, s := range sects {
		var b [elfin.ShdrSize]byte
		elfin.LE.PutUint32(b[0:], s.Name)
		elfin.LE.PutUint32(b[4:], uint32(s.Type))
		elfin.LE.PutUint64(b[8:], uint64(s.Flags))
		elfin.LE.PutUint64(b[16:], s.Addr)
		elfin.LE.PutUint64(b[24:], s.Off)
		elfin.LE.PutUint64(b[32:], s.Size)
		elfin.LE.PutUint32(b[40:], s.Link)
		elfin.LE.PutUint32(b[44:], s.Info)
		elfin.LE.PutUint64(b[48:], s.Addralign)
		elfin.LE.PutUint64(b[56:], s.Entsize)
		out = append(out, b[:]...)
	}
	elfin.LE.PutUint64(out[40:], shOff)
	elfin.LE.PutUint16(out[60:], uint16(len(sects)))
	return out, ""
}
