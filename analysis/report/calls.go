package report

import (
	"fmt"
	"path/filepath"
	"sort"
	"time"

	"github.com/stint-project/stint/analysis/cct"
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

// flame is the section of a call trace's flame graph: the call-context
// tree of every run (analysis/cct, its shadow stacks repaired from the
// functions' symbols), drawn as an icicle.
func (a *auto) flame() (Section, error) {
	s := Section{ID: "flame", Title: "Where calls go"}
	if !a.anyCalls() {
		s.Blocks = []Block{&Note{Text: "No call events in these traces."}}
		s.nothing = "flame graph (no call events)"
		return s, nil
	}
	f := a.callForest()
	root := FlameFromTree(f.Merged)
	if root == nil || root.Total == 0 {
		s.Blocks = []Block{&Note{Text: "No calling context could be built from these traces."}}
		s.nothing = "flame graph (no calling contexts)"
		return s, nil
	}
	if f.Every() {
		s.Intro = fmt.Sprintf("Every call of these runs (%d) in the context it was made in: each function under its caller, as wide as the calls made in it and beneath it.", root.Total)
	} else {
		s.Intro = fmt.Sprintf("These traces record each distinct call once per run (not --every), so a context's width counts the distinct calls seen in it and beneath it (%d in all), not how often they ran.", root.Total)
	}
	s.Blocks = []Block{&Flame{ID: "flame-calls", Title: "Calling contexts", Root: root,
		Caption: "Click a context to zoom into it, reset zoom to go back; the search box highlights the functions whose name holds its text and says what share of the calls they make up. Contexts under 0.05% of the calls are left out."}}
	return s, nil
}

// callForest builds the runs' call-context trees (once: the flame graph
// and the self times share them).
func (a *auto) callForest() *cct.Forest {
	if a.forest == nil {
		a.forest = a.loader.Tree.Forest() // built as the traces were read
	}
	return a.forest
}

// selfTimes is the section of the functions that took the most time
// themselves, their callees left out: from the call-context tree of
// traces whose every call and return carries its own time (--every
// rows; cct.Forest.Timed).
func (a *auto) selfTimes() (Section, error) {
	s := Section{ID: "self-time", Title: "Where the time goes"}
	if !a.anyCalls() {
		s.nothing = "self times (no call events)"
		return s, nil
	}
	f := a.callForest()
	if !f.Timed() {
		s.nothing = "self times (they need every call and return with its own time: rewrite --tool call --every --rows)"
		return s, nil
	}
	fts := f.Merged.FuncTimes()
	var total time.Duration
	for _, ft := range fts {
		total += time.Duration(ft.SelfNS)
	}
	if total == 0 {
		s.nothing = "self times (no time between the calls and returns)"
		return s, nil
	}
	s.Intro = fmt.Sprintf("The time of every call these runs made, from the call to its return (%v in all), split by the function it was spent in, callees left out (self); total counts the callees too, and a recursion once.", total.Round(time.Microsecond))
	n := a.opts.Functions
	if n < 0 || n > len(fts) {
		n = len(fts)
	}
	t := &Table{Columns: []Column{{Name: "function"}, {Name: "self", Numeric: true}, {Name: "share", Numeric: true}, {Name: "total", Numeric: true}, {Name: "calls", Numeric: true}}}
	for _, ft := range fts[:n] {
		t.Rows = append(t.Rows, []Cell{Text(ft.Name), Text(time.Duration(ft.SelfNS).Round(time.Microsecond).String()),
			Bar(float64(ft.SelfNS) / float64(total)), Text(time.Duration(ft.NS).Round(time.Microsecond).String()), Textf("%d", ft.Calls)})
	}
	if n < len(fts) {
		t.Caption = fmt.Sprintf("The %d of %d functions with the most self time.", n, len(fts))
	}
	s.Blocks = []Block{t}
	return s, nil
}

// anyCalls reports whether a run has call rows (calledFuncs' total is
// not 0), without naming their callees.
func (a *auto) anyCalls() bool {
	for _, r := range a.runs {
		for _, n := range r.Calls {
			if n > 0 {
				return true
			}
		}
	}
	return false
}
