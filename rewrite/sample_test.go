package rewrite

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stint-project/stint/internal/testvec"
	"github.com/stint-project/stint/runtime"
)

// TestParseSampleVectors checks ParseSample against the vectors the
// runtime's sample_parse is checked against too.
func TestParseSampleVectors(t *testing.T) {
	for _, v := range testvec.Samples(t) {
		s, err := ParseSample(v.Input)
		switch {
		case v.Err && err == nil:
			t.Errorf("line %d: %q parsed as %+v, want an error", v.Line, v.Input, s)
		case !v.Err && err != nil:
			t.Errorf("line %d: %q: %v", v.Line, v.Input, err)
		case !v.Err && (s.Method != v.Method || s.Param != v.Param):
			t.Errorf("line %d: %q parsed as %+v, want method %d param %d", v.Line, v.Input, s, v.Method, v.Param)
		case v.Err && !strings.Contains(err.Error(), "want all, rate:P%"):
			t.Errorf("line %d: %q: the message %q does not teach the grammar", v.Line, v.Input, err)
		}
	}
}

// TestEntryProbes: a sampled call tool (rate or a reservoir per
// function) probes function entries: the module says so
// (MFEntries, and MFStripes unless --no-opt stripe), every probe is a PFEntry call probe at its own function
// (Src = Dst), and most entries need no stub (their runs make room for
// a jmp). --no-opt entry, --sample-per site and every:N probe the
// call sites instead.
func TestEntryProbes(t *testing.T) {
	orig := readInput(t, gzipPath)
	for _, c := range []struct {
		opts    Options
		entries bool
	}{
		{Options{Tool: ToolCall, Sample: "rate:20%"}, true},
		{Options{Tool: ToolCall, Sample: "reservoir:20%"}, true},
		{Options{Tool: ToolCall, Sample: "reservoir:20%", SamplePer: "site"}, false},
		{Options{Tool: ToolCall, Sample: "every:5"}, false},
		{Options{Tool: ToolCall, Sample: "rate:20%", NoOpt: []string{"entry"}}, false},
		{Options{Tool: ToolCall, Sample: "rate:20%", NoOpt: []string{"stripe"}}, true},
	} {
		out, st, err := RewriteBytes(orig, c.opts)
		if err != nil {
			t.Fatal(err)
		}
		name := strings.Join(append([]string{c.opts.Sample, c.opts.SamplePer}, c.opts.NoOpt...), " ")
		path := filepath.Join(t.TempDir(), "gzip")
		if err := os.WriteFile(path, out, 0o755); err != nil {
			t.Fatal(err)
		}
		mod, probes, _ := moduleRets(t, path)
		if got := mod.Flags&runtime.MFEntries != 0; got != c.entries {
			t.Errorf("%s: MFEntries %v, want %v", name, got, c.entries)
		}
		// gzip is a dynamic PIE: %fs:0 is the thread pointer
		if got, want := mod.Flags&runtime.MFStripes != 0, c.entries && !slices.Contains(c.opts.NoOpt, "stripe"); got != want {
			t.Errorf("%s: MFStripes %v, want %v", name, got, want)
		}
		entries := 0
		for _, p := range probes {
			if p.Flags&runtime.PFEntry == 0 {
				continue
			}
			entries++
			if runtime.Kind(p.Kind) != runtime.KCall || p.Flags&runtime.PFDirect == 0 || p.Src != p.Dst {
				t.Errorf("%s: entry probe %+v: want a direct call probe at its own function", name, p)
			}
		}
		if c.entries && (entries != len(probes) || entries == 0 || st.Stubs*4 > entries) {
			t.Errorf("%s: %d entry probes of %d, %d stubs", name, entries, len(probes), st.Stubs)
		}
		if !c.entries && entries != 0 {
			t.Errorf("%s: %d entry probes, want none", name, entries)
		}
		t.Logf("%s: %d probes, %d entries, %d stubs", name, len(probes), entries, st.Stubs)
	}
}
