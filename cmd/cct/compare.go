package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"text/tabwriter"

	"github.com/spf13/pflag"
	"github.com/stint-project/stint/analysis/cct"
	"github.com/stint-project/stint/analysis/symbols"
	"github.com/stint-project/stint/internal/cli"
)

const compareHelp = `Usage: cct compare [--json] [--missing N] [--root FUNC] A B

Measure call-context tree A against the reference tree B, as the DIME*
paper's VLC table does: the share of B's nodes (contexts) and edges
(calls from a call site in a context) that A has, and what A has that B
lacks. Contexts match by their path of functions from the root (module
build-id and entry address), edges by caller context, call site and
callee context, so the trees may come from different runs. Then the
largest subtrees of B that A lacks.

A and B are cct files ('cct build -o') or traces, which are built as
'cct build' would (merged over their threads).

  nodes    |A ∩ B| / |B| over contexts
  edges    |A ∩ B| / |B| over (context, call site, callee) edges
  calls    share of B's calls that entered a context A has

Flags:
  --root FUNC   compare the trees below FUNC (e.g. main): the outermost
                nodes of that function, merged, are each tree's root.
                Traces of different modes differ above main (a call/ret
                trace sees _start call __libc_start_main; the context
                mode may not)
  --json        JSON output: keys nodes, edges (reference, other, common,
                extra, coverage), call_coverage, missing, missing_roots
  --missing N   missing subtrees listed (default 10; -1: all)
`

func runCompare(ctx context.Context, args []string, stdout io.Writer) error {
	fs := pflag.NewFlagSet("compare", pflag.ContinueOnError)
	asJSON := fs.Bool("json", false, "")
	nmiss := fs.Int("missing", 10, "")
	root := fs.String("root", "", "")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 2 {
		return cli.Usagef("compare: want two trees, A and B (run 'cct compare --help')")
	}
	res := symbols.NewResolver()
	a, err := load(ctx, fs.Arg(0), res)
	if err != nil {
		return err
	}
	b, err := load(ctx, fs.Arg(1), res)
	if err != nil {
		return err
	}
	ta, tb := a.Merged, b.Merged
	if *root != "" {
		if ta = ta.Reroot(*root); ta == nil {
			return fmt.Errorf("%s: no context of %q", fs.Arg(0), *root)
		}
		if tb = tb.Reroot(*root); tb == nil {
			return fmt.Errorf("%s: no context of %q", fs.Arg(1), *root)
		}
	}
	c := cct.Compare(ta, tb, *nmiss)
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(c)
	}
	w := bufio.NewWriter(stdout)
	fmt.Fprintf(w, "A (compared)   %s: %d contexts, %d edges\n", fs.Arg(0), c.Nodes.Other, c.Edges.Other)
	fmt.Fprintf(w, "B (reference)  %s: %d contexts, %d edges\n\n", fs.Arg(1), c.Nodes.Reference, c.Edges.Reference)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "\treference\tcompared\tcommon\textra\tcoverage")
	for _, r := range []struct {
		name string
		c    cct.Coverage
	}{{"nodes", c.Nodes}, {"edges", c.Edges}} {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%.1f%%\n", r.name, r.c.Reference, r.c.Other, r.c.Common, r.c.Extra, 100*r.c.Coverage)
	}
	fmt.Fprintf(tw, "calls\t\t\t\t\t%.1f%%\n", 100*c.CallCoverage)
	tw.Flush()
	if len(c.Missing) > 0 {
		fmt.Fprintf(w, "\nmissing subtrees of B (%d in all, largest first)\n", c.MissingRoots)
		tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "nodes\tcalls\tcontext")
		for _, m := range c.Missing {
			fmt.Fprintf(tw, "%d\t%d\t%s\n", m.Nodes, m.Calls, joinPath(m.Path))
		}
		tw.Flush()
	}
	return w.Flush()
}

// load reads a cct file, or builds the trees of a trace.
func load(ctx context.Context, name string, res *symbols.Resolver) (*cct.Forest, error) {
	fh, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	defer fh.Close()
	var head [1]byte
	n, _ := fh.Read(head[:])
	if n == 1 && bytes.IndexByte([]byte("{ \t\r\n"), head[0]) >= 0 {
		if _, err := fh.Seek(0, io.SeekStart); err != nil {
			return nil, err
		}
		f, err := cct.Read(fh)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		return f, nil
	}
	return cct.Build(ctx, []string{name}, cct.Options{Resolver: cct.WithFrameStarts(res)})
}
