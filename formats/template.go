package formats

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"sync"

	"github.com/apache/arrow-go/v18/arrow/ipc"
	flatbuffers "github.com/google/flatbuffers/go"
)

// IPCTemplate holds the byte templates from which a trace file is
// written without an Arrow library: the C runtime writes them (through
// runtime/include/stint_arrow.h, generated from this by
// internal/gen/arrowhdr) and so does [Writer].
//
// A stream is Schema (with the metadata values filled in place), then per
// batch: a copy of Batch with the patched fields set, then the body, then
// optionally the end-of-stream marker FF FF FF FF 00 00 00 00.
// Every offset below is a multiple of 8 (so a template copied to an
// 8-aligned address can be patched with aligned 8-byte stores), and every
// patched field is a little-endian int64 that the template holds as 0.
type IPCTemplate struct {
	// Schema is the complete framed Schema message: FF FF FF FF, int32
	// length, flatbuffer, padding to 8. Its metadata values are spaces.
	Schema []byte
	// RunOff and ModulesOff are the offsets within Schema of the
	// space-padded MetaRun and MetaModules values, RunCap and ModulesCap
	// bytes long.
	RunOff, ModulesOff int

	// Batch is a complete framed RecordBatch metadata message for NumCols
	// columns with two buffers each (validity, values). The body follows
	// it directly.
	Batch []byte
	// OffRows is the offset of RecordBatch.length, OffBodyLen that of
	// Message.bodyLength.
	OffRows, OffBodyLen int
	// OffNodeLen[c] is the offset of column c's FieldNode.length
	// (null_count stays 0).
	OffNodeLen [NumCols]int
	// OffBufOff[2c+1] and OffBufLen[2c+1] are the offsets of column c's
	// value buffer's Buffer.offset (relative to the body) and
	// Buffer.length; the validity buffers 2c stay at offset 0, length 0.
	OffBufOff, OffBufLen [2 * NumCols]int
}

var (
	tmplOnce sync.Once
	tmpl     *IPCTemplate
	tmplErr  error
)

// Template returns the trace file's byte templates. The result is the
// same on every call and on every machine; callers must not modify it.
func Template() (*IPCTemplate, error) {
	tmplOnce.Do(func() { tmpl, tmplErr = buildTemplate() })
	return tmpl, tmplErr
}

// Sentinels locate fields in the flatbuffers: a flatbuffer omits a table
// field equal to its default, so every field to patch is first built with
// a unique non-zero value, then found by search and zeroed.
const sentinelBase = 0x53544e5400000000 // "\0\0\0\0TNTS": never a plausible layout value

func buildTemplate() (*IPCTemplate, error) {
	t := &IPCTemplate{}

	// The Schema message, from arrow-go's writer, so that it is exactly
	// what an Arrow library writes. The metadata values are first filled
	// with distinct letters to find them.
	runSent := bytes.Repeat([]byte{'R'}, RunCap)
	modSent := bytes.Repeat([]byte{'M'}, ModulesCap)
	var buf bytes.Buffer
	w := ipc.NewWriter(&buf, ipc.WithSchema(schemaWith(string(runSent), string(modSent))))
	if err := w.Close(); err != nil {
		return nil, fmt.Errorf("write schema: %w", err)
	}
	s := buf.Bytes()
	eos := []byte{0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0}
	if !bytes.HasSuffix(s, eos) {
		return nil, fmt.Errorf("schema stream does not end in the end-of-stream marker")
	}
	s = s[:len(s)-len(eos)]
	if err := checkFrame(s); err != nil {
		return nil, fmt.Errorf("schema message: %w", err)
	}
	var err error
	if t.RunOff, err = findOnce(s, runSent); err != nil {
		return nil, fmt.Errorf("schema run metadata: %w", err)
	}
	if t.ModulesOff, err = findOnce(s, modSent); err != nil {
		return nil, fmt.Errorf("schema modules metadata: %w", err)
	}
	copy(s[t.RunOff:], bytes.Repeat([]byte{' '}, RunCap))
	copy(s[t.ModulesOff:], bytes.Repeat([]byte{' '}, ModulesCap))
	t.Schema = s

	// The RecordBatch message, built here because arrow-go's flatbuffer
	// code is internal. Field slots follow format/Message.fbs.
	sent := uint64(sentinelBase)
	next := func() int64 { sent++; return int64(sent) }
	rows, bodyLen := next(), next()
	var nodeLen [NumCols]int64
	var bufOff, bufLen [2 * NumCols]int64
	for c := 0; c < NumCols; c++ {
		nodeLen[c] = next()
		bufOff[2*c+1], bufLen[2*c+1] = next(), next()
	}
	b := flatbuffers.NewBuilder(1024)
	// vector of struct Buffer { offset: long; length: long; }
	b.StartVector(16, 2*NumCols, 8)
	for i := 2*NumCols - 1; i >= 0; i-- {
		b.Prep(8, 16)
		b.PrependInt64(bufLen[i])
		b.PrependInt64(bufOff[i])
	}
	buffers := b.EndVector(2 * NumCols)
	// vector of struct FieldNode { length: long; null_count: long; }
	b.StartVector(16, NumCols, 8)
	for c := NumCols - 1; c >= 0; c-- {
		b.Prep(8, 16)
		b.PrependInt64(0)
		b.PrependInt64(nodeLen[c])
	}
	nodes := b.EndVector(NumCols)
	b.StartObject(5) // table RecordBatch
	b.PrependInt64Slot(0, rows, 0)
	b.PrependUOffsetTSlot(1, nodes, 0)
	b.PrependUOffsetTSlot(2, buffers, 0)
	rb := b.EndObject()
	b.StartObject(5) // table Message
	b.PrependInt64Slot(3, bodyLen, 0)
	b.PrependUOffsetTSlot(2, rb, 0)
	b.PrependInt16Slot(0, int16(metadataV5), 0)
	b.PrependByteSlot(1, byte(headerRecordBatch), 0)
	msg := b.EndObject()
	b.Finish(msg)
	fb := b.FinishedBytes()
	m := frame(fb)

	find := func(v int64, what string) (int, error) {
		var le [8]byte
		binary.LittleEndian.PutUint64(le[:], uint64(v))
		off, err := findOnce(m, le[:])
		if err != nil {
			return 0, fmt.Errorf("batch %s: %w", what, err)
		}
		if off%8 != 0 {
			return 0, fmt.Errorf("batch %s at offset %d is not 8-aligned", what, off)
		}
		clear(m[off : off+8])
		return off, nil
	}
	if t.OffRows, err = find(rows, "rows"); err != nil {
		return nil, err
	}
	if t.OffBodyLen, err = find(bodyLen, "body length"); err != nil {
		return nil, err
	}
	for c := 0; c < NumCols; c++ {
		if t.OffNodeLen[c], err = find(nodeLen[c], fmt.Sprintf("column %d node length", c)); err != nil {
			return nil, err
		}
		// The validity buffer's fields sit just before the value buffer's
		// in the vector; they are 0 and never patched.
		if t.OffBufOff[2*c+1], err = find(bufOff[2*c+1], fmt.Sprintf("column %d buffer offset", c)); err != nil {
			return nil, err
		}
		if t.OffBufLen[2*c+1], err = find(bufLen[2*c+1], fmt.Sprintf("column %d buffer length", c)); err != nil {
			return nil, err
		}
		t.OffBufOff[2*c] = t.OffBufOff[2*c+1] - 16
		t.OffBufLen[2*c] = t.OffBufLen[2*c+1] - 16
	}
	t.Batch = m
	return t, nil
}

// Flatbuffer enum values from format/Schema.fbs and format/Message.fbs.
const (
	metadataV5        = 4 // MetadataVersion.V5
	headerSchema      = 1 // MessageHeader.Schema
	headerRecordBatch = 3 // MessageHeader.RecordBatch
)

// frame returns the flatbuffer fb framed as an IPC message: continuation
// marker, int32 length of what follows the 8-byte prefix, fb, zero
// padding to a multiple of 8.
func frame(fb []byte) []byte {
	n := (len(fb) + 7) &^ 7
	m := make([]byte, 8+n)
	binary.LittleEndian.PutUint32(m[0:], 0xffffffff)
	binary.LittleEndian.PutUint32(m[4:], uint32(n))
	copy(m[8:], fb)
	return m
}

func checkFrame(m []byte) error {
	if len(m) < 8 || binary.LittleEndian.Uint32(m) != 0xffffffff {
		return fmt.Errorf("no continuation marker")
	}
	if n := int(binary.LittleEndian.Uint32(m[4:])); n != len(m)-8 || len(m)%8 != 0 {
		return fmt.Errorf("framed length %d for %d bytes", n, len(m))
	}
	return nil
}

func findOnce(b, sub []byte) (int, error) {
	i := bytes.Index(b, sub)
	if i < 0 {
		return 0, fmt.Errorf("sentinel not found")
	}
	if bytes.Index(b[i+1:], sub) >= 0 {
		return 0, fmt.Errorf("sentinel found twice")
	}
	return i, nil
}
