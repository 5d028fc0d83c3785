package cov

import "math/bits"

// table is an open-addressing hash set of distinct events (linear
// probing), each with its val: the hot path of Compare does one lookup
// per event row, without allocating, and memory grows with the number
// of distinct events only.
//
// A key and its val share a slot, so a lookup touches one cache line:
// with a million distinct events the table is far larger than the
// caches, and misses are what a lookup costs.
type table struct {
	slots []entry // slots[i].v.used marks an occupied slot
	mask  uint64
	n     int
}

type entry struct {
	k key
	v val
}

func newTable() *table {
	const size = 1 << 12
	return &table{slots: make([]entry, size), mask: size - 1}
}

func (k key) hash() uint64 {
	hi, lo := bits.Mul64(k.a^0x9e3779b97f4a7c15, 0xbf58476d1ce4e5b9)
	h := hi ^ lo
	hi, lo = bits.Mul64(h^k.b, 0x94d049bb133111eb)
	h = hi ^ lo
	hi, lo = bits.Mul64(h^k.c, 0xd6e8feb86659fd93)
	return hi ^ lo
}

// find returns the val of k, or nil if k is not in the set.
func (t *table) find(k key) *val {
	for i := k.hash() & t.mask; ; i = (i + 1) & t.mask {
		e := &t.slots[i]
		if !e.v.used {
			return nil
		}
		if e.k == k {
			return &e.v
		}
	}
}

// slot returns the val of k, adding k (first = last = -1) if it is not
// in the set. The pointer is valid until the next slot call.
func (t *table) slot(k key) *val {
	for i := k.hash() & t.mask; ; i = (i + 1) & t.mask {
		e := &t.slots[i]
		if !e.v.used {
			if 4*(t.n+1) > 3*len(t.slots) {
				t.grow()
				return t.slot(k)
			}
			*e = entry{k, val{first: -1, last: -1, used: true}}
			t.n++
			return &e.v
		}
		if e.k == k {
			return &e.v
		}
	}
}

func (t *table) grow() {
	old := t.slots
	size := 2 * len(old)
	t.slots, t.mask, t.n = make([]entry, size), uint64(size-1), 0
	for i := range old {
		if old[i].v.used {
			*t.slot(old[i].k) = old[i].v
		}
	}
}

// each calls f for every distinct event.
func (t *table) each(f func(k key, v val)) {
	for i := range t.slots {
		if e := &t.slots[i]; e.v.used {
			f(e.k, e.v)
		}
	}
}
