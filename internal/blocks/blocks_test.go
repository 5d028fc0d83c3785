package blocks

import "testing"

func TestTable(t *testing.T) {
	type rec struct{ key, v int }
	const keys = 3*(1<<shift) + 17
	tb := New[rec](keys)
	if tb.Keys() != keys || tb.Len() != 0 || tb.Get(5) != nil {
		t.Fatal("a new table is not empty")
	}
	var ptrs []*rec
	for k := keys - 1; k >= 0; k -= 2 { // more than two blocks, keys out of order
		r := tb.Add(k)
		if r.key != 0 || r.v != 0 {
			t.Fatalf("Add(%d) gave a used record %v", k, *r)
		}
		r.key, r.v = k, 3*k
		ptrs = append(ptrs, r)
	}
	if tb.Len() != len(ptrs) {
		t.Fatalf("Len %d, added %d", tb.Len(), len(ptrs))
	}
	for n, r := range ptrs {
		if tb.Nth(n) != r || tb.Get(r.key) != r || r.v != 3*r.key {
			t.Fatalf("record %d (key %d) moved or changed", n, r.key)
		}
	}
	if tb.Add(keys-1) != ptrs[0] || tb.Len() != len(ptrs) {
		t.Error("Add of a present key made another record")
	}
	for k := keys - 2; k >= 0; k -= 2 {
		if tb.Get(k) != nil {
			t.Fatalf("key %d has a record it was never given", k)
		}
	}
}
