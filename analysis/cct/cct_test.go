package cct

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/stint-project/stint/analysis/symbols"
	"github.com/stint-project/stint/formats"
)

var demo = formats.Module{ID: 0, Path: "/nonexistent/demo", BuildID: "d00d", Base: 0x5000, Size: 0x10000, Rewritten: true}

// Functions of the hand-made program: name -> entry. Call sites of a
// function lie in [entry, entry+0x100).
var fnAt = map[string]uint64{"main": 0x1000, "a": 0x1100, "b": 0x1200, "c": 0x1300, "d": 0x1400, "h": 0x1500}

// demoSyms is the hand-made program's symbol table.
type demoSyms struct{}

func (demoSyms) Table(buildID, path string) (*symbols.Table, error) {
	if buildID != demo.BuildID {
		return nil, fmt.Errorf("no symbols for %s", path)
	}
	t := &symbols.Table{Source: "hand-made"}
	for name, at := range fnAt {
		t.Funcs = append(t.Funcs, symbols.Func{Name: name, Start: at, End: at + 0x100})
	}
	slices.SortFunc(t.Funcs, func(x, y symbols.Func) int { return int(x.Start) - int(y.Start) })
	return t, nil
}

// call is a direct call from site off in function from to function to;
// ret returns from function fn (ret at its end) to the instruction after
// the call at site off in function to.
func call(tid uint32, from string, off uint64, to string) formats.Event {
	return formats.Event{Kind: formats.KindCall, TID: tid, Src: fnAt[from] + off, Dst: fnAt[to]}
}

func ret(tid uint32, fn, to string, off uint64) formats.Event {
	return formats.Event{Kind: formats.KindRet, TID: tid, Src: fnAt[fn] + 0xf0, Dst: fnAt[to] + off + 5}
}

func write(t testing.TB, dir, name string, every bool, events ...formats.Event) string {
	t.Helper()
	var buf bytes.Buffer
	opts := "tool=call every=0"
	if every {
		opts = "tool=call every=1"
	}
	w, err := formats.NewWriter(&buf, formats.Run{Binary: demo.Path, BuildID: demo.BuildID, Tool: "call", Options: opts, PID: 7}, []formats.Module{demo}, formats.WithBatchRows(3))
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Write(events...); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func build(t testing.TB, opts Options, every bool, events ...formats.Event) *Forest {
	t.Helper()
	p := write(t, t.TempDir(), "t.arrow", every, events...)
	f, err := Build(context.Background(), []string{p}, opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Merged.CheckValid(); err != nil {
		t.Fatal(err)
	}
	return f
}

// dump prints a tree one node per line: indentation, name, calls (and
// inferred entries as +N).
func dump(t *Tree) string {
	var b strings.Builder
	t.Walk(func(n *Node) bool {
		if n.Parent == nil {
			return true
		}
		name := t.FuncName(n)
		if name == "" || strings.Contains(name, "+") {
			for k, v := range fnAt {
				if v == n.Entry {
					name = k
				}
			}
		}
		fmt.Fprintf(&b, "%s%s %d", strings.Repeat("  ", n.Depth()-1), name, n.Calls)
		if n.Inferred > 0 {
			fmt.Fprintf(&b, "+%d", n.Inferred)
		}
		b.WriteByte('\n')
		return true
	})
	return b.String()
}

func TestBuildKnownTrees(t *testing.T) {
	type st struct{ matched, unmatched, unwound, repaired, inferred, popped uint64 }
	tests := []struct {
		name   string
		syms   bool
		events []formats.Event
		want   string
		stats  st
	}{
		{
			name: "nested calls and returns",
			events: []formats.Event{
				call(1, "main", 0x10, "a"), call(1, "a", 0x10, "b"), ret(1, "b", "a", 0x10),
				call(1, "a", 0x20, "c"), ret(1, "c", "a", 0x20), ret(1, "a", "main", 0x10),
				call(1, "main", 0x10, "a"), call(1, "a", 0x10, "b"), ret(1, "b", "a", 0x10), ret(1, "a", "main", 0x10),
			},
			want:  "a 2\n  b 2\n  c 1\n",
			stats: st{matched: 5},
		},
		{
			name: "recursion",
			events: []formats.Event{
				call(1, "main", 0x10, "a"), call(1, "a", 0x30, "a"), call(1, "a", 0x30, "a"),
				ret(1, "a", "a", 0x30), ret(1, "a", "a", 0x30), ret(1, "a", "main", 0x10),
			},
			want:  "a 1\n  a 1\n    a 1\n",
			stats: st{matched: 3},
		},
		{
			name: "longjmp-like unwind",
			// a→b→c→d, then a return to main's call site of a: d, c
			// and b are unwound, a matched.
			events: []formats.Event{
				call(1, "main", 0x10, "a"), call(1, "a", 0x10, "b"), call(1, "b", 0x10, "c"), call(1, "c", 0x10, "d"),
				ret(1, "a", "main", 0x10), call(1, "main", 0x20, "c"),
			},
			want:  "a 1\n  b 1\n    c 1\n      d 1\n" + "c 1\n",
			stats: st{matched: 1, unwound: 3},
		},
		{
			name: "unmatched return",
			events: []formats.Event{
				call(1, "main", 0x10, "a"),
				{Kind: formats.KindRet, TID: 1, Src: 0x11f0, Dst: 0x9999}, // to nowhere: counted, nothing popped
				call(1, "a", 0x10, "b"),
			},
			want:  "a 1\n  b 1\n",
			stats: st{unmatched: 1},
		},
		{
			name: "tail call without symbols",
			// a jumps to d (no event); d's calls appear under a, and
			// d's return matches a's frame.
			events: []formats.Event{
				call(1, "main", 0x10, "a"), call(1, "d", 0x10, "b"), ret(1, "b", "d", 0x10),
				ret(1, "d", "main", 0x10), call(1, "main", 0x20, "c"),
			},
			want:  "a 1\n  b 1\n" + "c 1\n",
			stats: st{matched: 2},
		},
		{
			name: "tail call with symbols",
			syms: true,
			events: []formats.Event{
				call(1, "main", 0x10, "a"), call(1, "d", 0x10, "b"), ret(1, "b", "d", 0x10),
				ret(1, "d", "main", 0x10), call(1, "main", 0x20, "c"),
			},
			want:  "main 0+1\n  a 1\n    d 0+1\n      b 1\n  c 1\n",
			stats: st{matched: 2, unwound: 1, inferred: 2},
		},
		{
			name: "gap repaired from symbols",
			// main→a→b, the returns of b and a are missed (a budget
			// gap), then main calls c: b and a are popped. Then a
			// signal handler h runs on top of c, calls b and returns to
			// the signal trampoline (unmatched, popped by function).
			syms: true,
			events: []formats.Event{
				call(1, "main", 0x10, "a"), call(1, "a", 0x10, "b"),
				call(1, "main", 0x20, "c"), call(1, "c", 0x10, "d"), ret(1, "d", "c", 0x10),
				call(1, "h", 0x10, "b"), ret(1, "b", "h", 0x10),
				{Kind: formats.KindRet, TID: 1, Src: fnAt["h"] + 0xf0, Dst: 0x7000},
				call(1, "c", 0x20, "d"), ret(1, "d", "c", 0x20), ret(1, "c", "main", 0x20),
				ret(1, "main", "main", 0x800), // main returns into libc: popped by function
				call(1, "h", 0x10, "b"),
			},
			want: "main 0+1\n  a 1\n    b 1\n  c 1\n    d 2\n    h 0+1\n      b 1\n" +
				"h 0+1\n  b 1\n",
			stats: st{matched: 4, unmatched: 2, repaired: 2, inferred: 3, popped: 2},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var opts Options
			if tt.syms {
				opts.Resolver = demoSyms{}
			}
			f := build(t, opts, true, tt.events...)
			if have := dump(f.Merged); have != tt.want {
				t.Errorf("tree:\nhave:\n%swant:\n%s", have, tt.want)
			}
			s := f.Merged.Stats
			have := st{s.Matched, s.Unmatched, s.Unwound, s.Repaired, s.Inferred, s.PoppedByFunc}
			if have != tt.stats {
				t.Errorf("stats: have %+v, want %+v", have, tt.stats)
			}
			var calls, rets uint64
			for _, e := range tt.events {
				if e.Kind == formats.KindCall {
					calls++
				} else {
					rets++
				}
			}
			if s.Calls != calls || s.Rets != rets || s.Matched+s.Unmatched != rets {
				t.Errorf("counted %d calls %d rets (%d matched, %d not), want %d and %d", s.Calls, s.Rets, s.Matched, s.Unmatched, calls, rets)
			}
			if !f.Every() {
				t.Error("Every() = false for an every=1 trace")
			}
		})
	}
}

func TestEdgesByCallSite(t *testing.T) {
	// a calls b from two sites: one node, two edges.
	f := build(t, Options{}, true,
		call(1, "main", 0x10, "a"), call(1, "a", 0x10, "b"), ret(1, "b", "a", 0x10),
		call(1, "a", 0x40, "b"), ret(1, "b", "a", 0x40), call(1, "a", 0x40, "b"))
	n, e := f.Merged.Count()
	if n != 2 || e != 3 {
		t.Fatalf("nodes %d edges %d, want 2 and 3", n, e)
	}
	a := f.Merged.Root.Children[0]
	if len(a.Edges) != 2 || a.Edges[0].Site != fnAt["a"]+0x10 || a.Edges[0].Calls != 1 || a.Edges[1].Calls != 2 || a.Children[0].Calls != 3 {
		t.Errorf("edges of a: %+v %+v; b calls %d", *a.Edges[0], *a.Edges[1], a.Children[0].Calls)
	}
}

func TestTwoThreads(t *testing.T) {
	// Thread 1: main→a→b; thread 2: main→a→c and main→d, interleaved.
	ev := []formats.Event{
		call(1, "main", 0x10, "a"), call(2, "main", 0x10, "a"), call(1, "a", 0x10, "b"),
		call(2, "a", 0x20, "c"), ret(1, "b", "a", 0x10), ret(2, "c", "a", 0x20),
		ret(2, "a", "main", 0x10), call(2, "main", 0x30, "d"), ret(1, "a", "main", 0x10),
	}
	f := build(t, Options{PerThread: true}, true, ev...)
	if len(f.Threads) != 2 {
		t.Fatalf("%d thread trees, want 2", len(f.Threads))
	}
	want := []string{"a 1\n  b 1\n", "a 1\n  c 1\nd 1\n"}
	for i, tr := range f.Threads {
		if have := dump(tr); have != want[i] {
			t.Errorf("thread %d tree:\nhave:\n%swant:\n%s", tr.TID, have, want[i])
		}
		if tr.TID != uint32(i+1) || tr.Stats.Threads != 1 {
			t.Errorf("thread tree %d: tid %d threads %d", i, tr.TID, tr.Stats.Threads)
		}
	}
	if have, want := dump(f.Merged), "a 2\n  b 1\n  c 1\nd 1\n"; have != want {
		t.Errorf("merged tree:\nhave:\n%swant:\n%s", have, want)
	}
	if f.Merged.Stats.Threads != 2 || f.Merged.Stats.Matched != 4 {
		t.Errorf("merged stats %+v", f.Merged.Stats)
	}
	// Without PerThread the merged tree is built directly: the same.
	g := build(t, Options{}, true, ev...)
	if dump(g.Merged) != dump(f.Merged) || g.Merged.Stats != f.Merged.Stats {
		t.Errorf("direct merge differs:\n%s%+v\n%+v", dump(g.Merged), g.Merged.Stats, f.Merged.Stats)
	}
}

func TestMaxDepth(t *testing.T) {
	var ev []formats.Event
	for i := 0; i < 10; i++ {
		ev = append(ev, call(1, "a", 0x30, "a"))
	}
	f := build(t, Options{MaxDepth: 4}, true, ev...)
	if s := f.Merged.Stats; s.TooDeep != 6 || s.MaxDepth != 4 || s.Nodes != 4 {
		t.Errorf("stats %+v, want 6 too deep, depth 4, 4 nodes", s)
	}
}

func TestDefaultModeAndRefusals(t *testing.T) {
	// A refused call (the log had it) still shapes the tree.
	refused := call(1, "a", 0x10, "b")
	refused.Kind += formats.KindRefusedBase
	f := build(t, Options{}, false, call(1, "main", 0x10, "a"), refused, call(1, "b", 0x10, "c"))
	if have, want := dump(f.Merged), "a 1\n  b 1\n    c 1\n"; have != want {
		t.Errorf("tree:\nhave:\n%swant:\n%s", have, want)
	}
	if f.Every() {
		t.Error("Every() = true for an every=0 trace")
	}
}

func TestContextRows(t *testing.T) {
	ctx := func(tid uint32, from string, off uint64, to string, parent, id uint32) formats.Event {
		return formats.Event{Kind: formats.KindContext, TID: tid, Src: fnAt[from] + off, Dst: fnAt[to], Value: uint64(parent)<<32 | uint64(id)}
	}
	ev := []formats.Event{
		ctx(1, "main", 0x10, "a", 0, 1), ctx(1, "a", 0x10, "b", 1, 2), ctx(1, "a", 0x20, "b", 1, 3),
		ctx(1, "b", 0x10, "c", 3, 4), ctx(2, "d", 0x10, "c", 0, 5), // another thread, entered in d
		ctx(1, "c", 0x10, "h", 77, 6), // parent never written: an orphan at the root, under its site's function
	}
	f := build(t, Options{Resolver: demoSyms{}}, true, ev...)
	if have, want := dump(f.Merged), "main 0+1\n  a 1\n    b 2\n      c 1\n"+"c 0+1\n  h 1\n"+"d 0+1\n  c 1\n"; have != want {
		t.Errorf("tree:\nhave:\n%swant:\n%s", have, want)
	}
	s := f.Merged.Stats
	if s.Contexts != 6 || s.Orphans != 1 || s.Threads != 2 || s.Edges != 6 {
		t.Errorf("stats %+v", s)
	}
	// Without symbols the first contexts hang off the root.
	g := build(t, Options{}, true, ev[:2]...)
	if have, want := dump(g.Merged), "a 1\n  b 1\n"; have != want {
		t.Errorf("tree without symbols:\nhave:\n%swant:\n%s", have, want)
	}
}

func TestReroot(t *testing.T) {
	f := build(t, Options{Resolver: demoSyms{}}, true,
		call(1, "main", 0x10, "a"), call(1, "a", 0x10, "b"), ret(1, "b", "a", 0x10), ret(1, "a", "main", 0x10),
		call(1, "main", 0x20, "c"), call(1, "c", 0x10, "a"), call(1, "a", 0x10, "d"))
	r := f.Merged.Reroot("a")
	if r == nil {
		t.Fatal("no node a")
	}
	if have, want := dump(r), "b 1\nd 1\n"; have != want {
		t.Errorf("below a:\nhave:\n%swant:\n%s", have, want)
	}
	if err := r.CheckValid(); err != nil {
		t.Error(err)
	}
	if f.Merged.Reroot("nothing") != nil {
		t.Error("Reroot of an absent name is not nil")
	}
}

func TestMergeRuns(t *testing.T) {
	dir := t.TempDir()
	p1 := write(t, dir, "1.arrow", true, call(1, "main", 0x10, "a"), call(1, "a", 0x10, "b"))
	p2 := write(t, dir, "2.arrow", true, call(5, "main", 0x10, "a"), call(5, "a", 0x20, "c"))
	f, err := Build(context.Background(), []string{p1, p2}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if have, want := dump(f.Merged), "a 2\n  b 1\n  c 1\n"; have != want {
		t.Errorf("tree:\nhave:\n%swant:\n%s", have, want)
	}
	if len(f.Runs) != 2 || len(f.Modules) != 1 {
		t.Errorf("runs %d modules %d, want 2 and 1", len(f.Runs), len(f.Modules))
	}
}

func TestCompareKnownTrees(t *testing.T) {
	dir := t.TempDir()
	// B: a→{b, c}, d; a calls b from two sites. A: a→b (one site), e.
	pb := write(t, dir, "b.arrow", true,
		call(1, "main", 0x10, "a"), call(1, "a", 0x10, "b"), ret(1, "b", "a", 0x10),
		call(1, "a", 0x40, "b"), ret(1, "b", "a", 0x40), call(1, "a", 0x20, "c"), call(1, "c", 0x10, "d"),
		ret(1, "d", "c", 0x10), ret(1, "c", "a", 0x20), ret(1, "a", "main", 0x10), call(1, "main", 0x30, "d"))
	pa := write(t, dir, "a.arrow", false,
		call(1, "main", 0x10, "a"), call(1, "a", 0x10, "b"), ret(1, "b", "a", 0x10), ret(1, "a", "main", 0x10), call(1, "main", 0x50, "h"))
	fb, err := Build(context.Background(), []string{pb}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	fa, err := Build(context.Background(), []string{pa}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	c := Compare(fa.Merged, fb.Merged, 10)
	// B's nodes: a, a→b, a→c, a→c→d, d = 5; A has a and a→b.
	wantN := Coverage{Reference: 5, Other: 3, Common: 2, Extra: 1, Coverage: 0.4}
	// B's edges: root→a, a→b ×2 sites, a→c, c→d, root→d = 6; A has 2.
	wantE := Coverage{Reference: 6, Other: 3, Common: 2, Extra: 1, Coverage: 2.0 / 6}
	if c.Nodes != wantN || c.Edges != wantE {
		t.Errorf("nodes %+v edges %+v\nwant %+v %+v", c.Nodes, c.Edges, wantN, wantE)
	}
	if c.MissingRoots != 2 || len(c.Missing) != 2 || c.Missing[0].Nodes != 2 || c.Missing[1].Nodes != 1 {
		t.Errorf("missing %+v (%d roots)", c.Missing, c.MissingRoots)
	}
	// B's calls: a 1, b 2, c 1, d 1, d 1 = 6; covered a, b = 3.
	if c.CallCoverage != 0.5 {
		t.Errorf("call coverage %v, want 0.5", c.CallCoverage)
	}
	self := Compare(fb.Merged, fb.Merged, 0)
	if self.Nodes.Coverage != 1 || self.Edges.Coverage != 1 || self.Nodes.Extra != 0 || len(self.Missing) != 0 {
		t.Errorf("B against itself: %+v", self)
	}
}

func TestFileRoundTrip(t *testing.T) {
	f := build(t, Options{Resolver: demoSyms{}, PerThread: true}, true,
		call(1, "main", 0x10, "a"), call(2, "main", 0x10, "a"), call(1, "a", 0x10, "b"),
		formats.Event{Kind: formats.KindCall, TID: 1, Src: 0x1120, DstModule: formats.NoModule, Dst: 0xffffffffff600000})
	var buf bytes.Buffer
	if err := Write(&buf, f); err != nil {
		t.Fatal(err)
	}
	g, err := Read(bytes.NewReader(buf.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	var buf2 bytes.Buffer
	if err := Write(&buf2, g); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(buf.Bytes(), buf2.Bytes()) {
		t.Errorf("round trip differs:\n%s\n%s", buf.Bytes(), buf2.Bytes())
	}
	if dump(g.Merged) != dump(f.Merged) || len(g.Threads) != 2 || !reflect.DeepEqual(g.Runs, f.Runs) {
		t.Errorf("read back:\n%s", dump(g.Merged))
	}
	if n := g.Merged.Find("main", "a", "b"); n == nil || n.Calls != 1 {
		t.Errorf("Find(main, a, b) = %v", n)
	}
	if !strings.Contains(buf.String(), `"entry":"0xffffffffff600000"`) {
		t.Errorf("absolute address not written as hex: %s", buf.String())
	}
}

func TestReadBadInput(t *testing.T) {
	f := build(t, Options{}, true, call(1, "main", 0x10, "a"), call(1, "a", 0x10, "b"))
	var buf bytes.Buffer
	if err := Write(&buf, f); err != nil {
		t.Fatal(err)
	}
	good := buf.String()
	tests := []struct {
		name, in, want string
	}{
		{"empty", "", "bad JSON"},
		{"not json", "\xff\xff\xff\xff", "bad JSON"},
		{"other json", `{"a":1}`, "format"},
		{"version", strings.Replace(good, `"version":1`, `"version":9`, 1), "version 9"},
		{"parent later", strings.Replace(good, `"id":1,"parent":0`, `"id":1,"parent":2`, 1), "parent 2"},
		{"module range", strings.Replace(good, `"id":1,"parent":0,"module":0`, `"id":1,"parent":0,"module":7`, 1), "module 7"},
		{"bad address", strings.Replace(good, `"entry":"0x1100"`, `"entry":"1100"`, 1), "0x-prefixed"},
		{"edge not to child", strings.Replace(good, `"caller":1,"callee":2`, `"caller":0,"callee":2`, 1), "not a child"},
		{"edge range", strings.Replace(good, `"caller":1,"callee":2`, `"caller":1,"callee":99`, 1), "out of range"},
		{"no trees", strings.Replace(good, `"trees":[`, `"trees":[],"x":[`, 1), "no trees"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.in == good {
				t.Fatal("test input unchanged")
			}
			_, err := Read(strings.NewReader(tt.in))
			var fe *FormatError
			if !errors.As(err, &fe) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %v, want a *FormatError containing %q", err, tt.want)
			}
		})
	}
}

func TestBuildBadInput(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.arrow")
	os.WriteFile(bad, []byte("not a trace"), 0o644)
	if _, err := Build(context.Background(), []string{bad}, Options{}); err == nil || !strings.Contains(err.Error(), "bad.arrow") {
		t.Errorf("bad trace: error %v, want one naming the file", err)
	}
	if _, err := Build(context.Background(), nil, Options{}); err == nil {
		t.Error("no traces: no error")
	}
	// A cut trace builds up to its last complete batch, with a warning.
	p := write(t, dir, "cut.arrow", true, call(1, "main", 0x10, "a"), call(1, "a", 0x10, "b"), call(1, "b", 0x10, "c"), call(1, "c", 0x10, "d"))
	b, _ := os.ReadFile(p)
	os.WriteFile(p, b[:len(b)-20], 0o644)
	f, err := Build(context.Background(), []string{p}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(f.Warnings) != 1 || f.Merged.Stats.Calls != 3 {
		t.Errorf("cut trace: warnings %q, %d calls; want 1 warning, 3 calls", f.Warnings, f.Merged.Stats.Calls)
	}
}

func FuzzRead(f *testing.F) {
	var buf bytes.Buffer
	fr := build(f, Options{PerThread: true}, true, call(1, "main", 0x10, "a"), call(2, "a", 0x10, "b"), call(1, "a", 0x20, "b"))
	Write(&buf, fr)
	f.Add(buf.Bytes())
	f.Add([]byte(`{"format":"stint-cct","version":1,"trees":[{"run":-1,"nodes":[{"id":0,"parent":-1,"module":-1,"entry":"0x0"}]}]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		fo, err := Read(bytes.NewReader(b))
		if err != nil {
			return
		}
		if err := fo.Merged.CheckValid(); err != nil {
			t.Fatalf("Read returned an invalid tree: %v", err)
		}
		var out bytes.Buffer
		if err := Write(&out, fo); err != nil {
			t.Fatal(err)
		}
		Compare(fo.Merged, fo.Merged, 3)
	})
}

func TestFrameStarts(t *testing.T) {
	// A stripped copy of a program: no symbols, but .eh_frame_hdr.
	bin := "/usr/bin/gzip"
	if _, err := os.Stat(bin); err != nil {
		t.Skip("no /usr/bin/gzip")
	}
	starts, err := ehFrameStarts(bin)
	if err != nil {
		t.Fatal(err)
	}
	if len(starts) < 50 || !slices.IsSorted(starts) {
		t.Fatalf("%d starts in gzip's eh_frame_hdr", len(starts))
	}
	tb, err := WithFrameStarts(nil).Table("", bin)
	if err != nil || tb == nil {
		t.Fatal(err)
	}
	f := tb.Lookup(starts[3] + 1)
	if f == nil || f.Start != starts[3] || f.End != starts[4] {
		t.Errorf("lookup inside the 4th function: %+v, want [%#x, %#x)", f, starts[3], starts[4])
	}
	// A table from the inner source keeps its names.
	named := WithFrameStarts(demoSyms{})
	if tb, _ := named.Table(demo.BuildID, "/nonexistent/demo"); tb == nil || tb.Lookup(fnAt["a"]).Name != "a" {
		t.Error("inner table lost")
	}
}

// TestTimes: a context's time runs from the call that entered it to the
// return that left it (or the thread's last event), callees included;
// self time leaves them out, and the file keeps it.
func TestTimes(t *testing.T) {
	at := func(e formats.Event, ns uint64) formats.Event { e.Time = ns; return e }
	ev := []formats.Event{
		at(call(1, "main", 0x10, "a"), 100),
		at(call(1, "a", 0x10, "b"), 110),
		at(ret(1, "b", "a", 0x10), 130),
		at(call(1, "a", 0x20, "b"), 140),
		at(ret(1, "b", "a", 0x20), 145),
		at(ret(1, "a", "main", 0x10), 200),
		at(call(1, "main", 0x30, "c"), 300),
		at(call(1, "c", 0x10, "d"), 310),
		// thread 2 runs b, which calls c, which never returns
		at(call(2, "main", 0x10, "b"), 1000),
		at(call(2, "b", 0x10, "c"), 1010),
		at(ret(1, "d", "c", 0x10), 340), // thread 1 ends in c
		at(call(2, "c", 0x20, "d"), 1100),
		at(ret(2, "d", "c", 0x20), 1400),
	}
	f := build(t, Options{}, true, ev...)
	want := map[string][2]uint64{ // inclusive, self
		"main/a": {100, 75}, "main/a/b": {25, 25}, "main/c": {40, 10}, "main/c/d": {30, 30},
		"main/b": {400, 10}, "main/b/c": {390, 90}, "main/b/c/d": {300, 300},
	}
	check := func(tr *Tree) {
		seen := 0
		tr.Walk(func(n *Node) bool {
			if n.Parent == nil {
				return true
			}
			path := ""
			for p := n; p.Parent != nil; p = p.Parent {
				for name, e := range fnAt {
					if e == p.Entry {
						path = "/" + name + path
					}
				}
			}
			path = "main" + path
			w, ok := want[path]
			if !ok {
				t.Errorf("context %s", path)
			} else if n.NS != w[0] || n.SelfNS() != w[1] {
				t.Errorf("%s: %d ns, %d self; want %d and %d", path, n.NS, n.SelfNS(), w[0], w[1])
			}
			seen++
			return true
		})
		if seen != len(want) {
			t.Errorf("%d contexts, want %d", seen, len(want))
		}
	}
	check(f.Merged)
	var buf bytes.Buffer
	if err := Write(&buf, f); err != nil {
		t.Fatal(err)
	}
	g, err := Read(&buf)
	if err != nil {
		t.Fatal(err)
	}
	check(g.Merged)
}

// TestFuncTimes: a function's self times add up over its contexts, and
// its time counts a recursion once.
func TestFuncTimes(t *testing.T) {
	at := func(e formats.Event, ns uint64) formats.Event { e.Time = ns; return e }
	ev := []formats.Event{
		at(call(1, "main", 0x10, "a"), 0),
		at(call(1, "a", 0x10, "a"), 10), // a calls itself
		at(call(1, "a", 0x20, "b"), 20),
		at(ret(1, "b", "a", 0x20), 50),
		at(ret(1, "a", "a", 0x10), 60),
		at(ret(1, "a", "main", 0x10), 100),
		at(call(1, "main", 0x20, "b"), 200),
		at(ret(1, "b", "main", 0x20), 210),
	}
	f := build(t, Options{}, true, ev...)
	got := map[uint64]FuncTime{}
	for _, ft := range f.Merged.FuncTimes() {
		got[ft.Entry] = ft
	}
	// a: 100 in all (50 of them in its recursive call), of which 30 in b;
	// b: 30 under a, 10 under main
	if a := got[fnAt["a"]]; a.NS != 100 || a.SelfNS != 70 || a.Calls != 2 {
		t.Errorf("a: %+v, want 100 ns, 70 self, 2 calls", a)
	}
	if b := got[fnAt["b"]]; b.NS != 40 || b.SelfNS != 40 || b.Calls != 2 {
		t.Errorf("b: %+v, want 40 ns, 40 self, 2 calls", b)
	}
	if fts := f.Merged.FuncTimes(); len(fts) != 2 || fts[0].Entry != fnAt["a"] {
		t.Errorf("order %+v, want a (most self time) first", fts)
	}
}
