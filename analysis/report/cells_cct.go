package report

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"slices"
	"strings"

	"github.com/spf13/pflag"
	"github.com/stint-project/stint/analysis/cct"
)

// The call-context tree cells (analysis/cct):
//
//	cct build [--top N] TRACE...   the merged tree's counts and its deepest
//	                               and most called contexts
//	cct compare [--missing N] A B  tree A against the reference B (DIME*'s
//	                               VLC table); A and B are cct files
//	                               ('cct build -o') or traces

func cctCells() []CellCommand {
	return []CellCommand{
		{Name: "cct build", Usage: "cct build [--top N] TRACE...", Run: cellCCTBuild},
		{Name: "cct compare", Usage: "cct compare [--missing N] A B", Run: cellCCTCompare},
	}
}

// loadTree reads a cct file, or builds the merged tree of traces.
func loadTree(ctx context.Context, env *CellEnv, files []string) (*cct.Forest, error) {
	if len(files) == 1 {
		if f, err := os.Open(files[0]); err == nil {
			fo, rerr := cct.Read(f)
			f.Close()
			if rerr == nil {
				return fo, nil
			}
		}
	}
	return cct.Build(ctx, files, cct.Options{Resolver: env.Resolver})
}

func cellCCTBuild(ctx context.Context, env *CellEnv, args []string) ([]Block, error) {
	var top int
	files, err := env.parse("cct build", args, func(fs *pflag.FlagSet) { fs.IntVar(&top, "top", 15, "") })
	if err != nil {
		return nil, err
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("%w: no traces given", errUsage)
	}
	fo, err := loadTree(ctx, env, files)
	if err != nil {
		return nil, err
	}
	t := fo.Merged
	nodes, edges := t.Count()
	st := t.Stats
	blocks := []Block{&Stats{Items: []Stat{
		{Label: "contexts", Value: fmt.Sprint(nodes), Note: fmt.Sprintf("%d edges", edges)},
		{Label: "deepest stack", Value: fmt.Sprint(st.MaxDepth)},
		{Label: "calls / returns", Value: fmt.Sprintf("%d / %d", st.Calls, st.Rets)},
		{Label: "unmatched returns", Value: fmt.Sprint(st.Unmatched), Note: fmt.Sprintf("%d unwound, %d repaired", st.Unwound, st.Repaired)},
	}}}
	for _, w := range fo.Warnings {
		blocks = append(blocks, &Note{Kind: "warn", Text: w})
	}
	var all []*cct.Node
	t.Walk(func(n *cct.Node) bool {
		if n.Parent != nil {
			all = append(all, n)
		}
		return true
	})
	slices.SortStableFunc(all, func(a, b *cct.Node) int {
		return cmp.Or(cmp.Compare(b.Calls, a.Calls), cmp.Compare(b.Depth(), a.Depth()))
	})
	if top >= 0 && len(all) > top {
		all = all[:top]
	}
	what := "calls"
	if !fo.Every() {
		what = "seen"
	}
	tb := &Table{Title: "Contexts", Columns: []Column{{Name: "context (from the root)"}, {Name: "depth", Numeric: true}, {Name: what, Numeric: true}}}
	for _, n := range all {
		tb.Rows = append(tb.Rows, []Cell{Text(strings.Join(t.Path(n), " → ")), Textf("%d", n.Depth()), Textf("%d", n.Calls)})
	}
	if !fo.Every() {
		tb.Caption = "Traced in default mode: each distinct call was recorded once per run, so counts say in how many runs and threads a context was seen, not how often it was called."
	}
	return append(blocks, tb), nil
}

func cellCCTCompare(ctx context.Context, env *CellEnv, args []string) ([]Block, error) {
	var missing int
	files, err := env.parse("cct compare", args, func(fs *pflag.FlagSet) { fs.IntVar(&missing, "missing", 10, "") })
	if err != nil {
		return nil, err
	}
	if len(files) != 2 {
		return nil, fmt.Errorf("%w: want two trees (A B), have %d", errUsage, len(files))
	}
	a, err := loadTree(ctx, env, files[:1])
	if err != nil {
		return nil, err
	}
	b, err := loadTree(ctx, env, files[1:])
	if err != nil {
		return nil, err
	}
	c := cct.Compare(a.Merged, b.Merged, missing)
	blocks := []Block{&Stats{Items: []Stat{
		{Label: "node coverage", Value: pct(c.Nodes.Coverage), Note: fmt.Sprintf("%d of %d contexts; %d extra", c.Nodes.Common, c.Nodes.Reference, c.Nodes.Extra)},
		{Label: "edge coverage", Value: pct(c.Edges.Coverage), Note: fmt.Sprintf("%d of %d edges; %d extra", c.Edges.Common, c.Edges.Reference, c.Edges.Extra)},
		{Label: "call coverage", Value: pct(c.CallCoverage)},
	}}}
	if len(c.Missing) > 0 {
		tb := &Table{Title: "Largest missing subtrees", Columns: []Column{{Name: "context (from the root)"}, {Name: "nodes", Numeric: true}, {Name: "calls", Numeric: true}},
			Caption: fmt.Sprintf("Contexts of the reference that the compared tree lacks while it has their parent (%d such roots).", c.MissingRoots)}
		for _, m := range c.Missing {
			tb.Rows = append(tb.Rows, []Cell{Text(strings.Join(m.Path, " → ")), Textf("%d", m.Nodes), Textf("%d", m.Calls)})
		}
		blocks = append(blocks, tb)
	}
	return blocks, nil
}
