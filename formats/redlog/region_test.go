package redlog

import (
	"path/filepath"
	"reflect"
	"testing"
)

type reg struct{ addr, n uint64 }

// TestPaperExamples checks the three region policies on the examples of
// DIME*, sections 3.2.1-3.2.3: log B, then ask whether A is skipped.
func TestPaperExamples(t *testing.T) {
	for _, tc := range []struct {
		name string
		b, a reg
		skip map[Policy]bool
	}{
		// 3.2.1: hash skips A because B has its address, though 120..179
		// was never recorded: a false negative. bst too; merger records A.
		{"A=<100,80> B=<100,20>", reg{100, 20}, reg{100, 80}, map[Policy]bool{Hash: true, BST: true, Merger: false}},
		// 3.2.1: A is inside B but hash does not see it: a false positive.
		{"A=<150,20> B=<100,80>", reg{100, 80}, reg{150, 20}, map[Policy]bool{Hash: false, BST: true, Merger: true}},
		// 3.2.2/3.2.3: bst skips A because it starts inside B (130..299
		// lost: a false negative); merger records it.
		{"A=<100,200> B=<50,80>", reg{50, 80}, reg{100, 200}, map[Policy]bool{Hash: false, BST: true, Merger: false}},
		// Boundaries: the end of B is outside B.
		{"A=<130,10> B=<50,80>", reg{50, 80}, reg{130, 10}, map[Policy]bool{Hash: false, BST: false, Merger: false}},
		{"A=<129,1> B=<50,80>", reg{50, 80}, reg{129, 1}, map[Policy]bool{Hash: false, BST: true, Merger: true}},
		{"A=B=<50,80>", reg{50, 80}, reg{50, 80}, map[Policy]bool{Hash: true, BST: true, Merger: true}},
		{"A=<49,2> B=<50,80>", reg{50, 80}, reg{49, 2}, map[Policy]bool{Hash: false, BST: false, Merger: false}},
		{"A=<110,20> B=<50,80>", reg{50, 80}, reg{110, 20}, map[Policy]bool{Hash: false, BST: true, Merger: true}},
		{"A=<110,21> B=<50,80>", reg{50, 80}, reg{110, 21}, map[Policy]bool{Hash: false, BST: true, Merger: false}},
	} {
		for _, p := range []Policy{Hash, BST, Merger} {
			l, err := NewRegionLog(p)
			if err != nil {
				t.Fatal(err)
			}
			if l.Skip(tc.a.addr, tc.a.n) {
				t.Errorf("%s %v: empty log skips A", tc.name, p)
			}
			l.Add(tc.b.addr, tc.b.n)
			if have := l.Skip(tc.a.addr, tc.a.n); have != tc.skip[p] {
				t.Errorf("%s %v: Skip(A) = %v, want %v", tc.name, p, have, tc.skip[p])
			}
		}
	}
}

func entriesOf(rs ...reg) []Entry {
	var es []Entry
	for _, r := range rs {
		es = append(es, Entry{A: r.addr, B: r.n})
	}
	return es
}

func TestRegionAdd(t *testing.T) {
	for _, tc := range []struct {
		name   string
		policy Policy
		add    []reg
		want   []Entry // Entries(): the log as saved
		len    int     // Len() before saving
	}{
		// 3.2.3: merger records A=<100,200> after B=<50,80> and merges
		// them into <50,250>.
		{"merger-paper", Merger, []reg{{50, 80}, {100, 200}}, entriesOf(reg{50, 250}), 1},
		// 3.2.2: "<100,50> and <150,50> become one entry" before saving
		// (the paper prints it <100,200>; it covers 100..199).
		{"bst-consecutive", BST, []reg{{100, 50}, {150, 50}}, entriesOf(reg{100, 100}), 2},
		{"merger-consecutive", Merger, []reg{{100, 50}, {150, 50}}, entriesOf(reg{100, 100}), 1},
		{"bst-gap", BST, []reg{{100, 50}, {151, 50}}, entriesOf(reg{100, 50}, reg{151, 50}), 2},
		{"bst-overlap", BST, []reg{{100, 50}, {90, 20}, {140, 30}}, entriesOf(reg{90, 80}), 1},
		{"merger-bridge", Merger, []reg{{300, 10}, {100, 10}, {200, 10}, {105, 200}}, entriesOf(reg{100, 210}), 1},
		{"merger-inside", Merger, []reg{{100, 100}, {120, 10}}, entriesOf(reg{100, 100}), 1},
		{"merger-unsorted", Merger, []reg{{500, 1}, {10, 5}, {200, 3}}, entriesOf(reg{10, 5}, reg{200, 3}, reg{500, 1}), 3},
		// hash keeps each address, with its longest length; it never merges.
		{"hash", Hash, []reg{{150, 50}, {100, 50}, {100, 20}}, entriesOf(reg{100, 50}, reg{150, 50}), 2},
		{"zero-length", Merger, []reg{{100, 0}}, nil, 0},
		{"saturate", Merger, []reg{{^uint64(0) - 4, 100}}, entriesOf(reg{^uint64(0) - 4, 4}), 1},
	} {
		l, err := NewRegionLog(tc.policy)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range tc.add {
			l.Add(r.addr, r.n)
		}
		if have := l.Entries(); !reflect.DeepEqual(have, tc.want) || l.Len() != tc.len {
			t.Errorf("%s: Entries() = %v, Len() = %d; want %v, %d", tc.name, have, l.Len(), tc.want, tc.len)
		}
	}
	if _, err := NewRegionLog(Exact); err == nil {
		t.Errorf("NewRegionLog(Exact) works")
	}
}

// TestRegionLogFromFile saves a region log, reads it back, and asks the
// same questions.
func TestRegionLogFromFile(t *testing.T) {
	for _, p := range []Policy{Hash, BST, Merger} {
		l, _ := NewRegionLog(p)
		for _, r := range []reg{{100, 50}, {150, 50}, {400, 10}, {405, 20}} {
			l.Add(r.addr, r.n)
		}
		path := filepath.Join(t.TempDir(), "r.log")
		if _, err := Append(path, p, map[string][]Entry{idA: l.Entries()}); err != nil {
			t.Fatal(err)
		}
		f, _, err := ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		r, err := f.RegionLog(idA)
		if err != nil {
			t.Fatal(err)
		}
		for _, q := range []reg{{100, 1}, {150, 10}, {120, 80}, {199, 2}, {410, 15}, {400, 25}, {425, 1}, {0, 1000}} {
			if have, want := r.Skip(q.addr, q.n), l.Skip(q.addr, q.n); have != want {
				t.Errorf("%v: Skip(%v) after reading %v, before %v", p, q, have, want)
			}
		}
		if empty, _ := f.RegionLog(idB); empty.Len() != 0 || empty.Skip(100, 1) {
			t.Errorf("%v: module without entries is not empty", p)
		}
	}
}

func TestExactSet(t *testing.T) {
	s := NewExactSet()
	if !s.Add(idA, ex(1, 2, 3)) || s.Add(idA, ex(1, 2, 3)) || !s.Add(idB, ex(1, 2, 3)) || !s.Add(idA, ex(1, 2, 4)) {
		t.Fatal("Add")
	}
	if !s.Has(idA, 1, 2, 7, 3) || s.Has(idA, 1, 2, 0, 3) || s.Has(idC, 1, 2, 7, 3) || s.Len() != 3 {
		t.Errorf("Has/Len")
	}
	path := filepath.Join(t.TempDir(), "e.log")
	if _, err := Append(path, Exact, s.Blocks()); err != nil {
		t.Fatal(err)
	}
	l, _, _ := ReadFile(path)
	if !reflect.DeepEqual(l.ExactSet(), s) {
		t.Errorf("read back %v, want %v", l.ExactSet(), s)
	}
}
