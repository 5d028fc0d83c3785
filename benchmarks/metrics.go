package benchmarks

import (
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/stint-project/stint/formats"
	"github.com/stint-project/stint/formats/redlog"
)

// This file computes the DIME* metrics of a series of runs from their
// traces with package formats directly. `cov compare` (analysis/,
// cmd/cov) is the tool for users; when it is installed, [CovCompare]
// asks it instead and these functions only fill in what its JSON does
// not carry (see (*DIME).compare).

// EventKey identifies a distinct event across processes and runs: module
// identities instead of per-trace module ids, so that runs under ASLR
// and with libraries loaded in another order compare.
type EventKey struct {
	Kind     formats.Kind
	Src, Dst uint64
	Value    uint64
	SrcMod   uint32 // interned module identity (see [Interner])
	DstMod   uint32
}

// noMod is the interned identity of formats.NoModule.
const noMod = math.MaxUint32

// Interner maps a module's identity (its build-id, or its path when it
// has none) to a small number shared by all traces of an experiment.
// The zero value is ready to use.
type Interner struct {
	ids  map[string]uint32
	keys []string // by id: "b:<build-id hex>" or "p:<path>"
}

func (in *Interner) id(m *formats.Module) uint32 {
	if m == nil {
		return noMod
	}
	k := "b:" + m.BuildID
	if m.BuildID == "" {
		k = "p:" + m.Path
	}
	if v, ok := in.ids[k]; ok {
		return v
	}
	if in.ids == nil {
		in.ids = map[string]uint32{}
	}
	v := uint32(len(in.keys))
	in.ids[k] = v
	in.keys = append(in.keys, k)
	return v
}

// BuildID returns the build-id (hex) of the module with the interned id,
// or "" if it has none or id is not a module.
func (in *Interner) BuildID(id uint32) string {
	if int64(id) >= int64(len(in.keys)) {
		return ""
	}
	k, ok := strings.CutPrefix(in.keys[id], "b:")
	if !ok {
		return ""
	}
	return k
}

// EventSet is a set of distinct events.
type EventSet map[EventKey]struct{}

// RunTrace is what one run left: the distinct events of all its trace
// files (a run may be several processes), its budget periods and its
// run time from the KindRunEnd rows.
type RunTrace struct {
	Files     []string
	Events    EventSet
	Periods   []formats.Period
	RunTimeNS uint64 // longest KindRunEnd run time among the files (0: none)
	Warnings  []string
}

// ReadRunDir reads every *.arrow file of dir. A file cut short (a
// process killed) still gives its complete batches, with a warning; a
// directory without traces is an error.
func ReadRunDir(dir string, in *Interner) (*RunTrace, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.arrow"))
	if err != nil {
		return nil, err
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("%s: no trace files", dir)
	}
	sort.Strings(files)
	rt := &RunTrace{Files: files, Events: EventSet{}}
	for _, f := range files {
		t, err := formats.ReadFile(f)
		if t == nil {
			return nil, fmt.Errorf("read trace: %w", err)
		}
		if err != nil {
			if !errors.Is(err, formats.ErrTruncated) {
				return nil, fmt.Errorf("read trace: %w", err)
			}
			rt.Warnings = append(rt.Warnings, fmt.Sprintf("%s: %v (complete batches used)", filepath.Base(f), err))
		}
		rt.add(t, in)
	}
	return rt, nil
}

// add folds one trace into rt.
func (rt *RunTrace) add(t *formats.Trace, in *Interner) {
	mods := map[uint16]uint32{}
	mod := func(id uint16) uint32 {
		if id == formats.NoModule {
			return noMod
		}
		v, ok := mods[id]
		if !ok {
			v = in.id(t.Module(id))
			mods[id] = v
		}
		return v
	}
	var pb formats.PeriodBuilder
	for _, e := range t.Events {
		switch {
		case e.Kind.Valid():
			rt.Events[EventKey{Kind: e.Kind, Src: e.Src, Dst: e.Dst, Value: e.Value, SrcMod: mod(e.SrcModule), DstMod: mod(e.DstModule)}] = struct{}{}
		case e.Kind == formats.KindRunEnd:
			rt.RunTimeNS = max(rt.RunTimeNS, e.Value)
		default:
			pb.Add(e)
		}
	}
	rt.Periods = append(rt.Periods, pb.Periods()...)
}

// RunMetrics are the DIME* metrics of one run of a series.
type RunMetrics struct {
	Events     int     `json:"distinct_events"`     // distinct events the run recorded
	Coverage   float64 `json:"coverage"`            // |run ∩ full| / |full|
	Cumulative float64 `json:"cumulative_coverage"` // |(runs 1..i) ∩ full| / |full|
	// FalsePositive is the paper's false-positive ratio: events this
	// run recorded that an earlier run of the series had recorded
	// already, over the events it recorded.
	FalsePositive float64 `json:"false_positive_ratio"`
	// FalseNegative is the paper's false-negative ratio as far as
	// traces can tell: of the full run's events this run did not record
	// (rejected: by the log, or because the budget was spent), those
	// that no earlier run had recorded either. Budget misses count too,
	// so a budgeted series without a log shows the floor.
	FalseNegative float64 `json:"false_negative_ratio"`
	Extra         int     `json:"events_not_in_full"` // recorded events the full run does not have (nondeterminism)
}

// CompareRuns computes the metrics of runs (in order) against the full
// run's events.
func CompareRuns(runs []EventSet, full EventSet) []RunMetrics {
	out := make([]RunMetrics, len(runs))
	seen := EventSet{}
	covered := 0 // |seen ∩ full|
	for i, r := range runs {
		m := &out[i]
		m.Events = len(r)
		inFull, again := 0, 0
		for k := range r {
			if _, ok := full[k]; ok {
				inFull++
			} else {
				m.Extra++
			}
			if _, ok := seen[k]; ok {
				again++
			}
		}
		rejected, rejectedNew := 0, 0
		for k := range full {
			if _, ok := r[k]; ok {
				continue
			}
			rejected++
			if _, ok := seen[k]; !ok {
				rejectedNew++
			}
		}
		for k := range r {
			if _, ok := seen[k]; !ok {
				seen[k] = struct{}{}
				if _, ok := full[k]; ok {
					covered++
				}
			}
		}
		m.Coverage = ratio(inFull, len(full))
		m.Cumulative = ratio(covered, len(full))
		m.FalsePositive = ratio(again, len(r))
		m.FalseNegative = ratio(rejectedNew, rejected)
	}
	return out
}

func ratio(a, b int) float64 {
	if b == 0 {
		return 0
	}
	return float64(a) / float64(b)
}

// Dist summarises a distribution of durations in microseconds.
type Dist struct {
	N      int     `json:"n"`
	Median float64 `json:"median_us"`
	P99    float64 `json:"p99_us"`
	Max    float64 `json:"max_us"`
}

// Distribution returns the median, 99th percentile (nearest rank) and
// maximum of ns, in microseconds.
func Distribution(ns []uint64) Dist {
	if len(ns) == 0 {
		return Dist{}
	}
	s := slices.Clone(ns)
	slices.Sort(s)
	us := func(v uint64) float64 { return float64(v) / 1e3 }
	rank := int(math.Ceil(0.99*float64(len(s)))) - 1
	var med float64
	if n := len(s); n%2 == 1 {
		med = us(s[n/2])
	} else {
		med = (us(s[n/2-1]) + us(s[n/2])) / 2
	}
	return Dist{N: len(s), Median: med, P99: us(s[max(rank, 0)]), Max: us(s[len(s)-1])}
}

// Overshoots returns the overshoot of every period of ps that has its
// budget row, in ns.
func Overshoots(ps []formats.Period) []uint64 {
	var out []uint64
	for _, p := range ps {
		if p.HasBudget {
			out = append(out, p.Overshoot)
		}
	}
	return out
}

// GeoMean is the geometric mean of the positive values of xs (0 for none).
func GeoMean(xs []float64) float64 {
	s, n := 0.0, 0
	for _, x := range xs {
		if x > 0 {
			s += math.Log(x)
			n++
		}
	}
	if n == 0 {
		return 0
	}
	return math.Exp(s / float64(n))
}

// freshDir makes dir an empty directory.
func freshDir(dir string) error {
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	return os.MkdirAll(dir, 0o755)
}

// LogFalseNegatives measures the false negatives of an exact log
// directly: the log as it was before a run (the file at snapshot)
// rejects every outcome it holds, so of the full run's events it holds
// (rejected), those that no earlier run recorded (not in prior) are
// false negatives. It returns the ratio and the number rejected; ok is
// false when the log is not an exact one (the region policies reject
// code regions whose extent only the runtime knows, so their false
// negatives are measured from the traces alone, see [RunMetrics]).
func LogFalseNegatives(snapshot string, full, prior EventSet, in *Interner) (fn float64, rejected int, ok bool, err error) {
	l, _, err := redlog.ReadFile(snapshot)
	if err != nil {
		return 0, 0, false, err
	}
	if l.Policy != redlog.Exact {
		return 0, 0, false, nil
	}
	set := l.ExactSet()
	hashes := map[uint32]uint64{}
	dstHash := func(id uint32) uint64 {
		if id == noMod {
			return 0
		}
		h, seen := hashes[id]
		if !seen {
			if b, err := redlog.ParseBuildID(in.BuildID(id)); err == nil {
				h = redlog.BuildIDHash(b)
			}
			hashes[id] = h
		}
		return h
	}
	falseNeg := 0
	for e := range full {
		bid := in.BuildID(e.SrcMod)
		if bid == "" {
			continue
		}
		dm := dstHash(e.DstMod)
		if e.Kind == formats.KindSyscall {
			dm = 0
		}
		if !set.Has(bid, e.Src, e.Dst, dm, uint32(e.Kind)) {
			continue
		}
		rejected++
		if _, ok := prior[e]; !ok {
			falseNeg++
		}
	}
	return ratio(falseNeg, rejected), rejected, true, nil
}
