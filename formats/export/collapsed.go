package export

import (
	"bufio"
	"context"
	"io"
	"sort"
	"strconv"
	"strings"
)

// writeCollapsed writes folded stacks, one "root;…;leaf COUNT" line per
// distinct stack of names, sorted by stack. Call traces give the call
// contexts (COUNT: calls into that context); other traces give
// "module;function COUNT" (COUNT: events in the function). Names that
// contain ";" or a newline have them replaced by "_"; unnamed code is
// module+0xoffset.
func (e *exporter) writeCollapsed(ctx context.Context, w io.Writer) error {
	st := e.useStacks()
	a, err := e.aggregate(ctx, st, !st, false)
	if err != nil {
		return err
	}
	lines := map[string]int64{}
	if st {
		// A context's stack is the functions holding its call sites,
		// root first, then the callee: a call that was not traced (from
		// an uninstrumented library) still shows its caller.
		sites := make([]string, len(a.stacks.nodes)) // by node: the folded call sites
		for id := int32(1); id < int32(len(a.stacks.nodes)); id++ {
			n := a.stacks.nodes[id]
			sites[id] = e.foldName(n.site)
			if n.parent != 0 {
				sites[id] = sites[n.parent] + ";" + sites[id]
			}
			if n.count > 0 {
				lines[sites[id]+";"+e.foldName(n.fn)] += n.count
			}
		}
	} else {
		for at, c := range a.flat {
			lines[e.foldModule(at.mod)+";"+e.foldName(at)] += c
		}
	}
	keys := make([]string, 0, len(lines))
	for k := range lines {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	e.stats.Samples = len(keys)
	bw := bufio.NewWriter(w)
	for _, k := range keys {
		bw.WriteString(k)
		bw.WriteByte(' ')
		bw.WriteString(strconv.FormatInt(lines[k], 10))
		bw.WriteByte('\n')
	}
	return bw.Flush()
}

var foldReplacer = strings.NewReplacer(";", "_", "\n", "_", "\r", "_")

func (e *exporter) foldName(at addr) string {
	n := e.frameName(at.mod, at.addr)
	if n != "" && e.funcName(at.mod, at.addr) == "" {
		e.stats.Unresolved++
	}
	return foldReplacer.Replace(n)
}

func (e *exporter) foldModule(id uint16) string { return foldReplacer.Replace(e.modName(id)) }
