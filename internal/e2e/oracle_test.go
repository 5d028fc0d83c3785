package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/stint-project/stint/analysis/paths"
	"github.com/stint-project/stint/formats"
	"github.com/stint-project/stint/internal/fixtures"
	"github.com/stint-project/stint/internal/oracle"
	"github.com/stint-project/stint/rewrite"
	"github.com/stint-project/stint/runtime"
)

// oracleVariants are the builds checked against the single-stepper (it is
// slow, so fewer than the behaviour test): the common PIE build, a
// fixed-address static one (libc's own code is then in the module), and a
// CET build.
func oracleVariants() []fixtures.Variant {
	vs := []fixtures.Variant{{Opt: fixtures.O2, PIE: true}}
	if !testing.Short() {
		vs = append(vs,
			fixtures.Variant{Opt: fixtures.O0, PIE: false},
			fixtures.Variant{Opt: fixtures.O2, PIE: true, CET: true},
		)
	}
	return vs
}

// oracleEdges converts the oracle's events to edges; locations outside any
// file (vdso, anonymous memory) lose their address, as absolute addresses
// do not compare across runs.
func oracleEdges(res *oracle.Result) (set map[edge]int, perThread [][]edge) {
	conv := func(e oracle.Event, self string) edge {
		out := edge{Kind: uint8(e.Kind), Src: e.Src, Dst: e.Dst.Off, Value: e.Value}
		switch {
		case e.Kind == oracle.Syscall:
			out.Dst = 0
		case e.Dst.Module == self:
		case e.Dst.Module == "" || strings.HasPrefix(e.Dst.Module, "["):
			out.DstMod, out.Dst = "?", 0
		default:
			out.DstMod = filepath.Base(e.Dst.Module)
		}
		return out
	}
	set = map[edge]int{}
	for _, p := range res.Processes {
		tids := make([]int, 0, len(p.Threads))
		for tid := range p.Threads {
			tids = append(tids, tid)
		}
		sort.Ints(tids)
		for _, tid := range tids {
			var seq []edge
			for _, e := range p.Threads[tid] {
				c := conv(e, p.Module)
				set[c]++
				seq = append(seq, c)
			}
			perThread = append(perThread, seq)
		}
	}
	return set, perThread
}

// normalizeUnknown drops addresses of destinations outside any file on the
// trace side too.
func normalizeUnknown(es []edge) {
	for i := range es {
		if es[i].DstMod == "?" {
			es[i].Dst = 0
		}
	}
}

// TestBranchTraceMatchesOracle runs each fixture's original binary under
// the ptrace single-stepper and its rewritten binary, and requires that,
// restricted to the probed sites, the set of (src, dst, kind) in the
// default-mode trace equals the oracle's (with and without edge probes),
// and that with --every (rows, and a compact trace decoded, its jccs
// probed in place or from elsewhere) each thread's sequence equals one
// of the oracle's threads' sequences.
func TestBranchTraceMatchesOracle(t *testing.T) {
	if testing.Short() {
		t.Skip("single-stepping is slow; skipped under -short")
	}
	for _, f := range fixtures.All() {
		if f.Heavy {
			continue
		}
		for _, v := range oracleVariants() {
			if !f.Supports(v) {
				continue
			}
			f, v := f, v
			t.Run(f.Name+"/"+v.String(), func(t *testing.T) {
				t.Parallel()
				bin := fixtures.Build(t, f.Name, v)
				// Lazy PLT binding makes the first call through a PLT
				// slot differ from later ones, and with threads which
				// thread binds first is a matter of scheduling: bind
				// eagerly in both runs.
				env := append(traceEnv(t.TempDir()), "LD_BIND_NOW=1")
				res, err := oracle.Record(bin, f.Args, env, "")
				if err != nil {
					t.Fatalf("oracle: %v", err)
				}
				want, wantSeqs := oracleEdges(res)
				// Default mode, default mode with every jcc's outcomes
				// probed at their destinations where they can be
				// (edge probes, rewrite/edges.go), --every with a row
				// per event, and --every as a compact trace, decoded.
				// Compact traces are checked where they are supported
				// (compactSupported). The call chain (--tool call
				// --every) likewise, as rows and compact: its calls
				// and returns.
				call := rewrite.Options{Tool: rewrite.ToolCall, Every: true}
				// and with an int3 at every site (the SIGTRAP fallback)
				// (not in a static executable: it carries libc, which
				// blocks SIGTRAP at times)
				sets := []rewrite.Options{{}, {Edges: rewrite.EdgesAll}, {Every: true, Rows: true}, {Tool: rewrite.ToolCall, Every: true, Rows: true}}
				if !v.Static {
					sets = append(sets, rewrite.Options{TrapAll: true}, rewrite.Options{Every: true, Rows: true, TrapAll: true})
				}
				if compactSupported(v) {
					// and with every jcc and ret probed from elsewhere
					// where it can be (pre-sites, marks: policy/marks.go),
					// and without fragment linking (rewrite/links.go)
					sets = append(sets, rewrite.Options{Every: true}, rewrite.Options{Every: true, Fallbacks: true}, call,
						rewrite.Options{Every: true, NoOpt: []string{"link"}})
				}
				for _, opts := range sets {
					every := opts.Every
					dir := t.TempDir()
					out, st := rewritten(t, bin, dir, opts)
					if opts.TrapAll && st.Patched["trap"] == 0 {
						t.Errorf("TrapAll: no int3 sites (%v)", st.Patched)
					}
					if opts.Fallbacks && (st.PreJccs == 0 || st.PreRets == 0) {
						t.Errorf("Fallbacks: %d jccs and %d rets probed from the instruction before them, want some of each", st.PreJccs, st.PreRets)
					}
					m, probes, err := Probed(out)
					if err != nil {
						t.Fatal(err)
					}
					traces := filepath.Join(dir, "traces")
					// a hot int3 site (one no jump fits, or every site with
					// TrapAll) retires by design, its later outcomes unseen
					env := append(traceEnv(traces), "LD_BIND_NOW=1", "STINT_TRAP_RETIRE=0")
					if _, _, _, err := fixtures.Run(out, f.Args, env); err != nil {
						t.Fatal(err)
					}
					have, haveSeqs := traceEdges(t, readTraces(t, traces), fmt.Sprintf("%x", m.BuildID[:m.BuildIDLen]))
					probed := probedKinds(probes)
					keep := func(e edge) bool { return probed[[2]uint64{e.Src, uint64(e.Kind)}] }
					if opts.Paths() {
						// a compact trace: every branch the decoder can walk
						keep = walkable(t, out, false)
					}
					if opts.Tool == rewrite.ToolCall {
						keep = callsOnly(keep)
						for e := range have {
							if !callsOnly(func(edge) bool { return true })(e) && e.Kind < uint8(formats.KindPeriod) {
								t.Errorf("a call chain holds %s", formats.Kind(e.Kind))
								break
							}
						}
					}
					if !every {
						compareSets(t, filterSet(want, keep), normalizeSet(have))
						continue
					}
					if opts.Paths() {
						// the decoder infers the rets without a probe, but
						// not after a thread's last packet: compare the rest
						haveSeqs = filterSeqs(haveSeqs, keep)
					}
					compareSeqs(t, filterSeqs(wantSeqs, keep), haveSeqs)
				}
			})
		}
	}
}

// callsOnly keeps what keep keeps of the calls and returns.
func callsOnly(keep func(edge) bool) func(edge) bool {
	return func(e edge) bool {
		k := formats.Kind(e.Kind)
		return (k == formats.KindCall || k == formats.KindIndCall || k == formats.KindRet) && keep(e)
	}
}

// walkable returns whether an event's (src, kind) is one a compact
// trace of the rewritten file shows: a branch of its branch map that is
// probed, or a direct jmp or call (the decoder follows those), and with
// inferred a ret without a probe too (the decoder infers where it went).
func walkable(t *testing.T, path string, inferred bool) func(edge) bool {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	m, err := paths.ReadMap(f)
	if err != nil || m == nil {
		t.Fatalf("%s: branch map %v (%v)", path, m, err)
	}
	kinds := map[formats.BranchKind][]formats.Kind{
		formats.BrJcc: {formats.KindJccTaken, formats.KindJccNotTaken}, formats.BrJmp: {formats.KindJmp},
		formats.BrCall: {formats.KindCall}, formats.BrRet: {formats.KindRet},
		formats.BrIndJmp: {formats.KindIndJmp}, formats.BrIndCall: {formats.KindIndCall},
	}
	keep := map[[2]uint64]bool{}
	for _, br := range m.Branches {
		if br.Flags&formats.BranchProbed == 0 && br.Kind != formats.BrJmp && br.Kind != formats.BrCall && (!inferred || br.Kind != formats.BrRet) {
			continue
		}
		for _, k := range kinds[br.Kind] {
			keep[[2]uint64{br.Addr, uint64(k)}] = true
		}
	}
	return func(e edge) bool { return keep[[2]uint64{e.Src, uint64(e.Kind)}] }
}

func probedKinds(probes []runtime.Probe) map[[2]uint64]bool {
	m := map[[2]uint64]bool{}
	for _, p := range probes {
		m[[2]uint64{p.Src, uint64(p.Kind)}] = true
	}
	return m
}

func filterSet(s map[edge]int, keep func(edge) bool) map[edge]bool {
	out := map[edge]bool{}
	for e := range s {
		if keep(e) {
			out[e] = true
		}
	}
	return out
}

func normalizeSet(s map[edge]int) map[edge]bool {
	out := map[edge]bool{}
	for e := range s {
		if e.DstMod == "?" {
			e.Dst = 0
		}
		out[e] = true
	}
	return out
}

func filterSeqs(seqs [][]edge, keep func(edge) bool) [][]edge {
	var out [][]edge
	for _, s := range seqs {
		var f []edge
		for _, e := range s {
			if keep(e) {
				f = append(f, e)
			}
		}
		if len(f) > 0 {
			out = append(out, f)
		}
	}
	return out
}

func compareSets(t *testing.T, want, have map[edge]bool) {
	t.Helper()
	var missing, extra []string
	for e := range want {
		if !have[e] {
			missing = append(missing, e.String())
		}
	}
	for e := range have {
		if !want[e] {
			extra = append(extra, e.String())
		}
	}
	sort.Strings(missing)
	sort.Strings(extra)
	if len(missing) > 0 {
		t.Errorf("default mode: %d of %d oracle edges missing from the trace, e.g. %s", len(missing), len(want), head(missing))
	}
	if len(extra) > 0 {
		t.Errorf("default mode: %d traced edges the oracle never saw, e.g. %s", len(extra), head(extra))
	}
}

// compareSeqs matches each traced thread's sequence with an oracle
// thread's sequence (thread ids differ between runs).
func compareSeqs(t *testing.T, want, have [][]edge) {
	t.Helper()
	for _, h := range have {
		normalizeUnknown(h)
	}
	key := func(s []edge) string {
		var b strings.Builder
		for _, e := range s {
			fmt.Fprintf(&b, "%v;", e)
		}
		return b.String()
	}
	pool := map[string]int{}
	for _, w := range want {
		pool[key(w)]++
	}
	for i, h := range have {
		k := key(h)
		if pool[k] > 0 {
			pool[k]--
			continue
		}
		// Report the first divergence against the closest oracle thread.
		best, at := -1, -1
		for j, w := range want {
			n := 0
			for n < len(w) && n < len(h) && w[n] == h[n] {
				n++
			}
			if n > at {
				best, at = j, n
			}
		}
		if best >= 0 {
			w := want[best]
			t.Errorf("--every: traced thread %d (%d events) matches no oracle thread; closest (%d events) diverges at event %d: oracle %s, trace %s",
				i, len(h), len(w), at, at_(w, at), at_(h, at))
		} else {
			t.Errorf("--every: traced thread %d (%d events) but the oracle has no thread", i, len(h))
		}
	}
	left := 0
	for _, n := range pool {
		left += n
	}
	if left > 0 {
		t.Errorf("--every: %d oracle threads have no traced counterpart", left)
	}
}

func at_(s []edge, i int) string {
	if i < len(s) {
		return s[i].String()
	}
	return "(end)"
}

func head(s []string) string {
	if len(s) > 5 {
		s = s[:5]
	}
	return strings.Join(s, "; ")
}
