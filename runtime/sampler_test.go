package runtime

import (
	"math"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"github.com/stint-project/stint/internal/testvec"
)

// buildSampler builds testdata/sampler.c, which drives src/sample.c's
// samplers on synthetic streams, and returns a function that runs it.
func buildSampler(t *testing.T) func(t *testing.T, args ...string) []uint64 {
	bin := buildHarness(t, "sampler")
	return func(t *testing.T, args ...string) []uint64 {
		t.Helper()
		out, err := exec.Command(bin, args...).Output()
		if err != nil {
			t.Fatalf("sampler %v: %v", args, err)
		}
		var vs []uint64
		for _, f := range strings.Fields(string(out)) {
			v, err := strconv.ParseUint(f, 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			vs = append(vs, v)
		}
		return vs
	}
}

// TestSampler: known-answer tests of the samplers.
func TestSampler(t *testing.T) {
	run := buildSampler(t)
	t.Run("reservoir-uniform", func(t *testing.T) { testReservoirUniform(t, run) })
	t.Run("rate", func(t *testing.T) { testRate(t, run) })
	t.Run("every", func(t *testing.T) { testEvery(t, run) })
	t.Run("sizes", func(t *testing.T) { testSizes(t, run) })
	t.Run("grammar", func(t *testing.T) { testSampleGrammar(t, run) })
}

// testSampleGrammar checks the runtime's sample_parse against the vectors
// rewrite.ParseSample is checked against.
func testSampleGrammar(t *testing.T, sampler samplerRun) {
	vs := testvec.Samples(t)
	args := []string{"parse"}
	for _, v := range vs {
		args = append(args, v.Input)
	}
	out := sampler(t, args...)
	if len(out) != 2*len(vs) {
		t.Fatalf("%d numbers for %d inputs", len(out), len(vs))
	}
	for i, v := range vs {
		m, p := out[2*i], out[2*i+1]
		switch {
		case v.Err && m != 255:
			t.Errorf("line %d: %q parsed as method %d param %d, want a refusal", v.Line, v.Input, m, p)
		case !v.Err && (m != uint64(v.Method) || p != v.Param):
			t.Errorf("line %d: %q parsed as method %d param %d, want %d and %d", v.Line, v.Input, m, p, v.Method, v.Param)
		}
	}
}

type samplerRun = func(t *testing.T, args ...string) []uint64

// chiSquareOK reports whether counts, each expected to be want, pass a
// chi-square test of uniformity at significance 0.001 (the critical
// value by Wilson and Hilferty's approximation), and the statistic.
func chiSquareOK(counts []uint64, want float64) (bool, float64) {
	x := 0.0
	for _, c := range counts {
		d := float64(c) - want
		x += d * d / want
	}
	df := float64(len(counts) - 1)
	const z = 3.0902 // the normal's 0.999 quantile
	crit := df * math.Pow(1-2/(9*df)+z*math.Sqrt(2/(9*df)), 3)
	return x <= crit, x
}

// testReservoirUniform: Algorithm L gives every event of a stream
// the same chance, K/N, to end in the reservoir: over R reservoirs each
// of B buckets of the stream should hold R*K/B samples. The second case's
// W falls under 2^-8, where the skip comes from ln(1-W)'s series.
func testReservoirUniform(t *testing.T, sampler samplerRun) {
	for _, c := range []struct{ k, n, reps, buckets int }{
		{50, 1000, 2000, 20},
		{20, 200000, 500, 20},
		{8, 9, 20000, 9}, // a reservoir nearly as large as its stream
	} {
		hits := sampler(t, "res", strconv.Itoa(c.k), strconv.Itoa(c.n), strconv.Itoa(c.reps), "uniform", strconv.Itoa(c.buckets))
		want := float64(c.reps*c.k) / float64(c.buckets)
		ok, x := chiSquareOK(hits, want)
		if !ok {
			t.Errorf("K=%d N=%d: chi-square %.1f over %d buckets: not uniform (%v, each want %.0f)", c.k, c.n, x, c.buckets, hits, want)
		}
		t.Logf("K=%d N=%d: chi-square %.1f over %d buckets", c.k, c.n, x, c.buckets)
	}
}

// testRate: rate:20% takes a fifth of the events, evenly over the
// stream.
func testRate(t *testing.T, sampler samplerRun) {
	const n, b = 1000000, 50
	vs := sampler(t, "rate", "200000", strconv.Itoa(n), "rate", strconv.Itoa(b))
	total := vs[b]
	if sd := math.Sqrt(n * 0.2 * 0.8); math.Abs(float64(total)-n*0.2) > 4*sd {
		t.Errorf("took %d of %d at 20%%: more than 4 sd from %d", total, n, n/5)
	}
	if ok, x := chiSquareOK(vs[:b], float64(total)/b); !ok {
		t.Errorf("chi-square %.1f: not even over the stream (%v)", x, vs[:b])
	}
}

// testEvery: every:7 takes the events 0, 7, 14, ... and no other.
func testEvery(t *testing.T, sampler samplerRun) {
	got := sampler(t, "every", "7", "50")
	want := []uint64{0, 7, 14, 21, 28, 35, 42, 49}
	if len(got) != len(want) {
		t.Fatalf("took %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("took %v, want %v", got, want)
		}
	}
}

// testSizes: a reservoir's size in an interval is P% of its
// stratum's events in the interval before, never under the minimum (8);
// in its first interval a stratum has no reservoir and takes each event
// at P% (its first always). It holds min(N, size) at each interval's end.
func testSizes(t *testing.T, sampler samplerRun) {
	ns := []uint64{1000, 5000, 0, 100, 3, 20, 40000}
	args := []string{"sizes", "200000", "sizes"}
	for _, n := range ns {
		args = append(args, strconv.FormatUint(n, 10))
	}
	vs := sampler(t, args...)
	if len(vs) != 2*len(ns) {
		t.Fatalf("got %v", vs)
	}
	wantK := []uint64{0, 200, 1000, SampleMin, 20, SampleMin, SampleMin} // the last: 20% of 20 is 4
	for j, n := range ns {
		k, held := vs[2*j], vs[2*j+1]
		if k != wantK[j] {
			t.Errorf("interval %d (%d events): reservoir %d, want %d", j, n, k, wantK[j])
		}
		if j == 0 {
			if sd := math.Sqrt(float64(n) * 0.2 * 0.8); math.Abs(float64(held)-float64(n)*0.2) > 4*sd+1 {
				t.Errorf("first interval: took %d of %d at 20%%", held, n)
			}
			continue
		}
		if want := min(n, k); held != want {
			t.Errorf("interval %d (%d events, reservoir %d): holds %d samples, want %d", j, n, k, held, want)
		}
	}
}
