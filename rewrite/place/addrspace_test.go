package place

import (
	"testing"
)

func neg(x int64) uint64 { return uint64(-x) }

func TestFreeSpace(t *testing.T) {
	tests := []struct {
		name     string
		allowed  []Range
		reserved []Range
		want     []Range
	}{
		{"page aligned inward", []Range{{0x1010, 0x5ff0}}, nil, []Range{{0x2000, 0x5000}}},
		{"reserve splits", []Range{{0x10000, 0x20000}}, []Range{{0x14000, 0x15001}}, []Range{{0x10000, 0x14000}, {0x16000, 0x20000}}},
		{"below zero (PIE)", []Range{{neg(0x10000), 0x3000}}, nil, []Range{{neg(0x10000), 0x3000}}},
		{"empty and inverted ignored", []Range{{0x5000, 0x5000}, {0x9000, 0x1000}}, nil, []Range{}},
		{"overlapping allowed merge", []Range{{0x1000, 0x3000}, {0x2000, 0x5000}}, nil, []Range{{0x1000, 0x5000}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := NewAddrSpace(tc.allowed)
			for _, r := range tc.reserved {
				s.Reserve(r)
			}
			have := s.Free()
			if len(have) != len(tc.want) {
				t.Fatalf("have %x, want %x", have, tc.want)
			}
			for k := range have {
				if have[k] != tc.want[k] {
					t.Fatalf("have %x, want %x", have, tc.want)
				}
			}
		})
	}
}

func TestAllocPrefersUsedPages(t *testing.T) {
	s := NewAddrSpace([]Range{{0x100000, 0x10000000}})
	// A first stub at a fixed address, then one with a 16 MiB window
	// containing that page: it must share the page.
	x, ok := s.alloc(0x200010, 0x200011, constraint{}, false)
	if !ok || x != 0x200010 {
		t.Fatalf("single-address alloc = %#x, %v", x, ok)
	}
	y, ok := s.alloc(0x100000, 0x1100000, constraint{}, false)
	if !ok || y>>12 != 0x200 {
		t.Fatalf("window alloc = %#x, %v; want page 0x200000", y, ok)
	}
	if y < x+StubLen && x < y+StubLen {
		t.Fatalf("stubs %#x and %#x overlap", x, y)
	}
	// The same address again is taken.
	if _, ok := s.alloc(0x200010, 0x200011, constraint{}, false); ok {
		t.Fatal("allocated an occupied address")
	}
	// reuseOnly refuses new pages.
	if _, ok := s.alloc(0x300000, 0x300100, constraint{}, true); ok {
		t.Fatal("reuseOnly allocated a new page")
	}
	// A stub never crosses a page end.
	if x, ok := s.alloc(0x400ffd, 0x400ffe, constraint{}, false); ok {
		t.Fatalf("allocated %#x across a page end", x)
	}
	// Periodic constraint: (x - base) mod 256 == 0xe9.
	c := constraint{base: 0x5, period: 256, off: 0xe9, unit: 1}
	z, ok := s.alloc(0x500000, 0x600000, c, false)
	if !ok || !c.ok(z) {
		t.Fatalf("periodic alloc = %#x, %v", z, ok)
	}
	n := s.Stubs()
	s.release(z)
	if s.Stubs() != n-1 {
		t.Fatalf("release: %d stubs, want %d", s.Stubs(), n-1)
	}
	// Outside allowed space: nothing.
	if _, ok := s.alloc(0x10, 0x1000, constraint{}, false); ok {
		t.Fatal("allocated outside allowed space")
	}
}

func TestChunksAndLayout(t *testing.T) {
	s := NewAddrSpace([]Range{{0x100000, 0x10000000}})
	s.Reserve(Range{0x180000, 0x181000})
	s.ChunkGap = 0x4000
	for _, a := range []int64{
		0x100000, 0x101010, // adjacent pages: one chunk
		0x104000,           // gap of 2 pages <= ChunkGap: same chunk
		0x110000,           // too far: new chunk
		0x17f000, 0x181000, // reserved page between: two chunks
		0x200020, 0x300020, // same page offset: must not collide in the source area
	} {
		if _, ok := s.alloc(a, a+1, constraint{}, false); !ok {
			t.Fatalf("alloc %#x failed", a)
		}
	}
	want := []Range{{0x100000, 0x105000}, {0x110000, 0x111000}, {0x17f000, 0x180000}, {0x181000, 0x182000}, {0x200000, 0x201000}, {0x300000, 0x301000}}
	have := s.Chunks(4096)
	if len(have) != len(want) {
		t.Fatalf("chunks %x, want %x", have, want)
	}
	for k := range have {
		if have[k] != want[k] {
			t.Fatalf("chunks %x, want %x", have, want)
		}
	}
	l := s.Layout(4096)
	if len(l.Chunks) != len(want) {
		t.Fatalf("layout has %d chunks, want %d", len(l.Chunks), len(want))
	}
	// Every stub has its own 5 source bytes.
	used := map[uint64]int64{}
	for pn, pg := range s.pages {
		_ = pn
		for _, x := range pg.stubs {
			off, ok := l.Src(uint64(x))
			if !ok {
				t.Fatalf("stub %#x in no chunk", x)
			}
			if off+StubLen > l.SrcSize {
				t.Fatalf("stub %#x at source %#x beyond %#x", x, off, l.SrcSize)
			}
			for b := off; b < off+StubLen; b++ {
				if o, dup := used[b]; dup {
					t.Fatalf("stubs %#x and %#x share source byte %#x", o, x, b)
				}
				used[b] = x
			}
		}
	}
	for _, c := range l.Chunks {
		if c.Src+(c.Hi-c.Lo) > l.SrcSize {
			t.Errorf("chunk %x source beyond the area", c)
		}
	}
	// Sharing: 6 chunks totalling 10 pages fit in fewer source pages.
	if l.SrcSize >= 10*4096 {
		t.Errorf("source area %#x bytes: no sharing", l.SrcSize)
	}
}
