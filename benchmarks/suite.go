package benchmarks

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// Suite is the issue-2 benchmark set: rewrite cost and patch coverage on
// real binaries, and slowdown of rewritten gzip and sqlite3 against native
// and against callgrind's branch profile, all in one run.
type Suite struct {
	Config  Config
	Only    []string
	Results string
	GzipMB  int64
	// EveryRuns and CallgrindRuns are the timed runs of the slow
	// variants (0 leaves the variant out).
	EveryRuns, CallgrindRuns int
	// RowsRuns: timed runs of the row-per-event --every variant (compact:
	// about 4 GB of trace a run on gzip).
	RowsRuns int
}

// Report is what the suite writes as JSON.
type Report struct {
	Date     string              `json:"date"`
	Host     string              `json:"host"`
	Rewrites []*RewriteResult    `json:"rewrites,omitempty"`
	Slowdown map[string][]Timing `json:"slowdown,omitempty"`
	Notes    map[string]string   `json:"notes,omitempty"`
}

func (s *Suite) want(part string) bool { return len(s.Only) == 0 || slices.Contains(s.Only, part) }

// Run runs the selected parts and writes results.
func (s *Suite) Run(ctx context.Context, stdout io.Writer) error {
	cfg := s.Config
	if err := os.MkdirAll(cfg.WorkDir, 0o755); err != nil {
		return err
	}
	rep := &Report{Date: time.Now().UTC().Format(time.RFC3339), Host: hostDesc(),
		Slowdown: map[string][]Timing{}, Notes: map[string]string{}}
	if s.want("rewrite") {
		for _, bin := range []string{"/usr/bin/gzip", "/usr/lib/x86_64-linux-gnu/libsqlite3.so.0", "/usr/bin/git", "/usr/bin/gdb"} {
			if _, err := os.Stat(bin); err != nil {
				rep.Notes[bin] = "missing: " + err.Error()
				continue
			}
			fmt.Fprintf(cfg.Log, "rewrite %s\n", bin)
			r, err := RewriteCost(ctx, cfg, bin, 3)
			if err != nil {
				return err
			}
			rep.Rewrites = append(rep.Rewrites, r)
		}
		if err := s.write(rep, io.Discard); err != nil {
			return err
		}
	}
	// Results are written after each part, so a long run that is
	// interrupted keeps what it measured.
	if s.want("gzip") {
		if err := s.gzip(ctx, rep); err != nil {
			return fmt.Errorf("gzip: %w", err)
		}
		if err := s.write(rep, io.Discard); err != nil {
			return err
		}
	}
	if s.want("sqlite") {
		if err := s.sqlite(ctx, rep); err != nil {
			return fmt.Errorf("sqlite: %w", err)
		}
		if err := s.write(rep, io.Discard); err != nil {
			return err
		}
	}
	if s.want("context") {
		if err := s.contexts(ctx, rep); err != nil {
			return fmt.Errorf("context: %w", err)
		}
	}
	// Only when named: complete traces, with the row engine's gigabytes.
	if slices.Contains(s.Only, "compact") {
		if err := s.compact(ctx, rep); err != nil {
			return fmt.Errorf("compact: %w", err)
		}
	}
	// Only when named: exact block counts, with a row trace to compare,
	// and every call and return.
	if slices.Contains(s.Only, "counts") {
		if err := s.counts(ctx, rep); err != nil {
			return fmt.Errorf("counts: %w", err)
		}
	}
	if slices.Contains(s.Only, "calls") {
		if err := s.calls(ctx, rep); err != nil {
			return fmt.Errorf("calls: %w", err)
		}
	}
	// Only when named: it measures the machine, not stint.
	if slices.Contains(s.Only, "pages") {
		if err := s.pages(ctx, rep); err != nil {
			return fmt.Errorf("pages: %w", err)
		}
	}
	return s.write(rep, stdout)
}

func (s *Suite) rewrite(ctx context.Context, in, out string, extra ...string) error {
	return s.rewriteWith(ctx, s.Config.Rewrite, in, out, extra...)
}

func (s *Suite) rewriteWith(ctx context.Context, rw, in, out string, extra ...string) error {
	args := append([]string{"-q", "-o", out}, extra...)
	args = append(args, in)
	_, err := RunOnce(ctx, Cmd{Argv: append([]string{rw}, args...)})
	return err
}

// otherBuild is the variant name of the Config.Other build's rewrite.
const otherBuild = "stint branch (default), other build"

// withOther inserts, after variant i, the same command run on bin, which
// Config.Other rewrote (when it is set).
func (s *Suite) withOther(vs []variant, i int, cmd Cmd) []variant {
	if s.Config.Other == "" {
		return vs
	}
	v := variant{otherBuild, cmd, vs[i].runs}
	return append(vs[:i+1], append([]variant{v}, vs[i+1:]...)...)
}

func (s *Suite) traceEnv(name string) []string {
	dir := filepath.Join(s.Config.WorkDir, "traces", name)
	os.RemoveAll(dir)
	os.MkdirAll(dir, 0o755)
	return []string{"STINT_OUT=" + dir}
}

func (s *Suite) gzip(ctx context.Context, rep *Report) error {
	cfg := s.Config
	big := filepath.Join(cfg.WorkDir, fmt.Sprintf("input-%dM.txt", s.GzipMB))
	small := filepath.Join(cfg.WorkDir, "input-4M.txt")
	if err := TextInput(big, s.GzipMB<<20); err != nil {
		return err
	}
	if err := TextInput(small, 4<<20); err != nil {
		return err
	}
	def := filepath.Join(cfg.WorkDir, "gzip.stint")
	other := filepath.Join(cfg.WorkDir, "gzip.other.stint")
	every := filepath.Join(cfg.WorkDir, "gzip.every.stint")
	if err := s.rewrite(ctx, "/usr/bin/gzip", def); err != nil {
		return err
	}
	if cfg.Other != "" {
		if err := s.rewriteWith(ctx, cfg.Other, "/usr/bin/gzip", other); err != nil {
			return err
		}
	}
	if err := s.rewrite(ctx, "/usr/bin/gzip", every, "--every"); err != nil {
		return err
	}
	out := filepath.Join(cfg.WorkDir, "out.gz")
	cg := []string{"valgrind", "--tool=callgrind", "--collect-jumps=yes", "--callgrind-out-file=/dev/null", "/usr/bin/gzip", "-c"}
	fmt.Fprintf(cfg.Log, "gzip %d MiB: native, stint default, callgrind branch profile\n", s.GzipMB)
	t, err := s.timeVariants(ctx, s.withOther([]variant{
		{"native", Cmd{Argv: []string{"/usr/bin/gzip", "-c"}, Stdin: big, Out: out, Pin: true}, cfg.Runs},
		{"stint branch (default)", Cmd{Argv: []string{def, "-c"}, Stdin: big, Out: out, Env: s.traceEnv("gzip-default"), Pin: true}, cfg.Runs},
		{"callgrind --collect-jumps=yes", Cmd{Argv: cg, Stdin: big, Out: out, Pin: true}, s.CallgrindRuns},
	}, 1, Cmd{Argv: []string{other, "-c"}, Stdin: big, Out: out, Env: s.traceEnv("gzip-other"), Pin: true}))
	if err != nil {
		return err
	}
	rep.Slowdown[fmt.Sprintf("gzip -c, %d MiB text", s.GzipMB)] = t
	fmt.Fprintf(cfg.Log, "gzip 4 MiB: native, stint --every, callgrind\n")
	t, err = s.timeVariants(ctx, []variant{
		{"native", Cmd{Argv: []string{"/usr/bin/gzip", "-c"}, Stdin: small, Out: out, Pin: true}, cfg.Runs},
		{"stint branch --every", Cmd{Argv: []string{every, "-c"}, Stdin: small, Out: out, Env: s.traceEnv("gzip-every"), Pin: true}, s.EveryRuns},
		{"callgrind --collect-jumps=yes", Cmd{Argv: cg, Stdin: small, Out: out, Pin: true}, s.CallgrindRuns},
	})
	if err != nil {
		return err
	}
	rep.Slowdown["gzip -c, 4 MiB text (every occurrence)"] = t
	return nil
}

func (s *Suite) sqlite(ctx context.Context, rep *Report) error {
	cfg := s.Config
	lib := "/usr/lib/x86_64-linux-gnu/libsqlite3.so.0"
	sql, err := filepath.Abs("benchmarks/workloads/sqlite.sql")
	if err != nil {
		return err
	}
	defDir := filepath.Join(cfg.WorkDir, "sqlite-default")
	otherDir := filepath.Join(cfg.WorkDir, "sqlite-other")
	everyDir := filepath.Join(cfg.WorkDir, "sqlite-every")
	for _, d := range []string{defDir, otherDir, everyDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	if err := s.rewrite(ctx, lib, filepath.Join(defDir, "libsqlite3.so.0")); err != nil {
		return err
	}
	if cfg.Other != "" {
		if err := s.rewriteWith(ctx, cfg.Other, lib, filepath.Join(otherDir, "libsqlite3.so.0")); err != nil {
			return err
		}
	}
	if err := s.rewrite(ctx, lib, filepath.Join(everyDir, "libsqlite3.so.0"), "--every"); err != nil {
		return err
	}
	cg := []string{"valgrind", "--tool=callgrind", "--collect-jumps=yes", "--callgrind-out-file=/dev/null", "sqlite3", ":memory:"}
	fmt.Fprintf(cfg.Log, "sqlite3 workload: native, stint default, callgrind\n")
	t, err := s.timeVariants(ctx, s.withOther([]variant{
		{"native", Cmd{Argv: []string{"sqlite3", ":memory:"}, Stdin: sql, Pin: true}, cfg.Runs},
		{"stint branch (default)", Cmd{Argv: []string{"sqlite3", ":memory:"}, Stdin: sql, Env: append(s.traceEnv("sqlite-default"), "LD_LIBRARY_PATH="+defDir), Pin: true}, cfg.Runs},
		{"callgrind --collect-jumps=yes", Cmd{Argv: cg, Stdin: sql, Pin: true}, s.CallgrindRuns},
	}, 1, Cmd{Argv: []string{"sqlite3", ":memory:"}, Stdin: sql, Env: append(s.traceEnv("sqlite-other"), "LD_LIBRARY_PATH="+otherDir), Pin: true}))
	if err != nil {
		return err
	}
	rep.Slowdown["sqlite3 workload (benchmarks/workloads/sqlite.sql)"] = t
	// The --every comparison runs the same script on 5,000 rows.
	small, err := sqliteRows(sql, cfg.WorkDir, 5000)
	if err != nil {
		return err
	}
	fmt.Fprintf(cfg.Log, "sqlite3 small workload: native, stint --every, callgrind\n")
	t, err = s.timeVariants(ctx, []variant{
		{"native", Cmd{Argv: []string{"sqlite3", ":memory:"}, Stdin: small, Pin: true}, cfg.Runs},
		{"stint branch --every", Cmd{Argv: []string{"sqlite3", ":memory:"}, Stdin: small, Env: append(s.traceEnv("sqlite-every"), "LD_LIBRARY_PATH="+everyDir), Pin: true}, s.EveryRuns},
		{"callgrind --collect-jumps=yes", Cmd{Argv: cg, Stdin: small, Pin: true}, s.CallgrindRuns},
	})
	if err != nil {
		return err
	}
	rep.Slowdown["sqlite3 workload on 5,000 rows, every occurrence"] = t
	return nil
}

// contexts measures what the context-preserving mode costs (issue 5):
// the sqlite3 workload (on 20,000 rows) with libsqlite3 rewritten for
// calls in the default mode (each call and ret outcome once), in the
// context mode (every call and ret tracked, each calling context once),
// the context mode under a 10% budget (tracking is not charged), and
// every occurrence (--every).
func (s *Suite) contexts(ctx context.Context, rep *Report) error {
	cfg := s.Config
	lib := "/usr/lib/x86_64-linux-gnu/libsqlite3.so.0"
	sql, err := filepath.Abs("benchmarks/workloads/sqlite.sql")
	if err != nil {
		return err
	}
	small, err := sqliteRows(sql, cfg.WorkDir, 20000)
	if err != nil {
		return err
	}
	modes := []struct {
		name string
		args []string
		runs int
	}{
		{"stint call (default)", []string{"--tool", "call"}, cfg.Runs},
		{"stint call --context", []string{"--tool", "call", "--context"}, cfg.Runs},
		{"stint call --context, 10% budget", []string{"--tool", "call", "--context", "--budget", "10%", "--period", "100ms"}, cfg.Runs},
		{"stint call --every", []string{"--tool", "call", "--every"}, s.EveryRuns},
	}
	vs := []variant{{"native", Cmd{Argv: []string{"sqlite3", ":memory:"}, Stdin: small, Pin: true}, cfg.Runs}}
	for i, m := range modes {
		dir := filepath.Join(cfg.WorkDir, fmt.Sprintf("sqlite-call-%d", i))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		if err := s.rewrite(ctx, lib, filepath.Join(dir, "libsqlite3.so.0"), m.args...); err != nil {
			return err
		}
		env := append(s.traceEnv(fmt.Sprintf("sqlite-call-%d", i)), "LD_LIBRARY_PATH="+dir)
		vs = append(vs, variant{m.name, Cmd{Argv: []string{"sqlite3", ":memory:"}, Stdin: small, Env: env}, m.runs})
	}
	fmt.Fprintf(cfg.Log, "sqlite3 on 20,000 rows, call tracing: default, context mode, every occurrence\n")
	t, err := s.timeVariants(ctx, vs)
	if err != nil {
		return err
	}
	rep.Slowdown["sqlite3 workload on 20,000 rows, call tracing (context mode's cost)"] = t
	return nil
}

// variant is one command line of a comparison and how often to time it.
type variant struct {
	name string
	cmd  Cmd
	runs int
}

// timeVariants times the variants that have runs (the first is the
// baseline of the ratios).
func (s *Suite) timeVariants(ctx context.Context, vs []variant) ([]Timing, error) {
	var names []string
	var cmds []Cmd
	var runs []int
	for _, v := range vs {
		if v.runs > 0 {
			names, cmds, runs = append(names, v.name), append(cmds, v.cmd), append(runs, v.runs)
		}
	}
	return Time(ctx, s.Config, names, cmds, runs)
}

func (s *Suite) write(rep *Report, stdout io.Writer) error {
	if err := os.MkdirAll(s.Results, 0o755); err != nil {
		return err
	}
	name := "issue2"
	if len(s.Only) > 0 {
		name += "-" + strings.Join(s.Only, "-")
	}
	b, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(s.Results, name+".json"), append(b, '\n'), 0o644); err != nil {
		return err
	}
	md := Markdown(rep)
	if err := os.WriteFile(filepath.Join(s.Results, name+".md"), []byte(md), 0o644); err != nil {
		return err
	}
	_, err = io.WriteString(stdout, md)
	return err
}

// Markdown renders the report as the tables the README quotes.
func Markdown(rep *Report) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Measured %s on %s.\n\n", rep.Date, rep.Host)
	if len(rep.Rewrites) > 0 {
		b.WriteString("| binary | size | rewrite time (median of 3) | max RSS | branch sites | patched (no fallback) | per tactic | failed |\n|---|---|---|---|---|---|---|---|\n")
		for _, r := range rep.Rewrites {
			var tactics []string
			keys := make([]string, 0, len(r.Patched))
			for k := range r.Patched {
				keys = append(keys, k)
			}
			slices.Sort(keys)
			for _, k := range keys {
				if r.Patched[k] > 0 {
					tactics = append(tactics, fmt.Sprintf("%s %d", k, r.Patched[k]))
				}
			}
			fmt.Fprintf(&b, "| %s | %.1f MB | %.2f s | %d MB | %d | %.3f%% | %s | %d |\n",
				filepath.Base(r.Binary), float64(r.SizeBytes)/1e6, r.Median, r.MaxRSSKB/1024, r.Sites, r.PatchedPct,
				strings.Join(tactics, ", "), r.Failed)
		}
		b.WriteString("\n")
	}
	keys := make([]string, 0, len(rep.Slowdown))
	for k := range rep.Slowdown {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		notes := slices.ContainsFunc(rep.Slowdown[k], func(t Timing) bool { return t.Note != "" })
		fmt.Fprintf(&b, "**%s**\n\n| variant | median | ratio to native | runs |", k)
		if notes {
			b.WriteString(" note |")
		}
		b.WriteString("\n|---|---|---|---|")
		if notes {
			b.WriteString("---|")
		}
		b.WriteString("\n")
		for _, t := range rep.Slowdown[k] {
			fmt.Fprintf(&b, "| %s | %.3f s | %.2fx | %d |", t.Variant, t.Median, t.Ratio, len(t.Seconds))
			if notes {
				fmt.Fprintf(&b, " %s |", t.Note)
			}
			b.WriteString("\n")
		}
		b.WriteString("\n")
	}
	for k, v := range rep.Notes {
		fmt.Fprintf(&b, "- %s: %s\n", k, v)
	}
	return b.String()
}
