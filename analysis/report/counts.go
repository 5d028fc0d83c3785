package report

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// countedFunc is a function, or a block, and the block executions
// counted in it.
type countedFunc struct {
	name, module string
	blocks       int    // blocks of it that ran
	execs        int64  // their executions
	source       string // a block's file:line (DWARF), or ""
}

// counts is the section of a block-count trace (rewrite --tool block
// --counts): where the executions went, by function and by block.
func (a *auto) counts() (Section, error) {
	s := Section{ID: "counts", Title: "Where execution goes"}
	funcs, blocks, total := a.countedFuncs()
	if total == 0 {
		s.nothing = "block executions (no block counts: rewrite --tool block --counts)"
		return s, nil
	}
	s.Intro = fmt.Sprintf("Exact counts: every execution of every probed block (%d in all, %d blocks ran), summed by the function each block lies in. A function's share is a share of blocks executed, a proxy for where the time goes.", total, len(blocks))
	n := a.opts.Functions
	if n < 0 || n > len(funcs) {
		n = len(funcs)
	}
	t := &Table{Title: "Functions", Columns: []Column{{Name: "function"}, {Name: "module"}, {Name: "blocks ran", Numeric: true},
		{Name: "block executions", Numeric: true}, {Name: "share", Numeric: true}}}
	for _, f := range funcs[:n] {
		t.Rows = append(t.Rows, []Cell{Text(f.name), Text(f.module), Textf("%d", f.blocks), Textf("%d", f.execs), Bar(float64(f.execs) / float64(total))})
	}
	if n < len(funcs) {
		t.Caption = fmt.Sprintf("The %d functions with the most block executions, of %d.", n, len(funcs))
	}
	bt := &Table{Title: "Hottest blocks", Columns: []Column{{Name: "block"}, {Name: "module"}, {Name: "source"}, {Name: "executions", Numeric: true}, {Name: "share", Numeric: true}},
		Caption: "Source lines come from the modules' DWARF line tables (their own or a build-id debug file's), with the line's text when its file is readable here."}
	src := sourceLines{}
	for _, b := range blocks[:min(len(blocks), 10)] {
		where := b.source
		if line := src.text(b.source); line != "" {
			where += ": " + line
		}
		bt.Rows = append(bt.Rows, []Cell{Text(b.name), Text(b.module), Text(where), Textf("%d", b.execs), Bar(float64(b.execs) / float64(total))})
	}
	s.Blocks = []Block{t, bt}
	logs := make([]float64, len(blocks))
	for i, b := range blocks {
		logs[i] = math.Log10(float64(b.execs))
	}
	f, err := HistogramFigure("fig-counts", "Blocks by executions", "How many blocks ran how often: each bar counts the blocks whose executions fall in its range, on a log scale (1 = 10 executions, 6 = a million).",
		"log10 of a block's executions", "blocks", "blocks that ran", logs)
	if err != nil {
		return s, err
	}
	s.Blocks = append(s.Blocks, f)
	return s, nil
}

// countTotals returns how many blocks the runs' block counts have and
// their executions, without naming them (the summary's figures).
func (a *auto) countTotals() (blocks int, total int64) {
	seen := map[Callee]bool{}
	for _, r := range a.runs {
		for at, n := range r.Counts {
			seen[at] = true
			total += n
		}
	}
	return len(seen), total
}

// countedFuncs sums the runs' block counts by function and by block,
// most executed first (ties by name); total is every execution counted.
func (a *auto) countedFuncs() (funcs, blocks []countedFunc, total int64) {
	byFunc, byBlock := map[funcKey]*countedFunc{}, map[Callee]*countedFunc{}
	for _, r := range a.runs {
		for at, n := range r.Counts {
			total += n
			fk, bk, src := a.countedNames(at)
			f := byFunc[fk]
			if f == nil {
				f = &countedFunc{name: fk.name, module: fk.module}
				byFunc[fk] = f
			}
			b := byBlock[at]
			if b == nil {
				b = &countedFunc{name: bk, module: fk.module, blocks: 1, source: src}
				byBlock[at] = b
				f.blocks++
			}
			f.execs += n
			b.execs += n
		}
	}
	for _, f := range byFunc {
		funcs = append(funcs, *f)
	}
	for _, b := range byBlock {
		blocks = append(blocks, *b)
	}
	return sortCounted(funcs), sortCounted(blocks), total
}

// funcKey names a function of a module (both by their base names).
type funcKey struct{ module, name string }

// countedNames names the function of block at (key), the block itself
// (function+offset, or its address when no symbol covers it) and its
// source line ("file:line", "" without DWARF).
func (a *auto) countedNames(at Callee) (fk funcKey, block, source string) {
	fk.module, fk.name = "?", "?"
	block = fmt.Sprintf("%#x", at.Addr)
	m, ok := a.loader.Module(at.Module)
	if !ok {
		return fk, block, ""
	}
	fk.module = filepath.Base(m.Path)
	fk.name = fmt.Sprintf("%#x", at.Addr)
	if tab, err := a.opts.Resolver.Table(m.BuildID, m.Path); err == nil {
		if f := tab.Lookup(at.Addr); f != nil {
			fk.name = f.Name
			block = fmt.Sprintf("%s+%#x", f.Name, at.Addr-f.Start)
		}
		if file, line, ok := tab.LineAt(at.Addr); ok {
			source = fmt.Sprintf("%s:%d", file, line)
		}
	}
	return fk, block, source
}

// sourceLines reads the text of source lines named "file:line", each
// file once; a file that cannot be read gives "".
type sourceLines map[string][]string

func (s sourceLines) text(fileLine string) string {
	i := strings.LastIndexByte(fileLine, ':')
	if i < 0 {
		return ""
	}
	n, err := strconv.Atoi(fileLine[i+1:])
	file := fileLine[:i]
	if err != nil || n < 1 {
		return ""
	}
	lines, ok := s[file]
	if !ok {
		if b, err := os.ReadFile(file); err == nil && len(b) < 16<<20 {
			lines = strings.Split(string(b), "\n")
		}
		s[file] = lines
	}
	if n > len(lines) {
		return ""
	}
	t := []rune(strings.TrimSpace(lines[n-1]))
	if len(t) > 80 {
		t = append(t[:77], []rune("...")...)
	}
	return string(t)
}

func sortCounted(fs []countedFunc) []countedFunc {
	sort.Slice(fs, func(i, j int) bool {
		if fs[i].execs != fs[j].execs {
			return fs[i].execs > fs[j].execs
		}
		return fs[i].name < fs[j].name
	})
	return fs
}
