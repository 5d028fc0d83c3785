package e2e

import (
	"bytes"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stint-project/stint/formats"
	"github.com/stint-project/stint/internal/fixtures"
	"github.com/stint-project/stint/qos"
	"github.com/stint-project/stint/rewrite"
	rt "github.com/stint-project/stint/runtime"
)

// equation1 is the controller's formula in floating point.
func equation1(v, thr, max float64, flags, tuning uint32, period float64) float64 {
	lower := flags&rt.QoSLowerIsBetter != 0
	if lower && v >= thr || !lower && v <= thr {
		return 0
	}
	gain, den := v-thr, v+thr
	if lower {
		gain = thr - v
	}
	switch {
	case tuning == rt.QoSTuneSpan && (lower && max < thr || !lower && max > thr):
		den = math.Abs(max - thr)
	case tuning == rt.QoSTuneValue && lower:
		den = thr
	case tuning == rt.QoSTuneValue:
		den = v
	}
	return math.Min(gain/den*period, period)
}

// TestQoSController: a rewritten CPU-bound program whose QoS page the test
// drives through every case while it runs: no sample yet, a metric above
// the threshold, one below it, and an analyzer whose source failed. Every
// period's own records must show the budget the paper's Equation 1 gives
// for the metric the runtime saw (and the configured default when it saw
// none), zero whenever the metric was on the wrong side of the
// threshold, with the instrumentation never enabled in those periods.
func TestQoSController(t *testing.T) {
	// Each run must outlast the phases below (1.1 s) on whatever machine
	// runs the test: spin's N is scaled from a timed native run so that
	// natively it takes about 1.6 s (the rewritten run takes no less).
	args := []string{spinIterationsFor(t, 1600*time.Millisecond)}
	for _, tc := range []struct {
		name          string
		flags, tuning uint32
		thr, max      float64
		good, bad     float64 // metric values on the right and wrong side of thr
	}{
		{"sum", 0, rt.QoSTuneSum, 100, 0, 300, 50},
		{"latency-value", rt.QoSLowerIsBetter, rt.QoSTuneValue, 2.5e-3, 0, 1e-3, 9e-3},
		{"span", 0, rt.QoSTuneSpan, 1e6, 4e6, 3.5e6, 0.5e6},
	} {
		t.Run(tc.name, func(t *testing.T) {
			testQoSController(t, args, tc.flags, tc.tuning, tc.thr, tc.max, tc.good, tc.bad)
		})
	}
}

func testQoSController(t *testing.T, args []string, flags, tuning uint32, thr, max, good, bad float64) {
	bin, nOut := spinNative(t, args)
	dir := t.TempDir()
	const period = 20 * time.Millisecond
	out, _ := rewritten(t, bin, dir, rewrite.Options{Budget: "10%", Period: "20ms"})
	// The test is the analyzer: it publishes exactly the samples it
	// wants the runtime to see.
	page, err := qos.CreatePage(filepath.Join(dir, "qos"), qos.Config{Threshold: thr, Max: max, Tuning: qos.Tuning(tuning),
		LowerIsBetter: flags&rt.QoSLowerIsBetter != 0, Interval: 10 * time.Millisecond, Source: "e2e test"})
	if err != nil {
		t.Fatal(err)
	}
	defer page.Close()
	traces := filepath.Join(dir, "traces")
	_, stdout, stderr, done := startTraced(t, out, args, append(traceEnv(traces), rt.QoSEnv+"="+filepath.Join(dir, "qos")), nil)
	// The phases, in time since start: nothing published, good metric,
	// bad metric, another good one, then the source fails.
	start := time.Now()
	phases := []struct {
		until time.Duration
		state uint32
		v     float64
	}{
		{150 * time.Millisecond, rt.QoSStarting, 0},
		{400 * time.Millisecond, rt.QoSRunning, good},
		{650 * time.Millisecond, rt.QoSRunning, bad},
		{900 * time.Millisecond, rt.QoSRunning, (good + thr) / 2},
		{1 << 62, rt.QoSFailing, good},
	}
	tick := time.NewTicker(5 * time.Millisecond)
loop:
	for {
		select {
		case err = <-done:
			break loop
		case <-tick.C:
			el := time.Since(start)
			for _, ph := range phases {
				if el < ph.until {
					switch ph.state {
					case rt.QoSRunning:
						page.Publish(ph.v, qos.Monotonic())
					case rt.QoSFailing:
						page.SetState(qos.Failing)
					}
					break
				}
			}
		}
	}
	tick.Stop()
	if err != nil || !bytes.Equal(stdout.Bytes(), nOut) || stderr.Len() != 0 {
		t.Fatalf("rewritten run: %v, stdout %q (native %q), stderr %q", err, stdout.Bytes(), nOut, stderr.Bytes())
	}
	if el := time.Since(start); el < 1100*time.Millisecond {
		t.Fatalf("the run took %v: too short to go through the phases (make spin's N larger)", el)
	}
	trs := readTraces(t, traces)
	if len(trs) != 1 {
		t.Fatalf("%d traces, want 1", len(trs))
	}
	tr := trs[0]
	if !strings.HasSuffix(tr.Run.QoS, "/qos") {
		t.Errorf("run metadata qos = %q, want the page's path", tr.Run.QoS)
	}
	def := float64(2 * time.Millisecond)
	var nDefault, nZero, nFormula int
	ps := formats.Periods(tr.Events)
	for i, p := range ps {
		if !p.HasBudget || !p.HasStats || !p.HasQoS {
			t.Fatalf("period %d: rows budget %v stats %v qos %v, want all three", i, p.HasBudget, p.HasStats, p.HasQoS)
		}
		if p.QoSBudget != p.Granted {
			t.Errorf("period %d: QoS row says %d ns computed, period row %d granted", i, p.QoSBudget, p.Granted)
		}
		var want float64
		switch {
		case math.IsNaN(p.Metric):
			want = def
			nDefault++
		default:
			if p.Threshold != thr {
				t.Errorf("period %d: threshold %g, want %g", i, p.Threshold, thr)
			}
			if p.Metric != good && p.Metric != bad && p.Metric != (good+thr)/2 {
				t.Errorf("period %d: metric %g was never published", i, p.Metric)
			}
			want = equation1(p.Metric, thr, max, flags, tuning, float64(period))
			if want == 0 {
				nZero++
				if p.Enabled != 0 {
					t.Errorf("period %d: metric %g on the wrong side of %g, budget 0, but enabled for %d ns", i, p.Metric, thr, p.Enabled)
				}
			} else {
				nFormula++
			}
		}
		if d := math.Abs(float64(p.Granted) - want); d > 2 {
			t.Errorf("period %d: metric %g, threshold %g: granted %d ns, Equation 1 gives %.0f", i, p.Metric, p.Threshold, p.Granted, want)
		}
	}
	if nDefault < 2 || nZero < 2 || nFormula < 2 {
		t.Errorf("periods: %d with the default, %d under the threshold, %d by the formula; want each case at least twice", nDefault, nZero, nFormula)
	}
	t.Logf("%d periods: %d default, %d zero, %d by Equation 1", len(ps), nDefault, nZero, nFormula)
}

// TestQoSBadPage: STINT_QOS naming something that is not a QoS page is
// said once on stderr; the program runs as before and every period gets
// the configured default budget.
func TestQoSBadPage(t *testing.T) {
	args := []string{"3000"}
	bin, nOut := spinNative(t, args)
	dir := t.TempDir()
	out, _ := rewritten(t, bin, dir, rewrite.Options{Budget: "5%", Period: "10ms"})
	bad := filepath.Join(dir, "not-a-page")
	if err := os.WriteFile(bad, bytes.Repeat([]byte("garbage!"), rt.QoSPageSize/8), 0o644); err != nil {
		t.Fatal(err)
	}
	traces := filepath.Join(dir, "traces")
	rOut, rErr, code, err := fixtures.Run(out, args, append(traceEnv(traces), rt.QoSEnv+"="+bad))
	if err != nil {
		t.Fatal(err)
	}
	if code != 0 || !bytes.Equal(rOut, nOut) {
		t.Fatalf("exit %d, stdout %q, want %q", code, rOut, nOut)
	}
	if n := strings.Count(string(rErr), "does not name a QoS page"); n != 1 {
		t.Errorf("stderr %q: want the bad page reported once", rErr)
	}
	for _, tr := range readTraces(t, traces) {
		ps := formats.Periods(tr.Events)
		if len(ps) == 0 {
			t.Fatal("no periods recorded")
		}
		for i, p := range ps {
			if !p.HasQoS || !math.IsNaN(p.Metric) || p.Granted != 500000 {
				t.Errorf("period %d: qos row %v metric %g granted %d; want no metric and the 500000 ns default", i, p.HasQoS, p.Metric, p.Granted)
			}
		}
	}
}

// spinIterationsFor returns spin's argument N for a native run of about d.
func spinIterationsFor(t *testing.T, d time.Duration) string {
	t.Helper()
	const n0 = 25000
	bin := buildSpin(t)
	start := time.Now()
	if _, _, _, err := fixtures.Run(bin, []string{strconv.Itoa(n0)}, nil); err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	n := int64(n0)
	if took > 0 {
		n = int64(float64(n0) * float64(d) / float64(took))
	}
	return strconv.FormatInt(min(max(n, n0), 20*n0), 10)
}
