package place

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// TestPageSet checks the set against a sorted slice through random
// inserts and deletes (enough to split blocks and empty them), asking
// Ceil, Floor and Each at random points after each step.
func TestPageSet(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var s pageSet
	var ref []int64
	for step := range 40000 {
		pn := rng.Int64N(6000) - 3000
		if step > 30000 || rng.IntN(3) == 0 {
			s.Delete(pn)
			if i, ok := slices.BinarySearch(ref, pn); ok {
				ref = slices.Delete(ref, i, i+1)
			}
		} else {
			s.Insert(pn)
			if i, ok := slices.BinarySearch(ref, pn); !ok {
				ref = slices.Insert(ref, i, pn)
			}
		}
		if s.Len() != len(ref) {
			t.Fatalf("step %d: Len %d, want %d", step, s.Len(), len(ref))
		}
		q := rng.Int64N(6200) - 3100
		i, _ := slices.BinarySearch(ref, q)
		c, cok := s.Ceil(q)
		if wantOK := i < len(ref); cok != wantOK || cok && c != ref[i] {
			t.Fatalf("step %d: Ceil(%d) = %d %v", step, q, c, cok)
		}
		j, found := slices.BinarySearch(ref, q)
		if !found {
			j--
		}
		f, fok := s.Floor(q)
		if wantOK := j >= 0; fok != wantOK || fok && f != ref[j] {
			t.Fatalf("step %d: Floor(%d) = %d %v", step, q, f, fok)
		}
		if step%1000 == 0 {
			var got []int64
			s.Each(math.MinInt64, func(pn int64) bool { got = append(got, pn); return true })
			if !slices.Equal(got, ref) {
				t.Fatalf("step %d: Each gives %d pages, want %d", step, len(got), len(ref))
			}
			n := 0
			s.Each(q, func(pn int64) bool { n++; return n < 3 })
			if want := min(3, len(ref)-i); n != want {
				t.Fatalf("step %d: Each from %d stopped after %d, want %d", step, q, n, want)
			}
		}
	}
	if len(s.blocks) == 0 && len(ref) > 0 {
		t.Fatal("no blocks")
	}
}
