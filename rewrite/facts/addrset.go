package facts

import "math/bits"

// AddrSet is a set of addresses inside code regions: a bit per byte of
// each region. A fixed-address module's indirect targets take every
// data word and immediate that points into its code: millions of
// insertions, mostly repeats, which a map made a twentieth of cc1plus's
// rewrite.
type AddrSet struct {
	regions []Region
	bits    [][]uint64 // by region: bit a-Lo
}

func newAddrSet(regions []Region) *AddrSet {
	s := &AddrSet{regions: regions, bits: make([][]uint64, len(regions))}
	for k, r := range regions {
		s.bits[k] = make([]uint64, (r.Hi-r.Lo+63)/64)
	}
	return s
}

// slot returns the region index and bit of a, or -1 outside them.
func (s *AddrSet) slot(a uint64) (int, uint64) {
	for k, r := range s.regions {
		if a >= r.Lo && a < r.Hi {
			return k, a - r.Lo
		}
	}
	return -1, 0
}

// add puts a in the set (an address outside the regions is ignored).
func (s *AddrSet) add(a uint64) {
	if k, o := s.slot(a); k >= 0 {
		s.bits[k][o/64] |= 1 << (o % 64)
	}
}

// Has reports whether a is in the set.
func (s *AddrSet) Has(a uint64) bool {
	k, o := s.slot(a)
	return k >= 0 && s.bits[k][o/64]>>(o%64)&1 != 0
}

// Each calls fn with every address of the set, region by region, in
// ascending order within each.
func (s *AddrSet) Each(fn func(a uint64)) {
	for k, ws := range s.bits {
		for w, x := range ws {
			for ; x != 0; x &= x - 1 {
				fn(s.regions[k].Lo + uint64(w)*64 + uint64(bits.TrailingZeros64(x)))
			}
		}
	}
}
