package rewrite

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
)

// MaxInputSize is the largest input Rewrite accepts (bytes).
const MaxInputSize = 1 << 31

var le = binary.LittleEndian

// Raw ELF64 structures, little-endian, as in the ELF specification.
type header64 struct {
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

type prog64 struct {
	Type   elf.ProgType
	Flags  elf.ProgFlag
	Off    uint64
	Vaddr  uint64
	Paddr  uint64
	Filesz uint64
	Memsz  uint64
	Align  uint64
}

type sect64 struct {
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

	name string // resolved from the section name table
}

const (
	ehdrSize = 64
	phdrSize = 56
	shdrSize = 64
)

// elfFile is the parsed, validated input.
type elfFile struct {
	data  []byte
	hdr   header64
	progs []prog64
	sects []sect64 // nil when the file has no (usable) section headers
	// extendedShnum: the section count or name index is stored in
	// section 0 (more than 0xff00 sections); we leave sections alone.
	extendedShnum bool

	dynSyms     []elf.Symbol // dynSymbols' result, read once
	dynSymsRead bool
	fdes        []fdeRange // fdeRanges' result, read once
	fdesRead    bool
}

func parseELF(data []byte) (*elfFile, error) {
	if len(data) < 4 || !bytes.Equal(data[:4], []byte(elf.ELFMAG)) {
		return nil, ErrNotELF
	}
	if len(data) < 16 {
		return nil, formatErr(0, ErrTruncated, "ELF identification")
	}
	if elf.Class(data[elf.EI_CLASS]) != elf.ELFCLASS64 || elf.Data(data[elf.EI_DATA]) != elf.ELFDATA2LSB {
		return nil, ErrNot64
	}
	if len(data) < ehdrSize {
		return nil, formatErr(0, ErrTruncated, "ELF header")
	}
	f := &elfFile{data: data}
	h := &f.hdr
	h.Type = elf.Type(le.Uint16(data[16:]))
	h.Machine = elf.Machine(le.Uint16(data[18:]))
	h.Entry = le.Uint64(data[24:])
	h.Phoff = le.Uint64(data[32:])
	h.Shoff = le.Uint64(data[40:])
	h.Flags = le.Uint32(data[48:])
	h.Ehsize = le.Uint16(data[52:])
	h.Phentsize = le.Uint16(data[54:])
	h.Phnum = le.Uint16(data[56:])
	h.Shentsize = le.Uint16(data[58:])
	h.Shnum = le.Uint16(data[60:])
	h.Shstrndx = le.Uint16(data[62:])
	if h.Machine != elf.EM_X86_64 {
		return nil, ErrNotX86_64
	}
	if h.Type != elf.ET_EXEC && h.Type != elf.ET_DYN {
		return nil, ErrNotExecutable
	}
	size := uint64(len(data))
	if h.Phnum == 0 || h.Phentsize != phdrSize {
		return nil, formatErr(52, nil, "program header table: %d entries of %d bytes", h.Phnum, h.Phentsize)
	}
	if h.Phoff > size || uint64(h.Phnum)*phdrSize > size-h.Phoff {
		return nil, formatErr(32, ErrTruncated, "program header table at %#x", h.Phoff)
	}
	f.progs = make([]prog64, h.Phnum)
	for i := range f.progs {
		off := h.Phoff + uint64(i)*phdrSize
		b := data[off:]
		p := &f.progs[i]
		p.Type = elf.ProgType(le.Uint32(b[0:]))
		p.Flags = elf.ProgFlag(le.Uint32(b[4:]))
		p.Off = le.Uint64(b[8:])
		p.Vaddr = le.Uint64(b[16:])
		p.Paddr = le.Uint64(b[24:])
		p.Filesz = le.Uint64(b[32:])
		p.Memsz = le.Uint64(b[40:])
		p.Align = le.Uint64(b[48:])
		if p.Type != elf.PT_LOAD && p.Type != elf.PT_DYNAMIC && p.Type != elf.PT_NOTE &&
			p.Type != elf.PT_GNU_EH_FRAME && p.Type != elf.PT_INTERP {
			continue
		}
		if p.Off > size || p.Filesz > size-p.Off {
			return nil, formatErr(int64(off), ErrTruncated, "segment %d (%v) extends to %#x past the end of the file", i, p.Type, p.Off+p.Filesz)
		}
		if p.Type == elf.PT_LOAD {
			if p.Filesz > p.Memsz {
				return nil, formatErr(int64(off), nil, "segment %d: file size %#x > memory size %#x", i, p.Filesz, p.Memsz)
			}
			if p.Vaddr+p.Memsz < p.Vaddr || p.Vaddr+p.Memsz > 1<<47 {
				return nil, formatErr(int64(off), nil, "segment %d: address range %#x+%#x out of range", i, p.Vaddr, p.Memsz)
			}
		}
	}
	if f.loadCount() == 0 {
		return nil, formatErr(int64(h.Phoff), nil, "no PT_LOAD segment")
	}
	if err := f.parseSections(); err != nil {
		return nil, err
	}
	return f, nil
}

func (f *elfFile) loadCount() int {
	n := 0
	for _, p := range f.progs {
		if p.Type == elf.PT_LOAD {
			n++
		}
	}
	return n
}

func (f *elfFile) parseSections() error {
	h := &f.hdr
	size := uint64(len(f.data))
	if h.Shoff == 0 {
		return nil
	}
	if h.Shentsize != shdrSize {
		return formatErr(58, nil, "section header size %d", h.Shentsize)
	}
	if h.Shoff > size || size-h.Shoff < shdrSize {
		return formatErr(40, ErrTruncated, "section header table at %#x", h.Shoff)
	}
	n := uint64(h.Shnum)
	strndx := uint64(h.Shstrndx)
	if n == 0 || strndx == uint64(elf.SHN_XINDEX) {
		// Extended numbering: the real values live in section 0.
		f.extendedShnum = true
		if n == 0 {
			n = le.Uint64(f.data[h.Shoff+32:])
		}
		if strndx == uint64(elf.SHN_XINDEX) {
			strndx = uint64(le.Uint32(f.data[h.Shoff+40:]))
		}
	}
	if n > (size-h.Shoff)/shdrSize {
		return formatErr(40, ErrTruncated, "%d section headers at %#x", n, h.Shoff)
	}
	f.sects = make([]sect64, n)
	for i := range f.sects {
		off := h.Shoff + uint64(i)*shdrSize
		b := f.data[off:]
		s := &f.sects[i]
		s.Name = le.Uint32(b[0:])
		s.Type = elf.SectionType(le.Uint32(b[4:]))
		s.Flags = elf.SectionFlag(le.Uint64(b[8:]))
		s.Addr = le.Uint64(b[16:])
		s.Off = le.Uint64(b[24:])
		s.Size = le.Uint64(b[32:])
		s.Link = le.Uint32(b[40:])
		s.Info = le.Uint32(b[44:])
		s.Addralign = le.Uint64(b[48:])
		s.Entsize = le.Uint64(b[56:])
		if s.Type != elf.SHT_NOBITS && s.Type != elf.SHT_NULL && (s.Off > size || s.Size > size-s.Off) {
			return formatErr(int64(off), ErrTruncated, "section %d extends to %#x past the end of the file", i, s.Off+s.Size)
		}
	}
	if strndx != 0 && strndx < n {
		str := &f.sects[strndx]
		if str.Type == elf.SHT_STRTAB {
			tab := f.sectData(str)
			for i := range f.sects {
				f.sects[i].name = cstring(tab, uint64(f.sects[i].Name))
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

// sectData returns the file bytes of a section (nil for NOBITS).
func (f *elfFile) sectData(s *sect64) []byte {
	if s.Type == elf.SHT_NOBITS || s.Type == elf.SHT_NULL {
		return nil
	}
	return f.data[s.Off : s.Off+s.Size]
}

func (f *elfFile) section(name string) *sect64 {
	for i := range f.sects {
		if f.sects[i].name == name {
			return &f.sects[i]
		}
	}
	return nil
}

// imageRange returns the lowest and the end of the highest PT_LOAD.
func (f *elfFile) imageRange() (lo, hi uint64) {
	lo = ^uint64(0)
	for _, p := range f.progs {
		if p.Type != elf.PT_LOAD {
			continue
		}
		lo = min(lo, p.Vaddr)
		hi = max(hi, p.Vaddr+p.Memsz)
	}
	return lo, hi
}

// offsetOf maps a link vaddr to a file offset backed by a PT_LOAD; n bytes
// must be file-backed.
func (f *elfFile) offsetOf(vaddr, n uint64) (uint64, bool) {
	for _, p := range f.progs {
		if p.Type != elf.PT_LOAD {
			continue
		}
		if vaddr >= p.Vaddr && vaddr-p.Vaddr <= p.Filesz && n <= p.Filesz-(vaddr-p.Vaddr) {
			return p.Off + (vaddr - p.Vaddr), true
		}
	}
	return 0, false
}

func (f *elfFile) prog(t elf.ProgType) *prog64 {
	for i := range f.progs {
		if f.progs[i].Type == t {
			return &f.progs[i]
		}
	}
	return nil
}

// dynEntry is one .dynamic entry with its file offset.
type dynEntry struct {
	Tag elf.DynTag
	Val uint64
	Off uint64 // file offset of the entry
}

// dynamic returns the entries of PT_DYNAMIC, up to and including the first
// DT_NULL, followed by any further DT_NULL slots (spares).
func (f *elfFile) dynamic() []dynEntry {
	p := f.prog(elf.PT_DYNAMIC)
	if p == nil {
		return nil
	}
	var out []dynEntry
	for off := p.Off; off+16 <= p.Off+p.Filesz; off += 16 {
		e := dynEntry{Tag: elf.DynTag(le.Uint64(f.data[off:])), Val: le.Uint64(f.data[off+8:]), Off: off}
		out = append(out, e)
	}
	return out
}

func dynVal(d []dynEntry, tag elf.DynTag) (uint64, bool) {
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

// note is one ELF note.
type note struct {
	Name string
	Type uint32
	Desc []byte
}

func parseNotes(b []byte) []note {
	var out []note
	for len(b) >= 12 {
		nsz, dsz, typ := uint64(le.Uint32(b)), uint64(le.Uint32(b[4:])), le.Uint32(b[8:])
		b = b[12:]
		na := (nsz + 3) &^ 3
		da := (dsz + 3) &^ 3
		if na > uint64(len(b)) || da > uint64(len(b))-na {
			break
		}
		name := string(bytes.TrimRight(b[:nsz], "\x00"))
		out = append(out, note{Name: name, Type: typ, Desc: b[na : na+dsz]})
		b = b[na+da:]
	}
	return out
}

// notes returns every note of PT_NOTE segments and SHT_NOTE sections.
func (f *elfFile) notes() []note {
	var out []note
	for _, p := range f.progs {
		if p.Type == elf.PT_NOTE {
			out = append(out, parseNotes(f.data[p.Off:p.Off+p.Filesz])...)
		}
	}
	for i := range f.sects {
		if f.sects[i].Type == elf.SHT_NOTE {
			out = append(out, parseNotes(f.sectData(&f.sects[i]))...)
		}
	}
	return out
}

// stintNoteName and stintNoteType identify the marker note of a rewritten file.
const (
	stintNoteName = "stint"
	stintNoteType = 0x53544e54 // "TNTS"
)

func (f *elfFile) rewritten() bool {
	if f.section(".stint") != nil {
		return true
	}
	for _, n := range f.notes() {
		if n.Name == stintNoteName && n.Type == stintNoteType {
			return true
		}
	}
	return false
}

func (f *elfFile) buildID() []byte {
	for _, n := range f.notes() {
		if n.Name == "GNU" && n.Type == 3 /* NT_GNU_BUILD_ID */ {
			return n.Desc
		}
	}
	return nil
}

// dynSymbols returns the dynamic symbols as debug/elf reads them (the
// null symbol dropped: index k of the table is element k-1), or nil. The
// file is parsed once; callers must not modify the slice.
func (f *elfFile) dynSymbols() []elf.Symbol {
	if !f.dynSymsRead {
		f.dynSymsRead = true
		if ef, err := elf.NewFile(bytes.NewReader(f.data)); err == nil {
			f.dynSyms, _ = ef.DynamicSymbols()
			ef.Close()
		}
	}
	return f.dynSyms
}

// relas calls fn with each entry of every SHT_RELA section: where it
// applies, its type, its symbol index and its addend.
func (f *elfFile) relas(fn func(off uint64, t elf.R_X86_64, sym uint32, addend uint64)) {
	for i := range f.sects {
		s := &f.sects[i]
		if s.Type != elf.SHT_RELA || s.Entsize != 24 {
			continue
		}
		d := f.sectData(s)
		for o := 0; o+24 <= len(d); o += 24 {
			info := le.Uint64(d[o+8:])
			fn(le.Uint64(d[o:]), elf.R_X86_64(info&0xffffffff), uint32(info>>32), le.Uint64(d[o+16:]))
		}
	}
}
