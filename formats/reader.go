package formats

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"sync/atomic"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

// ErrTruncated is wrapped by the [FormatError] of a stream that ends
// inside a message: the file was cut, or is still being written.
var ErrTruncated = errors.New("truncated")

// FormatError reports malformed or truncated input.
type FormatError struct {
	// Offset is the byte offset in the stream of the message (or of the
	// metadata value) at fault; for a truncated stream, of the message
	// that is incomplete. Everything before it was read.
	Offset int64
	// Msg says what is wrong.
	Msg string
	// Err is the underlying error, if any (ErrTruncated for a cut stream).
	Err error
}

func (e *FormatError) Error() string {
	s := fmt.Sprintf("offset %d: %s", e.Offset, e.Msg)
	if e.Err != nil && e.Err != ErrTruncated {
		s += ": " + e.Err.Error()
	}
	return s
}

func (e *FormatError) Unwrap() error { return e.Err }

// End says how a stream ended.
type End uint8

const (
	EndNone   End = iota // not (yet) at the end
	EndMarker            // the end-of-stream marker: the writer closed the trace
	EndZeros             // zero bytes where a message would start: a runtime's unsealed tail (the process did not finish its trace, e.g. it was killed)
	EndEOF               // the input ended between two messages, without a marker
	EndCut               // the input ended inside a message (Err is a *FormatError wrapping ErrTruncated)
	EndError             // malformed input or a read error (see Err)
)

var endNames = [...]string{"none", "end-of-stream marker", "zero padding (unsealed tail)", "end of input without marker", "cut inside a message", "error"}

func (e End) String() string {
	if int(e) < len(endNames) {
		return endNames[e]
	}
	return fmt.Sprintf("End(%d)", uint8(e))
}

// Clean reports whether the stream ended at a message boundary: every
// message in it was read completely.
func (e End) Clean() bool { return e == EndMarker || e == EndZeros || e == EndEOF }

// msgReader is the ipc.MessageReader through which arrow-go reads a
// stream: each message comes framed and validated by a [stream], so
// arrow-go's decoder never meets a hostile one.
type msgReader struct {
	s          *stream
	mem        memory.Allocator
	refCount   int64
	msg        *ipc.Message
	schemaMeta []byte
}

func newMsgReader(s *stream, mem memory.Allocator) *msgReader {
	return &msgReader{s: s, mem: mem, refCount: 1}
}

func (m *msgReader) Retain() { atomic.AddInt64(&m.refCount, 1) }

func (m *msgReader) Release() {
	if atomic.AddInt64(&m.refCount, -1) == 0 && m.msg != nil {
		m.msg.Release()
		m.msg = nil
	}
}

func (m *msgReader) Message() (*ipc.Message, error) {
	if m.msg != nil {
		m.msg.Release()
		m.msg = nil
	}
	body := memory.NewResizableBuffer(m.mem)
	defer body.Release()
	first := m.s.nmsg == 0
	meta, _, ok := m.s.next(nil, body)
	if !ok {
		if m.s.err != nil {
			return nil, m.s.err
		}
		return nil, io.EOF
	}
	if first {
		m.schemaMeta = meta
	}
	m.msg = ipc.NewMessage(memory.NewBufferBytes(meta), body)
	return m.msg, nil
}

// Reader reads a trace stream one record batch at a time, following
// arrow-go's ipc.Reader: Next, Record, Err, Release.
//
//	r, err := formats.Open("gzip.1234.arrow")
//	if err != nil { ... }
//	defer r.Release()
//	for r.Next() {
//		rec := r.Record() // valid until the next call to Next
//		...
//	}
//	if err := r.Err(); err != nil { ... } // batches read so far were complete
type Reader struct {
	mr       *msgReader
	ir       *ipc.Reader
	file     *os.File
	refCount int64
	rec      arrow.Record
	recOff   int64
	err      error
	done     bool
	batches  int
	rows     int64
	run      Run
	modules  []Module
}

var _ array.RecordReader = (*Reader)(nil)

// Open opens the named trace file. [Reader.Release] closes it.
func Open(name string, opts ...Option) (*Reader, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	r, err := NewReader(f, opts...)
	if err != nil {
		f.Close()
		return nil, err
	}
	r.file = f
	return r, nil
}

// NewReader reads the schema and its metadata from r and returns a reader
// of the record batches that follow. It returns a *FormatError if r does
// not hold a stint trace.
func NewReader(r io.Reader, opts ...Option) (*Reader, error) {
	cfg := newConfig(opts)
	mr := newMsgReader(newStream(r, traceColumns, maxMeta), cfg.mem)
	ir, err := ipc.NewReaderFromMessageReader(mr, ipc.WithAllocator(cfg.mem))
	if err != nil {
		mr.Release()
		if mr.s.err != nil {
			return nil, mr.s.err
		}
		return nil, &FormatError{Offset: 0, Msg: "bad schema", Err: err}
	}
	rd := &Reader{mr: mr, ir: ir, refCount: 1}
	if err := rd.readMeta(); err != nil {
		ir.Release()
		return nil, err
	}
	return rd, nil
}

func (r *Reader) readMeta() error {
	var err error
	r.run, r.modules, err = traceMeta(r.ir.Schema(), r.mr.schemaMeta)
	return err
}

// traceMeta checks a trace's schema and decodes its metadata (meta, the
// schema message's flatbuffer, locates a bad value for the error).
func traceMeta(s *arrow.Schema, meta []byte) (Run, []Module, error) {
	if err := checkFields(s); err != nil {
		return Run{}, nil, &FormatError{Offset: 0, Msg: "not a stint trace", Err: err}
	}
	md := s.Metadata()
	get := func(key string) (string, int64, error) {
		i := md.FindKey(key)
		if i < 0 {
			return "", 0, &FormatError{Offset: 0, Msg: fmt.Sprintf("not a stint trace: schema metadata has no %q", key)}
		}
		v := md.Values()[i]
		off := int64(0)
		if j := bytes.Index(meta, []byte(v)); j >= 0 {
			off = int64(8 + j)
		}
		return v, off, nil
	}
	v, _, err := get(MetaVersion)
	if err != nil {
		return Run{}, nil, err
	}
	if v != Version {
		return Run{}, nil, &FormatError{Offset: 0, Msg: fmt.Sprintf("unsupported %s %q (this reader knows %q)", MetaVersion, v, Version)}
	}
	v, off, err := get(MetaRun)
	if err != nil {
		return Run{}, nil, err
	}
	run, err := decodeRun(v)
	if err != nil {
		return Run{}, nil, &FormatError{Offset: off, Msg: "bad run metadata", Err: err}
	}
	v, off, err = get(MetaModules)
	if err != nil {
		return Run{}, nil, err
	}
	modules, pos, err := decodeModules(v)
	if err != nil {
		return Run{}, nil, &FormatError{Offset: off + int64(pos), Msg: "bad module table", Err: err}
	}
	return run, modules, nil
}

// Schema returns the stream's schema, with its metadata.
func (r *Reader) Schema() *arrow.Schema { return r.ir.Schema() }

// Run returns the run metadata.
func (r *Reader) Run() Run { return r.run }

// Modules returns the module table, in the order written.
func (r *Reader) Modules() []Module { return r.modules }

// Next advances to the next record batch; it returns false at the end of
// the stream or on error (see Err and End).
func (r *Reader) Next() bool {
	if r.rec != nil {
		r.rec.Release()
		r.rec = nil
	}
	if r.done {
		return false
	}
	if !r.ir.Next() {
		r.done = true
		switch {
		case r.mr.s.err != nil:
			r.err = r.mr.s.err
		case r.ir.Err() != nil:
			r.err = &FormatError{Offset: r.mr.s.start, Msg: "bad record batch", Err: r.ir.Err()}
			r.mr.s.end = EndError
		}
		return false
	}
	r.rec = r.ir.Record()
	r.rec.Retain()
	r.recOff = r.mr.s.start
	r.batches++
	r.rows += r.rec.NumRows()
	return true
}

// Record returns the current record batch; it is valid until the next
// call to Next (Retain it to keep it).
func (r *Reader) Record() arrow.RecordBatch { return r.rec }

// RecordBatch is Record, under the name array.RecordReader now prefers.
func (r *Reader) RecordBatch() arrow.RecordBatch { return r.rec }

// RecordOffset returns the stream offset of the current batch's message.
func (r *Reader) RecordOffset() int64 { return r.recOff }

// Err returns the error that ended the stream, nil if it ended cleanly.
// A truncated stream gives a *FormatError wrapping ErrTruncated.
func (r *Reader) Err() error { return r.err }

// End says how the stream ended, once Next has returned false.
func (r *Reader) End() End { return r.mr.s.end }

// EndOffset returns the stream offset where the stream ended: of the
// end-of-stream marker, the zeros, the end of the input, or the start of
// the message that is incomplete or bad.
func (r *Reader) EndOffset() int64 { return r.mr.s.start }

// Batches returns the number of record batches read so far.
func (r *Reader) Batches() int { return r.batches }

// Rows returns the number of events read so far.
func (r *Reader) Rows() int64 { return r.rows }

// Retain increases the reference count by 1.
func (r *Reader) Retain() { atomic.AddInt64(&r.refCount, 1) }

// Release decreases the reference count by 1; at 0 it frees the current
// record and closes the file opened by [Open].
func (r *Reader) Release() {
	if atomic.AddInt64(&r.refCount, -1) != 0 {
		return
	}
	if r.rec != nil {
		r.rec.Release()
		r.rec = nil
	}
	r.ir.Release()
	if r.file != nil {
		r.file.Close()
		r.file = nil
	}
}

// AppendEvents appends the current batch's events to dst.
func (r *Reader) AppendEvents(dst []Event) []Event {
	if r.rec == nil {
		return dst
	}
	return AppendEvents(dst, r.rec)
}

// AppendEvents appends the events of rec, a record of [Schema], to dst.
func AppendEvents(dst []Event, rec arrow.Record) []Event {
	kind := rec.Column(ColKind).(*array.Uint8).Uint8Values()
	tid := rec.Column(ColTID).(*array.Uint32).Uint32Values()
	tm := rec.Column(ColTime).(*array.Uint64).Uint64Values()
	sm := rec.Column(ColSrcModule).(*array.Uint16).Uint16Values()
	src := rec.Column(ColSrc).(*array.Uint64).Uint64Values()
	dm := rec.Column(ColDstModule).(*array.Uint16).Uint16Values()
	dst_ := rec.Column(ColDst).(*array.Uint64).Uint64Values()
	val := rec.Column(ColValue).(*array.Uint64).Uint64Values()
	for i := range kind {
		dst = append(dst, Event{
			Kind: Kind(kind[i]), TID: tid[i], Time: tm[i],
			SrcModule: sm[i], Src: src[i], DstModule: dm[i], Dst: dst_[i], Value: val[i],
		})
	}
	return dst
}
