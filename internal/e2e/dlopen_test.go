package e2e

import (
	"bytes"
	"path/filepath"
	"testing"

	"github.com/stint-project/stint/internal/fixtures"
	"github.com/stint-project/stint/rewrite"
)

// TestDlopenAgain: a rewritten library dlopened, used and dlclosed fifty
// times. dlclose unmaps the loader's span but not the stub chunks the
// runtime mapped outside it, so every load after the first found them
// there (EEXIST) and left a third of its chunks' sites unprobed, saying
// so each time on the program's stderr. The runtime now recognises its
// own chunks (their stubs' bytes) and keeps them: stderr as native, and
// the trace holds events of every load.
func TestDlopenAgain(t *testing.T) {
	lib := filepath.Join(libdir, "libsqlite3.so.0")
	need(t, lib)
	bin := testC(t, "dlagain", "-ldl")
	nOut, nErr, nCode := nativeRun(t, bin, "50")
	for _, opts := range []rewrite.Options{{}, {Every: true}} {
		dir := t.TempDir()
		rewritten(t, lib, dir, opts)
		traces := filepath.Join(dir, "traces")
		rOut, rErr, rCode, err := fixtures.Run(bin, []string{"50"}, append(traceEnv(traces), "LD_LIBRARY_PATH="+dir))
		if err != nil {
			t.Fatal(err)
		}
		if rCode != nCode || !bytes.Equal(rOut, nOut) || !bytes.Equal(rErr, nErr) {
			t.Fatalf("%+v: exit %d, stdout %q, stderr %q; native %d, %q, %q", opts, rCode, rOut, clip(rErr), nCode, nOut, nErr)
		}
		trs := readTraces(t, traces)
		if len(trs) != 1 || len(trs[0].Events) == 0 {
			t.Errorf("%+v: %d traces, want 1 with events", opts, len(trs))
		}
	}
}
