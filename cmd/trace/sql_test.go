package main

import (
	"bytes"
	"context"
	"encoding/csv"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/stint-project/stint/analysis/paths"
	"github.com/stint-project/stint/formats"
	"github.com/stint-project/stint/internal/cli"
	"github.com/stint-project/stint/rewrite"
)

// sqlEngineBuilt builds cmd/trace-sql (DuckDB, cgo, with its Arrow
// interface) into the test's directory; the test is skipped where cgo is
// off.
func sqlEngineBuilt(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("building DuckDB's command skipped under -short")
	}
	if out, err := exec.Command("go", "env", "CGO_ENABLED").Output(); err != nil || strings.TrimSpace(string(out)) != "1" {
		t.Skip("cgo is off: trace-sql cannot be built")
	}
	p := filepath.Join(t.TempDir(), "trace-sql")
	if out, err := exec.Command("go", "build", "-tags", "duckdb_arrow", "-o", p, "../trace-sql").CombinedOutput(); err != nil {
		t.Fatalf("build trace-sql: %v\n%s", err, out)
	}
	return p
}

// sqlCSV runs trace sql --format csv and returns its records.
func sqlCSV(t *testing.T, query string, traces ...string) [][]string {
	t.Helper()
	var stdout, stderr bytes.Buffer
	args := append([]string{"--format", "csv", query}, traces...)
	if err := runSQL(context.Background(), args, &stdout, &stderr); err != nil {
		t.Fatalf("trace sql %q: %v\n%s", query, err, stderr.String())
	}
	recs, err := csv.NewReader(&stdout).ReadAll()
	if err != nil {
		t.Fatalf("trace sql %q: %v\n%s", query, err, stdout.String())
	}
	return recs
}

// The README's queries.
const (
	sqlKinds   = "SELECT kind, count(*) AS n FROM events GROUP BY kind ORDER BY n DESC, kind"
	sqlTop     = "SELECT dst_func, count(*) AS calls FROM events WHERE kind = 'call' GROUP BY dst_func ORDER BY calls DESC, dst_func LIMIT 5"
	sqlModules = "SELECT m.name, r.tool, count(*) AS n FROM events e JOIN modules m ON e.src_module = m.id JOIN runs r ON e.run = r.run GROUP BY ALL ORDER BY n DESC, m.name"
)

// TestSQL: the README's queries over a call trace of the recurse
// fixture (down is called 5,001 times) give the counts the trace holds,
// the same over a Parquet export with trace-sql, and a bad query fails
// with the engine's message.
func TestSQL(t *testing.T) {
	engine := sqlEngineBuilt(t)
	t.Setenv(sqlEngineEnv, engine)
	r := traced(t, rewrite.ToolCall, true)
	tr, _, err := paths.ReadFile(r.traces[0])
	if err != nil {
		t.Fatal(err)
	}
	perKind := map[string]int{}
	for _, e := range tr.Events {
		if e.Kind >= 1 && e.Kind <= formats.MaxKind { // events, not the runtime's rows
			perKind[e.Kind.String()]++
		}
	}

	kinds := sqlCSV(t, sqlKinds, r.traces...)
	if len(kinds) != len(perKind)+1 || strings.Join(kinds[0], ",") != "kind,n" {
		t.Fatalf("kinds: %q, want %d kinds", kinds, len(perKind))
	}
	for _, rec := range kinds[1:] {
		if n, _ := strconv.Atoi(rec[1]); n != perKind[rec[0]] {
			t.Errorf("kind %s: %s events, the trace has %d", rec[0], rec[1], perKind[rec[0]])
		}
	}

	top := sqlCSV(t, sqlTop, r.traces...)
	if len(top) < 2 || top[1][0] != "down" || top[1][1] != "5001" {
		t.Errorf("most called: %q, want down with 5001 calls first", top)
	}

	mods := sqlCSV(t, sqlModules, r.traces...)
	if len(mods) < 2 || mods[1][0] != "recurse" || mods[1][1] != "call" {
		t.Errorf("events by module: %q, want recurse (tool call) first", mods)
	}

	// the same query over an export, with trace-sql itself
	pq, _ := exportTo(t, "parquet", r.traces...)
	out, err := exec.Command(engine, "--format", "csv", pq, sqlTop).Output()
	if err != nil {
		t.Fatalf("trace-sql on the export: %v", err)
	}
	again, _ := csv.NewReader(bytes.NewReader(out)).ReadAll()
	if len(again) != len(top) || strings.Join(again[1], ",") != strings.Join(top[1], ",") {
		t.Errorf("the export gives %q, trace sql %q", again, top)
	}

	// an engine without the Arrow interface (exit 3 on --arrow): the
	// same answer over a Parquet export
	script := filepath.Join(t.TempDir(), "trace-sql")
	if err := os.WriteFile(script, []byte("#!/bin/sh\n[ \"$1\" = --arrow ] && exit 3\nexec "+engine+" \"$@\"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv(sqlEngineEnv, script)
	if pqTop := sqlCSV(t, sqlTop, r.traces...); strings.Join(pqTop[1], ",") != strings.Join(top[1], ",") {
		t.Errorf("over Parquet: %q, over Arrow %q", pqTop, top)
	}
	t.Setenv(sqlEngineEnv, engine)

	var stderr bytes.Buffer
	err = runSQL(context.Background(), []string{"SELECT nope FROM events", r.traces[0]}, &bytes.Buffer{}, &stderr)
	if cli.ExitCode(err) != 1 || !strings.Contains(stderr.String(), "nope") {
		t.Errorf("a bad query: exit %d (%v), stderr %q", cli.ExitCode(err), err, stderr.String())
	}
}

// TestSQLUsage: missing arguments and a bad format are usage errors; no
// engine is a clear error.
func TestSQLUsage(t *testing.T) {
	for _, args := range [][]string{{}, {"SELECT 1"}, {"--format", "xml", "SELECT 1", "x.arrow"},
		{"--memory-limit", "lots", "SELECT 1", "x.arrow"}} {
		if err := runSQL(context.Background(), args, &bytes.Buffer{}, &bytes.Buffer{}); cli.ExitCode(err) != 2 {
			t.Errorf("trace sql %q: exit %d (%v), want 2", args, cli.ExitCode(err), err)
		}
	}
	t.Setenv(sqlEngineEnv, "")
	t.Setenv("PATH", t.TempDir())
	if _, err := os.Stat(filepath.Join(filepath.Dir(os.Args[0]), "trace-sql")); err == nil {
		t.Skip("a trace-sql lies beside the test binary")
	}
	err := runSQL(context.Background(), []string{"SELECT 1", "x.arrow"}, &bytes.Buffer{}, &bytes.Buffer{})
	if err == nil || !strings.Contains(err.Error(), "no trace-sql command") {
		t.Errorf("without the engine: %v", err)
	}
}

// TestSQLMemoryBounded: DuckDB's table holds every row of the traces, so
// its memory grew with them (10 M events: 838 MB). With --memory-limit
// the rows beyond it spill to a temporary directory: 4 M events load
// and answer the same under 64 MiB as under 4 GiB, in far less memory
// (the engine's peak resident set, from its rusage), and the directory
// is gone afterwards.
func TestSQLMemoryBounded(t *testing.T) {
	engine := sqlEngineBuilt(t)
	const n = 4000000
	run := formats.Run{Binary: "/usr/bin/demo", Tool: "branch", Options: "tool=branch every=1", PID: 10, PPID: 1}
	mods := []formats.Module{{ID: 0, Path: "/usr/bin/demo", Base: 0x555555554000, Size: 0x100000, Rewritten: true}}
	trace := filepath.Join(t.TempDir(), "big.arrow")
	f, err := os.Create(trace)
	if err != nil {
		t.Fatal(err)
	}
	w, err := formats.NewWriter(f, run, mods)
	if err != nil {
		t.Fatal(err)
	}
	var sum uint64
	for i := uint64(0); i < n; i++ {
		src := 0x1000 + i%50000*4
		sum += src
		w.Write(formats.Event{Kind: formats.KindJccTaken, TID: 10, Time: i, Src: src, Dst: src + 2, DstModule: 0})
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	f.Close()
	pq, _ := exportTo(t, "parquet", "--no-symbols", trace) // the module and run tables beside it
	rows, _ := exportTo(t, "arrow", "--no-symbols", trace)
	tmp := t.TempDir()
	query := "SELECT count(*) AS n, sum(src) AS s FROM events"
	peak := func(limit string) int64 {
		in, err := os.Open(rows)
		if err != nil {
			t.Fatal(err)
		}
		defer in.Close()
		cmd := exec.Command(engine, "--arrow", "--format", "csv", "--memory-limit", limit, pq, query)
		cmd.Stdin, cmd.Env = in, append(os.Environ(), "TMPDIR="+tmp)
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("--memory-limit %s: %v", limit, err)
		}
		if want := fmt.Sprintf("n,s\n%d,%d\n", n, sum); string(out) != want {
			t.Errorf("--memory-limit %s: %q, want %q", limit, out, want)
		}
		return cmd.ProcessState.SysUsage().(*syscall.Rusage).Maxrss // KiB
	}
	small, large := peak("64M"), peak("4G")
	t.Logf("peak resident set: %d KiB under 64M, %d KiB under 4G", small, large)
	if small*5 > large*4 {
		t.Errorf("peak resident set %d KiB under 64M, %d KiB under 4G: the limit bounds nothing", small, large)
	}
	if left, _ := os.ReadDir(tmp); len(left) != 0 {
		t.Errorf("%d entries left in the temporary directory", len(left))
	}
}
