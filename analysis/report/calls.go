package report

import (
	"fmt"
	"path/filepath"
	"sort"
)

// calledFunc is a function and how many call rows reached it.
type calledFunc struct {
	name, module string
	calls        int64
}

// calls is the section of the most called functions: the call rows of
// every run, by callee, named as the module files name them.
func (a *auto) calls() (Section, error) {
	s := Section{ID: "calls", Title: "Most called functions"}
	funcs, total, every := a.calledFuncs()
	if total == 0 {
		s.Blocks = []Block{&Note{Text: "No call events in these traces."}}
		s.nothing = "most called functions (no call events)"
		return s, nil
	}
	what := "calls"
	if every {
		s.Intro = fmt.Sprintf("Every call these runs made (%d), direct and indirect, by the function it called.", total)
	} else {
		what = "call sites"
		s.Intro = fmt.Sprintf("These traces record each distinct call once (not --every), so a function's number is how many call sites reached it (%d in all): how widely it is called, not how often.", total)
	}
	n := a.opts.Functions
	if n < 0 || n > len(funcs) {
		n = len(funcs)
	}
	t := &Table{Columns: []Column{{Name: "function"}, {Name: "module"}, {Name: what, Numeric: true}, {Name: "share", Numeric: true}}}
	for _, f := range funcs[:n] {
		t.Rows = append(t.Rows, []Cell{Text(f.name), Text(f.module), Textf("%d", f.calls), Bar(float64(f.calls) / float64(total))})
	}
	if n < len(funcs) {
		t.Caption = fmt.Sprintf("The %d most called of %d functions.", n, len(funcs))
	}
	s.Blocks = []Block{t}
	return s, nil
}

// calledFuncs sums the runs' call counts by function, most called first
// (ties by name); total is the number of call rows, every whether any
// run recorded every occurrence.
func (a *auto) calledFuncs() (funcs []calledFunc, total int64, every bool) {
	type key struct{ module, name string }
	byFunc := map[key]int64{}
	for _, r := range a.runs {
		every = every || r.Info.Flag("every")
		for c, n := range r.Calls {
			total += n
			k := key{"?", fmt.Sprintf("%#x", c.Addr)}
			if m, ok := a.loader.Module(c.Module); ok {
				k.module = filepath.Base(m.Path)
				if tab, err := a.opts.Resolver.Table(m.BuildID, m.Path); err == nil {
					if f := tab.Lookup(c.Addr); f != nil {
						k.name = f.Name
					}
				}
			}
			byFunc[k] += n
		}
	}
	for k, n := range byFunc {
		funcs = append(funcs, calledFunc{k.name, k.module, n})
	}
	sort.Slice(funcs, func(i, j int) bool {
		if funcs[i].calls != funcs[j].calls {
			return funcs[i].calls > funcs[j].calls
		}
		return funcs[i].name < funcs[j].name
	})
	return funcs, total, every
}
