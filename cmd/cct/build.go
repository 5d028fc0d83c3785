package main

import (
	"bufio"
	"cmp"
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/pflag"
	"github.com/stint-project/stint/analysis/cct"
	"github.com/stint-project/stint/analysis/symbols"
	"github.com/stint-project/stint/internal/cli"
	"github.com/stint-project/stint/internal/outfile"
)

const buildHelp = `Usage: cct build [-o FILE] [--json] [--per-thread] [--top N] [--depth N] TRACE...

Build the call-context tree of every thread of the traces (trace files
or merged traces) from their call, ind-call and ret events, and merge
them: contexts are matched by their path of functions from the root (the
threads' roots are one root; modules across runs match by build-id) and
counts are summed. Prints a summary: counts, return matching, the
largest contexts, with --every --rows traces the functions by self time
(from the events' times: each context's time runs from its call to its
return, its callees' left out; a compact trace's events carry no time
of their own), and the top of the tree.

A return matches the nearest frame of the thread's shadow stack whose
call site lies just before the return's destination; frames above it
are unwound (longjmp, C++ exceptions, missed returns); a return that
matches no frame is counted as unmatched. With the modules' symbols
(symbol tables, DWARF, and in stripped files the function starts of
.eh_frame_hdr) the stack is repaired from the function that holds each call site: frames
above it are popped, and a function entered without a call event (main,
thread start routines, callbacks from untraced libraries, tail calls,
signal handlers, budget gaps) gets an inferred frame (shown as +N).

Default-mode traces (not rewrite --every) record each distinct (call
site, destination) once per run: counts are then mostly 1, most returns
are missing, and the tree says which contexts were seen (the repair
keeps it plausible; treat the upper levels with care). Traces of
'rewrite --tool call --context' carry the runtime's own exact contexts
(KindContext rows), written once each: the tree is exact, also under a
budget.

Flags:
  -o, --output FILE   write the trees to FILE (JSON, read by 'cct compare';
                      format in package analysis/cct)
      --json          print the trees as JSON instead of the summary
      --per-thread    also keep (and write) each thread's own tree
      --no-repair     no stack repair from symbols (names are kept)
      --max-depth N   shadow stack depth limit per thread (default 16384)
      --top N         contexts and functions in the summary's lists (default
                      20; 0: none)
      --depth N       levels of the tree printed (default 4; 0: none)
`

func runBuild(ctx context.Context, args []string, stdout io.Writer) error {
	fs := pflag.NewFlagSet("build", pflag.ContinueOnError)
	out := fs.StringP("output", "o", "", "")
	asJSON := fs.Bool("json", false, "")
	perThread := fs.Bool("per-thread", false, "")
	noRepair := fs.Bool("no-repair", false, "")
	maxDepth := fs.Int("max-depth", cct.DefaultMaxDepth, "")
	top := fs.Int("top", 20, "")
	depth := fs.Int("depth", 4, "")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() == 0 {
		return cli.Usagef("build: no traces given (run 'cct build --help')")
	}
	if *maxDepth < 1 {
		return cli.Usagef("build: --max-depth %d: want at least 1", *maxDepth)
	}
	f, err := cct.Build(ctx, fs.Args(), cct.Options{
		Resolver: cct.WithFrameStarts(symbols.NewResolver()), NoRepair: *noRepair, PerThread: *perThread, MaxDepth: *maxDepth,
	})
	if err != nil {
		return err
	}
	if *out != "" {
		if err := writeFile(*out, f); err != nil {
			return err
		}
	}
	if *asJSON {
		return cct.Write(stdout, f)
	}
	return summary(stdout, f, *top, *depth, *out)
}

// writeFile writes f to name whole or not at all (internal/outfile), so
// that a failed build never leaves half a file.
func writeFile(name string, f *cct.Forest) error {
	if err := outfile.Write(name, 0o644, func(w io.Writer) error { return cct.Write(w, f) }); err != nil {
		return fmt.Errorf("write %s: %w", name, err)
	}
	return nil
}

func summary(out io.Writer, f *cct.Forest, top, depth int, file string) error {
	w := bufio.NewWriter(out)
	t := f.Merged
	s := t.Stats
	for _, m := range f.Warnings {
		fmt.Fprintf(w, "warning   %s\n", m)
	}
	mode := "--every: counts are calls"
	switch {
	case f.ContextMode():
		mode = "context mode: the runtime wrote each context once, counts are distinct call sites"
	case !f.Every():
		mode = "default mode: each distinct call recorded once per run, counts say which contexts were seen"
	}
	fmt.Fprintf(w, "runs      %d (%s)\n", len(f.Runs), mode)
	fmt.Fprintf(w, "threads   %d\n", s.Threads)
	fmt.Fprintf(w, "calls     %d\n", s.Calls)
	if s.Contexts > 0 {
		fmt.Fprintf(w, "contexts  %d rows, %d orphans (parent not written)\n", s.Contexts, s.Orphans)
	}
	fmt.Fprintf(w, "returns   %d: %d matched, %d unmatched, %d frames unwound above a match\n", s.Rets, s.Matched, s.Unmatched, s.Unwound)
	fmt.Fprintf(w, "repair    %d frames popped, %d inferred, %d popped by an unmatched return of their own function\n", s.Repaired, s.Inferred, s.PoppedByFunc)
	if s.TooDeep > 0 {
		fmt.Fprintf(w, "too deep  %d calls beyond the stack limit\n", s.TooDeep)
	}
	fmt.Fprintf(w, "tree      %d contexts, %d edges, depth %d, deepest stack %d, %d unnamed\n", s.Nodes, s.Edges, treeDepth(t), s.MaxDepth, s.Unnamed)
	for _, m := range f.Modules {
		sym := m.Symbols
		if sym == "" {
			sym = "(not looked up)"
		}
		fmt.Fprintf(w, "module    %s: %s\n", m.Path, sym)
	}
	if file != "" {
		fmt.Fprintf(w, "written   %s\n", file)
	}
	if top != 0 {
		writeTop(w, t, top, f.Every())
		if f.Timed() {
			writeFuncTimes(w, t, top)
		}
	}
	if depth > 0 {
		fmt.Fprintf(w, "\ntree (calls, +inferred entries; %d levels)\n", depth)
		writeTree(w, t, t.Root, 0, depth)
	}
	return w.Flush()
}

func treeDepth(t *cct.Tree) int {
	d := 0
	depth := map[*cct.Node]int{}
	t.Walk(func(n *cct.Node) bool {
		if n.Parent != nil {
			depth[n] = depth[n.Parent] + 1
			d = max(d, depth[n])
		}
		return true
	})
	return d
}

// writeTop lists the contexts with the most calls (--every) or the
// largest subtrees (default mode, where counts are mostly 1).
func writeTop(w io.Writer, t *cct.Tree, top int, every bool) {
	type row struct {
		n     *cct.Node
		calls uint64
		sub   int
		depth int
	}
	var rows []row
	sub := map[*cct.Node]int{}
	var order []*cct.Node
	t.Walk(func(n *cct.Node) bool { order = append(order, n); return true })
	for i := len(order) - 1; i >= 0; i-- {
		n := order[i]
		sub[n]++
		if n.Parent != nil {
			sub[n.Parent] += sub[n]
		}
	}
	depth := map[*cct.Node]int{}
	for _, n := range order {
		if n.Parent == nil {
			continue
		}
		depth[n] = depth[n.Parent] + 1
		rows = append(rows, row{n, n.Calls + n.Inferred, sub[n] - 1, depth[n]})
	}
	slices.SortStableFunc(rows, func(a, b row) int {
		if every {
			if c := cmp.Compare(b.calls, a.calls); c != 0 {
				return c
			}
		}
		if c := cmp.Compare(b.sub, a.sub); c != 0 {
			return c
		}
		return cmp.Compare(a.depth, b.depth)
	})
	if top > 0 && len(rows) > top {
		rows = rows[:top]
	}
	by := "largest subtrees"
	if every {
		by = "most calls"
	}
	fmt.Fprintf(w, "\ntop contexts (%s)\n", by)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "calls\tbelow\tdepth\tcontext")
	for _, r := range rows {
		fmt.Fprintf(tw, "%d\t%d\t%d\t%s\n", r.calls, r.sub, r.depth, joinPath(t.Path(r.n)))
	}
	tw.Flush()
}

// writeFuncTimes lists the functions with the most self time (--every
// traces: times from the call and return events).
func writeFuncTimes(w io.Writer, t *cct.Tree, top int) {
	fts := t.FuncTimes()
	var total uint64
	for _, ft := range fts {
		total += ft.SelfNS
	}
	if total == 0 {
		return
	}
	if top > 0 && len(fts) > top {
		fts = fts[:top]
	}
	fmt.Fprintf(w, "\nfunctions by self time (of %v in all)\n", time.Duration(total))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "self\tshare\ttotal\tcalls\tfunction")
	for _, ft := range fts {
		fmt.Fprintf(tw, "%v\t%.1f%%\t%v\t%d\t%s\n", time.Duration(ft.SelfNS), 100*float64(ft.SelfNS)/float64(total), time.Duration(ft.NS), ft.Calls, ft.Name)
	}
	tw.Flush()
}

const maxChildren = 12

func writeTree(w io.Writer, t *cct.Tree, n *cct.Node, level, depth int) {
	if level >= depth {
		return
	}
	for i, c := range n.Children {
		if i == maxChildren {
			fmt.Fprintf(w, "%s… %d more\n", strings.Repeat("  ", level), len(n.Children)-i)
			break
		}
		inf := ""
		if c.Inferred > 0 {
			inf = fmt.Sprintf(" +%d", c.Inferred)
		}
		fmt.Fprintf(w, "%s%s  %d%s\n", strings.Repeat("  ", level), t.FuncName(c), c.Calls, inf)
		writeTree(w, t, c, level+1, depth)
	}
}
