package export

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"sort"
	"strings"
)

// lcovTest is the tracefile's test name (TN).
const lcovTest = "stint"

type lcovFunc struct {
	line  uint32
	count int64
}

type lcovFile struct {
	lines map[uint32]int64 // every line with code: its count
	funcs map[string]*lcovFunc
}

// writeLCOV writes an lcov tracefile. For each module with executed
// blocks (see blockList):
//
//   - with a DWARF line table: one SF record per source file of the
//     module's line table, a DA entry for every line that has code (0
//     when none of its code ran) and an FN/FNDA entry for every function
//     whose first instruction has a line;
//   - with function symbols only: one SF record named after the module
//     file, in which "line" i stands for the module's i-th function (by
//     address): FN:i,name, FNDA and DA:i (render with genhtml
//     --no-source).
//
// A line's count is the largest count among the executed blocks that
// cover any of its code, and a function's the largest among the blocks
// inside it: in a trace recorded with every occurrence (--every) that is
// how many times it ran; in the default mode, where each distinct event
// is recorded once, it is 1 for code that ran. Code that ran without
// being reached by a recorded event (a block entered by falling through
// into a branch target that was never recorded) counts as not run, so
// the coverage is a lower bound.
func (e *exporter) writeLCOV(ctx context.Context, w io.Writer) error {
	a, err := e.aggregate(ctx, false, false, true)
	if err != nil {
		return err
	}
	blocks := e.blockList(a)
	files := map[string]*lcovFile{}
	get := func(name string) *lcovFile {
		f := files[name]
		if f == nil {
			f = &lcovFile{lines: map[uint32]int64{}, funcs: map[string]*lcovFunc{}}
			files[name] = f
		}
		return f
	}
	setFunc := func(f *lcovFile, name string, line uint32, count int64) {
		fn := f.funcs[name]
		if fn == nil {
			f.funcs[name] = &lcovFunc{line: line, count: count}
			return
		}
		fn.line = min(fn.line, line)
		fn.count = max(fn.count, count)
	}
	for i := 0; i < len(blocks); {
		mod := blocks[i].at.mod
		j := i
		for j < len(blocks) && blocks[j].at.mod == mod {
			j++
		}
		mb := blocks[i:j]
		i = j
		s := e.symbols(mod)
		if s == nil || len(s.Funcs) == 0 && len(s.Lines) == 0 {
			continue
		}
		funcCount := map[int]int64{} // index in s.Funcs -> largest block count
		for _, b := range mb {
			if k := funcIndex(s, b.at.addr); k >= 0 {
				funcCount[k] = max(funcCount[k], b.count)
			}
		}
		if len(s.Lines) == 0 {
			f := get(e.module(mod).Path)
			for k, fn := range s.Funcs {
				line := uint32(k + 1)
				c := funcCount[k]
				f.lines[line] = max(f.lines[line], c)
				setFunc(f, fn.Name, line, c)
			}
			continue
		}
		for _, l := range s.Lines {
			get(s.Files[l.File]).lines[l.Line] += 0
		}
		for _, b := range mb {
			s.overlapping(b.at.addr, b.at.addr+b.size, func(l Line) {
				f := get(s.Files[l.File])
				f.lines[l.Line] = max(f.lines[l.Line], b.count)
			})
		}
		for k, fn := range s.Funcs {
			file, line := s.Line(fn.Start)
			if file == "" {
				continue
			}
			setFunc(get(file), fn.Name, uint32(line), funcCount[k])
		}
	}

	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	e.stats.Samples = len(names)
	bw := bufio.NewWriter(w)
	clean := strings.NewReplacer("\n", "_", "\r", "_")
	for _, n := range names {
		f := files[n]
		fmt.Fprintf(bw, "TN:%s\nSF:%s\n", lcovTest, clean.Replace(n))
		fns := make([]string, 0, len(f.funcs))
		for name := range f.funcs {
			fns = append(fns, name)
		}
		sort.Slice(fns, func(i, j int) bool {
			a, b := f.funcs[fns[i]], f.funcs[fns[j]]
			if a.line != b.line {
				return a.line < b.line
			}
			return fns[i] < fns[j]
		})
		hit := 0
		for _, name := range fns {
			fmt.Fprintf(bw, "FN:%d,%s\n", f.funcs[name].line, clean.Replace(name))
		}
		for _, name := range fns {
			c := f.funcs[name].count
			if c > 0 {
				hit++
			}
			fmt.Fprintf(bw, "FNDA:%d,%s\n", c, clean.Replace(name))
		}
		fmt.Fprintf(bw, "FNF:%d\nFNH:%d\n", len(fns), hit)
		lines := make([]uint32, 0, len(f.lines))
		for l := range f.lines {
			lines = append(lines, l)
		}
		sort.Slice(lines, func(i, j int) bool { return lines[i] < lines[j] })
		hit = 0
		for _, l := range lines {
			c := f.lines[l]
			if c > 0 {
				hit++
			}
			fmt.Fprintf(bw, "DA:%d,%d\n", l, c)
		}
		fmt.Fprintf(bw, "LF:%d\nLH:%d\nend_of_record\n", len(lines), hit)
	}
	return bw.Flush()
}

// funcIndex returns the index in s.Funcs of the function containing
// addr, or -1.
func funcIndex(s *Symbols, addr uint64) int {
	i := sort.Search(len(s.Funcs), func(i int) bool { return s.Funcs[i].Start > addr }) - 1
	if i >= 0 && addr < s.Funcs[i].End {
		return i
	}
	return -1
}
