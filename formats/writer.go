package formats

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// Event is one row of a trace.
type Event struct {
	Kind      Kind
	TID       uint32 // kernel thread id
	Time      uint64 // CLOCK_MONOTONIC, ns
	SrcModule uint16 // module id of Src
	Src       uint64 // module-relative (link vaddr) address of the instruction
	DstModule uint16 // module id of Dst, or NoModule: Dst is then absolute
	Dst       uint64 // module-relative destination; 0 for syscalls
	Value     uint64 // syscall number for KindSyscall, else 0
}

// DefaultBatchRows is the number of rows per record batch a [Writer]
// writes unless told otherwise with [WithBatchRows].
const DefaultBatchRows = 64 << 10

// Writer writes a trace stream exactly as the runtime does, from the
// byte templates of [Template]: the schema with the metadata values filled
// in, then one record batch per [Writer.Flush] (or per full batch), then
// at [Writer.Close] the end-of-stream marker. It is meant for tests,
// merges and hand-made traces.
type Writer struct {
	w       io.Writer
	t       *IPCTemplate
	rows    int
	pending []Event
	started bool
	schema  []byte
	err     error
	closed  bool
}

// NewWriter returns a writer of a trace with the given run and module
// table to w. It returns an error if the metadata does not fit its fixed
// capacity (RunCap, ModulesCap bytes of JSON) or a module id is NoModule
// or repeated. Nothing is written before the first Write, Flush or Close.
func NewWriter(w io.Writer, run Run, modules []Module, opts ...Option) (*Writer, error) {
	cfg := newConfig(opts)
	t, err := Template()
	if err != nil {
		return nil, err
	}
	rv, err := encodeRun(run)
	if err != nil {
		return nil, err
	}
	mv, err := encodeModules(modules)
	if err != nil {
		return nil, err
	}
	s := append([]byte(nil), t.Schema...)
	copy(s[t.RunOff:], rv)
	copy(s[t.ModulesOff:], mv)
	return &Writer{w: w, t: t, rows: cfg.batchRows, schema: s}, nil
}

// Write adds events to the trace; every BatchRows events make a record
// batch.
func (w *Writer) Write(events ...Event) error {
	if w.closed {
		return errors.New("formats: write to closed writer")
	}
	for len(events) > 0 && w.err == nil {
		n := min(len(events), w.rows-len(w.pending))
		w.pending = append(w.pending, events[:n]...)
		events = events[n:]
		if len(w.pending) == w.rows {
			w.flush()
		}
	}
	return w.err
}

// Flush writes the pending events as one record batch (none if there are
// none, but the schema is written if it was not yet).
func (w *Writer) Flush() error {
	if w.closed {
		return errors.New("formats: flush of closed writer")
	}
	w.flush()
	return w.err
}

// Close flushes and writes the end-of-stream marker. It does not close
// the underlying writer.
func (w *Writer) Close() error {
	if w.closed {
		return w.err
	}
	w.flush()
	if w.err == nil {
		_, w.err = w.w.Write([]byte{0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0})
	}
	w.closed = true
	return w.err
}

func (w *Writer) flush() {
	if w.err != nil {
		return
	}
	if !w.started {
		w.started = true
		if _, w.err = w.w.Write(w.schema); w.err != nil {
			return
		}
	}
	if len(w.pending) == 0 {
		return
	}
	msg, body := encodeBatch(w.t, w.pending)
	w.pending = w.pending[:0]
	if _, w.err = w.w.Write(msg); w.err != nil {
		return
	}
	_, w.err = w.w.Write(body)
}

// encodeBatch returns the record batch message and body for events,
// patched into a copy of the template the way the runtime does it: the
// value buffers one after another, each padded to 8 bytes.
func encodeBatch(t *IPCTemplate, events []Event) (msg, body []byte) {
	n := len(events)
	var off [NumCols]int
	size := 0
	for c := 0; c < NumCols; c++ {
		off[c] = size
		size += (n*ColWidth[c] + 7) &^ 7
	}
	body = make([]byte, size)
	le := binary.LittleEndian
	for i, e := range events {
		body[off[ColKind]+i] = byte(e.Kind)
		le.PutUint32(body[off[ColTID]+4*i:], e.TID)
		le.PutUint64(body[off[ColTime]+8*i:], e.Time)
		le.PutUint16(body[off[ColSrcModule]+2*i:], e.SrcModule)
		le.PutUint64(body[off[ColSrc]+8*i:], e.Src)
		le.PutUint16(body[off[ColDstModule]+2*i:], e.DstModule)
		le.PutUint64(body[off[ColDst]+8*i:], e.Dst)
		le.PutUint64(body[off[ColValue]+8*i:], e.Value)
	}
	msg = append([]byte(nil), t.Batch...)
	le.PutUint64(msg[t.OffRows:], uint64(n))
	le.PutUint64(msg[t.OffBodyLen:], uint64(size))
	for c := 0; c < NumCols; c++ {
		le.PutUint64(msg[t.OffNodeLen[c]:], uint64(n))
		le.PutUint64(msg[t.OffBufOff[2*c+1]:], uint64(off[c]))
		le.PutUint64(msg[t.OffBufLen[2*c+1]:], uint64(n*ColWidth[c]))
	}
	return msg, body
}

// String returns a one-line description of e for people.
func (e Event) String() string {
	return fmt.Sprintf("%s tid=%d time=%d src=%d:%#x dst=%d:%#x value=%d",
		e.Kind, e.TID, e.Time, e.SrcModule, e.Src, e.DstModule, e.Dst, e.Value)
}
