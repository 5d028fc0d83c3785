package benchmarks

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// Workload is one program of the DIME experiment: what to rewrite and
// how to run it once, natively or with the rewritten module.
type Workload interface {
	Key() string   // short name: gzip, sqlite, redis
	Title() string // what the tables call it
	// Target is the file that gets rewritten (an executable or a
	// shared library).
	Target() string
	// OutPath is where the rewritten target goes for a variant whose
	// files live in dir.
	OutPath(dir string) string
	// Unit is the figure of merit's unit ("s" or "req/s").
	Unit() string
	// HigherIsBetter says whether a larger figure of merit is faster
	// (requests per second) rather than slower (seconds).
	HigherIsBetter() bool
	// Prepare creates inputs in the scratch directory work.
	Prepare(ctx context.Context, work string) error
	// Run runs the workload once with the rewritten target mod (""
	// runs the original) and the environment additions env, and
	// returns the figure of merit.
	Run(ctx context.Context, mod string, env []string) (float64, error)
}

// Slowdown returns how many times slower than native a run with the
// figure of merit x was.
func Slowdown(w Workload, native, x float64) float64 {
	if native <= 0 || x <= 0 {
		return 0
	}
	if w.HigherIsBetter() {
		return native / x
	}
	return x / native
}

// GzipWorkload compresses MB MiB of generated text with gzip -c.
type GzipWorkload struct {
	MB int64
	// Wrap, when set, wraps gzip's command line (the QoS analyzer, whose
	// metric is the output file's growth); see [QoSWrap].
	Wrap  QoSWrap
	input string
	out   string
	// Load is the CLOCK_MONOTONIC window of the last run.
	Load Window
}

func (g *GzipWorkload) Key() string               { return "gzip" }
func (g *GzipWorkload) Title() string             { return fmt.Sprintf("gzip -c, %d MiB text", g.MB) }
func (g *GzipWorkload) Target() string            { return "/usr/bin/gzip" }
func (g *GzipWorkload) OutPath(dir string) string { return filepath.Join(dir, "gzip.stint") }
func (g *GzipWorkload) Unit() string              { return "s" }
func (g *GzipWorkload) HigherIsBetter() bool      { return false }

func (g *GzipWorkload) Prepare(ctx context.Context, work string) error {
	if g.MB <= 0 {
		return fmt.Errorf("gzip input of %d MiB", g.MB)
	}
	g.input = filepath.Join(work, fmt.Sprintf("input-%dM.txt", g.MB))
	g.out = filepath.Join(work, "out.gz")
	return TextInput(g.input, g.MB<<20)
}

func (g *GzipWorkload) Run(ctx context.Context, mod string, env []string) (float64, error) {
	bin := g.Target()
	if mod != "" {
		bin = mod
	}
	argv := []string{bin, "-c"}
	if g.Wrap != nil {
		argv = g.Wrap(argv, "file-rate:"+g.out)
	}
	g.Load.Start = monoNS()
	d, err := RunOnce(ctx, Cmd{Argv: argv, Env: env, Stdin: g.input, Out: g.out, Pin: true})
	g.Load.End = monoNS()
	return d.Seconds(), err
}

// SQLiteLib is the library the sqlite3 workload rewrites.
const SQLiteLib = "/usr/lib/x86_64-linux-gnu/libsqlite3.so.0"

// SQLiteWorkload runs benchmarks/workloads/sqlite.sql in sqlite3 with a
// rewritten libsqlite3 first on LD_LIBRARY_PATH.
type SQLiteWorkload struct {
	Script string // path of sqlite.sql
	Rows   int    // rows of the script's main table (0: as written, 200,000)
	script string // the script actually run
}

func (s *SQLiteWorkload) Key() string { return "sqlite" }
func (s *SQLiteWorkload) Title() string {
	if s.Rows > 0 {
		return fmt.Sprintf("sqlite3 workload on %d rows", s.Rows)
	}
	return "sqlite3 workload (benchmarks/workloads/sqlite.sql)"
}
func (s *SQLiteWorkload) Target() string            { return SQLiteLib }
func (s *SQLiteWorkload) OutPath(dir string) string { return filepath.Join(dir, "libsqlite3.so.0") }
func (s *SQLiteWorkload) Unit() string              { return "s" }
func (s *SQLiteWorkload) HigherIsBetter() bool      { return false }

func (s *SQLiteWorkload) Prepare(ctx context.Context, work string) error {
	if s.Rows > 0 {
		var err error
		s.script, err = sqliteRows(s.Script, work, s.Rows)
		return err
	}
	s.script = s.Script
	_, err := os.ReadFile(s.Script) // there and readable
	return err
}

// sqliteRows writes the sqlite3 workload script at path with its main
// table cut to rows rows into dir and returns the new file.
func sqliteRows(path, dir string, rows int) (string, error) {
	script, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	small := strings.Replace(string(script), "x < 200000", fmt.Sprintf("x < %d", rows), 1)
	if small == string(script) {
		return "", fmt.Errorf("%s: no row count to change", path)
	}
	out := filepath.Join(dir, fmt.Sprintf("sqlite-%d.sql", rows))
	return out, os.WriteFile(out, []byte(small), 0o644)
}

func (s *SQLiteWorkload) Run(ctx context.Context, mod string, env []string) (float64, error) {
	if mod != "" {
		env = append(env, "LD_LIBRARY_PATH="+filepath.Dir(mod))
	}
	d, err := RunOnce(ctx, Cmd{Argv: []string{"sqlite3", ":memory:"}, Env: env, Stdin: s.script, Pin: true})
	return d.Seconds(), err
}

// timeout bounds a step that should take seconds.
func timeout(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, d)
}
