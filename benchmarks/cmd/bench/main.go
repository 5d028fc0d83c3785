// Command bench runs stint's end-to-end benchmarks and writes
// benchmarks/results/<name>.{json,md}.
//
//	go run ./benchmarks/cmd/bench                  # everything (about 15 minutes)
//	go run ./benchmarks/cmd/bench --only rewrite   # rewrite cost and patch coverage only
//	go run ./benchmarks/cmd/bench --only dime      # issue 3: DIME and DIME* (about 40 minutes)
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
	fs.StringVar(&o.Config.WorkDir, "work", "/tmp/stint-bench", "scratch directory")
	fs.IntVar(&o.Config.Runs, "runs", 5, "timed runs per fast variant (median reported)")
	fs.StringSliceVar(&o.Only, "only", nil, "run only these parts: rewrite, gzip, sqlite, dime (dime runs only when named)")
	fs.StringVar(&o.Results, "results", "benchmarks/results", "directory for the results")
	fs.Int64Var(&o.GzipMB, "gzip-mb", 64, "gzip input size in MiB")
	fs.IntVar(&o.EveryRuns, "every-runs", 3, "timed runs of the --every variants (0 = leave them out)")
	fs.IntVar(&o.CallgrindRuns, "callgrind-runs", 3, "timed runs of callgrind (0 = leave it out)")
	d := benchmarks.DIME{Name: "issue3"}
	var workloads []string
	var sqliteRows, redisN, redisClients int
	var redisTests string
	fs.IntVar(&d.Runs, "dime-runs", 8, "dime: runs per budgeted series")
	fs.IntVar(&d.NativeRuns, "dime-native-runs", 3, "dime: native runs before the series (one more precedes every traced run)")
	fs.StringVar(&d.Budget, "budget", "10%", "dime: rewrite --budget (fraction of the period or a duration)")
	fs.StringVar(&d.Period, "period", "100ms", "dime: rewrite --period")
	fs.StringSliceVar(&d.Policies, "policies", []string{"exact", "hash", "bst", "merger"}, "dime: log policies, one DIME* series each")
	fs.BoolVar(&d.SkipCovered, "skip-covered", true, "dime: add the exact + --skip-covered series")
	fs.StringVar(&d.Cov, "cov", "bin/cov", "dime: cov command for `cov compare --json` (in-process metrics when it is missing)")
	fs.StringSliceVar(&workloads, "workloads", []string{"gzip", "sqlite", "redis"}, "dime: workloads, in order")
	fs.IntVar(&sqliteRows, "sqlite-rows", 0, "dime: rows of the sqlite3 workload (0 = the script's 200,000)")
	fs.IntVar(&redisN, "redis-requests", 20000, "dime: redis-benchmark -n (requests per test)")
	fs.StringVar(&redisTests, "redis-tests", "set,get,incr,lpush,lpop,sadd,hset,lrange_100", "dime: redis-benchmark -t")
	fs.IntVar(&redisClients, "redis-clients", 0, "dime: redis-benchmark -c (0 = its default, 50)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments: %s", strings.Join(fs.Args(), " "))
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
		for _, w := range workloads {
			switch w {
			case "gzip":
				d.Workloads = append(d.Workloads, &benchmarks.GzipWorkload{MB: o.GzipMB})
			case "sqlite":
				d.Workloads = append(d.Workloads, &benchmarks.SQLiteWorkload{Script: "benchmarks/workloads/sqlite.sql", Rows: sqliteRows})
			case "redis":
				d.Workloads = append(d.Workloads, &benchmarks.RedisWorkload{Requests: redisN, Tests: redisTests, Clients: redisClients})
			default:
				return fmt.Errorf("unknown workload %q (want gzip, sqlite or redis)", w)
			}
		}
		d.Command = "go run ./benchmarks/cmd/bench " + strings.Join(args, " ")
		return d.Run(ctx, stdout)
	}
	return o.Run(ctx, stdout)
}
