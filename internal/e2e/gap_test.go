package e2e

import (
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stint-project/stint/internal/fixtures"
	"github.com/stint-project/stint/rewrite"
)

// TestDisableAcrossSegmentGap: an executable whose two code segments
// have unmapped pages between them (as node's do) has its patches all
// undone under STINT_DISABLE=1, so it reads its own code as the
// original does (gap.S exits with a sum of its bytes). mprotect over
// the whole code range fails there with ENOMEM; the runtime once took
// that for "cannot patch" and left every patch in place. The traced run
// must end normally too (its sum may differ: sites may still be
// patched then).
func TestDisableAcrossSegmentGap(t *testing.T) {
	gcc, err := exec.LookPath("gcc")
	if err != nil {
		t.Skip("needs gcc")
	}
	dir, err := fixtures.Dir()
	if err != nil {
		t.Fatal(err)
	}
	for _, link := range [][]string{{"-static", "-no-pie"}, {"-static-pie"}} {
		t.Run(link[0], func(t *testing.T) {
			tmp := t.TempDir()
			bin := filepath.Join(tmp, "gap")
			args := append([]string{"-nostdlib", "-Wl,--section-start=.far=0x4800000", "-o", bin, filepath.Join(dir, "gap.S")}, link...)
			if out, err := exec.Command(gcc, args...).CombinedOutput(); err != nil {
				t.Fatalf("gcc: %v\n%s", err, out)
			}
			_, _, nCode, err := fixtures.Run(bin, nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			out, _ := rewritten(t, bin, tmp, rewrite.Options{})
			_, _, dCode, err := fixtures.Run(out, nil, append(traceEnv(filepath.Join(tmp, "traces")), "STINT_DISABLE=1"))
			if err != nil {
				t.Fatal(err)
			}
			if dCode != nCode {
				t.Errorf("STINT_DISABLE=1: exit %d, the original %d (its code not restored)", dCode, nCode)
			}
			_, stderr, tCode, err := fixtures.Run(out, nil, traceEnv(filepath.Join(tmp, "traces")))
			if err != nil {
				t.Fatal(err)
			}
			if tCode < 0 || tCode >= 128 || len(stderr) != 0 {
				t.Errorf("traced run: exit %d, stderr %q", tCode, stderr)
			}
		})
	}
}
