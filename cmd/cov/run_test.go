package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stint-project/stint/formats"
)

func write(t *testing.T, dir, name, buildID string, events ...formats.Event) string {
	t.Helper()
	var buf bytes.Buffer
	mods := []formats.Module{{ID: 0, Path: "/nonexistent/demo", BuildID: "d00d"}}
	w, err := formats.NewWriter(&buf, formats.Run{Binary: "/nonexistent/demo", BuildID: buildID, Tool: "branch"}, mods)
	if err != nil {
		t.Fatal(err)
	}
	w.Write(events...)
	w.Close()
	p := filepath.Join(dir, name)
	os.WriteFile(p, buf.Bytes(), 0o644)
	return p
}

func ev(n uint64) formats.Event { return formats.Event{Kind: formats.KindCall, Src: n, Dst: n + 1} }

func TestCompareCLI(t *testing.T) {
	dir := t.TempDir()
	full := write(t, dir, "full.arrow", "d00d", ev(1), ev(2), ev(3), ev(4))
	r1 := write(t, dir, "r1.arrow", "d00d", ev(1), ev(2),
		formats.Event{Kind: formats.KindPeriod, SrcModule: formats.NoModule, DstModule: formats.NoModule, Time: 1, Dst: 1000, Value: 4000})
	r2 := write(t, dir, "r2.arrow", "d00d", ev(2), ev(3))
	other := write(t, dir, "other.arrow", "beef", ev(1))

	var out, errb bytes.Buffer
	if err := run(context.Background(), []string{"compare", "--json", r1, r2, full}, &out, &errb); err != nil {
		t.Fatal(err)
	}
	var rep struct {
		Coverage float64 `json:"coverage"`
		Runs     []map[string]any
	}
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatal(err)
	}
	if rep.Coverage != 0.75 || len(rep.Runs) != 2 {
		t.Fatalf("coverage %v, %d runs; want 0.75, 2", rep.Coverage, len(rep.Runs))
	}
	for _, k := range []string{"coverage", "cumulative_coverage", "false_positive_ratio", "false_negative_ratio", "overshoot_p99_us"} {
		if _, ok := rep.Runs[0][k]; !ok {
			t.Errorf("run object lacks %q", k)
		}
	}
	if rep.Runs[1]["false_positive_ratio"] != 0.5 || rep.Runs[0]["overshoot_p99_us"] != 3.0 {
		t.Errorf("run objects %v", rep.Runs)
	}

	out.Reset()
	if err := run(context.Background(), []string{"compare", r1, r2, full}, &out, &errb); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"coverage   75.0% after 2 runs", "r2.arrow", "/nonexistent/demo"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, out.String())
		}
	}

	for _, tt := range []struct {
		args []string
		code int
	}{
		{[]string{"compare", r1, other}, 1},
		{[]string{"compare", full}, 2},
		{[]string{"compare", "--bogus", r1, full}, 2},
		{[]string{"compare", filepath.Join(dir, "missing.arrow"), full}, 1},
		{[]string{"frobnicate"}, 2},
	} {
		err := run(context.Background(), tt.args, &out, &errb)
		if have := exitCode(err); have != tt.code {
			t.Errorf("%v: exit %d (%v), want %d", tt.args, have, err, tt.code)
		}
	}
	out.Reset()
	if err := run(context.Background(), []string{"compare", "--help"}, &out, &errb); err != nil || !strings.Contains(out.String(), "false negative") {
		t.Errorf("--help: %v\n%s", err, out.String())
	}
}
