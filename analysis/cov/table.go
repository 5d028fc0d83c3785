package cov

import (
	"math/bits"
	"unsafe"

	"github.com/stint-project/stint/formats"
	"golang.org/x/sys/unix"
)

// table is the set of distinct events, each with three flags: in the
// full run, recorded by a run before the current one, recorded by the
// current run. Memory grows with the number of distinct events only.
//
// With a million distinct events the table is far larger than the
// caches and a lookup costs a cache miss, so slots are small: an event
// key packs into 16 bytes when its addresses (module-relative, or a
// syscall number) fit in 48 bits and its modules' global indexes in 12
// bits (in practice every event):
//
//	w0  kind:4 | src module:12 | src:48
//	w1  flags:4 | dst module:12 | dst:48   (dst: the syscall number for a syscall)
//
// The key is kept whole, so a lookup is exact (no fingerprints). A key
// that does not pack goes to wide, a Go map. The slots hold flags, not
// run numbers: the current run's flag is set on an event's first row of
// the run, and when the next run starts, every slot of cur (those the
// run set) trades it for the earlier-runs flag.
//
// In front of the table, recent remembers, direct-mapped by hash, the
// events last processed in the current run: an event seen again (most
// rows of a long trace) is skipped after one look at a small array that
// stays in the cache, inline, without touching the table. The lookups
// that get past it wait for the end of the batch, where each asks for
// its slot some lookups ahead of its turn (prefetch), so that their
// cache misses overlap. (Measured: this also beats looking a small
// table up row by row, and sorting the lookups by table region first
// does not pay once they are prefetched.)
type table struct {
	slots []slot // w0 == 0: empty (a kind is never 0)
	mask  uint64
	n     int      // keys in slots
	cur   []uint32 // slots whose flagCur is set

	wide    map[key]uint64 // keys that do not pack, with their flags
	wideCur []key          // wide keys whose flagCur is set

	recent []slot // packed keys processed in the current run (w0 == 0: empty)
}

type slot struct{ w0, w1 uint64 }

// key is an event key that does not pack: a = src, b = dst, c =
// kind<<48 | srcMod<<24 | dstMod (global module indexes, noGlobal for
// none).
type key struct{ a, b, c uint64 }

const (
	addrBits = 48
	addrMask = 1<<addrBits - 1
	modBits  = 12
	noMod    = 1<<modBits - 1 // the packed module of no module
	wideMod  = 0xffff         // a module whose global index does not pack (>= noMod)

	flagFull = 1 << 63 // the event is in the full run
	flagPrev = 1 << 62 // a run before the current one recorded it
	flagCur  = 1 << 61 // the current run recorded it
	flagMask = flagFull | flagPrev | flagCur

	recentSize = 1 << 13 // 128 KiB
)

// A kind packs into 4 bits (this fails to compile when one does not).
const _ = uint8(15 - formats.MaxKind)

func newTable() *table {
	const size = 1 << 10
	return &table{slots: makeSlots(size), mask: size - 1, wide: map[key]uint64{}, recent: make([]slot, recentSize)}
}

// PackKey returns the packed key of an event of kind k from src to dst
// (the syscall number for a syscall) whose modules pack as sm and dm
// (NoPackedModule: none); ok is false if it does not pack. The layout
// is the table's (above); report auto's distinct-event set uses it too.
func PackKey(k uint8, src, dst uint64, sm, dm uint16) (w0, w1 uint64, ok bool) {
	if (src|dst)>>addrBits|uint64(sm|dm)>>modBits != 0 {
		return 0, 0, false
	}
	return uint64(k)<<60 | uint64(sm)<<addrBits | src, uint64(dm)<<addrBits | dst, true
}

// UnpackKey undoes PackKey (w1 without flags).
func UnpackKey(w0, w1 uint64) (k uint8, src, dst uint64, sm, dm uint16) {
	return uint8(w0 >> 60), w0 & addrMask, w1 & addrMask, uint16(w0>>addrBits) & noMod, uint16(w1>>addrBits) & noMod
}

// NoPackedModule is the packed module of no module.
const NoPackedModule = noMod

// HashKey hashes a packed key (w1 without flags).
func HashKey(w0, w1 uint64) uint64 {
	hi, lo := bits.Mul64(w0^0x9e3779b97f4a7c15, 0xbf58476d1ce4e5b9)
	hi, lo = bits.Mul64(hi^lo^w1, 0x94d049bb133111eb)
	return hi ^ lo
}

// len returns the number of distinct events.
func (t *table) len() int { return t.n + len(t.wide) }

// insert returns the index of k's slot, adding k (no flags) if it is
// not in the table. w1 has no flags; h is HashKey(w0, w1).
func (t *table) insert(w0, w1, h uint64) uint64 {
	for i := h & t.mask; ; i = (i + 1) & t.mask {
		e := &t.slots[i]
		if e.w0 == w0 && e.w1&^flagMask == w1 {
			return i
		}
		if e.w0 == 0 {
			if 4*(t.n+1) > 3*len(t.slots) {
				t.grow()
				return t.insert(w0, w1, h)
			}
			e.w0, e.w1 = w0, w1
			t.n++
			return i
		}
	}
}

// find returns k's slot, or nil if k is not in the table.
func (t *table) find(w0, w1, h uint64) *slot {
	for i := h & t.mask; ; i = (i + 1) & t.mask {
		e := &t.slots[i]
		if e.w0 == w0 && e.w1&^flagMask == w1 {
			return e
		}
		if e.w0 == 0 {
			return nil
		}
	}
}

// grow doubles the table. Walking the old slots in order, the new ones
// are written in two ascending streams (a key's new home is its old one
// or that plus the old size).
func (t *table) grow() {
	old := t.slots
	size := 2 * len(old)
	t.slots, t.mask = makeSlots(size), uint64(size-1)
	t.cur = t.cur[:0]
	for _, o := range old {
		if o.w0 == 0 {
			continue
		}
		i := HashKey(o.w0, o.w1&^flagMask) & t.mask
		for t.slots[i].w0 != 0 {
			i = (i + 1) & t.mask
		}
		t.slots[i] = o
		if o.w1&flagCur != 0 {
			t.cur = append(t.cur, uint32(i))
		}
	}
}

// nextRun starts a run (or the full run's pass): what the current run
// recorded, an earlier run has now.
func (t *table) nextRun() {
	for _, i := range t.cur {
		e := &t.slots[i]
		e.w1 = e.w1&^flagCur | flagPrev
	}
	t.cur = t.cur[:0]
	for _, k := range t.wideCur {
		t.wide[k] = t.wide[k]&^flagCur | flagPrev
	}
	t.wideCur = t.wideCur[:0]
	clear(t.recent)
}

// pending is a lookup waiting for its turn: a packed key and its hash.
type pending struct{ w0, w1, h uint64 }

// makeSlots allocates a table of n slots. A large table is marked for
// transparent huge pages: lookups land anywhere in it, and with 4 KiB
// pages most would also miss the TLB.
func makeSlots(n int) []slot {
	s := make([]slot, n)
	const huge = 2 << 20
	size := uintptr(n) * unsafe.Sizeof(slot{})
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

// each calls f for every distinct event with its source's global
// module index (noGlobal: none), its source address and its flags.
func (t *table) each(f func(srcMod uint32, src uint64, flags uint64)) {
	for _, e := range t.slots {
		if e.w0 == 0 {
			continue
		}
		m := uint32(e.w0>>addrBits) & noMod
		if m == noMod {
			m = noGlobal
		}
		f(m, e.w0&addrMask, e.w1&flagMask)
	}
	for k, fl := range t.wide {
		f(uint32(k.c>>24)&noGlobal, k.a, fl)
	}
}
