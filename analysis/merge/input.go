package merge

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"unsafe"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/stint-project/stint/analysis/paths"
	"github.com/stint-project/stint/formats"
)

// Schema metadata keys of a merged trace (besides formats.MetaVersion
// and formats.MetaModules).
const (
	MetaMerged = "stint.merged"
	MetaRuns   = "stint.runs"
)

// ColRun is the index of the run column; NumCols the number of columns
// of a merged trace.
const (
	ColRun  = formats.NumCols
	NumCols = formats.NumCols + 1
)

// MaxRuns is the number of runs a merged trace can hold (the run column
// is a uint16).
const MaxRuns = 1 << 16

// RunInfo is one entry of a merged trace's run list.
type RunInfo struct {
	Run   int          `json:"run"`   // the value of the run column
	File  string       `json:"file"`  // trace file the run came from
	Info  formats.Run  `json:"info"`  // the run's metadata
	Bases []ModuleBase `json:"bases"` // the run's modules and their load bases
}

// ModuleBase is a module of a run: its id in the module table and its
// load base in that run.
type ModuleBase struct {
	ID   uint16 `json:"id"`
	Base uint64 `json:"base"`
}

// Batch is one record batch of a trace or merged trace, as column
// slices; row i is (Kind[i], TID[i], …). The slices are valid until the
// next call to [Reader.Next].
type Batch struct {
	Kind      []uint8
	TID       []uint32
	Time      []uint64
	SrcModule []uint16
	Src       []uint64
	DstModule []uint16
	Dst       []uint64
	Value     []uint64
	Run       []uint16 // nil for a plain trace: every row is of run 0
}

// Len returns the number of rows.
func (b *Batch) Len() int { return len(b.Kind) }

// RunOf returns the run of row i.
func (b *Batch) RunOf(i int) int {
	if b.Run == nil {
		return 0
	}
	return int(b.Run[i])
}

// Event returns row i as a formats.Event.
func (b *Batch) Event(i int) formats.Event {
	return formats.Event{Kind: formats.Kind(b.Kind[i]), TID: b.TID[i], Time: b.Time[i],
		SrcModule: b.SrcModule[i], Src: b.Src[i], DstModule: b.DstModule[i], Dst: b.Dst[i], Value: b.Value[i]}
}

// Reader reads a trace file or a merged trace one batch at a time,
// through a formats.BatchReader: each batch is validated as package
// formats validates a trace's, and the column slices of [Batch] point
// straight into the batch's body (on this little-endian machine the
// Arrow values are the slices' values), so reading allocates nothing per
// batch and copies each byte once.
type Reader struct {
	name    string
	merged  bool
	runs    []RunInfo
	modules []formats.Module

	f     *os.File
	br    *formats.BatchReader
	batch Batch
	paths *paths.Stream // a compact trace's decoded events, after the rows
	err   error
	end   formats.End
	done  bool
	size  int64
}

// Open opens a trace file or a merged trace. Errors name the file.
func Open(name string) (*Reader, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	r := &Reader{name: name, size: fi.Size(), f: f}
	merged, err := isMerged(f)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	if merged {
		err = r.openMerged()
	} else {
		err = r.openPlain()
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return r, nil
}

// openPlain reads a trace file's schema and metadata, which package
// formats validates.
func (r *Reader) openPlain() error {
	br, err := formats.NewBatchReader(r.f, nil, 0)
	if err != nil {
		return err
	}
	run, modules, err := br.TraceMeta()
	if err != nil {
		return err
	}
	r.br, r.modules = br, modules
	ri := RunInfo{Run: 0, File: filepath.Base(r.name), Info: run}
	for _, m := range r.modules {
		ri.Bases = append(ri.Bases, ModuleBase{ID: m.ID, Base: m.Base})
	}
	r.runs = []RunInfo{ri}
	return nil
}

// isMerged reads the start of a stream's schema message and reports
// whether its metadata names it a merged trace; it rewinds f.
func isMerged(f *os.File) (bool, error) {
	defer f.Seek(0, io.SeekStart)
	var pre [8]byte
	if _, err := io.ReadFull(f, pre[:]); err != nil {
		return false, nil // let formats say what is wrong
	}
	n := int64(int32(binary.LittleEndian.Uint32(pre[4:])))
	if binary.LittleEndian.Uint32(pre[:4]) != 0xffffffff || n <= 0 || n > maxMeta {
		return false, nil
	}
	meta := make([]byte, n)
	if _, err := io.ReadFull(f, meta); err != nil {
		return false, nil
	}
	return bytes.Contains(meta, []byte(MetaMerged)), nil
}

// runColumn is the column a merged trace adds after a trace's.
var runColumn = []formats.Column{{Name: "run", Width: 2}}

func (r *Reader) openMerged() error {
	br, err := formats.NewBatchReader(r.f, runColumn, maxMeta)
	if err != nil {
		return err
	}
	r.br, r.merged = br, true
	return r.readMeta(br.Schema())
}

func (r *Reader) readMeta(s *arrow.Schema) error {
	fs := s.Fields()
	want := Schema().Fields()
	if len(fs) != len(want) {
		return &formats.FormatError{Msg: fmt.Sprintf("merged trace has %d columns, want %d", len(fs), len(want))}
	}
	for i := range fs {
		if fs[i].Name != want[i].Name || !arrow.TypeEqual(fs[i].Type, want[i].Type) {
			return &formats.FormatError{Msg: fmt.Sprintf("merged trace column %d is %s %s, want %s %s", i, fs[i].Name, fs[i].Type, want[i].Name, want[i].Type)}
		}
	}
	md := s.Metadata()
	get := func(k string) (string, error) {
		i := md.FindKey(k)
		if i < 0 {
			return "", &formats.FormatError{Msg: fmt.Sprintf("merged trace: schema metadata has no %q", k)}
		}
		return md.Values()[i], nil
	}
	v, err := get(formats.MetaVersion)
	if err != nil {
		return err
	}
	if v != formats.Version {
		return &formats.FormatError{Msg: fmt.Sprintf("unsupported %s %q (this reader knows %q)", formats.MetaVersion, v, formats.Version)}
	}
	if v, err = get(MetaModules); err != nil {
		return err
	}
	if r.modules, err = decodeModules(v); err != nil {
		return &formats.FormatError{Msg: "bad merged module table", Err: err}
	}
	if v, err = get(MetaRuns); err != nil {
		return err
	}
	if r.runs, err = decodeRuns(v, r.modules); err != nil {
		return &formats.FormatError{Msg: "bad merged run list", Err: err}
	}
	return nil
}

// MetaModules is formats.MetaModules: the merged module table.
const MetaModules = formats.MetaModules

// Schema returns the merged trace's schema without metadata.
func Schema() *arrow.Schema {
	fs := make([]arrow.Field, 0, NumCols)
	fs = append(fs, formats.Schema().Fields()...)
	fs = append(fs, arrow.Field{Name: runColumn[0].Name, Type: arrow.PrimitiveTypes.Uint16})
	return arrow.NewSchema(fs, nil)
}

func decodeModules(v string) ([]formats.Module, error) {
	var ms []formats.Module
	seen := map[uint16]bool{}
	dec := json.NewDecoder(bytes.NewReader([]byte(v)))
	for dec.More() {
		var m formats.Module
		if err := dec.Decode(&m); err != nil {
			return nil, fmt.Errorf("module %d: %w", len(ms), err)
		}
		if m.ID == formats.NoModule || seen[m.ID] {
			return nil, fmt.Errorf("module %d: id %d is reserved or repeated", len(ms), m.ID)
		}
		seen[m.ID] = true
		ms = append(ms, m)
	}
	return ms, nil
}

func decodeRuns(v string, modules []formats.Module) ([]RunInfo, error) {
	ids := map[uint16]bool{}
	for _, m := range modules {
		ids[m.ID] = true
	}
	var runs []RunInfo
	dec := json.NewDecoder(bytes.NewReader([]byte(v)))
	for dec.More() {
		var ri RunInfo
		if err := dec.Decode(&ri); err != nil {
			return nil, fmt.Errorf("run %d: %w", len(runs), err)
		}
		if ri.Run != len(runs) {
			return nil, fmt.Errorf("run %d: numbered %d", len(runs), ri.Run)
		}
		if len(runs) >= MaxRuns {
			return nil, fmt.Errorf("more than %d runs", MaxRuns)
		}
		for _, b := range ri.Bases {
			if !ids[b.ID] {
				return nil, fmt.Errorf("run %d: module id %d is not in the module table", ri.Run, b.ID)
			}
		}
		runs = append(runs, ri)
	}
	if len(runs) == 0 {
		return nil, errors.New("no runs")
	}
	return runs, nil
}

// Name returns the file name given to [Open].
func (r *Reader) Name() string { return r.name }

// Merged reports whether the file is a merged trace.
func (r *Reader) Merged() bool { return r.merged }

// Runs returns the run list: one run for a plain trace (its bases from
// its module table).
func (r *Reader) Runs() []RunInfo { return r.runs }

// Modules returns the module table (for a merged trace the unified one,
// whose bases are 0).
func (r *Reader) Modules() []formats.Module { return r.modules }

// Size returns the file's size in bytes.
func (r *Reader) Size() int64 { return r.size }

// Offset returns the stream offset of the current batch.
func (r *Reader) Offset() int64 { return r.br.Offset() }

// Next advances to the next batch; false at the end or on error (see
// Err and End).
func (r *Reader) Next() bool {
	if r.done {
		return false
	}
	if r.paths != nil || !r.br.Next() {
		if r.paths == nil {
			r.err, r.end = r.br.Err(), r.br.End()
			r.batch = Batch{} // its slices point into the reader's body: never write there
		}
		if r.err == nil && r.pathsNext() {
			return true
		}
		r.done = true
		return false
	}
	r.setColumns()
	for _, k := range r.batch.Run {
		if int(k) >= len(r.runs) {
			r.done, r.end = true, formats.EndError
			r.err = &formats.FormatError{Offset: r.br.Offset(), Msg: fmt.Sprintf("run %d is not in the run list (%d runs)", k, len(r.runs))}
			return false
		}
	}
	return true
}

// setColumns points the batch's slices into the batch's body.
func (r *Reader) setColumns() {
	n, br := r.br.Rows(), r.br
	b := &r.batch
	b.Kind = br.Values(formats.ColKind)[:n:n]
	b.TID = view[uint32](br.Values(formats.ColTID), n)
	b.Time = view[uint64](br.Values(formats.ColTime), n)
	b.SrcModule = view[uint16](br.Values(formats.ColSrcModule), n)
	b.Src = view[uint64](br.Values(formats.ColSrc), n)
	b.DstModule = view[uint16](br.Values(formats.ColDstModule), n)
	b.Dst = view[uint64](br.Values(formats.ColDst), n)
	b.Value = view[uint64](br.Values(formats.ColValue), n)
	b.Run = nil
	if r.merged {
		b.Run = view[uint16](br.Values(ColRun), n)
	}
}

// view returns the n little-endian values in p as a []T sharing p's
// memory, or a copy when p is not aligned for T (Arrow asks writers to
// align buffers to 8 bytes; a hostile file need not).
func view[T uint16 | uint32 | uint64](p []byte, n int) []T {
	if n == 0 {
		return []T{}
	}
	var z T
	size := int(unsafe.Sizeof(z))
	ptr := unsafe.Pointer(unsafe.SliceData(p))
	if uintptr(ptr)%uintptr(size) == 0 {
		return unsafe.Slice((*T)(ptr), n)
	}
	out := make([]T, n)
	copy(unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(out))), n*size), p[:n*size])
	return out
}

// Batch returns the current batch, valid until the next call to Next.
func (r *Reader) Batch() *Batch { return &r.batch }

// Err returns the error that ended the stream; nil if it ended cleanly.
// A stream cut inside a batch gives a *formats.FormatError wrapping
// formats.ErrTruncated, after every complete batch.
func (r *Reader) Err() error { return r.err }

// End says how the stream ended, once Next has returned false.
func (r *Reader) End() formats.End { return r.end }

// Close closes the file.
func (r *Reader) Close() {
	if r.f != nil {
		r.f.Close()
		r.f = nil
	}
	r.br, r.batch = nil, Batch{}
}

// maxMeta bounds a merged trace's message metadata: its schema carries
// the run list, so it may be larger than a trace's.
const maxMeta = 64 << 20
