package report

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/stint-project/stint/analysis/merge"
	"github.com/stint-project/stint/analysis/sample"
	"github.com/stint-project/stint/formats"
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

	mods    map[moduleKey]int32
	modInfo []formats.Module // by global index
	union   *evSet           // every distinct event of the runs loaded
	recent  *[recentSize]recentEvent
	runs    int // runs loaded
	// newPerRun[i]: events first seen in loaded run i
	newPerRun []int
}

// recentSize is how many distinct events the loader's direct-mapped
// cache in front of union holds: a trace's hot events are a few
// thousand, and a map lookup per event (hashing a 32-byte key) was most
// of report auto's time (11 M events/s on a 10K-distinct trace).
const (
	recentBits = 13
	recentSize = 1 << recentBits
)

type recentEvent struct {
	key evKey
	m   *int32
}

// seenOf returns where the union keeps key's last run, nil if it has
// not seen key.
func (l *Loader) seenOf(key evKey) *int32 {
	h := (key.src*0x9e3779b97f4a7c15 ^ key.dst*0xc2b2ae3d27d4eb4f ^ uint64(key.kind)<<56 ^ uint64(key.srcMod)<<40 ^ uint64(key.dstMod)<<48) >> (64 - recentBits)
	c := &l.recent[h]
	if c.m != nil && c.key == key {
		return c.m
	}
	m := l.union.last(key)
	if m != nil {
		c.key, c.m = key, m
	}
	return m
}

// NewLoader returns an empty loader.
func NewLoader() *Loader {
	l := &Loader{mods: map[moduleKey]int32{}, union: newEvSet(), recent: new([recentSize]recentEvent)}
	l.union.grown = func() { *l.recent = [recentSize]recentEvent{} } // its pointers went stale
	return l
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
	newIn := make([]int, len(runs))
	var last evKey
	lastRun := -1
	for r.Next() {
		if err := ctx.Err(); err != nil {
			return nil, 0, err
		}
		b := r.Batch()
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
					rd.Calls[Callee{gm[b.DstModule[i]], b.Dst[i]}]++
				}
				dst := b.Dst[i]
				if kind == formats.KindSyscall {
					dst = b.Value[i]
					rd.Syscalls[dst]++
					rd.SyscallTime.Add(t)
				}
				key := evKey{k, gm[b.SrcModule[i]], gm[b.DstModule[i]], b.Src[i], dst}
				if key == last && run == lastRun { // a repeat (--every traces)
					continue
				}
				last, lastRun = key, run
				g := int32(l.runs + run)
				if m := l.seenOf(key); m == nil {
					l.union.add(key, g)
					rd.Distinct++
					newIn[run]++
				} else if *m != g {
					*m = g
					rd.Distinct++
				}
			case kind == formats.KindBlockCount:
				rd.Counts[Callee{gm[b.SrcModule[i]], b.Src[i]}] += int64(b.Dst[i])
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
		l.Progress.Set(done + r.Offset())
	}
	warning := ""
	if err := r.Err(); err != nil {
		if !errors.Is(err, formats.ErrTruncated) {
			return nil, 0, fmt.Errorf("%s: %w", file, err)
		}
		warning = fmt.Sprintf("%s was cut short (%v): shown up to its last complete batch", filepath.Base(file), err)
	}
	for i, rd := range runs {
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
