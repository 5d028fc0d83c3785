// Package cov compares budgeted runs of a program with a full
// (unbudgeted) run of it, with the metrics of DIME* (Arafa et al.,
// section 3.2.4 and 4), translated to stint's events.
//
// # Definitions
//
// A distinct event is a (source module build-id, src, destination module
// build-id, dst, kind) tuple of an event row; record rows (budget
// periods, run end) are not events. For a syscall, dst is the syscall
// number. A module without a build-id is identified by its path; dst of
// an address outside every module is absolute. Let F be the distinct
// events of the full run and R_i those of run i (runs in the order
// given; a merged file's runs count in their order).
//
//	coverage_i            |R_i ∩ F| / |F|
//	cumulative_coverage_i |(R_1 ∪ … ∪ R_i) ∩ F| / |F|   (Figure 6)
//	extra_i               |R_i \ F|: events the full run lacks (other
//	                      inputs, non-determinism); never counted as coverage
//	false_positive_ratio  |R_i ∩ (R_1 ∪ … ∪ R_{i-1})| / |R_i|: of what
//	                      run i recorded, the share an earlier run had
//	                      already recorded (budget spent on redundancy)
//	false_negative_ratio  |X_i \ (R_1 ∪ … ∪ R_{i-1})| / |X_i|, where X_i
//	                      are the events run i's redundancy log refused
//	                      (the runtime writes a refusal row, once per
//	                      run, for each: formats.KindRefusedBase): of
//	                      what the log refused, the share no earlier run
//	                      had recorded (the paper's false negatives)
//	missed_ratio          |F \ (R_1 ∪ … ∪ R_i)| / |F \ R_i|: of the full
//	                      run's events that run i did not record, for any
//	                      reason (log or spent budget), the share no run
//	                      so far had recorded either
//
// The exact policy refuses only outcomes an earlier run recorded, so its
// false-negative ratio is 0 by construction (a refusal of an event no
// earlier run of this comparison recorded can still appear when the log
// was filled by runs not given here). A run without a log refuses nothing
// and has ratio 0. Ratios with an empty denominator are 0.
//
// Overshoot statistics are over the periods that overshot (used >
// granted): count, median, 99th percentile (nearest rank) and maximum of
// used − granted, in µs. Slowdowns need the run-end record's run time.
package cov

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
	"unsafe"

	"github.com/stint-project/stint/analysis/merge"
	"github.com/stint-project/stint/analysis/symbols"
	"github.com/stint-project/stint/formats"
	"github.com/stint-project/stint/internal/prefetch"
)

// ErrDifferentBinaries is wrapped by the error of a comparison of traces
// of different executables.
var ErrDifferentBinaries = errors.New("traces of different binaries")

// Options configure [Compare].
type Options struct {
	NativeNS uint64            // native run time, ns (0: unknown)
	Resolver *symbols.Resolver // names functions; nil: no by-function table
}

// Report is the result of [Compare]. JSON keys are stable.
type Report struct {
	Coverage   float64     `json:"coverage"`    // cumulative coverage after the last run
	FullEvents int         `json:"full_events"` // |F|
	Covered    int         `json:"covered"`     // |(∪R_i) ∩ F|
	Extra      int         `json:"extra"`       // |(∪R_i) \ F|
	FullFile   string      `json:"full_file"`
	FullTimeNS uint64      `json:"full_time_ns,omitempty"`
	NativeNS   uint64      `json:"native_ns,omitempty"`
	Runs       []RunReport `json:"runs"`
	Overshoot  Overshoot   `json:"overshoot"` // over all runs
	Modules    []ModuleCov `json:"modules"`
	Functions  []FuncCov   `json:"functions,omitempty"`
	Warnings   []string    `json:"warnings,omitempty"`
}

// RunReport holds one run's metrics.
type RunReport struct {
	File               string  `json:"file"`
	Run                int     `json:"run"` // index of the run in its file
	PID                int64   `json:"pid"`
	Events             int     `json:"events"` // |R_i|
	Coverage           float64 `json:"coverage"`
	CumulativeCoverage float64 `json:"cumulative_coverage"`
	FalsePositiveRatio float64 `json:"false_positive_ratio"`
	FalseNegativeRatio float64 `json:"false_negative_ratio"`
	MissedRatio        float64 `json:"missed_ratio"`
	Refused            int     `json:"refused"`            // |X_i|: refusal rows
	RefusedUnrecorded  int     `json:"refused_unrecorded"` // FN numerator
	Redundant          int     `json:"redundant"`          // FP numerator
	Rejected           int     `json:"rejected"`           // |F \ R_i|
	Missed             int     `json:"missed"`             // |F \ (R_1 ∪ … ∪ R_i)|
	Extra              int     `json:"extra"`
	Suppressed         uint64  `json:"suppressed"` // runtime calls that recorded nothing (period records)
	Overshoot
	TimeNS         uint64   `json:"time_ns,omitempty"`
	SlowdownFull   *float64 `json:"slowdown_vs_full,omitempty"`
	SlowdownNative *float64 `json:"slowdown_vs_native,omitempty"`
}

// Overshoot summarises budget periods.
type Overshoot struct {
	Periods    int     `json:"periods"`
	Overshoots int     `json:"overshoots"`
	MedianUS   float64 `json:"overshoot_median_us"`
	P99US      float64 `json:"overshoot_p99_us"`
	MaxUS      float64 `json:"overshoot_max_us"`
}

// ModuleCov is the coverage of the full run's events by source module.
type ModuleCov struct {
	Module   string  `json:"module"` // path
	BuildID  string  `json:"build_id"`
	Full     int     `json:"full"`
	Covered  int     `json:"covered"`
	Coverage float64 `json:"coverage"`
	Symbols  string  `json:"symbols,omitempty"` // where names came from, or why there are none
}

// FuncCov is the coverage of the full run's events by source function.
type FuncCov struct {
	Module   string  `json:"module"`
	Function string  `json:"function"` // name, or an address range if the module has no symbols
	Full     int     `json:"full"`
	Covered  int     `json:"covered"`
	Coverage float64 `json:"coverage"`
}

const noGlobal = 1<<24 - 1

type globalModule struct {
	path, buildID string
}

type state struct {
	events *table
	run    int32 // the run being read (fullPass: the full run)

	work     []pending // a segment's lookups
	refusals []int32   // a segment's refusal rows
	modules  []globalModule
	byKey    map[string]uint32
}

func (s *state) intern(m formats.Module) uint32 {
	k := "p:" + m.Path
	if m.BuildID != "" {
		k = "b:" + m.BuildID
	}
	if g, ok := s.byKey[k]; ok {
		return g
	}
	g := uint32(len(s.modules))
	s.modules = append(s.modules, globalModule{m.Path, m.BuildID})
	s.byKey[k] = g
	return g
}

// runAcc accumulates one run's counts.
type runAcc struct {
	rep     RunReport
	periods formats.PeriodBuilder
	covered int // |R_i ∩ F|
	newInF  int // events of F first recorded by this run
	timeNS  uint64
}

// Compare compares the runs in the files runs (trace files or merged
// traces) with the full run in full. Files are streamed: memory grows
// with the number of distinct events, not of events.
func Compare(ctx context.Context, runs []string, full string, opts Options) (*Report, error) {
	if len(runs) == 0 {
		return nil, errors.New("no runs to compare")
	}
	return newState().compare(ctx, runs, full, opts)
}

func newState() *state {
	return &state{events: newTable(), run: fullPass, byKey: map[string]uint32{}}
}

func (s *state) compare(ctx context.Context, runs []string, full string, opts Options) (*Report, error) {
	rep := &Report{FullFile: full, NativeNS: opts.NativeNS}

	// The full run first: F.
	fullRun, fullAcc, err := s.read(ctx, full, -1, nil, rep)
	if err != nil {
		return nil, err
	}
	rep.FullEvents = s.events.len()
	rep.FullTimeNS = fullAcc[0].timeNS

	var accs []*runAcc
	for _, name := range runs {
		_, got, err := s.read(ctx, name, len(accs), &fullRun, rep)
		if err != nil {
			return nil, err
		}
		accs = append(accs, got...)
	}

	nF := rep.FullEvents
	ratio := func(a, b int) float64 {
		if b == 0 {
			return 0
		}
		return float64(a) / float64(b)
	}
	var all []float64
	cum := 0
	for _, a := range accs {
		cum += a.newInF
		r := a.rep
		r.Coverage = ratio(a.covered, nF)
		r.CumulativeCoverage = ratio(cum, nF)
		r.FalsePositiveRatio = ratio(r.Redundant, r.Events)
		r.Rejected = nF - a.covered
		r.Missed = nF - cum
		r.MissedRatio = ratio(r.Missed, r.Rejected)
		r.FalseNegativeRatio = ratio(r.RefusedUnrecorded, r.Refused)
		ps := a.periods.Periods()
		var os []float64
		for _, p := range ps {
			r.Suppressed += p.Suppressed
			if p.Overshoot > 0 {
				os = append(os, float64(p.Overshoot)/1e3)
			}
		}
		all = append(all, os...)
		r.Overshoot = overshoot(len(ps), os)
		r.Overshoot.Periods = len(ps)
		rep.Overshoot.Periods += len(ps)
		if a.timeNS > 0 {
			r.TimeNS = a.timeNS
			if rep.FullTimeNS > 0 {
				v := float64(a.timeNS) / float64(rep.FullTimeNS)
				r.SlowdownFull = &v
			}
			if opts.NativeNS > 0 {
				v := float64(a.timeNS) / float64(opts.NativeNS)
				r.SlowdownNative = &v
			}
		}
		rep.Runs = append(rep.Runs, r)
	}
	periods := rep.Overshoot.Periods
	rep.Overshoot = overshoot(periods, all)
	rep.Covered = cum
	rep.Coverage = ratio(cum, nF)
	s.events.each(func(_ uint32, _ uint64, f uint64) {
		if f&flagFull == 0 {
			rep.Extra++
		}
	})
	s.byModule(rep, opts.Resolver)
	return rep, nil
}

func overshoot(periods int, us []float64) Overshoot {
	o := Overshoot{Periods: periods, Overshoots: len(us)}
	if len(us) == 0 {
		return o
	}
	slices.Sort(us)
	o.MedianUS, o.P99US, o.MaxUS = Rank(us, 0.5), Rank(us, 0.99), us[len(us)-1]
	return o
}

// Rank returns the p-quantile of sorted by the nearest-rank method: the
// smallest value with at least p of the values at or below it (for an
// even count the lower median). cov compare, trace stats and the report
// all use it, so one trace gives the same median and p99 in each. sorted
// must be sorted ascending and not empty; p is in (0, 1].
func Rank[T cmp.Ordered](sorted []T, p float64) T {
	i := int(math.Ceil(p*float64(len(sorted)))) - 1
	return sorted[max(0, min(i, len(sorted)-1))]
}

// read streams one file. first < 0: the full run (marks F); else its
// runs are numbered from first and checked against fullRun.
func (s *state) read(ctx context.Context, name string, first int, fullRun *formats.Run, rep *Report) (formats.Run, []*runAcc, error) {
	r, err := merge.Open(name)
	if err != nil {
		return formats.Run{}, nil, err
	}
	defer r.Close()
	infos := r.Runs()
	if fullRun != nil {
		for _, ri := range infos {
			if !sameBinary(ri.Info, *fullRun) {
				return formats.Run{}, nil, fmt.Errorf("%s: %w: run %d traced %s (build-id %q), the full run %s (build-id %q)",
					name, ErrDifferentBinaries, ri.Run, ri.Info.Binary, ri.Info.BuildID, fullRun.Binary, fullRun.BuildID)
			}
		}
	} else {
		for _, ri := range infos[1:] {
			if !sameBinary(ri.Info, infos[0].Info) {
				return formats.Run{}, nil, fmt.Errorf("%s: %w: the full run's file holds runs of %s and %s", name, ErrDifferentBinaries, infos[0].Info.Binary, ri.Info.Binary)
			}
		}
	}
	// Local module id -> global index (gm) and packed module (pm).
	f := &fileState{gm: make([]uint32, 1<<16), pm: new([1 << 16]uint16)}
	for i := range f.gm {
		f.gm[i], f.pm[i] = noGlobal, noMod
	}
	for _, m := range r.Modules() {
		g := s.intern(m)
		f.gm[m.ID], f.pm[m.ID] = g, wideMod
		if g < noMod {
			f.pm[m.ID] = uint16(g)
		}
	}
	accs := make([]*runAcc, len(infos))
	for i, ri := range infos {
		accs[i] = &runAcc{rep: RunReport{File: name, Run: i, PID: ri.Info.PID}}
	}
	isFull := first < 0
	cur := 0
	for r.Next() {
		if err := ctx.Err(); err != nil {
			return formats.Run{}, nil, err
		}
		b := r.Batch()
		// The batch in segments of one run each (a plain trace's batch
		// is one).
		for lo, n := 0, b.Len(); lo < n; {
			run, hi := 0, n
			if b.Run != nil {
				run, hi = int(b.Run[lo]), lo+1
				for hi < n && b.Run[hi] == b.Run[lo] {
					hi++
				}
			}
			if run < cur {
				return formats.Run{}, nil, fmt.Errorf("%s: rows of run %d after rows of run %d: not a merged trace's order", name, run, cur)
			}
			cur = run
			g, count := int32(fullPass), (*runAcc)(nil)
			if !isFull {
				g, count = int32(first+run), accs[run]
			}
			if g != s.run {
				s.events.nextRun()
				s.run = g
			}
			s.segment(b, lo, hi, f, accs[run], count)
			lo = hi
		}
	}
	if err := r.Err(); err != nil {
		if !errors.Is(err, formats.ErrTruncated) {
			return formats.Run{}, nil, fmt.Errorf("%s: %w", name, err)
		}
		rep.Warnings = append(rep.Warnings, fmt.Sprintf("%s: cut short (%v): compared up to its last complete batch", name, err))
	}
	if isFull {
		if len(infos) > 1 {
			rep.Warnings = append(rep.Warnings, fmt.Sprintf("%s: %d runs: their union is the full run", name, len(infos)))
		}
		acc := accs[0]
		for _, a := range accs[1:] {
			acc.timeNS = max(acc.timeNS, a.timeNS)
		}
		return infos[0].Info, []*runAcc{acc}, nil
	}
	return infos[0].Info, accs, nil
}

// fileState maps a file's module ids: gm to global module indexes
// (noGlobal: none, or not in the file's table), pm to packed modules
// (noMod: none; wideMod: an index too large to pack).
type fileState struct {
	gm []uint32
	pm *[1 << 16]uint16
}

// fullPass is state.run during the full run's pass.
const fullPass = -1

// segment processes rows lo to hi of batch b, all of one run: its
// record rows go to rec; its events are counted for count, or marked
// in F if count is nil (the full run's pass).
func (s *state) segment(b *merge.Batch, lo, hi int, f *fileState, rec, count *runAcc) {
	t := s.events
	done := uint64(flagCur)
	if count == nil {
		done = flagFull
	}
	kinds := b.Kind[lo:hi]
	n := len(kinds)
	srcs, dsts, vals := b.Src[lo:hi][:n], b.Dst[lo:hi][:n], b.Value[lo:hi][:n]
	sms, dms := b.SrcModule[lo:hi][:n], b.DstModule[lo:hi][:n]
	pm := f.pm
	work, refusals := s.work[:0], s.refusals[:0]
	for i, k := range kinds {
		dst, dm := dsts[i], dms[i]
		if k == uint8(formats.KindBlockCount) {
			// a block that ran (rewrite --counts): its block event, src =
			// dst = the block
			k, dst, dm = uint8(formats.KindBlock), srcs[i], sms[i]
		} else if k-1 >= uint8(formats.MaxKind) { // not an event, or a sample
			kind := formats.Kind(k)
			ek, sampled := kind.Sampled()
			if !sampled {
				if _, refused := kind.Refused(); refused {
					if count != nil {
						refusals = append(refusals, int32(lo+i))
					}
				} else if kind.IsRecord() {
					e := b.Event(lo + i)
					rec.periods.Add(e)
					if kind == formats.KindRunEnd {
						rec.timeNS = e.Value
					}
				}
				continue
			}
			k = uint8(ek) // a sample: its event, seen in this run
		}
		if k == uint8(formats.KindSyscall) {
			dst = vals[i]
		}
		w0, w1, ok := PackKey(k, srcs[i], dst, pm[sms[i]], pm[dm])
		if !ok {
			s.applyWide(wideKey(b, lo+i, formats.Kind(k), f.gm), done, count)
			continue
		}
		h := HashKey(w0, w1)
		// Processed for this run already, or new: looked up below.
		r := &t.recent[(h>>40)&(recentSize-1)]
		if r.w0 == w0 && r.w1 == w1 {
			continue
		}
		r.w0, r.w1 = w0, w1
		work = append(work, pending{w0, w1, h})
	}
	// The lookups, each slot asked for some lookups ahead of its turn:
	// the misses overlap instead of following each other. (All rows
	// here are of one run, so the order of the lookups does not change
	// the counts.)
	const ahead = 32
	for j, p := range work {
		if j+ahead < len(work) {
			prefetch.Line(unsafe.Pointer(&t.slots[work[j+ahead].h&t.mask]))
		}
		s.apply(p.w0, p.w1, p.h, done, count)
	}
	// Refusals, after the segment's events: a refusal asks whether an
	// earlier run recorded the event, and flagPrev says so whatever
	// this run recorded.
	for _, i := range refusals {
		ek, _ := formats.Kind(b.Kind[i]).Refused()
		count.rep.Refused++
		if s.flags(b, int(i), ek, f)&flagPrev == 0 {
			count.rep.RefusedUnrecorded++
		}
	}
	s.work, s.refusals = work[:0], refusals[:0]
}

// apply processes a packed event: in F for the full run's pass (done
// is flagFull, count nil), else counted for count once (done is flagCur).
func (s *state) apply(w0, w1, h, done uint64, count *runAcc) {
	t := s.events
	i := t.insert(w0, w1, h)
	e := &t.slots[i]
	if e.w1&done != 0 {
		return
	}
	e.w1 = mark(e.w1, count)
	if count != nil {
		t.cur = append(t.cur, uint32(i))
	}
}

// applyWide is apply for a key that does not pack.
func (s *state) applyWide(k key, done uint64, count *runAcc) {
	t := s.events
	fl := t.wide[k]
	if fl&done != 0 {
		return
	}
	t.wide[k] = mark(fl, count)
	if count != nil {
		t.wideCur = append(t.wideCur, k)
	}
}

// mark returns the flags of an event after its first row in the full
// run's pass (count nil) or in a run, and counts the row for the run.
func mark(fl uint64, count *runAcc) uint64 {
	if count == nil {
		return fl | flagFull
	}
	a := count
	a.rep.Events++
	if fl&flagPrev != 0 {
		a.rep.Redundant++
	} else if fl&flagFull != 0 {
		a.newInF++
	}
	if fl&flagFull != 0 {
		a.covered++
	} else {
		a.rep.Extra++
	}
	return fl | flagCur
}

// flags returns the flags of the event of row i (of kind kind: a
// refusal row's refused event), 0 if it is not in the table.
func (s *state) flags(b *merge.Batch, i int, kind formats.Kind, f *fileState) uint64 {
	w0, w1, ok := PackKey(uint8(kind), b.Src[i], eventDst(b, i, kind), f.pm[b.SrcModule[i]], f.pm[b.DstModule[i]])
	if !ok {
		return s.events.wide[wideKey(b, i, kind, f.gm)]
	}
	if e := s.events.find(w0, w1, HashKey(w0, w1)); e != nil {
		return e.w1 & flagMask
	}
	return 0
}

// wideKey returns the key of event row i of kind kind (for a refusal
// row, the refused event's kind) as a key that does not pack.
func wideKey(b *merge.Batch, i int, kind formats.Kind, gm []uint32) key {
	dst, dm := eventDst(b, i, kind), b.DstModule[i]
	if formats.Kind(b.Kind[i]) == formats.KindBlockCount { // as its block event
		dst, dm = b.Src[i], b.SrcModule[i]
	}
	return key{b.Src[i], dst, uint64(kind)<<48 | uint64(gm[b.SrcModule[i]])<<24 | uint64(gm[dm])}
}

// eventDst returns the destination part of the key of event row i of
// kind kind: the syscall number for a syscall, else dst.
func eventDst(b *merge.Batch, i int, kind formats.Kind) uint64 {
	if kind == formats.KindSyscall {
		return b.Value[i]
	}
	return b.Dst[i]
}

// sameBinary: same executable build-id, or, when either lacks one, the
// same executable path.
func sameBinary(a, b formats.Run) bool {
	if a.BuildID != "" && b.BuildID != "" {
		return a.BuildID == b.BuildID
	}
	return a.Binary == b.Binary
}

func (s *state) byModule(rep *Report, res *symbols.Resolver) {
	type fkey struct {
		mod  uint32
		name string
	}
	mods := make([]ModuleCov, len(s.modules)+1)
	funcs := map[fkey]*FuncCov{}
	tables := make([]*symbols.Table, len(s.modules))
	for i, m := range s.modules {
		mods[i] = ModuleCov{Module: m.path, BuildID: m.buildID}
		if res != nil {
			t, err := res.Table(m.buildID, m.path)
			if err != nil {
				mods[i].Symbols = "none (" + err.Error() + "): functions shown as address ranges"
			} else {
				mods[i].Symbols = t.Source
				tables[i] = t
			}
		}
	}
	mods[len(s.modules)] = ModuleCov{Module: "(no module)"}
	s.events.each(func(g uint32, src uint64, fl uint64) {
		if fl&flagFull == 0 {
			return
		}
		mi := int(g)
		if g == noGlobal || mi >= len(s.modules) {
			mi = len(s.modules)
		}
		covered := fl&(flagPrev|flagCur) != 0
		mods[mi].Full++
		if covered {
			mods[mi].Covered++
		}
		if res == nil || mi == len(s.modules) {
			return
		}
		name := ""
		if f := tables[mi].Lookup(src); f != nil {
			name = f.Name
		} else {
			page := src &^ 0xfff
			name = fmt.Sprintf("%#x-%#x", page, page+0xfff)
		}
		fk := fkey{g, name}
		fc := funcs[fk]
		if fc == nil {
			fc = &FuncCov{Module: s.modules[mi].path, Function: name}
			funcs[fk] = fc
		}
		fc.Full++
		if covered {
			fc.Covered++
		}
	})
	for _, m := range mods {
		if m.Full == 0 {
			continue
		}
		m.Coverage = float64(m.Covered) / float64(m.Full)
		rep.Modules = append(rep.Modules, m)
	}
	sort.SliceStable(rep.Modules, func(i, j int) bool { return rep.Modules[i].Module < rep.Modules[j].Module })
	for _, f := range funcs {
		f.Coverage = float64(f.Covered) / float64(f.Full)
		rep.Functions = append(rep.Functions, *f)
	}
	sort.Slice(rep.Functions, func(i, j int) bool {
		a, b := rep.Functions[i], rep.Functions[j]
		if a.Module != b.Module {
			return a.Module < b.Module
		}
		return a.Function < b.Function
	})
}
