package ehframe

// DW_EH_PE pointer encodings (LSB, "DWARF Exception Header Encoding").
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

// reader is a sticky-error cursor over section bytes at vaddr base: once
// a read runs past the end, bad is set and every later read returns 0.
type reader struct {
	b    []byte
	off  int
	base uint64 // vaddr of b[0]
	bad  bool
}

func (r *reader) u8() uint8 {
	if r.off+1 > len(r.b) {
		r.bad = true
		return 0
	}
	v := r.b[r.off]
	r.off++
	return v
}

// n reads a k-byte little-endian unsigned value.
func (r *reader) n(k int) uint64 {
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

func (r *reader) uleb() uint64 {
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

func (r *reader) sleb() int64 {
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

func (r *reader) cstr() string {
	start := r.off
	for r.off < len(r.b) && r.b[r.off] != 0 {
		r.off++
	}
	s := string(r.b[start:r.off])
	r.u8()
	return s
}

// ptr reads a pointer with encoding enc; dataBase is for DW_EH_PE_datarel.
func (r *reader) ptr(enc uint8, dataBase uint64) uint64 {
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
