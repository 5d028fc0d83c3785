package rewrite

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stint-project/stint/rewrite/elfin"
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
		out := filepath.Join(t.TempDir(), "lib.so")
		st, err := RewriteFile(lib, out, Options{Budget: "10%", Period: "100ms", EmulateIndirectCalls: emulate})
		if err != nil {
			t.Fatal(err)
		}
		_, probes, _ := moduleRets(t, out)
		data, err := os.ReadFile(out)
		if err != nil {
			t.Fatal(err)
		}
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
