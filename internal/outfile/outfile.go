// Package outfile writes a command's output file whole or not at all:
// through a temporary file beside it, renamed over it once complete, so
// that a reader never sees half a file and a failure leaves none.
//
// A path that exists and is not a regular file (/dev/null, a FIFO, a
// terminal) is never renamed over: run as root, the rename replaced
// /dev/null with a regular file of the output. Its temporary file goes
// to the system's temporary directory instead (the rewriter maps and
// allocates it, which a device does not allow), and Commit copies it
// into the path.
package outfile

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// Temp creates the temporary file that becomes path (Commit). The
// caller removes it when it does not commit.
func Temp(path string) (*os.File, error) {
	dir, special, err := where(path)
	if err != nil {
		return nil, err
	}
	pattern := "." + filepath.Base(path) + ".stint-*"
	if special {
		pattern = "stint-out-*"
	}
	return os.CreateTemp(dir, pattern)
}

// where says where path's temporary file goes, and whether path is
// special (not a regular file, so written into, not renamed over).
func where(path string) (dir string, special bool, err error) {
	fi, err := os.Stat(path)
	switch {
	case err != nil && !os.IsNotExist(err):
		return "", false, err
	case err == nil && fi.IsDir():
		return "", false, fmt.Errorf("%s is a directory", path)
	case err == nil && !fi.Mode().IsRegular():
		return os.TempDir(), true, nil
	}
	return filepath.Dir(path), false, nil
}

// Commit gives tmp (from Temp(path)) its mode, closes it and puts it at
// path: a rename, or for a special path a copy into it, tmp then
// removed. On an error the caller still removes tmp.
func Commit(tmp *os.File, path string, mode os.FileMode) error {
	if err := tmp.Chmod(mode); err != nil {
		return err
	}
	if !isSpecial(path) {
		if err := tmp.Close(); err != nil {
			return err
		}
		return os.Rename(tmp.Name(), path)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Seek(0, io.SeekStart); err != nil {
		tmp.Close()
		return err
	}
	dst, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err == nil {
		_, err = io.Copy(dst, tmp)
		if cerr := dst.Close(); err == nil {
			err = cerr
		}
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	return err
}

func isSpecial(path string) bool {
	_, special, err := where(path)
	return err == nil && special
}

// Write writes path whole through a temporary file (Temp, Commit) with
// what write writes, mode mode.
func Write(path string, mode os.FileMode, write func(io.Writer) error) error {
	tmp, err := Temp(path)
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // after a successful rename, nothing to remove
	if err := write(tmp); err != nil {
		tmp.Close()
		return err
	}
	if err := Commit(tmp, path, mode); err != nil {
		tmp.Close()
		return err
	}
	return nil
}
