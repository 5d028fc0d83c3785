package main

import (
	"bytes"
	"context"
	"image/color"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stint-project/stint/analysis/report"
	"github.com/stint-project/stint/analysis/report/browsertest"
	"github.com/stint-project/stint/formats"
	"github.com/stint-project/stint/internal/cli"
	"github.com/stint-project/stint/internal/fixtures"
	"github.com/stint-project/stint/rewrite"
	"golang.org/x/net/html"
)

// writeTrace writes a small trace: n distinct jcc events from offset lo,
// and, with periods, one budget period per 4 events.
func writeTrace(t *testing.T, path string, lo, n int, periods bool) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	run := formats.Run{Binary: "/opt/x/prog", BuildID: "feed", Tool: "branch", PID: 9, MonoStartNS: 1000}
	if periods {
		run.BudgetNS, run.PeriodNS = 100, 1000
	}
	w, err := formats.NewWriter(f, run, []formats.Module{{ID: 0, Path: "/opt/x/prog", BuildID: "feed", Rewritten: true}})
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		w.Write(formats.Event{Kind: formats.KindJccTaken, Time: uint64(1000 + 10*i), Src: uint64(0x1000 + 16*(lo+i)), Dst: 0x2000})
		if periods && i%4 == 0 {
			w.Write(formats.Event{Kind: formats.KindPeriod, Time: uint64(1000 + 10*i), Src: uint64(i / 4), Dst: 100, Value: uint64(95 + 2*i), SrcModule: formats.NoModule, DstModule: formats.NoModule})
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
}

func runCmd(args ...string) (stdout, stderr string, code int) {
	var o, e bytes.Buffer
	err := run(context.Background(), args, &o, &e)
	if err != nil {
		e.WriteString(err.Error())
	}
	return o.String(), e.String(), cli.ExitCode(err)
}

func TestUsage(t *testing.T) {
	dir := t.TempDir()
	tr := filepath.Join(dir, "a.arrow")
	writeTrace(t, tr, 0, 4, false)
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{nil, 2, "no command"},
		{[]string{"bogus"}, 2, "unknown command"},
		{[]string{"--help"}, 0, "report auto"},
		{[]string{"help", "render"}, 0, "```stint cov compare"},
		{[]string{"help", "nope"}, 2, "unknown command"},
		{[]string{"auto", "--help"}, 0, "Usage: report auto"},
		{[]string{"auto", tr}, 2, "no output file"},
		{[]string{"auto", "-o", filepath.Join(dir, "x.html")}, 2, "no traces"},
		{[]string{"auto", "--native", "-1", "-o", "x.html", tr}, 2, "--native"},
		{[]string{"auto", "--functions", "0", "-o", "x.html", tr}, 2, "--functions"},
		{[]string{"auto", "--bogus", "-o", "x.html", tr}, 2, "unknown flag"},
		{[]string{"auto", "-o", filepath.Join(dir, "x.html"), filepath.Join(dir, "missing.arrow")}, 1, "missing.arrow"},
		{[]string{"render", "-o", "x.html"}, 2, "want one NOTEBOOK"},
		{[]string{"render", "nb.md"}, 2, "no output file"},
		{[]string{"render", "-o", filepath.Join(dir, "x.html"), filepath.Join(dir, "nb.md")}, 1, "nb.md"},
	} {
		o, e, code := runCmd(tc.args...)
		if code != tc.code || !strings.Contains(o+e, tc.want) {
			t.Errorf("report %q: have exit %d, output %q; want exit %d and %q", tc.args, code, o+e, tc.code, tc.want)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "x.html")); err == nil {
		t.Error("a failed command left x.html")
	}
}

func TestAutoCommand(t *testing.T) {
	dir := t.TempDir()
	a, b, full := filepath.Join(dir, "a.arrow"), filepath.Join(dir, "b.arrow"), filepath.Join(dir, "full.arrow")
	writeTrace(t, a, 0, 8, true)
	writeTrace(t, b, 4, 8, true)
	writeTrace(t, full, 0, 16, false)
	out := filepath.Join(dir, "r.html")
	o, e, code := runCmd("auto", "--full", full, "--title", "My report", "-o", out, a, b)
	if code != 0 {
		t.Fatalf("exit %d: %s %s", code, o, e)
	}
	if !strings.Contains(o, "r.html: 2 trace files") || e != "" {
		t.Errorf("stdout %q, stderr %q (stderr is no terminal: no progress)", o, e)
	}
	page, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	doc, err := html.Parse(bytes.NewReader(page))
	if err != nil {
		t.Fatal(err)
	}
	var title string
	var svgs int
	var walk func(*html.Node)
	walk = func(n *html.Node) {
		if n.Type == html.ElementNode && n.Data == "title" && n.FirstChild != nil {
			title = n.FirstChild.Data
		}
		if n.Type == html.ElementNode && n.Data == "svg" {
			svgs++
		}
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			walk(c)
		}
	}
	walk(doc)
	// coverage, two budget figures, the overshoot histogram
	if title != "My report" || svgs != 4 {
		t.Errorf("title %q and %d figures, want \"My report\" and 4", title, svgs)
	}
	// 12 of 16 events after both runs.
	if !strings.Contains(string(page), "75.0%") {
		t.Error("page lacks the coverage 75.0%")
	}
	// To standard output.
	o, _, code = runCmd("auto", "-o", "-", a)
	if code != 0 || !strings.HasPrefix(o, "<!DOCTYPE html>") {
		t.Errorf("auto -o -: exit %d, output starts %q", code, o[:min(len(o), 40)])
	}
}

func TestRenderCommand(t *testing.T) {
	dir := t.TempDir()
	writeTrace(t, filepath.Join(dir, "a.arrow"), 0, 8, true)
	writeTrace(t, filepath.Join(dir, "full.arrow"), 0, 16, false)
	nb := filepath.Join(dir, "nb.md")
	os.WriteFile(nb, []byte("# Notes\n\n```stint cov compare a.arrow full.arrow\n```\n\n```stint plot budget a.arrow\n```\n"), 0o644)
	out := filepath.Join(dir, "nb.html")
	if o, e, code := runCmd("render", "-o", out, nb); code != 0 {
		t.Fatalf("exit %d: %s %s", code, o, e)
	}
	page, _ := os.ReadFile(out)
	if !strings.Contains(string(page), "<title>Notes</title>") || !strings.Contains(string(page), "50.0%") {
		t.Errorf("page lacks its title or the coverage 50.0%%")
	}

	// A failing cell: the page is written, with the error, and exit 1.
	os.WriteFile(nb, []byte("```stint plot budget nothing*.arrow\n```\n\nafter\n"), 0o644)
	_, e, code := runCmd("render", "-o", out, nb)
	if code != 1 || !strings.Contains(e, "1 cell failed") || !strings.Contains(e, "line 1") {
		t.Errorf("exit %d, stderr %q; want 1 and the failed cell", code, e)
	}
	page, _ = os.ReadFile(out)
	if !strings.Contains(string(page), "matches no file") || !strings.Contains(string(page), "after") {
		t.Errorf("the page does not show the cell's error and the rest")
	}
}

// TestRealRun: a rewritten fixture run under a budget, twice, and once
// without (the full run); the report shows its periods and names its
// functions, and Chromium renders it.
func TestRealRun(t *testing.T) {
	if testing.Short() {
		t.Skip("builds, rewrites and runs a fixture")
	}
	bin := fixtures.Build(t, "spin", fixtures.Variant{Opt: fixtures.O2, PIE: true})
	dir := t.TempDir()
	out := filepath.Join(dir, "spin")
	if _, err := rewrite.RewriteFile(bin, out, rewrite.Options{Budget: "10%", Period: "20ms"}); err != nil {
		t.Fatal(err)
	}
	env := func(traces string, extra ...string) []string {
		e := []string{"STINT_OUT=" + traces}
		for _, kv := range os.Environ() {
			if !strings.HasPrefix(kv, "STINT_") {
				e = append(e, kv)
			}
		}
		return append(e, extra...)
	}
	var traces []string
	for i, extra := range [][]string{{"STINT_BUDGET=none"}, nil, nil} {
		d := filepath.Join(dir, "t"+string(rune('0'+i)))
		_, stderr, code, err := fixtures.Run(out, []string{"200"}, env(d, extra...))
		if err != nil || code != 0 {
			t.Fatalf("run %d: exit %d, %v, %s", i, code, err, stderr)
		}
		m, _ := filepath.Glob(filepath.Join(d, "*.arrow"))
		if len(m) != 1 {
			t.Fatalf("run %d: %d traces", i, len(m))
		}
		traces = append(traces, m[0])
	}
	doc, err := report.Auto(context.Background(), traces[1:], report.AutoOptions{Full: traces[0]})
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := doc.WriteHTML(&b); err != nil {
		t.Fatal(err)
	}
	page := b.String()
	for _, s := range []string{`id="fig-coverage"`, `id="fig-budget-1"`, `id="fig-budget-2"`, "Periods per run", "run-end record"} {
		if !strings.Contains(page, s) {
			t.Errorf("page lacks %q", s)
		}
	}
	// spin has symbols: the least covered functions have names.
	var named bool
	for _, s := range doc.Sections {
		if s.ID != "functions" {
			continue
		}
		for _, bl := range s.Blocks {
			if tb, ok := bl.(*report.Table); ok {
				for _, r := range tb.Rows {
					named = named || !strings.HasPrefix(r[0].Text, "0x")
				}
			}
		}
	}
	if !named {
		t.Error("no function of the fixture is named in the least-covered table")
	}
	file := filepath.Join(dir, "report.html")
	os.WriteFile(file, b.Bytes(), 0o644)
	browsertest.Check(t, file, 1100, 4000, 200, map[string]color.RGBA{"blue": report.Palette[0], "orange": report.Palette[1]})
}
