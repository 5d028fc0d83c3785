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
