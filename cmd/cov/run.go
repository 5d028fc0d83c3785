// Command cov compares budgeted runs of a program with a full run of it
// (DIME* metrics; see package analysis/cov for the definitions).
//
//	$ cov compare run1.arrow run2.arrow full.arrow
//	full run   full.arrow: 10 distinct events
//	coverage   70.0% after 2 runs (7 of 10; 1 extra event the full run lacks)
//	run  file       events  coverage  cumulative  FP      FN      overshoots  median µs  p99 µs  max µs  slowdown
//	1    run1.arrow 5       40.0%     40.0%       0.000   1.000   2/3         2.0        5.0     5.0     1.10x
//	2    run2.arrow 4       40.0%     70.0%       0.250   0.500   0/0         -          -       -       -
//	...
//
// Exit status: 0 ok, 1 bad data (damaged traces, different binaries),
// 2 usage error.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"text/tabwriter"

	"github.com/spf13/pflag"
	"github.com/stint-project/stint/analysis/cov"
	"github.com/stint-project/stint/analysis/symbols"
	"github.com/stint-project/stint/internal/cli"
)

const mainHelp = `cov measures what budgeted stint runs recorded against a full run.

Usage:
  cov compare [--json] [--native SECONDS] [--functions N] RUN.arrow... FULL.arrow
  cov help [COMMAND]

Exit status: 0 ok, 1 bad data, 2 usage error.
`

const compareHelp = `Usage: cov compare [--json] [--native SECONDS] [--functions N] RUN.arrow... FULL.arrow

Compare runs (in the order given) with the full run (the last argument,
traced without a budget). Any argument may be a merged trace ('trace
merge'); its runs count as separate runs, in order.

A distinct event is a (source module build-id, src, destination module
build-id, dst, kind) tuple of an event row (syscalls: the syscall number
instead of dst); budget and run-end records are not events. F is the full
run's distinct events, R_i those of run i.

  coverage             |R_i ∩ F| / |F|
  cumulative coverage  |(R_1 ∪ … ∪ R_i) ∩ F| / |F|  (DIME*'s Figure 6)
  extra                events of the runs that the full run lacks: listed
                       as "extra", never counted as coverage
  FP (false positive)  |R_i ∩ (R_1 ∪ … ∪ R_{i-1})| / |R_i|: share of what
                       run i recorded that an earlier run had recorded
  FN (false negative)  |X_i \ (R_1 ∪ … ∪ R_{i-1})| / |X_i|, X_i the events
                       run i's redundancy log refused (the runtime writes
                       each refusal once): share of the refusals that no
                       earlier run had recorded (the paper's FN; 0 for the
                       exact policy, which refuses only logged outcomes)
  missed               |F \ (R_1 ∪ … ∪ R_i)| / |F \ R_i|: of the full run's
                       events run i did not record for any reason (log or
                       spent budget), the share no run so far recorded
  overshoots           periods with used > granted; median, p99 and max of
                       used - granted (µs) over those periods
  slowdown             run time (run-end record) / full run's time, and /
                       --native if given

Then coverage by module and by function (names from the module files'
symbol tables and DWARF, or debug files under /usr/lib/debug/.build-id;
without them, 4 KiB address ranges).

Traces of different executables (build-id) or damaged traces are an
error (exit 1); a trace cut short by a crash is compared up to its last
complete batch, with a warning.

Flags:
  --json            JSON output: keys coverage, full_events, covered,
                    extra, runs (each with coverage, cumulative_coverage,
                    false_positive_ratio, false_negative_ratio,
                    overshoot_p99_us, ...), overshoot, modules, functions
  --native SECONDS  native run time, for slowdowns against native
  --functions N     functions in the table, least covered first (default
                    20; 0: none; -1: all)
`

// usagef and exitCode: the shared scaffolding of internal/cli.
func usagef(format string, args ...any) error { return cli.Usagef(format, args...) }

func exitCode(err error) int { return cli.ExitCode(err) }

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		io.WriteString(stderr, mainHelp)
		return usagef("no command given")
	}
	cli.Subcommands(args, "compare", "help")
	switch args[0] {
	case "-h", "--help":
		_, err := io.WriteString(stdout, mainHelp)
		return err
	case "help":
		if len(args) > 1 && args[1] == "compare" {
			_, err := io.WriteString(stdout, compareHelp)
			return err
		}
		_, err := io.WriteString(stdout, mainHelp)
		return err
	case "compare":
		err := runCompare(ctx, args[1:], stdout)
		if errors.Is(err, pflag.ErrHelp) {
			_, err = io.WriteString(stdout, compareHelp)
		}
		return err
	}
	return usagef("unknown command %q (run 'cov --help')", args[0])
}

func runCompare(ctx context.Context, args []string, stdout io.Writer) error {
	fs := pflag.NewFlagSet("compare", pflag.ContinueOnError)
	fs.SetOutput(io.Discard)
	asJSON := fs.Bool("json", false, "")
	native := fs.Float64("native", 0, "")
	nfuncs := fs.Int("functions", 20, "")
	cli.CompleteFlags(fs)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return err
		}
		return usagef("compare: %v (run 'cov compare --help')", err)
	}
	if fs.NArg() < 2 {
		return usagef("compare: want at least one RUN and the FULL trace (run 'cov compare --help')")
	}
	if *native < 0 {
		return usagef("compare: --native %v: want seconds >= 0", *native)
	}
	files := fs.Args()
	rep, err := cov.Compare(ctx, files[:len(files)-1], files[len(files)-1], cov.Options{
		NativeNS: uint64(*native * 1e9),
		Resolver: symbols.NewResolver(),
	})
	if err != nil {
		return err
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	return writeTable(stdout, rep, *nfuncs)
}

func pct(v float64) string { return fmt.Sprintf("%.1f%%", 100*v) }

func writeTable(out io.Writer, rep *cov.Report, nfuncs int) error {
	w := bufio.NewWriter(out)
	for _, s := range rep.Warnings {
		fmt.Fprintf(w, "warning    %s\n", s)
	}
	fmt.Fprintf(w, "full run   %s: %d distinct events", filepath.Base(rep.FullFile), rep.FullEvents)
	if rep.FullTimeNS > 0 {
		fmt.Fprintf(w, ", %.3fs", float64(rep.FullTimeNS)/1e9)
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "coverage   %s after %d runs (%d of %d; %d extra events the full run lacks)\n",
		pct(rep.Coverage), len(rep.Runs), rep.Covered, rep.FullEvents, rep.Extra)
	o := rep.Overshoot
	fmt.Fprintf(w, "overshoot  %d of %d periods", o.Overshoots, o.Periods)
	if o.Overshoots > 0 {
		fmt.Fprintf(w, ": median %.1f µs, p99 %.1f µs, max %.1f µs", o.MedianUS, o.P99US, o.MaxUS)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "run\tfile\tevents\tcoverage\tcumulative\tFP\tFN\tmissed\textra\tovershoots\tmedian µs\tp99 µs\tmax µs\tslowdown\tvs native")
	for i, r := range rep.Runs {
		name := filepath.Base(r.File)
		if countFile(rep, r.File) > 1 {
			name = fmt.Sprintf("%s#%d", name, r.Run)
		}
		us := func(v float64) string {
			if r.Overshoots == 0 {
				return "-"
			}
			return fmt.Sprintf("%.1f", v)
		}
		sd := func(v *float64) string {
			if v == nil {
				return "-"
			}
			return fmt.Sprintf("%.2fx", *v)
		}
		fmt.Fprintf(tw, "%d\t%s\t%d\t%s\t%s\t%.3f\t%.3f\t%.3f\t%d\t%d/%d\t%s\t%s\t%s\t%s\t%s\n",
			i+1, name, r.Events, pct(r.Coverage), pct(r.CumulativeCoverage), r.FalsePositiveRatio, r.FalseNegativeRatio, r.MissedRatio,
			r.Extra, r.Overshoots, r.Periods, us(r.MedianUS), us(r.P99US), us(r.MaxUS), sd(r.SlowdownFull), sd(r.SlowdownNative))
	}
	tw.Flush()
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "module\tcovered\tfull\tcoverage\tsymbols")
	for _, m := range rep.Modules {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%s\n", m.Module, m.Covered, m.Full, pct(m.Coverage), m.Symbols)
	}
	tw.Flush()
	if nfuncs != 0 && len(rep.Functions) > 0 {
		fs := append([]cov.FuncCov(nil), rep.Functions...)
		sortFuncs(fs)
		if nfuncs > 0 && len(fs) > nfuncs {
			fs = fs[:nfuncs]
		}
		fmt.Fprintln(w)
		tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "function (least covered first)\tmodule\tcovered\tfull\tcoverage")
		for _, f := range fs {
			fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\n", f.Function, filepath.Base(f.Module), f.Covered, f.Full, pct(f.Coverage))
		}
		tw.Flush()
	}
	return w.Flush()
}

func countFile(rep *cov.Report, file string) int {
	n := 0
	for _, r := range rep.Runs {
		if r.File == file {
			n++
		}
	}
	return n
}
