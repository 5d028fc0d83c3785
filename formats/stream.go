package formats

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
)

// stream frames the messages of a stint Arrow IPC stream and validates
// each one (parseMessage) before anything decodes it. It knows where each
// message starts, tells a cut stream from a finished one, treats zeros as
// the end of the stream (a runtime's unsealed tail), and bounds every
// allocation by the input's size. Both [Reader] (through arrow-go) and
// [BatchReader] (without it) read through one.
type stream struct {
	r         io.Reader
	cols      columns
	maxMeta   int64
	remaining int64 // bytes left in the input, or -1 if unknown
	off       int64 // stream offset of the next byte
	start     int64 // offset of the last message begun
	nmsg      int   // messages read, the schema included
	end       End
	err       error // sticky; never wraps io.EOF
}

// maxMeta bounds a trace's message metadata: the schema message is about
// 70 KiB.
const maxMeta = 1 << 20

// bodyBuffer is where a message body is read: memory.Buffer, or a
// reused slice (sliceBuffer).
type bodyBuffer interface {
	Resize(n int)
	Bytes() []byte
}

func newStream(r io.Reader, cols columns, maxMeta int64) *stream {
	s := &stream{r: r, cols: cols, maxMeta: maxMeta, remaining: -1}
	switch f := r.(type) {
	case *os.File:
		if fi, err := f.Stat(); err == nil && fi.Mode().IsRegular() {
			if pos, err := f.Seek(0, io.SeekCurrent); err == nil {
				s.remaining = fi.Size() - pos
			}
		}
	case interface{ Len() int }: // bytes.Reader, bytes.Buffer, strings.Reader
		s.remaining = int64(f.Len())
	}
	return s
}

func (s *stream) fail(off int64, err error, format string, args ...any) bool {
	s.end = EndError
	if errors.Is(err, ErrTruncated) {
		s.end = EndCut
	}
	s.err = &FormatError{Offset: off, Msg: fmt.Sprintf(format, args...), Err: err}
	return false
}

// read fills p; it returns false after recording the error.
func (s *stream) read(p []byte, what string) bool {
	n, err := io.ReadFull(s.r, p)
	s.off += int64(n)
	if s.remaining >= 0 {
		s.remaining -= int64(n)
	}
	switch {
	case err == nil:
		return true
	case errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF):
		return s.fail(s.start, ErrTruncated, "input ends inside the %s of the message at offset %d", what, s.start)
	}
	s.end = EndError
	s.err = fmt.Errorf("offset %d: read: %w", s.off, err)
	return false
}

// next reads the next message: its metadata into a new slice (or *metaBuf
// when given, reused) and its body into body. It returns false at the end
// of the stream (s.end) or on an error (s.err). The first message must be
// a Schema, every later one a RecordBatch.
func (s *stream) next(metaBuf *[]byte, body bodyBuffer) (meta []byte, mi msgInfo, ok bool) {
	if s.err != nil || s.end != EndNone {
		return nil, mi, false
	}
	s.start = s.off
	metaLen, ok := s.prefix()
	if !ok {
		return nil, mi, false
	}
	if metaBuf == nil || int64(cap(*metaBuf)) < metaLen {
		meta = make([]byte, metaLen)
		if metaBuf != nil {
			*metaBuf = meta
		}
	}
	if metaBuf != nil {
		meta = (*metaBuf)[:metaLen]
	}
	if !s.read(meta, "metadata") {
		return nil, mi, false
	}
	mi, err := parseMessage(meta, s.cols)
	switch {
	case err != nil && s.nmsg == 0:
		return nil, mi, s.fail(0, err, "not a %s", s.cols.kind())
	case err != nil:
		return nil, mi, s.fail(s.start, err, "bad message %d", s.nmsg)
	case s.nmsg == 0 && mi.header != headerSchema:
		return nil, mi, s.fail(0, nil, "not a %s: first message is a %s, want a Schema", s.cols.kind(), headerName(mi.header))
	case s.nmsg > 0 && mi.header != headerRecordBatch:
		return nil, mi, s.fail(s.start, nil, "unexpected %s message", headerName(mi.header))
	case s.remaining >= 0 && mi.bodyLen > s.remaining:
		return nil, mi, s.fail(s.start, ErrTruncated, "input ends inside the body of the message at offset %d (%d of %d bytes)", s.start, s.remaining, mi.bodyLen)
	}
	if !s.readBody(body, mi.bodyLen) {
		return nil, mi, false
	}
	s.nmsg++
	return meta, mi, true
}

// prefix reads a message's 8-byte prefix and returns its metadata length;
// false at the end of the stream or on an error.
func (s *stream) prefix() (int64, bool) {
	var pre [8]byte
	n, rerr := io.ReadFull(s.r, pre[:4])
	if n == 0 && rerr == io.EOF {
		if s.nmsg == 0 {
			return 0, s.fail(0, nil, "empty input: not an Arrow IPC stream")
		}
		s.end = EndEOF
		return 0, false
	}
	s.off += int64(n)
	if s.remaining >= 0 {
		s.remaining -= int64(n)
	}
	if rerr != nil {
		if errors.Is(rerr, io.ErrUnexpectedEOF) && s.nmsg > 0 && bytes.Count(pre[:n], []byte{0}) == n {
			s.end = EndZeros // a zero tail shorter than a word
			return 0, false
		}
		if errors.Is(rerr, io.ErrUnexpectedEOF) {
			return 0, s.fail(s.start, ErrTruncated, "input ends inside a message prefix (%d of 8 bytes)", n)
		}
		s.end = EndError
		s.err = fmt.Errorf("offset %d: read: %w", s.off, rerr)
		return 0, false
	}
	switch w := binary.LittleEndian.Uint32(pre[:4]); {
	case w == 0 && s.nmsg > 0:
		s.end = EndZeros
		return 0, false
	case w != 0xffffffff:
		if s.nmsg == 0 {
			return 0, s.fail(0, nil, "not an Arrow IPC stream: starts with % x, want ff ff ff ff", pre[:4])
		}
		return 0, s.fail(s.start, nil, "bad message prefix % x after message %d: want ff ff ff ff (or zeros)", pre[:4], s.nmsg)
	}
	if !s.read(pre[4:8], "prefix") {
		return 0, false
	}
	metaLen := int64(int32(binary.LittleEndian.Uint32(pre[4:8])))
	switch {
	case metaLen == 0 && s.nmsg == 0:
		return 0, s.fail(0, nil, "stream ends before its schema")
	case metaLen == 0:
		s.end = EndMarker
		return 0, false
	case metaLen < 0 || metaLen > s.maxMeta:
		return 0, s.fail(s.start, nil, "message metadata length %d out of range", metaLen)
	case s.remaining >= 0 && metaLen > s.remaining:
		return 0, s.fail(s.start, ErrTruncated, "input ends inside the metadata of the message at offset %d (%d bytes short)", s.start, metaLen-s.remaining)
	}
	return metaLen, true
}

// readBody reads n bytes into buf. When the input's size is unknown it
// grows buf as data arrives, so that a hostile length cannot make it
// allocate more than twice what the input holds.
func (s *stream) readBody(buf bodyBuffer, n int64) bool {
	if s.remaining >= 0 {
		buf.Resize(int(n))
		return s.read(buf.Bytes(), "body")
	}
	const chunk = 1 << 20
	for have := int64(0); have < n; {
		step := min(n-have, max(chunk, have))
		buf.Resize(int(have + step))
		if !s.read(buf.Bytes()[have:], "body") {
			return false
		}
		have += step
	}
	return true
}

// sliceBuffer is a body buffer that keeps its memory from one message to
// the next, rounded up so that batches of slightly different sizes reuse
// it.
type sliceBuffer struct{ b []byte }

func (s *sliceBuffer) Resize(n int) {
	if cap(s.b) < n {
		b := make([]byte, (n+(1<<16)-1)&^(1<<16-1))
		copy(b, s.b)
		s.b = b
	}
	s.b = s.b[:n]
}

func (s *sliceBuffer) Bytes() []byte { return s.b }
