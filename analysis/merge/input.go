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

	"github.com/apache/arrow/go/v15/arrow"
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
//
// Record batches are decoded without arrow-go: each message's flatbuffer
// is checked (see checkBatch), its body read into one reused buffer, and
// the column slices of [Batch] point straight into that buffer (on this
// little-endian machine the Arrow values are the slices' values), so
// reading allocates nothing per batch and copies each byte once.
type Reader struct {
	name    string
	merged  bool
	runs    []RunInfo
	modules []formats.Module

	f         *os.File
	ncols     int
	off       int64 // stream offset of the next byte
	start     int64 // stream offset of the current (or failed) message
	remaining int64
	nmsg      int // messages read, the schema included
	meta      []byte
	body      []byte

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
	r.remaining = r.size - r.off
	r.nmsg = 1
	return r, nil
}

// openPlain reads a trace file's schema and metadata with package
// formats, which validates them, and leaves f after the schema message.
func (r *Reader) openPlain() error {
	fr, err := formats.NewReader(r.f)
	if err != nil {
		return err
	}
	defer fr.Release()
	pos, err := r.f.Seek(0, io.SeekCurrent)
	if err != nil {
		return err
	}
	r.off, r.ncols = pos, formats.NumCols
	r.modules = fr.Modules()
	ri := RunInfo{Run: 0, File: filepath.Base(r.name), Info: fr.Run()}
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

func (r *Reader) openMerged() error {
	mr := &msgReader{r: r.f, remaining: r.size, refCount: 1}
	ir, err := ipc.NewReaderFromMessageReader(mr, ipc.WithAllocator(memory.DefaultAllocator))
	if err != nil {
		if mr.err != nil {
			return mr.err
		}
		return &formats.FormatError{Offset: 0, Msg: "bad schema", Err: err}
	}
	defer ir.Release()
	r.merged, r.ncols, r.off = true, NumCols, mr.off
	return r.readMeta(ir.Schema())
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
func (r *Reader) Offset() int64 { return r.start }

// Next advances to the next batch; false at the end or on error (see
// Err and End).
func (r *Reader) Next() bool {
	if r.done {
		return false
	}
	if err := r.next(); err != nil {
		r.done, r.err = true, err
		if r.end == formats.EndNone {
			r.end = formats.EndError
		}
		return false
	}
	if r.end != formats.EndNone {
		r.done = true
		return false
	}
	return true
}

func (r *Reader) fail(trunc bool, format string, args ...any) error {
	r.end = formats.EndError
	var e error
	if trunc {
		r.end, e = formats.EndCut, formats.ErrTruncated
	}
	return &formats.FormatError{Offset: r.start, Msg: fmt.Sprintf(format, args...), Err: e}
}

// read fills p from the file.
func (r *Reader) read(p []byte, what string) error {
	n, err := io.ReadFull(r.f, p)
	r.off += int64(n)
	r.remaining -= int64(n)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF):
		return r.fail(true, "input ends inside the %s of the message at offset %d", what, r.start)
	}
	r.end = formats.EndError
	return fmt.Errorf("offset %d: read: %w", r.off, err)
}

// next reads one message: a record batch (r.batch is set), or the end
// of the stream (r.end is set), or an error. Ends as package formats
// reads them: the end-of-stream marker, zeros where a message would
// start (a runtime's unsealed tail), the end of the file between
// messages, or a cut inside a message (ErrTruncated).
func (r *Reader) next() error {
	r.start = r.off
	if r.remaining <= 0 {
		r.end = formats.EndEOF
		return nil
	}
	var pre [8]byte
	if r.remaining < 4 {
		n := int(r.remaining)
		if err := r.read(pre[:n], "prefix"); err != nil {
			return err
		}
		if bytes.Count(pre[:n], []byte{0}) == n {
			r.end = formats.EndZeros
			return nil
		}
		return r.fail(true, "input ends inside a message prefix (%d of 8 bytes)", n)
	}
	if err := r.read(pre[:4], "prefix"); err != nil {
		return err
	}
	switch w := binary.LittleEndian.Uint32(pre[:4]); w {
	case 0:
		r.end = formats.EndZeros
		return nil
	case 0xffffffff:
	default:
		return r.fail(false, "bad message prefix % x after message %d: want ff ff ff ff (or zeros)", pre[:4], r.nmsg)
	}
	if err := r.read(pre[4:], "prefix"); err != nil {
		return err
	}
	metaLen := int64(int32(binary.LittleEndian.Uint32(pre[4:])))
	switch {
	case metaLen == 0:
		r.end = formats.EndMarker
		return nil
	case metaLen < 0 || metaLen > maxMeta:
		return r.fail(false, "message metadata length %d out of range", metaLen)
	case metaLen > r.remaining:
		return r.fail(true, "input ends inside the metadata of the message at offset %d", r.start)
	}
	if int64(cap(r.meta)) < metaLen {
		r.meta = make([]byte, metaLen)
	}
	meta := r.meta[:metaLen]
	if err := r.read(meta, "metadata"); err != nil {
		return err
	}
	lay, err := checkBatch(meta, r.ncols)
	if err != nil {
		return r.fail(false, "bad message %d: %v", r.nmsg, err)
	}
	if lay.bodyLen > r.remaining {
		return r.fail(true, "input ends inside the body of the message at offset %d (%d of %d bytes)", r.start, r.remaining, lay.bodyLen)
	}
	if int64(cap(r.body)) < lay.bodyLen {
		// Rounded up so that batches of slightly different sizes reuse it.
		r.body = make([]byte, (lay.bodyLen+(1<<16)-1)&^(1<<16-1))
	}
	body := r.body[:lay.bodyLen]
	if err := r.read(body, "body"); err != nil {
		return err
	}
	r.nmsg++
	r.setColumns(body, lay)
	for _, k := range r.batch.Run {
		if int(k) >= len(r.runs) {
			return r.fail(false, "run %d is not in the run list (%d runs)", k, len(r.runs))
		}
	}
	return nil
}

// setColumns points the batch's slices into body (checkBatch has
// checked that every column's values lie inside it).
func (r *Reader) setColumns(body []byte, lay layout) {
	n := int(lay.rows)
	col := func(c int) []byte {
		off := lay.bufs[2*c+1][0]
		return body[off : off+int64(n*colWidth[c])]
	}
	b := &r.batch
	b.Kind = col(formats.ColKind)[:n:n]
	b.TID = view[uint32](col(formats.ColTID), n)
	b.Time = view[uint64](col(formats.ColTime), n)
	b.SrcModule = view[uint16](col(formats.ColSrcModule), n)
	b.Src = view[uint64](col(formats.ColSrc), n)
	b.DstModule = view[uint16](col(formats.ColDstModule), n)
	b.Dst = view[uint64](col(formats.ColDst), n)
	b.Value = view[uint64](col(formats.ColValue), n)
	b.Run = nil
	if r.ncols == NumCols {
		b.Run = view[uint16](col(ColRun), n)
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
	r.body, r.meta, r.batch = nil, nil, Batch{}
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
var colWidth = [NumCols]int{1, 4, 8, 2, 8, 2, 8, 8, 2}

// layout is where a record batch's rows and buffers are.
type layout struct {
	bodyLen int64
	rows    int64
	bufs    [2 * NumCols][2]int64 // (offset, length) in the body
}

// msgTable parses a message's root table and returns it, its header
// type, its body length and a bounds-checked field accessor (which
// panics, to be recovered by the caller, on an offset out of range).
func msgTable(meta []byte) (msg flatbuffers.Table, htype byte, bodyLen int64, field func(*flatbuffers.Table, int) flatbuffers.UOffsetT, err error) {
	if len(meta) < 8 {
		return msg, 0, 0, nil, errors.New("too short")
	}
	root := flatbuffers.GetUOffsetT(meta)
	if int(root)+4 > len(meta) {
		return msg, 0, 0, nil, errors.New("root offset out of range")
	}
	msg.Bytes, msg.Pos = meta, root
	field = func(t *flatbuffers.Table, slot int) flatbuffers.UOffsetT {
		o := flatbuffers.UOffsetT(t.Offset(flatbuffers.VOffsetT(4 + 2*slot)))
		if o != 0 && int(t.Pos+o) >= len(t.Bytes) {
			panic("field out of range")
		}
		return o
	}
	if o := field(&msg, 1); o != 0 {
		htype = msg.GetByte(msg.Pos + o)
	}
	if o := field(&msg, 3); o != 0 {
		bodyLen = msg.GetInt64(msg.Pos + o)
	}
	if bodyLen < 0 {
		return msg, 0, 0, nil, fmt.Errorf("negative body length %d", bodyLen)
	}
	return msg, htype, bodyLen, field, nil
}

// checkMessage checks the schema message of a merged trace (a panic of
// the flatbuffers library is recovered) and returns its body length.
func checkMessage(meta []byte, first bool) (bodyLen int64, err error) {
	if !first {
		lay, err := checkBatch(meta, NumCols)
		return lay.bodyLen, err
	}
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("malformed flatbuffer (%v)", p)
		}
	}()
	msg, htype, bodyLen, field, err := msgTable(meta)
	if err != nil {
		return 0, err
	}
	if htype != headerSchema {
		return 0, fmt.Errorf("first message has header type %d, want a Schema", htype)
	}
	return bodyLen, checkSchema(meta, &msg, field)
}

// checkBatch reads a record batch message's flatbuffer with bounds
// checks (a panic of the flatbuffers library is recovered) and returns
// its layout: ncols non-null columns, without compression, whose value
// buffers lie inside the body and hold their rows. The caller may then
// slice the columns out of the body.
func checkBatch(meta []byte, ncols int) (lay layout, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("malformed flatbuffer (%v)", p)
		}
	}()
	msg, htype, bodyLen, field, err := msgTable(meta)
	if err != nil {
		return lay, err
	}
	if htype != headerRecordBatch {
		return lay, fmt.Errorf("message has header type %d, want a RecordBatch", htype)
	}
	lay.bodyLen = bodyLen
	var rb flatbuffers.Table
	o := field(&msg, 2)
	if o == 0 {
		return lay, errors.New("record batch without header")
	}
	rb.Bytes, rb.Pos = meta, msg.Indirect(msg.Pos+o)
	var rows int64
	if o := field(&rb, 0); o != 0 {
		rows = rb.GetInt64(rb.Pos + o)
	}
	if rows < 0 || rows > bodyLen {
		return lay, fmt.Errorf("row count %d out of range", rows)
	}
	lay.rows = rows
	if field(&rb, 3) != 0 {
		return lay, errors.New("compressed record batches are not supported")
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
	if nn != ncols {
		return lay, fmt.Errorf("record batch has %d field nodes, want %d", nn, ncols)
	}
	for i := 0; i < nn; i++ {
		p := nodes + flatbuffers.UOffsetT(16*i)
		if l, nulls := rb.GetInt64(p), rb.GetInt64(p+8); l != rows || nulls != 0 {
			return lay, fmt.Errorf("column %d: %d rows, %d nulls; want %d rows, no nulls", i, l, nulls, rows)
		}
	}
	bufs, nb := vec(2)
	if nb != 2*ncols {
		return lay, fmt.Errorf("record batch has %d buffers, want %d", nb, 2*ncols)
	}
	for i := 0; i < nb; i++ {
		p := bufs + flatbuffers.UOffsetT(16*i)
		off, l := rb.GetInt64(p), rb.GetInt64(p+8)
		if off < 0 || l < 0 || off > bodyLen || l > bodyLen-off {
			return lay, fmt.Errorf("buffer %d (offset %d, length %d) outside the body (%d bytes)", i, off, l, bodyLen)
		}
		if i%2 == 1 && l < rows*int64(colWidth[i/2]) {
			return lay, fmt.Errorf("column %d's values are %d bytes, want %d", i/2, l, rows*int64(colWidth[i/2]))
		}
		lay.bufs[i] = [2]int64{off, l}
	}
	return lay, nil
}
