package elfin

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
)

// LE is the byte order of every x86-64 ELF file.
var LE = binary.LittleEndian

// Raw ELF64 structures, little-endian, as in the ELF specification.
type Header64 struct {
	Type      elf.Type
	Machine   elf.Machine
	Entry     uint64
	Phoff     uint64
	Shoff     uint64
	Flags     uint32
	Ehsize    uint16
	Phentsize uint16
	Phnum     uint16
	Shentsize uint16
	Shnum     uint16
	Shstrndx  uint16
}

type Prog64 struct {
	Type   elf.ProgType
	Flags  elf.ProgFlag
	Off    uint64
	Vaddr  uint64
	Paddr  uint64
	Filesz uint64
	Memsz  uint64
	Align  uint64
}

type Sect64 struct {
	Name      uint32
	Type      elf.SectionType
	Flags     elf.SectionFlag
	Addr      uint64
	Off       uint64
	Size      uint64
	Link      uint32
	Info      uint32
	Addralign uint64
	Entsize   uint64

	NameStr string // resolved from the section name table
}

// Sizes of the ELF64 header, a program header and a section header.
const (
	EhdrSize = 64
	PhdrSize = 56
	ShdrSize = 64
)

// File is the parsed, validated input.
type File struct {
	Data  []byte
	Hdr   Header64
	Progs []Prog64
	Sects []Sect64 // nil when the file has no (usable) section headers
	// extendedShnum: the section count or name index is stored in
	// section 0 (more than 0xff00 sections); we leave sections alone.
	ExtendedShnum bool

	dynSyms     []elf.Symbol // DynSymbols' result, read once
	dynSymsRead bool
}

// Parse validates data as an x86-64 ELF executable or shared object.
func Parse(data []byte) (*File, error) {
	if len(data) < 4 || !bytes.Equal(data[:4], []byte(elf.ELFMAG)) {
		return nil, ErrNotELF
	}
	if len(data) < 16 {
		return nil, Errorf(0, ErrTruncated, "ELF identification")
	}
	if elf.Class(data[elf.EI_CLASS]) != elf.ELFCLASS64 || elf.Data(data[elf.EI_DATA]) != elf.ELFDATA2LSB {
		return nil, ErrNot64
	}
	if len(data) < EhdrSize {
		return nil, Errorf(0, ErrTruncated, "ELF header")
	}
	f := &File{Data: data}
	h := &f.Hdr
	h.Type = elf.Type(LE.Uint16(data[16:]))
	h.Machine = elf.Machine(LE.Uint16(data[18:]))
	h.Entry = LE.Uint64(data[24:])
	h.Phoff = LE.Uint64(data[32:])
	h.Shoff = LE.Uint64(data[40:])
	h.Flags = LE.Uint32(data[48:])
	h.Ehsize = LE.Uint16(data[52:])
	h.Phentsize = LE.Uint16(data[54:])
	h.Phnum = LE.Uint16(data[56:])
	h.Shentsize = LE.Uint16(data[58:])
	h.Shnum = LE.Uint16(data[60:])
	h.Shstrndx = LE.Uint16(data[62:])
	if h.Machine != elf.EM_X86_64 {
		return nil, ErrNotX86_64
	}
	if h.Type != elf.ET_EXEC && h.Type != elf.ET_DYN {
		return nil, ErrNotExecutable
	}
	size := uint64(len(data))
	if h.Phnum == 0 || h.Phentsize != PhdrSize {
		return nil, Errorf(52, nil, "program header table: %d entries of %d bytes", h.Phnum, h.Phentsize)
	}
	if h.Phoff > size || uint64(h.Phnum)*PhdrSize > size-h.Phoff {
		return nil, Errorf(32, ErrTruncated, "program header table at %#x", h.Phoff)
	}
	f.Progs = make([]Prog64, h.Phnum)
	for i := range f.Progs {
		off := h.Phoff + uint64(i)*PhdrSize
		b := data[off:]
		p := &f.Progs[i]
		p.Type = elf.ProgType(LE.Uint32(b[0:]))
		p.Flags = elf.ProgFlag(LE.Uint32(b[4:]))
		p.Off = LE.Uint64(b[8:])
		p.Vaddr = LE.Uint64(b[16:])
		p.Paddr = LE.Uint64(b[24:])
		p.Filesz = LE.Uint64(b[32:])
		p.Memsz = LE.Uint64(b[40:])
		p.Align = LE.Uint64(b[48:])
		if p.Type != elf.PT_LOAD && p.Type != elf.PT_DYNAMIC && p.Type != elf.PT_NOTE &&
			p.Type != elf.PT_GNU_EH_FRAME && p.Type != elf.PT_INTERP {
			continue
		}
		if p.Off > size || p.Filesz > size-p.Off {
			return nil, Errorf(int64(off), ErrTruncated, "segment %d (%v) extends to %#x past the end of the file", i, p.Type, p.Off+p.Filesz)
		}
		if p.Type == elf.PT_LOAD {
			if p.Filesz > p.Memsz {
				return nil, Errorf(int64(off), nil, "segment %d: file size %#x > memory size %#x", i, p.Filesz, p.Memsz)
			}
			if p.Vaddr+p.Memsz < p.Vaddr || p.Vaddr+p.Memsz > 1<<47 {
				return nil, Errorf(int64(off), nil, "segment %d: address range %#x+%#x out of range", i, p.Vaddr, p.Memsz)
			}
		}
	}
	if f.loadCount() == 0 {
		return nil, Errorf(int64(h.Phoff), nil, "no PT_LOAD segment")
	}
	if err := f.parseSections(); err != nil {
		return nil, err
	}
	return f, nil
}

func (f *File) loadCount() int {
	n := 0
	for _, p := range f.Progs {
		if p.Type == elf.PT_LOAD {
			n++
		}
	}
	return n
}

func (f *File) parseSections() error {
	h := &f.Hdr
	size := uint64(len(f.Data))
	if h.Shoff == 0 {
		return nil
	}
	if h.Shentsize != ShdrSize {
		return Errorf(58, nil, "section header size %d", h.Shentsize)
	}
	if h.Shoff > size || size-h.Shoff < ShdrSize {
		return Errorf(40, ErrTruncated, "section header table at %#x", h.Shoff)
	}
	n := uint64(h.Shnum)
	strndx := uint64(h.Shstrndx)
	if n == 0 || strndx == uint64(elf.SHN_XINDEX) {
		// Extended numbering: the real values live in section 0.
		f.ExtendedShnum = true
		if n == 0 {
			n = LE.Uint64(f.Data[h.Shoff+32:])
		}
		if strndx == uint64(elf.SHN_XINDEX) {
			strndx = uint64(LE.Uint32(f.Data[h.Shoff+40:]))
		}
	}
	if n > (size-h.Shoff)/ShdrSize {
		return Errorf(40, ErrTruncated, "%d section headers at %#x", n, h.Shoff)
	}
	f.Sects = make([]Sect64, n)
	for i := range f.Sects {
		off := h.Shoff + uint64(i)*ShdrSize
		b := f.Data[off:]
		s := &f.Sects[i]
		s.Name = LE.Uint32(b[0:])
		s.Type = elf.SectionType(LE.Uint32(b[4:]))
		s.Flags = elf.SectionFlag(LE.Uint64(b[8:]))
		s.Addr = LE.Uint64(b[16:])
		s.Off = LE.Uint64(b[24:])
		s.Size = LE.Uint64(b[32:])
		s.Link = LE.Uint32(b[40:])
		s.Info = LE.Uint32(b[44:])
		s.Addralign = LE.Uint64(b[48:])
		s.Entsize = LE.Uint64(b[56:])
		if s.Type != elf.SHT_NOBITS && s.Type != elf.SHT_NULL && (s.Off > size || s.Size > size-s.Off) {
			return Errorf(int64(off), ErrTruncated, "section %d extends to %#x past the end of the file", i, s.Off+s.Size)
		}
	}
	if strndx != 0 && strndx < n {
		str := &f.Sects[strndx]
		if str.Type == elf.SHT_STRTAB {
			tab := f.SectData(str)
			for i := range f.Sects {
				f.Sects[i].NameStr = cstring(tab, uint64(f.Sects[i].Name))
			}
		}
	}
	return nil
}

func cstring(b []byte, off uint64) string {
	if off >= uint64(len(b)) {
		return ""
	}
	b = b[off:]
	if i := bytes.IndexByte(b, 0); i >= 0 {
		b = b[:i]
	}
	return string(b)
}

// SectData returns the file bytes of a section (nil for NOBITS).
func (f *File) SectData(s *Sect64) []byte {
	if s.Type == elf.SHT_NOBITS || s.Type == elf.SHT_NULL {
		return nil
	}
	return f.Data[s.Off : s.Off+s.Size]
}

// Section returns the section named name, or nil.
func (f *File) Section(name string) *Sect64 {
	for i := range f.Sects {
		if f.Sects[i].NameStr == name {
			return &f.Sects[i]
		}
	}
	return nil
}

// ImageRange returns the lowest and the end of the highest PT_LOAD.
func (f *File) ImageRange() (lo, hi uint64) {
	lo = ^uint64(0)
	for _, p := range f.Progs {
		if p.Type != elf.PT_LOAD {
			continue
		}
		lo = min(lo, p.Vaddr)
		hi = max(hi, p.Vaddr+p.Memsz)
	}
	return lo, hi
}

// OffsetOf maps a link vaddr to a file offset backed by a PT_LOAD; n bytes
// must be file-backed.
func (f *File) OffsetOf(vaddr, n uint64) (uint64, bool) {
	for _, p := range f.Progs {
		if p.Type != elf.PT_LOAD {
			continue
		}
		if vaddr >= p.Vaddr && vaddr-p.Vaddr <= p.Filesz && n <= p.Filesz-(vaddr-p.Vaddr) {
			return p.Off + (vaddr - p.Vaddr), true
		}
	}
	return 0, false
}

// Prog returns the first program header of type t, or nil.
func (f *File) Prog(t elf.ProgType) *Prog64 {
	for i := range f.Progs {
		if f.Progs[i].Type == t {
			return &f.Progs[i]
		}
	}
	return nil
}

// DynEntry is one .dynamic entry with its file offset.
type DynEntry struct {
	Tag elf.DynTag
	Val uint64
	Off uint64 // file offset of the entry
}

// Dynamic returns the entries of PT_DYNAMIC, up to and including the first
// DT_NULL, followed by any further DT_NULL slots (spares).
func (f *File) Dynamic() []DynEntry {
	p := f.Prog(elf.PT_DYNAMIC)
	if p == nil {
		return nil
	}
	var out []DynEntry
	for off := p.Off; off+16 <= p.Off+p.Filesz; off += 16 {
		e := DynEntry{Tag: elf.DynTag(LE.Uint64(f.Data[off:])), Val: LE.Uint64(f.Data[off+8:]), Off: off}
		out = append(out, e)
	}
	return out
}

// DynVal returns the value of the first entry tagged tag before DT_NULL.
func DynVal(d []DynEntry, tag elf.DynTag) (uint64, bool) {
	for _, e := range d {
		if e.Tag == elf.DT_NULL {
			break
		}
		if e.Tag == tag {
			return e.Val, true
		}
	}
	return 0, false
}

// Note is one ELF Note.
type Note struct {
	Name string
	Type uint32
	Desc []byte
}

func parseNotes(b []byte) []Note {
	var out []Note
	for len(b) >= 12 {
		nsz, dsz, typ := uint64(LE.Uint32(b)), uint64(LE.Uint32(b[4:])), LE.Uint32(b[8:])
		b = b[12:]
		na := (nsz + 3) &^ 3
		da := (dsz + 3) &^ 3
		if na > uint64(len(b)) || da > uint64(len(b))-na {
			break
		}
		name := string(bytes.TrimRight(b[:nsz], "\x00"))
		out = append(out, Note{Name: name, Type: typ, Desc: b[na : na+dsz]})
		b = b[na+da:]
	}
	return out
}

// Notes returns every Note of PT_NOTE segments and SHT_NOTE sections.
func (f *File) Notes() []Note {
	var out []Note
	for _, p := range f.Progs {
		if p.Type == elf.PT_NOTE {
			out = append(out, parseNotes(f.Data[p.Off:p.Off+p.Filesz])...)
		}
	}
	for i := range f.Sects {
		if f.Sects[i].Type == elf.SHT_NOTE {
			out = append(out, parseNotes(f.SectData(&f.Sects[i]))...)
		}
	}
	return out
}

// NoteName and NoteType identify the marker Note of a rewritten file.
const (
	NoteName = "stint"
	NoteType = 0x53544e54 // "TNTS"
)

// Rewritten reports whether stint rewrote the file (its marker section or note).
func (f *File) Rewritten() bool {
	if f.Section(".stint") != nil {
		return true
	}
	for _, n := range f.Notes() {
		if n.Name == NoteName && n.Type == NoteType {
			return true
		}
	}
	return false
}

// BuildID returns the GNU build-id note's descriptor, or nil.
func (f *File) BuildID() []byte {
	for _, n := range f.Notes() {
		if n.Name == "GNU" && n.Type == 3 /* NT_GNU_BUILD_ID */ {
			return n.Desc
		}
	}
	return nil
}

// GoBuilt reports whether Go's toolchain linked the file: its build-id
// note ("Go", type 4) or its .go.buildinfo section, which stripping keeps.
func (f *File) GoBuilt() bool {
	if f.Section(".go.buildinfo") != nil {
		return true
	}
	for _, n := range f.Notes() {
		if n.Name == "Go" && n.Type == 4 /* NT_GO_BUILDID */ {
			return true
		}
	}
	return false
}

// DynSymbols returns the dynamic symbols as debug/elf reads them (the
// null symbol dropped: index k of the table is element k-1), or nil. The
// file is parsed once; callers must not modify the slice.
func (f *File) DynSymbols() []elf.Symbol {
	if !f.dynSymsRead {
		f.dynSymsRead = true
		if ef, err := elf.NewFile(bytes.NewReader(f.Data)); err == nil {
			f.dynSyms, _ = ef.DynamicSymbols()
			ef.Close()
		}
	}
	return f.dynSyms
}

// Sym is an entry of a symbol table (Syms).
type Sym struct {
	Table       elf.SectionType // SHT_SYMTAB or SHT_DYNSYM
	Name        []byte          // nil when the string table cannot be read
	Info        byte
	Shndx       uint16
	Value, Size uint64
}

// Syms calls fn with each entry of every SHT_SYMTAB and SHT_DYNSYM
// section but the null symbol at index 0. Name aliases the file's
// bytes, to the end of its string table (the terminating NUL is the
// caller's to find).
func (f *File) Syms(fn func(Sym)) {
	for i := range f.Sects {
		s := &f.Sects[i]
		if s.Type != elf.SHT_SYMTAB && s.Type != elf.SHT_DYNSYM {
			continue
		}
		var str []byte
		if int(s.Link) < len(f.Sects) {
			str = f.SectData(&f.Sects[s.Link])
		}
		b := f.SectData(s)
		for off := 24; off+24 <= len(b); off += 24 {
			sym := Sym{Table: s.Type, Info: b[off+4], Shndx: LE.Uint16(b[off+6:]), Value: LE.Uint64(b[off+8:]), Size: LE.Uint64(b[off+16:])}
			if name := LE.Uint32(b[off:]); int(name) < len(str) {
				sym.Name = str[name:]
			}
			fn(sym)
		}
	}
}

// Relas calls fn with each entry of every SHT_RELA section: where it
// applies, its type, its symbol index and its addend.
func (f *File) Relas(fn func(off uint64, t elf.R_X86_64, sym uint32, addend uint64)) {
	for i := range f.Sects {
		s := &f.Sects[i]
		if s.Type != elf.SHT_RELA || s.Entsize != 24 {
			continue
		}
		d := f.SectData(s)
		for o := 0; o+24 <= len(d); o += 24 {
			info := LE.Uint64(d[o+8:])
			fn(LE.Uint64(d[o:]), elf.R_X86_64(info&0xffffffff), uint32(info>>32), LE.Uint64(d[o+16:]))
		}
	}
}
