package benchmarks

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// countsVariants are the rewrites the block-count benchmark times: exact
// counts (plain and locked increments), each of INS-OP's passes off
// (pcs: the flags saved at every block; ppi: every block calls the
// runtime, which counts) and, for comparison, the same counts taken from
// a complete block trace (a row per block executed).
var countsVariants = []struct{ name, label, flags string }{
	{"counts", "stint --tool block --counts", "--tool block --counts"},
	{"nopcs", "stint --tool block --counts --no-opt pcs", "--tool block --counts --no-opt pcs"},
	{"noppi", "stint --tool block --counts --no-opt ppi", "--tool block --counts --no-opt ppi"},
	{"atomic", "stint --tool block --counts --counts-atomic", "--tool block --counts --counts-atomic"},
	{"rows", "stint --tool block --every (a row per block)", "--tool block --every"},
}

// counts measures exact block execution counts (issue 40, INS-OP's block
// profiler): gzip -c on 4 MiB and the sqlite3 workload on 5,000 rows,
// natively, with each of countsVariants and under callgrind (which
// counts every basic block's executions), in one invocation each.
func (s *Suite) counts(ctx context.Context, rep *Report) error {
	cfg := s.Config
	small := filepath.Join(cfg.WorkDir, "input-4M.txt")
	if err := TextInput(small, 4<<20); err != nil {
		return err
	}
	out := filepath.Join(cfg.WorkDir, "out.gz")
	vs := []variant{{"native", Cmd{Argv: []string{"/usr/bin/gzip", "-c"}, Stdin: small, Out: out, Pin: true}, cfg.Runs}}
	for _, v := range countsVariants {
		bin := filepath.Join(cfg.WorkDir, "gzip."+v.name+".stint")
		if err := s.rewrite(ctx, "/usr/bin/gzip", bin, strings.Fields(v.flags)...); err != nil {
			return err
		}
		vs = append(vs, variant{v.label, Cmd{Argv: []string{bin, "-c"}, Stdin: small, Out: out, Env: s.traceEnv("gzip-" + v.name), Pin: true}, s.countsRuns(v.name)})
	}
	cg := []string{"valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", "/usr/bin/gzip", "-c"}
	vs = append(vs, variant{"callgrind", Cmd{Argv: cg, Stdin: small, Out: out, Pin: true}, s.CallgrindRuns})
	fmt.Fprintf(cfg.Log, "gzip 4 MiB, block counts: native, counts, no pcs, no ppi, atomic, rows, callgrind\n")
	t, err := s.timeVariants(ctx, vs)
	if err != nil {
		return err
	}
	rep.Slowdown["gzip -c, 4 MiB text, exact block counts"] = t
	return s.countsSqlite(ctx, rep)
}

func (s *Suite) countsSqlite(ctx context.Context, rep *Report) error {
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
	vs := []variant{{"native", Cmd{Argv: []string{"sqlite3", ":memory:"}, Stdin: small, Pin: true}, cfg.Runs}}
	for _, v := range countsVariants {
		d := filepath.Join(cfg.WorkDir, "sqlite-"+v.name)
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
		if err := s.rewrite(ctx, lib, filepath.Join(d, "libsqlite3.so.0"), strings.Fields(v.flags)...); err != nil {
			return err
		}
		env := append(s.traceEnv("sqlite-"+v.name), "LD_LIBRARY_PATH="+d)
		vs = append(vs, variant{v.label, Cmd{Argv: []string{"sqlite3", ":memory:"}, Stdin: small, Env: env, Pin: true}, s.countsRuns(v.name)})
	}
	cg := []string{"valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", "sqlite3", ":memory:"}
	vs = append(vs, variant{"callgrind", Cmd{Argv: cg, Stdin: small, Pin: true}, s.CallgrindRuns})
	fmt.Fprintf(cfg.Log, "sqlite3 on 5,000 rows, block counts: native, counts, no pcs, no ppi, atomic, rows, callgrind\n")
	t, err := s.timeVariants(ctx, vs)
	if err != nil {
		return err
	}
	rep.Slowdown["sqlite3 workload on 5,000 rows, exact block counts (libsqlite3 rewritten)"] = t
	return s.countsRedis(ctx, rep)
}

// countsRedis measures redis-server's throughput under redis-benchmark
// natively and with exact block counts, in pairs (native, then counted),
// and notes the median of the pairs' ratios.
func (s *Suite) countsRedis(ctx context.Context, rep *Report) error {
	cfg := s.Config
	w := &RedisWorkload{Requests: 20000, Tests: "set,get,incr,lpush,lpop,sadd,hset,lrange_100"}
	if err := w.Prepare(ctx, cfg.WorkDir); err != nil {
		rep.Notes["redis-server, exact block counts"] = "not measured: " + err.Error()
		return nil
	}
	bin := w.OutPath(cfg.WorkDir) + ".counts"
	if err := s.rewrite(ctx, w.Target(), bin, "--tool", "block", "--counts"); err != nil {
		return err
	}
	fmt.Fprintf(cfg.Log, "%s, block counts: native and counts in pairs\n", w.Title())
	var ratios, natives, counted []float64
	for i := 0; i < max(cfg.Runs, 1); i++ {
		n, err := w.Run(ctx, "", nil)
		if err != nil {
			return err
		}
		c, err := w.Run(ctx, bin, s.traceEnv("redis-counts"))
		if err != nil {
			return err
		}
		fmt.Fprintf(cfg.Log, "  pair %d: native %.0f req/s, counts %.0f req/s\n", i+1, n, c)
		natives, counted, ratios = append(natives, n), append(counted, c), append(ratios, c/n)
	}
	rep.Notes[w.Title()+", exact block counts"] = fmt.Sprintf("native %.0f req/s, --tool block --counts %.0f req/s (medians); %.3f of native throughput (median of %d paired ratios)",
		Median(natives), Median(counted), Median(ratios), len(ratios))
	return nil
}

// countsRuns is how many timed runs variant name gets: the row traces
// are gigabytes, so they get RowsRuns.
func (s *Suite) countsRuns(name string) int {
	if name == "rows" {
		return s.RowsRuns
	}
	return s.EveryRuns
}
