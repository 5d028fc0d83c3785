package report

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
	"strings"

	"github.com/spf13/pflag"
	"github.com/stint-project/stint/formats"
)

// DefaultCells returns the commands notebook cells can run:
//
//	cov compare [--functions N] [--native SECONDS] RUN... FULL
//	plot coverage [--full FULL] RUN...
//	plot budget TRACE...
//	plot qos TRACE...
//	plot overshoot TRACE...
//	trace stats TRACE...
//	report auto [--full FULL] [--native SECONDS] [--functions N] TRACE...
//	cct build [--top N] TRACE...
//	cct compare [--missing N] A B
//
// A new command plugs in by appending a [CellCommand] (a name and a
// [CellFunc] that returns blocks) to this list or to
// NotebookOptions.Cells.
func DefaultCells() []CellCommand {
	return append([]CellCommand{
		{Name: "cov compare", Usage: "cov compare [--functions N] [--native SECONDS] RUN... FULL", Run: cellCovCompare},
		{Name: "plot coverage", Usage: "plot coverage [--full FULL] RUN...", Run: cellPlot("coverage")},
		{Name: "plot budget", Usage: "plot budget TRACE...", Run: cellPlot("budget")},
		{Name: "plot qos", Usage: "plot qos TRACE...", Run: cellPlot("qos")},
		{Name: "plot overshoot", Usage: "plot overshoot TRACE...", Run: cellPlot("overshoot")},
		{Name: "trace stats", Usage: "trace stats TRACE...", Run: cellTraceStats},
		{Name: "report auto", Usage: "report auto [--full FULL] [--native SECONDS] [--functions N] TRACE...", Run: cellAuto},
	}, cctCells()...)
}

// parse parses a cell's flags (errors wrap errUsage) and returns its
// file arguments, expanded by [CellEnv.Paths].
func (e *CellEnv) parse(name string, args []string, def func(*pflag.FlagSet)) ([]string, error) {
	fs := pflag.NewFlagSet(name, pflag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	if def != nil {
		def(fs)
	}
	if err := fs.Parse(args); err != nil {
		return nil, fmt.Errorf("%w: %v", errUsage, err)
	}
	return e.Paths(fs.Args())
}

func (e *CellEnv) autoOptions() AutoOptions {
	return AutoOptions{Resolver: e.Resolver, Progress: e.Progress}
}

// one resolves a flag's file argument like [CellEnv.Paths]; a pattern
// must match exactly one file. "" stays "".
func (e *CellEnv) one(flag, p string) (string, error) {
	if p == "" {
		return "", nil
	}
	m, err := e.Paths([]string{p})
	if err != nil {
		return "", fmt.Errorf("--%s: %w", flag, err)
	}
	if len(m) != 1 {
		return "", fmt.Errorf("--%s %q matches %d files, want one", flag, p, len(m))
	}
	return m[0], nil
}

func cellCovCompare(ctx context.Context, env *CellEnv, args []string) ([]Block, error) {
	var nfuncs int
	var native float64
	files, err := env.parse("cov compare", args, func(fs *pflag.FlagSet) {
		fs.IntVar(&nfuncs, "functions", 20, "")
		fs.Float64Var(&native, "native", 0, "")
	})
	if err != nil {
		return nil, err
	}
	if len(files) < 2 {
		return nil, fmt.Errorf("%w: want at least one RUN and the FULL trace", errUsage)
	}
	if native < 0 {
		return nil, fmt.Errorf("%w: --native %v: want seconds >= 0", errUsage, native)
	}
	opts := env.autoOptions()
	opts.Full = files[len(files)-1]
	opts.NativeNS = uint64(native * 1e9)
	opts.Functions = nfuncs
	a, err := newAuto(ctx, files[:len(files)-1], opts)
	if err != nil {
		return nil, err
	}
	rep := a.cov
	o := rep.Overshoot
	stats := &Stats{Items: []Stat{
		{Label: fmt.Sprintf("coverage after %d run%s", len(rep.Runs), plural(len(rep.Runs))), Value: pct(rep.Coverage), Note: fmt.Sprintf("%d of %d distinct events", rep.Covered, rep.FullEvents)},
		{Label: "extra events", Value: fmt.Sprint(rep.Extra), Note: "not in the full run"},
		{Label: "periods overshot", Value: fmt.Sprintf("%d / %d", o.Overshoots, o.Periods)},
	}}
	if o.Overshoots > 0 {
		stats.Items = append(stats.Items, Stat{Label: "overshoot p99", Value: fmt.Sprintf("%.1f µs", o.P99US)})
	}
	blocks := []Block{stats}
	for _, w := range rep.Warnings {
		blocks = append(blocks, &Note{Kind: "warn", Text: w})
	}
	cs, err := a.coverage()
	if err != nil {
		return nil, err
	}
	for _, b := range cs.Blocks {
		if _, ok := b.(*Figure); !ok { // tables only: 'plot coverage' draws
			blocks = append(blocks, b)
		}
	}
	if nfuncs != 0 {
		fsec, err := a.functions()
		if err != nil {
			return nil, err
		}
		blocks = append(blocks, &Heading{Text: "Least covered functions"})
		blocks = append(blocks, fsec.Blocks...)
	}
	return blocks, nil
}

func cellPlot(what string) CellFunc {
	return func(ctx context.Context, env *CellEnv, args []string) ([]Block, error) {
		var full string
		files, err := env.parse("plot "+what, args, func(fs *pflag.FlagSet) {
			if what == "coverage" {
				fs.StringVar(&full, "full", "", "")
			}
		})
		if err != nil {
			return nil, err
		}
		if len(files) == 0 {
			return nil, fmt.Errorf("%w: no traces given", errUsage)
		}
		opts := env.autoOptions()
		if opts.Full, err = env.one("full", full); err != nil {
			return nil, err
		}
		a, err := newAuto(ctx, files, opts)
		if err != nil {
			return nil, err
		}
		var s Section
		switch what {
		case "coverage":
			s, err = a.coverage()
			if err == nil {
				// The figure, and what it is measured against.
				var bs []Block
				for _, b := range s.Blocks {
					if f, ok := b.(*Figure); ok {
						bs = append(bs, f)
					}
				}
				if a.cov == nil {
					bs = append(bs, &Note{Text: "No full run given (--full): coverage is against the union of these runs."})
				}
				return bs, nil
			}
		case "budget":
			s, err = a.budget()
		case "qos":
			s, err = a.qos()
		case "overshoot":
			s, err = a.overshoot()
		}
		return s.Blocks, err
	}
}

func cellAuto(ctx context.Context, env *CellEnv, args []string) ([]Block, error) {
	var full string
	var native float64
	var nfuncs int
	files, err := env.parse("report auto", args, func(fs *pflag.FlagSet) {
		fs.StringVar(&full, "full", "", "")
		fs.Float64Var(&native, "native", 0, "")
		fs.IntVar(&nfuncs, "functions", 20, "")
	})
	if err != nil {
		return nil, err
	}
	opts := env.autoOptions()
	opts.NativeNS, opts.Functions = uint64(max(native, 0)*1e9), nfuncs
	if opts.Full, err = env.one("full", full); err != nil {
		return nil, err
	}
	a, err := newAuto(ctx, files, opts)
	if err != nil {
		return nil, err
	}
	d, err := a.document()
	if err != nil {
		return nil, err
	}
	blocks := []Block{&Stats{Items: d.Summary}}
	for _, s := range d.Sections {
		blocks = append(blocks, &Heading{Text: s.Title})
		if s.Intro != "" {
			blocks = append(blocks, &Paragraph{Text: s.Intro})
		}
		blocks = append(blocks, s.Blocks...)
	}
	return blocks, nil
}

// cellTraceStats: one row per run (file, binary, pid, tool, how the file
// ended, rows, events, distinct events, records, time span), then the
// rows per kind.
func cellTraceStats(ctx context.Context, env *CellEnv, args []string) ([]Block, error) {
	files, err := env.parse("trace stats", args, nil)
	if err != nil {
		return nil, err
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("%w: no traces given", errUsage)
	}
	l := NewLoader()
	if env.Progress != nil {
		l.Progress = newBytesBar(env.Progress)
		defer l.Progress.Done()
	}
	runs, err := l.LoadFiles(ctx, files)
	if err != nil {
		return nil, err
	}
	t := &Table{Title: "Traces", Columns: []Column{{Name: "run"}, {Name: "binary"}, {Name: "pid", Numeric: true}, {Name: "tool"}, {Name: "ended"},
		{Name: "events", Numeric: true}, {Name: "distinct", Numeric: true}, {Name: "records", Numeric: true}, {Name: "time span", Numeric: true}}}
	var kinds []int
	for k := range 256 {
		for _, r := range runs {
			if r.Kinds[k] > 0 {
				kinds = append(kinds, k)
				break
			}
		}
	}
	var blocks []Block
	for _, r := range runs {
		span := uint64(0)
		if r.Rows > 0 {
			span = r.LastNS - r.FirstNS
		}
		ended := r.End.String()
		t.Rows = append(t.Rows, []Cell{Text(r.Label()), Text(filepath.Base(r.Info.Binary)), Textf("%d", r.Info.PID), Text(r.Info.Tool), Text(ended),
			Textf("%d", r.Events), Textf("%d", r.Distinct), Textf("%d", r.Rows-r.Events), Text(fmtNS(span))})
		if r.Warning != "" {
			blocks = append(blocks, &Note{Kind: "warn", Text: r.Warning})
		}
	}
	kt := &Table{Title: "Rows per kind", Columns: []Column{{Name: "run"}}}
	for _, k := range kinds {
		kt.Columns = append(kt.Columns, Column{Name: formats.Kind(k).String(), Numeric: true})
	}
	for _, r := range runs {
		row := []Cell{Text(r.Label())}
		for _, k := range kinds {
			row = append(row, Textf("%d", r.Kinds[k]))
		}
		kt.Rows = append(kt.Rows, row)
	}
	kt.Caption = "Event kinds (" + strings.Join(eventKindNames(), ", ") + ") and the runtime's records (period, period-stats, period-qos, run-end, refused-*)."
	return append([]Block{t, kt}, blocks...), nil
}

func eventKindNames() []string {
	var out []string
	for k := formats.KindJccTaken; k <= formats.MaxKind; k++ {
		out = append(out, k.String())
	}
	return out
}
