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

	"github.com/apache/arrow/go/v15/arrow"
	"github.com/apache/arrow/go/v15/arrow/array"
	"github.com/apache/arrow/go/v15/arrow/ipc"
	"github.com/apache/arrow/go/v15/arrow/memory"
	flatbuffers "github.com/google/flatbuffers/go"
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

// Reader reads a trace file or a merged trace one batch at a time.
type Reader struct {
	name    string
	merged  bool
	runs    []RunInfo
	modules []formats.Module

	fr *formats.Reader // plain trace

	f   *os.File // merged trace
	mr  *msgReader
	ir  *ipc.Reader
	rec arrow.Record

	batch Batch
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
	r := &Reader{name: name, size: fi.Size()}
	merged, err := isMerged(f)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	if !merged {
		f.Close()
		fr, err := formats.Open(name)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		r.fr = fr
		r.modules = fr.Modules()
		ri := RunInfo{Run: 0, File: filepath.Base(name), Info: fr.Run()}
		for _, m := range r.modules {
			ri.Bases = append(ri.Bases, ModuleBase{ID: m.ID, Base: m.Base})
		}
		r.runs = []RunInfo{ri}
		return r, nil
	}
	r.merged, r.f = true, f
	if err := r.openMerged(); err != nil {
		f.Close()
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return r, nil
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

func (r *Reader) openMerged() error {
	r.mr = &msgReader{r: r.f, remaining: r.size, refCount: 1}
	ir, err := ipc.NewReaderFromMessageReader(r.mr, ipc.WithAllocator(memory.DefaultAllocator))
	if err != nil {
		if r.mr.err != nil {
			return r.mr.err
		}
		return &formats.FormatError{Offset: 0, Msg: "bad schema", Err: err}
	}
	r.ir = ir
	if err := r.readMeta(ir.Schema()); err != nil {
		ir.Release()
		r.ir = nil
		return err
	}
	return nil
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
	fs = append(fs, arrow.Field{Name: "run", Type: arrow.PrimitiveTypes.Uint16})
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
func (r *Reader) Offset() int64 {
	if r.fr != nil {
		return r.fr.RecordOffset()
	}
	return r.mr.start
}

// Next advances to the next batch; false at the end or on error (see
// Err and End).
func (r *Reader) Next() bool {
	if r.done {
		return false
	}
	if r.fr != nil {
		if !r.fr.Next() {
			r.done, r.err, r.end = true, r.fr.Err(), r.fr.End()
			return false
		}
		if err := r.columns(r.fr.Record(), formats.NumCols); err != nil {
			r.done, r.err, r.end = true, err, formats.EndError
			return false
		}
		return true
	}
	if r.rec != nil {
		r.rec.Release()
		r.rec = nil
	}
	if !r.ir.Next() {
		r.done = true
		switch {
		case r.mr.err != nil:
			r.err, r.end = r.mr.err, r.mr.end
		case r.ir.Err() != nil:
			r.err, r.end = &formats.FormatError{Offset: r.mr.start, Msg: "bad record batch", Err: r.ir.Err()}, formats.EndError
		default:
			r.end = r.mr.end
		}
		return false
	}
	r.rec = r.ir.Record()
	r.rec.Retain()
	if err := r.columns(r.rec, NumCols); err != nil {
		r.done, r.err, r.end = true, err, formats.EndError
		return false
	}
	for _, k := range r.batch.Run {
		if int(k) >= len(r.runs) {
			r.done, r.end = true, formats.EndError
			r.err = &formats.FormatError{Offset: r.mr.start, Msg: fmt.Sprintf("run %d is not in the run list (%d runs)", k, len(r.runs))}
			return false
		}
	}
	return true
}

// columns sets r.batch from rec. Hostile buffers can make arrow-go's
// value accessors panic: this is the trust boundary that recovers.
func (r *Reader) columns(rec arrow.Record, ncols int) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = &formats.FormatError{Offset: r.Offset(), Msg: fmt.Sprintf("bad record batch: %v", p)}
		}
	}()
	if int(rec.NumCols()) != ncols {
		return &formats.FormatError{Offset: r.Offset(), Msg: fmt.Sprintf("record batch has %d columns, want %d", rec.NumCols(), ncols)}
	}
	n := int(rec.NumRows())
	b := &r.batch
	b.Kind = rec.Column(formats.ColKind).(*array.Uint8).Uint8Values()
	b.TID = rec.Column(formats.ColTID).(*array.Uint32).Uint32Values()
	b.Time = rec.Column(formats.ColTime).(*array.Uint64).Uint64Values()
	b.SrcModule = rec.Column(formats.ColSrcModule).(*array.Uint16).Uint16Values()
	b.Src = rec.Column(formats.ColSrc).(*array.Uint64).Uint64Values()
	b.DstModule = rec.Column(formats.ColDstModule).(*array.Uint16).Uint16Values()
	b.Dst = rec.Column(formats.ColDst).(*array.Uint64).Uint64Values()
	b.Value = rec.Column(formats.ColValue).(*array.Uint64).Uint64Values()
	b.Run = nil
	if ncols == NumCols {
		b.Run = rec.Column(ColRun).(*array.Uint16).Uint16Values()
	}
	for _, l := range []int{len(b.Kind), len(b.TID), len(b.Time), len(b.SrcModule), len(b.Src), len(b.DstModule), len(b.Dst), len(b.Value)} {
		if l != n {
			return &formats.FormatError{Offset: r.Offset(), Msg: fmt.Sprintf("record batch column has %d values, want %d", l, n)}
		}
	}
	if b.Run != nil && len(b.Run) != n {
		return &formats.FormatError{Offset: r.Offset(), Msg: fmt.Sprintf("run column has %d values, want %d", len(b.Run), n)}
	}
	return nil
}

// Batch returns the current batch, valid until the next call to Next.
func (r *Reader) Batch() *Batch { return &r.batch }

// Err returns the error that ended the stream; nil if it ended cleanly.
// A stream cut inside a batch gives a *formats.FormatError wrapping
// formats.ErrTruncated, after every complete batch.
func (r *Reader) Err() error { return r.err }

// End says how the stream ended, once Next has returned false.
func (r *Reader) End() formats.End { return r.end }

// Close releases the reader and closes the file.
func (r *Reader) Close() {
	if r.fr != nil {
		r.fr.Release()
		r.fr = nil
	}
	if r.rec != nil {
		r.rec.Release()
		r.rec = nil
	}
	if r.ir != nil {
		r.ir.Release()
		r.ir = nil
	}
	if r.f != nil {
		r.f.Close()
		r.f = nil
	}
}

// maxMeta bounds a message's metadata (the merged schema carries the run
// list, so it may be larger than a trace's).
const maxMeta = 64 << 20

// msgReader frames the messages of a merged trace for arrow-go: it knows
// where each message starts, tells a cut stream from a closed one, and
// bounds every allocation by the file's size.
type msgReader struct {
	r         io.Reader
	remaining int64
	off       int64
	start     int64
	refCount  int64
	msg       *ipc.Message
	nmsg      int
	end       formats.End
	err       error
}

func (m *msgReader) Retain() { m.refCount++ }
func (m *msgReader) Release() {
	m.refCount--
	if m.refCount == 0 && m.msg != nil {
		m.msg.Release()
		m.msg = nil
	}
}

func (m *msgReader) fail(trunc bool, format string, args ...any) error {
	m.end = formats.EndError
	var e error
	if trunc {
		m.end, e = formats.EndCut, formats.ErrTruncated
	}
	m.err = &formats.FormatError{Offset: m.start, Msg: fmt.Sprintf(format, args...), Err: e}
	return m.err
}

func (m *msgReader) read(p []byte) error {
	n, err := io.ReadFull(m.r, p)
	m.off += int64(n)
	m.remaining -= int64(n)
	if err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return m.fail(true, "input ends inside the message at offset %d", m.start)
		}
		m.end, m.err = formats.EndError, fmt.Errorf("offset %d: read: %w", m.off, err)
		return m.err
	}
	return nil
}

func (m *msgReader) Message() (msg *ipc.Message, err error) {
	if m.msg != nil {
		m.msg.Release()
		m.msg = nil
	}
	if m.err != nil {
		return nil, m.err
	}
	if m.end != formats.EndNone {
		return nil, io.EOF
	}
	m.start = m.off
	if m.remaining == 0 {
		if m.nmsg == 0 {
			return nil, m.fail(false, "empty input")
		}
		m.end = formats.EndEOF
		return nil, io.EOF
	}
	var pre [8]byte
	if err := m.read(pre[:]); err != nil {
		return nil, err
	}
	if binary.LittleEndian.Uint32(pre[:4]) != 0xffffffff {
		return nil, m.fail(false, "bad message prefix % x, want ff ff ff ff", pre[:4])
	}
	n := int64(int32(binary.LittleEndian.Uint32(pre[4:])))
	switch {
	case n == 0 && m.nmsg > 0:
		m.end = formats.EndMarker
		return nil, io.EOF
	case n <= 0 || n > maxMeta:
		return nil, m.fail(false, "message metadata length %d out of range", n)
	case n > m.remaining:
		return nil, m.fail(true, "input ends inside the metadata of the message at offset %d", m.start)
	}
	meta := make([]byte, n)
	if err := m.read(meta); err != nil {
		return nil, err
	}
	bodyLen, err := checkMessage(meta, m.nmsg == 0)
	if err != nil {
		return nil, m.fail(false, "bad message metadata: %v", err)
	}
	if bodyLen < 0 || bodyLen > m.remaining {
		return nil, m.fail(bodyLen > 0, "input ends inside the body of the message at offset %d (%d of %d bytes)", m.start, m.remaining, bodyLen)
	}
	body := make([]byte, bodyLen)
	if err := m.read(body); err != nil {
		return nil, err
	}
	mb, bb := memory.NewBufferBytes(meta), memory.NewBufferBytes(body)
	m.msg = ipc.NewMessage(mb, bb)
	m.nmsg++
	return m.msg, nil
}

// Message header types (Arrow's Schema.fbs MessageHeader).
const (
	headerSchema      = 1
	headerRecordBatch = 3
)

// checkSchema bounds the vectors of a Schema message that arrow-go
// allocates by: NumCols fields without children or dictionaries, and at
// most 16 metadata pairs.
func checkSchema(meta []byte, msg *flatbuffers.Table, field func(*flatbuffers.Table, int) flatbuffers.UOffsetT) error {
	o := field(msg, 2)
	if o == 0 {
		return errors.New("schema message without header")
	}
	var s flatbuffers.Table
	s.Bytes, s.Pos = meta, msg.Indirect(msg.Pos+o)
	vec := func(t *flatbuffers.Table, slot int) (flatbuffers.UOffsetT, int) {
		o := field(t, slot)
		if o == 0 {
			return 0, 0
		}
		n, start := t.VectorLen(o), t.Vector(o)
		if n < 0 || int(start)+4*n > len(meta) {
			panic("vector out of range")
		}
		return start, n
	}
	fields, n := vec(&s, 1)
	if n != NumCols {
		return fmt.Errorf("schema has %d fields, want %d", n, NumCols)
	}
	if _, n := vec(&s, 2); n > 16 {
		return fmt.Errorf("schema has %d metadata pairs", n)
	}
	for i := 0; i < NumCols; i++ {
		var f flatbuffers.Table
		f.Bytes, f.Pos = meta, s.Indirect(fields+flatbuffers.UOffsetT(4*i))
		if field(&f, 4) != 0 {
			return fmt.Errorf("field %d is dictionary-encoded", i)
		}
		if _, n := vec(&f, 5); n != 0 {
			return fmt.Errorf("field %d has children", i)
		}
		if _, n := vec(&f, 6); n > 16 {
			return fmt.Errorf("field %d has %d metadata pairs", i, n)
		}
	}
	return nil
}

// colWidth is each merged column's value width in bytes.
var colWidth = [NumCols]int64{1, 4, 8, 2, 8, 2, 8, 8, 2}

// checkMessage reads a message's flatbuffer with bounds checks (a panic
// of the flatbuffers library is recovered) and returns its body length.
// The first message must be a Schema; every later one a RecordBatch of
// NumCols non-null columns whose buffers lie inside the body and hold
// their rows, without compression, so that arrow-go's decoder stays in
// bounds.
func checkMessage(meta []byte, first bool) (bodyLen int64, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("malformed flatbuffer (%v)", p)
		}
	}()
	if len(meta) < 8 {
		return 0, errors.New("too short")
	}
	root := flatbuffers.GetUOffsetT(meta)
	if int(root)+4 > len(meta) {
		return 0, errors.New("root offset out of range")
	}
	var msg flatbuffers.Table
	msg.Bytes, msg.Pos = meta, root
	field := func(t *flatbuffers.Table, slot int) flatbuffers.UOffsetT {
		o := flatbuffers.UOffsetT(t.Offset(flatbuffers.VOffsetT(4 + 2*slot)))
		if o != 0 && int(t.Pos+o) >= len(t.Bytes) {
			panic("field out of range")
		}
		return o
	}
	var htype byte
	if o := field(&msg, 1); o != 0 {
		htype = msg.GetByte(msg.Pos + o)
	}
	if o := field(&msg, 3); o != 0 {
		bodyLen = msg.GetInt64(msg.Pos + o)
	}
	if bodyLen < 0 {
		return 0, fmt.Errorf("negative body length %d", bodyLen)
	}
	switch {
	case first && htype != headerSchema:
		return 0, fmt.Errorf("first message has header type %d, want a Schema", htype)
	case first:
		return bodyLen, checkSchema(meta, &msg, field)
	case htype != headerRecordBatch:
		return 0, fmt.Errorf("message has header type %d, want a RecordBatch", htype)
	}
	var rb flatbuffers.Table
	o := field(&msg, 2)
	if o == 0 {
		return 0, errors.New("record batch without header")
	}
	rb.Bytes, rb.Pos = meta, msg.Indirect(msg.Pos+o)
	var rows int64
	if o := field(&rb, 0); o != 0 {
		rows = rb.GetInt64(rb.Pos + o)
	}
	if rows < 0 || rows > bodyLen {
		return 0, fmt.Errorf("row count %d out of range", rows)
	}
	if field(&rb, 3) != 0 {
		return 0, errors.New("compressed record batches are not supported")
	}
	vec := func(slot int) (start flatbuffers.UOffsetT, n int) {
		o := field(&rb, slot)
		if o == 0 {
			return 0, 0
		}
		n = rb.VectorLen(o)
		start = rb.Vector(o)
		if n < 0 || int(start)+16*n > len(meta) {
			panic("vector out of range")
		}
		return start, n
	}
	nodes, nn := vec(1)
	if nn != NumCols {
		return 0, fmt.Errorf("record batch has %d field nodes, want %d", nn, NumCols)
	}
	for i := 0; i < nn; i++ {
		p := nodes + flatbuffers.UOffsetT(16*i)
		if l, nulls := rb.GetInt64(p), rb.GetInt64(p+8); l != rows || nulls != 0 {
			return 0, fmt.Errorf("column %d: %d rows, %d nulls; want %d rows, no nulls", i, l, nulls, rows)
		}
	}
	bufs, nb := vec(2)
	if nb != 2*NumCols {
		return 0, fmt.Errorf("record batch has %d buffers, want %d", nb, 2*NumCols)
	}
	for i := 0; i < nb; i++ {
		p := bufs + flatbuffers.UOffsetT(16*i)
		off, l := rb.GetInt64(p), rb.GetInt64(p+8)
		if off < 0 || l < 0 || off > bodyLen || l > bodyLen-off {
			return 0, fmt.Errorf("buffer %d (offset %d, length %d) outside the body (%d bytes)", i, off, l, bodyLen)
		}
		if i%2 == 1 && l < rows*colWidth[i/2] {
			return 0, fmt.Errorf("column %d's values are %d bytes, want %d", i/2, l, rows*colWidth[i/2])
		}
	}
	return bodyLen, nil
}
