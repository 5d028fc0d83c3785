// Package sample estimates counts and proportions from a sampled trace
// (rewrite --sample): each interval's samples of a stratum stand for the
// stratum's events in that interval, N/k each (the sample-set row's N
// events and k samples), so a target's count is the sum of its samples'
// weights, and its variance the sum over strata of a sample drawn
// without replacement's: N² (1 - k/N) p (1 - p) / (k - 1), p the share
// of the stratum's samples that are the target's.
package sample

import (
	"cmp"
	"math"
	"slices"

	"github.com/stint-project/stint/formats"
)

// Z95 is the normal quantile of the 95% intervals.
const Z95 = 1.959964

// Loc is a module-relative address (Module formats.NoModule: absolute).
type Loc struct {
	Module uint16
	Addr   uint64
}

// Target is what a count is of: calls to a function (Kind KindCall,
// direct and indirect together), or another kind's events at a site.
type Target struct {
	Kind formats.Kind
	Loc  Loc
}

// Outcome is one of a target's outcomes: a call's caller (its call
// site), another event's destination, or a syscall's number (Value).
type Outcome struct {
	Loc   Loc
	Value uint64
}

// Count is an estimated count with its 95% interval.
type Count struct {
	Est, Low, High float64
	Samples        int
}

// Estimate is a target's estimated count and its outcomes' shares.
type Estimate struct {
	Target
	Count
	// Exact: every stratum the target's samples came from was the
	// target's alone (a reservoir per function), so the count is the
	// runtime's count, not an estimate.
	Exact bool
	// Outcomes, by estimated count, largest first: Est etc. are counts;
	// Share, ShareLow and ShareHigh the proportion of the target's.
	Outcomes []Share
}

// Share is an outcome's estimated count and proportion of its target's.
type Share struct {
	Outcome
	Count
	Share, ShareLow, ShareHigh float64
}

// Run describes a sampled run: its sample-run and sample-reader rows, and
// what the rows add up to.
type Run struct {
	Method       int    // formats.SampleRate etc.; 0: no sample-run row
	Sites        bool   // every method's strata are sites (formats.SampleSites)
	Entries      bool   // every method's strata are the called functions (formats.SampleEntries)
	Param        uint64 // ppm of the events, or N
	IntervalNS   uint64
	Intervals    int    // distinct interval ends
	Sets         int    // sample-set rows
	Samples      int    // sampled rows
	Events       uint64 // events the sample-set rows stand for
	ReaderBusyNS uint64 // the reader thread's working time
	ReaderLifeNS uint64 // how long it lived
	Lost         uint64 // samples the runtime had no slot for
	Unmatched    int    // samples without a sample-set row of their stratum and interval
	HasReader    bool
}

type setKey struct {
	time    uint64
	stratum Loc
}

type set struct {
	n, k    uint64
	targets map[Target]int
	pairs   map[pair]int
}

type pair struct {
	t Target
	o Outcome
}

// Estimator gathers a trace's rows (Add) and estimates (Estimates).
type Estimator struct {
	run     Run
	sets    map[setKey]*set
	pending []formats.Event // samples seen before the run's method
	times   map[uint64]bool
}

// NewEstimator returns an empty Estimator.
func NewEstimator() *Estimator {
	return &Estimator{sets: map[setKey]*set{}, times: map[uint64]bool{}}
}

// Add takes one row of a trace; rows of no sampled run are ignored.
func (e *Estimator) Add(ev formats.Event) {
	switch ev.Kind {
	case formats.KindSampleRun:
		e.run.Method = int(ev.Src &^ (formats.SampleSites | formats.SampleEntries))
		e.run.Sites, e.run.Entries = ev.Src&formats.SampleSites != 0, ev.Src&formats.SampleEntries != 0
		e.run.Param, e.run.IntervalNS = ev.Dst, ev.Value
		for _, p := range e.pending {
			e.addSample(p)
		}
		e.pending = nil
	case formats.KindSampleSet:
		s := e.set(setKey{ev.Time, Loc{ev.SrcModule, ev.Src}})
		s.n += ev.Dst
		s.k += ev.Value
		e.run.Sets++
		e.run.Events += ev.Dst
		e.times[ev.Time] = true
	case formats.KindSampleReader:
		e.run.ReaderBusyNS, e.run.ReaderLifeNS, e.run.Lost, e.run.HasReader = ev.Src, ev.Dst, ev.Value, true
	default:
		if _, ok := ev.Kind.Sampled(); !ok {
			return
		}
		e.run.Samples++
		if e.run.Method == 0 {
			e.pending = append(e.pending, ev)
			return
		}
		e.addSample(ev)
	}
}

func (e *Estimator) set(k setKey) *set {
	s := e.sets[k]
	if s == nil {
		s = &set{targets: map[Target]int{}, pairs: map[pair]int{}}
		e.sets[k] = s
	}
	return s
}

// stratum is the runtime's (smp_key): one stream for rate and every; a
// call's callee or another event's site for a reservoir per function;
// the site for one per site; with countdowns, the counting site, or the
// callee where the functions count down.
func (e *Estimator) stratum(k formats.Kind, ev formats.Event) Loc {
	switch {
	case e.run.Entries:
		if k == formats.KindCall || k == formats.KindIndCall {
			return Loc{ev.DstModule, ev.Dst}
		}
	case e.run.Sites:
	case e.run.Method == formats.SampleRate, e.run.Method == formats.SampleEvery:
		return Loc{formats.NoModule, 0}
	case e.run.Method == formats.SampleReservoir:
		if k == formats.KindCall || k == formats.KindIndCall {
			return Loc{ev.DstModule, ev.Dst}
		}
	}
	return Loc{ev.SrcModule, ev.Src}
}

// TargetOf returns the target and outcome of an event of kind k.
func TargetOf(k formats.Kind, ev formats.Event) (Target, Outcome) {
	switch k {
	case formats.KindCall, formats.KindIndCall:
		return Target{formats.KindCall, Loc{ev.DstModule, ev.Dst}}, Outcome{Loc: Loc{ev.SrcModule, ev.Src}}
	case formats.KindSyscall:
		return Target{k, Loc{ev.SrcModule, ev.Src}}, Outcome{Loc: Loc{formats.NoModule, 0}, Value: ev.Value}
	}
	return Target{k, Loc{ev.SrcModule, ev.Src}}, Outcome{Loc: Loc{ev.DstModule, ev.Dst}}
}

func (e *Estimator) addSample(ev formats.Event) {
	k, _ := ev.Kind.Sampled()
	s := e.set(setKey{ev.Time, e.stratum(k, ev)})
	t, o := TargetOf(k, ev)
	s.targets[t]++
	s.pairs[pair{t, o}]++
}

// Weight returns the number of events a sample stands for: its
// stratum's events in its interval over the samples written for them;
// 0 for a row that is no sample or has no sample-set row (yet: feed
// the whole trace first).
func (e *Estimator) Weight(ev formats.Event) float64 {
	k, ok := ev.Kind.Sampled()
	if !ok || e.run.Method == 0 {
		return 0
	}
	s := e.sets[setKey{ev.Time, e.stratum(k, ev)}]
	if s == nil || s.k == 0 {
		return 0
	}
	return float64(s.n) / float64(s.k)
}

// Run returns what the rows said about the run.
func (e *Estimator) Run() Run {
	r := e.run
	r.Intervals = len(e.times)
	for _, s := range e.sets {
		if s.n == 0 {
			for _, c := range s.targets {
				r.Unmatched += c
			}
		}
	}
	return r
}

// acc sums a count's weights and variances over the strata.
type acc struct {
	est, vr float64
	samples int
	mixed   bool // some stratum held other targets' samples too
}

func (a *acc) add(s *set, c int, alone bool) {
	if s.n == 0 || s.k == 0 {
		return
	}
	n, k := float64(s.n), float64(s.k)
	p := float64(c) / k
	a.est += n * p
	a.samples += c
	if k < n && k > 1 {
		a.vr += n * n * (1 - k/n) * p * (1 - p) / (k - 1)
	}
	a.mixed = a.mixed || !alone
}

func (a *acc) count() Count {
	h := Z95 * math.Sqrt(a.vr)
	return Count{Est: a.est, Low: max(0, a.est-h), High: a.est + h, Samples: a.samples}
}

// Estimates returns every target's estimate, largest count first.
func (e *Estimator) Estimates() []Estimate {
	ts, ps := map[Target]*acc{}, map[pair]*acc{}
	get := func(m map[Target]*acc, t Target) *acc {
		if m[t] == nil {
			m[t] = &acc{}
		}
		return m[t]
	}
	for _, s := range e.sets {
		for t, c := range s.targets {
			get(ts, t).add(s, c, len(s.targets) == 1)
		}
		for p, c := range s.pairs {
			if ps[p] == nil {
				ps[p] = &acc{}
			}
			ps[p].add(s, c, len(s.targets) == 1)
		}
	}
	out := make([]Estimate, 0, len(ts))
	idx := map[Target]int{}
	for t, a := range ts {
		idx[t] = len(out)
		out = append(out, Estimate{Target: t, Count: a.count(), Exact: !a.mixed})
	}
	shareVar := e.shareVariances(ts, ps)
	for p, a := range ps {
		es := &out[idx[p.t]]
		c := a.count()
		sh := Share{Outcome: p.o, Count: c}
		if es.Est > 0 {
			h := Z95 * math.Sqrt(shareVar[p])
			sh.Share = c.Est / es.Est
			sh.ShareLow, sh.ShareHigh = max(0, sh.Share-h), min(1, sh.Share+h)
		}
		es.Outcomes = append(es.Outcomes, sh)
	}
	for i := range out {
		slices.SortFunc(out[i].Outcomes, func(a, b Share) int {
			return cmp.Or(cmp.Compare(b.Est, a.Est), cmpOutcome(a.Outcome, b.Outcome))
		})
	}
	slices.SortFunc(out, func(a, b Estimate) int {
		return cmp.Or(cmp.Compare(b.Est, a.Est), cmp.Compare(a.Kind, b.Kind), cmpLoc(a.Loc, b.Loc))
	})
	return out
}

// shareVariances returns each outcome's share's variance: the share is
// a ratio of two estimates, the outcome's count over its target's, both
// from the same samples, so its variance is the combined ratio
// estimator's (Cochran, Sampling Techniques, 6.11): over the strata,
// N² (1 - k/N) s² / k, s² the variance of d = y - R x over a stratum's
// k samples (y: the sample is the outcome's, x: the target's), over the
// target's estimate squared. With a reservoir per function (x = 1) it is
// a proportion's.
func (e *Estimator) shareVariances(ts map[Target]*acc, ps map[pair]*acc) map[pair]float64 {
	byTarget := map[Target][]pair{}
	for p := range ps {
		byTarget[p.t] = append(byTarget[p.t], p)
	}
	vr := map[pair]float64{}
	for _, s := range e.sets {
		if s.n == 0 || s.k < 2 || s.k >= s.n {
			continue
		}
		n, k := float64(s.n), float64(s.k)
		for t, cx := range s.targets {
			x := ts[t].est
			if x <= 0 {
				continue
			}
			for _, p := range byTarget[t] {
				r := ps[p].est / x
				cy := float64(s.pairs[p])
				sum := cy*(1-r)*(1-r) + (float64(cx)-cy)*r*r // sum of d² (d = 0 elsewhere)
				mean := (cy - r*float64(cx)) / k
				sd := (sum - k*mean*mean) / (k - 1)
				vr[p] += n * n * (1 - k/n) * sd / k / (x * x)
			}
		}
	}
	return vr
}

func cmpLoc(a, b Loc) int {
	return cmp.Or(cmp.Compare(a.Module, b.Module), cmp.Compare(a.Addr, b.Addr))
}

func cmpOutcome(a, b Outcome) int { return cmp.Or(cmpLoc(a.Loc, b.Loc), cmp.Compare(a.Value, b.Value)) }

// TVD is the total variation distance between two distributions given
// as counts (each normalised to its sum): half the sum of |p - q|.
func TVD[K comparable](p, q map[K]float64) float64 {
	var sp, sq float64
	for _, v := range p {
		sp += v
	}
	for _, v := range q {
		sq += v
	}
	if sp == 0 || sq == 0 {
		return 1
	}
	d := 0.0
	for k, v := range p {
		d += math.Abs(v/sp - q[k]/sq)
	}
	for k, v := range q {
		if _, ok := p[k]; !ok {
			d += v / sq
		}
	}
	return d / 2
}
