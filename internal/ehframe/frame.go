package ehframe

// FDE is the code range [Lo, Hi) one FDE describes: a function, or a part
// of one (gcc's .cold parts get their own). LSDA is set when the FDE
// names a language-specific data area: C++ landing pads, which the
// unwinder enters at addresses no branch names.
type FDE struct {
	Lo, Hi uint64
	LSDA   bool
}

// cie is what an FDE needs of its CIE.
type cie struct {
	fdeEnc, lsdaEnc uint8
	aug, lsda       bool // 'z' augmentation data in FDEs; an LSDA pointer in it
}

// FDEs returns the range of every FDE in an .eh_frame section at vaddr,
// in file order. It stops quietly at the first malformed entry.
func FDEs(b []byte, vaddr uint64) []FDE {
	var out []FDE
	cies := map[int]cie{}
	off := 0
	for off+4 <= len(b) {
		r := &reader{b: b, off: off, base: vaddr}
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
			if c, ok := readCIE(r); ok {
				cies[off] = c
			}
		} else if c, ok := cies[idAt-int(id)]; ok && id <= uint64(idAt) {
			if f, ok := readFDE(r, c); ok {
				out = append(out, f)
			}
		}
		off = end
	}
	return out
}

// readCIE reads a CIE's body after its id; false when it is malformed or
// of an augmentation the FDEs cannot be read by.
func readCIE(r *reader) (cie, bool) {
	c := cie{fdeEnc: pePtr, lsdaEnc: 0xff}
	version := r.u8()
	aug := r.cstr()
	if !(len(aug) > 0 && aug[0] == 'z' || aug == "") {
		return c, false
	}
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
	return c, !r.bad
}

// readFDE reads an FDE's range after its CIE pointer.
func readFDE(r *reader, c cie) (FDE, bool) {
	pc := r.ptr(c.fdeEnc&0x7f, 0)
	n := r.ptr(c.fdeEnc&0x0f, 0) // pc_range: the same format, never relative
	lsda := false
	if c.aug {
		r.uleb() // augmentation data length
		if c.lsda && c.lsdaEnc != 0xff {
			lsda = r.ptr(c.lsdaEnc&0x0f, 0) != 0 // its format only: a null pointer reads 0
		}
	}
	return FDE{Lo: pc, Hi: pc + n, LSDA: lsda}, !r.bad && pc != 0
}

// Starts returns the start of every FDE in an .eh_frame section at vaddr,
// in file order.
func Starts(b []byte, vaddr uint64) []uint64 {
	fdes := FDEs(b, vaddr)
	out := make([]uint64, len(fdes))
	for k, f := range fdes {
		out[k] = f.Lo
	}
	return out
}
