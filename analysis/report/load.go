package report

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/stint-project/stint/analysis/cct"
	"github.com/stint-project/stint/analysis/cov"
	"github.com/stint-project/stint/analysis/merge"
	"github.com/stint-project/stint/analysis/sample"
	"github.com/stint-project/stint/formats"
	"github.com/stint-project/stint/internal/prefetch"
	"github.com/stint-project/stint/internal/progress"
)

// RunData is what a report shows of one run, gathered in one pass over its
// trace: the budget periods, the run end, the time span and event counts.
type RunData struct {
	File string      // the trace file (a plain trace or a merged trace)
	Run  int         // index of the run in File
	Info formats.Run // the run's metadata
	// Merged: File is a merged trace (Label then names the run).
	Merged bool

	Periods []formats.Period // budget periods, by start time

	HasEnd    bool   // a KindRunEnd row was found
	EndStatus uint64 // its exit status (formats.RunEndStatusUnknown: not seen)
	EndNS     uint64 // its run time, ns

	Rows     int64       // rows of any kind
	Events   int64       // event rows (not records, not refusals)
	Refused  int64       // refusal rows
	Kinds    [256]int64  // rows per kind
	Distinct int         // distinct events of this run
	FirstNS  uint64      // time of the first row (0: no rows)
	LastNS   uint64      // time of the last row
	End      formats.End // how the file ended (same for every run of a file)
	Warning  string      // the file was cut short, etc.
	// Calls counts the call rows (direct and indirect) per callee: every
	// call in an --every trace, each distinct call site once otherwise.
	Calls map[Callee]int64
	// Counts holds a block-count trace's executions per block (rewrite
	// --tool block --counts): the sum of its rows' differences.
	Counts map[Callee]int64
	// Syscalls counts the syscall rows per number; SyscallTime counts
	// them over time.
	Syscalls    map[uint64]int64
	SyscallTime TimeHist
	// Sampled estimates counts from a sampled run's samples (rewrite
	// --sample), its modules the loader's (Loader.Module); nil for a run
	// that did not sample.
	Sampled *sample.Estimator
}

// Callee is a call's destination: a module (the loader's global index,
// Loader.Module) and a module-relative address; module -1 is none.
type Callee struct {
	Module int32
	Addr   uint64
}

// Label names the run for people: the file's base name, with "#k" for a
// run of a merged trace.
func (r *RunData) Label() string {
	name := filepath.Base(r.File)
	if r.Merged {
		name = fmt.Sprintf("%s#%d", name, r.Run)
	}
	return name
}

// TimeNS returns the run's time and where it came from: the run-end
// record's run time when there is one (fromEnd true), else the span from
// the run's start (mono_start_ns) to its last row, or, without a start
// time, from its first to its last row.
func (r *RunData) TimeNS() (ns uint64, fromEnd bool) {
	if r.HasEnd && r.EndNS > 0 {
		return r.EndNS, true
	}
	if r.Rows == 0 {
		return 0, false
	}
	if s := r.Info.MonoStartNS; s != 0 && s <= r.FirstNS {
		return r.LastNS - s, false
	}
	return r.LastNS - r.FirstNS, false
}

// Overshoots returns the periods that used more than their grant.
func (r *RunData) Overshoots() []formats.Period {
	var out []formats.Period
	for _, p := range r.Periods {
		if p.HasBudget && p.Overshoot > 0 {
			out = append(out, p)
		}
	}
	return out
}

// HasQoS reports whether any period carries a QoS row.
func (r *RunData) HasQoS() bool {
	for _, p := range r.Periods {
		if p.HasQoS {
			return true
		}
	}
	return false
}

// moduleKey identifies a module across traces: its build-id, else its path
// (as analysis/cov does).
type moduleKey string

func keyOf(m formats.Module) moduleKey {
	if m.BuildID != "" {
		return moduleKey("b:" + m.BuildID)
	}
	return moduleKey("p:" + m.Path)
}

// evKey is a distinct event: kind, source and destination with their
// modules (global indexes); syscalls use the number as destination.
type evKey struct {
	kind           uint8
	srcMod, dstMod int32
	src, dst       uint64
}

// Loader reads traces into [RunData] and keeps the distinct events of
// every run it has read, so that cumulative counts over runs can be
// computed without a full run ([Loader.Cumulative]).
type Loader struct {
	Progress *progress.Bar // may be nil
	// Tree, when not nil, is given every batch read (cct.Builder's
	// BeginFile, AddBatch, EndFile): the call-context tree is built in
	// the same pass, not from a second read of the traces.
	Tree *cct.Builder

	mods    map[moduleKey]int32
	modInfo []formats.Module // by global index
	union   *evSet           // every distinct event of the runs loaded
	recent  *[recentSize]recentEvent
	last    recentEvent    // the event note saw last
	work    []pendingEvent // the batch's lookups, made at its end (lookUp)
	runs    int            // runs loaded
	// newPerRun[i]: events first seen in loaded run i
	newPerRun []int
}

// recentSize is how many distinct events the loader's direct-mapped
// cache in front of union holds, each with the last run that looked it
// up: a trace's hot events are a few thousand, and a lookup per event
// was most of report auto's time (11 M events/s on a 10K-distinct
// trace).
const (
	recentBits = 13
	recentSize = 1 << recentBits
)

type recentEvent struct {
	w0, w1 uint64
	g      int32
}

// pendingEvent is a packed event of run g (global index) whose lookup
// in the union waits for the end of its batch, with its hash.
type pendingEvent struct {
	w0, w1, h uint64
	g         int32
}

// note queues event key of global run g for lookUp, unless the same
// run looked it up last (the recent cache); a key that does not pack
// is looked up at once (distinct keys do not interact: only the order
// of one key's lookups matters).
func (l *Loader) note(key evKey, g int32, rd *RunData, newIn *int) {
	w0, w1, ok := evPack(key)
	if !ok {
		m := l.union.last(key)
		if m == nil {
			l.union.add(key, g)
		}
		count(m, g, rd, newIn)
		return
	}
	if w0 == l.last.w0 && w1 == l.last.w1 && g == l.last.g {
		return // a repeat (--every traces)
	}
	l.last = recentEvent{w0, w1, g}
	h := cov.HashKey(w0, w1)
	c := &l.recent[h>>(64-recentBits)]
	if c.w0 == w0 && c.w1 == w1 && c.g == g {
		return
	}
	c.w0, c.w1, c.g = w0, w1, g
	l.work = append(l.work, pendingEvent{w0, w1, h, g})
}

// lookUp makes the batch's queued lookups in order, each slot asked for
// some lookups ahead of its turn: at half a million distinct events
// each is a cache miss, and the misses overlap instead of following
// each other.
func (l *Loader) lookUp(runs []*RunData, newIn []int) {
	const ahead = 16
	u := l.union
	for j, p := range l.work {
		if j+ahead < len(l.work) {
			prefetch.Line(u.slotOf(l.work[j+ahead].h))
		}
		m := u.lastPacked(p.w0, p.w1, p.h)
		if m == nil {
			u.addPacked(p.w0, p.w1, p.g)
		}
		run := int(p.g) - l.runs
		count(m, p.g, runs[run], &newIn[run])
	}
	l.work = l.work[:0]
}

// count counts a lookup of an event by run g, m where the union kept
// its last run before (nil: absent, added since): the run's distinct
// events, and those no run before it had (newIn).
func count(m *int32, g int32, rd *RunData, newIn *int) {
	switch {
	case m == nil:
		rd.Distinct++
		*newIn++
	case *m != g:
		*m = g
		rd.Distinct++
	}
}

// NewLoader returns an empty loader.
func NewLoader() *Loader {
	return &Loader{mods: map[moduleKey]int32{}, union: newEvSet(), recent: new([recentSize]recentEvent)}
}

// LoadFiles reads every file in order (see [Loader.Load]); the progress
// bar, if any, counts bytes over all of them.
func (l *Loader) LoadFiles(ctx context.Context, files []string) ([]*RunData, error) {
	var total int64
	for _, f := range files {
		if st, err := os.Stat(f); err == nil {
			total += st.Size()
		}
	}
	l.Progress.SetTotal(total)
	var out []*RunData
	var done int64
	for _, f := range files {
		l.Progress.SetLabel("reading " + filepath.Base(f))
		runs, size, err := l.load(ctx, f, done)
		if err != nil {
			return nil, err
		}
		done += size
		l.Progress.Set(done)
		out = append(out, runs...)
	}
	return out, nil
}

// Load reads one trace file or merged trace and returns its runs. A file
// cut short is read up to its last complete batch and its runs carry a
// Warning; any other damage is an error.
func (l *Loader) Load(ctx context.Context, file string) ([]*RunData, error) {
	runs, _, err := l.load(ctx, file, 0)
	return runs, err
}

func isSampled(k formats.Kind) bool { _, ok := k.Sampled(); return ok }

// globalModule is a file's module id as the loader's (NoModule stays).
func globalModule(gm []int32, id uint16) uint16 {
	if gm[id] < 0 {
		return formats.NoModule
	}
	return uint16(gm[id])
}

func (l *Loader) load(ctx context.Context, file string, done int64) ([]*RunData, int64, error) {
	r, err := merge.Open(file)
	if err != nil {
		return nil, 0, err
	}
	defer r.Close()
	infos := r.Runs()
	runs := make([]*RunData, len(infos))
	builders := make([]formats.PeriodBuilder, len(infos))
	for i, ri := range infos {
		runs[i] = &RunData{File: file, Run: i, Info: ri.Info, EndStatus: formats.RunEndStatusUnknown, Calls: map[Callee]int64{}, Counts: map[Callee]int64{}, Syscalls: map[uint64]int64{}}
	}
	gm := make([]int32, 1<<16)
	for i := range gm {
		gm[i] = -1
	}
	for _, m := range r.Modules() {
		k := keyOf(m)
		g, ok := l.mods[k]
		if !ok {
			g = int32(len(l.mods))
			l.mods[k] = g
			l.modInfo = append(l.modInfo, m)
		}
		gm[m.ID] = g
	}
	if l.Tree != nil {
		l.Tree.BeginFile(file, r)
	}
	l.work, l.last = l.work[:0], recentEvent{}
	newIn := make([]int, len(runs))
	calls, counts := make([]*tally, len(runs)), make([]*tally, len(runs))
	for i := range runs {
		calls[i], counts[i] = newTally(), newTally()
	}
	for r.Next() {
		if err := ctx.Err(); err != nil {
			return nil, 0, err
		}
		b := r.Batch()
		if l.Tree != nil {
			l.Tree.AddBatch(b)
		}
		for i, k := range b.Kind {
			run := b.RunOf(i)
			if run >= len(runs) {
				return nil, 0, fmt.Errorf("%s: row of run %d, the file lists %d runs", file, run, len(runs))
			}
			rd := runs[run]
			t := b.Time[i]
			if rd.Rows == 0 || t < rd.FirstNS {
				rd.FirstNS = t
			}
			rd.LastNS = max(rd.LastNS, t)
			rd.Rows++
			rd.Kinds[k]++
			kind := formats.Kind(k)
			switch {
			case kind.Valid():
				rd.Events++
				if kind == formats.KindCall || kind == formats.KindIndCall {
					calls[run].add(Callee{gm[b.DstModule[i]], b.Dst[i]}, 1)
				}
				dst := b.Dst[i]
				if kind == formats.KindSyscall {
					dst = b.Value[i]
					rd.Syscalls[dst]++
					rd.SyscallTime.Add(t)
				}
				l.note(evKey{k, gm[b.SrcModule[i]], gm[b.DstModule[i]], b.Src[i], dst}, int32(l.runs+run), rd, &newIn[run])
			case kind == formats.KindBlockCount:
				counts[run].add(Callee{gm[b.SrcModule[i]], b.Src[i]}, int64(b.Dst[i]))
			case kind == formats.KindRunEnd:
				rd.HasEnd, rd.EndStatus, rd.EndNS = true, b.Src[i], b.Value[i]
			case kind.IsPeriod():
				builders[run].Add(b.Event(i))
			case kind == formats.KindSampleRun || kind == formats.KindSampleSet || kind == formats.KindSampleReader || isSampled(kind):
				if rd.Sampled == nil {
					rd.Sampled = sample.NewEstimator()
				}
				e := b.Event(i)
				e.SrcModule, e.DstModule = globalModule(gm, e.SrcModule), globalModule(gm, e.DstModule)
				rd.Sampled.Add(e)
			default:
				if _, ok := kind.Refused(); ok {
					rd.Refused++
				}
			}
		}
		l.lookUp(runs, newIn)
		l.Progress.Set(done + r.Offset())
	}
	warning := ""
	if err := r.Err(); err != nil {
		if !errors.Is(err, formats.ErrTruncated) {
			return nil, 0, fmt.Errorf("%s: %w", file, err)
		}
		warning = fmt.Sprintf("%s was cut short (%v): shown up to its last complete batch", filepath.Base(file), err)
	}
	if l.Tree != nil {
		if err := l.Tree.EndFile(file, r.Err()); err != nil {
			return nil, 0, err
		}
	}
	for i, rd := range runs {
		calls[i].into(rd.Calls)
		counts[i].into(rd.Counts)
		rd.Periods = builders[i].Periods()
		rd.End = r.End()
		rd.Warning = warning
		l.newPerRun = append(l.newPerRun, newIn[i])
	}
	l.runs += len(runs)
	for _, rd := range runs {
		rd.Merged = r.Merged()
	}
	return runs, r.Size(), nil
}

// Module returns the module of global index g (Callee.Module), and
// whether there is one.
func (l *Loader) Module(g int32) (formats.Module, bool) {
	if g < 0 || int(g) >= len(l.modInfo) {
		return formats.Module{}, false
	}
	return l.modInfo[g], true
}

// Cumulative returns, for every run loaded so far (in load order), the
// number of distinct events seen in it and the runs before it, and the
// size of the union of all runs.
func (l *Loader) Cumulative() (cum []int, union int) {
	n := 0
	for _, v := range l.newPerRun {
		n += v
		cum = append(cum, n)
	}
	return cum, l.union.len()
}

func newBytesBar(w io.Writer) *progress.Bar {
	return progress.New(w, "reading traces", progress.Bytes())
}
