package main

import (
	"context"
	"fmt"
	"io"
	"os"

	"github.com/spf13/pflag"
	"github.com/stint-project/stint/analysis/merge"
	"golang.org/x/sys/unix"
)

const mergeHelp = `Usage: trace merge -o OUT IN...

Merge trace files (or merged traces) into one merged trace OUT: the union
of their runs, in the order given, each row keeping the run it came from.
OUT is an Arrow IPC stream any Arrow reader opens: the trace columns plus
a uint16 "run" column; its schema metadata lists the runs (file, run
metadata, module load bases) and one module table unified by build-id.
The runs of a merged input are renumbered after those before it. 'cov
compare' counts each run of a merged trace as a separate run.

An input cut short (a crash, or copied while being written) contributes
its complete batches and is reported; any other damage is an error
naming the file, and OUT is not written. Memory holds one batch at a
time. Progress is shown when standard output is a terminal.

Flags:
  -o, --output FILE   the merged trace to write (required)
`

func runMerge(ctx context.Context, args []string, stdout io.Writer) error {
	fs := pflag.NewFlagSet("merge", pflag.ContinueOnError)
	out := fs.StringP("output", "o", "", "")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *out == "" {
		return usagef("merge: no output file given: -o OUT (run 'trace merge --help')")
	}
	if fs.NArg() == 0 {
		return usagef("merge: no input files given (run 'trace merge --help')")
	}
	var opts []merge.Option
	if f, ok := stdout.(*os.File); ok && isTerminal(f) {
		opts = append(opts, merge.WithProgress(progress(f)))
	}
	var st merge.Stats
	err := writeAtomic(*out, func(w io.Writer) (err error) {
		st, err = merge.Merge(ctx, w, fs.Args(), opts...)
		return err
	})
	if len(opts) > 0 {
		fmt.Fprint(stdout, "\r\033[K")
	}
	if err != nil {
		return err
	}
	for _, in := range st.Inputs {
		if in.Cut != nil {
			fmt.Fprintf(stdout, "%s: cut short (%v): merged its %d rows before the cut\n", in.File, in.Cut, in.Rows)
		}
		if in.UnknownModules > 0 {
			fmt.Fprintf(stdout, "%s: %d module ids not in its module table, written as no module\n", in.File, in.UnknownModules)
		}
	}
	_, err = fmt.Fprintf(stdout, "%s: %d runs from %d files, %d rows, %d modules\n", *out, st.Runs, len(st.Inputs), st.Rows, st.Modules)
	return err
}

func isTerminal(f *os.File) bool {
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

func progress(w io.Writer) func(done, total int64) {
	last := -1
	return func(done, total int64) {
		if total <= 0 {
			return
		}
		p := int(100 * done / total)
		if p != last {
			last = p
			fmt.Fprintf(w, "\rmerging: %3d%%", p)
		}
	}
}
