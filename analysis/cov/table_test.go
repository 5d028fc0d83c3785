package cov

import "testing"

// pk is a packed key for the tests: kind 1, src module 2, dst module 3.
func pk(src, dst uint64) (w0, w1, h uint64) {
	w0 = 1<<60 | 2<<addrBits | src
	w1 = 3<<addrBits | dst
	return w0, w1, HashKey(w0, w1)
}

func TestTableGrows(t *testing.T) {
	tb := newTable()
	const n = 100_000
	for i := uint64(0); i < n; i++ {
		w0, w1, h := pk(i, i*7)
		e := &tb.slots[tb.insert(w0, w1, h)]
		if e.w0 != w0 || e.w1 != w1 {
			t.Fatalf("new slot %d: %+v", i, *e)
		}
		switch i % 3 {
		case 1:
			e.w1 |= flagFull
		case 2:
			e.w1 |= flagCur
			tb.cur = append(tb.cur, uint32(tb.insert(w0, w1, h)))
		}
	}
	if tb.len() != n || len(tb.cur) != n/3 {
		t.Fatalf("%d keys, %d current; want %d, %d", tb.len(), len(tb.cur), n, n/3)
	}
	for _, i := range tb.cur { // remapped by the growths
		if tb.slots[i].w1&flagCur == 0 {
			t.Fatalf("cur lists slot %d without flagCur", i)
		}
	}
	for i := uint64(0); i < n; i++ {
		w0, w1, h := pk(i, i*7)
		e := tb.find(w0, w1, h)
		want := []uint64{0, flagFull, flagCur}[i%3]
		if e == nil || e.w1&flagMask != want {
			t.Fatalf("key %d: %v, want flags %#x", i, e, want)
		}
		if &tb.slots[tb.insert(w0, w1, h)] != e {
			t.Fatalf("insert of a present key %d moved it", i)
		}
	}
	if w0, w1, h := pk(n, n*7); tb.find(w0, w1, h) != nil {
		t.Error("found an absent key")
	}
	if w0, w1, h := pk(1, 8); tb.find(w0, w1, h) != nil {
		t.Error("found an absent key (present src, other dst)")
	}
	tb.nextRun()
	count := 0
	tb.each(func(m uint32, src uint64, fl uint64) {
		count++
		if m != 2 {
			t.Fatalf("src module %d, want 2", m)
		}
		want := []uint64{0, flagFull, flagPrev}[src%3]
		if fl != want {
			t.Fatalf("after nextRun: key %d flags %#x, want %#x", src, fl, want)
		}
	})
	if count != n || len(tb.cur) != 0 {
		t.Errorf("each visited %d, want %d; %d current after nextRun", count, n, len(tb.cur))
	}
}

// TestTableCollisions: keys that share a home slot, some at the end of
// the table (their probes wrap around), are all kept and found.
func TestTableCollisions(t *testing.T) {
	tb := newTable()
	var keys [][3]uint64
	for _, home := range []uint64{5, tb.mask - 1} {
		for src := uint64(0); len(keys) < 40 || home != 5 && len(keys) < 80; src++ {
			w0, w1, h := pk(src, 0)
			if h&tb.mask == home {
				keys = append(keys, [3]uint64{w0, w1, h})
			}
		}
	}
	for i, k := range keys {
		tb.slots[tb.insert(k[0], k[1], k[2])].w1 |= uint64(i%2) * flagFull
	}
	if len(tb.slots) != 1<<10 || tb.len() != len(keys) {
		t.Fatalf("%d slots, %d keys", len(tb.slots), tb.len())
	}
	for i, k := range keys {
		e := tb.find(k[0], k[1], k[2])
		if e == nil || e.w0 != k[0] || e.w1&^flagMask != k[1] || e.w1&flagFull != uint64(i%2)*flagFull {
			t.Fatalf("key %d (home %d): %v", i, k[2]&tb.mask, e)
		}
	}
	// The same keys after growth (they no longer collide as much).
	for tb.len() > 0 && len(tb.slots) < 1<<14 {
		tb.grow()
	}
	for i, k := range keys {
		if e := tb.find(k[0], k[1], k[2]); e == nil || e.w1&flagFull != uint64(i%2)*flagFull {
			t.Fatalf("after growth, key %d: %v", i, e)
		}
	}
}
