package cov

import (
	"math/bits"
	"testing"
)

func TestTableGrows(t *testing.T) {
	tb := newTable()
	const n = 100_000
	for i := uint64(0); i < n; i++ {
		v := tb.slot(key{i, i * 7, i % 3})
		if v.first != -1 || v.last != -1 || v.isFull() || v.key() != (key{i, i * 7, i % 3}) {
			t.Fatalf("new slot %d: %+v", i, *v)
		}
		v.first = int32(i % 1000)
	}
	if tb.n != n {
		t.Fatalf("%d keys, want %d", tb.n, n)
	}
	for i := uint64(0); i < n; i++ {
		v := tb.find(key{i, i * 7, i % 3})
		if v == nil || v.first != int32(i%1000) {
			t.Fatalf("key %d: %v", i, v)
		}
		if tb.slot(key{i, i * 7, i % 3}) != v {
			t.Fatalf("slot of a present key %d moved", i)
		}
	}
	if tb.find(key{1, 2, 3}) != nil || tb.find(key{n, n * 7, n % 3}) != nil {
		t.Error("found an absent key")
	}
	count := 0
	tb.each(func(key, val) { count++ })
	if count != n {
		t.Errorf("each visited %d, want %d", count, n)
	}
}

func TestRecent(t *testing.T) {
	tb := newTable()
	k := key{1, 2, 3}
	h := k.hash()
	if tb.seen(k, h, 0) || tb.seen(k, h, fullPass) {
		t.Fatal("empty cache says seen")
	}
	tb.remember(k, h, 0)
	if !tb.seen(k, h, 0) || tb.seen(k, h, 1) || tb.seen(key{1, 2, 4}, h, 0) {
		t.Error("seen: wrong answer after remember")
	}
}

func TestSortByRegion(t *testing.T) {
	tb := newTable()
	for tb.large() == false {
		tb.grow()
	}
	var work []pending
	for i := 0; i < 5000; i++ {
		k := key{uint64(i % 1700), 1, 2} // repeated keys keep their order
		work = append(work, pending{k: k, h: k.hash(), row: int32(i)})
	}
	var buf []pending
	out := tb.sortByRegion(work, &buf)
	if len(out) != len(work) {
		t.Fatalf("%d rows out, %d in", len(out), len(work))
	}
	last := map[key]int32{}
	prev := uint64(0)
	for _, p := range out {
		if l, ok := last[p.k]; ok && l > p.row {
			t.Fatalf("key %v: row %d after row %d", p.k, p.row, l)
		}
		last[p.k] = p.row
		region := (p.h & tb.mask) >> (uint(bits.Len64(tb.mask)) - 12)
		if region < prev {
			t.Fatalf("regions out of order: %d after %d", region, prev)
		}
		prev = region
	}
}
