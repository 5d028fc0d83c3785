package e2e

import (
	"bytes"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/stint-project/stint/formats"
	"github.com/stint-project/stint/internal/fixtures"
	"github.com/stint-project/stint/rewrite"
)

// TestProgramLeftWithExit: a program without libc ends with SYS_exit on
// its only thread, not exit_group, so the runtime's own threads (the
// period thread of a budget or a log, the sampler's reader) are all
// that is left of the process; they block every signal, and before
// they noticed, such a run never ended. Now it ends as the original
// does, with the original's exit status, and its trace is sealed with
// one run-end row.
func TestProgramLeftWithExit(t *testing.T) {
	sets := []rewrite.Options{
		{Budget: "10%", Period: "10ms"},
		{Log: "run.log"},
		{Tool: rewrite.ToolCall, Sample: "rate:20%"},
	}
	v := fixtures.Variant{Opt: fixtures.O0, Static: true}
	for _, name := range []string{"loop3", "codedata"} {
		f := fixtures.Lookup(name)
		bin := fixtures.Build(t, f.Name, v)
		nOut, nErr, nCode, err := fixtures.Run(bin, f.Args, nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, opts := range sets {
			dir := t.TempDir()
			if opts.Log != "" {
				opts.Log = filepath.Join(dir, opts.Log)
			}
			out, _ := rewritten(t, bin, dir, opts)
			traces := filepath.Join(dir, "traces")
			// a minute: generous on a busy machine, and the run used to hang for ever
			rOut, rErr, rCode, err := fixtures.RunTimeout(out, f.Args, traceEnv(traces), time.Minute)
			if errors.Is(err, fixtures.ErrTimeout) {
				t.Errorf("%s %+v: still running after a minute (the runtime's threads kept it alive)", name, opts)
				continue
			}
			if err != nil {
				t.Fatal(err)
			}
			if rCode != nCode || !bytes.Equal(rOut, nOut) || !bytes.Equal(rErr, nErr) {
				t.Errorf("%s %+v: exit %d, stdout %q, stderr %q; native %d, %q, %q", name, opts, rCode, rOut, rErr, nCode, nOut, nErr)
			}
			trs := readTraces(t, traces)
			if len(trs) != 1 {
				t.Fatalf("%s %+v: %d traces, want 1", name, opts, len(trs))
			}
			ends := 0
			for _, e := range trs[0].Events {
				if e.Kind == formats.KindRunEnd {
					ends++
				}
			}
			if trs[0].End != formats.EndMarker || ends != 1 {
				t.Errorf("%s %+v: trace ended by %v with %d run-end rows, want the end marker and 1", name, opts, trs[0].End, ends)
			}
		}
	}
}
