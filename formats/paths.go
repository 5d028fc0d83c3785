package formats

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"sync"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"
	flatbuffers "github.com/google/flatbuffers/go"
)

// A paths file holds a compact complete trace: per thread, chunks of
// packets (packets.go) that a decoder turns back into events by walking
// the rewritten binaries. It sits beside its trace file, named
// <trace>.arrow + PathsSuffix, and is an Arrow IPC stream of PathsSchema,
// one chunk per record batch, in no particular order: each thread's
// current chunk sits where the thread started, its full ones were copied
// behind the stream's end. A thread's chunks have consecutive seq
// numbers; decoding a thread reads its chunks in seq order, its state
// (position, call stack, pending outcome bits) running on across them.
// A chunk of tid 0 is space claimed for a copy that never landed
// (Next skips it); a process killed while copying a chunk out can leave
// two copies of it, and the one with more data is the whole one.
const PathsSuffix = ".paths"

// Paths file column indices.
const (
	PathsColTID = iota
	PathsColSeq
	PathsColFirst
	PathsColLast
	PathsColPending
	PathsColTail
	PathsColTailBits
	PathsColData
	PathsNumCols
)

// PathsColName holds each paths column's name.
var PathsColName = [PathsNumCols]string{"tid", "seq", "first_ns", "last_ns", "pending", "tail", "tail_bits", "data"}

// pathsColumns: tid u32, seq u32, first_ns u64, last_ns u64, pending
// u64, tail u64, tail_bits u64, data binary.
var pathsColumns = columns{names: PathsColName[:], widths: []int{4, 4, 8, 8, 8, 8, 8, 4}, binary: true}

// MetaPathsTrace is the paths file's schema metadata key naming its
// trace file (base name), space padded to PathsTraceCap bytes.
const (
	MetaPaths     = "stint.paths"
	MetaPathsFile = "stint.paths.trace"
	PathsVersion  = "1"
	PathsTraceCap = 256
)

// PathsSchema returns the paths file's schema without metadata.
func PathsSchema() *arrow.Schema { return arrow.NewSchema(pathsFields(), nil) }

func pathsFields() []arrow.Field {
	return []arrow.Field{
		{Name: PathsColName[0], Type: arrow.PrimitiveTypes.Uint32},
		{Name: PathsColName[1], Type: arrow.PrimitiveTypes.Uint32},
		{Name: PathsColName[2], Type: arrow.PrimitiveTypes.Uint64},
		{Name: PathsColName[3], Type: arrow.PrimitiveTypes.Uint64},
		{Name: PathsColName[4], Type: arrow.PrimitiveTypes.Uint64},
		{Name: PathsColName[5], Type: arrow.PrimitiveTypes.Uint64},
		{Name: PathsColName[6], Type: arrow.PrimitiveTypes.Uint64},
		{Name: PathsColName[7], Type: arrow.BinaryTypes.Binary},
	}
}

// Chunk is one thread's packets between two buffer switches.
type Chunk struct {
	TID     uint32
	Seq     uint32 // the thread's chunk number, from 0
	FirstNS uint64 // CLOCK_MONOTONIC when the buffer began to fill
	LastNS  uint64 // CLOCK_MONOTONIC when it was handed to the writer
	// Pending: the outcome bits not yet written as a TNT packet (under a
	// leading 1; 0 or 1 = none), kept in the file so that a process that
	// dies loses none. Only a thread's last chunk has any.
	Pending uint64
	// Tail: the address of the last probe that ran since the last packet
	// and appended none (a direct call, an entry or resume probe), 0 if
	// none: how far the thread got after its last packet.
	Tail uint64
	// TailBits: Pending when Tail was set. The tail holds only while the
	// two are equal: outcome bits appended since (by code that does not
	// reset Tail) make it stale.
	TailBits uint64
	Data     []byte // packets; trailing zero bytes are padding
	Offset   int64  // stream offset of the chunk's message
}

// PathsTemplate is the byte template of a paths file for writers
// without an Arrow library (the runtime): Schema (the trace name written
// in place at TraceOff, PathsTraceCap bytes), then per chunk a copy of
// Batch with OffBodyLen and OffDataLen patched (int64 little-endian),
// then the body: tid u32 at 0, seq u32 at 8, first_ns at 16, last_ns at
// 24, pending at 32, tail at 40, tail_bits at 48, the data's int32
// offsets {0, n} at 56, the n data bytes at 64, zero padding to a
// multiple of 8 (body length = 64 + n rounded up).
type PathsTemplate struct {
	Schema                 []byte
	TraceOff               int
	Batch                  []byte
	OffBodyLen, OffDataLen int
}

// Body offsets of a paths batch's buffers.
const (
	PathsBodyTID      = 0
	PathsBodySeq      = 8
	PathsBodyFirst    = 16
	PathsBodyLast     = 24
	PathsBodyPending  = 32
	PathsBodyTail     = 40
	PathsBodyTailBits = 48
	PathsBodyOffs     = 56
	PathsBodyData     = 64
)

var (
	pathsTmplOnce sync.Once
	pathsTmpl     *PathsTemplate
	pathsTmplErr  error
)

// GetPathsTemplate returns the paths file's byte templates (the same on
// every call; callers must not modify them).
func GetPathsTemplate() (*PathsTemplate, error) {
	pathsTmplOnce.Do(func() { pathsTmpl, pathsTmplErr = buildPathsTemplate() })
	return pathsTmpl, pathsTmplErr
}

func buildPathsTemplate() (*PathsTemplate, error) {
	t := &PathsTemplate{}
	traceSent := bytes.Repeat([]byte{'T'}, PathsTraceCap)
	md := arrow.NewMetadata([]string{MetaVersion, MetaPaths, MetaPathsFile}, []string{Version, PathsVersion, string(traceSent)})
	var buf bytes.Buffer
	w := ipc.NewWriter(&buf, ipc.WithSchema(arrow.NewSchema(pathsFields(), &md)))
	if err := w.Close(); err != nil {
		return nil, fmt.Errorf("write paths schema: %w", err)
	}
	s := bytes.TrimSuffix(buf.Bytes(), []byte{0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0})
	if err := checkFrame(s); err != nil {
		return nil, fmt.Errorf("paths schema message: %w", err)
	}
	var err error
	if t.TraceOff, err = findOnce(s, traceSent); err != nil {
		return nil, fmt.Errorf("paths schema trace name: %w", err)
	}
	copy(s[t.TraceOff:], bytes.Repeat([]byte{' '}, PathsTraceCap))
	t.Schema = s

	bodyLen, dataLen := int64(sentinelBase+1), int64(sentinelBase+2)
	type buf2 struct{ off, len int64 }
	bufs := []buf2{{0, 0}, {PathsBodyTID, 4}, {0, 0}, {PathsBodySeq, 4}, {0, 0}, {PathsBodyFirst, 8},
		{0, 0}, {PathsBodyLast, 8}, {0, 0}, {PathsBodyPending, 8}, {0, 0}, {PathsBodyTail, 8},
		{0, 0}, {PathsBodyTailBits, 8}, {0, 0}, {PathsBodyOffs, 8}, {PathsBodyData, dataLen}}
	b := flatbuffers.NewBuilder(512)
	b.StartVector(16, len(bufs), 8)
	for i := len(bufs) - 1; i >= 0; i-- {
		b.Prep(8, 16)
		b.PrependInt64(bufs[i].len)
		b.PrependInt64(bufs[i].off)
	}
	bv := b.EndVector(len(bufs))
	b.StartVector(16, PathsNumCols, 8)
	for c := PathsNumCols - 1; c >= 0; c-- {
		b.Prep(8, 16)
		b.PrependInt64(0)
		b.PrependInt64(1)
	}
	nodes := b.EndVector(PathsNumCols)
	b.StartObject(5) // RecordBatch
	b.PrependInt64Slot(0, 1, 0)
	b.PrependUOffsetTSlot(1, nodes, 0)
	b.PrependUOffsetTSlot(2, bv, 0)
	rb := b.EndObject()
	b.StartObject(5) // Message
	b.PrependInt64Slot(3, bodyLen, 0)
	b.PrependUOffsetTSlot(2, rb, 0)
	b.PrependInt16Slot(0, int16(metadataV5), 0)
	b.PrependByteSlot(1, byte(headerRecordBatch), 0)
	b.Finish(b.EndObject())
	m := frame(b.FinishedBytes())
	for _, f := range []struct {
		v   int64
		dst *int
	}{{bodyLen, &t.OffBodyLen}, {dataLen, &t.OffDataLen}} {
		var le [8]byte
		binary.LittleEndian.PutUint64(le[:], uint64(f.v))
		off, err := findOnce(m, le[:])
		if err != nil || off%8 != 0 {
			return nil, fmt.Errorf("paths batch field at %d: %v", off, err)
		}
		clear(m[off : off+8])
		*f.dst = off
	}
	t.Batch = m
	return t, nil
}

// PathsWriter writes a paths file as the runtime does, from the byte
// templates: for tests and hand-made traces.
type PathsWriter struct {
	w       io.Writer
	t       *PathsTemplate
	started bool
	schema  []byte
}

// NewPathsWriter returns a writer of a paths file whose trace file is
// named trace (its base name; at most PathsTraceCap bytes).
func NewPathsWriter(w io.Writer, trace string) (*PathsWriter, error) {
	t, err := GetPathsTemplate()
	if err != nil {
		return nil, err
	}
	if len(trace) > PathsTraceCap {
		return nil, fmt.Errorf("trace name of %d bytes, capacity %d", len(trace), PathsTraceCap)
	}
	s := append([]byte(nil), t.Schema...)
	copy(s[t.TraceOff:], trace)
	return &PathsWriter{w: w, t: t, schema: s}, nil
}

// Write writes one chunk.
func (p *PathsWriter) Write(c Chunk) error {
	if !p.started {
		if _, err := p.w.Write(p.schema); err != nil {
			return err
		}
		p.started = true
	}
	n := int64(len(c.Data))
	body := make([]byte, PathsBodyData+(n+7)&^7)
	binary.LittleEndian.PutUint32(body[PathsBodyTID:], c.TID)
	binary.LittleEndian.PutUint32(body[PathsBodySeq:], c.Seq)
	binary.LittleEndian.PutUint64(body[PathsBodyFirst:], c.FirstNS)
	binary.LittleEndian.PutUint64(body[PathsBodyLast:], c.LastNS)
	binary.LittleEndian.PutUint64(body[PathsBodyPending:], c.Pending)
	binary.LittleEndian.PutUint64(body[PathsBodyTail:], c.Tail)
	binary.LittleEndian.PutUint64(body[PathsBodyTailBits:], c.TailBits)
	binary.LittleEndian.PutUint32(body[PathsBodyOffs+4:], uint32(n))
	copy(body[PathsBodyData:], c.Data)
	m := append([]byte(nil), p.t.Batch...)
	binary.LittleEndian.PutUint64(m[p.t.OffBodyLen:], uint64(len(body)))
	binary.LittleEndian.PutUint64(m[p.t.OffDataLen:], uint64(n))
	if _, err := p.w.Write(m); err != nil {
		return err
	}
	_, err := p.w.Write(body)
	return err
}

// Close writes the end-of-stream marker (and the schema if no chunk was
// written).
func (p *PathsWriter) Close() error {
	if !p.started {
		if _, err := p.w.Write(p.schema); err != nil {
			return err
		}
		p.started = true
	}
	_, err := p.w.Write([]byte{0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0})
	return err
}

// PathsReader reads a paths file's chunks, validating each message before
// it decodes it (as [BatchReader] does for traces).
type PathsReader struct {
	s     *stream
	Trace string // the trace file's base name, from the schema metadata
	buf   []byte
	body  sliceBuffer
	chunk Chunk
	nread int
	err   error
}

// NewPathsReader reads and validates the schema message of r.
func NewPathsReader(r io.Reader) (*PathsReader, error) {
	mr := newMsgReader(newStream(r, pathsColumns, maxMeta), memory.DefaultAllocator)
	ir, err := ipc.NewReaderFromMessageReader(mr, ipc.WithAllocator(memory.DefaultAllocator))
	if err != nil {
		mr.Release()
		if mr.s.err != nil {
			return nil, mr.s.err
		}
		return nil, &FormatError{Offset: 0, Msg: "bad paths schema", Err: err}
	}
	defer ir.Release()
	sch := ir.Schema()
	want := PathsSchema()
	if !sch.Equal(want) {
		return nil, &FormatError{Offset: 0, Msg: fmt.Sprintf("not a paths file: schema %v", sch.Fields())}
	}
	md := sch.Metadata()
	if v, ok := md.GetValue(MetaPaths); !ok || v != PathsVersion {
		return nil, &FormatError{Offset: 0, Msg: fmt.Sprintf("not a paths file of version %s (metadata %q = %q)", PathsVersion, MetaPaths, v)}
	}
	tr, _ := md.GetValue(MetaPathsFile)
	return &PathsReader{s: mr.s, Trace: string(bytes.TrimRight([]byte(tr), " "))}, nil
}

// Next reads the next chunk; false at the end or on an error (Err).
func (p *PathsReader) Next() bool {
	if p.err != nil {
		return false
	}
	for {
		_, mi, ok := p.s.next(&p.buf, &p.body)
		if !ok {
			p.err = p.s.err
			return false
		}
		p.nread++
		if mi.rows != 1 || binary.LittleEndian.Uint32(p.body.b[mi.values[PathsColTID]:]) != 0 {
			return p.take(mi)
		}
		// tid 0: space a thread claimed for a copy of its chunk that
		// never landed (the runtime's pathsfile.c)
	}
}

// take makes the batch just read (mi) the current chunk.
func (p *PathsReader) take(mi msgInfo) bool {
	if mi.rows != 1 {
		p.err = &FormatError{Offset: p.s.start, Msg: fmt.Sprintf("chunk %d: a batch of %d rows, want 1", p.nread-1, mi.rows)}
		return false
	}
	b := p.body.b
	le := binary.LittleEndian
	offs := b[mi.values[PathsColData]:]
	lo, hi := int64(int32(le.Uint32(offs))), int64(int32(le.Uint32(offs[4:])))
	if lo < 0 || hi < lo || hi > mi.dataLen {
		p.err = &FormatError{Offset: p.s.start, Msg: fmt.Sprintf("chunk %d: data offsets %d..%d outside its %d bytes", p.nread-1, lo, hi, mi.dataLen)}
		return false
	}
	p.chunk = Chunk{
		TID:      le.Uint32(b[mi.values[PathsColTID]:]),
		Seq:      le.Uint32(b[mi.values[PathsColSeq]:]),
		FirstNS:  le.Uint64(b[mi.values[PathsColFirst]:]),
		LastNS:   le.Uint64(b[mi.values[PathsColLast]:]),
		Pending:  le.Uint64(b[mi.values[PathsColPending]:]),
		Tail:     le.Uint64(b[mi.values[PathsColTail]:]),
		TailBits: le.Uint64(b[mi.values[PathsColTailBits]:]),
		Data:     b[mi.dataOff+lo : mi.dataOff+hi],
		Offset:   p.s.start,
	}
	return true
}

// Chunk returns the current chunk; its Data is valid until the next call
// to Next.
func (p *PathsReader) Chunk() Chunk { return p.chunk }

// Err returns what ended the stream (nil at a clean end or a stream cut
// between chunks; a cut inside a chunk wraps ErrTruncated).
func (p *PathsReader) Err() error { return p.err }

// End says how the stream ended.
func (p *PathsReader) End() End { return p.s.end }
