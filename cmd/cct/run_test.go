package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stint-project/stint/analysis/cct"
	"github.com/stint-project/stint/formats"
	"github.com/stint-project/stint/internal/cli"
	"github.com/stint-project/stint/internal/fixtures"
	"github.com/stint-project/stint/rewrite"
)

func runCmd(args ...string) (string, string, error) {
	var out, errb bytes.Buffer
	err := run(context.Background(), args, &out, &errb)
	return out.String(), errb.String(), err
}

var demo = formats.Module{ID: 0, Path: "/nonexistent/demo", BuildID: "d00d", Rewritten: true}

func writeTrace(t *testing.T, dir, name string, events ...formats.Event) string {
	t.Helper()
	var buf bytes.Buffer
	w, err := formats.NewWriter(&buf, formats.Run{Binary: demo.Path, BuildID: demo.BuildID, Tool: "call", Options: "tool=call every=1"}, []formats.Module{demo})
	if err != nil {
		t.Fatal(err)
	}
	w.Write(events...)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func ev(k formats.Kind, src, dst uint64) formats.Event {
	return formats.Event{Kind: k, TID: 1, Src: src, Dst: dst}
}

func TestUsage(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.arrow")
	os.WriteFile(bad, []byte("junk"), 0o644)
	tests := []struct {
		args []string
		code int
		want string
	}{
		{nil, cli.ExitUsage, "no command"},
		{[]string{"frob"}, cli.ExitUsage, "unknown command"},
		{[]string{"build"}, cli.ExitUsage, "no traces"},
		{[]string{"build", "--max-depth", "0", bad}, cli.ExitUsage, "max-depth"},
		{[]string{"build", "--bogus", bad}, cli.ExitUsage, "unknown flag"},
		{[]string{"compare", bad}, cli.ExitUsage, "two trees"},
		{[]string{"build", bad}, cli.ExitError, "bad.arrow"},
		{[]string{"build", filepath.Join(dir, "missing.arrow")}, cli.ExitError, "missing.arrow"},
		{[]string{"compare", bad, bad}, cli.ExitError, "bad.arrow"},
		{[]string{"help", "frob"}, cli.ExitUsage, "unknown command"},
	}
	for _, tt := range tests {
		_, _, err := runCmd(tt.args...)
		if code := cli.ExitCode(err); code != tt.code || err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%q: exit %d, error %v; want exit %d and an error containing %q", tt.args, code, err, tt.code, tt.want)
		}
	}
	for _, args := range [][]string{{"--help"}, {"help", "build"}, {"build", "--help"}, {"compare", "-h"}} {
		out, _, err := runCmd(args...)
		if err != nil || !strings.Contains(out, "Usage") {
			t.Errorf("%q: %v, output %q", args, err, out)
		}
	}
	// A cct file that is JSON but damaged.
	badJSON := filepath.Join(dir, "bad.json")
	os.WriteFile(badJSON, []byte(`{"format":"stint-cct","version":1,"trees":[{"run":-1,"nodes":[{"id":3}]}]}`), 0o644)
	if _, _, err := runCmd("compare", badJSON, badJSON); cli.ExitCode(err) != cli.ExitError || !strings.Contains(err.Error(), "node 0") {
		t.Errorf("damaged cct file: %v", err)
	}
}

func TestBuildAndCompare(t *testing.T) {
	dir := t.TempDir()
	// main(0x1000) calls a(0x1100) from two sites; a calls b(0x1200).
	full := writeTrace(t, dir, "full.arrow",
		ev(formats.KindCall, 0x1010, 0x1100), ev(formats.KindCall, 0x1110, 0x1200), ev(formats.KindRet, 0x12f0, 0x1115),
		ev(formats.KindRet, 0x11f0, 0x1015), ev(formats.KindCall, 0x1020, 0x1100), ev(formats.KindRet, 0x11f0, 0x1025))
	part := writeTrace(t, dir, "part.arrow", ev(formats.KindCall, 0x1010, 0x1100), ev(formats.KindRet, 0x11f0, 0x1015))
	file := filepath.Join(dir, "full.cct.json")
	out, _, err := runCmd("build", "-o", file, full)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"calls     3", "3 matched, 0 unmatched", "2 contexts, 3 edges", "written   " + file} {
		if !strings.Contains(out, want) {
			t.Errorf("build output lacks %q:\n%s", want, out)
		}
	}
	fh, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	f, err := cct.Read(fh)
	fh.Close()
	if err != nil {
		t.Fatal(err)
	}
	if n := f.Merged.Find("demo+0x1100", "demo+0x1200"); n == nil || n.Calls != 1 {
		t.Errorf("file's tree lacks a > b: %v", n)
	}
	out, _, err = runCmd("compare", part, file)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "nodes  2          1         1       0      50.0%") || !strings.Contains(out, "edges  3          1         1       0      33.3%") {
		t.Errorf("compare output:\n%s", out)
	}
	out, _, err = runCmd("compare", "--json", file, full)
	if err != nil {
		t.Fatal(err)
	}
	var c cct.Comparison
	if err := json.Unmarshal([]byte(out), &c); err != nil {
		t.Fatal(err)
	}
	if c.Nodes.Coverage != 1 || c.Edges.Coverage != 1 || c.Nodes.Reference != 2 {
		t.Errorf("tree against its own trace: %+v", c)
	}
	out, _, err = runCmd("build", "--json", "--per-thread", full)
	if err != nil {
		t.Fatal(err)
	}
	if g, err := cct.Read(strings.NewReader(out)); err != nil || len(g.Threads) != 1 {
		t.Errorf("--json --per-thread: %v", err)
	}
}

// traceFixture rewrites a fixture with the call tool, runs it and
// returns its trace files.
func traceFixture(t *testing.T, name string, v fixtures.Variant, every bool) []string {
	t.Helper()
	return traceFixtureOpts(t, name, v, rewrite.Options{Tool: rewrite.ToolCall, Every: every})
}

func traceFixtureOpts(t *testing.T, name string, v fixtures.Variant, opts rewrite.Options) []string {
	t.Helper()
	bin := fixtures.Build(t, name, v)
	dir := t.TempDir()
	out := filepath.Join(dir, filepath.Base(bin))
	if _, err := rewrite.RewriteFile(bin, out, opts); err != nil {
		t.Fatalf("rewrite %s: %v", bin, err)
	}
	traces := filepath.Join(dir, "traces")
	env := []string{"STINT_OUT=" + traces}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "STINT_") {
			env = append(env, kv)
		}
	}
	_, _, code, err := fixtures.Run(out, nil, env)
	if err != nil || code != 0 {
		t.Fatalf("run %s: exit %d, %v", out, code, err)
	}
	files, _ := filepath.Glob(filepath.Join(traces, "*.arrow"))
	if len(files) == 0 {
		t.Fatal("no trace written")
	}
	return files
}

func buildFile(t *testing.T, files []string) *cct.Forest {
	t.Helper()
	p := filepath.Join(t.TempDir(), "t.json")
	if _, _, err := runCmd(append([]string{"build", "-o", p}, files...)...); err != nil {
		t.Fatal(err)
	}
	fh, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	f, err := cct.Read(fh)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// chain returns name repeated n times.
func chain(name string, n int) []string {
	s := make([]string, n)
	for i := range s {
		s[i] = name
	}
	return s
}

func TestFixtureTrees(t *testing.T) {
	pie := fixtures.Variant{Opt: fixtures.O0, PIE: true}
	t.Run("recurse", func(t *testing.T) {
		f := buildFile(t, traceFixture(t, "recurse", pie, true))
		tr := f.Merged
		// down recurses 5000 times below the 5001st call: main is
		// called by libc (not traced), so it is an inferred frame.
		main := tr.Find("_start", "__libc_start_main", "main")
		if main == nil || main.Inferred == 0 {
			t.Fatalf("no inferred main under _start > __libc_start_main:\n%v", top(tr))
		}
		deepest := tr.Find(append([]string{"_start", "__libc_start_main", "main"}, chain("down", 5001)...)...)
		if deepest == nil || deepest.Calls != 1 || len(deepest.Children) != 0 {
			t.Errorf("main > down x5001 missing or wrong: %+v", deepest)
		}
		if tr.Find("_start", "__libc_start_main", "main", "ack", "ack", "ack") == nil {
			t.Error("main > ack > ack > ack missing")
		}
		if s := tr.Stats; s.Matched < 5001 || s.MaxDepth < 5003 {
			t.Errorf("stats %+v: want at least 5001 matched returns and a stack 5003 deep", s)
		}
	})
	t.Run("setjmp", func(t *testing.T) {
		f := buildFile(t, traceFixture(t, "setjmp", fixtures.Variant{Opt: fixtures.O2, PIE: true}, true))
		tr := f.Merged
		// deep(count*3) for count 1..5 recurses 3, 6, …, 15 levels
		// and longjmps back to main: every call of deep from main
		// is a new call at depth 1, because the repair pops the
		// frames longjmp left.
		d := tr.Find("_start", "__libc_start_main", "main", "deep")
		if d == nil || d.Calls != 5 {
			t.Fatalf("main > deep: %+v, want 5 calls\n%v", d, top(tr))
		}
		if n := tr.Find(append([]string{"_start", "__libc_start_main", "main"}, chain("deep", 16)...)...); n == nil || n.Calls != 1 {
			t.Errorf("main > deep x16: %+v, want 1 call", n)
		}
		if tr.Stats.Repaired == 0 {
			t.Errorf("no frames repaired after longjmp: %+v", tr.Stats)
		}
	})
	t.Run("setjmp-context-mode", func(t *testing.T) {
		v := fixtures.Variant{Opt: fixtures.O2, PIE: true}
		files := traceFixtureOpts(t, "setjmp", v, rewrite.Options{Tool: rewrite.ToolCall, Context: true})
		f := buildFile(t, files)
		if !f.ContextMode() || f.Merged.Stats.Contexts == 0 {
			t.Fatalf("not read as a context-mode trace: %+v", f.Merged.Stats)
		}
		// The runtime's stacks are exact: one chain of 16 deep frames.
		below := f.Merged.Reroot("main")
		if below == nil || below.Find(chain("deep", 16)...) == nil || below.Find(chain("deep", 17)...) != nil {
			t.Fatalf("main > deep: want one chain of 16:\n%v", top(f.Merged))
		}
		// The same contexts as the call/ret tree of an --every run,
		// compared below main.
		every := buildFile(t, traceFixture(t, "setjmp", v, true)).Merged.Reroot("main")
		c := cct.Compare(below, every, 5)
		deepNodes := 0
		every.Walk(func(n *cct.Node) bool {
			if every.FuncName(n) == "deep" {
				deepNodes++
			}
			return true
		})
		if deepNodes != 16 || c.Nodes.Common < deepNodes {
			t.Errorf("context tree has %d of the --every tree's %d nodes (%d deep); missing %+v", c.Nodes.Common, c.Nodes.Reference, deepNodes, c.Missing)
		}
	})
	t.Run("recurse-default-mode", func(t *testing.T) {
		f := buildFile(t, traceFixture(t, "recurse", pie, false))
		if f.Every() {
			t.Error("default-mode trace read as --every")
		}
		// Each (site, destination) once: down's recursive call is
		// recorded once, so the tree holds main > down > down.
		if f.Merged.Find("_start", "__libc_start_main", "main", "down", "down") == nil {
			t.Errorf("main > down > down missing:\n%v", top(f.Merged))
		}
	})
	t.Run("except", func(t *testing.T) {
		if testing.Short() {
			t.Skip("C++ fixture: slow to build and run; skipped under -short")
		}
		f := buildFile(t, traceFixture(t, "except", fixtures.Variant{Opt: fixtures.O2, PIE: true}, true))
		tr := f.Merged
		// thrower recurses 3 levels below middle for each of 3 rounds,
		// two of which end in a throw through the frames.
		n := tr.Find("_start", "__libc_start_main", "main", "middle(int)", "thrower(int, int)", "thrower(int, int)", "thrower(int, int)", "thrower(int, int)")
		if n == nil || n.Calls != 3 {
			t.Errorf("main > middle > thrower x4: %+v, want 3 calls\n%v", n, top(tr))
		}
	})
}

func top(t *cct.Tree) string {
	var b strings.Builder
	t.Walk(func(n *cct.Node) bool {
		d := n.Depth()
		if d > 5 {
			return false
		}
		b.WriteString(strings.Repeat("  ", d) + t.FuncName(n) + "\n")
		return true
	})
	return b.String()
}

// TestBuildSelfTimes: the summary of an --every --rows call trace lists
// the functions by self time; a compact trace's, whose events carry no
// time of their own, does not.
func TestBuildSelfTimes(t *testing.T) {
	pie := fixtures.Variant{Opt: fixtures.O2, PIE: true}
	rows := traceFixtureOpts(t, "recurse", pie, rewrite.Options{Tool: rewrite.ToolCall, Every: true, Rows: true})
	out, _, err := runCmd(append([]string{"build", "--top", "5"}, rows...)...)
	if err != nil {
		t.Fatal(err)
	}
	i := strings.Index(out, "functions by self time")
	if i < 0 {
		t.Fatalf("no self times for a row trace:\n%s", out)
	}
	if list := out[i:]; !strings.Contains(list, "down") || strings.Count(list[:strings.Index(list, "\n\n")], "\n") > 7 {
		t.Errorf("self times: want down among at most 5 functions:\n%s", list)
	}
	compact := traceFixtureOpts(t, "recurse", pie, rewrite.Options{Tool: rewrite.ToolCall, Every: true})
	out, _, err = runCmd(append([]string{"build"}, compact...)...)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out, "functions by self time") {
		t.Errorf("self times for a compact trace:\n%s", out)
	}
}
