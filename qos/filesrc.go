package qos

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"syscall"
)

// fileRate is file-rate:PATH: the growth of a file in bytes per second
// (gzip's output, a download). A file that does not exist yet counts as
// 0 bytes; a file that shrinks (truncated) or is replaced by another
// file (rotated: a new inode) restarts the count from 0, so its new size
// is what was written since. It is a [Watcher]: writers write in chunks
// (gzip 256 KiB at a time), and the rate is over whole chunks.
type fileRate struct {
	path string
	opt  SourceOptions
	k    stepCounter
	ino  uint64
	dev  uint64
}

func newFileRate(path string, opt SourceOptions) *fileRate { return &fileRate{path: path, opt: opt} }

func (s *fileRate) String() string { return "file-rate:" + s.path }
func (s *fileRate) Close() error   { return nil }

// size observes the file: its size now, with the count restarted if it
// is another file than before.
func (s *fileRate) size() (float64, error) {
	var size float64
	var ino, dev uint64
	st, err := os.Stat(s.path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return 0, err
	case !st.Mode().IsRegular():
		return 0, fmt.Errorf("%s: not a regular file", s.path)
	default:
		size = float64(st.Size())
		if sys, ok := st.Sys().(*syscall.Stat_t); ok {
			ino, dev = sys.Ino, sys.Dev
		}
	}
	if s.k.have && size > 0 && s.ino != 0 && (ino != s.ino || dev != s.dev) {
		s.k.restart() // another file now: all of it is new
	}
	if size > 0 {
		s.ino, s.dev = ino, dev
	}
	return size, nil
}

func (s *fileRate) Sample(ctx context.Context) (float64, bool, error) {
	size, err := s.size()
	if err != nil {
		s.k.forget()
		return 0, false, err
	}
	v, ok := s.k.observe(size, s.opt.clock()())
	return v, ok, nil
}

// Watch notes a step of the file's growth; an error waits for Sample.
func (s *fileRate) Watch(ctx context.Context) {
	if size, err := s.size(); err == nil {
		s.k.see(size, s.opt.clock()())
	}
}

// logRate is log-rate:PATH: lines appended to a log per second (an
// access log: requests per second). Lines that were in the file when the
// analyzer started are not counted; a line counts when its newline is
// written. It follows the file like tail -F: when the path names a new
// file (rotated), the rest of the old one is read first and the new one
// from its start; a truncated file is read again from its start; a file
// that does not exist yet counts as no lines until it appears.
type logRate struct {
	path    string
	opt     SourceOptions
	k       counter
	f       *os.File
	off     int64
	lines   float64
	started bool
	buf     []byte
}

func newLogRate(path string, opt SourceOptions) *logRate { return &logRate{path: path, opt: opt} }

func (s *logRate) String() string { return "log-rate:" + s.path }

func (s *logRate) Close() error {
	if s.f != nil {
		err := s.f.Close()
		s.f = nil
		return err
	}
	return nil
}

// drain counts the newlines from s.off to the end of s.f.
func (s *logRate) drain() error {
	if s.buf == nil {
		s.buf = make([]byte, 64<<10)
	}
	for {
		n, err := s.f.ReadAt(s.buf, s.off)
		s.lines += float64(bytes.Count(s.buf[:n], []byte{'\n'}))
		s.off += int64(n)
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

func (s *logRate) Sample(ctx context.Context) (float64, bool, error) {
	if err := s.follow(); err != nil {
		s.Close()
		s.k.forget()
		s.started = false
		return 0, false, err
	}
	v, ok := s.k.observe(s.lines, s.opt.clock()())
	return v, ok, nil
}

func (s *logRate) follow() error {
	first := !s.started
	s.started = true
	if s.f != nil {
		cur, err := s.f.Stat()
		if err != nil {
			return err
		}
		st, err := os.Stat(s.path)
		switch {
		case err == nil && os.SameFile(cur, st):
			if cur.Size() < s.off {
				s.off = 0 // truncated: read it again from the start
			}
			return s.drain()
		case err == nil || errors.Is(err, fs.ErrNotExist):
			// Rotated or removed: finish the old file, then take the new one.
			if err := s.drain(); err != nil {
				return err
			}
			s.f.Close()
			s.f = nil
		default:
			return err
		}
	}
	f, err := os.Open(s.path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return err
	}
	if !st.Mode().IsRegular() {
		f.Close()
		return fmt.Errorf("%s: not a regular file", s.path)
	}
	s.f, s.off = f, 0
	if first {
		s.off = st.Size() // lines already there are not counted
		return nil
	}
	return s.drain()
}
