package runtime

import (
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stint-project/stint/internal/testvec"
)

// buildHarness builds testdata/NAME.c, a hosted program that includes
// the runtime as one unit to drive its parts directly, and returns it.
func buildHarness(t *testing.T, name string) string {
	t.Helper()
	if testing.Short() {
		t.Skip("compiles a C harness; skipped under -short")
	}
	gcc := needGCC(t)
	bin := filepath.Join(t.TempDir(), name)
	if out, err := exec.Command(gcc, "-O1", "-Wall", "-Werror", "-Iinclude", "-Isrc", "-o", bin,
		"testdata/"+name+".c", "src/entry.S").CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	return bin
}

// TestGrammarVectors checks the runtime's duration and budget parser
// (src/options.c) against the vectors rewrite.ParseDuration and
// ParseBudget are checked against: testdata/grammar.c prints what the
// runtime makes of each, 0 for a refusal.
func TestGrammarVectors(t *testing.T) {
	bin := buildHarness(t, "grammar")
	vs := testvec.Durations(t)
	args := make([]string, len(vs))
	for i, v := range vs {
		args[i] = "d:" + v.Input
		if v.Budget {
			args[i] = "b:" + strconv.FormatInt(v.Period, 10) + ":" + v.Input
		}
	}
	out, err := exec.Command(bin, args...).Output()
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Fields(string(out))
	if len(lines) != len(vs) {
		t.Fatalf("%d results for %d vectors", len(lines), len(vs))
	}
	for i, v := range vs {
		have, _ := strconv.ParseInt(lines[i], 10, 64)
		switch {
		case v.Err && have != 0:
			t.Errorf("line %d: %q: %d, want a refusal", v.Line, v.Input, have)
		case !v.Err && have != v.Want:
			t.Errorf("line %d: %q: %d, want %d", v.Line, v.Input, have, v.Want)
		}
	}
}
