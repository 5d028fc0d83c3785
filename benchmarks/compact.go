package benchmarks

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/stint-project/stint/analysis/paths"
	"github.com/stint-project/stint/formats"
)

// compact measures complete branch traces (issue 40): gzip -c on 4 MiB
// and the sqlite3 workload on 5,000 rows, each natively, rewritten with
// --every (a compact trace), with --every --no-opt=ppi (every probe
// calls the runtime: what inlining buys), with --every --rows (the row
// per event it replaces) and under callgrind --collect-jumps=yes, in one
// invocation;
// then what each trace takes on disk per event, and how fast the
// compact ones decode.
func (s *Suite) compact(ctx context.Context, rep *Report) error {
	cfg := s.Config
	small := filepath.Join(cfg.WorkDir, "input-4M.txt")
	if err := TextInput(small, 4<<20); err != nil {
		return err
	}
	gz := filepath.Join(cfg.WorkDir, "gzip.compact.stint")
	gzRows := filepath.Join(cfg.WorkDir, "gzip.rows.stint")
	gzC := filepath.Join(cfg.WorkDir, "gzip.noppi.stint")
	if err := s.rewrite(ctx, "/usr/bin/gzip", gz, "--every"); err != nil {
		return err
	}
	if err := s.rewrite(ctx, "/usr/bin/gzip", gzC, "--every", "--no-opt", "ppi"); err != nil {
		return err
	}
	if err := s.rewrite(ctx, "/usr/bin/gzip", gzRows, "--every", "--rows"); err != nil {
		return err
	}
	out := filepath.Join(cfg.WorkDir, "out.gz")
	cg := []string{"valgrind", "--tool=callgrind", "--collect-jumps=yes", "--callgrind-out-file=/dev/null", "/usr/bin/gzip", "-c"}
	fmt.Fprintf(cfg.Log, "gzip 4 MiB, complete branch trace: native, compact, rows, callgrind\n")
	t, err := s.timeVariants(ctx, []variant{
		{"native", Cmd{Argv: []string{"/usr/bin/gzip", "-c"}, Stdin: small, Out: out, Pin: true}, cfg.Runs},
		{"stint --every (compact)", Cmd{Argv: []string{gz, "-c"}, Stdin: small, Out: out, Env: s.traceEnv("gzip-compact"), Pin: true}, s.EveryRuns},
		{"stint --every --no-opt=ppi", Cmd{Argv: []string{gzC, "-c"}, Stdin: small, Out: out, Env: s.traceEnv("gzip-noppi"), Pin: true}, s.EveryRuns},
		{"stint --every --rows (previous engine)", Cmd{Argv: []string{gzRows, "-c"}, Stdin: small, Out: out, Env: s.traceEnv("gzip-rows"), Pin: true}, s.RowsRuns},
		{"callgrind --collect-jumps=yes", Cmd{Argv: cg, Stdin: small, Out: out, Pin: true}, s.CallgrindRuns},
	})
	if err != nil {
		return err
	}
	rep.Slowdown["gzip -c, 4 MiB text, complete branch trace"] = t
	if err := s.compactSqlite(ctx, rep); err != nil {
		return err
	}
	for _, name := range []string{"gzip", "sqlite"} {
		if err := s.compactSizes(rep, name); err != nil {
			return err
		}
	}
	return s.redisPairs(ctx, rep, "complete branch trace", []benchVariant{{"compact", "stint --every (compact)", "--every"}})
}

func (s *Suite) compactSqlite(ctx context.Context, rep *Report) error {
	cfg := s.Config
	lib := "/usr/lib/x86_64-linux-gnu/libsqlite3.so.0"
	sql, err := filepath.Abs("benchmarks/workloads/sqlite.sql")
	if err != nil {
		return err
	}
	small, err := sqliteRows(sql, cfg.WorkDir, 5000)
	if err != nil {
		return err
	}
	dirs := map[string]string{}
	for _, m := range []struct{ name, flags string }{{"compact", "--every"}, {"noppi", "--every --no-opt ppi"}, {"rows", "--every --rows"}} {
		d := filepath.Join(cfg.WorkDir, "sqlite-"+m.name)
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
		if err := s.rewrite(ctx, lib, filepath.Join(d, "libsqlite3.so.0"), strings.Fields(m.flags)...); err != nil {
			return err
		}
		dirs[m.name] = d
	}
	sq := func(name string) Cmd {
		return Cmd{Argv: []string{"sqlite3", ":memory:"}, Stdin: small, Env: append(s.traceEnv("sqlite-"+name), "LD_LIBRARY_PATH="+dirs[name]), Pin: true}
	}
	cg := []string{"valgrind", "--tool=callgrind", "--collect-jumps=yes", "--callgrind-out-file=/dev/null", "sqlite3", ":memory:"}
	fmt.Fprintf(cfg.Log, "sqlite3 on 5,000 rows, complete branch trace: native, compact, rows, callgrind\n")
	t, err := s.timeVariants(ctx, []variant{
		{"native", Cmd{Argv: []string{"sqlite3", ":memory:"}, Stdin: small, Pin: true}, cfg.Runs},
		{"stint --every (compact)", sq("compact"), s.EveryRuns},
		{"stint --every --no-opt=ppi", sq("noppi"), s.EveryRuns},
		{"stint --every --rows (previous engine)", sq("rows"), s.RowsRuns},
		{"callgrind --collect-jumps=yes", Cmd{Argv: cg, Stdin: small, Pin: true}, s.CallgrindRuns},
	})
	if err != nil {
		return err
	}
	rep.Slowdown["sqlite3 workload on 5,000 rows, complete branch trace"] = t
	return nil
}

// compactSizes notes, for workload name, the bytes per event on disk of
// its compact and row traces (all timed runs), and how fast the compact
// ones decode (events per second of one thread's decoding).
func (s *Suite) compactSizes(rep *Report, name string) error {
	dir := filepath.Join(s.Config.WorkDir, "traces")
	traces, _ := filepath.Glob(filepath.Join(dir, name+"-compact", "*.arrow"))
	var bytes, events int64
	var decode time.Duration
	for _, tr := range traces {
		fi, err := os.Stat(tr + formats.PathsSuffix)
		if err != nil {
			continue
		}
		d, err := paths.Open(tr, paths.Options{})
		if err != nil {
			return fmt.Errorf("%s: %w", tr, err)
		}
		t0 := time.Now()
		n := int64(0)
		if _, err := d.Events(func(formats.Event) error { n++; return nil }); err != nil {
			return fmt.Errorf("decode %s: %w", tr, err)
		}
		decode += time.Since(t0)
		bytes += fi.Size()
		events += n
	}
	if events > 0 {
		rep.Notes[name+" compact trace"] = fmt.Sprintf("%.3f bytes per event (%d events, %d bytes of paths files in %d runs); decoded at %.1f M events/s",
			float64(bytes)/float64(events), events, bytes, len(traces), float64(events)/decode.Seconds()/1e6)
	}
	rows, _ := filepath.Glob(filepath.Join(dir, name+"-rows", "*.arrow"))
	var rbytes, revents int64
	for _, tr := range rows {
		r, err := formats.Open(tr)
		if err != nil {
			return fmt.Errorf("%s: %w", tr, err)
		}
		for r.Next() {
			revents += r.Record().NumRows()
		}
		r.Release()
		if fi, err := os.Stat(tr); err == nil {
			rbytes += fi.Size()
		}
	}
	if revents > 0 {
		rep.Notes[name+" row trace"] = fmt.Sprintf("%.1f bytes per row (%d rows, %d bytes in %d runs)",
			float64(rbytes)/float64(revents), revents, rbytes, len(rows))
	}
	return nil
}
