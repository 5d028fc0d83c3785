package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/csv"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"
	"github.com/google/pprof/profile"
	"github.com/stint-project/stint/analysis/paths"
	"github.com/stint-project/stint/analysis/symbols"
	"github.com/stint-project/stint/formats"
	"github.com/stint-project/stint/formats/export"
	"github.com/stint-project/stint/internal/fixtures"
	"github.com/stint-project/stint/rewrite"
)

// tracedRun is a real run of a rewritten fixture.
type tracedRun struct {
	orig, rewritten string   // the fixture and its rewritten copy
	traces          []string // the trace files of the run
	source          string   // the fixture's C source
}

// traced builds the recurse fixture (with -g), rewrites it with the
// tool, runs it and returns its traces, in the test's temporary
// directory.
func traced(t *testing.T, tool rewrite.Tool, every bool) *tracedRun {
	t.Helper()
	orig := fixtures.Build(t, "recurse", fixtures.Variant{Opt: fixtures.O0, PIE: true})
	dir := t.TempDir()
	out := filepath.Join(dir, "recurse")
	if _, err := rewrite.RewriteFile(orig, out, rewrite.Options{Tool: tool, Every: every}); err != nil {
		t.Fatalf("rewrite: %v", err)
	}
	traces := filepath.Join(dir, "traces")
	os.Mkdir(traces, 0o755)
	env := []string{"STINT_OUT=" + traces}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "STINT_") {
			env = append(env, kv)
		}
	}
	stdout, stderr, code, err := fixtures.Run(out, nil, env)
	if err != nil || code != 0 || !bytes.Contains(stdout, []byte("depth=5000")) {
		t.Fatalf("rewritten recurse: exit %d, %v\n%s%s", code, err, stdout, stderr)
	}
	names, _ := filepath.Glob(filepath.Join(traces, "*.arrow"))
	if len(names) != 1 {
		t.Fatalf("%d trace files, want 1", len(names))
	}
	fd, err := fixtures.Dir()
	if err != nil {
		t.Fatal(err)
	}
	return &tracedRun{orig: orig, rewritten: out, traces: names, source: filepath.Join(fd, "recurse.c")}
}

// sourceLine returns the number of the first line of the file that
// contains s.
func sourceLine(t *testing.T, path, s string) int {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for i, l := range strings.Split(string(b), "\n") {
		if strings.Contains(l, s) {
			return i + 1
		}
	}
	t.Fatalf("%s has no line with %q", path, s)
	return 0
}

// exportTo runs trace export and returns the output file's path and
// what the command printed.
func exportTo(t *testing.T, format string, args ...string) (string, string) {
	t.Helper()
	out := filepath.Join(t.TempDir(), "out."+format)
	var stdout, stderr bytes.Buffer
	all := append([]string{"export", "-f", format, "-o", out}, args...)
	if err := runExport(context.Background(), all[1:], &stdout, &stderr); err != nil {
		t.Fatalf("trace %s: %v\n%s", strings.Join(all, " "), err, stderr.String())
	}
	return out, stdout.String()
}

func countKinds(t *testing.T, names []string, kinds ...formats.Kind) int {
	t.Helper()
	n := 0
	for _, name := range names {
		tr, _, err := paths.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range tr.Events {
			for _, k := range kinds {
				if e.Kind == k {
					n++
				}
			}
		}
	}
	return n
}

func TestExportCallTrace(t *testing.T) {
	r := traced(t, rewrite.ToolCall, true)
	calls := countKinds(t, r.traces, formats.KindCall, formats.KindIndCall)
	downLine := sourceLine(t, r.source, "long r = down(n - 1, acc);")

	// pprof: every call is in exactly one sample; down calls itself
	// from the line that says so.
	pb, summary := exportTo(t, "pprof", r.traces...)
	if !strings.Contains(summary, "pprof") || !strings.Contains(summary, "folded") {
		t.Errorf("summary %q: want the format and the folded deep calls", summary)
	}
	f, err := os.Open(pb)
	if err != nil {
		t.Fatal(err)
	}
	p, err := profile.Parse(f)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.CheckValid(); err != nil {
		t.Fatal(err)
	}
	var total int64
	recursive := false
	for _, s := range p.Sample {
		total += s.Value[0]
		if len(s.Location) >= 3 && s.Location[0].Line[0].Function.Name == "down" {
			caller := s.Location[1].Line[0]
			if caller.Function.Name == "down" && caller.Line == int64(downLine) && filepath.Base(caller.Function.Filename) == "recurse.c" {
				recursive = true
			}
		}
	}
	if total != int64(calls) {
		t.Errorf("samples add up to %d calls, the trace has %d", total, calls)
	}
	if !recursive {
		t.Errorf("no sample of down called from recurse.c:%d", downLine)
	}
	var rewrittenMapping bool
	for _, m := range p.Mapping {
		if m.File == r.rewritten && m.BuildID != "" && m.HasFunctions && m.HasLineNumbers {
			rewrittenMapping = true
		}
	}
	if !rewrittenMapping {
		t.Errorf("no mapping of %s with build-id, functions and lines: %v", r.rewritten, p.Mapping)
	}
	checkPProfTool(t, pb, "down")

	// collapsed: the same contexts by name.
	col, _ := exportTo(t, "collapsed", r.traces...)
	b, err := os.ReadFile(col)
	if err != nil {
		t.Fatal(err)
	}
	var sum int64
	deep := false
	for _, line := range strings.Split(strings.TrimSuffix(string(b), "\n"), "\n") {
		i := strings.LastIndexByte(line, ' ')
		n, err := strconv.ParseInt(line[i+1:], 10, 64)
		if i < 0 || err != nil || n <= 0 {
			t.Fatalf("collapsed line %q: want STACK COUNT", line)
		}
		sum += n
		if strings.Contains(line[:i], "main;down;down;down;") {
			deep = true
		}
	}
	if sum != int64(calls) || !deep {
		t.Errorf("collapsed: %d calls (want %d), main;down;down;down present %v", sum, calls, deep)
	}
}

// checkPProfTool runs go tool pprof -top and -traces on a profile and
// requires the function name in both (skipped under -short).
func checkPProfTool(t *testing.T, path, fn string) {
	t.Helper()
	if testing.Short() {
		t.Log("-short: go tool pprof not run")
		return
	}
	for _, mode := range []string{"-top", "-traces"} {
		cmd := exec.Command("go", "tool", "pprof", mode, path)
		cmd.Env = append(os.Environ(), "PPROF_BINARY_PATH=/nonexistent")
		b, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("go tool pprof %s: %v\n%s", mode, err, b)
		}
		if !bytes.Contains(b, []byte(fn)) {
			t.Errorf("go tool pprof %s: no %s in\n%s", mode, fn, b)
		}
	}
}

func TestExportBranchCoverage(t *testing.T) {
	r := traced(t, rewrite.ToolBranch, false)
	exe, err := symbols.Load(r.orig)
	if err != nil {
		t.Fatal(err)
	}
	var down symbols.Func
	for _, f := range exe.Funcs {
		if f.Name == "down" {
			down = f
		}
	}
	if down.Name == "" {
		t.Fatal("no function down in the fixture")
	}

	// drcov: the module table names the rewritten file; blocks in down
	// have sizes decoded from the original code.
	dc, _ := exportTo(t, "drcov", r.traces...)
	b, err := os.ReadFile(dc)
	if err != nil {
		t.Fatal(err)
	}
	d, err := export.ParseDrCov(b)
	if err != nil {
		t.Fatal(err)
	}
	self := -1
	for i, m := range d.Modules {
		if m.Path == r.rewritten {
			self = i
		}
	}
	if self < 0 {
		t.Fatalf("drcov module table has no %s: %+v", r.rewritten, d.Modules)
	}
	var inDown, longer int
	for _, bb := range d.Blocks {
		if int(bb.Module) == self && uint64(bb.Start) >= down.Start && uint64(bb.Start) < down.End {
			inDown++
			if bb.Size > 1 {
				longer++
			}
			if uint64(bb.Start)+uint64(bb.Size) > down.End {
				t.Errorf("block %#x+%d runs past the end of down (%#x)", bb.Start, bb.Size, down.End)
			}
		}
	}
	if inDown == 0 || longer == 0 {
		t.Errorf("%d blocks in down, %d longer than a byte", inDown, longer)
	}

	// lcov: down's lines ran; the tracefile follows the grammar; genhtml
	// renders it.
	lc, _ := exportTo(t, "lcov", r.traces...)
	b, err = os.ReadFile(lc)
	if err != nil {
		t.Fatal(err)
	}
	recs := lcovRecords(t, b)
	var src map[int]int64
	for sf, da := range recs {
		if filepath.Base(sf) == "recurse.c" {
			src = da
		}
	}
	if src == nil {
		t.Fatalf("no record for recurse.c in\n%s", b)
	}
	for _, s := range []string{"long r = down(n - 1, acc);", "*acc += here;", "printf(\"depth=5000"} {
		if l := sourceLine(t, r.source, s); src[l] <= 0 {
			t.Errorf("recurse.c:%d (%s): count %d, want > 0", l, s, src[l])
		}
	}
	checkGenhtml(t, lc)
}

// lcovRecords checks the tracefile's record grammar and returns the DA
// entries of each SF.
func lcovRecords(t *testing.T, b []byte) map[string]map[int]int64 {
	t.Helper()
	out := map[string]map[int]int64{}
	var cur map[int]int64
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(nil, 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if line == "end_of_record" {
			if cur == nil {
				t.Fatalf("line %d: end_of_record outside a record", n)
			}
			cur = nil
			continue
		}
		key, val, ok := strings.Cut(line, ":")
		if !ok {
			t.Fatalf("line %d: %q", n, line)
		}
		switch key {
		case "TN":
		case "SF":
			cur = map[int]int64{}
			out[val] = cur
		case "DA":
			a, c, _ := strings.Cut(val, ",")
			l, err1 := strconv.Atoi(a)
			v, err2 := strconv.ParseInt(c, 10, 64)
			if cur == nil || err1 != nil || err2 != nil || l < 1 {
				t.Fatalf("line %d: bad DA %q", n, line)
			}
			cur[l] = v
		case "FN", "FNDA", "FNF", "FNH", "LF", "LH":
			if cur == nil {
				t.Fatalf("line %d: %s outside a record", n, key)
			}
		default:
			t.Fatalf("line %d: unknown record %q", n, key)
		}
	}
	return out
}

// checkGenhtml renders a tracefile with genhtml (Debian package lcov;
// skipped without it and under -short).
func checkGenhtml(t *testing.T, info string) {
	t.Helper()
	if testing.Short() {
		t.Log("-short: genhtml not run")
		return
	}
	if _, err := exec.LookPath("genhtml"); err != nil {
		t.Log("genhtml not found (Debian package lcov): tracefile not rendered")
		return
	}
	dir := t.TempDir()
	b, err := exec.Command("genhtml", "--quiet", "--no-source", "-o", dir, info).CombinedOutput()
	if err != nil {
		t.Fatalf("genhtml: %v\n%s", err, b)
	}
	if _, err := os.Stat(filepath.Join(dir, "index.html")); err != nil {
		t.Errorf("genhtml wrote no index.html: %v\n%s", err, b)
	}
}

func TestExportTables(t *testing.T) {
	r := traced(t, rewrite.ToolCall, true)
	tr, _, err := paths.ReadFile(r.traces[0])
	if err != nil {
		t.Fatal(err)
	}
	// Two inputs (the same trace twice) are two runs.
	inputs := []string{r.traces[0], r.traces[0]}
	want := 2 * len(tr.Events)

	c, _ := exportTo(t, "csv", inputs...)
	f, err := os.Open(c)
	if err != nil {
		t.Fatal(err)
	}
	recs, err := csv.NewReader(f).ReadAll()
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != want+1 || strings.Join(recs[0], ",") != strings.Join(export.CSVHeader, ",") {
		t.Fatalf("csv: %d rows, header %q; want %d rows", len(recs)-1, recs[0], want)
	}
	runs := map[string]int{}
	downs := 0
	for _, rec := range recs[1:] {
		runs[rec[0]]++
		if rec[1] == "call" && rec[8] == "down" && strings.HasPrefix(rec[7], "recurse+0x") && strings.Contains(rec[9], "recurse.c:") {
			downs++
		}
	}
	if runs["0"] != len(tr.Events) || runs["1"] != len(tr.Events) {
		t.Errorf("csv rows per run %v, want %d each", runs, len(tr.Events))
	}
	if downs < 2*5000 {
		t.Errorf("csv: %d calls of down with file:line, want at least %d", downs, 2*5000)
	}

	pq, _ := exportTo(t, "parquet", inputs...)
	f, err = os.Open(pq)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rd, err := file.NewParquetReader(f)
	if err != nil {
		t.Fatal(err)
	}
	fr, err := pqarrow.NewFileReader(rd, pqarrow.ArrowReadProperties{}, memory.DefaultAllocator)
	if err != nil {
		t.Fatal(err)
	}
	tbl, err := fr.ReadTable(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer tbl.Release()
	if tbl.NumRows() != int64(want) {
		t.Errorf("parquet: %d rows, want %d", tbl.NumRows(), want)
	}
	var names []string
	for i := 0; i < int(tbl.NumCols()); i++ {
		names = append(names, tbl.Column(i).Name())
	}
	if have := strings.Join(names, ","); have != "kind,tid,time,src_module,src,dst_module,dst,value,run,kind_name,src_func,dst_func" {
		t.Errorf("parquet columns %s", have)
	}
}

func TestExportStdoutAndErrors(t *testing.T) {
	fs := files(t)
	var stdout, stderr bytes.Buffer
	if err := runExport(context.Background(), []string{"-f", "collapsed", "-o", "-", "--no-symbols", fs["good.arrow"]}, &stdout, &stderr); err != nil {
		t.Fatal(err)
	}
	// good.arrow is a branch trace: events per module and location.
	for _, want := range []string{"demo;demo+0x1130 1\n", "libc.so.6;libc.so.6+0x28010 2\n"} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("collapsed to stdout:\n%swant a line %q", stdout.String(), want)
		}
	}
	if !strings.Contains(stderr.String(), "standard output: collapsed") {
		t.Errorf("summary not on stderr: %q", stderr.String())
	}

	dir := t.TempDir()
	for _, tt := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"export", "-o", filepath.Join(dir, "x"), fs["good.arrow"]}, 2, "--format"},
		{[]string{"export", "-f", "svg", "-o", filepath.Join(dir, "x"), fs["good.arrow"]}, 2, "pprof"},
		{[]string{"export", "-f", "csv", fs["good.arrow"]}, 2, "-o FILE"},
		{[]string{"export", "-f", "csv", "-o", filepath.Join(dir, "x")}, 2, "no trace"},
		{[]string{"export", "-f", "csv", "--max-depth", "0", "-o", filepath.Join(dir, "x"), fs["good.arrow"]}, 2, "max-depth"},
		{[]string{"export", "-f", "parquet", "--name-table", filepath.Join(dir, "n"), "-o", filepath.Join(dir, "x"), fs["good.arrow"]}, 2, "name-table"},
		{[]string{"export", "-f", "csv", "-o", filepath.Join(dir, "x"), fs["text.arrow"]}, 1, "text.arrow"},
		{[]string{"export", "-f", "csv", "-o", filepath.Join(dir, "x"), filepath.Join(dir, "missing.arrow")}, 1, "missing.arrow"},
	} {
		err := run(context.Background(), tt.args, &stdout, &stderr)
		if have := exitCode(err); have != tt.code || err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%v: exit %d (%v), want %d and %q", tt.args, have, err, tt.code, tt.want)
		}
	}
	if matches, _ := filepath.Glob(filepath.Join(dir, "*x*")); len(matches) != 0 {
		t.Errorf("failed exports left %v", matches)
	}

	// A cut input gives its complete batches and is reported.
	stdout.Reset()
	out := filepath.Join(dir, "cut.csv")
	if err := runExport(context.Background(), []string{"-f", "csv", "-o", out, fs["cut.arrow"]}, &stdout, &stderr); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(stdout.String(), "cut short") {
		t.Errorf("cut input not reported: %q", stdout.String())
	}
	b, _ := os.ReadFile(out)
	if n := strings.Count(string(b), "\n"); n != 1+4 {
		t.Errorf("cut input: %d csv lines, want the header and 4 rows", n)
	}
}

func TestImageRestoresPatches(t *testing.T) {
	// The rewritten file's code, with the patch table's bytes put back,
	// is the original's code.
	r := traced(t, rewrite.ToolBranch, false)
	orig, err := symbols.LoadImage(r.orig)
	if err != nil {
		t.Fatal(err)
	}
	rw, err := symbols.LoadImage(r.rewritten)
	if err != nil {
		t.Fatal(err)
	}
	if rw.Restored == 0 {
		t.Fatal("no patches restored in the rewritten file")
	}
	tab, err := symbols.Load(r.orig)
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	for _, f := range tab.Funcs {
		n := int(f.End - f.Start)
		a, b := orig.Bytes(f.Start, n), rw.Bytes(f.Start, n)
		if len(a) != n || !bytes.Equal(a, b) {
			t.Errorf("%s: restored code differs from the original", f.Name)
		}
		checked++
	}
	if checked == 0 {
		t.Fatal("no functions compared")
	}
}

func TestExportMergedInput(t *testing.T) {
	// A merged trace (two runs) and a plain trace combine into three
	// runs, with one module table.
	fs := files(t)
	dir := t.TempDir()
	merged := filepath.Join(dir, "m.arrow")
	var stdout, stderr bytes.Buffer
	if err := run(context.Background(), []string{"merge", "-o", merged, fs["good.arrow"], fs["good.arrow"]}, &stdout, &stderr); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "x.csv")
	if err := runExport(context.Background(), []string{"-f", "csv", "--no-symbols", "-o", out, merged, fs["good.arrow"]}, &stdout, &stderr); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	recs, err := csv.NewReader(f).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	runs := map[string]int{}
	for _, r := range recs[1:] {
		runs[r[0]]++
		if r[1] == "call" && (r[4] != "demo+0x1130" || r[7] != "libc.so.6+0x28000") {
			t.Errorf("call row %q: want demo+0x1130 -> libc.so.6+0x28000", r)
		}
	}
	if len(runs) != 3 || runs["0"] != 5 || runs["1"] != 5 || runs["2"] != 5 {
		t.Errorf("rows per run %v, want 5 in each of runs 0, 1, 2", runs)
	}
}

// TestExportToDevice: an export to a device (here a node with
// /dev/null's numbers) writes into it; renamed over, as root, /dev/null
// became a regular file holding the export.
func TestExportToDevice(t *testing.T) {
	null := filepath.Join(t.TempDir(), "null")
	if err := syscall.Mknod(null, syscall.S_IFCHR|0o666, 1<<8|3); err != nil {
		t.Skip("making a device node needs root:", err)
	}
	fs := files(t)
	var stdout, stderr bytes.Buffer
	if err := runExport(context.Background(), []string{"-f", "csv", "-o", null, fs["good.arrow"]}, &stdout, &stderr); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(null); err != nil || fi.Mode()&os.ModeCharDevice == 0 {
		t.Errorf("the device after the export: %v, %v", fi.Mode(), err)
	}
}
