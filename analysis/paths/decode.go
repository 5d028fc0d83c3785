// Package paths decodes compact complete traces: a trace file's paths
// file (formats/paths.go, formats/packets.go) back into the events a
// row-per-event trace holds, by walking each module's branch map (the
// section the rewriter leaves in the rewritten file) between packets,
// with the runtime's own rules (runtime/src/paths.c).
package paths

import (
	"errors"
	"fmt"
	"os"
	"sort"

	"github.com/stint-project/stint/formats"
)

// Options adjust decoding.
type Options struct {
	// Binaries maps a module path in the trace's module table to the file
	// to read its branch map from (the rewritten file moved since).
	Binaries map[string]string
	// Maps gives branch maps by module path, instead of reading them from
	// the files (tests, and tools that keep them elsewhere).
	Maps map[string]*formats.PathMap
}

// Decoder decodes one process's compact trace.
type Decoder struct {
	Trace   string // the trace file
	Run     formats.Run
	Modules []formats.Module
	Notes   []string // modules whose branch map could not be read
	mods    *modules
	threads []*chunks // in the order of their first chunk
	only    uint64    // a mask of the kinds the tool records (1 << kind); 0 = all
	calls   bool      // a call chain (calls.go): no walk

	lost, unprobed, inferred, resynced, skipped int
}

// chunks are one thread's chunks, in seq order.
type chunks struct {
	tid  uint32
	list []formats.Chunk
}

// Stats say what decoding met that the trace does not show as events.
type Stats struct {
	Threads, Chunks int
	Bytes           int64
	Lost            int // LOST packets: a --lossy drop, or a signal handler inside an append
	Unprobed        int // branches without a probe the walk reached (the path resumes at the next SYNC or PSB)
	Inferred        int // rets without a probe, taken to go where the call stack says
	Resynced        int // PSBs where a walk lost at such a branch found its place again
	Skipped         int // packets skipped while a thread's place was unknown
	Torn            int // chunks that end in an append a kill cut short (formats.PacketReader.Torn)
}

// HasPaths reports whether trace has a paths file beside it.
func HasPaths(trace string) bool {
	_, err := os.Stat(trace + formats.PathsSuffix)
	return err == nil
}

// ReadFile reads trace whole, as formats.ReadFile does, and appends the
// events of its compact complete trace, if it has one, to its rows.
func ReadFile(trace string) (*formats.Trace, Stats, error) {
	tr, err := formats.ReadFile(trace)
	if err != nil || !HasPaths(trace) {
		return tr, Stats{}, err
	}
	d, err := Open(trace, Options{})
	if err != nil {
		return nil, Stats{}, fmt.Errorf("compact trace: %w", err)
	}
	st, err := d.Events(func(e formats.Event) error {
		tr.Events = append(tr.Events, e)
		return nil
	})
	if err != nil {
		return nil, st, fmt.Errorf("compact trace %s%s: %w", trace, formats.PathsSuffix, err)
	}
	return tr, st, nil
}

// Open reads trace's metadata and its paths file, and loads the branch
// maps of the rewritten modules.
func Open(trace string, opts Options) (*Decoder, error) {
	r, err := formats.Open(trace)
	if err != nil {
		return nil, err
	}
	d := &Decoder{Trace: trace, Run: r.Run(), Modules: r.Modules()}
	r.Release()
	d.calls = d.Run.Flag("calls")
	if d.Run.Tool == "call" {
		// a call chain keeps the calls and returns (the sites tool call
		// probes), also where it was recorded as the branch path
		d.only = 1<<formats.KindCall | 1<<formats.KindIndCall | 1<<formats.KindRet
	}
	d.mods, d.Notes = loadModules(d.Modules, opts)
	if err := d.readChunks(trace + formats.PathsSuffix); err != nil {
		return nil, err
	}
	return d, nil
}

func (d *Decoder) readChunks(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	pr, err := formats.NewPathsReader(f)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	byTID := map[uint32]*chunks{}
	for pr.Next() {
		c := pr.Chunk()
		c.Data = append([]byte(nil), c.Data...)
		t := byTID[c.TID]
		if t == nil {
			t = &chunks{tid: c.TID}
			byTID[c.TID] = t
			d.threads = append(d.threads, t)
		}
		t.list = append(t.list, c)
	}
	if err := pr.Err(); err != nil && !errors.Is(err, formats.ErrTruncated) {
		return fmt.Errorf("%s: %w", path, err)
	}
	for _, t := range d.threads {
		sort.SliceStable(t.list, func(i, j int) bool { return t.list[i].Seq < t.list[j].Seq })
		t.list = dedupChunks(t.list)
		for i, c := range t.list {
			if c.Seq != uint32(i) {
				return fmt.Errorf("%s: thread %d: chunk %d where chunk %d should be (chunks missing)", path, t.tid, c.Seq, i)
			}
		}
	}
	return nil
}

// dedupChunks keeps one copy of each chunk number in list (sorted by
// number, stable): a process killed while a thread copied its chunk out
// can leave two, and the one with more data is whole (the copy's header
// lands after its data; the thread's own empties before it clears).
// Equal, the later one.
func dedupChunks(list []formats.Chunk) []formats.Chunk {
	out := list[:0]
	for _, c := range list {
		if n := len(out); n > 0 && out[n-1].Seq == c.Seq {
			if len(c.Data) >= len(out[n-1].Data) {
				out[n-1] = c
			}
			continue
		}
		out = append(out, c)
	}
	return out
}

// Events decodes every thread and calls fn with each event: a thread's
// events in order, threads one after the other in the order they
// started. An event's time is interpolated within its chunk's span.
func (d *Decoder) Events(fn func(formats.Event) error) (Stats, error) {
	s := d.Stream()
	for {
		evs := s.Next(4096)
		if evs == nil {
			return s.Stats(), s.Err()
		}
		for _, e := range evs {
			if err := fn(e); err != nil {
				return s.Stats(), err
			}
		}
	}
}

// Stream decodes events a batch at a time (Next).
type Stream struct {
	d    *Decoder
	ti   int // the thread being decoded
	ci   int // its next chunk
	t    *thread
	c    formats.Chunk
	buf  []formats.Event
	st   Stats
	err  error
	done bool
}

// Stream returns a stream of the decoder's events, in Events' order.
func (d *Decoder) Stream() *Stream { return &Stream{d: d} }

// Next returns up to max more events (valid until the next call); nil
// at the end or on an error (Err).
func (s *Stream) Next(max int) []formats.Event {
	if cap(s.buf) < max {
		s.buf = make([]formats.Event, 0, max)
	}
	s.buf = s.buf[:0]
	for !s.done && len(s.buf) < max {
		if s.t == nil {
			if s.ti >= len(s.d.threads) {
				s.done = true
				break
			}
			s.startThread()
		}
		err := s.t.run(max - len(s.buf))
		switch {
		case err == nil: // the batch is full
		case errors.Is(err, errStarved):
			if !s.nextChunk() {
				if err := s.t.finish(&s.c); err != nil {
					s.err, s.done = err, true
				}
				s.t = nil
				s.ti++
			}
		default:
			s.err, s.done = err, true
		}
	}
	if len(s.buf) == 0 {
		return nil
	}
	return s.buf
}

func (s *Stream) startThread() {
	tc := s.d.threads[s.ti]
	t := &thread{d: s.d, tid: tc.tid, s: s, lastPos: -1}
	s.t, s.ci = t, 0
	s.st.Threads++
	s.nextChunk()
}

// nextChunk feeds the thread its next chunk; false when it has no more.
func (s *Stream) nextChunk() bool {
	tc := s.d.threads[s.ti]
	if s.ci > 0 && s.t.pr.Torn() {
		s.st.Torn++
	}
	if s.ci >= len(tc.list) {
		return false
	}
	s.c = tc.list[s.ci]
	s.ci++
	s.t.chunk = int(s.c.Seq)
	s.t.lastPos = -1 // a place in another chunk: another time
	s.t.pr.Reset(s.c.Data)
	s.st.Chunks++
	s.st.Bytes += int64(len(s.c.Data))
	return true
}

// Stats says what the stream met so far.
func (s *Stream) Stats() Stats {
	st := s.st
	st.Lost, st.Unprobed, st.Inferred = s.d.lost, s.d.unprobed, s.d.inferred
	st.Resynced, st.Skipped = s.d.resynced, s.d.skipped
	return st
}

// Err returns the error that ended the stream.
func (s *Stream) Err() error { return s.err }

func (d *Decoder) timeAt(c *formats.Chunk, pos int) uint64 {
	if len(c.Data) == 0 || c.LastNS <= c.FirstNS {
		return c.FirstNS
	}
	return c.FirstNS + (c.LastNS-c.FirstNS)*uint64(pos)/uint64(len(c.Data))
}

// fill makes e the row of a transfer from src to dst (run-time addresses).
// (src and dst are most often in module cur, the branch's.)
func (d *Decoder) fill(e *formats.Event, cur *module, k formats.Kind, tid uint32, time, src, dst uint64) {
	sm, dm := uint16(formats.NoModule), uint16(formats.NoModule)
	m := cur
	if m == nil || src-m.Base >= m.Size {
		m = d.mods.at(src)
	}
	if m != nil {
		sm, src = m.ID, src-m.Base
	}
	if m == nil || dst-m.Base >= m.Size {
		m = d.mods.at(dst)
	}
	if m != nil {
		dm, dst = m.ID, dst-m.Base
	}
	// field by field: a composite literal is built on the stack with
	// narrow stores and copied with 16-byte loads, which wait for store
	// forwarding that cannot happen (half the decoder's time on gzip)
	e.Kind, e.TID, e.Time = k, tid, time
	e.SrcModule, e.Src, e.DstModule, e.Dst, e.Value = sm, src, dm, dst, 0
}
