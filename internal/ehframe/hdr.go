package ehframe

import "fmt"

// HdrStarts returns the function starts of the binary search table of an
// .eh_frame_hdr section (or PT_GNU_EH_FRAME segment) at vaddr, in table
// order (sorted, for a well-formed table). The table is read only when it
// is the one libgcc's unwinder searches (datarel|sdata4 entries); other
// encodings of eh_frame_ptr and fde_count are read as the LSB defines
// them. On a malformed table it returns the entries read before the fault
// and an error.
func HdrStarts(b []byte, vaddr uint64) ([]uint64, error) {
	r := &reader{b: b, base: vaddr}
	if v := r.u8(); r.bad || v != 1 {
		if r.bad {
			return nil, fmt.Errorf("eh_frame_hdr: too short")
		}
		return nil, fmt.Errorf("eh_frame_hdr: version %d", v)
	}
	ptrEnc, cntEnc, tabEnc := r.u8(), r.u8(), r.u8()
	if tabEnc != peDataRel|peSdata4 || cntEnc == peOmit {
		return nil, fmt.Errorf("eh_frame_hdr: no binary search table (encodings %#x %#x %#x)", ptrEnc, cntEnc, tabEnc)
	}
	r.ptr(ptrEnc, vaddr)
	n := r.ptr(cntEnc, vaddr)
	if r.bad {
		return nil, fmt.Errorf("eh_frame_hdr: too short")
	}
	if n > uint64(len(b)-r.off)/8 {
		return nil, fmt.Errorf("eh_frame_hdr: %d entries do not fit %d bytes", n, len(b))
	}
	out := make([]uint64, 0, n)
	for i := uint64(0); i < n; i++ {
		pc := r.ptr(tabEnc, vaddr)
		r.ptr(tabEnc, vaddr)
		if r.bad {
			return out, fmt.Errorf("eh_frame_hdr: entry %d: truncated", i)
		}
		out = append(out, pc)
	}
	return out, nil
}
