package report

import (
	"encoding/hex"
	"fmt"
	"path/filepath"
	"sort"
	"strings"

	"github.com/stint-project/stint/runtime"
)

// probedFunc is a function of a rewritten module: the outcomes its probes
// watch, and how many of them the runs recorded.
type probedFunc struct {
	name, module    string
	probed, covered int
}

// outcome is a probe's outcome as the loader keys events: the module's
// global index, the source and the kind.
type outcome struct {
	mod  int32
	src  uint64
	kind uint8
}

// probedCoverage measures coverage without a full run: for each
// rewritten module of the runs whose file is still there (same
// build-id), every probe of its probe table is an outcome to see (a jcc
// outcome, a jump, a call, a block; a return or an indirect branch or a
// syscall once, whatever its destinations), covered when a run recorded
// an event of that source and kind (a block-count trace: a count). Sites the rewrite could not patch
// have no probe, and are not counted. Functions by their symbols, else
// as "?".
func (a *auto) probedCoverage() (funcs []probedFunc, skipped []string) {
	var recorded map[outcome]bool // built for the first module with a probe table
	record := func() {
		recorded = map[outcome]bool{}
		a.loader.union.each(func(k evKey) { recorded[outcome{k.srcMod, k.src, k.kind}] = true })
		for _, r := range a.runs {
			for at := range r.Counts { // a block-count trace: the blocks that ran
				recorded[outcome{at.Module, at.Addr, uint8(runtime.KBlock)}] = true
			}
		}
	}
	byName := map[funcKey]*probedFunc{}
	for g, m := range a.loader.modInfo {
		if !m.Rewritten {
			continue
		}
		mod, probes, err := runtime.ReadProbes(m.Path)
		if err != nil || hex.EncodeToString(mod.BuildID[:min(mod.BuildIDLen, 32)]) != m.BuildID {
			skipped = append(skipped, filepath.Base(m.Path))
			continue
		}
		if recorded == nil {
			record()
		}
		tab, _ := a.opts.Resolver.Table(m.BuildID, m.Path)
		for _, p := range probes {
			k := runtime.Kind(p.Kind)
			if p.Flags&runtime.PFDeleg != 0 || k == runtime.KEntry || k == runtime.KResume {
				continue // recorded by another probe, or not an event
			}
			fk := funcKey{filepath.Base(m.Path), "?"}
			if f := tab.Lookup(p.Src); f != nil {
				fk.name = f.Name
			}
			f := byName[fk]
			if f == nil {
				f = &probedFunc{name: fk.name, module: fk.module}
				byName[fk] = f
			}
			f.probed++
			if recorded[outcome{int32(g), p.Src, p.Kind}] {
				f.covered++
			}
		}
	}
	for _, f := range byName {
		funcs = append(funcs, *f)
	}
	sort.Slice(funcs, func(i, j int) bool {
		ci, cj := float64(funcs[i].covered)/float64(funcs[i].probed), float64(funcs[j].covered)/float64(funcs[j].probed)
		if ci != cj {
			return ci < cj
		}
		if funcs[i].probed != funcs[j].probed {
			return funcs[i].probed > funcs[j].probed
		}
		return funcs[i].name < funcs[j].name
	})
	return funcs, skipped
}

// probedSection is the coverage section of runs without a full run: the
// functions least covered first, and the functions no run entered.
func (a *auto) probedSection() (Section, bool) {
	s := Section{ID: "functions", Title: "Coverage by function"}
	funcs, skipped := a.probedCoverage()
	if len(funcs) == 0 {
		return s, false
	}
	var probed, covered int
	var none []string
	for _, f := range funcs {
		probed, covered = probed+f.probed, covered+f.covered
		if f.covered == 0 {
			none = append(none, f.name)
		}
	}
	s.Intro = fmt.Sprintf("No full run given: coverage is measured against the rewritten files' probe tables, each probe an outcome to see "+
		"(a jcc's taken or not-taken, a jump, a call, a block; a return, an indirect branch or a syscall once). The runs saw %d of %d (%s). "+
		"Sites the rewrite could not patch are not counted.", covered, probed, pct(float64(covered)/float64(probed)))
	if len(skipped) > 0 {
		s.Intro += " Not read (file gone or rewritten again): " + strings.Join(skipped, ", ") + "."
	}
	n := a.opts.Functions
	if n < 0 || n > len(funcs) {
		n = len(funcs)
	}
	t := &Table{Columns: []Column{{Name: "function"}, {Name: "module"}, {Name: "covered", Numeric: true}, {Name: "probed", Numeric: true}, {Name: "coverage", Numeric: true}}}
	for _, f := range funcs[:n] {
		t.Rows = append(t.Rows, []Cell{Text(f.name), Text(f.module), Textf("%d", f.covered), Textf("%d", f.probed), Bar(float64(f.covered) / float64(f.probed))})
	}
	if n < len(funcs) {
		t.Caption = fmt.Sprintf("The %d least covered of %d functions.", n, len(funcs))
	}
	s.Blocks = []Block{t}
	if len(none) > 0 {
		sort.Strings(none)
		more := ""
		if len(none) > 100 {
			none, more = none[:100], fmt.Sprintf(" (and %d more)", len(none)-100)
		}
		s.Blocks = append(s.Blocks, &Note{Text: fmt.Sprintf("Never entered by these runs (%d): %s%s.", len(none), strings.Join(none, ", "), more)})
	}
	return s, true
}
