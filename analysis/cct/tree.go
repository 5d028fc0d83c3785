package cct

import (
	"cmp"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
)

// NoModule is a [Node]'s or [Edge]'s Module when its address lies in no
// known module (the address is then absolute).
const NoModule = -1

// Module is a module of the traced runs, identified across runs by its
// GNU build-id, or by its path when it has none.
type Module struct {
	Path    string `json:"path"`
	BuildID string `json:"build_id,omitempty"`
	Symbols string `json:"symbols,omitempty"` // where names came from, or why there are none
}

// Key is what makes two modules the same: the build-id, else the path.
func (m Module) Key() string {
	if m.BuildID != "" {
		return "b:" + m.BuildID
	}
	return "p:" + m.Path
}

// RunInfo is one traced run (process) that went into a forest.
type RunInfo struct {
	File    string `json:"file"`
	Run     int    `json:"run"` // index of the run in its file
	PID     int64  `json:"pid"`
	Tool    string `json:"tool"`
	Every   bool   `json:"every"`             // recorded every occurrence (rewrite --every); else each distinct (site, destination) once
	Context bool   `json:"context,omitempty"` // context-preserving mode (rewrite --context): the runtime wrote each context once
	Compact bool   `json:"compact,omitempty"` // a compact complete trace (its events timed by their place in their chunk)
}

// Node is a calling context: the path of function entries from the
// root to it. The root has Module NoModule, Entry 0 and no parent.
type Node struct {
	Module   int    // index into the tree's Modules; NoModule: Entry is absolute
	Entry    uint64 // the function's entry: the call destination (module-relative)
	Name     string // function name, "" if unknown
	Calls    uint64 // call events that entered this context
	Inferred uint64 // entries without a call event, inferred from symbols (see the package documentation)
	// NS is the time spent in this context, its callees included (ns,
	// from the events' times: meaningful when [Forest.Timed]); a frame
	// still open when its thread's events end closes at its last event.
	NS       uint64
	Parent   *Node
	Children []*Node // sorted by (Module, Entry)
	Edges    []*Edge // the calls made in this context, sorted by (Module, Site, callee)
}

// Edge is a call made in a context: from a call site of the caller's
// context to the callee's context.
type Edge struct {
	Module int    // module of the call site (NoModule: Site is absolute)
	Site   uint64 // address of the call instruction
	Kind   string // "call" or "ind-call"
	Calls  uint64 // call events through this site in this context
	Callee *Node
}

// SelfNS is n's time without its callees' (NS less its children's NS;
// 0 if rounding makes that negative).
func (n *Node) SelfNS() uint64 {
	var kids uint64
	for _, c := range n.Children {
		kids += c.NS
	}
	if kids >= n.NS {
		return 0
	}
	return n.NS - kids
}

// Depth returns the number of calls from the root to n (the root is 0).
func (n *Node) Depth() int {
	d := 0
	for p := n.Parent; p != nil; p = p.Parent {
		d++
	}
	return d
}

// child returns n's child for (mod, entry), or nil.
func (n *Node) child(mod int, entry uint64) *Node {
	i, ok := slices.BinarySearchFunc(n.Children, key{mod, entry}, func(c *Node, k key) int {
		return cmpKey(key{c.Module, c.Entry}, k)
	})
	if ok {
		return n.Children[i]
	}
	return nil
}

type key struct {
	mod   int
	entry uint64
}

func cmpKey(a, b key) int {
	if c := cmp.Compare(a.mod, b.mod); c != 0 {
		return c
	}
	return cmp.Compare(a.entry, b.entry)
}

// Stats counts what the builder saw and did, for one thread or summed.
type Stats struct {
	Threads      int    `json:"threads"`
	Calls        uint64 `json:"calls"`         // call and ind-call events (and their refusal rows)
	Rets         uint64 `json:"rets"`          // ret events (and their refusal rows)
	Matched      uint64 `json:"matched"`       // returns that matched a frame
	Unmatched    uint64 `json:"unmatched"`     // returns that matched no frame of the shadow stack
	Unwound      uint64 `json:"unwound"`       // frames popped above a matched return (longjmp, exceptions, missed returns)
	Repaired     uint64 `json:"repaired"`      // frames popped because a call came from a function deeper on the stack
	Inferred     uint64 `json:"inferred"`      // frames pushed for a function entered without a call event
	PoppedByFunc uint64 `json:"popped_by_fn"`  // unmatched returns from the top frame's own function (it was entered from untraced code)
	TooDeep      uint64 `json:"too_deep"`      // calls not pushed because the stack was MaxDepth deep
	Contexts     uint64 `json:"contexts"`      // KindContext rows (rewrite --context)
	Orphans      uint64 `json:"orphans"`       // KindContext rows whose parent id was not seen before (attached to the root)
	MaxDepth     int    `json:"max_depth"`     // deepest shadow stack seen
	Nodes        int    `json:"nodes"`         // contexts, without the root
	Edges        int    `json:"edges"`         // (context, site, callee) arcs
	Unnamed      int    `json:"unnamed_nodes"` // nodes without a function name
}

func (s *Stats) add(o Stats) {
	s.Threads += o.Threads
	s.Calls += o.Calls
	s.Rets += o.Rets
	s.Matched += o.Matched
	s.Unmatched += o.Unmatched
	s.Unwound += o.Unwound
	s.Repaired += o.Repaired
	s.Inferred += o.Inferred
	s.PoppedByFunc += o.PoppedByFunc
	s.TooDeep += o.TooDeep
	s.Contexts += o.Contexts
	s.Orphans += o.Orphans
	s.MaxDepth = max(s.MaxDepth, o.MaxDepth)
}

// Tree is a call-context tree.
type Tree struct {
	Name    string // "merged", or "run R tid T" for a thread's tree
	Run     int    // index into the forest's Runs; -1 for a merged tree
	TID     uint32 // thread id; 0 for a merged tree
	Modules []Module
	Root    *Node
	Stats   Stats
}

// Walk calls f for every node in preorder (children in order), root
// first; f returns false to skip a node's subtree.
func (t *Tree) Walk(f func(n *Node) bool) {
	if t.Root == nil {
		return
	}
	// Iterative: trees of deep recursion are thousands of levels deep.
	stack := []*Node{t.Root}
	for len(stack) > 0 {
		n := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if !f(n) {
			continue
		}
		for i := len(n.Children) - 1; i >= 0; i-- {
			stack = append(stack, n.Children[i])
		}
	}
}

// Count returns the number of nodes (without the root) and edges.
func (t *Tree) Count() (nodes, edges int) {
	t.Walk(func(n *Node) bool {
		nodes++
		edges += len(n.Edges)
		return true
	})
	return nodes - 1, edges
}

// FuncName returns n's name, or module+offset (absolute address for no
// module) when it has none.
func (t *Tree) FuncName(n *Node) string {
	if n.Parent == nil {
		return "(root)"
	}
	if n.Name != "" {
		return n.Name
	}
	return t.addr(n.Module, n.Entry)
}

func (t *Tree) addr(mod int, a uint64) string {
	if mod < 0 || mod >= len(t.Modules) {
		return fmt.Sprintf("%#x", a)
	}
	return fmt.Sprintf("%s+%#x", filepath.Base(t.Modules[mod].Path), a)
}

// Path returns the names of the functions from the root's child to n.
func (t *Tree) Path(n *Node) []string {
	var p []string
	for ; n != nil && n.Parent != nil; n = n.Parent {
		p = append(p, t.FuncName(n))
	}
	slices.Reverse(p)
	return p
}

// Find returns the node reached from the root by following children with
// these names (as [Tree.FuncName] prints them), or nil.
func (t *Tree) Find(names ...string) *Node {
	n := t.Root
next:
	for _, name := range names {
		for _, c := range n.Children {
			if t.FuncName(c) == name {
				n = c
				continue next
			}
		}
		return nil
	}
	return n
}

// CheckValid checks the tree's invariants: a root without parent,
// every child's parent is its parent, children sorted and distinct,
// module indexes in range, every edge's callee a child of its caller.
func (t *Tree) CheckValid() error {
	if t.Root == nil {
		return errors.New("tree has no root")
	}
	if t.Root.Parent != nil {
		return errors.New("root has a parent")
	}
	var err error
	t.Walk(func(n *Node) bool {
		if err != nil {
			return false
		}
		if n.Module < NoModule || n.Module >= len(t.Modules) {
			err = fmt.Errorf("node %s: module %d out of range", t.FuncName(n), n.Module)
			return false
		}
		for i, c := range n.Children {
			if c.Parent != n {
				err = fmt.Errorf("node %s: child %s has another parent", t.FuncName(n), t.FuncName(c))
				return false
			}
			if i > 0 && cmpKey(key{n.Children[i-1].Module, n.Children[i-1].Entry}, key{c.Module, c.Entry}) >= 0 {
				err = fmt.Errorf("node %s: children not sorted or repeated at %s", t.FuncName(n), t.FuncName(c))
				return false
			}
		}
		for _, e := range n.Edges {
			if e.Callee == nil || e.Callee.Parent != n {
				err = fmt.Errorf("node %s: edge from %s does not lead to a child", t.FuncName(n), t.addr(e.Module, e.Site))
				return false
			}
			if e.Module < NoModule || e.Module >= len(t.Modules) {
				err = fmt.Errorf("node %s: edge module %d out of range", t.FuncName(n), e.Module)
				return false
			}
		}
		return true
	})
	return err
}

func sortNode(n *Node) {
	slices.SortFunc(n.Children, func(a, b *Node) int { return cmpKey(key{a.Module, a.Entry}, key{b.Module, b.Entry}) })
	slices.SortFunc(n.Edges, func(a, b *Edge) int {
		if c := cmpKey(key{a.Module, a.Site}, key{b.Module, b.Site}); c != 0 {
			return c
		}
		return cmpKey(key{a.Callee.Module, a.Callee.Entry}, key{b.Callee.Module, b.Callee.Entry})
	})
}

// Merge returns the union of trees that share one module table (the
// trees of one [Forest]): contexts are matched by their path of
// function entries from the root, edges by (context, call site,
// callee); counts are summed, and stats are summed (MaxDepth: the
// largest). Names are taken from the first tree that has one. The
// inputs are not changed.
func Merge(name string, trees ...*Tree) *Tree {
	out := &Tree{Name: name, Run: -1, Root: &Node{Module: NoModule}}
	if len(trees) > 0 {
		out.Modules = trees[0].Modules
	}
	for _, t := range trees {
		mergeInto(out.Root, t.Root)
		out.Stats.add(t.Stats)
	}
	out.Stats.Nodes, out.Stats.Edges = out.Count()
	out.Stats.Unnamed = out.unnamed()
	return out
}

// Reroot returns the tree below the functions called name: the
// outermost nodes with that name (as [Tree.FuncName] prints it) are
// merged into the new root, so their callees become its children. It
// compares trees whose upper frames differ (a trace that saw main's
// caller and one that did not); nil if no node has the name.
func (t *Tree) Reroot(name string) *Tree {
	var tops []*Tree
	t.Walk(func(n *Node) bool {
		if n.Parent != nil && t.FuncName(n) == name {
			tops = append(tops, &Tree{Modules: t.Modules, Root: n})
			return false
		}
		return true
	})
	if len(tops) == 0 {
		return nil
	}
	r := Merge(t.Name+" below "+name, tops...)
	r.Run, r.TID, r.Stats = t.Run, t.TID, t.Stats
	r.Root.Calls, r.Root.Inferred, r.Root.NS, r.Root.Name = 0, 0, 0, ""
	r.Stats.Nodes, r.Stats.Edges = r.Count()
	r.Stats.Unnamed = r.unnamed()
	return r
}

func mergeInto(dst, src *Node) {
	dst.Calls += src.Calls
	dst.Inferred += src.Inferred
	dst.NS += src.NS
	if dst.Name == "" {
		dst.Name = src.Name
	}
	if len(src.Children) == 0 {
		return
	}
	kids := make(map[key]*Node, len(dst.Children)+len(src.Children))
	for _, c := range dst.Children {
		kids[key{c.Module, c.Entry}] = c
	}
	for _, sc := range src.Children {
		k := key{sc.Module, sc.Entry}
		dc := kids[k]
		if dc == nil {
			dc = &Node{Module: sc.Module, Entry: sc.Entry, Parent: dst}
			dst.Children = append(dst.Children, dc)
			kids[k] = dc
		}
		mergeInto(dc, sc)
	}
	type ekey struct {
		site   key
		callee *Node
	}
	edges := make(map[ekey]*Edge, len(dst.Edges)+len(src.Edges))
	for _, e := range dst.Edges {
		edges[ekey{key{e.Module, e.Site}, e.Callee}] = e
	}
	for _, se := range src.Edges {
		callee := kids[key{se.Callee.Module, se.Callee.Entry}]
		k := ekey{key{se.Module, se.Site}, callee}
		if de := edges[k]; de != nil {
			de.Calls += se.Calls
			continue
		}
		de := &Edge{Module: se.Module, Site: se.Site, Kind: se.Kind, Calls: se.Calls, Callee: callee}
		dst.Edges = append(dst.Edges, de)
		edges[k] = de
	}
	sortNode(dst)
}

func (t *Tree) unnamed() int {
	n := 0
	t.Walk(func(x *Node) bool {
		if x.Parent != nil && x.Name == "" {
			n++
		}
		return true
	})
	return n
}
