package e2e

import (
	"bytes"
	"path/filepath"
	"testing"

	"github.com/stint-project/stint/analysis/symbols"
	"github.com/stint-project/stint/formats"
	"github.com/stint-project/stint/internal/fixtures"
	"github.com/stint-project/stint/rewrite"
)

// ctxNode is one KindContext row.
type ctxNode struct {
	id, parent uint32
	callee     string
	depth      int
}

// contexts reads the context rows of a trace, checking that they form a
// tree: ids unique and nonzero, each parent 0 (a thread's root) or a
// context written earlier in the same file.
func contexts(t *testing.T, tr *formats.Trace, syms *symbols.Table) map[uint32]*ctxNode {
	t.Helper()
	nodes := map[uint32]*ctxNode{}
	for _, e := range tr.Events {
		if e.Kind != formats.KindContext {
			continue
		}
		id, parent := uint32(e.Value), uint32(e.Value>>32)
		if id == 0 || nodes[id] != nil {
			t.Fatalf("context id %d is zero or written twice", id)
		}
		n := &ctxNode{id: id, parent: parent, depth: 1}
		if parent != 0 {
			p := nodes[parent]
			if p == nil {
				t.Fatalf("context %d: parent %d not written before it", id, parent)
			}
			n.depth = p.depth + 1
		}
		if f := syms.Lookup(e.Dst); f != nil && e.DstModule == e.SrcModule {
			n.callee = f.Name
		}
		nodes[id] = n
	}
	return nodes
}

// TestContextMode: rewrite --tool call --context on fixtures whose call
// sequences a plain call trace cannot put back together. The program
// behaves as natively, and its contexts form the tree its stack had:
// setjmp's five longjmps out of deep(3*k) leave one chain of 16 deep
// frames (main -> deep(15) -> ... -> deep(0)), not the 45 a shadow stack
// that ignored the jumps would nest; recurse's 5000-deep recursion is a
// single chain (as deep as the shadow stack goes).
func TestContextMode(t *testing.T) {
	for _, tc := range []struct {
		fixture, fn string
		args        []string
		wantDepth   int // deepest chain of fn contexts; 0 = at least minDepth
		minDepth    int
		budget      string
		opt         fixtures.Opt
	}{
		{"setjmp", "deep", nil, 16, 0, "", fixtures.O2},
		{"setjmp", "deep", nil, 16, 0, "10%", fixtures.O2},
		{"recurse", "down", nil, 0, 4000, "", fixtures.O0}, // at -O2 gcc turns down's recursion into a loop
		// behaviour and a well-formed tree only: threads (a shadow
		// stack each), C++ exceptions (unwinding), signal handlers
		{"threads", "", nil, 0, 0, "", fixtures.O2},
		{"except", "", nil, 0, 0, "", fixtures.O2},
		{"signals", "", nil, 0, 0, "10%", fixtures.O2},
	} {
		t.Run(tc.fixture+"/"+tc.budget, func(t *testing.T) {
			bin := fixtures.Build(t, tc.fixture, fixtures.Variant{Opt: tc.opt, PIE: true})
			nOut, _, nCode, err := fixtures.Run(bin, tc.args, nil)
			if err != nil {
				t.Fatal(err)
			}
			dir := t.TempDir()
			out, _ := rewritten(t, bin, dir, rewrite.Options{Tool: rewrite.ToolCall, Context: true, Budget: tc.budget})
			traces := filepath.Join(dir, "traces")
			rOut, rErr, code, err := fixtures.Run(out, tc.args, traceEnv(traces))
			if err != nil {
				t.Fatal(err)
			}
			if code != nCode || !bytes.Equal(rOut, nOut) || len(rErr) != 0 {
				t.Fatalf("exit %d (native %d), stdout %q (native %q), stderr %q", code, nCode, rOut, nOut, rErr)
			}
			syms, err := symbols.Load(bin)
			if err != nil {
				t.Fatal(err)
			}
			trs := readTraces(t, traces)
			if len(trs) != 1 {
				t.Fatalf("%d traces, want 1", len(trs))
			}
			nodes := contexts(t, trs[0], syms)
			if tc.fn == "" {
				t.Logf("%d contexts", len(nodes))
				return
			}
			deepest, n, children := 0, 0, map[uint32]int{}
			for _, c := range nodes {
				if c.callee != tc.fn {
					continue
				}
				n++
				deepest = max(deepest, c.depth)
				if p := nodes[c.parent]; p != nil && p.callee == tc.fn {
					children[c.parent]++
				}
			}
			for id, k := range children {
				if k != 1 {
					t.Errorf("context %d (%s) has %d %s children, want a single chain", id, tc.fn, k, tc.fn)
				}
			}
			// main is called from libc (not probed), so its calls sit
			// under _start's call of __libc_start_main: one level more.
			if tc.wantDepth != 0 && (deepest != tc.wantDepth+1 || n != tc.wantDepth) {
				t.Errorf("%d %s contexts, deepest at depth %d; want %d in one chain below __libc_start_main's context", n, tc.fn, deepest, tc.wantDepth)
			}
			if deepest < tc.minDepth {
				t.Errorf("deepest %s context at depth %d, want at least %d", tc.fn, deepest, tc.minDepth)
			}
			t.Logf("%d contexts, %d of %s, deepest %d", len(nodes), n, tc.fn, deepest)
		})
	}
}
