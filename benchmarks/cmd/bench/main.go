// Command bench runs stint's end-to-end benchmarks and writes
// benchmarks/results/<name>.{json,md}.
//
//	go run ./benchmarks/cmd/bench                  # everything (about 15 minutes)
//	go run ./benchmarks/cmd/bench --only rewrite   # rewrite cost and patch coverage only
//	go run ./benchmarks/cmd/bench --only dime      # issue 3: DIME and DIME* (about 40 minutes)
//	go run ./benchmarks/cmd/bench --only qdime     # issue 4: QDIME's Table I (about 25 minutes)
//	go run ./benchmarks/cmd/bench --only pages     # what scattered first page touches cost here (about 1 minute)
//	go run ./benchmarks/cmd/bench --only compact   # complete branch traces: compact, rows, callgrind (about 10 minutes)
//	go run ./benchmarks/cmd/bench --only counts    # exact block counts: counts, passes off, atomic, rows, callgrind, redis
//	go run ./benchmarks/cmd/bench --only calls     # every call and return: rows, callgrind, redis
//	go run ./benchmarks/cmd/bench --only retire    # run 3 with --skip-covered against --retire-since too, and the retiring series' run 4 (about 3 minutes)
//	go run ./benchmarks/cmd/bench --only gzip,sqlite,retire --vs /tmp/old/rewrite  # this build against another, in the same rounds
//
// The dime part is not in the default set (it is long); it writes
// benchmarks/results/issue3.{json,md} and SVG plots beside them. A smoke
// run of the smallest configuration:
//
//	go run ./benchmarks/cmd/bench --only dime --dime-runs 2 --gzip-mb 1 \
//	    --sqlite-rows 2000 --redis-requests 2000 --results /tmp/r
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strings"
	"time"

	"github.com/spf13/pflag"
	"github.com/stint-project/stint/benchmarks"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := pflag.NewFlagSet("bench", pflag.ContinueOnError)
	fs.SetOutput(stderr)
	var o benchmarks.Suite
	fs.StringVar(&o.Config.Rewrite, "rewrite", "bin/rewrite", "path of the rewrite command")
	fs.StringVar(&o.Config.Other, "vs", "", "another build's rewrite `COMMAND`, timed beside --rewrite in the same rounds: gzip and sqlite add its default rewrite, retire its rewrites of runs 3 and 4 from the same logs (a before/after comparison)")
	fs.StringVar(&o.Config.WorkDir, "work", "/tmp/stint-bench", "scratch directory")
	fs.IntVar(&benchmarks.PinCPU, "cpu", 0, "run every measured program (native and traced, all its threads) on this CPU, its load generator on another; -1 = wherever the scheduler puts them (vCPUs of a shared VM can differ in speed for minutes)")
	fs.IntVar(&o.Config.Runs, "runs", 5, "timed runs per fast variant (median reported)")
	fs.StringSliceVar(&o.Only, "only", nil, "run only these parts: rewrite, gzip, sqlite, context, dime, qdime, pages, compact, counts, calls (dime, qdime, pages, compact, counts, calls and retire run only when named; compact times complete branch traces, compact and rows, against callgrind; counts times exact block counts and calls every call and return, against callgrind; retire times run 3 of an exact series rewritten with --skip-covered against --retire-since too, and run 4 of the retiring series, on --workloads; pages times sqlite3 after first touches of scattered pages, what stub pages cost on this machine)")
	fs.StringVar(&o.Results, "results", "benchmarks/results", "directory for the results")
	fs.Int64Var(&o.GzipMB, "gzip-mb", 64, "gzip input size in MiB")
	fs.IntVar(&o.EveryRuns, "every-runs", 3, "timed runs of the --every variants (0 = leave them out)")
	fs.IntVar(&o.RowsRuns, "rows-runs", 1, "compact: timed runs of the --every --rows variant (about 4 GB of trace each on gzip)")
	fs.IntVar(&o.CallgrindRuns, "callgrind-runs", 3, "timed runs of callgrind (0 = leave it out)")
	d := benchmarks.DIME{Name: "issue3"}
	var workloads []string
	var sqliteRows, redisN, redisClients int
	var redisTests string
	fs.IntVar(&d.Runs, "dime-runs", 8, "dime: runs per budgeted series")
	fs.IntVar(&d.NativeRuns, "dime-native-runs", 3, "dime: native runs before the series (one more precedes every traced run)")
	fs.StringVar(&d.Budget, "budget", "10%", "dime: rewrite --budget (fraction of the period or a duration)")
	fs.StringVar(&d.Period, "period", "100ms", "dime: rewrite --period")
	fs.StringVar(&d.Edges, "edges", "", "dime: rewrite --edges for the budgeted series (covered, all, none; empty = the rewriter's default)")
	fs.StringSliceVar(&d.Policies, "policies", []string{"exact", "hash", "bst", "merger"}, "dime: log policies, one DIME* series each")
	fs.BoolVar(&d.SkipCovered, "skip-covered", true, "dime: add the exact + --skip-covered series")
	fs.BoolVar(&d.Retire, "retire", true, "dime, with --dime-runs 3 or more: add the exact + --skip-covered series whose rewrites from run 3 on also pass --retire-since the log before the run before")
	fs.BoolVar(&d.NoSwitch, "no-switch", true, "dime: add the exact series with STINT_SWITCH=0 (what the off-switch saves)")
	fs.StringVar(&d.Cov, "cov", "bin/cov", "dime: cov command for `cov compare --json` (in-process metrics when it is missing)")
	fs.StringSliceVar(&workloads, "workloads", []string{"gzip", "sqlite", "redis"}, "dime: workloads, in order")
	fs.IntVar(&sqliteRows, "sqlite-rows", 0, "dime: rows of the sqlite3 workload (0 = the script's 200,000)")
	fs.IntVar(&redisN, "redis-requests", 20000, "dime: redis-benchmark -n (requests per test)")
	fs.StringVar(&redisTests, "redis-tests", "set,get,incr,lpush,lpop,sadd,hset,lrange_100", "dime: redis-benchmark -t")
	fs.IntVar(&redisClients, "redis-clients", 0, "dime: redis-benchmark -c (0 = its default, 50)")
	var retireRounds int
	fs.IntVar(&retireRounds, "retire-rounds", 10, "retire: timed rounds (native, then the two run-3 rewrites and the run-4 one)")
	q := benchmarks.QDIME{Name: "issue4"}
	var qApps []string
	var qGzipMB int64
	var qRedisN int
	var qNginx time.Duration
	fs.StringSliceVar(&qApps, "qdime-apps", []string{"gzip", "redis", "nginx"}, "qdime: applications, in order")
	fs.StringSliceVar(&q.Tools, "qdime-tools", []string{"syscall", "call", "branch"}, "qdime: rewrite --tool values")
	fs.IntVar(&q.Runs, "qdime-runs", 2, "qdime: runs under the analyzer per tool (one redundancy log across them)")
	fs.IntVar(&q.NativeRuns, "qdime-native-runs", 2, "qdime: native runs per application")
	fs.IntVar(&q.Controls, "qdime-controls", 1, "qdime: native control runs after each tool's QDIME runs (the noise at the same time)")
	fs.StringVar(&q.Period, "qdime-period", "1s", "qdime: qos --period (the paper: 1s)")
	fs.StringVar(&q.Default, "qdime-default-budget", "10%", "qdime: qos --default-budget")
	fs.StringVar(&q.Qos, "qos", "bin/qos", "qdime: the qos command")
	fs.StringSliceVar(&q.Libs, "qdime-libs", []string{"/usr/lib/x86_64-linux-gnu/libc.so.6"}, "qdime: libraries rewritten with each application (its syscalls are in libc)")
	fs.Int64Var(&qGzipMB, "qdime-gzip-mb", 256, "qdime: gzip input in MiB (native gzip -c takes about 10 s)")
	fs.IntVar(&qRedisN, "qdime-redis-requests", 100000, "qdime: redis-benchmark -n per test")
	fs.DurationVar(&qNginx, "qdime-nginx-time", 12*time.Second, "qdime: wrk -d")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if err := benchmarks.CheckPin(); err != nil {
		return err
	}
	if slices.Contains(o.Only, "qdime") {
		q.Config, q.Results, q.Cov = o.Config, o.Results, d.Cov
		q.Config.Log = stderr
		for _, a := range qApps {
			switch a {
			case "gzip":
				// Table II: 7.5 of 8.26 MB/s native
				q.Apps = append(q.Apps, benchmarks.QoSApp{Workload: &benchmarks.GzipWorkload{MB: qGzipMB}, Threshold: 0.9,
					Why: "the paper's highest gzip threshold, 7.5 MB/s, is 91% of its native 8.26 MB/s"})
			case "redis":
				q.Apps = append(q.Apps, benchmarks.QoSApp{Workload: &benchmarks.RedisWorkload{Requests: qRedisN, Tests: "set,get,incr,lpush,lpop"},
					Threshold: 0.25, Why: "the paper's highest Redis threshold, 44,000 QPS, is 25% of its native 177,667 QPS"})
			case "nginx":
				q.Apps = append(q.Apps, benchmarks.QoSApp{Workload: &benchmarks.NginxWorkload{Duration: qNginx}, Threshold: 0.5,
					Why: "the paper gives Apache's thresholds (3,000-3,400 RPS) but not its native rate; half of native is our choice"})
			default:
				return fmt.Errorf("unknown qdime application %q (want gzip, redis or nginx)", a)
			}
		}
		q.Command = "go run ./benchmarks/cmd/bench " + strings.Join(args, " ")
		return q.Run(ctx, stdout)
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments: %s", strings.Join(fs.Args(), " "))
	}
	dimeWorkloads := func() ([]benchmarks.Workload, error) {
		var ws []benchmarks.Workload
		for _, w := range workloads {
			switch w {
			case "gzip":
				ws = append(ws, &benchmarks.GzipWorkload{MB: o.GzipMB})
			case "sqlite":
				ws = append(ws, &benchmarks.SQLiteWorkload{Script: "benchmarks/workloads/sqlite.sql", Rows: sqliteRows})
			case "redis":
				ws = append(ws, &benchmarks.RedisWorkload{Requests: redisN, Tests: redisTests, Clients: redisClients})
			default:
				return nil, fmt.Errorf("unknown workload %q (want gzip, sqlite or redis)", w)
			}
		}
		return ws, nil
	}
	if slices.Contains(o.Only, "retire") {
		// the suite's parts named beside it run first
		if o.Only = slices.DeleteFunc(o.Only, func(s string) bool { return s == "retire" }); len(o.Only) > 0 {
			o.Config.Log = stderr
			if err := o.Run(ctx, stdout); err != nil {
				return err
			}
		}
		r := benchmarks.Retire{Config: o.Config, Results: o.Results, Rounds: retireRounds, Budget: d.Budget, Period: d.Period,
			Command: "go run ./benchmarks/cmd/bench " + strings.Join(args, " ")}
		r.Config.Log = stderr
		ws, err := dimeWorkloads()
		if err != nil {
			return err
		}
		r.Workloads = ws
		return r.Run(ctx, stdout)
	}
	o.Config.Log = stderr
	dime := slices.Contains(o.Only, "dime")
	if dime {
		o.Only = slices.DeleteFunc(o.Only, func(s string) bool { return s == "dime" })
		if len(o.Only) > 0 {
			if err := o.Run(ctx, stdout); err != nil {
				return err
			}
		}
		d.Config = o.Config
		d.Results = o.Results
		ws, err := dimeWorkloads()
		if err != nil {
			return err
		}
		d.Workloads = ws
		d.Command = "go run ./benchmarks/cmd/bench " + strings.Join(args, " ")
		return d.Run(ctx, stdout)
	}
	return o.Run(ctx, stdout)
}
