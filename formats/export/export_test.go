package export

import (
	"bufio"
	"bytes"
	"context"
	"encoding/csv"
	"fmt"
	"io"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"
	"github.com/google/pprof/profile"
	"github.com/stint-project/stint/formats"
)

// row is an event of a test source, with its run.
type row struct {
	formats.Event
	Run uint16
}

// sliceSource is a Source over rows in memory, batchRows at a time.
type sliceSource struct {
	mods      []formats.Module
	tool      formats.Tool
	rows      []row
	batchRows int
	pos       int
	b         Batch
	err       error
}

func (s *sliceSource) Modules() []formats.Module { return s.mods }
func (s *sliceSource) Tool() formats.Tool        { return s.tool }
func (s *sliceSource) Batch() *Batch             { return &s.b }
func (s *sliceSource) Err() error                { return s.err }

func (s *sliceSource) Next() bool {
	if s.pos >= len(s.rows) {
		return false
	}
	n := s.batchRows
	if n <= 0 {
		n = 3
	}
	end := min(len(s.rows), s.pos+n)
	s.b = Batch{}
	for _, r := range s.rows[s.pos:end] {
		s.b.Kind = append(s.b.Kind, uint8(r.Kind))
		s.b.TID = append(s.b.TID, r.TID)
		s.b.Time = append(s.b.Time, r.Time)
		s.b.SrcModule = append(s.b.SrcModule, r.SrcModule)
		s.b.Src = append(s.b.Src, r.Src)
		s.b.DstModule = append(s.b.DstModule, r.DstModule)
		s.b.Dst = append(s.b.Dst, r.Dst)
		s.b.Value = append(s.b.Value, r.Value)
		s.b.Run = append(s.b.Run, r.Run)
	}
	s.pos = end
	return true
}

var _ Source = (*sliceSource)(nil)

// The test program: module 0 is /bin/prog (main, f, g; with a line
// table of /src/prog.c and code for f), module 1 is a libc with symbols
// only (puts, exit).
var testMods = []formats.Module{
	{ID: 0, Path: "/bin/prog", BuildID: "abcd", Size: 0x3000, Rewritten: true},
	{ID: 1, Path: "/lib/libc.so.6", BuildID: "ef01", Size: 0x1000},
}

func testSymbols(m formats.Module) *Symbols {
	switch m.ID {
	case 0:
		code := map[uint64][]byte{
			0x1100: {0x90, 0x90, 0xc3, 0xcc}, // nop; nop; ret
			0x1200: {0x0f, 0x05, 0x90, 0xc3}, // syscall; nop; ret
		}
		return &Symbols{
			Funcs: []Func{{"main", 0x1000, 0x1100}, {"f", 0x1100, 0x1200}, {"g", 0x1200, 0x1300}},
			Files: []string{"/src/prog.c"},
			Lines: []Line{
				{0x1000, 0x1010, 0, 10}, {0x1010, 0x1100, 0, 11},
				{0x1100, 0x1102, 0, 20}, {0x1102, 0x1200, 0, 21},
				{0x1200, 0x1300, 0, 30},
			},
			LinkBase: 0x1000,
			Code: func(addr uint64, n int) []byte {
				for at, b := range code {
					if addr >= at && addr < at+uint64(len(b)) {
						return b[addr-at : min(uint64(len(b)), addr-at+uint64(n))]
					}
				}
				return nil
			},
		}
	case 1:
		return &Symbols{Funcs: []Func{{"puts", 0x500, 0x600}, {"exit", 0x600, 0x700}}}
	}
	return nil
}

func ev(k formats.Kind, tid uint32, sm uint16, src uint64, dm uint16, dst uint64) formats.Event {
	return formats.Event{Kind: k, TID: tid, SrcModule: sm, Src: src, DstModule: dm, Dst: dst}
}

// callRows is a call trace of two threads: thread 1 calls f twice from
// main (f calling g once), then returns to an address no frame called
// from; thread 2 calls g indirectly from main.
func callRows() []row {
	return []row{
		{Event: ev(formats.KindCall, 1, 0, 0x1010, 0, 0x1100)},
		{Event: ev(formats.KindCall, 1, 0, 0x1120, 0, 0x1200)},
		{Event: ev(formats.KindIndCall, 2, 0, 0x1010, 0, 0x1200)},
		{Event: ev(formats.KindRet, 1, 0, 0x1250, 0, 0x1125)},
		{Event: ev(formats.KindRet, 1, 0, 0x1130, 0, 0x1015)},
		{Event: ev(formats.KindCall, 1, 0, 0x1010, 0, 0x1100)},
		{Event: ev(formats.KindRet, 1, 0, 0x1130, 0, 0x9999)}, // unmatched
		{Event: formats.Event{Kind: formats.KindRunEnd, SrcModule: formats.NoModule, DstModule: formats.NoModule}},
	}
}

func export(t *testing.T, f Format, src Source, opts Options) ([]byte, Stats) {
	t.Helper()
	if opts.Symbolize == nil {
		opts.Symbolize = testSymbols
	}
	var buf bytes.Buffer
	st, err := Write(context.Background(), &buf, f, src, opts)
	if err != nil {
		t.Fatalf("Write %v: %v", f, err)
	}
	return buf.Bytes(), st
}

func TestParseFormat(t *testing.T) {
	for _, f := range Formats() {
		have, err := ParseFormat(strings.ToUpper(f.String()))
		if err != nil || have != f {
			t.Errorf("ParseFormat(%q) = %v, %v; want %v", f.String(), have, err, f)
		}
	}
	if _, err := ParseFormat("svg"); err == nil || !strings.Contains(err.Error(), "pprof") {
		t.Errorf("ParseFormat(svg) error = %v, want one listing the formats", err)
	}
}

func TestCollapsedStacks(t *testing.T) {
	for _, tt := range []struct {
		name          string
		maxDepth      int
		want          string
		wantTruncated int64
	}{
		{"full", 0, "main;f 2\nmain;f;g 1\nmain;g 1\n", 0},
		{"depth 1", 1, "main;f 3\nmain;g 1\n", 1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			src := &sliceSource{mods: testMods, tool: formats.ToolCall, rows: callRows()}
			out, st := export(t, Collapsed, src, Options{MaxDepth: tt.maxDepth})
			if have := string(out); have != tt.want {
				t.Errorf("have\n%swant\n%s", have, tt.want)
			}
			if st.Unmatched != 1 || st.Truncated != tt.wantTruncated || st.Events != 7 || st.Records != 1 || st.Rows != 8 {
				t.Errorf("stats %+v: want 1 unmatched, %d truncated, 7 events, 1 record, 8 rows", st, tt.wantTruncated)
			}
		})
	}
}

func TestCollapsedFlat(t *testing.T) {
	rows := []row{
		{Event: ev(formats.KindJccTaken, 1, 0, 0x1105, 0, 0x1100)},
		{Event: ev(formats.KindJccTaken, 1, 0, 0x1105, 0, 0x1100)},
		{Event: ev(formats.KindJmp, 1, 0, 0x1010, 0, 0x1100)},
		{Event: ev(formats.KindCall, 1, 0, 0x1120, 1, 0x500)},
		{Event: ev(formats.KindRet, 1, 1, 0x550, 0, 0x1125)},
		{Event: ev(formats.KindJmp, 1, 0, 0x2000, 0, 0x1100)},                        // src in no function
		{Event: ev(formats.KindJmp, 1, formats.NoModule, 0x7f0000001000, 0, 0x1100)}, // src in no module
	}
	src := &sliceSource{mods: testMods, tool: formats.ToolBranch, rows: rows}
	out, st := export(t, Collapsed, src, Options{})
	want := "?;0x7f0000001000 1\nlibc.so.6;puts 1\nprog;f 3\nprog;main 1\nprog;prog+0x2000 1\n"
	if have := string(out); have != want {
		t.Errorf("have\n%swant\n%s", have, want)
	}
	if st.NoModule != 1 {
		t.Errorf("NoModule = %d, want 1", st.NoModule)
	}
}

// pprofStacks returns each sample of p as "fn;fn;… (leaf first) = value".
func pprofStacks(p *profile.Profile) []string {
	var out []string
	for _, s := range p.Sample {
		var names []string
		for _, l := range s.Location {
			for _, ln := range l.Line {
				names = append(names, fmt.Sprintf("%s@%d", ln.Function.Name, ln.Line))
			}
		}
		out = append(out, strings.Join(names, ";")+"="+strconv.FormatInt(s.Value[0], 10))
	}
	sort.Strings(out)
	return out
}

func TestPProfStacks(t *testing.T) {
	src := &sliceSource{mods: testMods, tool: formats.ToolCall, rows: callRows()}
	out, st := export(t, PProf, src, Options{})
	p, err := profile.Parse(bytes.NewReader(out))
	if err != nil {
		t.Fatal(err)
	}
	if err := p.CheckValid(); err != nil {
		t.Fatal(err)
	}
	want := []string{"f@20;main@11=2", "g@30;f@21;main@11=1", "g@30;main@11=1"}
	if have := pprofStacks(p); !reflect.DeepEqual(have, want) {
		t.Errorf("samples\nhave %q\nwant %q", have, want)
	}
	if st.Samples != 3 {
		t.Errorf("Samples = %d, want 3", st.Samples)
	}
	if len(p.SampleType) != 1 || p.SampleType[0].Type != "calls" {
		t.Errorf("sample types %v, want calls", p.SampleType)
	}
	for _, m := range p.Mapping {
		if m.File != "/bin/prog" || m.BuildID != "abcd" || !m.HasFunctions || !m.HasLineNumbers {
			t.Errorf("mapping %+v, want /bin/prog with build-id abcd, functions and lines", m)
		}
	}
	for _, f := range p.Function {
		if f.Filename != "/src/prog.c" {
			t.Errorf("function %s in %q, want /src/prog.c", f.Name, f.Filename)
		}
		if want := map[string]int64{"main": 10, "f": 20, "g": 30}[f.Name]; f.StartLine != want {
			t.Errorf("function %s starts at line %d, want %d", f.Name, f.StartLine, want)
		}
	}
}

func TestPProfFlat(t *testing.T) {
	rows := []row{
		{Event: ev(formats.KindBlock, 1, 0, 0x1100, 0, 0x1100)},
		{Event: ev(formats.KindBlock, 2, 0, 0x1100, 0, 0x1100), Run: 1},
		{Event: ev(formats.KindBlock, 1, 1, 0x610, 1, 0x610)},
	}
	src := &sliceSource{mods: testMods, tool: formats.ToolBlock, rows: rows}
	out, _ := export(t, PProf, src, Options{})
	p, err := profile.Parse(bytes.NewReader(out))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"exit@0=1", "f@20=2"}
	if have := pprofStacks(p); !reflect.DeepEqual(have, want) {
		t.Errorf("samples\nhave %q\nwant %q", have, want)
	}
	if len(p.Mapping) != 2 || p.Mapping[0].Start == p.Mapping[1].Start {
		t.Errorf("mappings %v: want two, apart", p.Mapping)
	}
}

func TestDrCov(t *testing.T) {
	rows := []row{
		{Event: ev(formats.KindBlock, 1, 0, 0x1100, 0, 0x1100)},
		{Event: ev(formats.KindBlock, 1, 0, 0x1100, 0, 0x1100)},
		{Event: ev(formats.KindBlock, 1, 0, 0x1101, 0, 0x1101)}, // caps the block at 0x1100 to 1 byte
		{Event: ev(formats.KindBlock, 1, 0, 0x1200, 0, 0x1200)}, // ends at its syscall
		{Event: ev(formats.KindBlock, 1, 1, 0x610, 1, 0x610)},   // no code: size 1
		{Event: ev(formats.KindBlock, 1, formats.NoModule, 0x7f00, formats.NoModule, 0x7f00)},
	}
	src := &sliceSource{mods: testMods, tool: formats.ToolBlock, rows: rows}
	out, st := export(t, DrCov, src, Options{})
	f, err := ParseDrCov(out)
	if err != nil {
		t.Fatalf("%v\n%q", err, out)
	}
	if f.Version != 2 || f.Flavor != "drcov" || len(f.Modules) != 2 {
		t.Fatalf("header: %+v", f)
	}
	if m := f.Modules[0]; m.Path != "/bin/prog" || m.Base != 0x1000 || m.End != 0x4000 {
		t.Errorf("module 0 = %+v, want /bin/prog at 0x1000..0x4000", m)
	}
	want := []DrCovEntry{{0x100, 1, 0}, {0x101, 2, 0}, {0x200, 2, 0}, {0x610, 1, 1}}
	if !reflect.DeepEqual(f.Blocks, want) {
		t.Errorf("blocks\nhave %+v\nwant %+v", f.Blocks, want)
	}
	if st.Samples != 4 {
		t.Errorf("Samples = %d, want 4", st.Samples)
	}
}

func TestDrCovBranchBlocks(t *testing.T) {
	// Branch destinations start blocks that run to the first control
	// transfer but stop at the next destination; sources are one
	// instruction each.
	rows := []row{
		{Event: ev(formats.KindJmp, 1, 0, 0x1010, 0, 0x1100)},
		{Event: ev(formats.KindJccNotTaken, 1, 0, 0x1100, 0, 0x1101)},
		{Event: ev(formats.KindSyscall, 1, 0, 0x1200, formats.NoModule, 0)},
	}
	src := &sliceSource{mods: testMods, tool: formats.ToolBranch, rows: rows}
	out, _ := export(t, DrCov, src, Options{})
	f, err := ParseDrCov(out)
	if err != nil {
		t.Fatal(err)
	}
	want := []DrCovEntry{{0x10, 1, 0}, {0x100, 1, 0}, {0x101, 2, 0}, {0x200, 2, 0}}
	if !reflect.DeepEqual(f.Blocks, want) {
		t.Errorf("blocks\nhave %+v\nwant %+v", f.Blocks, want)
	}
}

func TestParseDrCovErrors(t *testing.T) {
	good := "DRCOV VERSION: 2\nDRCOV FLAVOR: drcov\nModule Table: version 2, count 1\nColumns: " + drcovColumns +
		"\n  0, 0x0000000000000000, 0x0000000000001000, 0x0000000000000000, 0x00000000, 0x00000000, /a, b\nBB Table: 1 bbs\n"
	rec := "\x10\x00\x00\x00\x02\x00\x00\x00"
	f, err := ParseDrCov([]byte(good + rec))
	if err != nil {
		t.Fatal(err)
	}
	if f.Modules[0].Path != "/a, b" || f.Blocks[0] != (DrCovEntry{0x10, 2, 0}) {
		t.Errorf("parsed %+v", f)
	}
	for _, tt := range []struct{ name, in string }{
		{"empty", ""},
		{"version 3", strings.Replace(good, "VERSION: 2", "VERSION: 3", 1) + rec},
		{"short table", good + rec[:5]},
		{"long table", good + rec + rec},
		{"bad module id", good + rec[:6] + "\x01\x00"},
		{"bad row", strings.Replace(good, "0x0000000000001000", "zz", 1) + rec},
		{"missing rows", strings.Replace(good, "count 1", "count 2", 1) + rec},
	} {
		if _, err := ParseDrCov([]byte(tt.in)); err == nil {
			t.Errorf("%s: no error", tt.name)
		} else if _, ok := err.(*DrCovError); !ok {
			t.Errorf("%s: error %T %v, want *DrCovError", tt.name, err, err)
		}
	}
}

func FuzzParseDrCov(f *testing.F) {
	src := &sliceSource{mods: testMods, tool: formats.ToolBlock, rows: []row{{Event: ev(formats.KindBlock, 1, 0, 0x1100, 0, 0x1100)}}}
	var buf bytes.Buffer
	if _, err := Write(context.Background(), &buf, DrCov, src, Options{Symbolize: testSymbols}); err != nil {
		f.Fatal(err)
	}
	f.Add(buf.Bytes())
	f.Add([]byte("DRCOV VERSION: 2\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		d, err := ParseDrCov(b)
		if err == nil && len(d.Blocks)*8 > len(b) {
			t.Fatalf("%d blocks from %d bytes", len(d.Blocks), len(b))
		}
	})
}

// lcovRecord is one parsed SF record.
type lcovRecord struct {
	fn       map[string]int // name -> line
	fnda     map[string]int64
	da       map[int]int64
	fnf, fnh int
	lf, lh   int
}

// parseLCOV checks a tracefile against the record grammar (TN, SF, FN,
// FNDA, FNF, FNH, DA, LF, LH, end_of_record; every FNDA names an FN;
// the counts match) and returns its records by file.
func parseLCOV(t *testing.T, data []byte) map[string]*lcovRecord {
	t.Helper()
	out := map[string]*lcovRecord{}
	var cur *lcovRecord
	sc := bufio.NewScanner(bytes.NewReader(data))
	n := 0
	for sc.Scan() {
		n++
		line := sc.Text()
		key, val, ok := strings.Cut(line, ":")
		if line == "end_of_record" {
			if cur == nil {
				t.Fatalf("line %d: end_of_record outside a record", n)
			}
			hit := 0
			for _, c := range cur.da {
				if c > 0 {
					hit++
				}
			}
			fh := 0
			for _, c := range cur.fnda {
				if c > 0 {
					fh++
				}
			}
			if cur.lf != len(cur.da) || cur.lh != hit || cur.fnf != len(cur.fn) || cur.fnh != fh {
				t.Fatalf("line %d: LF/LH/FNF/FNH %d/%d/%d/%d, want %d/%d/%d/%d", n, cur.lf, cur.lh, cur.fnf, cur.fnh, len(cur.da), hit, len(cur.fn), fh)
			}
			cur = nil
			continue
		}
		if !ok {
			t.Fatalf("line %d: %q is not KEY:VALUE", n, line)
		}
		num := func(s string) int64 {
			v, err := strconv.ParseInt(s, 10, 64)
			if err != nil || v < 0 {
				t.Fatalf("line %d: %q: bad number %q", n, line, s)
			}
			return v
		}
		switch key {
		case "TN":
			if cur != nil {
				t.Fatalf("line %d: TN inside a record", n)
			}
		case "SF":
			if cur != nil || val == "" {
				t.Fatalf("line %d: SF inside a record or empty", n)
			}
			if out[val] != nil {
				t.Fatalf("line %d: second record for %s", n, val)
			}
			cur = &lcovRecord{fn: map[string]int{}, fnda: map[string]int64{}, da: map[int]int64{}}
			out[val] = cur
		case "FN", "FNDA", "DA":
			if cur == nil {
				t.Fatalf("line %d: %s outside a record", n, key)
			}
			a, b, ok := strings.Cut(val, ",")
			if !ok || b == "" {
				t.Fatalf("line %d: %q: want %s:NUMBER,VALUE", n, line, key)
			}
			switch key {
			case "FN":
				if l := num(a); l < 1 {
					t.Fatalf("line %d: function line %d", n, l)
				}
				cur.fn[b] = int(num(a))
			case "FNDA":
				if _, ok := cur.fn[b]; !ok {
					t.Fatalf("line %d: FNDA for %q without FN", n, b)
				}
				cur.fnda[b] = num(a)
			case "DA":
				if l := num(a); l < 1 {
					t.Fatalf("line %d: DA line %d", n, l)
				}
				if _, dup := cur.da[int(num(a))]; dup {
					t.Fatalf("line %d: line %s twice", n, a)
				}
				cur.da[int(num(a))] = num(b)
			}
		case "FNF":
			cur.fnf = int(num(val))
		case "FNH":
			cur.fnh = int(num(val))
		case "LF":
			cur.lf = int(num(val))
		case "LH":
			cur.lh = int(num(val))
		default:
			t.Fatalf("line %d: unknown record %q", n, key)
		}
	}
	if cur != nil {
		t.Fatal("last record has no end_of_record")
	}
	return out
}

func TestLCOV(t *testing.T) {
	rows := []row{
		{Event: ev(formats.KindBlock, 1, 0, 0x1100, 0, 0x1100)},
		{Event: ev(formats.KindBlock, 1, 0, 0x1100, 0, 0x1100)},
		{Event: ev(formats.KindBlock, 1, 1, 0x610, 1, 0x610)},
	}
	src := &sliceSource{mods: testMods, tool: formats.ToolBlock, rows: rows}
	out, _ := export(t, LCOV, src, Options{})
	recs := parseLCOV(t, out)
	if len(recs) != 2 {
		t.Fatalf("%d records, want 2:\n%s", len(recs), out)
	}
	prog := recs["/src/prog.c"]
	if prog == nil {
		t.Fatalf("no /src/prog.c record:\n%s", out)
	}
	if want := map[int]int64{10: 0, 11: 0, 20: 2, 21: 2, 30: 0}; !reflect.DeepEqual(prog.da, want) {
		t.Errorf("prog.c DA = %v, want %v", prog.da, want)
	}
	if want := map[string]int{"main": 10, "f": 20, "g": 30}; !reflect.DeepEqual(prog.fn, want) {
		t.Errorf("prog.c FN = %v, want %v", prog.fn, want)
	}
	if want := map[string]int64{"main": 0, "f": 2, "g": 0}; !reflect.DeepEqual(prog.fnda, want) {
		t.Errorf("prog.c FNDA = %v, want %v", prog.fnda, want)
	}
	libc := recs["/lib/libc.so.6"]
	if libc == nil {
		t.Fatalf("no libc record:\n%s", out)
	}
	if want := map[int]int64{1: 0, 2: 1}; !reflect.DeepEqual(libc.da, want) {
		t.Errorf("libc DA = %v, want %v (line i = function i)", libc.da, want)
	}
	if want := map[string]int{"puts": 1, "exit": 2}; !reflect.DeepEqual(libc.fn, want) {
		t.Errorf("libc FN = %v, want %v", libc.fn, want)
	}
}

func TestCSV(t *testing.T) {
	src := &sliceSource{mods: testMods, tool: formats.ToolCall, rows: callRows()}
	src.rows[0].Run = 2
	src.rows = append(src.rows, row{Event: ev(formats.KindSyscall, 1, 0, 0x1200, formats.NoModule, 0)})
	src.rows[len(src.rows)-1].Value = 60
	out, st := export(t, CSV, src, Options{})
	recs, err := csv.NewReader(bytes.NewReader(out)).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(recs[0], CSVHeader) {
		t.Errorf("header %q", recs[0])
	}
	if len(recs) != 1+len(src.rows) {
		t.Fatalf("%d rows, want %d", len(recs)-1, len(src.rows))
	}
	for _, tt := range []struct {
		row  int
		want []string
	}{
		{1, []string{"2", "call", "1", "0", "prog+0x1010", "main", "/src/prog.c:11", "prog+0x1100", "f", "/src/prog.c:20", "0"}},
		{8, []string{"0", "run-end", "0", "0", "0", "", "", "0", "", "", "0"}},
		{9, []string{"0", "syscall", "1", "0", "prog+0x1200", "g", "/src/prog.c:30", "", "", "", "60"}},
	} {
		if have := recs[tt.row]; !reflect.DeepEqual(have, tt.want) {
			t.Errorf("row %d\nhave %q\nwant %q", tt.row, have, tt.want)
		}
	}
	if st.Records != 1 || st.Events != 8 {
		t.Errorf("stats %+v, want 1 record, 8 events", st)
	}
}

func TestParquet(t *testing.T) {
	mem := memory.NewCheckedAllocator(memory.DefaultAllocator)
	defer mem.AssertSize(t, 0)
	src := &sliceSource{mods: testMods, tool: formats.ToolCall, rows: callRows()}
	out, _ := export(t, Parquet, src, Options{})
	rd, err := file.NewParquetReader(bytes.NewReader(out))
	if err != nil {
		t.Fatal(err)
	}
	fr, err := pqarrow.NewFileReader(rd, pqarrow.ArrowReadProperties{}, mem)
	if err != nil {
		t.Fatal(err)
	}
	tbl, err := fr.ReadTable(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer tbl.Release()
	if tbl.NumRows() != int64(len(src.rows)) || tbl.NumCols() != int64(ParquetSchema().NumFields()) {
		t.Fatalf("table %d rows x %d columns, want %d x %d", tbl.NumRows(), tbl.NumCols(), len(src.rows), ParquetSchema().NumFields())
	}
	tr := array.NewTableReader(tbl, -1)
	defer tr.Release()
	var kinds, srcFuncs, dstFuncs []string
	var srcs []uint64
	for tr.Next() {
		rec := tr.Record()
		for i := 0; i < int(rec.NumRows()); i++ {
			kinds = append(kinds, rec.Column(formats.NumCols+1).(*array.String).Value(i))
			srcFuncs = append(srcFuncs, rec.Column(formats.NumCols+2).(*array.String).Value(i))
			dstFuncs = append(dstFuncs, rec.Column(formats.NumCols+3).(*array.String).Value(i))
			srcs = append(srcs, rec.Column(formats.ColSrc).(*array.Uint64).Value(i))
		}
	}
	if want := []string{"call", "call", "ind-call", "ret", "ret", "call", "ret", "run-end"}; !reflect.DeepEqual(kinds, want) {
		t.Errorf("kinds %q, want %q", kinds, want)
	}
	if want := []string{"main", "f", "main", "g", "f", "main", "f", ""}; !reflect.DeepEqual(srcFuncs, want) {
		t.Errorf("src_func %q, want %q", srcFuncs, want)
	}
	if want := []string{"f", "g", "g", "f", "main", "f", "", ""}; !reflect.DeepEqual(dstFuncs, want) {
		t.Errorf("dst_func %q, want %q", dstFuncs, want)
	}
	if srcs[1] != 0x1120 {
		t.Errorf("src[1] = %#x, want 0x1120", srcs[1])
	}
}

// dictValue is row i of a dictionary-encoded string column.
func dictValue(a arrow.Array, i int) string {
	d := a.(*array.Dictionary)
	return d.Dictionary().(*array.String).Value(d.GetValueIndex(i))
}

// TestArrow: the Arrow IPC export holds the Parquet export's table, its
// names dictionary-encoded: the same rows and names.
func TestArrow(t *testing.T) {
	src := &sliceSource{mods: testMods, tool: formats.ToolCall, rows: callRows()}
	out, _ := export(t, Arrow, src, Options{})
	rd, err := ipc.NewReader(bytes.NewReader(out))
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Release()
	if !rd.Schema().Equal(ArrowSchema()) {
		t.Fatalf("schema %v, want %v", rd.Schema(), ArrowSchema())
	}
	var kinds, dstFuncs []string
	for rd.Next() {
		rec := rd.RecordBatch()
		for i := 0; i < int(rec.NumRows()); i++ {
			kinds = append(kinds, dictValue(rec.Column(formats.NumCols+1), i))
			dstFuncs = append(dstFuncs, dictValue(rec.Column(formats.NumCols+3), i))
		}
	}
	if err := rd.Err(); err != nil {
		t.Fatal(err)
	}
	if want := []string{"call", "call", "ind-call", "ret", "ret", "call", "ret", "run-end"}; !reflect.DeepEqual(kinds, want) {
		t.Errorf("kinds %q, want %q", kinds, want)
	}
	if want := []string{"f", "g", "g", "f", "main", "f", "", ""}; !reflect.DeepEqual(dstFuncs, want) {
		t.Errorf("dst_func %q, want %q", dstFuncs, want)
	}
}

// TestArrowDeltas: names that first appear after the first record batch
// reach the reader (the dictionary grows by deltas), and every row reads
// back as the Parquet export has it.
func TestArrowDeltas(t *testing.T) {
	var rows []row
	for range 70000 { // more than a record batch of calls main -> f
		rows = append(rows, row{Event: ev(formats.KindCall, 1, 0, 0x1010, 0, 0x1100)})
	}
	rows = append(rows, callRows()...) // then g and a ret, new names
	src := &sliceSource{mods: testMods, tool: formats.ToolCall, rows: rows}
	out, _ := export(t, Arrow, src, Options{})
	rd, err := ipc.NewReader(bytes.NewReader(out))
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Release()
	var got []string
	batches := 0
	for rd.Next() {
		rec := rd.RecordBatch()
		batches++
		for i := 0; i < int(rec.NumRows()); i++ {
			got = append(got, dictValue(rec.Column(formats.NumCols+1), i)+" "+dictValue(rec.Column(formats.NumCols+2), i)+" "+dictValue(rec.Column(formats.NumCols+3), i))
		}
	}
	if err := rd.Err(); err != nil {
		t.Fatal(err)
	}
	if batches < 2 || len(got) != len(rows) {
		t.Fatalf("%d batches, %d rows; want 2 or more, %d", batches, len(got), len(rows))
	}
	if got[0] != "call main f" || got[70000] != "call main f" || got[70001] != "call f g" || got[70003] != "ret g f" || got[len(got)-1] != "run-end  " {
		t.Errorf("rows read back: %q %q %q %q %q", got[0], got[70000], got[70001], got[70003], got[len(got)-1])
	}
}

// TestArrowNameTable: with Options.NameTable the name columns are int32
// indices (IDSchema) into the names it is given once the rows are
// written, which name every row as the dictionary export does, across
// record batches; WriteNames writes them as a table.
func TestArrowNameTable(t *testing.T) {
	var rows []row
	for range 70000 {
		rows = append(rows, row{Event: ev(formats.KindCall, 1, 0, 0x1010, 0, 0x1100)})
	}
	rows = append(rows, callRows()...)
	src := &sliceSource{mods: testMods, tool: formats.ToolCall, rows: rows}
	var names []string
	calls := 0
	out, _ := export(t, Arrow, src, Options{NameTable: func(n []string) error { names = n; calls++; return nil }})
	if calls != 1 || len(names) == 0 || names[0] != "" {
		t.Fatalf("NameTable called %d times with %q; want once, the empty name first", calls, names)
	}
	rd, err := ipc.NewReader(bytes.NewReader(out))
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Release()
	if !rd.Schema().Equal(IDSchema()) {
		t.Fatalf("schema %v, want %v", rd.Schema(), IDSchema())
	}
	var got []string
	for rd.Next() {
		rec := rd.RecordBatch()
		for i := 0; i < int(rec.NumRows()); i++ {
			var r []string
			for c := formats.NumCols + 1; c <= formats.NumCols+3; c++ {
				x := rec.Column(c).(*array.Int32).Value(i)
				if x < 0 || int(x) >= len(names) {
					t.Fatalf("row %d column %d: index %d of %d names", i, c, x, len(names))
				}
				r = append(r, names[x])
			}
			got = append(got, strings.Join(r, " "))
		}
	}
	if err := rd.Err(); err != nil {
		t.Fatal(err)
	}
	if len(got) != len(rows) || got[0] != "call main f" || got[70001] != "call f g" || got[70003] != "ret g f" || got[len(got)-1] != "run-end  " {
		t.Fatalf("%d rows read back (want %d): %q ... %q", len(got), len(rows), got[0], got[len(got)-1])
	}

	var pq bytes.Buffer
	if err := WriteNames(&pq, names); err != nil {
		t.Fatal(err)
	}
	tbl, err := pqarrow.ReadTable(context.Background(), bytes.NewReader(pq.Bytes()), nil, pqarrow.ArrowReadProperties{}, memory.DefaultAllocator)
	if err != nil {
		t.Fatal(err)
	}
	defer tbl.Release()
	if fs := tbl.Schema().Fields(); len(fs) != 2 || fs[0].Name != "id" || fs[0].Type.ID() != arrow.INT32 || fs[1].Name != "name" ||
		tbl.NumRows() != int64(len(names)) {
		t.Errorf("names table %v with %d rows, want %v with %d", tbl.Schema(), tbl.NumRows(), NamesSchema(), len(names))
	}
}

// errSource fails after its first batch.
type errSource struct{ sliceSource }

func (s *errSource) Err() error { return io.ErrUnexpectedEOF }

func TestSourceError(t *testing.T) {
	for _, f := range Formats() {
		src := &errSource{sliceSource{mods: testMods, tool: formats.ToolCall, rows: callRows()}}
		_, err := Write(context.Background(), io.Discard, f, src, Options{Symbolize: testSymbols})
		if err != io.ErrUnexpectedEOF {
			t.Errorf("%v: error %v, want the source's", f, err)
		}
	}
}

func TestBadBatch(t *testing.T) {
	src := &badSource{}
	for _, f := range Formats() {
		if _, err := Write(context.Background(), io.Discard, f, src, Options{}); err == nil {
			t.Errorf("%v: no error for a batch with columns of different lengths", f)
		}
		src.done = false
	}
}

type badSource struct{ done bool }

func (s *badSource) Modules() []formats.Module { return testMods }
func (s *badSource) Tool() formats.Tool        { return formats.ToolCall }
func (s *badSource) Next() bool                { d := s.done; s.done = true; return !d }
func (s *badSource) Err() error                { return nil }
func (s *badSource) Batch() *Batch {
	return &Batch{Kind: []uint8{4, 4}, TID: []uint32{1}, Time: []uint64{1, 2}, SrcModule: []uint16{0, 0}, Src: []uint64{1, 2}, DstModule: []uint16{0, 0}, Dst: []uint64{1, 2}, Value: []uint64{0, 0}}
}

func TestNoSymbols(t *testing.T) {
	// Without a symbolizer every format still works, with addresses.
	for _, f := range Formats() {
		src := &sliceSource{mods: testMods, tool: formats.ToolCall, rows: callRows()}
		var buf bytes.Buffer
		st, err := Write(context.Background(), &buf, f, src, Options{})
		if err != nil {
			t.Errorf("%v: %v", f, err)
		}
		if f == Collapsed && !strings.Contains(buf.String(), "prog+0x1010;prog+0x1100 2\n") {
			t.Errorf("collapsed without symbols:\n%s", buf.String())
		}
		if st.NoSymbols != 1 && f != LCOV && f != DrCov {
			t.Errorf("%v: NoSymbols = %d, want 1", f, st.NoSymbols)
		}
	}
}

func TestShadowStackBounded(t *testing.T) {
	// Calls without returns: the shadow stack keeps at most maxStack
	// frames, and every call is still counted.
	n := 3 * maxStack
	src := &genSource{tool: formats.ToolCall, n: 2 * n, distinct: 0x800}
	src.onlyCalls = true
	var buf bytes.Buffer
	st, err := Write(context.Background(), &buf, Collapsed, src, Options{Symbolize: testSymbols, MaxDepth: 4})
	if err != nil {
		t.Fatal(err)
	}
	if st.Dropped == 0 || st.Dropped > int64(2*n) {
		t.Errorf("Dropped = %d, want some frames dropped", st.Dropped)
	}
	var sum int64
	for _, l := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		c, err := strconv.ParseInt(l[strings.LastIndexByte(l, ' ')+1:], 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		sum += c
	}
	if sum != int64(2*n) {
		t.Errorf("collapsed counts add up to %d, want %d calls", sum, 2*n)
	}
}
