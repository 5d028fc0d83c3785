package rewrite

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"

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
	out, sa, st, err := rewriteParts(data, opts, false)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", inPath, err)
	}
	// the stub area page by page after the rest: never whole in memory
	var more func(f *os.File) (int64, error)
	if sa != nil {
		more = func(f *os.File) (int64, error) {
			err := sa.Pages(func(off uint64, page []byte) error {
				_, err := f.WriteAt(page, int64(off))
				return err
			})
			return int64(sa.End()), err
		}
	}
	if err := writeFileAtomic(outPath, out, fi.Mode().Perm(), more); err != nil {
		return nil, err
	}
	return st, nil
}

// WriteFileAtomic writes data to path through a temporary file in the same
// directory and a rename; mode is applied before the rename.
func WriteFileAtomic(path string, data []byte, mode os.FileMode) (err error) {
	return writeFileAtomic(path, data, mode, nil)
}

// writeFileAtomic is WriteFileAtomic with more (nil: none) writing the
// rest of the file after data and saying where the file ends.
func writeFileAtomic(path string, data []byte, mode os.FileMode, more func(*os.File) (int64, error)) (err error) {
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".stint-*")
	if err != nil {
		return fmt.Errorf("write output: %w", err)
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
	if more != nil {
		end, err := more(tmp)
		if err == nil {
			err = tmp.Truncate(end)
		}
		if err != nil {
			return fmt.Errorf("write output: %w", err)
		}
	}
	if err = tmp.Chmod(mode); err != nil {
		return fmt.Errorf("write output: %w", err)
	}
	if err = tmp.Close(); err != nil {
		return fmt.Errorf("write output: %w", err)
	}
	if err = os.Rename(tmp.Name(), path); err != nil {
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
