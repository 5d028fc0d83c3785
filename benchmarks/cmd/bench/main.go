// Command bench runs stint's end-to-end benchmarks and writes
// benchmarks/results/<name>.{json,md}.
//
//	go run ./benchmarks/cmd/bench                  # everything (about 15 minutes)
//	go run ./benchmarks/cmd/bench --only rewrite   # rewrite cost and patch coverage only
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"

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
	fs.StringSliceVar(&o.Only, "only", nil, "run only these parts: rewrite, gzip, sqlite")
	fs.StringVar(&o.Results, "results", "benchmarks/results", "directory for the results")
	fs.Int64Var(&o.GzipMB, "gzip-mb", 64, "gzip input size in MiB")
	fs.IntVar(&o.EveryRuns, "every-runs", 3, "timed runs of the --every variants (0 = leave them out)")
	fs.IntVar(&o.CallgrindRuns, "callgrind-runs", 3, "timed runs of callgrind (0 = leave it out)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	o.Config.Log = stderr
	return o.Run(ctx, stdout)
}
