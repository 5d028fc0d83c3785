package report

import (
	"unsafe"

	"github.com/stint-project/stint/analysis/cov"
)

// evSet is the loader's set of distinct events, each with the last run
// (global index) that recorded one. With half a million distinct events
// a Go map of 32-byte keys to pointers cost a cache miss for the bucket
// and another for the value; here a slot holds the key packed as
// cov compare's table packs it (cov.PackKey: 16 bytes for every event
// in practice) and the run beside it, in one open-addressing array. A
// key that does not pack goes to wide, a Go map.
type evSet struct {
	slots []evSlot // w0 == 0: empty (a kind is never 0)
	mask  uint64
	n     int
	wide  map[evKey]*int32
}

type evSlot struct {
	w0, w1 uint64
	last   int32
}

func newEvSet() *evSet {
	const size = 1 << 10
	return &evSet{slots: make([]evSlot, size), mask: size - 1, wide: map[evKey]*int32{}}
}

// evPack packs key with cov.PackKey; ok is false when it does not pack
// (a kind of 0 or past 4 bits, a module index or an address too wide).
func evPack(k evKey) (w0, w1 uint64, ok bool) {
	mod := func(m int32) (uint16, bool) {
		if m < 0 {
			return cov.NoPackedModule, true
		}
		return uint16(m), m < cov.NoPackedModule
	}
	sm, sok := mod(k.srcMod)
	dm, dok := mod(k.dstMod)
	if k.kind == 0 || k.kind > 15 || !sok || !dok {
		return 0, 0, false
	}
	return cov.PackKey(k.kind, k.src, k.dst, sm, dm)
}

// last returns where key's last run is kept, or nil if key is not in
// the set. The pointer holds until the next add.
func (s *evSet) last(key evKey) *int32 {
	w0, w1, ok := evPack(key)
	if !ok {
		return s.wide[key]
	}
	return s.lastPacked(w0, w1, cov.HashKey(w0, w1))
}

// lastPacked is last for a packed key whose cov.HashKey is h.
func (s *evSet) lastPacked(w0, w1, h uint64) *int32 {
	for i := h & s.mask; ; i = (i + 1) & s.mask {
		e := &s.slots[i]
		if e.w0 == w0 && e.w1 == w1 {
			return &e.last
		}
		if e.w0 == 0 {
			return nil
		}
	}
}

// slotOf returns the first slot a key with hash h is looked for in (for
// prefetch.Line: it may move at the next add).
func (s *evSet) slotOf(h uint64) unsafe.Pointer { return unsafe.Pointer(&s.slots[h&s.mask]) }

// add puts key, not in the set, in it with last run g.
func (s *evSet) add(key evKey, g int32) {
	w0, w1, ok := evPack(key)
	if !ok {
		v := g
		s.wide[key] = &v
		return
	}
	s.addPacked(w0, w1, g)
}

// addPacked is add for a packed key.
func (s *evSet) addPacked(w0, w1 uint64, g int32) {
	if 4*(s.n+1) > 3*len(s.slots) {
		s.grow()
	}
	s.put(w0, w1, g)
	s.n++
}

// put stores a key known to be absent.
func (s *evSet) put(w0, w1 uint64, g int32) {
	for i := cov.HashKey(w0, w1) & s.mask; ; i = (i + 1) & s.mask {
		if e := &s.slots[i]; e.w0 == 0 {
			e.w0, e.w1, e.last = w0, w1, g
			return
		}
	}
}

func (s *evSet) grow() {
	old := s.slots
	s.slots, s.mask = make([]evSlot, 2*len(old)), uint64(2*len(old)-1)
	for _, e := range old {
		if e.w0 != 0 {
			s.put(e.w0, e.w1, e.last)
		}
	}
}

// len returns the number of distinct events.
func (s *evSet) len() int { return s.n + len(s.wide) }

// each calls fn with every key.
func (s *evSet) each(fn func(evKey)) {
	mod := func(m uint16) int32 {
		if m == cov.NoPackedModule {
			return -1
		}
		return int32(m)
	}
	for _, e := range s.slots {
		if e.w0 != 0 {
			k, src, dst, sm, dm := cov.UnpackKey(e.w0, e.w1)
			fn(evKey{kind: k, srcMod: mod(sm), dstMod: mod(dm), src: src, dst: dst})
		}
	}
	for k := range s.wide {
		fn(k)
	}
}
