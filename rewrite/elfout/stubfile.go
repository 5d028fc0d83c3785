package elfout

import (
	"hash/fnv"
	"unsafe"

	"github.com/stint-project/stint/rewrite/elfin"
	"github.com/stint-project/stint/rewrite/place"
	"github.com/stint-project/stint/runtime"
)

// StubArea is the stub area stored in the output file (struct
// stint_stub_file): a header page at At, a page-aligned offset past
// everything else, then Area bytes where each stub's code sits at its
// offset. The runtime maps the chunks from it: no stub area to write at
// every start, and its pages are shared through the page cache by every
// run. Pages without stubs stay zero (holes on disk, see writeSparse); a
// page with stubs is int3 but for them. A file whose stub file is gone
// (stripped) or does not match the module's tag still runs: the runtime
// builds the area from the stub list as before. It is written page by
// page (Pages), never whole: cc1plus's has 93,721 pages with stubs, 384
// MB that the output image would otherwise hold.
type StubArea struct {
	At, Area uint64
	Tag      uint64
	Stubs    []runtime.Stub // sorted by Off
}

// End is the end of the file with the stub area.
func (sa *StubArea) End() uint64 { return sa.At + PageSize + sa.Area }

// Pages calls fn with the file offset and contents of the header page,
// then of every page of the area that holds a stub's byte, in file
// order; page is reused between calls.
func (sa *StubArea) Pages(fn func(off uint64, page []byte) error) error {
	page := make([]byte, PageSize)
	hdr := runtime.StubFile{Magic: runtime.StubFileMagic, Tag: sa.Tag, AreaSize: sa.Area, NStubs: uint64(len(sa.Stubs))}
	hdr.Put(page)
	if err := fn(sa.At, page); err != nil {
		return err
	}
	next := uint64(0) // the first page not written yet
	for k := 0; k < len(sa.Stubs); {
		pg := max(sa.Stubs[k].Off/PageSize, next) // a stub's second page comes after its first
		lo, hi := pg*PageSize, (pg+1)*PageSize
		FillInt3(page)
		for j := k; j < len(sa.Stubs) && sa.Stubs[j].Off < hi; j++ {
			so := &sa.Stubs[j]
			for b := uint64(0); b < place.StubLen; b++ {
				if a := so.Off + b; a >= lo && a < hi {
					page[a-lo] = so.Code[b]
				}
			}
		}
		if err := fn(sa.At+PageSize+lo, page); err != nil {
			return err
		}
		next = pg + 1
		for k < len(sa.Stubs) && sa.Stubs[k].Off+place.StubLen <= hi {
			k++
		}
	}
	return nil
}

// newStubArea returns the stub area of stubs (sorted by Off) in an area
// of area bytes, for a file whose other parts end at end, and points the
// module struct (at out's offset modOff) at it; nil without stubs.
func newStubArea(out []byte, end, modOff, area uint64, stubs []runtime.Stub) *StubArea {
	if len(stubs) == 0 || area == 0 {
		return nil
	}
	h := fnv.New64a()
	var w [16]byte
	elfin.LE.PutUint64(w[:], area)
	h.Write(w[:8])
	for _, so := range stubs {
		elfin.LE.PutUint64(w[:], so.Off)
		copy(w[8:], so.Code[:place.StubLen])
		h.Write(w[:8+place.StubLen])
	}
	sa := &StubArea{At: AlignUp(end, PageSize), Area: area, Tag: h.Sum64() | 1 /* never 0 */, Stubs: stubs}
	var m runtime.Module
	elfin.LE.PutUint64(out[modOff+uint64(unsafe.Offsetof(m.StubFileOff)):], sa.At)
	elfin.LE.PutUint64(out[modOff+uint64(unsafe.Offsetof(m.StubFileTag)):], sa.Tag)
	return sa
}

// AppendTo returns out (which ends where the area's header page may
// start) with the stub area appended, zero where no stub is.
func (sa *StubArea) AppendTo(out []byte) []byte {
	if sa == nil {
		return out
	}
	if end := sa.End(); end <= uint64(cap(out)) {
		out = out[:end] // zero: capacity Write reserved and left unwritten
	} else {
		out = append(out, make([]byte, end-uint64(len(out)))...)
	}
	sa.Pages(func(off uint64, page []byte) error {
		copy(out[off:], page)
		return nil
	})
	return out
}
