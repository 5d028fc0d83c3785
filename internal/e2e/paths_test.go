package e2e

import (
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stint-project/stint/analysis/paths"
	"github.com/stint-project/stint/formats"
	"github.com/stint-project/stint/rewrite"
)

// TestCompactTraceKilled: a compact complete trace of a program killed
// with SIGKILL mid-run decodes without an error: the chunks are written
// whole into the file when they are handed out, and their packets,
// pending bits and tail live in the shared mapping, so nothing the
// threads appended is lost.
func TestCompactTraceKilled(t *testing.T) {
	t.Run("branch", func(t *testing.T) { compactKilled(t, rewrite.Options{Every: true}, "100000") })
	// a call chain: spin's watch mode calls hot() a million times a round
	t.Run("call", func(t *testing.T) {
		compactKilled(t, rewrite.Options{Tool: rewrite.ToolCall, Every: true}, "100000", "watch")
	})
}

func compactKilled(t *testing.T, opts rewrite.Options, args ...string) {
	bin := buildSpin(t)
	dir := t.TempDir()
	out, _ := rewritten(t, bin, dir, opts)
	traces := filepath.Join(dir, "traces")
	cmd := exec.Command(out, args...)
	cmd.Env = traceEnv(traces)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// wait for the paths file, let the program run on, then kill
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if names, _ := filepath.Glob(filepath.Join(traces, "*"+formats.PathsSuffix)); len(names) == 1 {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(300 * time.Millisecond)
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()
	_, n, st, err := countCompact(t, traces)
	if err != nil {
		t.Fatalf("decode after SIGKILL: %v (%+v)", err, st)
	}
	if n == 0 || st.Chunks < 2 {
		t.Errorf("%d events in %d chunks after SIGKILL, want the run so far", n, st.Chunks)
	}
	t.Logf("%d events, %d chunks, %d bytes of packets", n, st.Chunks, st.Bytes)
}

// countCompact decodes the compact trace of the one trace file in dir and
// counts its events: the file, the count, the decoder's stats and its
// error.
func countCompact(t *testing.T, dir string) (string, int, paths.Stats, error) {
	t.Helper()
	names, _ := filepath.Glob(filepath.Join(dir, "*.arrow"))
	if len(names) != 1 {
		t.Fatalf("%d traces, want 1", len(names))
	}
	d, err := paths.Open(names[0], paths.Options{})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	st, err := d.Events(func(formats.Event) error { n++; return nil })
	return names[0], n, st, err
}
