package formats

import (
	"io"
	"os"
)

// Trace is a whole trace in memory.
type Trace struct {
	Run     Run
	Modules []Module
	Events  []Event
	Batches int   // record batches read
	End     End   // how the stream ended
	EndAt   int64 // stream offset where it ended (see [Reader.EndOffset])
}

// Module returns the module with the given id, or nil if there is none.
func (t *Trace) Module(id uint16) *Module {
	for i := range t.Modules {
		if t.Modules[i].ID == id {
			return &t.Modules[i]
		}
	}
	return nil
}

// ReadFile reads the named trace file whole. If the file is cut or
// malformed after its schema, it returns the events of every complete
// batch together with the error (a *FormatError; errors.Is(err,
// ErrTruncated) for a cut file); if it cannot read the schema, a nil
// Trace.
func ReadFile(name string, opts ...Option) (*Trace, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return Read(f, opts...)
}

// Read reads a trace stream whole, like [ReadFile].
func Read(r io.Reader, opts ...Option) (*Trace, error) {
	rd, err := NewReader(r, opts...)
	if err != nil {
		return nil, err
	}
	defer rd.Release()
	t := &Trace{Run: rd.Run(), Modules: rd.Modules()}
	for rd.Next() {
		t.Events = rd.AppendEvents(t.Events)
	}
	t.Batches, t.End, t.EndAt = rd.Batches(), rd.End(), rd.EndOffset()
	return t, rd.Err()
}
