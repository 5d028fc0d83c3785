package merge

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"unsafe"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/stint-project/stint/formats"
)

// Option configures [Merge].
type Option func(*config)

type config struct {
	progress func(done, total int64)
}

// WithProgress makes Merge call f after each batch with the bytes of
// input read so far and their total.
func WithProgress(f func(done, total int64)) Option {
	return func(c *config) { c.progress = f }
}

// Stats says what a merge did.
type Stats struct {
	Runs    int          // runs in the output
	Modules int          // modules in the unified table
	Rows    int64        // rows written (events and record rows)
	Inputs  []InputStats // per input, in order
}

// InputStats describes one input of a merge.
type InputStats struct {
	File           string
	Runs           int         // runs it contributed
	Rows           int64       // rows it contributed
	End            formats.End // how its stream ended
	Cut            error       // non-nil if it was cut short: read up to its last complete batch
	UnknownModules int64       // module ids not in its run's table, written as NoModule
}

// Merge writes to w the merged trace of the named inputs (trace files or
// merged traces): the union of their runs, in the order given, each row
// keeping the run it came from (see the package documentation for the
// format). An input cut inside a batch (a crash, or a copy taken while
// the runtime was writing) contributes every complete batch and is
// reported in its [InputStats]; any other damage is an error that names
// the file, and w then holds a partial stream.
//
// Merge reads each input twice (first the metadata, then the rows) and
// holds one batch at a time: memory does not grow with the number of
// events.
func Merge(ctx context.Context, w io.Writer, inputs []string, opts ...Option) (Stats, error) {
	var cfg config
	for _, o := range opts {
		o(&cfg)
	}
	var st Stats
	if len(inputs) == 0 {
		return st, errors.New("no inputs")
	}

	// Pass 1: run lists and module tables.
	u := newUnifier()
	type inMap struct {
		firstRun int
		remap    [][]uint16 // per run of the input: local module id -> unified id (NoModule: unknown)
	}
	maps := make([]inMap, len(inputs))
	var runs []RunInfo
	var total int64
	for i, name := range inputs {
		r, err := Open(name)
		if err != nil {
			return st, err
		}
		total += r.Size()
		maps[i].firstRun = len(runs)
		mods := map[uint16]formats.Module{}
		for _, m := range r.Modules() {
			mods[m.ID] = m
		}
		for _, ri := range r.Runs() {
			if len(runs) >= MaxRuns {
				r.Close()
				return st, fmt.Errorf("%s: more than %d runs in all", name, MaxRuns)
			}
			size := 0
			for _, b := range ri.Bases {
				size = max(size, int(b.ID)+1)
			}
			remap := make([]uint16, size)
			for k := range remap {
				remap[k] = formats.NoModule
			}
			out := RunInfo{Run: len(runs), File: ri.File, Info: ri.Info}
			for _, b := range ri.Bases {
				id := u.add(mods[b.ID])
				remap[b.ID] = id
				out.Bases = append(out.Bases, ModuleBase{ID: id, Base: b.Base})
			}
			maps[i].remap = append(maps[i].remap, remap)
			runs = append(runs, out)
		}
		r.Close()
	}
	st.Runs, st.Modules = len(runs), len(u.modules)

	md, err := metadata(runs, u.modules)
	if err != nil {
		return st, err
	}
	iw := ipc.NewWriter(w, ipc.WithSchema(arrow.NewSchema(Schema().Fields(), &md)))
	bld := newBuilder()
	defer bld.release()

	// Pass 2: the rows, one batch at a time.
	var done int64
	for i, name := range inputs {
		in := InputStats{File: name}
		r, err := Open(name)
		if err != nil {
			return st, err
		}
		in.Runs = len(r.Runs())
		for r.Next() {
			if err := ctx.Err(); err != nil {
				r.Close()
				return st, err
			}
			b := r.Batch()
			rec := bld.build(b, maps[i].firstRun, maps[i].remap, &in.UnknownModules)
			err := iw.Write(rec)
			rec.Release()
			if err != nil {
				r.Close()
				return st, fmt.Errorf("write: %w", err)
			}
			in.Rows += int64(b.Len())
			if cfg.progress != nil {
				cfg.progress(done+r.Offset(), total)
			}
		}
		in.End = r.End()
		if err := r.Err(); err != nil {
			if !errors.Is(err, formats.ErrTruncated) {
				r.Close()
				return st, fmt.Errorf("%s: %w", name, err)
			}
			in.Cut = err
		}
		done += r.Size()
		r.Close()
		st.Rows += in.Rows
		st.Inputs = append(st.Inputs, in)
	}
	if cfg.progress != nil {
		cfg.progress(total, total)
	}
	if err := iw.Close(); err != nil {
		return st, fmt.Errorf("write: %w", err)
	}
	return st, nil
}

// unifier builds the unified module table.
type unifier struct {
	modules []formats.Module
	byKey   map[string]uint16
}

func newUnifier() *unifier { return &unifier{byKey: map[string]uint16{}} }

// moduleKey is what makes two modules the same: the build-id, or the
// path for a module without one.
func moduleKey(m formats.Module) string {
	if m.BuildID != "" {
		return "b:" + m.BuildID
	}
	return "p:" + m.Path
}

func (u *unifier) add(m formats.Module) uint16 {
	k := moduleKey(m)
	if id, ok := u.byKey[k]; ok {
		um := &u.modules[id]
		um.Rewritten = um.Rewritten || m.Rewritten
		um.Size = max(um.Size, m.Size)
		return id
	}
	id := uint16(len(u.modules))
	m.ID, m.Base = id, 0
	u.modules = append(u.modules, m)
	u.byKey[k] = id
	return id
}

func metadata(runs []RunInfo, modules []formats.Module) (arrow.Metadata, error) {
	var rs, ms strings.Builder
	for _, r := range runs {
		b, err := json.Marshal(r)
		if err != nil {
			return arrow.Metadata{}, err
		}
		rs.Write(b)
		rs.WriteByte('\n')
	}
	for _, m := range modules {
		b, err := json.Marshal(m)
		if err != nil {
			return arrow.Metadata{}, err
		}
		ms.Write(b)
		ms.WriteByte('\n')
	}
	if rs.Len()+ms.Len() > maxMeta/2 {
		return arrow.Metadata{}, fmt.Errorf("run list and module table are %d bytes, more than a merged trace holds", rs.Len()+ms.Len())
	}
	return arrow.NewMetadata(
		[]string{formats.MetaVersion, MetaMerged, MetaModules, MetaRuns},
		[]string{formats.Version, "1", ms.String(), rs.String()},
	), nil
}

// builder makes output record batches. The columns that a merge does
// not change are wrapped around the input batch's slices (no copy); the
// module and run columns are computed into slices reused from batch to
// batch. A record is valid until the next build and the input batch's
// next Next, which is all the writer needs: it writes it at once.
type builder struct {
	schema     *arrow.Schema
	sm, dm, rc []uint16
}

func newBuilder() *builder { return &builder{schema: Schema()} }

func (bl *builder) release() {}

// bytesOf returns the memory of s as bytes.
func bytesOf[T uint8 | uint16 | uint32 | uint64](s []T) []byte {
	if len(s) == 0 {
		return nil
	}
	var z T
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(s))), len(s)*int(unsafe.Sizeof(z)))
}

func column(dt arrow.DataType, n int, b []byte) arrow.Array {
	d := array.NewData(dt, n, []*memory.Buffer{nil, memory.NewBufferBytes(b)}, nil, 0, 0)
	defer d.Release()
	return array.MakeFromData(d)
}

func (bl *builder) build(b *Batch, firstRun int, remap [][]uint16, unknown *int64) arrow.Record {
	n := b.Len()
	if cap(bl.sm) < n {
		bl.sm, bl.dm, bl.rc = make([]uint16, n), make([]uint16, n), make([]uint16, n)
	}
	sm, dm, rc := bl.sm[:n], bl.dm[:n], bl.rc[:n]
	mapID := func(rm []uint16, id uint16) uint16 {
		if id == formats.NoModule {
			return id
		}
		if int(id) < len(rm) && rm[id] != formats.NoModule {
			return rm[id]
		}
		*unknown++
		return formats.NoModule
	}
	for i := 0; i < n; i++ {
		k := b.RunOf(i)
		rm := remap[k]
		sm[i] = mapID(rm, b.SrcModule[i])
		dm[i] = mapID(rm, b.DstModule[i])
		rc[i] = uint16(firstRun + k)
	}
	pt := arrow.PrimitiveTypes
	cols := []arrow.Array{
		formats.ColKind:      column(pt.Uint8, n, bytesOf(b.Kind)),
		formats.ColTID:       column(pt.Uint32, n, bytesOf(b.TID)),
		formats.ColTime:      column(pt.Uint64, n, bytesOf(b.Time)),
		formats.ColSrcModule: column(pt.Uint16, n, bytesOf(sm)),
		formats.ColSrc:       column(pt.Uint64, n, bytesOf(b.Src)),
		formats.ColDstModule: column(pt.Uint16, n, bytesOf(dm)),
		formats.ColDst:       column(pt.Uint64, n, bytesOf(b.Dst)),
		formats.ColValue:     column(pt.Uint64, n, bytesOf(b.Value)),
		ColRun:               column(pt.Uint16, n, bytesOf(rc)),
	}
	rec := array.NewRecord(bl.schema, cols, int64(n))
	for _, c := range cols {
		c.Release()
	}
	return rec
}
