package e2e

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/stint-project/stint/internal/fixtures"
	"github.com/stint-project/stint/rewrite"
)

// goRuns is how many times each rewritten Go fixture runs per mode: the
// failures this guards against (a goroutine stack the runtime's C code
// overwrote, a signal landing in a hop placed in padding) were
// intermittent, two runs in five.
const goRuns = 3

// goModes are the tools and modes each Go fixture runs under.
var goModes = []struct {
	name string
	opts rewrite.Options
}{
	{"branch", rewrite.Options{}},
	{"call", rewrite.Options{Tool: rewrite.ToolCall}},
	{"block", rewrite.Options{Tool: rewrite.ToolBlock}},
	{"syscall", rewrite.Options{Tool: rewrite.ToolSyscall}},
	{"budget", rewrite.Options{Budget: "10%", Period: "20ms"}},
	{"every", rewrite.Options{Every: true}},
	{"call-every", rewrite.Options{Tool: rewrite.ToolCall, Every: true}},
}

// TestGoFixturesBehaveLikeNative: Go programs (static, and a cgo one
// that is dynamic), rewritten under every tool, print the same bytes and
// exit the same way as the originals, run after run, and leave a trace.
func TestGoFixturesBehaveLikeNative(t *testing.T) {
	for _, f := range fixtures.GoAll() {
		f := f
		t.Run(f.String(), func(t *testing.T) {
			t.Parallel()
			bin := fixtures.BuildGo(t, f)
			nOut, nErr, nCode, err := fixtures.Run(bin, f.Args, nil)
			if err != nil {
				t.Fatal(err)
			}
			if nCode != f.WantExit {
				t.Fatalf("native exit %d, want %d; stderr %q", nCode, f.WantExit, clip(nErr))
			}
			for _, m := range goModes {
				dir := t.TempDir()
				out, st := rewritten(t, bin, dir, m.opts)
				// no jump to a jump placed in the code (place.Planner.NoHops):
				// Go's runtime preempted goroutines between the two, and its
				// unwinder died (about 1 run in 15 under load)
				if n := st.Patched["T3"]; n != 0 {
					t.Errorf("%s: %d sites patched with T3 in a Go executable", m.name, n)
				}
				for i := 0; i < goRuns; i++ {
					traces := filepath.Join(dir, fmt.Sprint("traces", i))
					rOut, rErr, rCode, err := fixtures.RunTimeout(out, f.Args, traceEnv(traces), 5*fixtures.DefaultTimeout)
					if err != nil {
						t.Fatalf("%s run %d: %v", m.name, i, err)
					}
					if !bytes.Equal(nOut, rOut) || !bytes.Equal(nErr, rErr) || nCode != rCode {
						t.Fatalf("%s run %d: differs from native:\nexit %d, native %d\nstdout %q\nnative %q\nstderr %q\nnative %q",
							m.name, i, rCode, nCode, clip(rOut), clip(nOut), clip(rErr), clip(nErr))
					}
					if n := traceFiles(t, traces); n == 0 {
						t.Errorf("%s run %d: no trace file", m.name, i)
					}
				}
			}
		})
	}
}

// traceFiles counts the non-empty trace files in dir.
func traceFiles(t *testing.T, dir string) int {
	t.Helper()
	names, err := filepath.Glob(filepath.Join(dir, "*.arrow"))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, name := range names {
		if st, err := os.Stat(name); err == nil && st.Size() > 0 {
			n++
		}
	}
	return n
}
