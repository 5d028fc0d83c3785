package merge

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/stint-project/stint/formats"
)

func run(pid int64) formats.Run {
	return formats.Run{Binary: "/usr/bin/demo", BuildID: "d00d", Tool: "branch", PID: pid, MonoStartNS: 1000}
}

// writeTrace writes a plain trace file of events in batches of 2 rows
// and returns its name.
func writeTrace(t testing.TB, dir, name string, r formats.Run, mods []formats.Module, events []formats.Event) string {
	t.Helper()
	var buf bytes.Buffer
	w, err := formats.NewWriter(&buf, r, mods, formats.WithBatchRows(2))
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Write(events...); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// readAll returns every row of a file with its run, and the reader's
// runs and modules.
type row struct {
	run int
	ev  formats.Event
}

func readAll(t testing.TB, name string) ([]row, []RunInfo, []formats.Module, error) {
	t.Helper()
	r, err := Open(name)
	if err != nil {
		return nil, nil, nil, err
	}
	defer r.Close()
	var rows []row
	for r.Next() {
		b := r.Batch()
		for i := 0; i < b.Len(); i++ {
			rows = append(rows, row{b.RunOf(i), b.Event(i)})
		}
	}
	return rows, r.Runs(), r.Modules(), r.Err()
}

var (
	exe  = formats.Module{ID: 0, Path: "/usr/bin/demo", BuildID: "d00d", Base: 0x5000, Size: 0x1000, Rewritten: true}
	libc = formats.Module{ID: 1, Path: "/lib/libc.so.6", BuildID: "c0c0", Base: 0x7000, Size: 0x2000}
	libm = formats.Module{ID: 1, Path: "/lib/libm.so.6", BuildID: "abab", Base: 0x9000, Size: 0x2000}
)

func TestMergeRoundTrip(t *testing.T) {
	dir := t.TempDir()
	ev := func(sm uint16, src uint64, dm uint16, dst uint64) formats.Event {
		return formats.Event{Kind: formats.KindCall, TID: 1, Time: 5, SrcModule: sm, Src: src, DstModule: dm, Dst: dst}
	}
	a := writeTrace(t, dir, "a.arrow", run(1), []formats.Module{exe, libc},
		[]formats.Event{ev(0, 0x10, 1, 0x20), ev(1, 0x30, formats.NoModule, 0x1234), ev(0, 0x40, 0, 0x50)})
	libc2 := libc
	libc2.ID, libc2.Base = 0, 0x8000
	exe2 := exe
	exe2.ID = 1
	libm2 := libm
	libm2.ID = 2
	b := writeTrace(t, dir, "b.arrow", run(2), []formats.Module{libc2, exe2, libm2},
		[]formats.Event{ev(1, 0x10, 0, 0x20), ev(2, 0x60, 7, 0x70)})

	out := filepath.Join(dir, "ab.arrow")
	f, err := os.Create(out)
	if err != nil {
		t.Fatal(err)
	}
	st, err := Merge(context.Background(), f, []string{a, b})
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	if st.Runs != 2 || st.Modules != 3 || st.Rows != 5 || st.Inputs[1].UnknownModules != 1 {
		t.Errorf("stats %+v, want 2 runs, 3 modules, 5 rows, 1 unknown module in b", st)
	}
	rows, runs, mods, err := readAll(t, out)
	if err != nil {
		t.Fatal(err)
	}
	// Unified: demo 0, libc 1, libm 2.
	want := []row{
		{0, ev(0, 0x10, 1, 0x20)}, {0, ev(1, 0x30, formats.NoModule, 0x1234)}, {0, ev(0, 0x40, 0, 0x50)},
		{1, ev(0, 0x10, 1, 0x20)}, {1, ev(2, 0x60, formats.NoModule, 0x70)},
	}
	if !reflect.DeepEqual(rows, want) {
		t.Errorf("rows\nhave %+v\nwant %+v", rows, want)
	}
	if len(mods) != 3 || mods[1].BuildID != "c0c0" || mods[1].Base != 0 || mods[2].Path != "/lib/libm.so.6" {
		t.Errorf("modules %+v", mods)
	}
	wantRuns := []RunInfo{
		{Run: 0, File: "a.arrow", Info: run(1), Bases: []ModuleBase{{0, 0x5000}, {1, 0x7000}}},
		{Run: 1, File: "b.arrow", Info: run(2), Bases: []ModuleBase{{1, 0x8000}, {0, 0x5000}, {2, 0x9000}}},
	}
	if !reflect.DeepEqual(runs, wantRuns) {
		t.Errorf("runs\nhave %+v\nwant %+v", runs, wantRuns)
	}

	// A merged file merges again: its runs renumbered after a's.
	out2 := filepath.Join(dir, "aab.arrow")
	f, _ = os.Create(out2)
	if _, err := Merge(context.Background(), f, []string{a, out}); err != nil {
		t.Fatal(err)
	}
	f.Close()
	rows2, runs2, _, err := readAll(t, out2)
	if err != nil {
		t.Fatal(err)
	}
	if len(runs2) != 3 || runs2[2].File != "b.arrow" || runs2[2].Info.PID != 2 || len(rows2) != 8 || rows2[7].run != 2 || rows2[3] != (row{1, ev(0, 0x10, 1, 0x20)}) {
		t.Errorf("merged again: runs %+v rows %+v", runs2, rows2)
	}

	// Any Arrow reader opens a merged file.
	f, _ = os.Open(out)
	defer f.Close()
	ir, err := ipc.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	defer ir.Release()
	n := int64(0)
	for ir.Next() {
		n += ir.Record().NumRows()
	}
	if ir.Err() != nil || n != 5 || ir.Schema().NumFields() != NumCols {
		t.Errorf("arrow-go read %d rows, %d fields, err %v", n, ir.Schema().NumFields(), ir.Err())
	}
}

func TestMergeDamaged(t *testing.T) {
	dir := t.TempDir()
	evs := make([]formats.Event, 6)
	for i := range evs {
		evs[i] = formats.Event{Kind: formats.KindJmp, Src: uint64(i), Dst: uint64(i + 1)}
	}
	good := writeTrace(t, dir, "good.arrow", run(1), []formats.Module{exe}, evs)
	data, _ := os.ReadFile(good)

	// Cut inside the last batch: read up to the cut, reported.
	cut := filepath.Join(dir, "cut.arrow")
	os.WriteFile(cut, data[:len(data)-20], 0o644)
	var buf bytes.Buffer
	st, err := Merge(context.Background(), &buf, []string{good, cut})
	if err != nil {
		t.Fatal(err)
	}
	if in := st.Inputs[1]; in.Cut == nil || !errors.Is(in.Cut, formats.ErrTruncated) || in.Rows != 4 || in.End != formats.EndCut {
		t.Errorf("cut input: %+v, want cut after 4 rows", in)
	}

	// Garbage: an error naming the file.
	bad := filepath.Join(dir, "bad.arrow")
	os.WriteFile(bad, []byte("this is not a trace at all"), 0o644)
	_, err = Merge(context.Background(), &buf, []string{good, bad})
	var fe *formats.FormatError
	if err == nil || !errors.As(err, &fe) || !bytes.Contains([]byte(err.Error()), []byte("bad.arrow")) {
		t.Errorf("garbage input: err %v, want a FormatError naming bad.arrow", err)
	}

	// A damaged batch in the middle: an error, not a cut.
	mid := append([]byte(nil), data...)
	// The second batch's prefix follows the first batch; find the
	// second "ff ff ff ff" after the schema and spoil it.
	idx := nthIndex(mid, []byte{0xff, 0xff, 0xff, 0xff}, 3)
	mid[idx] = 0x12
	dm := filepath.Join(dir, "mid.arrow")
	os.WriteFile(dm, mid, 0o644)
	_, err = Merge(context.Background(), &buf, []string{dm})
	if err == nil || errors.Is(err, formats.ErrTruncated) || !bytes.Contains([]byte(err.Error()), []byte("mid.arrow")) {
		t.Errorf("damaged batch: err %v, want a non-truncation error naming mid.arrow", err)
	}
}

func nthIndex(b, sep []byte, n int) int {
	off := 0
	for i := 0; i < n; i++ {
		j := bytes.Index(b[off:], sep)
		if j < 0 {
			return -1
		}
		if i == n-1 {
			return off + j
		}
		off += j + len(sep)
	}
	return -1
}

// FuzzOpen feeds arbitrary bytes, seeded with a merged trace, to the
// merged-trace reader: errors, never panics.
func FuzzOpen(f *testing.F) {
	dir := f.TempDir()
	a := writeTrace(f, dir, "a.arrow", run(1), []formats.Module{exe, libc},
		[]formats.Event{{Kind: formats.KindCall, Src: 1, DstModule: 1, Dst: 2}, {Kind: formats.KindRet, Src: 3, Dst: 4}, {Kind: formats.KindPeriod, SrcModule: formats.NoModule, DstModule: formats.NoModule}})
	var buf bytes.Buffer
	if _, err := Merge(context.Background(), &buf, []string{a, a}); err != nil {
		f.Fatal(err)
	}
	f.Add(buf.Bytes())
	f.Add(buf.Bytes()[:buf.Len()/2])
	f.Fuzz(func(t *testing.T, data []byte) {
		p := filepath.Join(t.TempDir(), "f.arrow")
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
		r, err := Open(p)
		if err != nil {
			return
		}
		defer r.Close()
		for r.Next() {
			b := r.Batch()
			for i := 0; i < b.Len(); i++ {
				_ = b.Event(i)
				_ = b.RunOf(i)
			}
		}
	})
}

// TestPlainEnds reads a trace file whose stream ends each way the
// runtime can leave it: the batches and how it ended.
func TestPlainEnds(t *testing.T) {
	dir := t.TempDir()
	evs := make([]formats.Event, 5)
	for i := range evs {
		evs[i] = formats.Event{Kind: formats.KindJmp, TID: 3, Src: uint64(i), Dst: uint64(100 + i), Value: 7}
	}
	good := writeTrace(t, dir, "good.arrow", run(1), []formats.Module{exe}, evs) // batches of 2 rows
	data, _ := os.ReadFile(good)
	noMarker := data[:len(data)-8]
	tests := []struct {
		name string
		data []byte
		rows int
		end  formats.End
		cut  bool
	}{
		{"marker", data, 5, formats.EndMarker, false},
		{"eof", noMarker, 5, formats.EndEOF, false},
		{"zeros", append(append([]byte(nil), noMarker...), make([]byte, 4096)...), 5, formats.EndZeros, false},
		{"short zeros", append(append([]byte(nil), noMarker...), 0, 0), 5, formats.EndZeros, false},
		{"cut", data[:len(data)-30], 4, formats.EndCut, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := filepath.Join(dir, tt.name+".arrow")
			os.WriteFile(p, tt.data, 0o644)
			rows, _, _, err := readAll(t, p)
			r, _ := Open(p)
			for r.Next() {
			}
			end := r.End()
			r.Close()
			if len(rows) != tt.rows || end != tt.end || (err != nil) != tt.cut || tt.cut && !errors.Is(err, formats.ErrTruncated) {
				t.Errorf("%d rows, end %v, err %v; want %d rows, end %v, cut %v", len(rows), end, err, tt.rows, tt.end, tt.cut)
			}
			for i, rw := range rows {
				if rw.ev != evs[i] || rw.run != 0 {
					t.Errorf("row %d: %+v, want %+v", i, rw, evs[i])
				}
			}
		})
	}
}

// TestCompactPlain: merge reads a plain trace written by arrow-go (not
// the runtime's templates): the fuzz seed is a valid trace.
func TestCompactPlain(t *testing.T) {
	p := filepath.Join(t.TempDir(), "c.arrow")
	os.WriteFile(p, compactPlain(t, 3), 0o644)
	rows, runs, _, err := readAll(t, p)
	if err != nil || len(rows) != 3 || rows[2].ev.Src != 0x20 || runs[0].Info.Tool != "call" {
		t.Errorf("rows %+v runs %+v err %v", rows, runs, err)
	}
}

func TestViewUnaligned(t *testing.T) {
	b := make([]byte, 17)
	for i := range b {
		b[i] = byte(i)
	}
	aligned := view[uint64](b[:16], 2)
	unaligned := view[uint64](b[1:], 2)
	if aligned[0] != 0x0706050403020100 || unaligned[0] != 0x0807060504030201 || unaligned[1] != 0x100f0e0d0c0b0a09 {
		t.Errorf("view: %#x %#x", aligned, unaligned)
	}
	if len(view[uint16](nil, 0)) != 0 {
		t.Error("empty view not empty")
	}
}

// compactPlain writes a plain trace with arrow-go's writer and short
// metadata values: a small seed (the runtime's fixed-capacity metadata
// makes real traces 70 KB, which the fuzzer mutates very slowly).
func compactPlain(t testing.TB, rows int) []byte {
	t.Helper()
	md := arrow.NewMetadata([]string{formats.MetaVersion, formats.MetaRun, formats.MetaModules},
		[]string{formats.Version, `{"binary":"/b","tool":"call"}`, `{"id":0,"path":"/b"}` + "\n"})
	schema := arrow.NewSchema(formats.Schema().Fields(), &md)
	var buf bytes.Buffer
	w := ipc.NewWriter(&buf, ipc.WithSchema(schema))
	bld := array.NewRecordBuilder(memory.DefaultAllocator, schema)
	defer bld.Release()
	for i := 0; i < rows; i++ {
		bld.Field(formats.ColKind).(*array.Uint8Builder).Append(uint8(formats.KindCall))
		bld.Field(formats.ColTID).(*array.Uint32Builder).Append(1)
		bld.Field(formats.ColTime).(*array.Uint64Builder).Append(uint64(i))
		bld.Field(formats.ColSrcModule).(*array.Uint16Builder).Append(0)
		bld.Field(formats.ColSrc).(*array.Uint64Builder).Append(uint64(0x10 * i))
		bld.Field(formats.ColDstModule).(*array.Uint16Builder).Append(0)
		bld.Field(formats.ColDst).(*array.Uint64Builder).Append(0x1000)
		bld.Field(formats.ColValue).(*array.Uint64Builder).Append(0)
	}
	rec := bld.NewRecord()
	defer rec.Release()
	if err := w.Write(rec); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// FuzzOpenPlain is FuzzOpen for plain trace files, which merge reads
// with its own batch decoder.
func FuzzOpenPlain(f *testing.F) {
	small := compactPlain(f, 3)
	f.Add(small)
	f.Add(small[:len(small)-20])
	f.Fuzz(func(t *testing.T, data []byte) {
		p := filepath.Join(t.TempDir(), "f.arrow")
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
		r, err := Open(p)
		if err != nil {
			return
		}
		defer r.Close()
		for r.Next() {
			b := r.Batch()
			for i := 0; i < b.Len(); i++ {
				_ = b.Event(i)
			}
		}
	})
}
