package rewrite

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/stint-project/stint/rewrite/elfin"
	"github.com/stint-project/stint/rewrite/facts"
	"github.com/stint-project/stint/runtime"
)

// TestPreCalls rewrites libsqlite3 (indirect calls through function
// pointers everywhere) with and without pre-call sites. By default every
// indirect call probe whose call's bytes are unchanged in the output is
// a pre-call site, there are as many as the statistics count, and they
// are most of the probed calls; with EmulateIndirectCalls every probed
// call is patched where it is.
func TestPreCalls(t *testing.T) {
	const lib = "/usr/lib/x86_64-linux-gnu/libsqlite3.so.0"
	orig := readInput(t, lib)
	f, err := elfin.Parse(orig)
	if err != nil {
		t.Fatal(err)
	}
	for _, emulate := range []bool{false, true} {
		st, probes, data := rewriteProbes(t, lib, Options{Budget: "10%", Period: "100ms", EmulateIndirectCalls: emulate})
		calls, inPlace := 0, 0
		for _, p := range probes {
			if p.Kind != uint8(runtime.KIndCall) {
				continue
			}
			calls++
			o, ok := f.OffsetOf(p.Src, 2)
			if !ok {
				t.Fatalf("call %#x is not in the file", p.Src)
			}
			if data[o] == orig[o] && data[o+1] == orig[o+1] {
				inPlace++ // an indirect call is 2 bytes or more
			}
		}
		want := st.PreCalls
		if emulate {
			want = 0
		}
		if inPlace != want || emulate && st.PreCalls != 0 {
			t.Errorf("emulate=%v: %d of %d probed indirect calls run in place, statistics %d, want %d", emulate, inPlace, calls, st.PreCalls, want)
		}
		if !emulate && inPlace*2 < calls {
			t.Errorf("only %d of %d probed indirect calls are pre-call sites", inPlace, calls)
		}
		t.Logf("emulate=%v: %d probed indirect calls, %d in place", emulate, calls, inPlace)
	}
}

// TestPreCallRuns rewrites libsqlite3 for a call chain: a direct call
// after plain instructions shorter than a jmp rel32 is probed from the
// nearest one before it from which they make 5 bytes, and runs in place
// (its bytes unchanged in the output). Most such calls are; with runs
// left out, none was (their trampolines emulated them). Rets are probed
// from pre-sites too where a jump in place would need a pun, and the
// rewrite leaves at most 26 sites unpatched (rets a byte long with no
// room around them; 30 before either) and .fini's.
func TestPreCallRuns(t *testing.T) {
	const lib = "/usr/lib/x86_64-linux-gnu/libsqlite3.so.0"
	orig := readInput(t, lib)
	f, err := elfin.Parse(orig)
	if err != nil {
		t.Fatal(err)
	}
	fx, err := facts.Compute(f)
	if err != nil {
		t.Fatal(err)
	}
	c := fx.Code
	st, probes, data := rewriteProbes(t, lib, Options{Tool: ToolCall, Every: true})
	short, inPlace := 0, 0
	for _, p := range probes {
		j := c.Index(p.Src)
		if p.Kind != uint8(runtime.KCall) || j < 1 || c.Insts[j].Addr != p.Src || c.Kinds[j] != facts.Call || c.Insts[j-1].Len() >= 5 {
			continue
		}
		short++
		o, ok := f.OffsetOf(p.Src, 5)
		if !ok {
			t.Fatalf("call %#x is not in the file", p.Src)
		}
		if bytes.Equal(data[o:o+5], orig[o:o+5]) {
			inPlace++
		}
	}
	t.Logf("%d probed direct calls after an instruction shorter than 5 bytes, %d in place; %d rets probed from pre-sites; %d sites failed", short, inPlace, st.PreRets, st.Failed)
	if inPlace*2 < short {
		t.Errorf("only %d of %d direct calls after a short instruction run in place", inPlace, short)
	}
	if st.Failed > 27 || st.PreRets == 0 {
		t.Errorf("%d sites failed, %d rets probed from pre-sites: want 27 at most and some", st.Failed, st.PreRets)
	}
}

// rewriteProbes rewrites lib with opts and returns the statistics, the
// output's probe records and its bytes.
func rewriteProbes(t *testing.T, lib string, opts Options) (*Stats, []runtime.Probe, []byte) {
	t.Helper()
	out := filepath.Join(t.TempDir(), "lib.so")
	st, err := RewriteFile(lib, out, opts)
	if err != nil {
		t.Fatal(err)
	}
	_, probes, _ := moduleRets(t, out)
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	return st, probes, data
}
