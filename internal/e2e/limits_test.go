package e2e

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stint-project/stint/internal/fixtures"
	"github.com/stint-project/stint/rewrite"
	"github.com/stint-project/stint/runtime"
)

// TestFileSizeLimitNeverKills: under a file size limit (ulimit -f) far
// below what the trace needs, a rewritten program runs as natively, and
// the runtime says once that it stopped tracing. Going past the limit
// would make the kernel raise SIGXFSZ, which kills: the runtime checks
// the limit before it extends a file (the trace, the paths file, the
// stub memfd, the redundancy log, its own lines on stderr).
func TestFileSizeLimitNeverKills(t *testing.T) {
	f, bin, nOut, nErr, nCode := recurseNative(t)
	said := regexp.MustCompile(`^stint: extend trace file [^\n]*: EFBIG; running untraced\n`)
	for _, opts := range []rewrite.Options{{}, {Every: true, Rows: true}, {Every: true}} {
		dir := t.TempDir()
		out, _ := rewritten(t, bin, dir, opts)
		traces := filepath.Join(dir, "traces")
		// 64 KiB: below the trace's first extension
		script := "ulimit -f 64 && exec " + out + " " + strings.Join(f.Args, " ")
		rOut, rErr, rCode, err := fixtures.Run("/bin/sh", []string{"-c", script}, traceEnv(traces))
		if err != nil {
			t.Fatal(err)
		}
		if rCode != nCode || !bytes.Equal(rOut, nOut) {
			t.Fatalf("%+v: exit %d (native %d), stdout %q (native %q), stderr %q", opts, rCode, nCode, clip(rOut), clip(nOut), clip(rErr))
		}
		rest := said.ReplaceAll(rErr, nil)
		if len(rest) == len(rErr) || !bytes.Equal(rest, nErr) {
			t.Errorf("%+v: stderr %q, want native's %q after one line saying the trace stopped", opts, clip(rErr), clip(nErr))
		}
	}
}

// TestAddressSpaceLimitStillTraced: under an address space limit (ulimit
// -v, which counts every mapping, used or not) the runtime maps the
// trace with an eighth of the limit instead of its usual 64 GiB, so the
// run is still traced; before, that mapping failed and the run went
// untraced. (3 GiB: a rewritten executable's image spans about 2 GiB,
// its stub space, which the kernel maps whole at exec.)
func TestAddressSpaceLimitStillTraced(t *testing.T) {
	f, bin, nOut, nErr, nCode := recurseNative(t)
	for _, opts := range []rewrite.Options{{}, {Every: true}} {
		dir := t.TempDir()
		out, _ := rewritten(t, bin, dir, opts)
		traces := filepath.Join(dir, "traces")
		script := "ulimit -v 3145728 && exec " + out + " " + strings.Join(f.Args, " ")
		rOut, rErr, rCode, err := fixtures.Run("/bin/sh", []string{"-c", script}, traceEnv(traces))
		if err != nil {
			t.Fatal(err)
		}
		if rCode != nCode || !bytes.Equal(rOut, nOut) || !bytes.Equal(rErr, nErr) {
			t.Fatalf("%+v: exit %d (native %d), stdout %q (native %q), stderr %q (native %q)", opts, rCode, nCode, clip(rOut), clip(nOut), clip(rErr), clip(nErr))
		}
		trs := readTraces(t, traces)
		if len(trs) != 1 || len(trs[0].Events) == 0 {
			t.Errorf("%+v: %d traces, want 1 with events", opts, len(trs))
		}
	}
}

// TestDescriptorsLeftToProgram: the runtime's long-lived descriptors (the
// trace, the paths file, /proc/self/task) sit at the top of the
// descriptor table, so the program's opens get the numbers they get
// natively (3 for the first, not 4 or 6), under a small limit too; and
// a program started with stdout closed does not write into the trace
// (before, the trace took fd 1 and the program's output overwrote its
// header).
func TestDescriptorsLeftToProgram(t *testing.T) {
	if _, err := exec.LookPath("sh"); err != nil {
		t.Skip("no sh")
	}
	bin := testC(t, "fdnums")
	for _, c := range []struct{ limit, redir string }{{"64", ""}, {"1024", ""}, {"1024", " >&-"}} {
		limit, script := c.limit, "ulimit -n "+c.limit+" && exec "
		nOut, _, _, err := fixtures.Run("/bin/sh", []string{"-c", script + bin + c.redir}, nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, opts := range []rewrite.Options{{}, {Budget: "10%"}, {Every: true}} {
			dir := t.TempDir()
			out, _ := rewritten(t, bin, dir, opts)
			traces := filepath.Join(dir, "traces")
			rOut, rErr, rCode, err := fixtures.Run("/bin/sh", []string{"-c", script + out + c.redir}, traceEnv(traces))
			if err != nil {
				t.Fatal(err)
			}
			if rCode != 0 || !bytes.Equal(rOut, nOut) {
				t.Errorf("ulimit -n %s%s, %+v: exit %d, stdout %q (native %q), stderr %q", limit, c.redir, opts, rCode, rOut, nOut, clip(rErr))
			}
			if trs := readTraces(t, traces); len(trs) != 1 {
				t.Errorf("ulimit -n %s%s, %+v: %d traces, want 1", limit, c.redir, opts, len(trs))
			}
		}
	}
}

// TestDescriptorsClosedByProgram: a program that closes every descriptor
// it did not open (close_range, as daemons do at start) closes the
// runtime's too; the runtime opens its files again by name when it next
// grows or writes them, so the trace goes on, with no message, and the
// program's own file still gets its native number.
func TestDescriptorsClosedByProgram(t *testing.T) {
	bin := testC(t, "closeall")
	nOut, nErr, nCode := nativeRun(t, bin)
	for _, opts := range []rewrite.Options{{Every: true}, {Every: true, Rows: true}} {
		dir := t.TempDir()
		out, _ := rewritten(t, bin, dir, opts)
		traces := filepath.Join(dir, "traces")
		rOut, rErr, rCode, err := fixtures.Run(out, nil, traceEnv(traces))
		if err != nil {
			t.Fatal(err)
		}
		if rCode != nCode || !bytes.Equal(rOut, nOut) || !bytes.Equal(rErr, nErr) {
			t.Fatalf("%+v: exit %d, stdout %q, stderr %q; native %d, %q, %q", opts, rCode, rOut, clip(rErr), nCode, nOut, nErr)
		}
		trs := readTraces(t, traces)
		if len(trs) != 1 {
			t.Fatalf("%+v: %d traces, want 1", opts, len(trs))
		}
		// two million rounds of a loop with a jcc each: the trace holds
		// every one of them only if the files kept growing
		if n := len(trs[0].Events); n < 2000000 {
			t.Errorf("%+v: %d events, want at least 2,000,000", opts, n)
		}
	}
}

// TestDiskFullNeverKills: the runtime writes its traces through shared
// mappings, and a store to a page the file system has no room for raises
// SIGBUS. On a small tmpfs a rewritten program used to die of it (exit
// 135): with a complete row trace on 2 MiB, and with a compact trace on
// 1 MiB, where the paths file stays sparse. The runtime now allocates
// what it will write through a mapping first (fallocate: the trace's
// growth; a thread's chunk of the paths file in steps), so it gets
// ENOSPC, says so once and runs on untraced, and the trace written so
// far reads back (a compact one decodes whole). Needs root, to mount
// the tmpfs.
func TestDiskFullNeverKills(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mounting a small tmpfs needs root")
	}
	bin := testC(t, "closeall")
	nOut, nErr, nCode := nativeRun(t, bin)
	for _, c := range []struct {
		name, size string
		opts       rewrite.Options
		said       string
	}{
		{"rows", "2m", rewrite.Options{Every: true, Rows: true}, `extend trace file [^\n]*`},
		{"compact", "1m", rewrite.Options{Every: true}, `allocate paths file [^\n]*\.paths`},
	} {
		t.Run(c.name, func(t *testing.T) {
			small := t.TempDir()
			if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+c.size, "tmpfs", small).CombinedOutput(); err != nil {
				t.Skipf("mount tmpfs: %v: %s", err, out)
			}
			t.Cleanup(func() { exec.Command("umount", small).Run() })
			out, _ := rewritten(t, bin, t.TempDir(), c.opts)
			rOut, rErr, rCode, err := fixtures.Run(out, nil, traceEnv(small))
			if err != nil {
				t.Fatal(err)
			}
			said := regexp.MustCompile(`^stint: ` + c.said + `: ENOSPC; running untraced\n`)
			if rCode != nCode || !bytes.Equal(rOut, nOut) || !bytes.Equal(said.ReplaceAll(rErr, nil), nErr) || !said.Match(rErr) {
				t.Fatalf("exit %d, stdout %q, stderr %q; native %d, %q, %q and one line saying the disk is full", rCode, rOut, clip(rErr), nCode, nOut, nErr)
			}
			trs := readTraces(t, small)
			if len(trs) != 1 || len(trs[0].Events) == 0 {
				t.Errorf("%d traces, want 1 with the events written before the disk filled", len(trs))
			}
		})
	}
}

// TestCompactThreadBlocksReused: a compact trace keeps a block for each
// live thread, 4,095 of them. A program that starts more threads than
// that over its life (one after another, as servers do) used to have
// every thread after the 4,095th untraced, silently; the blocks of
// threads that are gone are now reused, so every thread is in the trace,
// and the program runs as natively with nothing said.
func TestCompactThreadBlocksReused(t *testing.T) {
	bin := testC(t, "manythreads", "-pthread")
	const threads = 4200
	args := []string{fmt.Sprint(threads)}
	nOut, nErr, nCode := nativeRun(t, bin, args...)
	dir := t.TempDir()
	out, _ := rewritten(t, bin, dir, rewrite.Options{Every: true})
	traces := filepath.Join(dir, "traces")
	rOut, rErr, rCode, err := fixtures.Run(out, args, traceEnv(traces))
	if err != nil {
		t.Fatal(err)
	}
	if rCode != nCode || !bytes.Equal(rOut, nOut) || !bytes.Equal(rErr, nErr) {
		t.Fatalf("exit %d, stdout %q, stderr %q; native %d, %q, %q", rCode, rOut, clip(rErr), nCode, nOut, nErr)
	}
	trs := readTraces(t, traces)
	if len(trs) != 1 {
		t.Fatalf("%d traces, want 1", len(trs))
	}
	tids := map[uint32]bool{}
	for _, e := range trs[0].Events {
		if e.Kind.Valid() {
			tids[e.TID] = true
		}
	}
	if len(tids) < threads+1 {
		t.Errorf("events of %d threads, want %d (the workers and main)", len(tids), threads+1)
	}
}

// testC compiles testdata/name.c with gcc -O2 (and flags) into a
// temporary directory and returns the program's path.
func testC(t *testing.T, name string, flags ...string) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), name)
	args := append([]string{"-O2", "-o", bin, filepath.Join("testdata", name+".c")}, flags...)
	if out, err := exec.Command("gcc", args...).CombinedOutput(); err != nil {
		t.Fatalf("gcc %s: %v\n%s", name, err, out)
	}
	return bin
}

// nativeRun runs bin with args as it is: its stdout, stderr and exit code.
func nativeRun(t *testing.T, bin string, args ...string) (stdout, stderr []byte, code int) {
	t.Helper()
	out, errOut, code, err := fixtures.Run(bin, args, nil)
	if err != nil {
		t.Fatal(err)
	}
	return out, errOut, code
}

// recurseNative builds the recurse fixture (O2, PIE) and runs it natively.
func recurseNative(t *testing.T) (f *fixtures.Fixture, bin string, stdout, stderr []byte, code int) {
	t.Helper()
	if _, err := exec.LookPath("sh"); err != nil {
		t.Skip("no sh")
	}
	f = fixtures.Lookup("recurse")
	bin = fixtures.Build(t, f.Name, fixtures.Variant{Opt: fixtures.O2, PIE: true})
	stdout, stderr, code = nativeRun(t, bin, f.Args...)
	return f, bin, stdout, stderr, code
}

// TestMapCountRoomLeft: every trampoline chunk is a mapping, and past
// vm.max_map_count the kernel refuses the program's own mappings too.
// Where a module's chunks are a quarter of the limit or more, the runtime
// maps at most half of the room the process has left and says how many
// it left out (their sites run unprobed); the program runs as natively.
// The limit comes from a test hook here: lowering the sysctl would touch
// every process of the machine.
func TestMapCountRoomLeft(t *testing.T) {
	lib := filepath.Join(libdir, "libsqlite3.so.0")
	need(t, lib, "/usr/bin/sqlite3")
	args := []string{":memory:", "select 1"}
	nOut, nErr, nCode := nativeRun(t, "/usr/bin/sqlite3", args...)
	dir := t.TempDir()
	_, st := rewritten(t, lib, dir, rewrite.Options{})
	said := regexp.MustCompile(`^stint: (\d+) of (\d+) trampoline chunks could not be mapped \(ENOMEM: vm\.max_map_count leaves too little room\); \d+ sites left unprobed\n`)
	for _, max := range []string{"", "1200"} {
		env := append(traceEnv(filepath.Join(dir, "traces"+max)), "LD_LIBRARY_PATH="+dir, runtime.TestMaxMapCountEnv+"="+max)
		rOut, rErr, rCode, err := fixtures.Run("/usr/bin/sqlite3", args, env)
		if err != nil {
			t.Fatal(err)
		}
		m := said.FindSubmatch(rErr)
		if rCode != nCode || !bytes.Equal(rOut, nOut) || !bytes.Equal(said.ReplaceAll(rErr, nil), nErr) || (m != nil) != (max != "") {
			t.Fatalf("max_map_count %q: exit %d, stdout %q, stderr %q; native %d, %q, %q (%d chunks)", max, rCode, rOut, clip(rErr), nCode, nOut, nErr, st.Chunks)
		}
		if m != nil && (string(m[1]) == "0" || string(m[1]) == string(m[2])) {
			t.Errorf("max_map_count %s: %s of %s chunks left out, want some, not all", max, m[1], m[2])
		}
	}
}

// TestSetuidRunUntraced: a set-user-ID rewritten program started by
// another user runs with that user's environment, and STINT_OUT (or the
// working directory) had it create root-owned trace files wherever the
// user said. The runtime now sees AT_SECURE, as ld.so does for
// LD_PRELOAD, says so once and runs the program untraced. Needs root
// (to make the program set-user-ID root) and setpriv (to start it as
// nobody).
func TestSetuidRunUntraced(t *testing.T) {
	setpriv, err := exec.LookPath("setpriv")
	if os.Geteuid() != 0 || err != nil {
		t.Skip("needs root and setpriv")
	}
	bin := testC(t, "fdnums")
	dir := t.TempDir()
	for _, d := range []string{filepath.Dir(dir), dir} {
		if err := os.Chmod(d, 0o777); err != nil {
			t.Fatal(err)
		}
	}
	out, _ := rewritten(t, bin, dir, rewrite.Options{})
	if err := os.Chmod(out, 0o755|os.ModeSetuid); err != nil {
		t.Fatal(err)
	}
	traces := filepath.Join(dir, "traces") // writable by nobody too: only the check keeps it empty
	if err := os.Mkdir(traces, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(traces, 0o777); err != nil {
		t.Fatal(err)
	}
	asNobody := []string{"--reuid=65534", "--regid=65534", "--clear-groups"}
	nOut, _, _, err := fixtures.Run(setpriv, append(asNobody, bin), nil)
	if err != nil {
		t.Fatal(err)
	}
	rOut, rErr, rCode, err := fixtures.Run(setpriv, append(asNobody, out), traceEnv(traces))
	if err != nil {
		t.Fatal(err)
	}
	if rCode != 0 || !bytes.Equal(rOut, nOut) || string(rErr) != "stint: a set-user-ID or set-group-ID run (AT_SECURE): not traced\n" {
		t.Fatalf("exit %d, stdout %q (native %q), stderr %q", rCode, rOut, nOut, rErr)
	}
	if left, _ := os.ReadDir(traces); len(left) != 0 {
		t.Errorf("%d files in the trace directory, want none: %v", len(left), left)
	}
}
