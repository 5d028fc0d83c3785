package cct

import "math/bits"

// table is an open-addressing hash table (linear probing) from a
// two-word key to a uint32, for the builder's hot path: one lookup per
// call event, no allocation per lookup, memory proportional to the
// number of distinct keys. Value 0 marks an empty slot, so stored values
// are index+1.
type table struct {
	keys []pair
	vals []uint32
	mask uint64
	n    int
}

type pair struct{ a, b uint64 }

func newTable(capHint int) *table {
	size := 16
	for size < 2*capHint {
		size *= 2
	}
	return &table{keys: make([]pair, size), vals: make([]uint32, size), mask: uint64(size - 1)}
}

func hash2(a, b uint64) uint64 {
	hi, lo := bits.Mul64(a^0x9e3779b97f4a7c15, 0xbf58476d1ce4e5b9)
	h := hi ^ lo
	hi, lo = bits.Mul64(h^b, 0x94d049bb133111eb)
	return hi ^ lo
}

// get returns the value stored for (a, b), or 0 if there is none.
func (t *table) get(a, b uint64) uint32 {
	for i := hash2(a, b) & t.mask; ; i = (i + 1) & t.mask {
		v := t.vals[i]
		if v == 0 {
			return 0
		}
		if k := t.keys[i]; k.a == a && k.b == b {
			return v
		}
	}
}

// put stores v (nonzero) for (a, b), which must not be present.
func (t *table) put(a, b uint64, v uint32) {
	if 4*(t.n+1) > 3*len(t.vals) {
		t.grow()
	}
	for i := hash2(a, b) & t.mask; ; i = (i + 1) & t.mask {
		if t.vals[i] == 0 {
			t.keys[i], t.vals[i] = pair{a, b}, v
			t.n++
			return
		}
	}
}

func (t *table) grow() {
	old, oldv := t.keys, t.vals
	size := 2 * len(old)
	t.keys, t.vals, t.mask, t.n = make([]pair, size), make([]uint32, size), uint64(size-1), 0
	for i, v := range oldv {
		if v != 0 {
			t.put(old[i].a, old[i].b, v)
		}
	}
}
