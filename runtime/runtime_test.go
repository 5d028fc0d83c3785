package runtime

import (
	"bufio"
	"bytes"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/stint-project/stint/formats"
)

// The constants of testdata/driver.c.
const (
	drvThreads  = 8
	drvIter     = 5000
	drvDirect   = 12
	drvIndirect = 4
	drvBatch    = 4096 // ROWS_PER_BATCH in src/stint.c
	drvChildN   = 100
)

var (
	driverOnce sync.Once
	driverPath string
	driverErr  error
)

// buildDriver compiles testdata/driver.c with the runtime sources once.
func buildDriver(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("compiles and runs the C test driver; skipped under -short")
	}
	gcc := needGCC(t)
	needArrowHeader(t)
	driverOnce.Do(func() {
		dir, err := os.MkdirTemp("", "stint-driver")
		if err != nil {
			driverErr = err
			return
		}
		driverPath = filepath.Join(dir, "driver")
		cmd := exec.Command(gcc, "-O1", "-g", "-Wall", "-Werror", "-pthread", "-Iinclude", "-Isrc",
			"-o", driverPath, "testdata/driver.c", "src/stint.c", "src/entry.S")
		if out, err := cmd.CombinedOutput(); err != nil {
			driverErr = fmt.Errorf("gcc: %v\n%s", err, out)
		}
	})
	if driverErr != nil {
		t.Fatal(driverErr)
	}
	return driverPath
}

type driverRun struct {
	kv     map[string]string
	stdout string
	stderr string
	out    string // $STINT_OUT
}

func (r *driverRun) num(t *testing.T, key string) uint64 {
	t.Helper()
	v, ok := r.kv[key]
	if !ok {
		t.Fatalf("driver printed no %s=; stdout:\n%s", key, r.stdout)
	}
	n, err := strconv.ParseUint(v, 10, 64)
	if err != nil {
		t.Fatalf("%s=%q: %v", key, v, err)
	}
	return n
}

func parseKV(s string) map[string]string {
	kv := map[string]string{}
	for _, l := range strings.Split(s, "\n") {
		if k, v, ok := strings.Cut(l, "="); ok {
			kv[k] = v
		}
	}
	return kv
}

// runDriver runs the driver in mode with $STINT_OUT set to a new directory
// (unless env sets it) and checks it exits 0 without FAIL lines.
func runDriver(t *testing.T, mode string, env ...string) *driverRun {
	t.Helper()
	return runDriverArgs(t, []string{mode}, env...)
}

func runDriverArgs(t *testing.T, args []string, env ...string) *driverRun {
	t.Helper()
	mode := args[0]
	drv := buildDriver(t)
	out := filepath.Join(t.TempDir(), "traces")
	cmd := exec.Command(drv, args...)
	cmd.Env = append(append(os.Environ(), "STINT_OUT="+out, "STINT_DISABLE="), env...)
	var so, se bytes.Buffer
	cmd.Stdout, cmd.Stderr = &so, &se
	err := cmd.Run()
	r := &driverRun{kv: parseKV(so.String()), stdout: so.String(), stderr: se.String(), out: out}
	for _, e := range env {
		if v, ok := strings.CutPrefix(e, "STINT_OUT="); ok {
			r.out = v
		}
	}
	if err != nil || strings.Contains(r.stdout, "FAIL") {
		t.Fatalf("driver %s: %v\nstdout:\n%s\nstderr:\n%s", mode, err, r.stdout, r.stderr)
	}
	return r
}

// traceOf reads the one trace file of pid in dir.
func traceOf(t *testing.T, dir string, pid uint64) (*formats.Trace, string) {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(dir, fmt.Sprintf("driver.%d.*.arrow", pid)))
	if len(files) != 1 {
		all, _ := filepath.Glob(filepath.Join(dir, "*"))
		t.Fatalf("want one trace file for pid %d, have %v (all: %v)", pid, files, all)
	}
	tr, err := formats.ReadFile(files[0])
	if err != nil {
		t.Fatalf("read %s: %v", files[0], err)
	}
	return tr, files[0]
}

func hexID(base byte) string {
	b := make([]byte, 20)
	for i := range b {
		b[i] = base + byte(i)
	}
	return hex.EncodeToString(b)
}

// moduleIDs finds the ids of the driver's modules A and B and of libc.
func moduleIDs(t *testing.T, tr *formats.Trace, r *driverRun) (a, b uint16, libc *formats.Module) {
	t.Helper()
	ra, rb := r.num(t, "region_a"), r.num(t, "region_b")
	libcDst := r.num(t, "libc_dst")
	a, b = formats.NoModule, formats.NoModule
	for i := range tr.Modules {
		m := &tr.Modules[i]
		switch {
		case m.Base == ra && m.Rewritten:
			a = m.ID
			if m.BuildID != hexID(0xa0) {
				t.Errorf("module A build id %s", m.BuildID)
			}
		case m.Base == rb && m.Rewritten:
			b = m.ID
			if m.BuildID != hexID(0xb0) {
				t.Errorf("module B build id %s", m.BuildID)
			}
		case !m.Rewritten && libcDst-m.Base < m.Size:
			libc = m
		}
	}
	if a == formats.NoModule || b == formats.NoModule {
		t.Fatalf("modules A (base %#x) and B (base %#x) not both in %+v", ra, rb, tr.Modules)
	}
	return a, b, libc
}

// checkValueEvents checks module A's value events: per thread, values
// t<<32|0, |1, ... in order with nondecreasing time, and n events per
// thread if full, else a prefix (a contiguous start) for each thread.
func checkValueEvents(t *testing.T, tr *formats.Trace, a uint16, full bool) int {
	t.Helper()
	type seq struct {
		tag, next uint64
		time      uint64
	}
	perTID := map[uint32]*seq{}
	n := 0
	for _, e := range tr.Events {
		if e.SrcModule != a || e.Kind != formats.Kind(KSyscall) {
			continue
		}
		if e.Value>>32 == 0xd {
			continue // recorded after the first flush, by the main thread
		}
		n++
		if e.Dst != 0 || e.DstModule != formats.NoModule || e.Src != 0x10 {
			t.Fatalf("syscall event %+v: want src 0x10, dst 0 in no module", e)
		}
		s := perTID[e.TID]
		if s == nil {
			s = &seq{tag: e.Value >> 32}
			perTID[e.TID] = s
		}
		if e.Value>>32 != s.tag || e.Value&0xffffffff != s.next {
			t.Fatalf("tid %d: value %#x, want %#x", e.TID, e.Value, s.tag<<32|s.next)
		}
		if e.Time < s.time {
			t.Fatalf("tid %d: time went back from %d to %d", e.TID, s.time, e.Time)
		}
		s.next++
		s.time = e.Time
	}
	if len(perTID) != drvThreads {
		t.Errorf("value events from %d threads, want %d", len(perTID), drvThreads)
	}
	tags := map[uint64]bool{}
	for tid, s := range perTID {
		if tags[s.tag] {
			t.Errorf("thread tag %d seen on two tids", s.tag)
		}
		tags[s.tag] = true
		if full && s.next != drvIter {
			t.Errorf("tid %d (thread %d): %d events, want %d", tid, s.tag, s.next, drvIter)
		}
	}
	return n
}

func TestDriverReturn(t *testing.T) {
	r := runDriver(t, "return")
	pid, child := r.num(t, "pid"), r.num(t, "child")
	if r.kv["child_status"] != "0" {
		t.Errorf("child status %s", r.kv["child_status"])
	}
	if r.stderr != "" {
		t.Errorf("stderr: %q", r.stderr)
	}
	if d := r.num(t, "dropped"); d != 0 {
		t.Errorf("%d events dropped", d)
	}
	tr, name := traceOf(t, r.out, pid)
	if !tr.End.Clean() {
		t.Errorf("stream end %v", tr.End)
	}
	if fi, err := os.Stat(filepath.Dir(name)); err != nil || fi.Mode().Perm() != 0o755 {
		t.Errorf("trace directory: %v, %v", fi.Mode(), err)
	}
	drv, _ := filepath.EvalSymlinks(driverPath)
	if tr.Run.Binary != drv || tr.Run.PID != int64(pid) || tr.Run.Tool != "branch" ||
		tr.Run.Options != "tool=branch every=1" || tr.Run.BuildID != hexID(0xa0) || tr.Run.MonoStartNS == 0 || tr.Run.StartNS == 0 {
		t.Errorf("run = %+v", tr.Run)
	}
	a, b, libc := moduleIDs(t, tr, r)
	if libc == nil || !strings.Contains(filepath.Base(libc.Path), "libc") {
		t.Errorf("libc not in the module table: %+v", tr.Modules)
	}
	handler := r.num(t, "handler_calls")
	t.Logf("%d events recorded from signal handlers", handler)
	want := uint64(drvThreads*drvIter + drvDirect + drvIndirect*3)
	if have := uint64(len(tr.Events)); have != want+handler+10 || r.num(t, "events") != want+handler {
		t.Errorf("%d events in the file, counter %d; want %d + %d from handlers + 10 after the flush",
			have, r.num(t, "events"), want, handler)
	}
	var late, fromHandler uint64
	for _, e := range tr.Events {
		switch {
		case e.SrcModule == a && e.Kind == formats.Kind(KSyscall) && e.Value>>32 == 0xd:
			if e.Value&0xffffffff != late {
				t.Errorf("late event %d: %#x", late, e.Value)
			}
			late++
		case e.SrcModule == a && e.Kind == formats.Kind(KCall):
			fromHandler++
		}
	}
	if late != 10 || fromHandler != handler {
		t.Errorf("%d events after the flush (want 10), %d from handlers (want %d)", late, fromHandler, handler)
	}
	if n := checkValueEvents(t, tr, a, true); n != drvThreads*drvIter {
		t.Errorf("%d value events", n)
	}

	// Dedup: every direct probe once, every (indirect probe, dst) once.
	type key struct {
		kind      formats.Kind
		src       uint64
		dstModule uint16
		dst       uint64
	}
	seen := map[key]int{}
	for _, e := range tr.Events {
		if e.SrcModule == b {
			seen[key{e.Kind, e.Src, e.DstModule, e.Dst}]++
		}
	}
	var keys []key
	for i := 0; i < drvDirect; i++ {
		k := formats.Kind(KJccTaken)
		if i%2 == 1 {
			k = formats.Kind(KJccNotTaken)
		}
		keys = append(keys, key{k, 0x100 + 0x100*uint64(i/2), b, 0x800 + 8*uint64(i)})
	}
	anon, libcDst := r.num(t, "anon"), r.num(t, "libc_dst")
	for i := 0; i < drvIndirect; i++ {
		src := 0x900 + 0x10*uint64(i)
		keys = append(keys, key{formats.Kind(KIndCall), src, b, 0x777})
		if libc != nil {
			keys = append(keys, key{formats.Kind(KIndCall), src, libc.ID, libcDst - libc.Base})
		}
		keys = append(keys, key{formats.Kind(KIndCall), src, formats.NoModule, anon + 0x10})
	}
	for _, k := range keys {
		if seen[k] != 1 {
			t.Errorf("event %+v recorded %d times, want once", k, seen[k])
		}
		delete(seen, k)
	}
	for k, n := range seen {
		t.Errorf("unexpected event %+v (%d times)", k, n)
	}

	// The child wrote its own file, with its own pid, carrying on with
	// the parent's dedup state.
	ct, cname := traceOf(t, r.out, child)
	if cname == name {
		t.Fatal("child and parent share a file")
	}
	if ct.Run.PID != int64(child) || ct.Run.PPID != int64(pid) {
		t.Errorf("child run = %+v, want pid %d ppid %d", ct.Run, child, pid)
	}
	ca, cb, _ := moduleIDs(t, ct, r)
	var vals, ind int
	for _, e := range ct.Events {
		switch {
		case e.SrcModule == ca && e.Kind == formats.Kind(KSyscall):
			if e.Value != 0xc<<32|uint64(vals) {
				t.Errorf("child value event %d: %#x", vals, e.Value)
			}
			vals++
		case e.SrcModule == cb && e.Kind == formats.Kind(KIndCall) && e.Dst == 0x999 && e.DstModule == cb:
			ind++
		default:
			t.Errorf("child: unexpected event %+v", e)
		}
	}
	if vals != drvChildN || ind != 1 {
		t.Errorf("child: %d value events (want %d), %d indirect (want 1)", vals, drvChildN, ind)
	}
	for _, e := range tr.Events {
		if e.Value>>32 == 0xc || e.Value>>32 == 0xe {
			t.Fatalf("a child's event %+v is in the parent's file", e)
		}
	}

	// The child forked while the workers were inside the runtime.
	if r.kv["busy_child_status"] != "0" {
		t.Errorf("busy child status %s", r.kv["busy_child_status"])
	}
	bt, _ := traceOf(t, r.out, r.num(t, "busy_child"))
	if bt.Run.PID != int64(r.num(t, "busy_child")) || !bt.End.Clean() {
		t.Errorf("busy child: run %+v, end %v", bt.Run, bt.End)
	}
	_, bb, _ := moduleIDs(t, bt, r)
	fputs := r.num(t, "fputs")
	vals, ind = 0, 0
	for _, e := range bt.Events {
		switch {
		case e.Kind == formats.Kind(KSyscall) && e.Value>>32 == 0xe:
			if e.Value&0xffffffff != uint64(vals) {
				t.Errorf("busy child value event %d: %#x", vals, e.Value)
			}
			vals++
		case e.Kind == formats.Kind(KIndCall) && e.SrcModule == bb:
			m := bt.Module(e.DstModule)
			if m == nil || !strings.Contains(m.Path, "libc") || m.Base+e.Dst != fputs {
				t.Errorf("busy child: fputs call recorded as %+v in module %+v", e, m)
			}
			ind++
		}
	}
	if vals != drvChildN || ind != 1 {
		t.Errorf("busy child: %d value events (want %d), %d indirect (want 1)", vals, drvChildN, ind)
	}
}

// checkSealedOnly checks a trace whose process ended without fini (_exit
// or SIGKILL): every committed row is there, batch by batch (the last one
// published in place), the file reads cleanly and ends in the unsealed
// zero tail.
func checkSealedOnly(t *testing.T, r *driverRun, pid uint64) {
	t.Helper()
	tr, _ := traceOf(t, r.out, pid)
	if tr.End != formats.EndZeros && tr.End != formats.EndEOF {
		t.Errorf("stream end %v, want the unsealed tail", tr.End)
	}
	total := drvThreads*drvIter + drvDirect + drvIndirect*3 + int(r.num(t, "handler_calls"))
	if ev := int(r.num(t, "events")); ev != total {
		t.Errorf("events counter %d, want %d (%d dropped)", ev, total, r.num(t, "dropped"))
	}
	if len(tr.Events) != total || tr.Batches != (total+drvBatch-1)/drvBatch {
		t.Errorf("%d events in %d batches, want %d in %d", len(tr.Events), tr.Batches, total, (total+drvBatch-1)/drvBatch)
	}
	a, _, _ := moduleIDs(t, tr, r)
	checkValueEvents(t, tr, a, true)
}

func TestDriverExitWithoutFini(t *testing.T) {
	r := runDriver(t, "_exit")
	checkSealedOnly(t, r, r.num(t, "pid"))
}

func TestDriverSIGKILL(t *testing.T) {
	drv := buildDriver(t)
	out := filepath.Join(t.TempDir(), "traces")
	cmd := exec.Command(drv, "kill")
	cmd.Env = append(os.Environ(), "STINT_OUT="+out, "STINT_DISABLE=")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var se bytes.Buffer
	cmd.Stderr = &se
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var so strings.Builder
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		so.WriteString(sc.Text() + "\n")
		if sc.Text() == "ready" {
			break
		}
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, stdout)
	err = cmd.Wait()
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("driver did not die of SIGKILL: %v\nstdout:\n%s\nstderr:\n%s", err, so.String(), se.String())
	}
	r := &driverRun{kv: parseKV(so.String()), stdout: so.String(), out: out}
	if strings.Contains(r.stdout, "FAIL") {
		t.Fatalf("driver:\n%s", r.stdout)
	}
	checkSealedOnly(t, r, r.num(t, "pid"))
}

func TestProbeEntryPreservesRegisters(t *testing.T) {
	r := runDriver(t, "regs")
	tr, _ := traceOf(t, r.out, r.num(t, "pid"))
	if len(tr.Events) != 1 || tr.Events[0].Value != 0x5a5a || tr.Events[0].Kind != formats.Kind(KSyscall) {
		t.Errorf("events %+v, want one syscall event with value 0x5a5a", tr.Events)
	}
}

// TestProbeEntryHitTable: the driver checks that a recorded pair comes
// back from the hit table, with registers and flags intact, and that a
// torn slot is a miss; the trace has each of the ten pairs once.
func TestProbeEntryHitTable(t *testing.T) {
	r := runDriver(t, "hit")
	tr, _ := traceOf(t, r.out, r.num(t, "pid"))
	seen := map[uint64]int{}
	for _, e := range tr.Events {
		if e.Kind == formats.Kind(KIndCall) {
			seen[e.Dst]++
		}
	}
	if len(seen) != 10 {
		t.Errorf("indirect call events to %v, want ten destinations", seen)
	}
	for d, n := range seen {
		if n != 1 {
			t.Errorf("destination %#x recorded %d times, want once", d, n)
		}
	}
}

func TestRestoreAtomic(t *testing.T) {
	runDriver(t, "restore")
}

func TestUntraced(t *testing.T) {
	notDir := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(notDir, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		env     []string
		wantErr *regexp.Regexp // nil: stderr empty
		files   int            // trace files expected
	}{
		{"not a directory", []string{"STINT_OUT=" + notDir + "/traces"},
			regexp.MustCompile(`^stint: create trace directory \S+/file/traces: ENOTDIR; running untraced\n$`), 0},
		{"disabled", []string{"STINT_DISABLE=1"}, nil, 0},
		// Module B cannot map its chunk: its patches get their original
		// bytes back (ABI 1: B runs untraced; ABI 2: only the chunk's
		// dependent sites are unprobed); A still traces.
		{"chunk clash", []string{"DRIVER_CHUNK_CLASH=1"}, chunkClashMsg(), 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := runDriver(t, "untraced", tt.env...)
			if tt.wantErr == nil {
				if r.stderr != "" {
					t.Errorf("stderr %q, want nothing", r.stderr)
				}
			} else if !tt.wantErr.MatchString(r.stderr) {
				t.Errorf("stderr %q, want match for %s", r.stderr, tt.wantErr)
			}
			files, _ := filepath.Glob(filepath.Join(r.out, "*"))
			if len(files) != tt.files {
				t.Errorf("trace files written: %v, want %d", files, tt.files)
			}
		})
	}
}

// TestTraceFileNames checks the name pattern <basename>.<pid>.<ns>.arrow.
func TestTraceFileNames(t *testing.T) {
	r := runDriver(t, "regs")
	files, _ := filepath.Glob(filepath.Join(r.out, "*.arrow"))
	sort.Strings(files)
	re := regexp.MustCompile(`^driver\.(\d+)\.\d+\.arrow$`)
	if len(files) != 1 {
		t.Fatalf("files %v", files)
	}
	m := re.FindStringSubmatch(filepath.Base(files[0]))
	if m == nil || m[1] != r.kv["pid"] {
		t.Errorf("file %s, pid %s", filepath.Base(files[0]), r.kv["pid"])
	}
}

// TestModuleLookup finds the module of a destination in no known module
// (the driver's call into libc) three ways: PROCMAP_QUERY with the maps
// scan behind it (the default), the scan alone (kernels before 6.11) and
// the query alone. All three name the same file with the same extent.
func TestModuleLookup(t *testing.T) {
	var want *formats.Module
	for _, hook := range []string{"1", "", "2"} {
		if hook == "2" && !kernelAtLeast(6, 11) {
			t.Log("PROCMAP_QUERY needs Linux 6.11: the query alone not checked")
			continue
		}
		r := runDriver(t, "return", TestNoProcmapEnv+"="+hook)
		tr, _ := traceOf(t, r.out, r.num(t, "pid"))
		_, _, libc := moduleIDs(t, tr, r)
		switch {
		case libc == nil || !strings.Contains(filepath.Base(libc.Path), "libc"):
			t.Errorf("%s=%s: libc not in the module table: %+v", TestNoProcmapEnv, hook, tr.Modules)
		case want == nil:
			want = libc
		case libc.Path != want.Path || libc.Size != want.Size:
			t.Errorf("%s=%s: libc %s size %#x, the scan's %s size %#x", TestNoProcmapEnv, hook, libc.Path, libc.Size, want.Path, want.Size)
		}
	}
}

// kernelAtLeast reports whether the running kernel is major.minor or later.
func kernelAtLeast(major, minor int) bool {
	var u syscall.Utsname
	if syscall.Uname(&u) != nil {
		return false
	}
	var b []byte
	for _, c := range u.Release {
		if c == 0 {
			break
		}
		b = append(b, byte(c))
	}
	var ma, mi int
	if _, err := fmt.Sscanf(string(b), "%d.%d", &ma, &mi); err != nil {
		return false
	}
	return ma > major || ma == major && mi >= minor
}

// TestBlobLoaded runs the committed blob itself: copied to two random
// addresses, entered through its header's DT_INIT, e_entry (on a fake
// initial stack), probe and DT_FINI offsets.
func TestBlobLoaded(t *testing.T) {
	r := runDriverArgs(t, []string{"blob", "blob/stint.bin"})
	tr, _ := traceOf(t, r.out, r.num(t, "pid"))
	if !tr.End.Clean() {
		t.Errorf("stream end %v", tr.End)
	}
	var b, e uint16 = formats.NoModule, formats.NoModule
	for _, m := range tr.Modules {
		switch m.Base {
		case r.num(t, "region_b"):
			b = m.ID
		case r.num(t, "region_e"):
			e = m.ID
			if drv, _ := filepath.EvalSymlinks(driverPath); m.Path != drv {
				t.Errorf("executable module path %q, want %q", m.Path, drv)
			}
		}
	}
	if b == formats.NoModule || e == formats.NoModule {
		t.Fatalf("modules %+v", tr.Modules)
	}
	if tr.Run.BuildID != hexID(0xb0) {
		t.Errorf("run build id %q", tr.Run.BuildID)
	}
	var vals, calls int
	for _, ev := range tr.Events {
		switch {
		case ev.Kind == formats.Kind(KSyscall) && ev.SrcModule == b:
			if ev.Value != 0xb<<32|uint64(vals) {
				t.Fatalf("value event %d: %#x", vals, ev.Value)
			}
			vals++
		case ev.Kind == formats.Kind(KCall) && ev.Src == 0x1020 && ev.Dst == 0x1100 && ev.SrcModule == ev.DstModule:
			calls++
		default:
			t.Errorf("unexpected event %+v", ev)
		}
	}
	if vals != drvIter || calls != 2 {
		t.Errorf("%d value events (want %d), %d calls (want 2: once per module)", vals, drvIter, calls)
	}
}

// TestClosedTraceFD: a program that closes the trace's descriptor and
// puts a file of its own under the same number (as daemons do) keeps its
// file intact, and the trace goes on: the runtime opens its file again
// by name when it next grows it (fd_ours_again), never touching the
// number the program took.
func TestClosedTraceFD(t *testing.T) {
	own := filepath.Join(t.TempDir(), "own.txt")
	r := runDriver(t, "closefd", "DRIVER_OWN_FILE="+own)
	b, err := os.ReadFile(own)
	if err != nil || string(b) != "hello" {
		t.Errorf("program's own file holds %q (%v), want \"hello\"", b, err)
	}
	if r.stderr != "" {
		t.Errorf("stderr %q, want none (the trace goes on)", r.stderr)
	}
	files, _ := filepath.Glob(filepath.Join(r.out, "*.arrow"))
	if len(files) != 1 {
		t.Fatalf("traces %v, want one", files)
	}
	tr, err := formats.ReadFile(files[0])
	if err != nil {
		t.Fatalf("read %s: %v", files[0], err)
	}
	// the driver records 8 x 4096 distinct values after the close: more
	// than the file held, so it grew through the descriptor opened again
	if len(tr.Events) < 8*4096 || !tr.End.Clean() {
		t.Errorf("%d events, end %v; want at least %d and a clean end", len(tr.Events), tr.End, 8*4096)
	}
}

func chunkClashMsg() *regexp.Regexp {
	if ABIVersion >= 2 {
		return regexp.MustCompile(`^stint: 1 of 1 trampoline chunks could not be mapped \(EEXIST\); \d+ sites left unprobed\n$`)
	}
	return regexp.MustCompile(`^stint: map trampoline chunks: EEXIST; running untraced\n$`)
}
