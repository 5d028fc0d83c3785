// Command accuracy compares a sampled call trace with an exhaustive one
// of the same workload (the reservoir thesis's accuracy): per function
// with at least --min calls in the exhaustive run, its share of all
// calls, and the total variation distance of its callers (call sites)
// from the exhaustive run's.
//
//	accuracy [--min N] [--counts] EXHAUSTIVE_DIR SAMPLED_DIR
//
// A second exhaustive trace for SAMPLED_DIR shows what two runs of the
// workload differ by without sampling. EXHAUSTIVE_DIR may hold a
// sampled run that takes every call (rate:100%), estimated like the
// other: the exact counts of what its probes count (function entries,
// where call sites count calls). With --counts, for a deterministic
// workload whose two runs make the same calls, each function's
// estimated count is compared with its exact count instead of shares.
// Each directory holds one process's trace (*.arrow; the largest file
// is read). The exhaustive trace has a row per call (rewrite --tool call
// --sample all); the sampled one is estimated with analysis/sample. The
// runs are separate, so counts are compared as shares of each run's
// calls. Locations are keyed by module build-id (else file name) and
// module-relative address, so that the two runs' module numbering and
// file names may differ.
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"

	"github.com/stint-project/stint/analysis/sample"
	"github.com/stint-project/stint/formats"
)

// loc is a location by module build-id or file name.
type loc struct {
	mod  string
	addr uint64
}

// calls are a run's calls per callee, by caller.
type calls struct {
	total   float64
	callers map[loc]map[loc]float64
}

func (c *calls) add(callee, caller loc, n float64) {
	if c.callers[callee] == nil {
		c.callers[callee] = map[loc]float64{}
	}
	c.callers[callee][caller] += n
	c.total += n
}

func main() {
	minCalls := flag.Float64("min", 1000, "compare functions with at least this many calls in the exhaustive run")
	counts := flag.Bool("counts", false, "compare estimated counts with exact ones, not shares (a deterministic workload)")
	flag.Parse()
	if flag.NArg() != 2 {
		fmt.Fprintln(os.Stderr, "usage: accuracy [--min N] [--counts] EXHAUSTIVE_DIR SAMPLED_DIR")
		os.Exit(2)
	}
	ex, err := sampled(flag.Arg(0)) // an exhaustive run, or one sampled at 100%
	if err == nil {
		var sm *calls
		if sm, err = sampled(flag.Arg(1)); err == nil {
			report(os.Stdout, ex, sm, *minCalls, *counts)
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "accuracy:", err)
		os.Exit(1)
	}
}

// largest returns the largest trace file in dir.
func largest(dir string) (string, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.arrow"))
	if err != nil || len(files) == 0 {
		return "", fmt.Errorf("%s: no trace (%v)", dir, err)
	}
	best, size := "", int64(-1)
	for _, f := range files {
		if st, err := os.Stat(f); err == nil && st.Size() > size {
			best, size = f, st.Size()
		}
	}
	return best, nil
}

// each calls fn on every row of dir's largest trace, with its modules' names.
func each(dir string, fn func(ev formats.Event, name func(uint16) string)) error {
	path, err := largest(dir)
	if err != nil {
		return err
	}
	r, err := formats.Open(path)
	if err != nil {
		return err
	}
	defer r.Release()
	names := map[uint16]string{}
	for _, m := range r.Modules() {
		names[m.ID] = filepath.Base(m.Path)
		if m.BuildID != "" {
			names[m.ID] = m.BuildID // the same in two rewrites of one file
		}
	}
	name := func(id uint16) string { return names[id] }
	var evs []formats.Event
	for r.Next() {
		evs = r.AppendEvents(evs[:0])
		for _, ev := range evs {
			fn(ev, name)
		}
	}
	return r.Err()
}

// exhaustive counts the calls of an exhaustive trace.
func exhaustive(dir string) (*calls, error) {
	c := &calls{callers: map[loc]map[loc]float64{}}
	err := each(dir, func(ev formats.Event, name func(uint16) string) {
		if ev.Kind == formats.KindCall || ev.Kind == formats.KindIndCall {
			c.add(loc{name(ev.DstModule), ev.Dst}, loc{name(ev.SrcModule), ev.Src}, 1)
		}
	})
	return c, err
}

// sampled estimates the calls of a sampled trace.
func sampled(dir string) (*calls, error) {
	est := sample.NewEstimator()
	var names func(uint16) string
	err := each(dir, func(ev formats.Event, name func(uint16) string) {
		est.Add(ev)
		names = name
	})
	if err != nil {
		return nil, err
	}
	if est.Run().Method == 0 {
		return exhaustive(dir) // another exhaustive run: what two runs differ by
	}
	c := &calls{callers: map[loc]map[loc]float64{}}
	for _, e := range est.Estimates() {
		if e.Kind != formats.KindCall {
			continue
		}
		callee := loc{names(e.Loc.Module), e.Loc.Addr}
		for _, o := range e.Outcomes {
			c.add(callee, loc{names(o.Loc.Module), o.Loc.Addr}, o.Est)
		}
	}
	return c, nil
}

// report prints, over the functions with at least min exhaustive calls,
// how far their share of calls (counts: their count) and their callers
// are from the exhaustive run's.
func report(w io.Writer, ex, sm *calls, minCalls float64, counts bool) {
	var shareErr, tvd []float64
	within, near, missing := 0, 0, 0
	for callee, callers := range ex.callers {
		n := 0.0
		for _, v := range callers {
			n += v
		}
		if n < minCalls {
			continue
		}
		got, ok := sm.callers[callee]
		if !ok {
			missing++
			continue
		}
		m := 0.0
		for _, v := range got {
			m += v
		}
		e := abs(m/sm.total-n/ex.total) / (n / ex.total)
		if counts {
			e = abs(m-n) / n
		}
		d := sample.TVD(callers, got)
		shareErr, tvd = append(shareErr, e), append(tvd, d)
		if e <= 0.05 {
			within++
		}
		if d <= 0.05 {
			near++
		}
	}
	k := len(shareErr)
	fmt.Fprintf(w, "functions with %.0f calls or more: %d compared, %d without a sample\n", minCalls, k, missing)
	if k == 0 {
		return
	}
	what := "share of calls"
	if counts {
		what = "estimated calls"
	}
	fmt.Fprintf(w, "%s: %d of %d within 5%% of the exhaustive run's; relative error median %.4f, p90 %.4f, max %.4f\n",
		what, within, k, quantile(shareErr, 0.5), quantile(shareErr, 0.9), quantile(shareErr, 1))
	fmt.Fprintf(w, "callers: %d of %d within a total variation distance of 0.05; median %.4f, p90 %.4f, max %.4f\n",
		near, k, quantile(tvd, 0.5), quantile(tvd, 0.9), quantile(tvd, 1))
}

func abs(x float64) float64 {
	if x < 0 {
		return -x
	}
	return x
}

func quantile(xs []float64, q float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[int(q*float64(len(s)-1))]
}
