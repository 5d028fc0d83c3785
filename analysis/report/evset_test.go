package report

import (
	"math/rand"
	"testing"

	"github.com/stint-project/stint/analysis/cov"
)

// TestEvSet: the packed set against a Go map, through many growths,
// with keys that pack and keys that do not (no module, a module index
// or an address too wide, a kind past 4 bits).
func TestEvSet(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	s, want := newEvSet(), map[evKey]int32{}
	size0 := len(s.slots)
	key := func() evKey {
		k := evKey{kind: uint8(1 + rng.Intn(9)), srcMod: int32(rng.Intn(4)) - 1, dstMod: int32(rng.Intn(4)) - 1,
			src: uint64(rng.Intn(1 << 20)), dst: uint64(rng.Intn(1 << 12))}
		switch rng.Intn(40) {
		case 0:
			k.srcMod = cov.NoPackedModule + int32(rng.Intn(3))
		case 1:
			k.dst = 1<<48 + uint64(rng.Intn(3)) // past cov.PackKey's 48 bits
		case 2:
			k.kind = 16 + uint8(rng.Intn(3))
		}
		return k
	}
	for i := range 200000 {
		k := key()
		p := s.last(k)
		w, ok := want[k]
		if (p != nil) != ok || p != nil && *p != w {
			t.Fatalf("step %d: key %+v: set has %v, want %d (present %v)", i, k, p, w, ok)
		}
		if p == nil {
			s.add(k, int32(i))
		} else {
			*p = int32(i)
		}
		want[k] = int32(i)
	}
	if s.len() != len(want) || len(s.slots) <= size0 {
		t.Fatalf("len %d, want %d; %d slots, %d at the start (no growth)", s.len(), len(want), len(s.slots), size0)
	}
	n := 0
	s.each(func(k evKey) {
		n++
		if p := s.last(k); p == nil || *p != want[k] {
			t.Fatalf("each gave %+v, not in the set as %d", k, want[k])
		}
		delete(want, k)
	})
	if n != s.len() || len(want) != 0 {
		t.Errorf("each gave %d keys, %d of the map's left over", n, len(want))
	}
}
