package e2e

import (
	"bytes"
	"fmt"
	"maps"
	"path/filepath"
	"testing"

	"github.com/stint-project/stint/formats"
	"github.com/stint-project/stint/rewrite"
	"github.com/stint-project/stint/rewrite/place"
)

// runEndTraps sums the run-end rows' dst: the traps the int3 sites took.
func runEndTraps(tr *formats.Trace) (traps uint64, ends int) {
	for _, e := range tr.Events {
		if e.Kind == formats.KindRunEnd {
			traps += e.Dst
			ends++
		}
	}
	return traps, ends
}

// TestTrapFallback: with an int3 at every site (TrapAll), the sigtrap
// fixture prints and exits as natively, its trace has the same distinct
// events as with jumps (and those of the sites no jump fits), and the
// run-end row counts the traps taken; a SIGTRAP the program raises
// itself still kills it by the default action (the handler passes on
// what is not an int3 site's).
func TestTrapFallback(t *testing.T) {
	nat := runNative(t, "sigtrap")
	sets := map[string]map[edge]int{}
	failed := map[uint64]bool{} // sites the jumps could not patch: only the int3s trace them
	for _, c := range []struct {
		name string
		opts rewrite.Options
	}{{"jumps", rewrite.Options{NoTraps: true}}, {"int3", rewrite.Options{TrapAll: true}}} {
		dir := t.TempDir()
		out, st := rewritten(t, nat.bin, dir, c.opts)
		if c.opts.TrapAll && st.Patched["trap"] != st.PatchedTotal()-st.Patched["edge"] {
			t.Errorf("%s: %v patched, want every site an int3", c.name, st.Patched)
		}
		for _, r := range st.Reasons {
			if len(r.First) != r.Count {
				t.Fatalf("%s: %d failed sites, %d listed", c.name, r.Count, len(r.First))
			}
			for _, a := range r.First {
				failed[uint64(a)] = true
			}
		}
		traces := filepath.Join(dir, "traces")
		nat.runLike(t, out, traceEnv(traces))
		tr := oneTrace(t, traces)
		traps, ends := runEndTraps(tr)
		if ends != 1 || c.opts.TrapAll != (traps > 0) {
			t.Errorf("%s: %d run-end rows counting %d traps", c.name, ends, traps)
		}
		m, _, err := Probed(out)
		if err != nil {
			t.Fatal(err)
		}
		sets[c.name], _ = traceEdges(t, []*formats.Trace{tr}, fmt.Sprintf("%x", m.BuildID[:m.BuildIDLen]))
		t.Logf("%s: %d sites, %d distinct events, %d traps", c.name, st.Sites, len(sets[c.name]), traps)
	}
	maps.DeleteFunc(sets["int3"], func(e edge, _ int) bool { return failed[e.Src] })
	compareSets(t, normalizeSet(sets["jumps"]), normalizeSet(sets["int3"]))

	die := runNative(t, "sigtrap", "die")
	if die.code != 128+5 {
		t.Fatalf("native sigtrap die: exit %d, want 133", die.code)
	}
	dir := t.TempDir()
	out, _ := rewritten(t, die.bin, dir, rewrite.Options{TrapAll: true, Every: true, Rows: true})
	die.runLike(t, out, traceEnv(filepath.Join(dir, "traces")))
}

// TestTrapGzip: gzip has sites no jump fits. With --no-traps they fail
// as too short; by default each gets an int3, and gzip's output is the
// native one.
func TestTrapGzip(t *testing.T) {
	need(t, "/usr/bin/gzip")
	dir := t.TempDir()
	_, no := rewritten(t, "/usr/bin/gzip", t.TempDir(), rewrite.Options{NoTraps: true})
	gz, st := rewritten(t, "/usr/bin/gzip", dir, rewrite.Options{})
	short := func(st *rewrite.Stats) int {
		if r := st.Reasons[place.ErrTooShort.Error()]; r != nil {
			return r.Count
		}
		return 0
	}
	if short(no) == 0 {
		t.Skip("this gzip has no site that only an int3 fits: nothing to check")
	}
	if short(st) != 0 || st.Patched["trap"] != short(no) {
		t.Errorf("%d too short without traps; with them %d, and %d int3 sites", short(no), short(st), st.Patched["trap"])
	}
	data := input(t, 1<<20)
	if got, want := run(t, data, []string{"STINT_OUT=" + filepath.Join(dir, "traces")}, gz, "-c"), run(t, data, nil, "/usr/bin/gzip", "-c"); !bytes.Equal(got, want) {
		t.Fatalf("rewritten gzip output differs from native (%d vs %d bytes)", len(got), len(want))
	}
}
