package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"

	"github.com/spf13/pflag"
	"github.com/stint-project/stint/analysis/merge"
	"github.com/stint-project/stint/analysis/sample"
	"github.com/stint-project/stint/analysis/symbols"
	"github.com/stint-project/stint/formats"
	"github.com/stint-project/stint/formats/export"
	"github.com/stint-project/stint/internal/outfile"
)

const exportHelp = `Usage: trace export --format FORMAT -o OUT TRACE...

Write traces (trace files or merged traces; several are combined, each
run kept apart) in another tool's format, with function names and
file:line from the traced modules' symbols and DWARF line tables (from
the module file named in the trace, or its separate debug file found by
build-id under --debug-dir).

Formats:
  pprof      gzip'd profile.proto: go tool pprof -top/-traces/-http OUT.
             Call traces (rewrite --tool call) give call stacks rebuilt
             per thread (value: calls into each context); other traces
             give events per location.
  collapsed  folded stacks "main;f;g 12", for flamegraph.pl or speedscope
             (call traces; others give "module;function N").
  drcov      DynamoRIO drcov coverage (version 2) for Lighthouse or bncov:
             blocks start at branch destinations and block events and run
             to the next control transfer, decoded from the module's
             original code (stint's patches undone); size 1 when the
             module file cannot be read.
  lcov       lcov tracefile for genhtml: every line with code per source
             file (0 when it did not run), functions; a module with
             symbols but no DWARF lines gets one record in which line i
             is its i-th function (genhtml --no-source).
  parquet    every row with the trace's columns, run, kind name and the
             functions at src and dst; beside OUT, OUT's name with
             .modules.parquet and .runs.parquet instead of .parquet:
             the module table (id as in src_module and dst_module) and
             the run table (run as in the run column).
  csv        a header and one row per event: run, kind, tid, time,
             src/dst as module+0xoffset with function and file:line,
             value.
  arrow      parquet's table as an Arrow IPC stream (pyarrow, polars,
             DuckDB's Arrow readers), the names dictionary-encoded,
             without the side tables.

In the runtime's default mode each distinct event is recorded once per
run, so counts mean "seen"; rewrite with --every for real counts. A
sampled run's samples (rewrite --sample) count as the events they stand
for (their stratum's events in their interval over its samples), read
in a first pass; a sampled call trace has no returns, so its stacks are
caller -> callee.
An input cut short contributes its complete batches and is reported.
Memory grows with distinct locations, blocks and call contexts, not with
events. Progress is shown when standard error is a terminal.

Flags:
  -f, --format FORMAT    pprof, collapsed, drcov, lcov, parquet, csv or arrow (required)
  -o, --output FILE      the file to write ("-": standard output) (required)
      --debug-dir DIR    separate debug files by build-id
                         (default /usr/lib/debug/.build-id)
      --max-depth N      call stack depth kept; deeper calls are folded
                         into the frame at N (default 1024)
      --name-table FILE  arrow: the name columns as int32 indices into a
                         table of names written to FILE once the rows are
                         (Parquet: id, name), not as dictionaries; an
                         engine that stores the rows then keeps a number
                         per row, not a string (trace sql does this)
      --no-symbols       addresses only: read no module files

Examples:
  trace export -f pprof -o calls.pb.gz $STINT_OUT/*.arrow && go tool pprof -top calls.pb.gz
  trace export -f collapsed -o - run.arrow | flamegraph.pl > calls.svg
  trace export -f lcov -o cov.info $STINT_OUT/*.arrow && genhtml -o html cov.info
`

func runExportCmd(ctx context.Context, args []string, stdout io.Writer) error {
	return runExport(ctx, args, stdout, os.Stderr)
}

// formatValue is a pflag.Value for --format.
type formatValue struct{ f export.Format }

func (v *formatValue) String() string {
	if v.f == 0 {
		return ""
	}
	return v.f.String()
}
func (v *formatValue) Set(s string) (err error) { v.f, err = export.ParseFormat(s); return err }
func (v *formatValue) Type() string             { return "format" }

var _ pflag.Value = (*formatValue)(nil)

func runExport(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := pflag.NewFlagSet("export", pflag.ContinueOnError)
	var format formatValue
	fs.VarP(&format, "format", "f", "")
	out := fs.StringP("output", "o", "", "")
	debugDir := fs.String("debug-dir", "/usr/lib/debug/.build-id", "")
	maxDepth := fs.Int("max-depth", export.DefaultMaxDepth, "")
	noSyms := fs.Bool("no-symbols", false, "")
	nameTable := fs.String("name-table", "", "")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	switch {
	case *nameTable != "" && format.f != export.Arrow:
		return usagef("export: --name-table is for -f arrow")
	case format.f == 0:
		return usagef("export: no format given: --format FORMAT (run 'trace export --help')")
	case *out == "":
		return usagef("export: no output file given: -o FILE, or -o - for standard output (run 'trace export --help')")
	case fs.NArg() == 0:
		return usagef("export: no trace files given (run 'trace export --help')")
	case *maxDepth < 1:
		return usagef("export: --max-depth must be at least 1")
	}

	src, err := openSources(fs.Args())
	if err != nil {
		return err
	}
	defer src.close()
	if f, ok := stderr.(*os.File); ok && isTerminal(f) {
		src.progress = progressTo(f, "exporting")
		defer fmt.Fprint(f, "\r\033[K")
	}
	sym := newExportSymbols(*debugDir)
	opts := export.Options{MaxDepth: *maxDepth}
	if src.sampled {
		if opts.SampleWeight, err = sampleWeights(fs.Args()); err != nil {
			return err
		}
	}
	if !*noSyms {
		opts.Symbolize = sym.symbolize
	}
	if *nameTable != "" {
		opts.NameTable = func(names []string) error {
			return writeAtomic(*nameTable, func(w io.Writer) error { return export.WriteNames(w, names) })
		}
	}

	var st export.Stats
	write := func(w io.Writer) (err error) {
		st, err = export.Write(ctx, w, format.f, src, opts)
		return err
	}
	if *out == "-" {
		err = write(stdout)
	} else {
		err = writeAtomic(*out, write)
	}
	if err != nil {
		return err
	}
	if format.f == export.Parquet && *out != "-" {
		if err := writeSideTables(*out, src); err != nil {
			return err
		}
	}

	// The summary goes where it does not mix with the output.
	report := stdout
	if *out == "-" {
		report = stderr
	}
	for _, c := range src.cuts {
		fmt.Fprintf(report, "%s\n", c)
	}
	for _, m := range sym.problems() {
		fmt.Fprintf(report, "no symbols: %s\n", m)
	}
	name := *out
	if name == "-" {
		name = "standard output"
	}
	fmt.Fprintf(report, "%s: %s, %d events (%d record rows) from %d runs in %d files, %d %s",
		name, format.f, st.Events, st.Records, src.runs, len(src.names), st.Samples, sampleWord(format.f))
	if st.Unmatched > 0 {
		fmt.Fprintf(report, ", %d unmatched returns", st.Unmatched)
	}
	if st.Sampled > 0 {
		fmt.Fprintf(report, ", %d samples weighed by the events they stand for", st.Sampled)
	}
	if st.Counted > 0 {
		fmt.Fprintf(report, ", %d block executions counted", st.Counted)
	}
	if st.Truncated > 0 {
		fmt.Fprintf(report, ", %d calls deeper than %d folded", st.Truncated, *maxDepth)
	}
	_, err = fmt.Fprintln(report)
	return err
}

// sampleWeights reads the inputs once to learn what each sample of a
// sampled run stands for (its stratum's sample-set row follows it).
func sampleWeights(names []string) (func(formats.Event) float64, error) {
	pre, err := openSources(names)
	if err != nil {
		return nil, err
	}
	defer pre.close()
	est := sample.NewEstimator()
	for pre.Next() {
		b := pre.Batch()
		for i := range b.Kind {
			est.Add(formats.Event{Kind: formats.Kind(b.Kind[i]), TID: b.TID[i], Time: b.Time[i], SrcModule: b.SrcModule[i],
				Src: b.Src[i], DstModule: b.DstModule[i], Dst: b.Dst[i], Value: b.Value[i]})
		}
	}
	if err := pre.Err(); err != nil {
		return nil, err
	}
	return est.Weight, nil
}

func sampleWord(f export.Format) string {
	switch f {
	case export.PProf:
		return "samples"
	case export.Collapsed:
		return "stacks"
	case export.DrCov:
		return "blocks"
	case export.LCOV:
		return "source files"
	}
	return "symbolized rows"
}

// sources is an export.Source over several trace files and merged
// traces: their module tables unified by build-id (by path for a module
// without one, as trace merge does), their runs numbered one after the
// other. It opens one input at a time.
type sources struct {
	names    []string
	modules  []formats.Module
	remap    [][]uint16 // per input: its module id -> unified id
	firstRun []int      // per input: the number of its first run
	runs     int
	runRows  []export.RunRow // every run, numbered as the run column has it
	tool     formats.Tool
	sampled  bool // some run sampled its events (rewrite --sample)

	cur      int // input being read
	r        *merge.Reader
	b        export.Batch
	err      error
	cuts     []string
	done     int64 // bytes of the inputs finished
	total    int64
	progress func(done, total int64)
}

// openSources reads the metadata of every input.
func openSources(names []string) (*sources, error) {
	s := &sources{names: names, cur: -1}
	byKey := map[string]uint16{}
	tools := map[string]bool{}
	for _, name := range names {
		r, err := merge.Open(name)
		if err != nil {
			return nil, err
		}
		s.total += r.Size()
		s.firstRun = append(s.firstRun, s.runs)
		for _, ri := range r.Runs() {
			file := ri.File
			if file == "" {
				file = name
			}
			s.runRows = append(s.runRows, export.RunRow{Run: uint16(s.runs + ri.Run), File: file, Info: ri.Info})
			tools[ri.Info.Tool] = true
			s.sampled = s.sampled || strings.Contains(" "+ri.Info.Options, " sample=")
		}
		s.runs += len(r.Runs())
		var remap []uint16
		for _, m := range r.Modules() {
			for int(m.ID) >= len(remap) {
				remap = append(remap, formats.NoModule)
			}
			key := "p:" + m.Path
			if m.BuildID != "" {
				key = "b:" + m.BuildID
			}
			id, ok := byKey[key]
			if !ok {
				if len(s.modules) >= formats.NoModule {
					r.Close()
					return nil, fmt.Errorf("%s: more than %d modules in all", name, formats.NoModule)
				}
				id = uint16(len(s.modules))
				byKey[key] = id
				um := m
				um.ID, um.Base = id, 0
				s.modules = append(s.modules, um)
			}
			remap[m.ID] = id
		}
		s.remap = append(s.remap, remap)
		r.Close()
	}
	if s.runs > merge.MaxRuns {
		return nil, fmt.Errorf("more than %d runs in all", merge.MaxRuns)
	}
	if len(tools) == 1 {
		for t := range tools {
			s.tool, _ = formats.ParseTool(t)
		}
	}
	return s, nil
}

func (s *sources) Modules() []formats.Module { return s.modules }
func (s *sources) Tool() formats.Tool        { return s.tool }
func (s *sources) Batch() *export.Batch      { return &s.b }
func (s *sources) Err() error                { return s.err }

func (s *sources) Next() bool {
	for s.err == nil {
		if s.r == nil {
			if s.cur+1 >= len(s.names) {
				return false
			}
			s.cur++
			r, err := merge.Open(s.names[s.cur])
			if err != nil {
				s.err = err
				return false
			}
			s.r = r
		}
		if s.r.Next() {
			s.fill(s.r.Batch())
			if s.progress != nil {
				s.progress(s.done+s.r.Offset(), s.total)
			}
			return true
		}
		if err := s.r.Err(); err != nil {
			if !errors.Is(err, formats.ErrTruncated) {
				s.err = fmt.Errorf("%s: %w", s.names[s.cur], err)
			} else {
				s.cuts = append(s.cuts, fmt.Sprintf("%s: cut short (%v): exported the rows before the cut", s.names[s.cur], err))
			}
		}
		s.done += s.r.Size()
		s.r.Close()
		s.r = nil
	}
	return false
}

// fill sets s.b from an input batch: module ids mapped to the unified
// table (ids not in the input's table become NoModule), runs numbered
// after the inputs before.
func (s *sources) fill(in *merge.Batch) {
	n := in.Len()
	b := &s.b
	b.Kind, b.TID, b.Time, b.Src, b.Dst, b.Value = in.Kind, in.TID, in.Time, in.Src, in.Dst, in.Value
	b.SrcModule = grow(b.SrcModule, n)
	b.DstModule = grow(b.DstModule, n)
	b.Run = grow(b.Run, n)
	remap := s.remap[s.cur]
	mapID := func(id uint16) uint16 {
		if int(id) < len(remap) {
			return remap[id]
		}
		return formats.NoModule
	}
	first := s.firstRun[s.cur]
	for i := 0; i < n; i++ {
		b.SrcModule[i] = mapID(in.SrcModule[i])
		b.DstModule[i] = mapID(in.DstModule[i])
		b.Run[i] = uint16(first + in.RunOf(i))
	}
}

func grow(s []uint16, n int) []uint16 {
	if cap(s) < n {
		return make([]uint16, n)
	}
	return s[:n]
}

func (s *sources) close() {
	if s.r != nil {
		s.r.Close()
		s.r = nil
	}
}

// exportSymbols backs export.Options.Symbolize with package symbols.
type exportSymbols struct {
	r    *symbols.Resolver
	errs map[string]error // module path -> why it has no names
}

func newExportSymbols(debugDir string) *exportSymbols {
	r := symbols.NewResolver()
	r.DebugDir = debugDir
	return &exportSymbols{r: r, errs: map[string]error{}}
}

func (x *exportSymbols) symbolize(m formats.Module) *export.Symbols {
	s := &export.Symbols{}
	t, err := x.r.Table(m.BuildID, m.Path)
	if err != nil {
		x.errs[m.Path] = err
	} else {
		s.Funcs = make([]export.Func, len(t.Funcs))
		for i, f := range t.Funcs {
			s.Funcs[i] = export.Func{Name: f.Name, Start: f.Start, End: f.End}
		}
		if ls, _ := t.Lines(); ls != nil {
			s.Files = ls.Files
			s.Lines = make([]export.Line, len(ls.Ranges))
			for i, r := range ls.Ranges {
				s.Lines[i] = export.Line{Start: r.Start, End: r.End, File: r.File, Line: r.Line}
			}
		}
	}
	if im, err := x.r.Image(m.BuildID, m.Path); err == nil {
		s.LinkBase = im.LinkBase
		s.Code = im.Bytes
	}
	return s
}

// problems lists the modules that had events but no names, and why.
func (x *exportSymbols) problems() []string {
	var out []string
	for p, err := range x.errs {
		out = append(out, fmt.Sprintf("%s: %v", p, strings.ReplaceAll(err.Error(), "\n", "; ")))
	}
	sort.Strings(out)
	return out
}

// progressTo returns a progress callback that rewrites one line of w.
func progressTo(w io.Writer, what string) func(done, total int64) {
	last := -1
	return func(done, total int64) {
		if total <= 0 {
			return
		}
		p := int(100 * done / total)
		if p != last {
			last = p
			fmt.Fprintf(w, "\r%s: %3d%%", what, p)
		}
	}
}

// sideTables names the module and run tables beside a Parquet export.
func sideTables(out string) (modules, runs string) {
	base := strings.TrimSuffix(out, ".parquet")
	return base + ".modules.parquet", base + ".runs.parquet"
}

// writeSideTables writes the module and run tables of src beside the
// Parquet export out, each through a temporary file and a rename.
func writeSideTables(out string, src *sources) error {
	mods, runs := sideTables(out)
	if err := writeAtomic(mods, func(w io.Writer) error { return export.WriteModules(w, src.modules) }); err != nil {
		return fmt.Errorf("%s: %w", mods, err)
	}
	if err := writeAtomic(runs, func(w io.Writer) error { return export.WriteRuns(w, src.runRows) }); err != nil {
		return fmt.Errorf("%s: %w", runs, err)
	}
	return nil
}

// writeAtomic writes path whole or not at all (internal/outfile: a
// temporary file renamed over it, copied into a device such as
// /dev/null).
func writeAtomic(path string, write func(io.Writer) error) error {
	return outfile.Write(path, 0o644, write)
}
