package export

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"

	"github.com/stint-project/stint/formats"
)

// Format is an output format of [Write].
type Format uint8

// Formats.
const (
	PProf     Format = iota + 1 // profile.proto, gzip'd (go tool pprof)
	Collapsed                   // folded stacks, "a;b;c N" (flamegraph.pl, speedscope)
	DrCov                       // DynamoRIO drcov version 2 (Lighthouse, bncov)
	LCOV                        // lcov tracefile (genhtml)
	Parquet                     // the trace table as Parquet, with symbol columns
	CSV                         // one row per event, with names
	Arrow                       // the Parquet export's table as an Arrow IPC stream (trace sql's input)
)

var formatNames = [...]string{PProf: "pprof", Collapsed: "collapsed", DrCov: "drcov", LCOV: "lcov", Parquet: "parquet", CSV: "csv", Arrow: "arrow"}

// Formats returns every format, in a fixed order.
func Formats() []Format { return []Format{PProf, Collapsed, DrCov, LCOV, Parquet, CSV, Arrow} }

// String returns the format's name as [ParseFormat] takes it.
func (f Format) String() string {
	if f >= PProf && f <= Arrow {
		return formatNames[f]
	}
	return fmt.Sprintf("Format(%d)", uint8(f))
}

// ParseFormat returns the format named s ("pprof", "collapsed", "drcov",
// "lcov", "parquet", "csv", "arrow"; case does not matter).
func ParseFormat(s string) (Format, error) {
	n := strings.ToLower(strings.TrimSpace(s))
	for _, f := range Formats() {
		if formatNames[f] == n {
			return f, nil
		}
	}
	return 0, fmt.Errorf("unknown export format %q (want one of %s)", s, strings.Join(formatNames[1:], ", "))
}

// Batch is one batch of rows as column slices, row i being (Kind[i],
// TID[i], …), like a batch of package merge's reader. Module columns hold
// ids of the [Source]'s module table. Run holds the run of each row (nil:
// every row is of run 0); threads of different runs are different
// threads even when their tids are equal.
type Batch struct {
	Kind      []uint8
	TID       []uint32
	Time      []uint64
	SrcModule []uint16
	Src       []uint64
	DstModule []uint16
	Dst       []uint64
	Value     []uint64
	Run       []uint16
}

// Len returns the number of rows.
func (b *Batch) Len() int { return len(b.Kind) }

// event returns row i as an event.
func (b *Batch) event(i int) formats.Event {
	return formats.Event{Kind: formats.Kind(b.Kind[i]), TID: b.TID[i], Time: b.Time[i], SrcModule: b.SrcModule[i], Src: b.Src[i],
		DstModule: b.DstModule[i], Dst: b.Dst[i], Value: b.Value[i]}
}

func (b *Batch) check() error {
	n := len(b.Kind)
	for _, l := range []int{len(b.TID), len(b.Time), len(b.SrcModule), len(b.Src), len(b.DstModule), len(b.Dst), len(b.Value)} {
		if l != n {
			return fmt.Errorf("batch columns have %d and %d rows", n, l)
		}
	}
	if b.Run != nil && len(b.Run) != n {
		return fmt.Errorf("batch run column has %d rows, want %d", len(b.Run), n)
	}
	return nil
}

func (b *Batch) run(i int) uint16 {
	if b.Run == nil {
		return 0
	}
	return b.Run[i]
}

// Source is what [Write] exports: a module table and rows, one batch at a
// time. Modules and Tool are called before the first Next.
type Source interface {
	// Modules returns the module table the batches' module columns
	// refer to (by Module.ID).
	Modules() []formats.Module
	// Tool returns what the runs traced, or 0 when it is unknown or the
	// runs traced different things.
	Tool() formats.Tool
	// Next advances to the next batch; false at the end or on error.
	Next() bool
	// Batch returns the current batch, valid until the next Next.
	Batch() *Batch
	// Err returns the error that ended the rows, nil at a clean end.
	Err() error
}

// Func is a function of a module: [Start, End) in link vaddrs.
type Func struct {
	Name       string
	Start, End uint64
}

// Line says that the code at [Start, End) comes from line Line of the
// file Files[File] of its [Symbols].
type Line struct {
	Start, End uint64
	File, Line uint32
}

// Symbols is what is known about one module's code. Every field may be
// empty.
type Symbols struct {
	Funcs []Func   // sorted by Start
	Lines []Line   // sorted by Start, not overlapping
	Files []string // names Lines refer to
	// LinkBase is the module's lowest PT_LOAD vaddr, page aligned (0 for
	// PIEs and shared objects): drcov offsets are counted from it.
	LinkBase uint64
	// Code returns up to n bytes of the module's original code at link
	// vaddr addr, or nil if unknown. Nil: block sizes are 1.
	Code func(addr uint64, n int) []byte
}

// Func returns the function containing addr, or nil.
func (s *Symbols) Func(addr uint64) *Func {
	if s == nil {
		return nil
	}
	i := sort.Search(len(s.Funcs), func(i int) bool { return s.Funcs[i].Start > addr }) - 1
	if i >= 0 && addr < s.Funcs[i].End {
		return &s.Funcs[i]
	}
	return nil
}

// Line returns the file and line of addr ("", 0 if unknown).
func (s *Symbols) Line(addr uint64) (string, int) {
	if s == nil {
		return "", 0
	}
	i := sort.Search(len(s.Lines), func(i int) bool { return s.Lines[i].End > addr })
	if i < len(s.Lines) && s.Lines[i].Start <= addr && int(s.Lines[i].File) < len(s.Files) {
		return s.Files[s.Lines[i].File], int(s.Lines[i].Line)
	}
	return "", 0
}

// overlapping calls f for the line ranges overlapping [start, end).
func (s *Symbols) overlapping(start, end uint64, f func(Line)) {
	if s == nil {
		return
	}
	i := sort.Search(len(s.Lines), func(i int) bool { return s.Lines[i].End > start })
	for ; i < len(s.Lines) && s.Lines[i].Start < end; i++ {
		if int(s.Lines[i].File) < len(s.Files) {
			f(s.Lines[i])
		}
	}
}

// Options configures [Write].
type Options struct {
	// Symbolize returns what is known about a module's code; it is
	// called at most once per module (nil result: nothing). Nil: no
	// names, lines, code or link bases.
	Symbolize func(formats.Module) *Symbols
	// MaxDepth bounds the call stacks of pprof and collapsed output:
	// deeper frames are folded into the frame at the bound (0: 1024).
	MaxDepth int
	// SampleWeight gives a sampled run's sample (rewrite --sample; its
	// kind formats.KindSampledBase + the event's) the number of events
	// it stands for (analysis/sample's Estimator.Weight). Nil: samples
	// are skipped like records. A call's sample counts in the context
	// caller -> callee alone (a sampled call trace has no returns to
	// rebuild deeper stacks from).
	SampleWeight func(formats.Event) float64
	// NameTable, when set, makes the Arrow export's name columns int32
	// indices into one table of names (IDSchema), given to NameTable
	// once every row is written (index 0 is the empty name). Nil: the
	// names are dictionary-encoded (ArrowSchema).
	NameTable func(names []string) error
}

// DefaultMaxDepth is the call stack depth bound when Options.MaxDepth is 0.
const DefaultMaxDepth = 1024

// Stats says what an export did.
type Stats struct {
	Rows       int64 // rows read
	Events     int64 // rows that are events (not the runtime's records)
	Records    int64 // rows that are records (periods, run ends), skipped by the aggregating formats
	NoModule   int64 // events whose address lies in no known module (kept absolute where the format allows)
	Unmatched  int64 // returns that matched no frame of their thread's shadow stack (pprof, collapsed)
	Truncated  int64 // calls deeper than MaxDepth, folded into the frame at the bound
	Dropped    int64 // shadow stack frames dropped because a thread's stack outgrew 65536 frames
	Samples    int   // distinct samples (pprof), stacks (collapsed), blocks (drcov), files (lcov)
	NoSymbols  int   // modules with events but no function names
	Unresolved int64 // locations (pprof) or stack frames (collapsed) that lie in no named function
	Sampled    int64 // samples counted with their weights (Options.SampleWeight)
	Counted    int64 // block executions the block-count rows carry (rewrite --counts)
}

// Write exports src to w in format f. The aggregating formats (pprof,
// collapsed, drcov, lcov) hold state per distinct (module, address) or
// call context, never per event; csv and parquet stream row by row.
// Write stops with ctx's error when ctx is done.
func Write(ctx context.Context, w io.Writer, f Format, src Source, opts Options) (Stats, error) {
	if opts.MaxDepth <= 0 {
		opts.MaxDepth = DefaultMaxDepth
	}
	e := newExporter(src, opts)
	var err error
	switch f {
	case PProf:
		err = e.writePProf(ctx, w)
	case Collapsed:
		err = e.writeCollapsed(ctx, w)
	case DrCov:
		err = e.writeDrCov(ctx, w)
	case LCOV:
		err = e.writeLCOV(ctx, w)
	case CSV:
		err = e.writeCSV(ctx, w)
	case Parquet:
		err = e.writeParquet(ctx, w)
	case Arrow:
		err = e.writeArrow(ctx, w)
	default:
		err = fmt.Errorf("unknown export format %v", f)
	}
	e.stats.NoSymbols = 0
	for id, done := range e.symDone {
		if done && e.used[id] && (e.syms[id] == nil || len(e.syms[id].Funcs) == 0) {
			e.stats.NoSymbols++
		}
	}
	return e.stats, err
}

// exporter holds the source, the module table indexed by id and the
// symbols loaded so far.
type exporter struct {
	src     Source
	opts    Options
	tool    formats.Tool
	mods    []*formats.Module // by id; nil: no such module
	syms    []*Symbols        // by id, once loaded
	symDone []bool
	used    []bool
	stats   Stats
	wheres  map[addr][3]string // csv: place, function and line per distinct address
	names   []nameSlot         // funcName's cache, by a hash of the address (nameCacheBits)
	dict    nameDict           // the Arrow export's names (writeArrow)
}

// nameCacheBits: funcName's cache has 2^nameCacheBits entries. A
// complete trace of the sqlite3 workload has some 10,000 distinct
// addresses; with 1,024 entries, symbol lookups and the dictionary's map
// were 21% of its Arrow export.
const nameCacheBits = 14

// nameSlot is a funcName cache entry: the function's name at (mod, a)
// and its index in the exporter's dict (-1: not added yet). 32 bytes:
// the cache is read at random, once or twice per row.
type nameSlot struct {
	a    uint64
	mod  uint16
	set  bool
	idx  int32
	name string
}

// nameDict numbers distinct names: the dictionary of the Arrow export's
// name columns, one for all three, growing as names appear. Index 0 is
// the empty name (no function known, or none asked for).
type nameDict struct {
	idx    map[string]int32
	values []string
	kinds  [256]int32 // a kind's name's index + 1 (0: not added yet)
}

func (d *nameDict) index(s string) int32 {
	if i, ok := d.idx[s]; ok {
		return i
	}
	if d.idx == nil {
		d.idx = map[string]int32{"": 0}
		d.values = []string{""}
		if s == "" {
			return 0
		}
	}
	i := int32(len(d.values))
	d.idx[s] = i
	d.values = append(d.values, s)
	return i
}

// kindIndex is the index of kind k's name.
func (d *nameDict) kindIndex(k uint8) int32 {
	if d.kinds[k] == 0 {
		d.kinds[k] = d.index(formats.Kind(k).String()) + 1
	}
	return d.kinds[k] - 1
}

func newExporter(src Source, opts Options) *exporter {
	e := &exporter{src: src, opts: opts, tool: src.Tool()}
	ms := src.Modules()
	maxID := -1
	for _, m := range ms {
		maxID = max(maxID, int(m.ID))
	}
	e.mods = make([]*formats.Module, maxID+1)
	e.syms = make([]*Symbols, maxID+1)
	e.symDone = make([]bool, maxID+1)
	e.used = make([]bool, maxID+1)
	for i := range ms {
		if ms[i].ID != formats.NoModule {
			m := ms[i]
			e.mods[m.ID] = &m
		}
	}
	return e
}

// module returns the module with the given id, or nil.
func (e *exporter) module(id uint16) *formats.Module {
	if int(id) < len(e.mods) {
		return e.mods[id]
	}
	return nil
}

// symbols returns the symbols of module id (nil if none or unknown).
func (e *exporter) symbols(id uint16) *Symbols {
	if int(id) >= len(e.mods) || e.mods[id] == nil {
		return nil
	}
	e.used[id] = true
	if !e.symDone[id] {
		e.symDone[id] = true
		if e.opts.Symbolize != nil {
			e.syms[id] = e.opts.Symbolize(*e.mods[id])
		}
	}
	return e.syms[id]
}

// each calls f for every row of the source, batch by batch, checking
// ctx between batches.
func (e *exporter) each(ctx context.Context, f func(b *Batch, i int)) error {
	return e.eachBatch(ctx, func(b *Batch) {
		for i := range b.Kind {
			f(b, i)
		}
	})
}

// eachBatch calls f with every batch of the source, checked.
func (e *exporter) eachBatch(ctx context.Context, f func(b *Batch)) error {
	for e.src.Next() {
		if err := ctx.Err(); err != nil {
			return err
		}
		b := e.src.Batch()
		if err := b.check(); err != nil {
			return err
		}
		f(b)
		e.stats.Rows += int64(b.Len())
	}
	return e.src.Err()
}

// eventKind returns the event kind of a row: the kind itself, or for a
// refusal (an event that occurred but the redundancy log kept from
// being recorded) the refused kind; ok is false for records.
func eventKind(k uint8) (formats.Kind, bool) {
	kind := formats.Kind(k)
	if r, ok := kind.Refused(); ok {
		return r, true
	}
	return kind, kind.Valid()
}

// modName is the short name of a module for display: its file's base
// name, or "?" for no module.
func (e *exporter) modName(id uint16) string {
	m := e.module(id)
	if m == nil {
		return "?"
	}
	p := m.Path
	if i := strings.LastIndexByte(p, '/'); i >= 0 && i+1 < len(p) {
		p = p[i+1:]
	}
	if p == "" {
		return "module" + strconv.Itoa(int(id))
	}
	return p
}

// place formats a module-relative address as module+0xoffset, or an
// absolute one as 0xaddr.
func (e *exporter) place(id uint16, addr uint64) string {
	if e.module(id) == nil {
		return "0x" + strconv.FormatUint(addr, 16)
	}
	return e.modName(id) + "+0x" + strconv.FormatUint(addr, 16)
}

// funcName returns the name of the function containing addr, or "" when
// unknown.
func (e *exporter) funcName(id uint16, a uint64) string {
	// a direct-mapped cache: a trace's rows repeat a few thousand
	// addresses, and a symbol table lookup is a binary search
	return e.nameSlot(id, a).name
}

// nameSlot returns the cache entry of (id, a), filled.
func (e *exporter) nameSlot(id uint16, a uint64) *nameSlot {
	if e.names == nil {
		e.names = make([]nameSlot, 1<<nameCacheBits)
	}
	s := &e.names[(a*0x9e3779b97f4a7c15+uint64(id))>>(64-nameCacheBits)]
	if s.set && s.a == a && s.mod == id {
		return s
	}
	name := ""
	if f := e.symbols(id).Func(a); f != nil {
		name = f.Name
	}
	*s = nameSlot{a: a, mod: id, set: true, name: name, idx: -1}
	return s
}

// funcIndex is the index in e.dict of the name of the function at
// (id, a) ("" when unknown).
func (e *exporter) funcIndex(id uint16, a uint64) int32 {
	s := e.nameSlot(id, a)
	if s.idx < 0 {
		s.idx = e.dict.index(s.name)
	}
	return s.idx
}

// frameName is a function's name for stacks: its name, or
// module+0xoffset of addr when unknown.
func (e *exporter) frameName(id uint16, addr uint64) string {
	if n := e.funcName(id, addr); n != "" {
		return n
	}
	return e.place(id, addr)
}

var errNoEvents = errors.New("no events to export")
