package report

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stint-project/stint/analysis/cct"
	"github.com/stint-project/stint/analysis/report/browsertest"
	"github.com/stint-project/stint/formats"
)

// TestAutoFlame: a call trace's report has a flame graph whose
// contexts are as wide as the calls made in them and beneath them, and
// the page loads in Chromium without a console message (its script
// parses and runs).
func TestAutoFlame(t *testing.T) {
	dir := t.TempDir()
	run := synthRun(5, false)
	run.Tool, run.Options = "call", "tool=call every=1"
	ev := func(k formats.Kind, tm, src, dst uint64) formats.Event {
		return formats.Event{Kind: k, TID: 1, Time: tm, Src: src, Dst: dst}
	}
	// main (0x1000) calls f (0x2000) three times, and f calls g
	// (0x3000) once in each; main calls h (0x4000) once: 7 calls.
	var rows []formats.Event
	tm := uint64(1)
	add := func(k formats.Kind, src, dst uint64) { rows = append(rows, ev(k, tm, src, dst)); tm++ }
	for range 3 {
		add(formats.KindCall, 0x1010, 0x2000)
		add(formats.KindCall, 0x2010, 0x3000)
		add(formats.KindRet, 0x3010, 0x2015)
		add(formats.KindRet, 0x2020, 0x1015)
	}
	add(formats.KindCall, 0x1030, 0x4000)
	add(formats.KindRet, 0x4010, 0x1035)
	tr := filepath.Join(dir, "calls.arrow")
	writeSynth(t, tr, run, rows)
	d, err := Auto(context.Background(), []string{tr}, AutoOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := d.WriteHTML(&b); err != nil {
		t.Fatal(err)
	}
	page := b.String()
	if !strings.Contains(page, "<h2 id=\"flame\"") && !strings.Contains(page, "Where calls go") {
		t.Fatalf("no flame graph section")
	}
	// each context's title: name, calls in it and beneath it, share
	want := map[string]int{"all": 7, "demo+0x2000": 6, "demo+0x3000": 3, "demo+0x4000": 1}
	re := regexp.MustCompile(`<title>([^:<]+): (\d+) calls in this context and beneath it`)
	got := map[string]int{}
	for _, m := range re.FindAllStringSubmatch(page, -1) {
		n, _ := strconv.Atoi(m[2])
		got[m[1]] += n
	}
	for name, n := range want {
		if got[name] != n {
			t.Errorf("context %s: %d calls in and beneath it, want %d (all: %v)", name, got[name], n, got)
		}
	}
	// f's rectangle is 6/7 of the width, under the root's
	if !regexp.MustCompile(`data-w="857\.14\d*" data-d="\d"><title>demo\+0x2000`).MatchString(page) {
		t.Errorf("f's rectangle is not 6/7 of the chart's width")
	}
	out := filepath.Join(dir, "report.html")
	if err := os.WriteFile(out, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	browsertest.Check(t, out, 1100, 3000, 0, nil)
}

// TestFlameLabel: names are cut to fit their rectangle, or left out.
func TestFlameLabel(t *testing.T) {
	for _, tc := range []struct {
		name string
		w    float64
		want string
	}{{"main", 100, "main"}, {"a_long_function_name", 60, "a_long.."}, {"main", 10, ""}} {
		if got := flameLabel(tc.name, tc.w); got != tc.want {
			t.Errorf("flameLabel(%q, %v) = %q, want %q", tc.name, tc.w, got, tc.want)
		}
	}
}

// TestLoaderTreeMatchesBuild: the call-context tree the loader builds
// as it reads (report auto's one pass) is cct.Build's over the same
// files: two call traces, the second cut inside a batch.
func TestLoaderTreeMatchesBuild(t *testing.T) {
	dir := t.TempDir()
	run := synthRun(6, false)
	run.Tool, run.Options = "call", "tool=call every=1"
	var files []string
	for f := range 2 {
		var rows []formats.Event
		for i := range 3000 {
			callee := 0x2000 + uint64(i%7+f)*0x100
			rows = append(rows, formats.Event{Kind: formats.KindCall, TID: 1, Time: uint64(2 * i), Src: 0x1010, Dst: callee},
				formats.Event{Kind: formats.KindRet, TID: 1, Time: uint64(2*i + 1), Src: callee + 0x10, Dst: 0x1015})
		}
		p := filepath.Join(dir, "calls"+strconv.Itoa(f)+".arrow")
		writeSynth(t, p, run, rows)
		files = append(files, p)
	}
	b, err := os.ReadFile(files[1])
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(files[1], b[:len(b)-200], 0o644); err != nil {
		t.Fatal(err)
	}
	want, err := cct.Build(context.Background(), files, cct.Options{})
	if err != nil {
		t.Fatal(err)
	}
	l := NewLoader()
	l.Tree = cct.NewBuilder(cct.Options{})
	if _, err := l.LoadFiles(context.Background(), files); err != nil {
		t.Fatal(err)
	}
	got := l.Tree.Forest()
	flat := func(f *cct.Forest) []string {
		var out []string
		var walk func(n *cct.Node, path string)
		walk = func(n *cct.Node, path string) {
			path += "/" + strconv.FormatUint(n.Entry, 16)
			out = append(out, path+" "+strconv.FormatUint(n.Calls, 10)+" "+strconv.FormatUint(n.NS, 10))
			for _, c := range n.Children {
				walk(c, path)
			}
		}
		walk(f.Merged.Root, "")
		return out
	}
	g, w := flat(got), flat(want)
	if strings.Join(g, "\n") != strings.Join(w, "\n") || len(got.Warnings) != 1 || len(want.Warnings) != 1 || len(w) < 8 {
		t.Errorf("loader's tree:\n%s\nwarnings %q\ncct.Build's:\n%s\nwarnings %q", strings.Join(g, "\n"), got.Warnings,
			strings.Join(w, "\n"), want.Warnings)
	}
}
