package cct

import (
	"cmp"
	"slices"
)

// FuncTime is one function's part of a tree: its contexts summed.
type FuncTime struct {
	Module int    // NoModule: Entry is absolute
	Entry  uint64 // the function's entry
	Name   string // as [Tree.FuncName] prints it
	Calls  uint64 // calls into it, in every context
	SelfNS uint64 // time in it, its callees left out
	// NS is the time from entering it to leaving it, callees included;
	// a recursion counts once, at its outermost context.
	NS uint64
}

// FuncTimes sums t's contexts by function: most self time first, then
// most calls, then by name.
func (t *Tree) FuncTimes() []FuncTime {
	if t.Root == nil {
		return nil
	}
	idx := map[key]int{}
	active := map[key]int{}
	var out []FuncTime
	type step struct {
		n    *Node
		next int // the next child to visit
	}
	// iterative: trees of deep recursion are thousands of levels deep
	stack := []step{{n: t.Root}}
	for len(stack) > 0 {
		s := &stack[len(stack)-1]
		n := s.n
		if s.next == 0 && n.Parent != nil {
			k := key{n.Module, n.Entry}
			i, ok := idx[k]
			if !ok {
				i = len(out)
				idx[k] = i
				out = append(out, FuncTime{Module: n.Module, Entry: n.Entry, Name: t.FuncName(n)})
			}
			f := &out[i]
			f.Calls += n.Calls
			f.SelfNS += n.SelfNS()
			if active[k] == 0 {
				f.NS += n.NS
			}
			active[k]++
		}
		if s.next < len(n.Children) {
			c := n.Children[s.next]
			s.next++
			stack = append(stack, step{n: c})
			continue
		}
		if n.Parent != nil {
			active[key{n.Module, n.Entry}]--
		}
		stack = stack[:len(stack)-1]
	}
	slices.SortStableFunc(out, func(a, b FuncTime) int {
		if c := cmp.Compare(b.SelfNS, a.SelfNS); c != 0 {
			return c
		}
		if c := cmp.Compare(b.Calls, a.Calls); c != 0 {
			return c
		}
		return cmp.Compare(a.Name, b.Name)
	})
	return out
}
