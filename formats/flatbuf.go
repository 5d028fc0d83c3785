package formats

import (
	"encoding/binary"
	"fmt"
)

// fbuf reads a flatbuffer that may be hostile: every access is checked
// against the buffer, and the first failure sticks in err (reads after it
// return zeros), so a decoder checks once at the end. It knows only what
// validating a Message needs.
type fbuf struct {
	b   []byte
	err error
}

type fbTable struct {
	pos   int // start of the table
	vt    int // start of its vtable
	vtLen int // bytes of the vtable
}

func (f *fbuf) fail(format string, args ...any) {
	if f.err == nil {
		f.err = fmt.Errorf(format, args...)
	}
}

func (f *fbuf) u32(off int) uint32 {
	if f.err != nil || off < 0 || off+4 > len(f.b) {
		f.fail("flatbuffer: read of 4 bytes at %d outside %d bytes", off, len(f.b))
		return 0
	}
	return binary.LittleEndian.Uint32(f.b[off:])
}

func (f *fbuf) u16(off int) uint16 {
	if f.err != nil || off < 0 || off+2 > len(f.b) {
		f.fail("flatbuffer: read of 2 bytes at %d outside %d bytes", off, len(f.b))
		return 0
	}
	return binary.LittleEndian.Uint16(f.b[off:])
}

func (f *fbuf) i64(off int) int64 {
	if f.err != nil || off < 0 || off+8 > len(f.b) {
		f.fail("flatbuffer: read of 8 bytes at %d outside %d bytes", off, len(f.b))
		return 0
	}
	return int64(binary.LittleEndian.Uint64(f.b[off:]))
}

func (f *fbuf) u8(off int) uint8 {
	if f.err != nil || off < 0 || off >= len(f.b) {
		f.fail("flatbuffer: read of 1 byte at %d outside %d bytes", off, len(f.b))
		return 0
	}
	return f.b[off]
}

// table returns the table at pos.
func (f *fbuf) table(pos int) fbTable {
	vt := pos - int(int32(f.u32(pos)))
	vtLen := int(f.u16(vt))
	if f.err == nil && (vtLen < 4 || vtLen%2 != 0 || vt+vtLen > len(f.b)) {
		f.fail("flatbuffer: bad vtable at %d", vt)
	}
	return fbTable{pos: pos, vt: vt, vtLen: vtLen}
}

func (f *fbuf) root() fbTable {
	return f.table(int(f.u32(0)))
}

// field returns the position of the table's field in slot, or 0 if absent.
func (f *fbuf) field(t fbTable, slot int) int {
	o := 4 + 2*slot
	if f.err != nil || o+2 > t.vtLen {
		return 0
	}
	if rel := int(f.u16(t.vt + o)); rel != 0 {
		return t.pos + rel
	}
	return 0
}

func (f *fbuf) fieldI64(t fbTable, slot int) int64 {
	if p := f.field(t, slot); p != 0 {
		return f.i64(p)
	}
	return 0
}

func (f *fbuf) fieldI16(t fbTable, slot int) int16 {
	if p := f.field(t, slot); p != 0 {
		return int16(f.u16(p))
	}
	return 0
}

func (f *fbuf) fieldU8(t fbTable, slot int) uint8 {
	if p := f.field(t, slot); p != 0 {
		return f.u8(p)
	}
	return 0
}

// indirect follows the offset stored at the field; ok is false if the
// field is absent.
func (f *fbuf) indirect(t fbTable, slot int) (pos int, ok bool) {
	p := f.field(t, slot)
	if p == 0 {
		return 0, false
	}
	return p + int(f.u32(p)), f.err == nil
}

// vector returns the start and length of the vector of elem-byte elements
// in slot; n is -1 if the field is absent.
func (f *fbuf) vector(t fbTable, slot, elem int) (start, n int) {
	p, ok := f.indirect(t, slot)
	if !ok {
		return 0, -1
	}
	n = int(f.u32(p))
	start = p + 4
	if f.err == nil && (n < 0 || n > (len(f.b)-start)/elem) {
		f.fail("flatbuffer: vector of %d elements at %d overruns %d bytes", n, p, len(f.b))
		return 0, -1
	}
	return start, n
}

// msgInfo is what a reader needs from a Message flatbuffer.
type msgInfo struct {
	header  uint8
	bodyLen int64
	rows    int64
	values  []int64 // a RecordBatch's value buffer offsets in the body, by column (a binary column's offsets)
	// A binary last column's data buffer: offset in the body and length.
	dataOff, dataLen int64
}

// columns describes the columns a stream must have: their names (for
// messages) and value widths in bytes. A trace has the NumCols columns
// of [Schema]; a merged trace one more. With binary, the last column is
// variable-length binary (width 4: its int32 offsets; three buffers:
// validity, offsets, data), as a paths file's data column.
type columns struct {
	names  []string
	widths []int
	binary bool
}

// kind names what a stream of cols is, for errors.
func (cols columns) kind() string {
	if cols.binary {
		return "stint paths file"
	}
	return "stint trace"
}

// nbufs is how many buffers a record batch of cols has.
func (cols columns) nbufs() int {
	if cols.binary {
		return 2*len(cols.widths) + 1
	}
	return 2 * len(cols.widths)
}

// traceColumns are a trace's columns.
var traceColumns = columns{names: ColName[:], widths: ColWidth[:]}

// parseMessage validates the Message flatbuffer meta for a stream of
// columns cols. For a RecordBatch it checks everything a reader relies
// on: one field node per column of the batch's length with no nulls, two
// uncompressed buffers per column inside the body, value buffers long
// enough.
func parseMessage(meta []byte, cols columns) (msgInfo, error) {
	f := &fbuf{b: meta}
	var mi msgInfo
	m := f.root()
	ver := f.fieldI16(m, 0)
	mi.header = f.fieldU8(m, 1)
	mi.bodyLen = f.fieldI64(m, 3)
	if f.err != nil {
		return mi, f.err
	}
	if ver < 3 || ver > metadataV5 { // V4 (3) and V5 (4) share this layout
		return mi, fmt.Errorf("unsupported metadata version %d", ver)
	}
	if mi.bodyLen < 0 {
		return mi, fmt.Errorf("negative body length %d", mi.bodyLen)
	}
	switch mi.header {
	case headerSchema:
		if mi.bodyLen != 0 {
			return mi, fmt.Errorf("schema message has a body of %d bytes", mi.bodyLen)
		}
		sp, ok := f.indirect(m, 2)
		if !ok {
			return mi, fmt.Errorf("schema message without a schema")
		}
		return mi, f.checkSchema(f.table(sp), len(cols.widths))
	case headerRecordBatch:
	default:
		return mi, fmt.Errorf("unexpected %s message", headerName(mi.header))
	}
	rp, ok := f.indirect(m, 2)
	if !ok {
		return mi, fmt.Errorf("record batch message without a record batch")
	}
	rb := f.table(rp)
	mi.rows = f.fieldI64(rb, 0)
	nodes, nn := f.vector(rb, 1, 16)
	bufs, nb := f.vector(rb, 2, 16)
	_, compressed := f.indirect(rb, 3)
	if f.err != nil {
		return mi, f.err
	}
	ncols := len(cols.widths)
	switch {
	case mi.rows < 0 || mi.rows > mi.bodyLen:
		return mi, fmt.Errorf("record batch of %d rows in a body of %d bytes", mi.rows, mi.bodyLen)
	case compressed:
		return mi, fmt.Errorf("compressed record batches are not supported")
	case nn != ncols:
		return mi, fmt.Errorf("record batch has %d field nodes, want %d", nn, ncols)
	case nb != cols.nbufs():
		return mi, fmt.Errorf("record batch has %d buffers, want %d", nb, cols.nbufs())
	}
	mi.values = make([]int64, ncols)
	for c := 0; c < ncols; c++ {
		n, nulls := f.i64(nodes+16*c), f.i64(nodes+16*c+8)
		if n != mi.rows || nulls != 0 {
			return mi, fmt.Errorf("column %s: %d values with %d nulls in a batch of %d rows", cols.names[c], n, nulls, mi.rows)
		}
		nk, width := 2, int64(cols.widths[c])
		if cols.binary && c == ncols-1 {
			nk, width = 3, 4 // validity, offsets (rows+1 of them), data
		}
		for k := 0; k < nk; k++ {
			i := 2*c + k
			off, ln := f.i64(bufs+16*i), f.i64(bufs+16*i+8)
			if off < 0 || ln < 0 || off > mi.bodyLen || ln > mi.bodyLen-off {
				return mi, fmt.Errorf("column %s: buffer %d (offset %d, length %d) outside the body of %d bytes", cols.names[c], k, off, ln, mi.bodyLen)
			}
			need := mi.rows * width
			if nk == 3 {
				need += 4
			}
			if k == 1 && ln < need {
				return mi, fmt.Errorf("column %s: value buffer of %d bytes for %d rows", cols.names[c], ln, mi.rows)
			}
			switch k {
			case 1:
				mi.values[c] = off
			case 2:
				mi.dataOff, mi.dataLen = off, ln
			}
		}
	}
	return mi, f.err
}

func headerName(h uint8) string {
	switch h {
	case 0:
		return "NONE"
	case headerSchema:
		return "Schema"
	case 2:
		return "DictionaryBatch"
	case headerRecordBatch:
		return "RecordBatch"
	case 4:
		return "Tensor"
	case 5:
		return "SparseTensor"
	}
	return fmt.Sprintf("header type %d", h)
}

// checkSchema bounds what arrow-go's schema decoder allocates and
// rejects what a stint stream never has: ncols flat, non-dictionary
// fields, and every vector and string inside the buffer.
func (f *fbuf) checkSchema(s fbTable, ncols int) error {
	fields, nf := f.vector(s, 1, 4)
	if f.err == nil && nf != ncols {
		return fmt.Errorf("schema has %d columns, want %d", max(nf, 0), ncols)
	}
	for i := 0; i < nf && f.err == nil; i++ {
		p := fields + 4*i
		ft := f.table(p + int(f.u32(p)))
		f.vector(ft, 0, 1) // name
		if _, n := f.vector(ft, 5, 4); n > 0 {
			return fmt.Errorf("schema column %d has %d children, want none", i, n)
		}
		if _, ok := f.indirect(ft, 4); ok {
			return fmt.Errorf("schema column %d is dictionary-encoded", i)
		}
		f.keyValues(ft, 6)
	}
	f.keyValues(s, 2)
	return f.err
}

// keyValues checks the vector of KeyValue tables in slot.
func (f *fbuf) keyValues(t fbTable, slot int) {
	kv, n := f.vector(t, slot, 4)
	for i := 0; i < n && f.err == nil; i++ {
		p := kv + 4*i
		e := f.table(p + int(f.u32(p)))
		f.vector(e, 0, 1)
		f.vector(e, 1, 1)
	}
}
