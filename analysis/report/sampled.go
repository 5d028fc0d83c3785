package report

import (
	"fmt"
	"math"
	"path/filepath"
	"sort"

	"github.com/stint-project/stint/analysis/sample"
	"github.com/stint-project/stint/formats"
)

// sampledFunc is a function's calls as sampled runs estimate them,
// summed over the runs: the estimate, its variance, whether every run
// counted it exactly, and its callers' estimated calls.
type sampledFunc struct {
	name, module string
	est, vr      float64
	samples      int
	exact        bool
	callers      map[string]float64
}

// sampledCalls is the section of sampled runs' estimated calls (rewrite
// --sample): by callee, with a 95% interval and the largest caller's
// share. Nothing when no run sampled.
func (a *auto) sampledCalls() (Section, error) {
	s := Section{ID: "sampled-calls", Title: "Estimated calls (sampled runs)"}
	funcs, runs := a.sampledFuncs()
	if runs == 0 || len(funcs) == 0 {
		s.nothing = "estimated calls (no sampled run)"
		return s, nil
	}
	s.Intro = fmt.Sprintf("%d sampled run%s: each sample stands for its stratum's calls in its interval over its samples. "+
		"A reservoir per function, and call sites counting down, count their calls exactly; the interval is 95%%.", runs, plural(runs))
	n := a.opts.Functions
	if n < 0 || n > len(funcs) {
		n = len(funcs)
	}
	t := &Table{Columns: []Column{{Name: "function"}, {Name: "module"}, {Name: "estimated calls", Numeric: true},
		{Name: "95% interval"}, {Name: "samples", Numeric: true}, {Name: "top caller"}}}
	for _, f := range funcs[:n] {
		ci := "exact"
		if !f.exact {
			h := sample.Z95 * math.Sqrt(f.vr)
			ci = fmt.Sprintf("%.0f..%.0f", max(0, f.est-h), f.est+h)
		}
		top, topEst := "", 0.0
		for c, e := range f.callers {
			if e > topEst || e == topEst && c < top {
				top, topEst = c, e
			}
		}
		if top != "" && f.est > 0 {
			top = fmt.Sprintf("%s (%.1f%%)", top, 100*topEst/f.est)
		}
		t.Rows = append(t.Rows, []Cell{Text(f.name), Text(f.module), Textf("%.0f", f.est), Text(ci), Textf("%d", f.samples), Text(top)})
	}
	if n < len(funcs) {
		t.Caption = fmt.Sprintf("The %d most called of %d functions sampled.", n, len(funcs))
	}
	s.Blocks = []Block{t}
	return s, nil
}

// sampledFuncs sums the sampled runs' call estimates by function, most
// called first; runs is how many runs sampled.
func (a *auto) sampledFuncs() (funcs []*sampledFunc, runs int) {
	type key struct{ module, name string }
	by := map[key]*sampledFunc{}
	for _, r := range a.runs {
		if r.Sampled == nil || r.Sampled.Run().Method == 0 {
			continue
		}
		runs++
		for _, e := range r.Sampled.Estimates() {
			if e.Kind != formats.KindCall {
				continue
			}
			name, module := a.nameAt(e.Loc)
			f := by[key{module, name}]
			if f == nil {
				f = &sampledFunc{name: name, module: module, exact: true, callers: map[string]float64{}}
				by[key{module, name}] = f
			}
			sd := (e.High - e.Low) / 2 / sample.Z95
			f.est += e.Est
			f.vr += sd * sd
			f.samples += e.Samples
			f.exact = f.exact && e.Exact
			for _, o := range e.Outcomes {
				c, _ := a.nameAt(o.Loc)
				f.callers[c] += o.Est
			}
		}
	}
	for _, f := range by {
		funcs = append(funcs, f)
	}
	sort.Slice(funcs, func(i, j int) bool {
		if funcs[i].est != funcs[j].est {
			return funcs[i].est > funcs[j].est
		}
		return funcs[i].name < funcs[j].name
	})
	return funcs, runs
}

// nameAt names a location of the loader's modules: its function and
// module file, or its address.
func (a *auto) nameAt(l sample.Loc) (name, module string) {
	name, module = fmt.Sprintf("%#x", l.Addr), "?"
	if l.Module == formats.NoModule {
		return name, module
	}
	if m, ok := a.loader.Module(int32(l.Module)); ok {
		module = filepath.Base(m.Path)
		if tab, err := a.opts.Resolver.Table(m.BuildID, m.Path); err == nil {
			if f := tab.Lookup(l.Addr); f != nil {
				name = f.Name
			}
		}
	}
	return name, module
}
