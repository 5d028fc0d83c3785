package e2e

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stint-project/stint/internal/fixtures"
	"github.com/stint-project/stint/rewrite"
	"github.com/stint-project/stint/runtime"
)

// TestRecordedPatchesRestored: in a program with one thread, every
// restorable patch whose probes have all recorded holds its original
// bytes again (patch_done), whether or not one store can write them.
// libsqlite3 is traced in full (no budget) while sqlite3 runs the
// workload and then waits for input; its patch table and code are read
// from /proc/PID/mem. A patch at a word's last byte, of 2 bytes across
// a word, or not at its instruction's start must not stay patched once
// recorded: a direct call among them would be emulated on every run.
// The test fails if one recorded
// restorable patch is still patched, or if the run restored no patch
// that needed more than one store (then it proves nothing).
func TestRecordedPatchesRestored(t *testing.T) {
	r := sqliteAtRest(t)
	out, m, patches, base, mem := r.out, r.m, r.patches, r.base, r.mem
	const patchSize = 32
	table := make([]byte, len(patches)*patchSize)
	if _, err := mem.ReadAt(table, int64(base+m.PatchesVaddr)); err != nil {
		t.Fatal(err)
	}
	var done, wide, still int
	for i, pt := range patches {
		remaining := binary.LittleEndian.Uint32(table[i*patchSize+12:])
		if pt.Flags&runtime.PatchRestorable == 0 || pt.NProbes == 0 || remaining != 0 || pt.Len == 0 || pt.Len > 16 {
			continue
		}
		done++
		got := make([]byte, pt.Len)
		if _, err := mem.ReadAt(got, int64(base+pt.Addr)); err != nil {
			t.Fatal(err)
		}
		// more than one store: across an aligned 16-byte word, or at
		// an 8-byte word's last byte (restore_sync's old limits)
		oneStore := pt.Addr&15+uint64(pt.Len) <= 16 && (pt.Len <= 8 || pt.Addr&7 == 0)
		if !oneStore {
			wide++
		}
		if !bytes.Equal(got, pt.Orig[:pt.Len]) {
			still++
			if still <= 5 {
				t.Errorf("patch %d at %#x (%d bytes, flags %#x) recorded all its probes but holds % x, want % x",
					i, pt.Addr, pt.Len, pt.Flags, got, pt.Orig[:pt.Len])
			}
		}
	}
	t.Logf("%d restorable patches recorded all their probes, %d of them wider than one store; %d still patched", done, wide, still)
	if still > 5 {
		t.Errorf("... %d recorded patches still patched in all", still)
	}
	if wide == 0 {
		t.Errorf("no recorded patch needed more than one store: the test checks nothing")
	}
	checkHalved(t, mem, base, out, table, patches)
}

// restingLib is libsqlite3 rewritten in default mode, with its tables,
// in a sqlite3 that has run the workload and waits for input.
type restingLib struct {
	out     string // the rewritten library
	m       *runtime.Module
	probes  []runtime.Probe
	patches []runtime.Patch
	base    uint64   // its load base in the process
	mem     *os.File // the process's memory
}

// sqliteAtRest rewrites libsqlite3 (default mode), runs the sqlite3
// workload with it and leaves sqlite3 waiting (killed at the test's end).
func sqliteAtRest(t *testing.T) restingLib {
	t.Helper()
	lib, sql, _ := sqliteWorkload(t)
	dir := t.TempDir()
	r := restingLib{}
	r.out, _ = rewritten(t, lib, dir, rewrite.Options{})
	r.m, r.probes, r.patches = probesAndPatches(t, r.out)
	env := append(traceEnv(filepath.Join(dir, "traces")), "LD_LIBRARY_PATH="+dir)
	input := ".output /dev/null\n" + string(sql) + "\n.output stdout\n.print ready\n"
	cmd, stdin, _ := startSqlite3(t, env, input, "ready\n")
	t.Cleanup(func() { stdin.Close() })
	r.base, r.mem = openMem(t, cmd.Process.Pid, r.out)
	return r
}

// checkHalved: a patch the runtime halved (a rel32 jcc whose not-taken
// outcome recorded and taken one did not, runtime.PatchHalved) holds its
// original bytes but for the jcc's rel32, which reaches the taken
// probe's thunk (its arm's target in the file); once the taken outcome
// too recorded it holds its original bytes whole (checked above). table
// is the patch table as the running process holds it.
func checkHalved(t *testing.T, mem io.ReaderAt, base uint64, out string, table []byte, patches []runtime.Patch) {
	t.Helper()
	_, probes, _ := probesAndPatches(t, out)
	f, err := elf.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	taken := map[uint32]runtime.Probe{}
	for _, p := range probes {
		if runtime.Kind(p.Kind) == runtime.KJccTaken {
			taken[p.Patch] = p
		}
	}
	halved, bad := 0, 0
	for i, pt := range patches {
		flags, remaining := table[i*32+9], binary.LittleEndian.Uint32(table[i*32+12:])
		if flags&runtime.PatchHalved == 0 || remaining != 1 {
			continue
		}
		halved++
		tp, ok := taken[uint32(i)]
		if !ok {
			t.Fatalf("patch %d at %#x halved, but no jcc-taken probe of it", i, pt.Addr)
		}
		armRel, err := runtime.ReadVaddr(f, tp.Arm, 4)
		if err != nil {
			t.Fatal(err)
		}
		thunk := tp.Arm + 4 + uint64(int64(int32(binary.LittleEndian.Uint32(armRel))))
		want := append([]byte(nil), pt.Orig[:pt.Len]...)
		at := tp.Src - pt.Addr
		for uint64(len(want)) < at+6 {
			want = append(want, 0)
		}
		binary.LittleEndian.PutUint32(want[at+2:], uint32(int32(int64(thunk)-int64(tp.Src+6))))
		got := make([]byte, len(want))
		if _, err := mem.ReadAt(got, int64(base+pt.Addr)); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			if bad++; bad <= 5 {
				t.Errorf("halved patch %d at %#x holds % x, want % x (the jcc at %#x aimed at its thunk %#x)", i, pt.Addr, got, want, tp.Src, thunk)
			}
		}
	}
	t.Logf("%d patches halved (their jcc's taken side still to record), %d wrong", halved, bad)
	if halved == 0 {
		t.Errorf("no patch halved: the sqlite3 workload leaves hundreds of rel32 jccs with only their not-taken side seen")
	}
}

// TestSyncCallSwitchedOffSoon: a sync site (a patch that needs more than
// one store) that runs once the budget is spent is switched off by the
// program's own thread at its next runtime call (self mode), and meanwhile
// its arm goes straight through (muted). The synccall fixture then runs
// nothing but that site: the period thread's doorbell must unmute the arm
// so that its next run calls and the site is switched off. With a 1 ns
// budget and a 60 s period nothing else would do it before the fixture
// gives up (10 s, "still patched"), as it would if the doorbell rang
// only arms that had recorded and left the muted ones to a period's
// switch-on.
func TestSyncCallSwitchedOffSoon(t *testing.T) {
	bin := fixtures.Build(t, "synccall", fixtures.Variant{Opt: fixtures.O2, PIE: true})
	dir := t.TempDir()
	out, _ := rewritten(t, bin, dir, rewrite.Options{Budget: "10%", Period: "100ms"})
	_, _, patches := probesAndPatches(t, out)
	site := elfSymbol(t, bin, "sc_site", nil).Value
	flags := -1
	for _, pt := range patches {
		if pt.Addr == site {
			flags = int(pt.Flags)
		}
	}
	if site == 0 || flags < 0 || flags&int(runtime.PatchSync) == 0 {
		t.Fatalf("the call at sc_site (%#x) is not a sync site (patch flags %#x): the fixture tests nothing", site, flags)
	}
	env := append(traceEnv(filepath.Join(dir, "traces")), "STINT_BUDGET=1ns", "STINT_PERIOD=60s")
	stdout, stderr, code, err := fixtures.RunTimeout(out, []string{"wait"}, env, 60*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if code != 0 || string(stdout) != "call site restored\n" {
		t.Errorf("exit %d, stdout %q, stderr %q; want the call site restored", code, stdout, stderr)
	}
}
