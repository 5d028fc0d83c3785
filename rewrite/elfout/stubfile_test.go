package elfout

import (
	"bytes"
	"testing"

	"github.com/stint-project/stint/rewrite/place"
	"github.com/stint-project/stint/runtime"
)

// TestStubAreaPages: the pages Pages gives, laid at their offsets, are
// the area built byte by byte: stubs at their offsets, int3 elsewhere on
// a page with a stub's byte, zero on other pages. Stubs straddle pages,
// share pages and skip pages.
func TestStubAreaPages(t *testing.T) {
	offs := []uint64{3, 100, PageSize - 2, PageSize + 40, 5*PageSize - 5, 5 * PageSize, 9*PageSize - 1}
	var stubs []runtime.Stub
	for k, o := range offs {
		s := runtime.Stub{Off: o}
		for b := range s.Code[:place.StubLen] {
			s.Code[b] = byte(k*16 + b + 1)
		}
		stubs = append(stubs, s)
	}
	sa := &StubArea{At: 2 * PageSize, Area: 12 * PageSize, Tag: 7, Stubs: stubs}
	want := make([]byte, sa.End())
	page := func(a uint64) []byte { lo := sa.At + PageSize + a/PageSize*PageSize; return want[lo : lo+PageSize] }
	for _, s := range stubs {
		for b := uint64(0); b < place.StubLen; b++ {
			if p := page(s.Off + b); p[0] == 0 && bytes.Count(p, []byte{0}) == PageSize {
				FillInt3(p)
			}
		}
	}
	for _, s := range stubs {
		copy(want[sa.At+PageSize+s.Off:], s.Code[:place.StubLen])
	}
	hdr := runtime.StubFile{Magic: runtime.StubFileMagic, Tag: 7, AreaSize: sa.Area, NStubs: uint64(len(stubs))}
	hdr.Put(want[sa.At:])

	got := make([]byte, sa.End())
	last, pages := int64(-1), 0
	if err := sa.Pages(func(off uint64, p []byte) error {
		if int64(off) <= last || off%PageSize != 0 || len(p) != PageSize {
			t.Errorf("page at %#x (%d bytes) after %#x", off, len(p), last)
		}
		last = int64(off)
		pages++
		copy(got[off:], p)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		for k := range got {
			if got[k] != want[k] {
				t.Fatalf("first difference at %#x: %#x, want %#x", k, got[k], want[k])
			}
		}
	}
	if pages != 7 { // the header, and pages 0, 1, 4, 5, 8, 9 of the area
		t.Errorf("%d pages, want 7", pages)
	}
}
