package cct

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// FileFormat and FileVersion identify a cct file (see the package
// documentation).
const (
	FileFormat  = "stint-cct"
	FileVersion = 1
)

// ErrNotCCT is wrapped by the error of [Read] for input that is JSON but
// not a cct file.
var ErrNotCCT = errors.New("not a stint call-context tree file")

// FormatError reports a malformed cct file: the JSON value at fault.
type FormatError struct {
	Offset int64  // byte offset in the input where decoding stopped (0 if unknown)
	Where  string // e.g. `tree 0 node 12`
	Msg    string
	Err    error
}

func (e *FormatError) Error() string {
	s := "cct file"
	if e.Offset > 0 {
		s += fmt.Sprintf(" offset %d", e.Offset)
	}
	if e.Where != "" {
		s += ": " + e.Where
	}
	s += ": " + e.Msg
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

func (e *FormatError) Unwrap() error { return e.Err }

// hex is an address written as a "0x…" string: JSON numbers above 2^53
// do not survive JavaScript readers.
type hex uint64

func (h hex) MarshalText() ([]byte, error) {
	return []byte("0x" + strconv.FormatUint(uint64(h), 16)), nil
}

func (h *hex) UnmarshalText(b []byte) error {
	s := string(b)
	if !strings.HasPrefix(s, "0x") {
		return fmt.Errorf("address %q: want 0x-prefixed hex", s)
	}
	v, err := strconv.ParseUint(s[2:], 16, 64)
	if err != nil {
		return fmt.Errorf("address %q: %w", s, err)
	}
	*h = hex(v)
	return nil
}

type fileJSON struct {
	Format   string     `json:"format"`
	Version  int        `json:"version"`
	Every    bool       `json:"every"`
	Modules  []Module   `json:"modules"`
	Runs     []RunInfo  `json:"runs"`
	Warnings []string   `json:"warnings,omitempty"`
	Trees    []treeJSON `json:"trees"`
}

type treeJSON struct {
	Name  string     `json:"name"`
	Run   int        `json:"run"`
	TID   uint32     `json:"tid"`
	Stats Stats      `json:"stats"`
	Nodes []nodeJSON `json:"nodes"`
	Edges []edgeJSON `json:"edges"`
}

type nodeJSON struct {
	ID       int    `json:"id"`
	Parent   int    `json:"parent"`
	Module   int    `json:"module"`
	Entry    hex    `json:"entry"`
	Name     string `json:"name,omitempty"`
	Calls    uint64 `json:"calls"`
	Inferred uint64 `json:"inferred,omitempty"`
	NS       uint64 `json:"ns,omitempty"` // time in the context, callees included
	Depth    int    `json:"depth"`
}

type edgeJSON struct {
	Caller int    `json:"caller"`
	Callee int    `json:"callee"`
	Module int    `json:"module"`
	Site   hex    `json:"site"`
	Kind   string `json:"kind"`
	Calls  uint64 `json:"calls"`
}

// Write writes f as a cct file: JSON, byte-stable for a given forest.
func Write(w io.Writer, f *Forest) error {
	out := fileJSON{Format: FileFormat, Version: FileVersion, Every: f.Every(), Modules: f.Modules, Runs: f.Runs, Warnings: f.Warnings}
	if out.Modules == nil {
		out.Modules = []Module{}
	}
	if out.Runs == nil {
		out.Runs = []RunInfo{}
	}
	trees := append([]*Tree{f.Merged}, f.Threads...)
	for _, t := range trees {
		tj := treeJSON{Name: t.Name, Run: t.Run, TID: t.TID, Stats: t.Stats, Nodes: []nodeJSON{}, Edges: []edgeJSON{}}
		ids := map[*Node]int{}
		depth := map[*Node]int{}
		t.Walk(func(n *Node) bool {
			id := len(tj.Nodes)
			ids[n] = id
			nj := nodeJSON{ID: id, Parent: -1, Module: n.Module, Entry: hex(n.Entry), Name: n.Name, Calls: n.Calls, Inferred: n.Inferred, NS: n.NS}
			if n.Parent != nil {
				nj.Parent = ids[n.Parent]
				nj.Depth = depth[n.Parent] + 1
			}
			depth[n] = nj.Depth
			tj.Nodes = append(tj.Nodes, nj)
			return true
		})
		t.Walk(func(n *Node) bool {
			for _, e := range n.Edges {
				tj.Edges = append(tj.Edges, edgeJSON{Caller: ids[n], Callee: ids[e.Callee], Module: e.Module, Site: hex(e.Site), Kind: e.Kind, Calls: e.Calls})
			}
			return true
		})
		out.Trees = append(out.Trees, tj)
	}
	bw := bufio.NewWriter(w)
	enc := json.NewEncoder(bw)
	if err := enc.Encode(out); err != nil {
		return err
	}
	return bw.Flush()
}

// Read reads a cct file written by [Write]. Malformed input gives a
// *[FormatError] (wrapping [ErrNotCCT] when the JSON is not a cct file
// at all); it never panics. Memory is bounded by a small multiple of the
// input's size.
func Read(r io.Reader) (*Forest, error) {
	dec := json.NewDecoder(bufio.NewReader(r))
	var in fileJSON
	if err := dec.Decode(&in); err != nil {
		return nil, &FormatError{Offset: dec.InputOffset(), Msg: "bad JSON", Err: err}
	}
	if in.Format != FileFormat {
		return nil, &FormatError{Msg: fmt.Sprintf("format %q, want %q", in.Format, FileFormat), Err: ErrNotCCT}
	}
	if in.Version != FileVersion {
		return nil, &FormatError{Msg: fmt.Sprintf("version %d, this reader knows %d", in.Version, FileVersion)}
	}
	if len(in.Trees) == 0 {
		return nil, &FormatError{Msg: "no trees"}
	}
	f := &Forest{Modules: in.Modules, Runs: in.Runs, Warnings: in.Warnings}
	for ti, tj := range in.Trees {
		t, err := tj.tree(f.Modules, len(f.Runs))
		if err != nil {
			err.Where = fmt.Sprintf("tree %d (%s)%s", ti, tj.Name, err.Where)
			return nil, err
		}
		if ti == 0 {
			if t.Run != -1 {
				return nil, &FormatError{Where: "tree 0", Msg: "the first tree must be the merged one (run -1)"}
			}
			f.Merged = t
		} else {
			f.Threads = append(f.Threads, t)
		}
	}
	return f, nil
}

func (tj *treeJSON) tree(mods []Module, nruns int) (*Tree, *FormatError) {
	if tj.Run < -1 || tj.Run >= nruns && tj.Run != -1 {
		return nil, &FormatError{Msg: fmt.Sprintf("run %d out of range (%d runs)", tj.Run, nruns)}
	}
	t := &Tree{Name: tj.Name, Run: tj.Run, TID: tj.TID, Modules: mods, Stats: tj.Stats}
	if len(tj.Nodes) == 0 {
		return nil, &FormatError{Msg: "no root node"}
	}
	nodes := make([]*Node, len(tj.Nodes))
	for i, nj := range tj.Nodes {
		where := fmt.Sprintf(" node %d", i)
		switch {
		case nj.ID != i:
			return nil, &FormatError{Where: where, Msg: fmt.Sprintf("id %d, want %d (nodes in id order)", nj.ID, i)}
		case i == 0 && nj.Parent != -1:
			return nil, &FormatError{Where: where, Msg: "the root (node 0) has a parent"}
		case i > 0 && (nj.Parent < 0 || nj.Parent >= i):
			return nil, &FormatError{Where: where, Msg: fmt.Sprintf("parent %d is not an earlier node", nj.Parent)}
		case nj.Module < NoModule || nj.Module >= len(mods):
			return nil, &FormatError{Where: where, Msg: fmt.Sprintf("module %d out of range (%d modules)", nj.Module, len(mods))}
		}
		n := &Node{Module: nj.Module, Entry: uint64(nj.Entry), Name: nj.Name, Calls: nj.Calls, Inferred: nj.Inferred, NS: nj.NS}
		if i > 0 {
			n.Parent = nodes[nj.Parent]
			n.Parent.Children = append(n.Parent.Children, n)
		}
		nodes[i] = n
	}
	for i, ej := range tj.Edges {
		where := fmt.Sprintf(" edge %d", i)
		switch {
		case ej.Caller < 0 || ej.Caller >= len(nodes) || ej.Callee <= 0 || ej.Callee >= len(nodes):
			return nil, &FormatError{Where: where, Msg: fmt.Sprintf("caller %d or callee %d out of range", ej.Caller, ej.Callee)}
		case nodes[ej.Callee].Parent != nodes[ej.Caller]:
			return nil, &FormatError{Where: where, Msg: fmt.Sprintf("callee %d is not a child of caller %d", ej.Callee, ej.Caller)}
		case ej.Module < NoModule || ej.Module >= len(mods):
			return nil, &FormatError{Where: where, Msg: fmt.Sprintf("module %d out of range", ej.Module)}
		}
		c := nodes[ej.Caller]
		c.Edges = append(c.Edges, &Edge{Module: ej.Module, Site: uint64(ej.Site), Kind: ej.Kind, Calls: ej.Calls, Callee: nodes[ej.Callee]})
	}
	for _, n := range nodes {
		sortNode(n)
	}
	t.Root = nodes[0]
	if err := t.CheckValid(); err != nil {
		return nil, &FormatError{Msg: "invalid tree", Err: err}
	}
	return t, nil
}
