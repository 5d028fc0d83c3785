package merge

import (
	"fmt"

	"github.com/stint-project/stint/analysis/paths"
	"github.com/stint-project/stint/formats"
)

// pathsBatchRows is how many decoded events a batch of a compact trace
// holds.
const pathsBatchRows = 1 << 16

// pathsNext fills the batch with the next events decoded from the
// trace's paths file (a compact complete trace), which follow its rows;
// false at their end or on an error.
func (r *Reader) pathsNext() bool {
	if r.paths == nil {
		if r.merged || !paths.HasPaths(r.name) {
			return false
		}
		d, err := paths.Open(r.name, paths.Options{})
		if err != nil {
			r.err, r.end = fmt.Errorf("compact trace: %w", err), formats.EndError
			return false
		}
		r.paths = d.Stream()
	}
	evs := r.paths.Next(pathsBatchRows)
	if evs == nil {
		if err := r.paths.Err(); err != nil {
			r.err, r.end = fmt.Errorf("compact trace %s%s: %w", r.name, formats.PathsSuffix, err), formats.EndError
		}
		return false
	}
	b := &r.batch
	n := len(evs)
	b.Kind, b.TID, b.Time = resize(b.Kind, n), resize(b.TID, n), resize(b.Time, n)
	b.SrcModule, b.Src = resize(b.SrcModule, n), resize(b.Src, n)
	b.DstModule, b.Dst, b.Value = resize(b.DstModule, n), resize(b.Dst, n), resize(b.Value, n)
	b.Run = nil
	for i, e := range evs {
		b.Kind[i], b.TID[i], b.Time[i] = uint8(e.Kind), e.TID, e.Time
		b.SrcModule[i], b.Src[i], b.DstModule[i], b.Dst[i], b.Value[i] = e.SrcModule, e.Src, e.DstModule, e.Dst, e.Value
	}
	return true
}

// resize returns s with length n, reusing its memory when it can, but
// never the memory of a batch read from a file (a fresh slice then).
func resize[T any](s []T, n int) []T {
	if cap(s) >= n {
		return s[:n]
	}
	return make([]T, n)
}
