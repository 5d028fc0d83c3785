package ehframe

import (
	"debug/elf"
	"slices"
	"testing"
)

func TestHdrStartsBad(t *testing.T) {
	good := []byte{1, 0x1b, 0x03, 0x3b, 0, 0, 0, 0, 2, 0, 0, 0, 0x10, 0, 0, 0, 0, 0, 0, 0, 0x20, 0, 0, 0, 0, 0, 0, 0}
	if s, err := HdrStarts(good, 0x1000); err != nil || len(s) != 2 || s[0] != 0x1010 || s[1] != 0x1020 {
		t.Errorf("good header: %#x, %v", s, err)
	}
	for _, bad := range [][]byte{nil, good[:8], append([]byte{2}, good[1:]...), append([]byte{1, 0x1b, 0x03, 0x33}, good[4:]...)} {
		if _, err := HdrStarts(bad, 0); err == nil {
			t.Errorf("% x: no error", bad)
		}
	}
	lying := append([]byte(nil), good...)
	lying[8] = 0xff // more entries than bytes
	if _, err := HdrStarts(lying, 0); err == nil {
		t.Error("entry count beyond the data: no error")
	}
}

// TestAgreeGzip checks the two tables of a stripped system binary against
// each other: every .eh_frame_hdr entry is an FDE start, and there are as
// many of each.
func TestAgreeGzip(t *testing.T) {
	f, err := elf.Open("/usr/bin/gzip")
	if err != nil {
		t.Skipf("need /usr/bin/gzip: %v", err)
	}
	defer f.Close()
	eh, hdr := f.Section(".eh_frame"), f.Section(".eh_frame_hdr")
	if eh == nil || hdr == nil {
		t.Skip("gzip has no .eh_frame or .eh_frame_hdr here")
	}
	ehData, _ := eh.Data()
	hdrData, _ := hdr.Data()
	starts := Starts(ehData, eh.Addr)
	table, err := HdrStarts(hdrData, hdr.Addr)
	if err != nil {
		t.Fatal(err)
	}
	if len(starts) < 50 || len(starts) != len(table) {
		t.Fatalf(".eh_frame gives %d starts, .eh_frame_hdr %d", len(starts), len(table))
	}
	if !slices.IsSorted(table) {
		t.Error(".eh_frame_hdr table not sorted")
	}
	for _, s := range table {
		if !slices.Contains(starts, s) {
			t.Errorf(".eh_frame_hdr start %#x not among .eh_frame starts", s)
		}
	}
	for _, fd := range FDEs(ehData, eh.Addr) {
		if fd.Hi <= fd.Lo {
			t.Errorf("FDE [%#x, %#x) is empty", fd.Lo, fd.Hi)
		}
	}
}

func FuzzFDEs(f *testing.F) {
	f.Add([]byte{0x14, 0, 0, 0, 0, 0, 0, 0, 1, 'z', 'R', 0, 1, 0x78, 0x10, 1, 0x1b, 0, 0, 0}, uint64(0x1000))
	f.Fuzz(func(t *testing.T, b []byte, vaddr uint64) {
		for _, fd := range FDEs(b, vaddr) {
			if fd.Lo == 0 {
				t.Fatal("FDE with a null start")
			}
		}
	})
}

func FuzzHdrStarts(f *testing.F) {
	f.Add([]byte{1, 0x1b, 0x03, 0x3b, 0, 0, 0, 0, 2, 0, 0, 0, 0x10, 0, 0, 0, 0, 0, 0, 0, 0x20, 0, 0, 0, 0, 0, 0, 0}, uint64(0x1000))
	f.Fuzz(func(t *testing.T, b []byte, vaddr uint64) {
		s, _ := HdrStarts(b, vaddr)
		if len(s) > len(b)/8 {
			t.Fatalf("%d starts from %d bytes", len(s), len(b))
		}
	})
}
