package formats

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"sync/atomic"

	"github.com/apache/arrow/go/v15/arrow"
	"github.com/apache/arrow/go/v15/arrow/array"
	"github.com/apache/arrow/go/v15/arrow/ipc"
	"github.com/apache/arrow/go/v15/arrow/memory"
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

// maxMeta bounds a message's metadata: the schema message is about 70 KiB.
const maxMeta = 1 << 20

// msgReader is an ipc.MessageReader that, unlike arrow-go's, knows where
// each message starts, tells a cut stream from a finished one, treats
// zeros as the end of the stream, bounds every allocation by the input's
// size, and validates each message before arrow-go sees it (so arrow-go's
// decoder never meets a hostile record batch).
type msgReader struct {
	r         io.Reader
	remaining int64 // bytes left in the input, or -1 if unknown
	off       int64 // stream offset of the next byte
	mem       memory.Allocator
	refCount  int64
	msg       *ipc.Message
	nmsg      int

	start      int64 // offset of the last message begun
	end        End
	err        error // sticky; never wraps io.EOF
	schemaMeta []byte
}

func newMsgReader(r io.Reader, mem memory.Allocator) *msgReader {
	m := &msgReader{r: r, remaining: -1, mem: mem, refCount: 1}
	switch s := r.(type) {
	case *os.File:
		if fi, err := s.Stat(); err == nil && fi.Mode().IsRegular() {
			if pos, err := s.Seek(0, io.SeekCurrent); err == nil {
				m.remaining = fi.Size() - pos
			}
		}
	case interface{ Len() int }: // bytes.Reader, bytes.Buffer, strings.Reader
		m.remaining = int64(s.Len())
	}
	return m
}

func (m *msgReader) Retain() { atomic.AddInt64(&m.refCount, 1) }

func (m *msgReader) Release() {
	if atomic.AddInt64(&m.refCount, -1) == 0 && m.msg != nil {
		m.msg.Release()
		m.msg = nil
	}
}

func (m *msgReader) fail(off int64, err error, format string, args ...any) error {
	end := EndError
	if errors.Is(err, ErrTruncated) {
		end = EndCut
	}
	m.end = end
	m.err = &FormatError{Offset: off, Msg: fmt.Sprintf(format, args...), Err: err}
	return m.err
}

// read fills p; it returns false after recording the error.
func (m *msgReader) read(p []byte, what string) bool {
	n, err := io.ReadFull(m.r, p)
	m.off += int64(n)
	if m.remaining >= 0 {
		m.remaining -= int64(n)
	}
	switch {
	case err == nil:
		return true
	case errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF):
		m.fail(m.start, ErrTruncated, "input ends inside the %s of the message at offset %d", what, m.start)
	default:
		m.end = EndError
		m.err = fmt.Errorf("offset %d: read: %w", m.off, err)
	}
	return false
}

func (m *msgReader) Message() (_ *ipc.Message, err error) {
	if m.msg != nil {
		m.msg.Release()
		m.msg = nil
	}
	if m.err != nil {
		return nil, m.err
	}
	if m.end != EndNone {
		return nil, io.EOF
	}
	m.start = m.off
	var pre [8]byte
	n, rerr := io.ReadFull(m.r, pre[:4])
	if n == 0 && rerr == io.EOF {
		if m.nmsg == 0 {
			return nil, m.fail(0, nil, "empty input: not an Arrow IPC stream")
		}
		m.end = EndEOF
		return nil, io.EOF
	}
	m.off += int64(n)
	if m.remaining >= 0 {
		m.remaining -= int64(n)
	}
	if rerr != nil {
		if errors.Is(rerr, io.ErrUnexpectedEOF) && m.nmsg > 0 && bytes.Count(pre[:n], []byte{0}) == n {
			m.end = EndZeros // a zero tail shorter than a word
			return nil, io.EOF
		}
		if errors.Is(rerr, io.ErrUnexpectedEOF) {
			return nil, m.fail(m.start, ErrTruncated, "input ends inside a message prefix (%d of 8 bytes)", n)
		}
		m.end = EndError
		m.err = fmt.Errorf("offset %d: read: %w", m.off, rerr)
		return nil, m.err
	}
	switch w := binary.LittleEndian.Uint32(pre[:4]); {
	case w == 0 && m.nmsg > 0:
		m.end = EndZeros
		return nil, io.EOF
	case w != 0xffffffff:
		if m.nmsg == 0 {
			return nil, m.fail(0, nil, "not an Arrow IPC stream: starts with % x, want ff ff ff ff", pre[:4])
		}
		return nil, m.fail(m.start, nil, "bad message prefix % x after message %d: want ff ff ff ff (or zeros)", pre[:4], m.nmsg)
	}
	if !m.read(pre[4:8], "prefix") {
		return nil, m.err
	}
	metaLen := int64(int32(binary.LittleEndian.Uint32(pre[4:8])))
	switch {
	case metaLen == 0 && m.nmsg == 0:
		return nil, m.fail(0, nil, "stream ends before its schema")
	case metaLen == 0:
		m.end = EndMarker
		return nil, io.EOF
	case metaLen < 0 || metaLen > maxMeta:
		return nil, m.fail(m.start, nil, "message metadata length %d out of range", metaLen)
	case m.remaining >= 0 && metaLen > m.remaining:
		return nil, m.fail(m.start, ErrTruncated, "input ends inside the metadata of the message at offset %d (%d bytes short)", m.start, metaLen-m.remaining)
	}
	meta := make([]byte, metaLen)
	if !m.read(meta, "metadata") {
		return nil, m.err
	}
	mi, perr := parseMessage(meta)
	if perr != nil {
		if m.nmsg == 0 {
			return nil, m.fail(0, perr, "not a stint trace")
		}
		return nil, m.fail(m.start, perr, "bad message %d", m.nmsg)
	}
	switch {
	case m.nmsg == 0 && mi.header != headerSchema:
		return nil, m.fail(0, nil, "not a stint trace: first message is a %s, want a Schema", headerName(mi.header))
	case m.nmsg > 0 && mi.header != headerRecordBatch:
		return nil, m.fail(m.start, nil, "unexpected %s message", headerName(mi.header))
	case m.remaining >= 0 && mi.bodyLen > m.remaining:
		return nil, m.fail(m.start, ErrTruncated, "input ends inside the body of the message at offset %d (%d of %d bytes)", m.start, m.remaining, mi.bodyLen)
	}
	if m.nmsg == 0 {
		m.schemaMeta = meta
	}
	body := memory.NewResizableBuffer(m.mem)
	defer body.Release()
	if !m.readBody(body, mi.bodyLen) {
		return nil, m.err
	}
	mb := memory.NewBufferBytes(meta)
	m.msg = ipc.NewMessage(mb, body)
	m.nmsg++
	return m.msg, nil
}

// readBody reads n bytes into buf. When the input's size is unknown it
// grows buf as data arrives, so that a hostile length cannot make it
// allocate more than twice what the input holds.
func (m *msgReader) readBody(buf *memory.Buffer, n int64) bool {
	if m.remaining >= 0 {
		buf.Resize(int(n))
		return m.read(buf.Bytes(), "body")
	}
	const chunk = 1 << 20
	for have := int64(0); have < n; {
		step := min(n-have, max(chunk, have))
		buf.Resize(int(have + step))
		if !m.read(buf.Bytes()[have:], "body") {
			return false
		}
		have += step
	}
	return true
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
	mr := newMsgReader(r, cfg.mem)
	ir, err := ipc.NewReaderFromMessageReader(mr, ipc.WithAllocator(cfg.mem))
	if err != nil {
		mr.Release()
		if mr.err != nil {
			return nil, mr.err
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
	s := r.ir.Schema()
	if err := checkFields(s); err != nil {
		return &FormatError{Offset: 0, Msg: "not a stint trace", Err: err}
	}
	md := s.Metadata()
	get := func(key string) (string, int64, error) {
		i := md.FindKey(key)
		if i < 0 {
			return "", 0, &FormatError{Offset: 0, Msg: fmt.Sprintf("not a stint trace: schema metadata has no %q", key)}
		}
		v := md.Values()[i]
		off := int64(0)
		if j := bytes.Index(r.mr.schemaMeta, []byte(v)); j >= 0 {
			off = int64(8 + j)
		}
		return v, off, nil
	}
	v, _, err := get(MetaVersion)
	if err != nil {
		return err
	}
	if v != Version {
		return &FormatError{Offset: 0, Msg: fmt.Sprintf("unsupported %s %q (this reader knows %q)", MetaVersion, v, Version)}
	}
	v, off, err := get(MetaRun)
	if err != nil {
		return err
	}
	if r.run, err = decodeRun(v); err != nil {
		return &FormatError{Offset: off, Msg: "bad run metadata", Err: err}
	}
	v, off, err = get(MetaModules)
	if err != nil {
		return err
	}
	var pos int
	if r.modules, pos, err = decodeModules(v); err != nil {
		return &FormatError{Offset: off + int64(pos), Msg: "bad module table", Err: err}
	}
	return nil
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
		case r.mr.err != nil:
			r.err = r.mr.err
		case r.ir.Err() != nil:
			r.err = &FormatError{Offset: r.mr.start, Msg: "bad record batch", Err: r.ir.Err()}
			r.mr.end = EndError
		}
		return false
	}
	r.rec = r.ir.Record()
	r.rec.Retain()
	r.recOff = r.mr.start
	r.batches++
	r.rows += r.rec.NumRows()
	return true
}

// Record returns the current record batch; it is valid until the next
// call to Next (Retain it to keep it).
func (r *Reader) Record() arrow.Record { return r.rec }

// RecordOffset returns the stream offset of the current batch's message.
func (r *Reader) RecordOffset() int64 { return r.recOff }

// Err returns the error that ended the stream, nil if it ended cleanly.
// A truncated stream gives a *FormatError wrapping ErrTruncated.
func (r *Reader) Err() error { return r.err }

// End says how the stream ended, once Next has returned false.
func (r *Reader) End() End { return r.mr.end }

// EndOffset returns the stream offset where the stream ended: of the
// end-of-stream marker, the zeros, the end of the input, or the start of
// the message that is incomplete or bad.
func (r *Reader) EndOffset() int64 { return r.mr.start }

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
