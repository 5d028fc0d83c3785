package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/pflag"
	"github.com/stint-project/stint/analysis/report"
	"github.com/stint-project/stint/internal/cli"
	"github.com/stint-project/stint/internal/outfile"
)

const mainHelp = `report turns stint traces into one self-contained HTML page (inline CSS
and SVG figures, no script, nothing fetched), to read in any browser.

Usage:
  report auto [--full FULL] [--native SECONDS] -o OUT.html TRACE...
                       a report of budgeted runs: coverage over runs,
                       budget and QoS per period, overshoots, slowdowns,
                       the least covered functions
  report render -o OUT.html NOTEBOOK.md
                       run a markdown notebook's stint cells and render it
  report help [COMMAND]

Exit status: 0 ok, 1 error (render: also when a cell failed, after the
page is written), 2 usage error.
`

const autoHelp = `Usage: report auto [flags] -o OUT.html TRACE...

Read the traces (trace files or merged traces; runs count in the order
given) and write a report:

  summary              coverage after the last run, overshoots, slowdown
  coverage over runs   cumulative coverage of the full run after each run
                       (DIME*'s Figure 6) and each run's own; without
                       --full, against the union of the runs' events
  budget per period    granted and used per period over time, per run
  QoS                  the QoS metric against its threshold (period-qos
                       records), or "no QoS data"
  overshoot            histogram of used - granted over periods that
                       overshot
  slowdown             run times from the run-end records; a trace without
                       one falls back to its time span, and the table
                       says so
  functions            the least covered functions of the full run

Flags:
  -o, --output FILE    the HTML file to write ("-": standard output)
      --full FILE      the full (unbudgeted) run to measure coverage against
      --native SECONDS native run time, for slowdowns against native
      --functions N    rows of the least-covered table (default 20; -1: all)
      --title TEXT     page title (default: from the traced binary)
      --run-figures N  per-run budget and QoS figures at most (default 6)

Progress is drawn on standard error when it is a terminal.
`

const renderHelp = "Usage: report render [flags] -o OUT.html NOTEBOOK.md\n\n" +
	`Render a markdown notebook. Fenced code blocks whose info string starts
with "stint" are cells: they run in order, in this process, and are
replaced by their tables and figures; everything else is rendered as
markdown (GitHub flavour; raw HTML is left out). The first level-1
heading is the page title.

    ` + "```" + `stint cov compare runs/run*.arrow full.arrow
    ` + "```" + `

    ` + "```" + `stint plot coverage --full full.arrow
    # one or more arguments per line; lines starting with # are comments
    runs/run1.arrow
    runs/run2.arrow
    ` + "```" + `

The command line is the info string's words after "stint", then the
body's; '...' and "..." quote. Relative paths are relative to the
notebook's directory, and *, ? and [...] patterns are expanded (sorted).

Cells:
  cov compare [--functions N] [--native SECONDS] RUN... FULL
  plot coverage [--full FULL] RUN...
  plot budget TRACE...
  plot qos TRACE...
  plot overshoot TRACE...
  trace stats TRACE...
  report auto [--full FULL] [--native SECONDS] [--functions N] TRACE...
  cct build [--top N] TRACE...
  cct compare [--missing N] A B      (A, B: cct files or traces)

A cell that fails shows its error in the page; the page is still
written, and the command exits with status 1.

Flags:
  -o, --output FILE    the HTML file to write ("-": standard output)
`

type command struct {
	name, help string
	run        func(ctx context.Context, args []string, stdout, stderr io.Writer) error
}

func commands() []command {
	return []command{
		{"auto", autoHelp, runAuto},
		{"render", renderHelp, runRender},
	}
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		io.WriteString(stderr, mainHelp)
		return cli.Usagef("no command given")
	}
	cli.Subcommands(args, "auto", "render", "help")
	switch args[0] {
	case "-h", "--help", "help":
		if len(args) > 1 && args[0] == "help" {
			for _, c := range commands() {
				if c.name == args[1] {
					_, err := io.WriteString(stdout, c.help)
					return err
				}
			}
			return cli.Usagef("help: unknown command %q (commands: auto, render)", args[1])
		}
		_, err := io.WriteString(stdout, mainHelp)
		return err
	}
	for _, c := range commands() {
		if c.name == args[0] {
			err := c.run(ctx, args[1:], stdout, stderr)
			if errors.Is(err, pflag.ErrHelp) {
				_, err = io.WriteString(stdout, c.help)
			}
			return err
		}
	}
	return cli.Usagef("unknown command %q (run 'report --help')", args[0])
}

func parseFlags(fs *pflag.FlagSet, args []string) error { return cli.ParseFlags(fs, "report", args) }

func runAuto(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := pflag.NewFlagSet("auto", pflag.ContinueOnError)
	out := fs.StringP("output", "o", "", "")
	full := fs.String("full", "", "")
	native := fs.Float64("native", 0, "")
	nfuncs := fs.Int("functions", 20, "")
	title := fs.String("title", "", "")
	figs := fs.Int("run-figures", 6, "")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	switch {
	case *out == "":
		return cli.Usagef("auto: no output file given (-o OUT.html)")
	case fs.NArg() == 0:
		return cli.Usagef("auto: no traces given (run 'report auto --help')")
	case *native < 0:
		return cli.Usagef("auto: --native %v: want seconds >= 0", *native)
	case *nfuncs == 0 || *nfuncs < -1:
		return cli.Usagef("auto: --functions %d: want N >= 1, or -1 for all", *nfuncs)
	case *figs < 1:
		return cli.Usagef("auto: --run-figures %d: want at least 1", *figs)
	}
	doc, err := report.Auto(ctx, fs.Args(), report.AutoOptions{
		Full: *full, NativeNS: uint64(*native * 1e9), Functions: *nfuncs, Title: *title,
		RunFigures: *figs, Progress: stderr, Now: time.Now(),
	})
	if err != nil {
		return err
	}
	if err := writePage(*out, stdout, doc); err != nil {
		return err
	}
	if *out != "-" {
		fmt.Fprintf(stdout, "%s: %d trace file%s, %d sections\n", *out, fs.NArg(), plural(fs.NArg()), len(doc.Sections))
	}
	return nil
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

func runRender(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := pflag.NewFlagSet("render", pflag.ContinueOnError)
	out := fs.StringP("output", "o", "", "")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	switch {
	case *out == "":
		return cli.Usagef("render: no output file given (-o OUT.html)")
	case fs.NArg() != 1:
		return cli.Usagef("render: want one NOTEBOOK.md (run 'report render --help')")
	}
	name := fs.Arg(0)
	src, err := os.ReadFile(name)
	if err != nil {
		return err
	}
	doc, cellErr := report.RenderNotebook(ctx, src, report.NotebookOptions{
		Dir: filepath.Dir(name), Name: name, Progress: stderr, Now: time.Now(),
	})
	var failed *report.CellsFailedError
	if cellErr != nil && !errors.As(cellErr, &failed) {
		return cellErr
	}
	if err := writePage(*out, stdout, doc); err != nil {
		return err
	}
	if failed != nil {
		return fmt.Errorf("%s: %w", name, cellErr)
	}
	return nil
}

// writePage writes the page whole or not at all (internal/outfile), so a
// reader never sees half a page ("-": to stdout).
func writePage(name string, stdout io.Writer, doc *report.Document) error {
	if name == "-" {
		return doc.WriteHTML(stdout)
	}
	if err := outfile.Write(name, 0o644, doc.WriteHTML); err != nil {
		return fmt.Errorf("write %s: %w", name, err)
	}
	return nil
}
