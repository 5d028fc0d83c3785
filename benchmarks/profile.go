package benchmarks

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// benchVariant is a rewrite a benchmark times: a name for its files, a
// label for its row, and the rewrite's flags.
type benchVariant struct{ name, label, flags string }

// peer is a tool a profile runs the same workloads under, for
// comparison: its row's label and the command line before the program.
type peer struct {
	label string
	argv  []string
}

// callgrindDefault is callgrind's default tool, which counts every basic
// block and records every call; callgrindJumps also records every jump.
var (
	callgrindDefault = peer{"callgrind", []string{"valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null"}}
	callgrindJumps   = peer{"callgrind --collect-jumps=yes", []string{"valgrind", "--tool=callgrind", "--collect-jumps=yes", "--callgrind-out-file=/dev/null"}}
)

// profile times what (a profiler: block counts, calls) on gzip -c of 4
// MiB and on the sqlite3 workload on 5,000 rows: natively, rewritten with
// each variant (gzip itself, libsqlite3) and under peer, in one
// invocation each. A variant named "rows" gets RowsRuns (its traces are
// gigabytes), the others EveryRuns.
func (s *Suite) profile(ctx context.Context, rep *Report, what string, vs []benchVariant, pr peer) error {
	cfg := s.Config
	small := filepath.Join(cfg.WorkDir, "input-4M.txt")
	if err := TextInput(small, 4<<20); err != nil {
		return err
	}
	out := filepath.Join(cfg.WorkDir, "out.gz")
	gz := []variant{{"native", Cmd{Argv: []string{"/usr/bin/gzip", "-c"}, Stdin: small, Out: out, Pin: true}, cfg.Runs}}
	for _, v := range vs {
		bin := filepath.Join(cfg.WorkDir, "gzip."+v.name+".stint")
		if err := s.rewrite(ctx, "/usr/bin/gzip", bin, strings.Fields(v.flags)...); err != nil {
			return err
		}
		gz = append(gz, variant{v.label, Cmd{Argv: []string{bin, "-c"}, Stdin: small, Out: out, Env: s.traceEnv("gzip-" + v.name), Pin: true}, s.variantRuns(v.name)})
	}
	gz = append(gz, variant{pr.label, Cmd{Argv: append(append([]string{}, pr.argv...), "/usr/bin/gzip", "-c"), Stdin: small, Out: out, Pin: true}, s.CallgrindRuns})
	fmt.Fprintf(cfg.Log, "gzip 4 MiB, %s\n", what)
	t, err := s.timeVariants(ctx, gz)
	if err != nil {
		return err
	}
	rep.Slowdown["gzip -c, 4 MiB text, "+what] = t
	sql, err := filepath.Abs("benchmarks/workloads/sqlite.sql")
	if err != nil {
		return err
	}
	input, err := sqliteRows(sql, cfg.WorkDir, 5000)
	if err != nil {
		return err
	}
	sq := []variant{{"native", Cmd{Argv: []string{"sqlite3", ":memory:"}, Stdin: input, Pin: true}, cfg.Runs}}
	for _, v := range vs {
		d := filepath.Join(cfg.WorkDir, "sqlite-"+v.name)
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
		if err := s.rewrite(ctx, "/usr/lib/x86_64-linux-gnu/libsqlite3.so.0", filepath.Join(d, "libsqlite3.so.0"), strings.Fields(v.flags)...); err != nil {
			return err
		}
		env := append(s.traceEnv("sqlite-"+v.name), "LD_LIBRARY_PATH="+d)
		sq = append(sq, variant{v.label, Cmd{Argv: []string{"sqlite3", ":memory:"}, Stdin: input, Env: env, Pin: true}, s.variantRuns(v.name)})
	}
	sq = append(sq, variant{pr.label, Cmd{Argv: append(append([]string{}, pr.argv...), "sqlite3", ":memory:"), Stdin: input, Pin: true}, s.CallgrindRuns})
	fmt.Fprintf(cfg.Log, "sqlite3 on 5,000 rows, %s\n", what)
	if t, err = s.timeVariants(ctx, sq); err != nil {
		return err
	}
	rep.Slowdown["sqlite3 workload on 5,000 rows (libsqlite3 rewritten), "+what] = t
	return nil
}

// variantRuns is how many timed runs variant name gets.
func (s *Suite) variantRuns(name string) int {
	if name == "rows" {
		return s.RowsRuns
	}
	return s.EveryRuns
}

// redisPairs measures redis-server under redis-benchmark (20,000
// requests per test, the dime tests) natively and rewritten with each
// variant, in pairs (native, then rewritten), and notes the median of
// each variant's pair ratios under what.
func (s *Suite) redisPairs(ctx context.Context, rep *Report, what string, vs []benchVariant) error {
	cfg := s.Config
	w := &RedisWorkload{Requests: 20000, Tests: "set,get,incr,lpush,lpop,sadd,hset,lrange_100"}
	if err := w.Prepare(ctx, cfg.WorkDir); err != nil {
		rep.Notes["redis-server, "+what] = "not measured: " + err.Error()
		return nil
	}
	for _, v := range vs {
		bin := w.OutPath(cfg.WorkDir) + "." + v.name
		if err := s.rewrite(ctx, w.Target(), bin, strings.Fields(v.flags)...); err != nil {
			return err
		}
		fmt.Fprintf(cfg.Log, "%s, %s: native and %s in pairs\n", w.Title(), what, v.label)
		var ratios, natives, rewritten []float64
		for i := 0; i < max(cfg.Runs, 1); i++ {
			n, err := w.Run(ctx, "", nil)
			if err != nil {
				return err
			}
			r, err := w.Run(ctx, bin, s.traceEnv("redis-"+v.name))
			if err != nil {
				return err
			}
			fmt.Fprintf(cfg.Log, "  pair %d: native %.0f req/s, rewritten %.0f req/s\n", i+1, n, r)
			natives, rewritten, ratios = append(natives, n), append(rewritten, r), append(ratios, r/n)
		}
		rep.Notes[w.Title()+", "+what+", "+v.label] = fmt.Sprintf("native %.0f req/s, rewritten %.0f req/s (medians); %.3f of native throughput (median of %d paired ratios)",
			Median(natives), Median(rewritten), Median(ratios), len(ratios))
	}
	return nil
}
