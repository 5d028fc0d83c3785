package redlog

import (
	"fmt"
	"slices"
	"sort"
)

// RegionLog is one module's region log under one of the paper's region
// policies (DIME*, section 3.2), as plain Go data for tests and analysis:
// the runtime implements the same rules in C. A region is <addr, len>,
// the bytes addr .. addr+len-1 (module-relative); a region whose end
// would pass 2^64 ends at 2^64-1.
//
//	policy  Skip(A) (A is not recorded again) iff some logged B has ...
//	hash    addr(B) == addr(A)                               (3.2.1)
//	bst     addr(B) <= addr(A) < addr(B)+len(B)              (3.2.2)
//	merger  addr(B) <= addr(A) and addr(A)+len(A) <= addr(B)+len(B) (3.2.3)
//
// The paper writes the merger condition with "<" at the end, which would
// record again a region that ends exactly where its logged region ends
// (A = B included); its prose ("only if the whole current trace is part
// of a log entry") says "<=", which is what is implemented.
//
// Add records a region that was recorded: hash and bst keep it as a key
// (bst keeps the longest length per address); merger merges it with
// every logged region it overlaps or touches, so a merger log is always
// a set of disjoint, non-adjacent regions. Callers Add only what they
// did not Skip, as the runtime does; Add of a skipped region changes
// nothing for bst and merger.
type RegionLog struct {
	policy Policy
	keys   map[uint64]uint64 // hash: addr → len
	iv     []region          // bst, merger: sorted by addr; merger: disjoint
}

type region struct{ addr, end uint64 } // end exclusive, saturating

func span(addr, n uint64) region {
	end := addr + n
	if end < addr {
		end = ^uint64(0)
	}
	return region{addr, end}
}

// NewRegionLog returns an empty region log of policy p (Hash, BST or
// Merger).
func NewRegionLog(p Policy) (*RegionLog, error) {
	if !p.Region() {
		return nil, fmt.Errorf("policy %v is not a region policy", p)
	}
	l := &RegionLog{policy: p}
	if p == Hash {
		l.keys = map[uint64]uint64{}
	}
	return l, nil
}

// RegionLog returns the region log of the module with the given build-id
// (hex), built from its entries; an empty one if the module has none.
func (l *Log) RegionLog(buildID string) (*RegionLog, error) {
	r, err := NewRegionLog(l.Policy)
	if err != nil {
		return nil, err
	}
	for _, e := range l.Modules[buildID] {
		r.Add(e.A, e.B)
	}
	return r, nil
}

// Policy returns the log's policy.
func (l *RegionLog) Policy() Policy { return l.policy }

// Len returns the number of logged regions (keys for hash).
func (l *RegionLog) Len() int {
	if l.policy == Hash {
		return len(l.keys)
	}
	return len(l.iv)
}

// find returns the index of the last region starting at or before addr,
// or -1.
func (l *RegionLog) find(addr uint64) int {
	return sort.Search(len(l.iv), func(i int) bool { return l.iv[i].addr > addr }) - 1
}

// Skip reports whether the region <addr, n> need not be recorded: the
// log says it was (see the table of [RegionLog]).
func (l *RegionLog) Skip(addr, n uint64) bool {
	if l.policy == Hash {
		_, ok := l.keys[addr]
		return ok
	}
	// bst and merger keep disjoint regions, so the one starting last at
	// or before addr is the only one that can hold it. (For bst that
	// is the paper's own search, 3.2.2: "jump to the log-entry that has
	// the first smaller trace address".)
	i := l.find(addr)
	if i < 0 || l.iv[i].end <= addr {
		return false
	}
	return l.policy == BST || span(addr, n).end <= l.iv[i].end
}

// Add records that the region <addr, n> was recorded. A region of length
// 0 is not logged.
//
// Whether bst merges overlapping regions as they are added, or keeps
// them apart until it saves, changes none of its answers (they depend
// only on the union of the regions), so it merges them at once, as
// merger does; only merger also merges regions that merely touch,
// before saving ([RegionLog.Entries] does that for bst).
func (l *RegionLog) Add(addr, n uint64) {
	if n == 0 {
		return
	}
	if l.policy == Hash {
		l.keys[addr] = max(l.keys[addr], n)
		return
	}
	a := span(addr, n)
	touch := l.policy == Merger
	i := sort.Search(len(l.iv), func(i int) bool {
		return l.iv[i].end > a.addr || touch && l.iv[i].end == a.addr
	})
	j := i
	for j < len(l.iv) && (l.iv[j].addr < a.end || touch && l.iv[j].addr == a.end) {
		a.addr = min(a.addr, l.iv[j].addr)
		a.end = max(a.end, l.iv[j].end)
		j++
	}
	l.iv = slices.Replace(l.iv, i, j, a)
}

// Entries returns the log as it is saved, sorted by address: for bst
// after the paper's "merge directly consecutive traces" step (3.2.2:
// <100,50> and <150,50> become one entry, which the paper prints as
// <100,200> but which covers 100..199, so is <100,100> here); for merger
// the merged regions; for hash one entry per address, with the longest
// length added there (the hash policy never looks at lengths, and
// merging would lose addresses).
func (l *RegionLog) Entries() []Entry {
	var es []Entry
	if l.policy == Hash {
		for a, n := range l.keys {
			es = append(es, Entry{A: a, B: n})
		}
		slices.SortFunc(es, Entry.Compare)
		return es
	}
	for _, r := range l.iv {
		if k := len(es) - 1; k >= 0 && es[k].A+es[k].B == r.addr {
			es[k].B = r.end - es[k].A
			continue
		}
		es = append(es, Entry{A: r.addr, B: r.end - r.addr})
	}
	return es
}

// ExactSet is a set of Exact entries per module, for lookups of one site
// outcome (src, dst, dstmod, kind).
type ExactSet struct {
	m map[string]map[Entry]struct{}
}

// NewExactSet returns an empty set.
func NewExactSet() *ExactSet { return &ExactSet{m: map[string]map[Entry]struct{}{}} }

// ExactSet returns the entries of an Exact log as a set (an empty set for
// a log of another policy).
func (l *Log) ExactSet() *ExactSet {
	s := NewExactSet()
	if l.Policy != Exact {
		return s
	}
	for id, es := range l.Modules {
		for _, e := range es {
			s.Add(id, e)
		}
	}
	return s
}

// Add adds e to the module with the given build-id (hex) and reports
// whether it was new.
func (s *ExactSet) Add(buildID string, e Entry) bool {
	m := s.m[buildID]
	if m == nil {
		m = map[Entry]struct{}{}
		s.m[buildID] = m
	}
	if _, ok := m[e]; ok {
		return false
	}
	m[e] = struct{}{}
	return true
}

// Has reports whether the module with the given build-id (hex) has the
// outcome (src, dst, dstmod, kind).
func (s *ExactSet) Has(buildID string, src, dst, dstMod uint64, kind uint32) bool {
	_, ok := s.m[buildID][Entry{A: src, B: dst, DstMod: dstMod, Kind: kind}]
	return ok
}

// Len returns the number of entries over all modules.
func (s *ExactSet) Len() int {
	n := 0
	for _, m := range s.m {
		n += len(m)
	}
	return n
}

// Blocks returns the set as [Append] takes it: build-id → sorted entries.
func (s *ExactSet) Blocks() map[string][]Entry {
	out := make(map[string][]Entry, len(s.m))
	for id, m := range s.m {
		es := make([]Entry, 0, len(m))
		for e := range m {
			es = append(es, e)
		}
		slices.SortFunc(es, Entry.Compare)
		out[id] = es
	}
	return out
}
