// Package blocks keeps records found by a dense key (an instruction's
// index in a module's code) when few keys have one: a table of int32
// numbers by key and the records themselves in blocks of 4,096. A
// record's pointer stays valid as more are added, and the collector
// sees a few hundred blocks where a slice of pointers by key showed it
// millions of objects (the rewriter's trampolines and patch records on
// cc1plus: 5.1 M instructions, 1.3-1.4 M records).
package blocks

const shift = 12

// Table maps keys in [0, Keys()) to records of type T.
type Table[T any] struct {
	at     []int32 // by key: 1 + its record's number, 0 = none
	blocks [][]T
	n      int
}

// New returns an empty table for keys 0 to keys-1.
func New[T any](keys int) *Table[T] {
	return &Table[T]{at: make([]int32, keys)}
}

// Keys returns how many keys the table has room for.
func (t *Table[T]) Keys() int { return len(t.at) }

// Len returns how many records it holds.
func (t *Table[T]) Len() int { return t.n }

// Get returns key's record, nil if it has none.
func (t *Table[T]) Get(key int) *T {
	if k := t.at[key]; k > 0 {
		return t.Nth(int(k) - 1)
	}
	return nil
}

// Add returns key's record, a zero one added if it had none.
func (t *Table[T]) Add(key int) *T {
	if r := t.Get(key); r != nil {
		return r
	}
	if t.n>>shift == len(t.blocks) {
		t.blocks = append(t.blocks, make([]T, 1<<shift))
	}
	r := t.Nth(t.n)
	t.n++
	t.at[key] = int32(t.n)
	return r
}

// Nth returns record number k (k < Len()): the records are numbered in
// the order Add made them.
func (t *Table[T]) Nth(k int) *T {
	return &t.blocks[k>>shift][k&(1<<shift-1)]
}
