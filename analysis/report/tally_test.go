package report

import (
	"math/rand"
	"testing"
)

// TestTally: the table's sums against a Go map's, through many growths,
// with modules that are none (-1) and addresses that differ only in
// their high bits.
func TestTally(t *testing.T) {
	rng := rand.New(rand.NewSource(2))
	tl, want := newTally(), map[Callee]int64{}
	for range 300000 {
		c := Callee{Module: int32(rng.Intn(5)) - 1, Addr: uint64(rng.Intn(1<<16)) | uint64(rng.Intn(4))<<60}
		d := int64(rng.Intn(9)) - 2
		tl.add(c, d)
		want[c] += d
	}
	got := map[Callee]int64{}
	tl.into(got)
	if len(got) != len(want) || tl.n != len(want) {
		t.Fatalf("%d sums (table says %d), want %d", len(got), tl.n, len(want))
	}
	for c, n := range want {
		if got[c] != n {
			t.Fatalf("%+v: sum %d, want %d", c, got[c], n)
		}
	}
}
