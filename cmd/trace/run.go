package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"strings"

	"github.com/spf13/pflag"
	"github.com/stint-project/stint/internal/cli"
)

const mainHelp = `trace shows stint trace files to people.

A rewritten program (see 'rewrite') writes one trace file per process into
$STINT_OUT, named <binary>.<pid>.<monotonic-ns>[.<n>].arrow: an Apache Arrow
IPC stream with one row per event (kind, tid, time, src_module, src,
dst_module, dst, value) and, in its schema metadata, the run (binary, pid,
tool, options, start time) and the module table. Addresses are
module-relative (link addresses), printed as module+offset.

Usage:
  trace cat [--limit N] [--kind K,...] FILE   print the run, modules and events
  trace stats FILE...                          summarise: counts per kind,
                                               module and thread, time span,
                                               batches, how the file ended
  trace log show|check|add|merge ...           show, check, build and merge
                                               redundancy logs (rewrite --log)
  trace merge -o OUT IN...                     merge traces into one, each
                                               row keeping its run
  trace export -f FORMAT -o OUT TRACE...       write pprof, collapsed stacks,
                                               drcov, lcov, parquet or csv
  trace sql QUERY TRACE...                     run SQL over traces (DuckDB:
                                               the trace-sql command)
  trace help [COMMAND]                         show help

Event kinds: jcc-taken, jcc-not-taken, jmp, call, ret, ind-jmp, ind-call,
syscall, block, context (rewrite --context). The runtime's own rows:
period, period-stats, period-qos, period-switch (what the off-switch did),
period-close (how a period's gate closed, the reserve it kept and the
budget used then), run-end, refused-EVENT (an event a redundancy log
refused), and a sampled run's (rewrite --sample) sample-run, sample-set
(a stratum's events and samples in an interval), sample-reader and
sampled-EVENT (a sample); --kind accepts them all.

A file whose process was killed ends in zeros and reads cleanly up to
its last sealed batch; a file cut inside a batch (copied while being
written) reads up to the cut, and both commands say where it is.

Examples:
  trace stats $STINT_OUT/*.arrow
  trace cat --kind syscall --limit 20 gzip.4242.*.arrow

Exit status: 0 ok, 1 error, 2 usage error.
`

// usagef and exitCode: the shared scaffolding of internal/cli.
func usagef(format string, args ...any) error { return cli.Usagef(format, args...) }

func exitCode(err error) int { return cli.ExitCode(err) }

type command struct {
	name, help string
	run        func(ctx context.Context, args []string, stdout io.Writer) error
}

func commands() []command {
	return []command{
		{"cat", catHelp, runCat},
		{"stats", statsHelp, runStats},
		{"merge", mergeHelp, runMerge},
		{"log", logHelp, runLog},
		{"export", exportHelp, runExportCmd},
		{"sql", sqlHelp, runSQLCmd},
	}
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		io.WriteString(stderr, mainHelp)
		return usagef("no command given")
	}
	cli.Subcommands(args, "cat", "stats", "merge", "log", "export", "sql", "help")
	name := args[0]
	switch name {
	case "-h", "--help", "help":
		if len(args) > 1 && name == "help" {
			for _, c := range commands() {
				if c.name == args[1] {
					_, err := io.WriteString(stdout, c.help)
					return err
				}
			}
			var names []string
			for _, c := range commands() {
				names = append(names, c.name)
			}
			return usagef("help: unknown command %q (commands: %s)", args[1], strings.Join(names, ", "))
		}
		_, err := io.WriteString(stdout, mainHelp)
		return err
	}
	for _, c := range commands() {
		if c.name == name {
			err := c.run(ctx, args[1:], stdout)
			if errors.Is(err, pflag.ErrHelp) {
				_, err = io.WriteString(stdout, c.help)
			}
			return err
		}
	}
	return usagef("unknown command %q (run 'trace --help')", name)
}

func parseFlags(fs *pflag.FlagSet, args []string) error { return cli.ParseFlags(fs, "trace", args) }

// fileError prefixes err with the file name, dropping the name that
// *fs.PathError would repeat.
func fileError(name string, err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) && pe.Path == name {
		err = pe.Err
	}
	return fmt.Errorf("%s: %w", name, err)
}

// baseName returns the last element of a module path, for display.
func baseName(p string) string {
	if i := strings.LastIndexByte(p, '/'); i >= 0 && i+1 < len(p) {
		return p[i+1:]
	}
	if p == "" {
		return "?"
	}
	return p
}
