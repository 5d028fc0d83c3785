package rewrite

import "debug/elf"

// Function starts from .eh_frame: every FDE's pc_begin. The format is the
// DWARF call frame information as modified by the LSB (Linux Standard
// Base Core, "Exception Frames"): CIE_id 0 marks a CIE, otherwise the
// field is the distance back to the FDE's CIE; pointers use the DW_EH_PE
// encodings named by the CIE's 'R' augmentation.

const (
	pePtr     = 0x00
	peULEB    = 0x01
	peUdata2  = 0x02
	peUdata4  = 0x03
	peUdata8  = 0x04
	peSLEB    = 0x09
	peSdata2  = 0x0a
	peSdata4  = 0x0b
	peSdata8  = 0x0c
	pePCRel   = 0x10
	peDataRel = 0x30
	peOmit    = 0xff
)

// ehReader is a sticky-error cursor over section bytes at vaddr base.
type ehReader struct {
	b    []byte
	off  int
	base uint64 // vaddr of b[0]
	bad  bool
}

func (r *ehReader) u8() uint8 {
	if r.off+1 > len(r.b) {
		r.bad = true
		return 0
	}
	v := r.b[r.off]
	r.off++
	return v
}

func (r *ehReader) n(k int) uint64 {
	if k < 0 || r.off+k > len(r.b) || r.off+k < r.off {
		r.bad = true
		r.off = len(r.b)
		return 0
	}
	var v uint64
	for i := k - 1; i >= 0; i-- {
		v = v<<8 | uint64(r.b[r.off+i])
	}
	r.off += k
	return v
}

func (r *ehReader) uleb() uint64 {
	var v uint64
	for shift := uint(0); ; shift += 7 {
		b := r.u8()
		if r.bad {
			return 0
		}
		if shift < 64 {
			v |= uint64(b&0x7f) << shift
		}
		if b&0x80 == 0 {
			return v
		}
	}
}

func (r *ehReader) sleb() int64 {
	var v int64
	var shift uint
	var b uint8
	for {
		b = r.u8()
		if r.bad {
			return 0
		}
		if shift < 64 {
			v |= int64(b&0x7f) << shift
		}
		shift += 7
		if b&0x80 == 0 {
			break
		}
	}
	if shift < 64 && b&0x40 != 0 {
		v |= -1 << shift
	}
	return v
}

func (r *ehReader) cstr() string {
	start := r.off
	for r.off < len(r.b) && r.b[r.off] != 0 {
		r.off++
	}
	s := string(r.b[start:r.off])
	r.u8()
	return s
}

// ptr reads a pointer with encoding enc; dataBase is for DW_EH_PE_datarel.
func (r *ehReader) ptr(enc uint8, dataBase uint64) uint64 {
	if enc == peOmit {
		return 0
	}
	at := r.base + uint64(r.off)
	var v uint64
	switch enc & 0x0f {
	case pePtr, peUdata8, peSdata8:
		v = r.n(8)
	case peULEB:
		v = r.uleb()
	case peSLEB:
		v = uint64(r.sleb())
	case peUdata2:
		v = r.n(2)
	case peSdata2:
		v = uint64(int64(int16(r.n(2))))
	case peUdata4:
		v = r.n(4)
	case peSdata4:
		v = uint64(int64(int32(r.n(4))))
	default:
		r.bad = true
		return 0
	}
	switch enc & 0x70 {
	case 0:
	case pePCRel:
		v += at
	case peDataRel:
		v += dataBase
	default:
		r.bad = true
	}
	return v
}

// ehFrameStarts returns the pc_begin of every FDE in an .eh_frame
// section at vaddr. It stops quietly at the first malformed entry.
func ehFrameStarts(b []byte, vaddr uint64) []uint64 {
	fdes := ehFrameFDEs(b, vaddr)
	out := make([]uint64, len(fdes))
	for k, f := range fdes {
		out[k] = f.lo
	}
	return out
}

// fdeRange is the code range [lo, hi) one FDE describes: a function, or
// a part of one (gcc's .cold parts get their own).
// fdeRange is an FDE's code range; lsda is set when the FDE names a
// language-specific data area (C++ landing pads, which the unwinder
// enters at addresses no branch names).
type fdeRange struct {
	lo, hi uint64
	lsda   bool
}

// ehFrameFDEs returns the range of every FDE in an .eh_frame section at
// vaddr, in file order. It stops quietly at the first malformed entry.
func ehFrameFDEs(b []byte, vaddr uint64) []fdeRange {
	var out []fdeRange
	type cie struct {
		fdeEnc, lsdaEnc uint8
		aug, lsda       bool // 'z' augmentation data in FDEs; an LSDA pointer in it
	}
	cies := map[int]cie{}
	off := 0
	for off+4 <= len(b) {
		r := &ehReader{b: b, off: off, base: vaddr}
		length := r.n(4)
		if length == 0 {
			break // terminator
		}
		if length == 0xffffffff {
			length = r.n(8)
		}
		start := r.off
		if r.bad || length > uint64(len(b)-start) {
			break
		}
		end := start + int(length)
		r.b = b[:end]
		idAt := r.off
		id := r.n(4)
		if id == 0 {
			c := cie{fdeEnc: pePtr, lsdaEnc: 0xff}
			version := r.u8()
			aug := r.cstr()
			if len(aug) > 0 && aug[0] == 'z' || aug == "" {
				if len(aug) >= 2 && aug[:2] == "eh" {
					r.n(8)
				}
				r.uleb() // code alignment
				r.sleb() // data alignment
				if version == 1 {
					r.u8()
				} else {
					r.uleb()
				}
				if len(aug) > 0 {
					c.aug = true
					r.uleb() // augmentation data length
					for _, a := range aug[1:] {
						switch a {
						case 'R':
							c.fdeEnc = r.u8()
						case 'P':
							r.ptr(r.u8()&0x7f, 0)
						case 'L':
							c.lsdaEnc = r.u8()
							c.lsda = true
						}
					}
				}
				if !r.bad {
					cies[off] = c
				}
			}
		} else {
			cieOff := idAt - int(id)
			if c, ok := cies[cieOff]; ok && id <= uint64(idAt) {
				pc := r.ptr(c.fdeEnc&0x7f, 0)
				n := r.ptr(c.fdeEnc&0x0f, 0) // pc_range: the same format, never relative
				lsda := false
				if c.aug {
					r.uleb() // augmentation data length
					if c.lsda && c.lsdaEnc != 0xff {
						lsda = r.ptr(c.lsdaEnc&0x0f, 0) != 0 // its format only: a null pointer reads 0
					}
				}
				if !r.bad && pc != 0 {
					out = append(out, fdeRange{lo: pc, hi: pc + n, lsda: lsda})
				}
			}
		}
		off = end
	}
	return out
}

// ehFrameHdrStarts reads the binary search table of .eh_frame_hdr.
func ehFrameHdrStarts(b []byte, vaddr uint64) []uint64 {
	r := &ehReader{b: b, base: vaddr}
	if r.u8() != 1 {
		return nil
	}
	ptrEnc, cntEnc, tabEnc := r.u8(), r.u8(), r.u8()
	r.ptr(ptrEnc, vaddr)
	if cntEnc == peOmit || tabEnc == peOmit {
		return nil
	}
	n := r.ptr(cntEnc, vaddr)
	if r.bad || n > uint64(len(b)/8) {
		return nil
	}
	out := make([]uint64, 0, n)
	for i := uint64(0); i < n && !r.bad; i++ {
		pc := r.ptr(tabEnc, vaddr)
		r.ptr(tabEnc, vaddr)
		if !r.bad {
			out = append(out, pc)
		}
	}
	return out
}

// functionStarts collects function entry points from the symbol tables,
// .eh_frame (or, without it, .eh_frame_hdr) and the entry points.
func (f *elfFile) functionStarts() []uint64 {
	var out []uint64
	for i := range f.sects {
		s := &f.sects[i]
		switch s.Type {
		case elf.SHT_SYMTAB, elf.SHT_DYNSYM:
			b := f.sectData(s)
			for off := 24; off+24 <= len(b); off += 24 {
				info := b[off+4]
				shndx := le.Uint16(b[off+6:])
				val := le.Uint64(b[off+8:])
				t := elf.SymType(info & 0xf)
				if (t == elf.STT_FUNC || t == 10 /* STT_GNU_IFUNC */) && shndx != 0 && val != 0 {
					out = append(out, val)
				}
			}
		}
	}
	if s := f.section(".eh_frame"); s != nil && s.Type == elf.SHT_PROGBITS {
		out = append(out, ehFrameStarts(f.sectData(s), s.Addr)...)
	} else if p := f.prog(elf.PT_GNU_EH_FRAME); p != nil {
		out = append(out, ehFrameHdrStarts(f.data[p.Off:p.Off+p.Filesz], p.Vaddr)...)
	}
	if f.hdr.Entry != 0 {
		out = append(out, f.hdr.Entry)
	}
	d := f.dynamic()
	for _, t := range []elf.DynTag{elf.DT_INIT, elf.DT_FINI} {
		if v, ok := dynVal(d, t); ok && v != 0 {
			out = append(out, v)
		}
	}
	return out
}
