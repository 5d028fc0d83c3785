package e2e

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stint-project/stint/internal/fixtures"
	"github.com/stint-project/stint/rewrite"
)

// memCgroup makes a memory cgroup limited to limit bytes (v1's memory
// controller or v2's unified tree) and returns the file a shell writes
// its pid to in order to join it. The test is skipped where none can be
// made (not root, no writable cgroup file system).
func memCgroup(t *testing.T, limit int64) (procs string) {
	t.Helper()
	name := fmt.Sprintf("stint-test-%d", os.Getpid())
	type tree struct{ root, limitFile string }
	for _, c := range []tree{{"/sys/fs/cgroup/memory", "memory.limit_in_bytes"}, {"/sys/fs/cgroup", "memory.max"}} {
		if _, err := os.Stat(filepath.Join(c.root, c.limitFile)); err != nil && c.limitFile == "memory.limit_in_bytes" {
			continue // no v1 memory controller here
		}
		dir := filepath.Join(c.root, name)
		if err := os.Mkdir(dir, 0o755); err != nil {
			continue
		}
		t.Cleanup(func() { os.Remove(dir) })
		if err := os.WriteFile(filepath.Join(dir, c.limitFile), []byte(fmt.Sprint(limit)), 0o644); err != nil {
			continue
		}
		return filepath.Join(dir, "cgroup.procs")
	}
	t.Skip("cannot make a memory cgroup here (needs root and a writable cgroup file system)")
	return ""
}

// TestMemoryCgroupNeverKills: at start the runtime makes the pages it
// will write anonymous at once (tables and trampolines copied into huge
// pages, code populated): 14 MB for libsqlite3. In a 16 MiB memory
// cgroup the kernel killed sqlite3 'select 1' with the rewritten library
// where the original ran. Where the cgroup leaves less than twice that,
// the runtime now leaves the pages to be copied as they are written.
func TestMemoryCgroupNeverKills(t *testing.T) {
	lib := filepath.Join(libdir, "libsqlite3.so.0")
	need(t, lib, "/usr/bin/sqlite3")
	procs := memCgroup(t, 16<<20)
	dir := t.TempDir()
	rewritten(t, lib, dir, rewrite.Options{})
	script := "echo $$ > " + procs + " && exec /usr/bin/sqlite3 :memory: 'select 1'"
	nOut, nErr, nCode, err := fixtures.Run("/bin/sh", []string{"-c", script}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if nCode != 0 || strings.TrimSpace(string(nOut)) != "1" {
		t.Skipf("the original does not run in 16 MiB here (exit %d, %q)", nCode, nErr)
	}
	env := append(traceEnv(filepath.Join(dir, "traces")), "LD_LIBRARY_PATH="+dir)
	rOut, rErr, rCode, err := fixtures.Run("/bin/sh", []string{"-c", script}, env)
	if err != nil {
		t.Fatal(err)
	}
	if rCode != nCode || !bytes.Equal(rOut, nOut) || !bytes.Equal(rErr, nErr) {
		t.Fatalf("in a 16 MiB cgroup: exit %d, stdout %q, stderr %q; native %d, %q, %q", rCode, rOut, clip(rErr), nCode, nOut, nErr)
	}
	if trs := readTraces(t, filepath.Join(dir, "traces")); len(trs) != 1 || len(trs[0].Events) == 0 {
		t.Errorf("%d traces, want 1 with events", len(trs))
	}
}
