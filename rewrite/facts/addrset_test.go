package facts

import (
	"slices"
	"testing"
)

// An AddrSet holds the addresses added inside its regions, ignores the
// others, and lists them in order.
func TestAddrSet(t *testing.T) {
	s := newAddrSet([]Region{{Lo: 0x1000, Hi: 0x1081}, {Lo: 0x5000, Hi: 0x5010}})
	in := []uint64{0x1000, 0x103f, 0x1040, 0x1080, 0x5000, 0x500f}
	for _, a := range append(slices.Clone(in), 0x1000, 0xfff, 0x1081, 0x4fff, 0x5010, 0) {
		s.add(a)
	}
	var got []uint64
	s.Each(func(a uint64) { got = append(got, a) })
	if !slices.Equal(got, in) {
		t.Errorf("Each: %#x, want %#x", got, in)
	}
	for _, a := range []uint64{0xfff, 0x1001, 0x1081, 0x5010, 0x7000} {
		if s.Has(a) {
			t.Errorf("Has(%#x): true", a)
		}
	}
	for _, a := range in {
		if !s.Has(a) {
			t.Errorf("Has(%#x): false", a)
		}
	}
}
