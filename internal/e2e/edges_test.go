package e2e

import (
	"sync/atomic"
	"testing"

	"github.com/stint-project/stint/internal/fixtures"
	"github.com/stint-project/stint/internal/oracle"
	"github.com/stint-project/stint/rewrite"
)

// TestEdgeProbesAvoidIndirectTargets checks the rewriter's edge probes
// (a jcc outcome recorded at its destination, rewrite/edges.go) against
// what the original program really does: no destination probe may sit
// where an indirect jump of the fixture lands (a jump-table case or a
// computed-goto label), since it would record a jcc outcome that did not
// happen. The fixtures have case labels and goto labels that are also a
// jcc's fall-through; the trace-level check is TestBranchTraceMatchesOracle.
func TestEdgeProbesAvoidIndirectTargets(t *testing.T) {
	if testing.Short() {
		t.Skip("single-stepping is slow; skipped under -short")
	}
	// PIE: tables of int32 offsets from a lea'd base; no PIE: absolute
	// entries (and addresses in immediates).
	variants := []fixtures.Variant{{Opt: fixtures.O2, PIE: true}, {Opt: fixtures.O0}}
	var edges atomic.Int64
	for _, name := range []string{"switch", "fallthru", "cgoto"} {
		f := fixtures.Lookup(name)
		if f == nil {
			t.Fatalf("no fixture %s", name)
		}
		for _, v := range variants {
			t.Run(name+"/"+v.String(), func(t *testing.T) {
				t.Parallel()
				bin := fixtures.Build(t, f.Name, v)
				res, err := oracle.Record(bin, f.Args, traceEnv(t.TempDir()), "")
				if err != nil {
					t.Fatalf("oracle: %v", err)
				}
				landed := map[uint64]bool{}
				for ev := range res.Edges {
					if ev.Kind == oracle.IndJmp && ev.Dst.Module == res.Processes[0].Module {
						landed[ev.Dst.Off] = true
					}
				}
				if len(landed) == 0 {
					t.Fatal("the oracle saw no indirect jump land in the fixture")
				}
				out, _ := rewritten(t, bin, t.TempDir(), rewrite.Options{Edges: rewrite.EdgesAll})
				_, probes, err := Probed(out)
				if err != nil {
					t.Fatal(err)
				}
				_, patches, err := Patched(out)
				if err != nil {
					t.Fatal(err)
				}
				for _, p := range probes {
					if p.Kind != 1 && p.Kind != 2 || int(p.Patch) >= len(patches) {
						continue
					}
					pt := patches[p.Patch]
					if p.Src >= pt.Addr && p.Src < pt.Addr+uint64(pt.Len) {
						continue // at the jcc itself
					}
					edges.Add(1)
					if landed[p.Dst] {
						t.Errorf("edge probe of the jcc at %#x (kind %d) sits at %#x, where an indirect jump lands", p.Src, p.Kind, p.Dst)
					}
				}
			})
		}
	}
	t.Cleanup(func() {
		if edges.Load() == 0 && !t.Failed() {
			t.Error("no edge probe in any fixture: the check above checked nothing")
		}
	})
}
