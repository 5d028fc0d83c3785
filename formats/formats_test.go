package formats

import (
	"bytes"
	"encoding/binary"
	"errors"
	"flag"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

func testRun() Run {
	return Run{Binary: "/usr/bin/gzip", BuildID: "0123abcd", Tool: "branch", Options: "tool=branch every=0",
		PID: 4242, PPID: 1, StartNS: 1795000000000000000, MonoStartNS: 123456789}
}

func testModules() []Module {
	return []Module{
		{ID: 0, Path: "/usr/bin/gzip", BuildID: "0123abcd", Base: 0x555555554000, Size: 0x19000, Rewritten: true},
		{ID: 1, Path: "/lib/x86_64-linux-gnu/libc.so.6", Base: 0x7ffff7d80000, Size: 0x1d5000},
	}
}

// testEvents returns n events with every field distinct and non-zero
// somewhere, including the extremes of each column.
func testEvents(n int) []Event {
	ev := make([]Event, n)
	for i := range ev {
		ev[i] = Event{
			Kind:      Kind(1 + i%int(MaxKind)),
			TID:       uint32(1000 + i%3),
			Time:      123456789 + uint64(i)*17,
			SrcModule: uint16(i % 2),
			Src:       0x1000 + uint64(i)*5,
			DstModule: uint16(i % 2),
			Dst:       0x2000 + uint64(i)*7,
		}
		if ev[i].Kind == KindSyscall {
			ev[i].Dst, ev[i].Value = 0, uint64(i)
		}
	}
	if n > 1 {
		ev[n-1].DstModule, ev[n-1].Dst = NoModule, 0xffffffffffffff00
		ev[n-1].TID = 0xffffffff
		ev[n-1].Time = ^uint64(0)
	}
	return ev
}

// writeTrace returns a trace of events in batches of rows; withEOS
// keeps the end-of-stream marker.
func writeTrace(t testing.TB, events []Event, rows int, withEOS bool) []byte {
	t.Helper()
	var buf bytes.Buffer
	w, err := NewWriter(&buf, testRun(), testModules(), WithBatchRows(rows))
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Write(events...); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	b := buf.Bytes()
	if !withEOS {
		b = b[:len(b)-8]
	}
	return b
}

func TestKindString(t *testing.T) {
	for _, tc := range []struct {
		k    Kind
		want string
	}{
		{KindJccTaken, "jcc-taken"}, {KindJccNotTaken, "jcc-not-taken"}, {KindJmp, "jmp"},
		{KindCall, "call"}, {KindRet, "ret"}, {KindIndJmp, "ind-jmp"}, {KindIndCall, "ind-call"},
		{KindSyscall, "syscall"}, {KindBlock, "block"}, {KindContext, "context"}, {0, "kind(0)"}, {200, "kind(200)"},
		{KindPeriod, "period"}, {KindPeriodStats, "period-stats"}, {KindPeriodQoS, "period-qos"},
		{KindRunEnd, "run-end"}, {KindRefusedBase + KindRet, "refused-ret"},
		{KindSampleRun, "sample-run"}, {KindSampleSet, "sample-set"}, {KindSampleReader, "sample-reader"},
		{KindSampledBase + KindCall, "sampled-call"}, {KindSampledBase + KindSyscall, "sampled-syscall"},
	} {
		if have := tc.k.String(); have != tc.want {
			t.Errorf("Kind(%d).String() = %q, want %q", tc.k, have, tc.want)
		}
		if _, sampled := tc.k.Sampled(); tc.k.Valid() || tc.k.IsRecord() || sampled {
			if have, err := ParseKind(strings.ToUpper(tc.want)); err != nil || have != tc.k {
				t.Errorf("ParseKind(%q) = %v, %v; want %v", tc.want, have, err, tc.k)
			}
		}
	}
	for _, bad := range []string{"jump", "refused-period", "refused-", "kind(3)", "sampled-period", "sampled-", "sampled-sampled-call"} {
		if _, err := ParseKind(bad); err == nil {
			t.Errorf("ParseKind(%q): no error", bad)
		}
	}
	for tl := ToolBranch; tl <= ToolBlock; tl++ {
		if have, err := ParseTool(tl.String()); err != nil || have != tl {
			t.Errorf("ParseTool(%q) = %v, %v", tl, have, err)
		}
	}
}

func TestTemplate(t *testing.T) {
	tp, err := Template()
	if err != nil {
		t.Fatal(err)
	}
	t2, err := buildTemplate()
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(tp, t2) {
		t.Fatal("two builds of the template differ")
	}
	for _, m := range [][]byte{tp.Schema, tp.Batch} {
		if err := checkFrame(m); err != nil {
			t.Fatal(err)
		}
	}
	if have := string(tp.Schema[tp.RunOff : tp.RunOff+RunCap]); strings.Trim(have, " ") != "" {
		t.Error("run metadata is not all spaces")
	}
	if have := binary.LittleEndian.Uint32(tp.Schema[tp.RunOff-4:]); have != RunCap {
		t.Errorf("run string length prefix = %d, want %d", have, RunCap)
	}
	if have := binary.LittleEndian.Uint32(tp.Schema[tp.ModulesOff-4:]); have != ModulesCap {
		t.Errorf("modules string length prefix = %d, want %d", have, ModulesCap)
	}
	offs := append([]int{tp.OffRows, tp.OffBodyLen}, tp.OffNodeLen[:]...)
	offs = append(append(offs, tp.OffBufOff[:]...), tp.OffBufLen[:]...)
	seen := map[int]bool{}
	for _, o := range offs {
		if o%8 != 0 || o < 8 || o+8 > len(tp.Batch) || seen[o] {
			t.Errorf("patch offset %d: not 8-aligned, outside the %d-byte message, or repeated", o, len(tp.Batch))
		}
		seen[o] = true
		if v := binary.LittleEndian.Uint64(tp.Batch[o:]); v != 0 {
			t.Errorf("template holds %#x at patch offset %d, want 0", v, o)
		}
	}
}

func TestRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		name   string
		n      int
		rows   int
		eos    bool
		end    End
		nbatch int
	}{
		{"empty", 0, 4, true, EndMarker, 0},
		{"one", 1, 4, true, EndMarker, 1},
		{"batches", 10, 4, true, EndMarker, 3},
		{"no-marker", 10, 3, false, EndEOF, 4},
		{"big", 100000, 65536, true, EndMarker, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
			defer mem.AssertSize(t, 0)
			want := testEvents(tc.n)
			b := writeTrace(t, want, tc.rows, tc.eos)
			tr, err := Read(bytes.NewReader(b), WithAllocator(mem))
			if err != nil {
				t.Fatal(err)
			}
			if len(tr.Events) != len(want) || (len(want) > 0 && !reflect.DeepEqual(tr.Events, want)) {
				t.Fatalf("read %d events, want %d (equal: %v)", len(tr.Events), len(want), reflect.DeepEqual(tr.Events, want))
			}
			if tr.End != tc.end || tr.Batches != tc.nbatch {
				t.Errorf("have end %v, %d batches; want %v, %d", tr.End, tr.Batches, tc.end, tc.nbatch)
			}
			if tr.Run != testRun() || !reflect.DeepEqual(tr.Modules, testModules()) {
				t.Errorf("metadata: have %+v %+v", tr.Run, tr.Modules)
			}
			if m := tr.Module(1); m == nil || m.Path != testModules()[1].Path || tr.Module(7) != nil {
				t.Errorf("Module lookup: %v", m)
			}
			// A reader that does not know the input's size reads the same.
			tr2, err := Read(struct{ io.Reader }{bytes.NewReader(b)}, WithAllocator(mem))
			if err != nil || !reflect.DeepEqual(tr2, tr) {
				t.Errorf("streamed read differs: %v", err)
			}
			// arrow-go's own reader agrees on every value.
			checkWithArrow(t, b, want, mem)
		})
	}
}

func checkWithArrow(t *testing.T, b []byte, want []Event, mem memory.Allocator) {
	t.Helper()
	r, err := ipc.NewReader(bytes.NewReader(b), ipc.WithAllocator(mem))
	if err != nil {
		t.Fatalf("arrow-go: %v", err)
	}
	defer r.Release()
	var have []Event
	for r.Next() {
		rec := r.Record()
		for c := 0; c < NumCols; c++ {
			if rec.Column(c).NullN() != 0 {
				t.Errorf("arrow-go: column %d has nulls", c)
			}
		}
		have = AppendEvents(have, rec)
	}
	if err := r.Err(); err != nil {
		t.Fatalf("arrow-go: %v", err)
	}
	if len(have) != len(want) || (len(want) > 0 && !reflect.DeepEqual(have, want)) {
		t.Fatalf("arrow-go read %d events, want %d", len(have), len(want))
	}
	md := r.Schema().Metadata()
	if v, ok := md.GetValue(MetaVersion); !ok || v != Version {
		t.Errorf("arrow-go: %s = %q", MetaVersion, v)
	}
}

// TestCut cuts a trace at every offset and checks that complete batches
// are read and the rest is reported with the offset of the cut batch.
func TestCut(t *testing.T) {
	events := testEvents(7)
	b := writeTrace(t, events, 3, false)
	tp, _ := Template()
	// batch boundaries: schema, then batches of 3, 3, 1 rows
	bounds := []int{len(tp.Schema)}
	for _, n := range []int{3, 3, 1} {
		body := 0
		for c := 0; c < NumCols; c++ {
			body += (n*ColWidth[c] + 7) &^ 7
		}
		bounds = append(bounds, bounds[len(bounds)-1]+len(tp.Batch)+body)
	}
	if bounds[3] != len(b) {
		t.Fatalf("computed length %d, have %d", bounds[3], len(b))
	}
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)
	for cut := bounds[0]; cut <= len(b); cut++ {
		complete := 0
		for complete < 3 && bounds[complete+1] <= cut {
			complete++
		}
		for _, known := range []bool{true, false} {
			var r io.Reader = bytes.NewReader(b[:cut])
			if !known {
				r = struct{ io.Reader }{r}
			}
			tr, err := Read(r, WithAllocator(mem))
			wantEvents := min(3*complete, 7)
			if tr == nil || len(tr.Events) != wantEvents || tr.Batches != complete {
				t.Fatalf("cut at %d: have %v, want %d events in %d batches", cut, tr, wantEvents, complete)
			}
			if !reflect.DeepEqual(tr.Events, events[:wantEvents]) && wantEvents > 0 {
				t.Fatalf("cut at %d: events differ", cut)
			}
			if cut == bounds[complete] {
				if err != nil || tr.End != EndEOF {
					t.Fatalf("cut at boundary %d: %v, %v", cut, err, tr.End)
				}
				continue
			}
			var fe *FormatError
			if !errors.As(err, &fe) || !errors.Is(err, ErrTruncated) || fe.Offset != int64(bounds[complete]) || tr.End != EndCut {
				t.Fatalf("cut at %d: have %v (%v), want truncated at offset %d", cut, err, tr.End, bounds[complete])
			}
		}
	}
}

// TestZeroTail: the runtime's file after a crash: sealed batches, then
// zeros (the unsealed batch and the file's reserve), including a batch
// whose continuation marker was not yet written.
func TestZeroTail(t *testing.T) {
	events := testEvents(5)
	b := writeTrace(t, events, 2, false)
	tp, _ := Template()
	half := writeTrace(t, testEvents(1), 1, false)[len(tp.Schema):]
	copy(half, []byte{0, 0, 0, 0}) // marker not written: the batch is not sealed
	b = append(append(b, half...), make([]byte, 4096)...)
	tr, err := Read(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(tr.Events, events) || tr.End != EndZeros || tr.Batches != 3 {
		t.Errorf("have %d events, end %v, %d batches", len(tr.Events), tr.End, tr.Batches)
	}
}

func TestBadInput(t *testing.T) {
	good := writeTrace(t, testEvents(3), 2, true)
	tp, _ := Template()
	otherSchema := func(s *arrow.Schema) []byte {
		var buf bytes.Buffer
		w := ipc.NewWriter(&buf, ipc.WithSchema(s))
		w.Close()
		return buf.Bytes()
	}
	withMeta := func(run, mods string) []byte {
		b := append([]byte(nil), good...)
		copy(b[tp.RunOff:tp.RunOff+RunCap], pad([]byte(run), RunCap))
		copy(b[tp.ModulesOff:tp.ModulesOff+ModulesCap], pad([]byte(mods), ModulesCap))
		return b
	}
	patchBatch := func(off int, v uint64) []byte {
		b := append([]byte(nil), good...)
		binary.LittleEndian.PutUint64(b[len(tp.Schema)+off:], v)
		return b
	}
	wt := fields()
	wt[ColTime].Type = arrow.PrimitiveTypes.Int64
	wrongType := arrow.NewSchema(wt, nil)
	md := arrow.NewMetadata([]string{MetaVersion, MetaRun, MetaModules}, []string{"2", "", ""})
	for _, tc := range []struct {
		name string
		in   []byte
		off  int64
		msg  string
	}{
		{"empty", nil, 0, "empty input"},
		{"text", []byte("hello, world\n"), 0, "not an Arrow IPC stream"},
		{"elf", []byte("\x7fELF\x02\x01\x01\x00"), 0, "not an Arrow IPC stream"},
		{"eos-only", []byte{0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0}, 0, "before its schema"},
		{"zero-first", make([]byte, 16), 0, "not an Arrow IPC stream"},
		{"huge-meta", []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f}, 0, "out of range"},
		{"wrong-columns", otherSchema(arrow.NewSchema(fields()[:3], nil)), 0, "schema has 3 columns"},
		{"wrong-type", otherSchema(wrongType), 0, "schema column 2 is time int64"},
		{"no-metadata", otherSchema(Schema()), 0, "no \"stint.version\""},
		{"version", otherSchema(arrow.NewSchema(fields(), &md)), 0, "unsupported stint.version \"2\""},
		{"bad-run", withMeta(`{"binary":`, ""), int64(tp.RunOff), "bad run metadata"},
		{"bad-module", withMeta("", `{"id":0}`+"\n"+`{"id":"x"}`+"\n"), int64(tp.ModulesOff + 9), "module table line 2"},
		{"dup-module", withMeta("", `{"id":3}`+"\n"+`{"id":3}`+"\n"), int64(tp.ModulesOff + 9), "duplicate module id 3"},
		{"garbage-after", append(good[:len(good)-8:len(good)-8], "junkjunk"...), int64(len(good) - 8), "bad message prefix"},
		{"rows-too-many", patchBatch(tp.OffRows, 1000), int64(len(tp.Schema)), "1000 rows in a body of"},
		{"node-len", patchBatch(tp.OffNodeLen[3], 1), int64(len(tp.Schema)), "column src_module: 1 values"},
		{"buf-outside", patchBatch(tp.OffBufOff[9], 1<<40), int64(len(tp.Schema)), "column src: buffer 1"},
		{"buf-short", patchBatch(tp.OffBufLen[5], 8), int64(len(tp.Schema)), "column time: value buffer of 8 bytes for 2 rows"},
		{"body-huge", patchBatch(tp.OffBodyLen, 1<<62), int64(len(tp.Schema)), "input ends inside the body"},
		{"schema-again", append(good[:len(good)-8:len(good)-8], tp.Schema...), int64(len(good) - 8), "unexpected Schema message"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, known := range []bool{true, false} {
				var r io.Reader = bytes.NewReader(tc.in)
				if !known {
					r = struct{ io.Reader }{r}
				}
				_, err := Read(r)
				var fe *FormatError
				if !errors.As(err, &fe) {
					t.Fatalf("have error %v (%T), want a *FormatError", err, err)
				}
				if fe.Offset != tc.off || !strings.Contains(err.Error(), tc.msg) {
					t.Errorf("have %q at offset %d, want %q at offset %d", err, fe.Offset, tc.msg, tc.off)
				}
			}
		})
	}
}

func TestModulesTail(t *testing.T) {
	tp, _ := Template()
	b := writeTrace(t, testEvents(2), 2, true)
	lines := `{"id":0,"path":"/a"}` + "\n" + `{"id":1,"path":"/b","bu`
	copy(b[tp.ModulesOff:], pad([]byte(lines), ModulesCap))
	copy(b[tp.RunOff:], pad(nil, RunCap))
	tr, err := Read(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	if len(tr.Modules) != 1 || tr.Modules[0].Path != "/a" || tr.Run != (Run{}) {
		t.Errorf("have modules %+v, run %+v; want only /a and an empty run", tr.Modules, tr.Run)
	}
}

func TestWriterErrors(t *testing.T) {
	long := strings.Repeat("x", RunCap)
	if _, err := NewWriter(io.Discard, Run{Binary: long}, nil); err == nil {
		t.Error("run over capacity: no error")
	}
	if _, err := NewWriter(io.Discard, Run{}, []Module{{ID: NoModule}}); err == nil {
		t.Error("module id NoModule: no error")
	}
	if _, err := NewWriter(io.Discard, Run{}, []Module{{ID: 1}, {ID: 1}}); err == nil {
		t.Error("duplicate module id: no error")
	}
	var many []Module
	for i := 0; i < 1000; i++ {
		many = append(many, Module{ID: uint16(i), Path: strings.Repeat("p", 60)})
	}
	if _, err := NewWriter(io.Discard, Run{}, many); err == nil {
		t.Error("module table over capacity: no error")
	}
}

// TestGolden pins the writer's bytes; the files also seed FuzzReader.
func TestGolden(t *testing.T) {
	for _, tc := range []struct {
		file string
		b    []byte
	}{
		{"small.arrow", writeTrace(t, testEvents(7), 3, true)},
		{"cut.arrow", writeTrace(t, testEvents(7), 3, false)[:len(writeTrace(t, testEvents(7), 3, false))-20]},
		{"zeros.arrow", append(writeTrace(t, testEvents(4), 2, false), make([]byte, 64)...)},
	} {
		name := filepath.Join("testdata", tc.file)
		if *update {
			if err := os.WriteFile(name, tc.b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		have, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(have, tc.b) {
			t.Errorf("%s differs from the writer's output (run with -update if intended)", name)
		}
	}
}

func FuzzReader(f *testing.F) {
	files, _ := filepath.Glob("testdata/*.arrow")
	for _, name := range files {
		b, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	// Small seeds too: the fixed-capacity metadata makes real traces 70 KB,
	// which the fuzzer mutates slowly.
	f.Add(compactTrace(f, testEvents(5), 2))
	f.Add(compactTrace(f, nil, 1))
	f.Fuzz(func(t *testing.T, b []byte) {
		mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
		defer mem.AssertSize(t, 0)
		tr, err := Read(bytes.NewReader(b), WithAllocator(mem))
		if err != nil {
			var fe *FormatError
			if !errors.As(err, &fe) {
				t.Fatalf("error is not a *FormatError: %v", err)
			}
		}
		if tr != nil && len(tr.Events) > len(b) {
			t.Fatalf("%d events from %d bytes", len(tr.Events), len(b))
		}
	})
}

func TestShortZeroTail(t *testing.T) {
	b := append(writeTrace(t, testEvents(3), 2, false), 0, 0)
	tr, err := Read(bytes.NewReader(b))
	if err != nil || tr.End != EndZeros || len(tr.Events) != 3 {
		t.Errorf("have %v, end %v, %d events; want no error, zeros, 3 events", err, tr.End, len(tr.Events))
	}
}

func BenchmarkRead(b *testing.B) {
	data := writeTrace(b, testEvents(1<<16), 1<<14, true)
	b.SetBytes(int64(len(data)))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		r, err := NewReader(bytes.NewReader(data))
		if err != nil {
			b.Fatal(err)
		}
		var ev []Event
		for r.Next() {
			ev = r.AppendEvents(ev[:0])
		}
		if r.Err() != nil {
			b.Fatal(r.Err())
		}
		r.Release()
	}
}

func BenchmarkWrite(b *testing.B) {
	ev := testEvents(1 << 16)
	b.SetBytes(int64(len(ev)) * 41)
	for i := 0; i < b.N; i++ {
		w, err := NewWriter(io.Discard, testRun(), testModules())
		if err != nil {
			b.Fatal(err)
		}
		w.Write(ev...)
		if err := w.Close(); err != nil {
			b.Fatal(err)
		}
	}
}

// compactTrace returns a trace whose metadata values are short (the
// reader does not require the runtime's fixed capacities).
func compactTrace(t testing.TB, events []Event, rows int) []byte {
	t.Helper()
	var buf bytes.Buffer
	w := ipc.NewWriter(&buf, ipc.WithSchema(schemaWith(`{"pid":1}`, `{"id":0,"path":"/a"}`+"\n")))
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	b := buf.Bytes()[:buf.Len()-8]
	tp, err := Template()
	if err != nil {
		t.Fatal(err)
	}
	for len(events) > 0 {
		n := min(rows, len(events))
		m, body := encodeBatch(tp, events[:n])
		b = append(append(b, m...), body...)
		events = events[n:]
	}
	return append(b, 0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0)
}

func TestCompactTrace(t *testing.T) {
	b := compactTrace(t, testEvents(5), 2)
	tr, err := Read(bytes.NewReader(b))
	if err != nil || len(tr.Events) != 5 || tr.Run.PID != 1 || len(tr.Modules) != 1 {
		t.Fatalf("have %v, %+v", err, tr)
	}
	if len(b) > 4096 {
		t.Errorf("compact trace is %d bytes", len(b))
	}
}
