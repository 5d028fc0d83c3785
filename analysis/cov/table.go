package cov

import (
	"math/bits"
	"unsafe"

	"golang.org/x/sys/unix"
)

// table is an open-addressing hash set of distinct events (linear
// probing), each with its val: the hot path of Compare does one lookup
// per event row, without allocating, and memory grows with the number
// of distinct events only.
//
// A key and its val share a slot, so a lookup touches one cache line:
// with a million distinct events the table is far larger than the
// caches, and misses are what a lookup costs.
//
// In front of it, recent remembers, direct-mapped by hash, the last
// events processed and for which run: an event seen again in the same
// run (most rows of a long trace) is skipped after one lookup in a
// small array that stays in the cache, without touching the table.
type table struct {
	slots  []entry // slots[i].v.used marks an occupied slot
	mask   uint64
	n      int
	recent []recentEntry
}

type recentEntry struct {
	k key
	g int32 // the run that processed k (fullPass: the full run's pass); noRun: empty
}

const (
	recentSize = 1 << 13
	noRun      = -1 << 31
	fullPass   = -2
)

// seen reports whether k was the last event processed for g in its
// recent slot; remember makes it so.
func (t *table) seen(k key, h uint64, g int32) bool {
	e := &t.recent[(h>>40)&(recentSize-1)]
	return e.g == g && e.k == k
}

func (t *table) remember(k key, h uint64, g int32) {
	t.recent[(h>>40)&(recentSize-1)] = recentEntry{k, g}
}

// entry is a slot: the key's words with the flags in c, and the runs.
type entry struct {
	a, b, c     uint64
	first, last int32 // runs: first to record it, last seen (-1: none)
}

const (
	usedBit  = 1 << 63
	fullBit  = 1 << 62
	flagBits = usedBit | fullBit
)

func (e *entry) isFull() bool { return e.c&fullBit != 0 }
func (e *entry) setFull()     { e.c |= fullBit }
func (e *entry) key() key     { return key{e.a, e.b, e.c &^ flagBits} }
func (e *entry) val() val     { return val{first: e.first, last: e.last, full: e.isFull()} }

func newTable() *table {
	const size = 1 << 12
	t := &table{slots: make([]entry, size), mask: size - 1, recent: make([]recentEntry, recentSize)}
	for i := range t.recent {
		t.recent[i].g = noRun
	}
	return t
}

func (k key) hash() uint64 {
	hi, lo := bits.Mul64(k.a^0x9e3779b97f4a7c15, 0xbf58476d1ce4e5b9)
	h := hi ^ lo
	hi, lo = bits.Mul64(h^k.b, 0x94d049bb133111eb)
	h = hi ^ lo
	hi, lo = bits.Mul64(h^k.c, 0xd6e8feb86659fd93)
	return hi ^ lo
}

// find returns k's entry, or nil if k is not in the set.
func (t *table) find(k key) *entry {
	c := k.c | usedBit
	for i := k.hash() & t.mask; ; i = (i + 1) & t.mask {
		e := &t.slots[i]
		if e.c == 0 {
			return nil
		}
		if e.a == k.a && e.b == k.b && e.c&^fullBit == c {
			return e
		}
	}
}

// slot returns k's entry, adding k (first = last = -1) if it is not in
// the set. The pointer is valid until the next slot call.
func (t *table) slot(k key) *entry { return t.slotH(k, k.hash()) }

// slotH is slot with k's hash given.
func (t *table) slotH(k key, h uint64) *entry {
	c := k.c | usedBit
	for i := h & t.mask; ; i = (i + 1) & t.mask {
		e := &t.slots[i]
		if e.c == 0 {
			if 4*(t.n+1) > 3*len(t.slots) {
				t.grow()
				return t.slotH(k, h)
			}
			*e = entry{a: k.a, b: k.b, c: c, first: -1, last: -1}
			t.n++
			return e
		}
		if e.a == k.a && e.b == k.b && e.c&^fullBit == c {
			return e
		}
	}
}

func (t *table) grow() {
	old := t.slots
	size := 2 * len(old)
	t.slots, t.mask, t.n = makeSlots(size), uint64(size-1), 0
	for i := range old {
		if o := &old[i]; o.c != 0 {
			e := t.slot(o.key())
			e.c, e.first, e.last = o.c, o.first, o.last
		}
	}
}

// pending is an event row waiting for its table lookup, with its key's
// hash.
type pending struct {
	k   key
	h   uint64
	row int32
}

// large reports whether the table has outgrown the CPU's caches, when
// sorting lookups by region pays.
func (t *table) large() bool { return len(t.slots) >= 1<<16 }

// sortByRegion returns work ordered by the top 12 bits of each hash's
// slot, stably, using *buf for the result. (12 bits beat 8 on a 64 MiB
// table: consecutive lookups then land some 16 KiB apart.)
func (t *table) sortByRegion(work []pending, buf *[]pending) []pending {
	const regionBits = 12
	if len(work) < 1024 || bits.Len64(t.mask) < regionBits {
		return work // not worth it
	}
	shift := uint(bits.Len64(t.mask)) - regionBits
	var count [1<<regionBits + 1]int
	for _, p := range work {
		count[(p.h&t.mask)>>shift+1]++
	}
	for i := 1; i < len(count); i++ {
		count[i] += count[i-1]
	}
	if cap(*buf) < len(work) {
		*buf = make([]pending, len(work))
	}
	out := (*buf)[:len(work)]
	for _, p := range work {
		r := (p.h & t.mask) >> shift
		out[count[r]] = p
		count[r]++
	}
	return out
}

// makeSlots allocates a table of n slots. A large table is marked for
// transparent huge pages: lookups land anywhere in it, and with 4 KiB
// pages most would also miss the TLB.
func makeSlots(n int) []entry {
	s := make([]entry, n)
	const huge = 2 << 20
	size := uintptr(n) * unsafe.Sizeof(entry{})
	if size >= 2*huge {
		b := unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(s))), size)
		p := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
		start := (p+huge-1)&^(huge-1) - p
		end := (p+size)&^(huge-1) - p
		if end > start {
			unix.Madvise(b[start:end], unix.MADV_HUGEPAGE) // advice only: an error changes nothing
		}
	}
	return s
}

// each calls f for every distinct event.
func (t *table) each(f func(k key, v val)) {
	for i := range t.slots {
		if e := &t.slots[i]; e.c != 0 {
			f(e.key(), e.val())
		}
	}
}
