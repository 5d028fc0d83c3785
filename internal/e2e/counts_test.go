package e2e

import (
	"bytes"
	"debug/elf"
	"encoding/hex"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stint-project/stint/formats"
	"github.com/stint-project/stint/internal/fixtures"
	"github.com/stint-project/stint/rewrite"
	"github.com/stint-project/stint/runtime"
)

// countsLeftOut are the fixtures whose block counts cannot equal a
// complete trace's by design, and why.
var countsLeftOut = map[string]string{
	"forkexec": "a forked child inherits its parent's counters",
	"spin":     "forks; and its work depends on timing",
	"signals":  "a timer's signals land at different places in each run",
	"uexit":    "_exit runs no finaliser: counts since the last period are lost",
	"abort":    "a fatal signal runs no finaliser",
	"fatal":    "a fatal signal runs no finaliser",
	"loop3":    "no libc: no finaliser to write the counts at exit",
	"codedata": "no libc: no finaliser to write the counts at exit",
}

// TestBlockCounts rewrites each fixture with --tool block --counts (and
// --counts-atomic when it has threads, and always once more; also with
// --no-opt pcs, --no-opt dpc and --no-opt ppi, the runtime counting)
// and with --tool block --every, runs both, and requires the same output as native and each block's
// total count to equal its block events in the complete trace: the
// counts of a deterministic run are its trace's counts. Blocks probed in
// only one of the two rewrites, and those of the executable's .fini
// (which runs after the last counts are written), are left out; each
// row's running total must be the sum of the block's differences.
func TestBlockCounts(t *testing.T) {
	v := fixtures.Variant{Opt: fixtures.O2, PIE: true}
	for _, f := range fixtures.All() {
		if why, ok := countsLeftOut[f.Name]; ok {
			t.Logf("%s: left out: %s", f.Name, why)
			continue
		}
		if !f.Supports(v) {
			continue
		}
		f := f
		t.Run(f.Name, func(t *testing.T) {
			t.Parallel()
			bin := fixtures.Build(t, f.Name, v)
			nOut, _, nCode, err := fixtures.Run(bin, f.Args, nil)
			if err != nil {
				t.Fatal(err)
			}
			traced, eProbes := blockRun(t, bin, f, rewrite.Options{Tool: rewrite.ToolBlock, Every: true}, nOut, nCode)
			fini := finiRange(t, bin)
			type variant struct {
				noOpt  []string
				atomic bool
			}
			for _, vr := range []variant{{nil, f.Threads}, {[]string{"pcs"}, f.Threads}, {[]string{"ppi"}, f.Threads}, {[]string{"dpc"}, f.Threads}, {nil, true}} {
				opts := rewrite.Options{Tool: rewrite.ToolBlock, Counts: true, CountsAtomic: vr.atomic, NoOpt: vr.noOpt}
				counted, cProbes := blockRun(t, bin, f, opts, nOut, nCode)
				compared := 0
				for src := range eProbes {
					if !cProbes[src] || fini(src) {
						continue
					}
					compared++
					if counted[src] != traced[src] {
						t.Errorf("no-opt %v atomic %v: block %#x: counted %d, complete trace has %d", vr.noOpt, vr.atomic, src, counted[src], traced[src])
					}
				}
				if compared == 0 || len(counted) == 0 {
					t.Fatalf("no-opt %v atomic %v: nothing compared (%d probed blocks, %d counted)", vr.noOpt, vr.atomic, len(eProbes), len(counted))
				}
			}
		})
	}
}

// blockRun rewrites bin with opts, runs it, checks its output against
// native's, and returns per block (module-relative address) its count:
// the sum of its KindBlockCount rows' differences (Counts) or its
// KindBlock events (Every); and the set of blocks the rewrite probed.
func blockRun(t *testing.T, bin string, f fixtures.Fixture, opts rewrite.Options, nOut []byte, nCode int) (map[uint64]uint64, map[uint64]bool) {
	t.Helper()
	dir := t.TempDir()
	out, _ := rewritten(t, bin, dir, opts)
	traces := filepath.Join(dir, "traces")
	rOut, rErr, rCode, err := fixtures.Run(out, f.Args, traceEnv(traces))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(nOut, rOut) || nCode != rCode {
		t.Fatalf("counts=%v: output or exit code differs from native (%d, %d): %s", opts.Counts, nCode, rCode, clip(rErr))
	}
	m, probes, err := Probed(out)
	if err != nil {
		t.Fatal(err)
	}
	probed := map[uint64]bool{}
	for _, p := range probes {
		if p.Kind == uint8(runtime.KBlock) {
			probed[p.Src] = true
		}
	}
	counts := map[uint64]uint64{}
	for _, tr := range readTraces(t, traces) {
		self := selfModule(tr, m)
		for _, ev := range tr.Events {
			if int(ev.SrcModule) != self {
				continue
			}
			switch {
			case opts.Counts && ev.Kind == formats.KindBlockCount:
				counts[ev.Src] += ev.Dst
				if ev.Value != counts[ev.Src] {
					t.Errorf("block %#x: row total %d, differences add up to %d", ev.Src, ev.Value, counts[ev.Src])
				}
			case !opts.Counts && ev.Kind == formats.KindBlock:
				counts[ev.Src]++
			}
		}
	}
	return counts, probed
}

// selfModule returns the id of the trace's module with m's build-id, or -1.
func selfModule(tr *formats.Trace, m *runtime.Module) int {
	bid := hex.EncodeToString(m.BuildID[:m.BuildIDLen])
	for _, mod := range tr.Modules {
		if mod.Rewritten && mod.BuildID == bid {
			return int(mod.ID)
		}
	}
	return -1
}

// finiRange returns whether an address lies in bin's .fini section.
func finiRange(t *testing.T, bin string) func(uint64) bool {
	t.Helper()
	ef, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer ef.Close()
	s := ef.Section(".fini")
	if s == nil {
		return func(uint64) bool { return false }
	}
	return func(a uint64) bool { return a >= s.Addr && a < s.Addr+s.Size }
}

// TestBlockCountsKilled: a counting program killed with SIGKILL keeps
// the counts of every period that ended before the kill (--period
// 100ms): its trace has block-count rows, and their times are periods'
// ends, not the run's (which never came).
func TestBlockCountsKilled(t *testing.T) {
	bin := buildSpin(t)
	dir := t.TempDir()
	out, _ := rewritten(t, bin, dir, rewrite.Options{Tool: rewrite.ToolBlock, Counts: true, Period: "100ms"})
	traces := filepath.Join(dir, "traces")
	cmd := exec.Command(out, "100000")
	cmd.Env = traceEnv(traces)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(700 * time.Millisecond)
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()
	trs := readTraces(t, traces)
	if len(trs) == 0 {
		t.Fatal("no trace")
	}
	times := map[uint64]bool{}
	var total uint64
	for _, ev := range trs[0].Events {
		switch ev.Kind {
		case formats.KindBlockCount:
			times[ev.Time] = true
			total += ev.Dst
		case formats.KindRunEnd:
			t.Errorf("a run-end row in a killed run's trace")
		}
	}
	if total == 0 || len(times) < 2 {
		t.Errorf("%d block executions in %d periods' rows after SIGKILL at 700 ms, want the periods so far", total, len(times))
	}
	t.Logf("%d block executions in %d periods' rows", total, len(times))
}
