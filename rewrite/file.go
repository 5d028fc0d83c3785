package rewrite

import (
	"bytes"
	"fmt"
	"os"

	"github.com/stint-project/stint/internal/outfile"
	"github.com/stint-project/stint/rewrite/elfout"
)

// RewriteFile rewrites the file at inPath and writes the result to
// outPath atomically: to a temporary file in outPath's directory, which
// is renamed over outPath once complete. The output gets the input's
// permission bits. On any error no output (and no temporary file) is
// left behind.
func RewriteFile(inPath, outPath string, opts Options) (*Stats, error) {
	in, err := os.Open(inPath)
	if err != nil {
		return nil, err
	}
	defer in.Close()
	fi, err := in.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s: not a regular file", inPath)
	}
	if fi.Size() > MaxInputSize {
		return nil, fmt.Errorf("%s: %w", inPath, ErrTooLarge)
	}
	data, err := readAll(in)
	if err != nil {
		return nil, fmt.Errorf("%s: read: %w", inPath, err)
	}
	tmp, err := createTemp(outPath)
	if err != nil {
		return nil, err
	}
	fb := &fileBacking{f: tmp}
	done := false
	defer func() {
		fb.unmap()
		if !done {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	opts.backing = fb
	out, sa, st, err := rewriteParts(data, opts, false)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", inPath, err)
	}
	if err := fillTemp(tmp, fb, out, sa); err != nil {
		return nil, fmt.Errorf("write output: %w", err)
	}
	if err := commitTemp(tmp, outPath, fi.Mode().Perm()); err != nil {
		return nil, err
	}
	done = true
	return st, nil
}

// fillTemp makes tmp hold out, then the stub area sa (nil: none) page
// by page after it: never whole in memory. out is in tmp already when
// fb's mapping holds it.
func fillTemp(tmp *os.File, fb *fileBacking, out []byte, sa *elfout.StubArea) error {
	inFile := fb.holds(out)
	fb.unmap()
	if !inFile {
		// on the heap (no mapping, or moved off it): what the mapping
		// wrote must not show through the holes writeSparse leaves
		if err := tmp.Truncate(0); err != nil {
			return err
		}
		if err := writeSparse(tmp, out); err != nil {
			return err
		}
	}
	end := int64(len(out))
	if sa != nil {
		err := sa.Pages(func(off uint64, page []byte) error {
			_, err := tmp.WriteAt(page, int64(off))
			return err
		})
		if err != nil {
			return err
		}
		end = int64(sa.End())
	}
	return tmp.Truncate(end)
}

// WriteFileAtomic writes data to path through a temporary file in the same
// directory and a rename; mode is applied before the rename.
func WriteFileAtomic(path string, data []byte, mode os.FileMode) (err error) {
	tmp, err := createTemp(path)
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	if err = writeSparse(tmp, data); err != nil {
		return fmt.Errorf("write output: %w", err)
	}
	return commitTemp(tmp, path, mode)
}

// createTemp creates the temporary file that becomes path: in the same
// directory, so that the rename is atomic (internal/outfile; a device
// such as /dev/null is written into, never renamed over).
func createTemp(path string) (*os.File, error) {
	tmp, err := outfile.Temp(path)
	if err != nil {
		return nil, fmt.Errorf("write output: %w", err)
	}
	return tmp, nil
}

// commitTemp gives tmp its mode, closes it and puts it at path; the
// caller removes tmp when this fails.
func commitTemp(tmp *os.File, path string, mode os.FileMode) error {
	if err := outfile.Commit(tmp, path, mode); err != nil {
		return fmt.Errorf("write output: %w", err)
	}
	return nil
}

// writeSparse writes data to a new, empty file, leaving its all-zero
// pages as holes where the file system allows: the stub area a rewritten
// file carries (see emit) is mostly pages that no stub uses.
func writeSparse(f *os.File, data []byte) error {
	zero := make([]byte, elfout.PageSize)
	isZero := func(o int) bool {
		return o+elfout.PageSize <= len(data) && bytes.Equal(data[o:o+elfout.PageSize], zero)
	}
	for off := 0; off < len(data); {
		if isZero(off) {
			off += elfout.PageSize
			continue
		}
		end := off
		for end < len(data) && !isZero(end) {
			end = min(end+elfout.PageSize, len(data))
		}
		if _, err := f.WriteAt(data[off:end], int64(off)); err != nil {
			return err
		}
		off = end
	}
	return f.Truncate(int64(len(data)))
}
