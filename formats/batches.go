package formats

import (
	"io"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

// Column is a column that a stream adds after a trace's ([Schema]), as a
// merged trace adds the run: its name and value width in bytes.
type Column struct {
	Name  string
	Width int
}

// BatchReader reads a stint stream's record batches without decoding
// them into Arrow arrays: each batch's message is validated as [Reader]
// validates it, its body is read into one reused buffer, and [Values]
// returns a column's values as a slice of that buffer. Reading allocates
// nothing per batch and copies each byte once. The stream has a trace's
// columns and, after them, extra ones (a merged trace's run).
type BatchReader struct {
	s      *stream
	schema *arrow.Schema
	meta   []byte // the schema message's flatbuffer
	buf    []byte // reused metadata buffer
	body   sliceBuffer
	mi     msgInfo
	end    bool
}

// NewBatchReader reads and validates the schema message of r, a stream
// with a trace's columns and then extra ones, and returns a reader of the
// batches that follow. maxMetadata bounds a message's metadata (0: a
// trace's bound; a merged trace's schema carries its run list).
func NewBatchReader(r io.Reader, extra []Column, maxMetadata int64) (*BatchReader, error) {
	cols := traceColumns
	if len(extra) > 0 {
		cols = columns{names: append([]string{}, ColName[:]...), widths: append([]int{}, ColWidth[:]...)}
		for _, c := range extra {
			cols.names = append(cols.names, c.Name)
			cols.widths = append(cols.widths, c.Width)
		}
	}
	if maxMetadata <= 0 {
		maxMetadata = maxMeta
	}
	mr := newMsgReader(newStream(r, cols, maxMetadata), memory.DefaultAllocator)
	ir, err := ipc.NewReaderFromMessageReader(mr, ipc.WithAllocator(memory.DefaultAllocator))
	if err != nil {
		mr.Release()
		if mr.s.err != nil {
			return nil, mr.s.err
		}
		return nil, &FormatError{Offset: 0, Msg: "bad schema", Err: err}
	}
	b := &BatchReader{s: mr.s, schema: ir.Schema(), meta: mr.schemaMeta}
	ir.Release()
	return b, nil
}

// Schema returns the stream's schema, with its metadata.
func (b *BatchReader) Schema() *arrow.Schema { return b.schema }

// TraceMeta checks that the stream is a trace and returns its run
// metadata and module table.
func (b *BatchReader) TraceMeta() (Run, []Module, error) { return traceMeta(b.schema, b.meta) }

// Next advances to the next record batch; false at the end of the stream
// or on an error (see Err and End).
func (b *BatchReader) Next() bool {
	if b.end {
		return false
	}
	_, mi, ok := b.s.next(&b.buf, &b.body)
	if !ok {
		b.end = true
		return false
	}
	b.mi = mi
	return true
}

// Rows returns the current batch's number of rows.
func (b *BatchReader) Rows() int { return int(b.mi.rows) }

// Values returns column c's values in the current batch, little-endian,
// valid until the next call to Next.
func (b *BatchReader) Values(c int) []byte {
	off := b.mi.values[c]
	return b.body.b[off : off+b.mi.rows*int64(b.s.cols.widths[c])]
}

// Offset returns the stream offset of the current batch's message, or,
// after the end, where the stream ended.
func (b *BatchReader) Offset() int64 { return b.s.start }

// Err returns the error that ended the stream, nil if it ended cleanly.
// A stream cut inside a batch gives a *FormatError wrapping ErrTruncated,
// after every complete batch.
func (b *BatchReader) Err() error { return b.s.err }

// End says how the stream ended, once Next has returned false.
func (b *BatchReader) End() End { return b.s.end }
