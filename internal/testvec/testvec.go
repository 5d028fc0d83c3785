// Package testvec reads the test vectors that several packages check
// their own implementation of one grammar against (testdata/ at the
// module root), so that the implementations cannot drift apart.
package testvec

import (
	"bufio"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
)

// Grammar is a row of testdata/durations.tsv.
type Grammar struct {
	Line   int
	Budget bool   // a budget (else a duration)
	Input  string // as written
	Period int64  // ns, for a budget
	Want   int64  // ns
	Err    bool   // the input is refused
}

// Root returns the module's root directory.
func Root() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// Durations reads testdata/durations.tsv; a malformed row fails t.
func Durations(t testing.TB) []Grammar {
	t.Helper()
	path := filepath.Join(Root(), "testdata", "durations.tsv")
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []Grammar
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		w := strings.Split(line, "\t")
		if len(w) != 4 || (w[0] != "duration" && w[0] != "budget") {
			t.Fatalf("%s:%d: want kind, input, period, want: %q", path, n, line)
		}
		g := Grammar{Line: n, Budget: w[0] == "budget", Input: w[1], Err: w[3] == "error"}
		if g.Budget {
			if g.Period, err = strconv.ParseInt(w[2], 10, 64); err != nil {
				t.Fatalf("%s:%d: period %q", path, n, w[2])
			}
		}
		if !g.Err {
			if g.Want, err = strconv.ParseInt(w[3], 10, 64); err != nil {
				t.Fatalf("%s:%d: want %q", path, n, w[3])
			}
		}
		out = append(out, g)
	}
	if len(out) < 20 {
		t.Fatalf("%s: only %d rows", path, len(out))
	}
	return out
}

// Sample is a row of testdata/samples.tsv: a sampling method and what
// it parses to.
type Sample struct {
	Line   int
	Input  string
	Method int    // 0 all, 1 rate, 2 every, 3 reservoir
	Param  uint64 // ppm, or N
	Err    bool   // the input is refused
}

// Samples reads testdata/samples.tsv; a malformed row fails t.
func Samples(t testing.TB) []Sample {
	t.Helper()
	path := filepath.Join(Root(), "testdata", "samples.tsv")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []Sample
	for n, line := range strings.Split(string(b), "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		w := strings.Split(line, "\t")
		if len(w) != 3 {
			t.Fatalf("%s:%d: want input, method, param: %q", path, n+1, line)
		}
		s := Sample{Line: n + 1, Input: w[0], Err: w[1] == "error"}
		if !s.Err {
			m, err1 := strconv.Atoi(w[1])
			p, err2 := strconv.ParseUint(w[2], 10, 64)
			if err1 != nil || err2 != nil {
				t.Fatalf("%s:%d: method %q, param %q", path, n+1, w[1], w[2])
			}
			s.Method, s.Param = m, p
		}
		out = append(out, s)
	}
	if len(out) < 10 {
		t.Fatalf("%s: only %d rows", path, len(out))
	}
	return out
}
