package e2e

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stint-project/stint/analysis/paths"
	"github.com/stint-project/stint/formats"
	"github.com/stint-project/stint/rewrite"
	"github.com/stint-project/stint/runtime"
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

// TestCompactTraceKilledMidCopy: a thread copies each full chunk out of
// the one place it appends to; a process killed at any step of that
// (STINT_TEST_ROLL_KILL) leaves a trace that decodes, without an error,
// to the start of a whole run's events: the chunk once, all of it. Until
// the copy is whole (steps 1-3) the thread's own chunk is the one read,
// pending bits included; after it (4) the copy, which has none.
func TestCompactTraceKilledMidCopy(t *testing.T) {
	bin := buildSpin(t)
	dir := t.TempDir()
	out, _ := rewritten(t, bin, dir, rewrite.Options{Every: true})
	run := func(name string, env ...string) ([]formats.Event, paths.Stats, error) {
		traces := filepath.Join(dir, name)
		cmd := exec.Command(out, "10")
		cmd.Env = append(traceEnv(traces), env...)
		err := cmd.Run()
		_, evs, st, derr := decodeCompact(t, traces)
		if derr != nil {
			t.Fatalf("%s: decode: %v (%+v)", name, derr, st)
		}
		return evs, st, err
	}
	whole, st, err := run("whole")
	if err != nil || st.Chunks < 2 {
		t.Fatalf("whole run: %v, %d chunks (want 2 or more)", err, st.Chunks)
	}
	var got [5]int
	for k := 1; k <= 4; k++ {
		evs, st, err := run(fmt.Sprint("kill", k), runtime.TestRollKillEnv+"="+fmt.Sprint(k))
		if ee, ok := err.(*exec.ExitError); !ok || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
			t.Fatalf("step %d: %v, want killed by SIGKILL", k, err)
		}
		if st.Chunks != 1 || len(evs) == 0 || len(evs) >= len(whole) {
			t.Fatalf("step %d: %d events in %d chunks, want the first chunk's", k, len(evs), st.Chunks)
		}
		for i, e := range evs {
			if sameEvent(e, whole[i]) {
				continue
			}
			t.Fatalf("step %d: event %d is %+v, the whole run's %+v", k, i, e, whole[i])
		}
		got[k] = len(evs)
	}
	if got[1] != got[2] || got[2] != got[3] || got[4] > got[3] || got[3]-got[4] > 64 {
		t.Errorf("events after a kill at steps 1-4: %v, want three equal and the fourth at most 64 fewer", got[1:])
	}
	t.Logf("events: whole %d; killed at steps 1-4: %v", len(whole), got[1:])
}

// sameEvent compares two runs' events: where and what, not when, and a
// destination outside the modules only by its being outside (it moves
// with the address-space layout).
func sameEvent(a, b formats.Event) bool {
	if a.DstModule == formats.NoModule {
		a.Dst = 0
	}
	if b.DstModule == formats.NoModule {
		b.Dst = 0
	}
	return a.Kind == b.Kind && a.SrcModule == b.SrcModule && a.Src == b.Src && a.DstModule == b.DstModule && a.Dst == b.Dst
}

// decodeCompact decodes the compact trace of the one trace file in dir:
// the file, its events, the decoder's stats and its error.
func decodeCompact(t *testing.T, dir string) (string, []formats.Event, paths.Stats, error) {
	t.Helper()
	names, _ := filepath.Glob(filepath.Join(dir, "*.arrow"))
	if len(names) != 1 {
		t.Fatalf("%d traces in %s, want 1", len(names), dir)
	}
	d, err := paths.Open(names[0], paths.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var evs []formats.Event
	st, err := d.Events(func(e formats.Event) error { evs = append(evs, e); return nil })
	return names[0], evs, st, err
}
