package e2e

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/stint-project/stint/analysis/paths"
	"github.com/stint-project/stint/formats"
	"github.com/stint-project/stint/internal/fixtures"
	"github.com/stint-project/stint/rewrite"
	"github.com/stint-project/stint/runtime"
)

// variants returns the build matrix the tests cover: all 16 variants, or
// only the most common one (-O2, PIE, dynamic) under -short.
func variants() []fixtures.Variant {
	if testing.Short() {
		return []fixtures.Variant{{Opt: fixtures.O2, PIE: true}}
	}
	return fixtures.Variants()
}

// rewritten rewrites in to a file in dir and returns its path.
func rewritten(t testing.TB, in, dir string, opts rewrite.Options) (string, *rewrite.Stats) {
	t.Helper()
	out := filepath.Join(dir, filepath.Base(in))
	st, err := rewrite.RewriteFile(in, out, opts)
	if err != nil {
		t.Fatalf("rewrite %s: %v", in, err)
	}
	return out, st
}

// traceEnv returns the environment for a traced run writing into dir.
func traceEnv(dir string) []string {
	env := []string{"STINT_OUT=" + dir}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "STINT_") {
			env = append(env, kv)
		}
	}
	return env
}

// readTraces reads every trace file in dir.
func readTraces(t testing.TB, dir string) []*formats.Trace {
	t.Helper()
	names, err := filepath.Glob(filepath.Join(dir, "*.arrow"))
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(names)
	var out []*formats.Trace
	for _, n := range names {
		// a compact complete trace's decoded events follow the rows
		tr, st, err := paths.ReadFile(n)
		if err != nil {
			t.Errorf("read %s: %v (%+v)", filepath.Base(n), err, st)
			continue
		}
		out = append(out, tr)
	}
	return out
}

// edge is a (src, dst, kind) in module-independent form: the destination
// module is "" for the traced module itself, else the base name of its
// file (the rewritten and the original file have different paths).
type edge struct {
	Kind   uint8
	Src    uint64
	DstMod string
	Dst    uint64
	Value  uint64
}

func (e edge) String() string {
	mod := e.DstMod
	if mod == "" {
		mod = "self"
	}
	return fmt.Sprintf("%v %#x -> %s+%#x", formats.Kind(e.Kind), e.Src, mod, e.Dst)
}

// traceEdges returns the events of traces whose source lies in the
// module with the given build-id, as edges.
func traceEdges(t testing.TB, trs []*formats.Trace, buildID string) (set map[edge]int, perThread [][]edge) {
	set = map[edge]int{}
	for _, tr := range trs {
		self := -1
		for _, m := range tr.Modules {
			if m.Rewritten && m.BuildID == buildID {
				self = int(m.ID)
			}
		}
		if self < 0 {
			continue
		}
		threads := map[uint32][]edge{}
		var order []uint32
		for _, ev := range tr.Events {
			if int(ev.SrcModule) != self {
				continue
			}
			e := edge{Kind: uint8(ev.Kind), Src: ev.Src, Dst: ev.Dst, Value: ev.Value}
			switch {
			case ev.Kind == formats.KindSyscall:
				e.Dst = 0
			case int(ev.DstModule) == self:
			case ev.DstModule == formats.NoModule:
				e.DstMod = "?"
			default:
				if m := tr.Module(ev.DstModule); m != nil {
					e.DstMod = filepath.Base(m.Path)
				} else {
					t.Errorf("event %v: dst module %d not in the module table", ev, ev.DstModule)
				}
			}
			set[e]++
			if _, ok := threads[ev.TID]; !ok {
				order = append(order, ev.TID)
			}
			threads[ev.TID] = append(threads[ev.TID], e)
		}
		for _, tid := range order {
			perThread = append(perThread, threads[tid])
		}
	}
	return set, perThread
}

// compactSupported says which builds compact complete traces are checked
// on: -O2, position-independent (with CET or not), and, for the
// behaviour test, static (compactGap names the one fixture left out
// there). Known gaps elsewhere (docs/DESIGN.md §6a): at -O0 many 1-byte
// rets stay unprobed; in fixed-address builds the PLT's and libc's own
// code still lose the decoder its place.
func compactSupported(v fixtures.Variant) bool {
	return v.Opt == fixtures.O2 && v.PIE
}

// compactGap says why fixture f's compact trace is not checked in
// build v, or "".
func compactGap(f fixtures.Fixture, v fixtures.Variant) string {
	if f.Name == "except" && v.Static {
		return "C++ exceptions in a static build: libgcc's unwinder, instrumented there, loses the decoder its place"
	}
	return ""
}

// TestFixturesBehaveLikeNative rewrites every fixture in every variant
// with the branch tool (default and --every), runs the original and the
// rewritten binary, and requires identical stdout, stderr and exit code,
// a readable trace, and that every traced event comes from a probed site.
func TestFixturesBehaveLikeNative(t *testing.T) {
	var mu sync.Mutex
	totals := map[string]int{}
	for _, f := range fixtures.All() {
		for _, v := range variants() {
			if !f.Supports(v) {
				continue
			}
			f, v := f, v
			t.Run(f.Name+"/"+v.String(), func(t *testing.T) {
				t.Parallel()
				bin := fixtures.Build(t, f.Name, v)
				nOut, nErr, nCode, err := fixtures.Run(bin, f.Args, nil)
				if err != nil {
					t.Fatal(err)
				}
				sets := []rewrite.Options{{}, {Every: true, Rows: true}}
				if gap := compactGap(f, v); gap != "" {
					t.Logf("compact trace not checked: %s", gap)
				} else if compactSupported(v) {
					sets = append(sets, rewrite.Options{Every: true})
				}
				// a sampled call tool: entry probes, per-thread stripes (the
				// fixtures without libc end with exit, not exit_group: the
				// sampler's reader then ends the run, TestProgramLeftWithExit)
				sets = append(sets, rewrite.Options{Tool: rewrite.ToolCall, Sample: "rate:20%"})
				for _, opts := range sets {
					dir := t.TempDir()
					out, st := rewritten(t, bin, dir, opts)
					if opts.Tool == rewrite.ToolBranch {
						mu.Lock()
						totals["sites"] += st.Sites
						totals["patched"] += st.PatchedTotal()
						mu.Unlock()
					}
					traces := filepath.Join(dir, "traces")
					rOut, rErr, rCode, err := fixtures.Run(out, f.Args, traceEnv(traces))
					if err != nil {
						t.Fatal(err)
					}
					what := fmt.Sprintf("every=%v rows=%v sample=%q", opts.Every, opts.Rows, opts.Sample)
					if !bytes.Equal(nOut, rOut) {
						t.Errorf("%s: stdout differs:\nnative:    %q\nrewritten: %q", what, clip(nOut), clip(rOut))
					}
					if lost := chunkLost.Find(rErr); lost != nil && f.Name == "except" {
						// A static-pie's stub chunk can land where the
						// kernel put its brk heap (seen once in CI on
						// except/O2-pie-static): the runtime restores
						// the chunk's sites and says so, as designed.
						// Tolerated here, for this fixture only, until
						// chunks avoid the brk area; noted, not hidden.
						t.Logf("%s: %s", what, bytes.TrimSpace(lost))
						rErr = chunkLost.ReplaceAll(rErr, nil)
					}
					if !bytes.Equal(nErr, rErr) {
						t.Errorf("%s: stderr differs:\nnative:    %q\nrewritten: %q", what, clip(nErr), clip(rErr))
					}
					if nCode != rCode {
						t.Errorf("%s: exit code: native %d, rewritten %d", what, nCode, rCode)
					}
					if opts.Sample == "" {
						checkTraceSources(t, out, traces) // a sampled call's source is its caller
					} else if len(readTraces(t, traces)) == 0 {
						t.Errorf("%s: no trace", what)
					}
				}
			})
		}
	}
	t.Cleanup(func() {
		if totals["sites"] > 0 {
			t.Logf("fixtures: %d of %d branch sites patched (%.2f%%)", totals["patched"], totals["sites"],
				100*float64(totals["patched"])/float64(totals["sites"]))
		}
	})
}

// checkTraceSources requires at least one trace in dir and that every event
// whose source is in the rewritten module is one of its probes (same src
// and kind).
func checkTraceSources(t *testing.T, rewrittenPath, dir string) {
	t.Helper()
	m, probes, err := Probed(rewrittenPath)
	if err != nil {
		t.Fatal(err)
	}
	type sk struct {
		src  uint64
		kind uint8
	}
	probed := map[sk]bool{}
	for _, p := range probes {
		probed[sk{p.Src, p.Kind}] = true
	}
	trs := readTraces(t, dir)
	if len(trs) == 0 {
		t.Fatalf("no trace file in %s", dir)
	}
	set, _ := traceEdges(t, trs, fmt.Sprintf("%x", m.BuildID[:m.BuildIDLen]))
	if len(set) == 0 {
		t.Errorf("traces hold no event of the rewritten module")
	}
	if m.Flags&runtime.MFPaths != 0 {
		// a compact trace: every event is a branch the decoder can walk
		ok := walkable(t, rewrittenPath, true)
		for e := range set {
			if !ok(e) {
				t.Errorf("event %v: no branch of that kind at %#x in the branch map", e, e.Src)
			}
		}
		return
	}
	for e := range set {
		if !probed[sk{e.Src, e.Kind}] {
			t.Errorf("event %v: no probe of that kind at %#x", e, e.Src)
		}
	}
}

func clip(b []byte) string {
	if len(b) > 400 {
		return string(b[:400]) + "…"
	}
	return string(b)
}

// chunkLost is the runtime's line for stub chunks it could not map.
var chunkLost = regexp.MustCompile(`(?m)^stint: \d+ of \d+ trampoline chunks could not be mapped \(EEXIST\); \d+ sites left unprobed\n`)
