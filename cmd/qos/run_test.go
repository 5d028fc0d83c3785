package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stint-project/stint/internal/cli"
	"github.com/stint-project/stint/qos"
)

func TestUsageErrors(t *testing.T) {
	tests := []struct {
		args []string
		want string
	}{
		{nil, "no command given"},
		{[]string{"dance"}, "unknown command"},
		{[]string{"run", "--threshold", "1", "--", "true"}, "--metric SOURCE is required"},
		{[]string{"run", "--metric", "cmd:echo 1", "--", "true"}, "--threshold N is required"},
		{[]string{"run", "--metric", "cmd:echo 1", "--threshold", "1"}, "no program given"},
		{[]string{"run", "--metric", "cmd:echo 1", "--threshold", "1m", "--", "true"}, "ambiguous"},
		{[]string{"run", "--metric", "cmd:echo 1", "--threshold", "-5", "--", "true"}, "threshold -5: want a finite number > 0"},
		{[]string{"run", "--metric", "cmd:echo 1", "--threshold", "1", "--period", "1h1s", "--", "true"}, "1ms to 1h"},
		{[]string{"run", "--metric", "cmd:echo 1", "--threshold", "1", "--tuning", "fast", "--", "true"}, "want sum, span or value"},
		{[]string{"run", "--metric", "cmd:echo 1", "--threshold", "1", "--tuning", "span", "--", "true"}, "needs --max"},
		{[]string{"run", "--metric", "cmd:echo 1", "--threshold", "10", "--tuning", "span", "--max", "5", "--", "true"}, "must be above the threshold"},
		{[]string{"run", "--metric", "cmd:echo 1", "--threshold", "1", "--max", "5", "--", "true"}, "only used with --tuning span"},
		{[]string{"run", "--metric", "cmd:echo 1", "--threshold", "1", "--default-budget", "200%", "--", "true"}, "0% to 100%"},
		{[]string{"run", "--metric", "gopher:x", "--threshold", "1", "--", "true"}, "unknown kind"},
		{[]string{"run", "--metric", "redis://nohost", "--threshold", "1", "--", "true"}, "want redis://HOST:PORT"},
		{[]string{"watch", "--metric", "cmd:echo 1", "--threshold", "1"}, "--page PATH is required"},
		{[]string{"watch", "--metric", "cmd:echo 1", "--threshold", "1", "--page", "p", "extra"}, "unexpected arguments"},
		{[]string{"show"}, "want one page file"},
		{[]string{"help", "nope"}, "unknown command"},
	}
	for _, tt := range tests {
		var out, errb bytes.Buffer
		err := run(context.Background(), tt.args, &out, &errb)
		if cli.ExitCode(err) != cli.ExitUsage || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%q: have %v (exit %d), want a usage error with %q", tt.args, err, cli.ExitCode(err), tt.want)
		}
	}
}

func TestHelp(t *testing.T) {
	for _, args := range [][]string{{"--help"}, {"help"}, {"help", "run"}, {"run", "--help"}, {"watch", "-h"}, {"show", "--help"}} {
		var out bytes.Buffer
		if err := run(context.Background(), args, &out, &out); err != nil || out.Len() < 100 {
			t.Errorf("%q: %v, %d bytes of help", args, err, out.Len())
		}
	}
	var out bytes.Buffer
	run(context.Background(), []string{"--help"}, &out, &out)
	for _, s := range []string{"file-rate:", "log-rate:", "redis://", "prom:", "cmd:", "gzip", "nginx", "STINT_QOS"} {
		if !strings.Contains(out.String(), s) {
			t.Errorf("help does not mention %q", s)
		}
	}
}

// TestRunAndShow: qos run passes the child's status through and the
// child can print the page with qos show (through run, in-process).
// The period is long enough that `echo 42` answers within its 3/4 even on
// a loaded machine (at 50 ms the first sample sometimes timed out in CI).
func TestRunAndShow(t *testing.T) {
	dir := t.TempDir()
	samples := filepath.Join(dir, "s.csv")
	page := filepath.Join(dir, "page")
	var out, errb bytes.Buffer
	err := run(context.Background(), []string{"run", "--metric", "cmd:echo 42", "--threshold", "30k", "--period", "400ms",
		"--samples", samples, "--page", page, "--default-budget", "none", "--",
		"sh", "-c", `sleep 1; echo "QOS=$STINT_QOS BUDGET=$STINT_BUDGET PERIOD=$STINT_PERIOD"; exit 5`}, &out, &errb)
	if cli.ExitCode(err) != 5 {
		t.Fatalf("have %v (exit %d), want exit 5; stderr %s", err, cli.ExitCode(err), errb.String())
	}
	if want := "QOS=" + page + " BUDGET=none PERIOD=400ms\n"; out.String() != want {
		t.Errorf("child printed %q, want %q", out.String(), want)
	}
	f, err := os.Open(samples)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rows, err := qos.ReadSamples(f)
	if err != nil || len(rows) < 2 || rows[0].Value != 42 {
		t.Errorf("samples %+v, %v", rows, err)
	}

	// show
	p, err := qos.CreatePage(page, qos.Config{Threshold: 30000, Interval: 1e9, Source: "redis://127.0.0.1:6379"})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Remove()
	p.Publish(41000, qos.Monotonic())
	out.Reset()
	if err := run(context.Background(), []string{"show", page}, &out, &errb); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"redis://127.0.0.1:6379", "threshold  30k (higher is better)", "state      running", "value      41k", "samples    1"} {
		if !strings.Contains(out.String(), s) {
			t.Errorf("show lacks %q:\n%s", s, out.String())
		}
	}
	if err := run(context.Background(), []string{"show", samples}, &out, &errb); err == nil || !strings.Contains(err.Error(), "want 4096") {
		t.Errorf("show of a non-page: %v", err)
	}
}

func TestRunFailingSource(t *testing.T) {
	var out, errb bytes.Buffer
	err := run(context.Background(), []string{"run", "--metric", "redis://127.0.0.1:1", "--threshold", "1", "--period", "20ms", "--",
		"sleep", "0.2"}, &out, &errb)
	if err != nil {
		t.Fatalf("a failing source must not fail the run: %v", err)
	}
	if n := strings.Count(errb.String(), "failing"); n != 1 || !strings.Contains(errb.String(), "connection refused") {
		t.Errorf("want one clear message, have:\n%s\nstdout %s", errb.String(), out.String())
	}
}
