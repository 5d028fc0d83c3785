package cct

import (
	"cmp"
	"slices"
)

// Coverage is how much of the reference tree's nodes (or edges) the
// other tree has. JSON keys are stable.
type Coverage struct {
	Reference int     `json:"reference"` // in the reference tree (B)
	Other     int     `json:"other"`     // in the compared tree (A)
	Common    int     `json:"common"`    // in both
	Extra     int     `json:"extra"`     // in A only
	Coverage  float64 `json:"coverage"`  // Common / Reference (0 if Reference is 0)
}

func (c *Coverage) finish() {
	c.Extra = c.Other - c.Common
	if c.Reference > 0 {
		c.Coverage = float64(c.Common) / float64(c.Reference)
	}
}

// Missing is a context of the reference tree that the other tree lacks,
// while it has the context's parent: the root of a missing subtree.
type Missing struct {
	Path  []string `json:"path"`  // function names from the root
	Nodes int      `json:"nodes"` // nodes of the missing subtree
	Calls uint64   `json:"calls"` // calls into the subtree's root in the reference
}

// Comparison is the result of [Compare]: the DIME* paper's table 1
// (nodes and edges of one call-context tree found in another).
type Comparison struct {
	Nodes Coverage `json:"nodes"`
	Edges Coverage `json:"edges"`
	// CallCoverage weighs nodes by the reference's calls: the share of
	// the reference's calls that entered a context A has. With traces of
	// default mode (counts 1) it is close to node coverage.
	CallCoverage float64   `json:"call_coverage"`
	Missing      []Missing `json:"missing"` // the largest missing subtrees first
	MissingRoots int       `json:"missing_roots"`
}

// Compare measures tree a against the reference tree b. Contexts match
// by their path of functions from the root, a function being its
// module (build-id, else path) and entry address; edges match by their
// caller's context, call site (module and address) and callee's
// context. The two trees may come from different files (their module
// tables differ). At most topMissing missing subtrees are listed.
func Compare(a, b *Tree, topMissing int) *Comparison {
	c := &Comparison{}
	modKey := func(t *Tree, m int) string {
		if m < 0 || m >= len(t.Modules) {
			return ""
		}
		return t.Modules[m].Key()
	}
	type fk struct {
		mod   string
		entry uint64
	}
	type ek struct {
		mod    string
		site   uint64
		callee fk
	}
	var totalCalls, coveredCalls uint64
	var walk func(na, nb *Node)
	walk = func(na, nb *Node) {
		kids := make(map[fk]*Node, len(na.Children))
		for _, ch := range na.Children {
			kids[fk{modKey(a, ch.Module), ch.Entry}] = ch
		}
		edges := make(map[ek]bool, len(na.Edges))
		for _, e := range na.Edges {
			edges[ek{modKey(a, e.Module), e.Site, fk{modKey(a, e.Callee.Module), e.Callee.Entry}}] = true
		}
		for _, e := range nb.Edges {
			if edges[ek{modKey(b, e.Module), e.Site, fk{modKey(b, e.Callee.Module), e.Callee.Entry}}] {
				c.Edges.Common++
			}
		}
		for _, ch := range nb.Children {
			if m := kids[fk{modKey(b, ch.Module), ch.Entry}]; m != nil {
				c.Nodes.Common++
				coveredCalls += ch.Calls + ch.Inferred
				walk(m, ch)
				continue
			}
			c.MissingRoots++
			sub := &Tree{Modules: b.Modules, Root: ch}
			n := 0
			sub.Walk(func(*Node) bool { n++; return true })
			c.Missing = append(c.Missing, Missing{Path: b.Path(ch), Nodes: n, Calls: ch.Calls + ch.Inferred})
		}
	}
	walk(a.Root, b.Root)
	c.Nodes.Other, c.Edges.Other = a.Count()
	c.Nodes.Reference, c.Edges.Reference = b.Count()
	b.Walk(func(n *Node) bool {
		if n.Parent != nil {
			totalCalls += n.Calls + n.Inferred
		}
		return true
	})
	c.Nodes.finish()
	c.Edges.finish()
	if totalCalls > 0 {
		c.CallCoverage = float64(coveredCalls) / float64(totalCalls)
	}
	slices.SortStableFunc(c.Missing, func(x, y Missing) int {
		if r := cmp.Compare(y.Nodes, x.Nodes); r != 0 {
			return r
		}
		return cmp.Compare(y.Calls, x.Calls)
	})
	if topMissing >= 0 && len(c.Missing) > topMissing {
		c.Missing = c.Missing[:topMissing]
	}
	if c.Missing == nil {
		c.Missing = []Missing{}
	}
	return c
}
