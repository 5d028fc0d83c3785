package benchmarks

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestDIMESmoke runs the whole DIME experiment in its smallest
// configuration (tiny inputs, two runs per series, two policies), so
// the harness itself is tested: rewriting, running every workload,
// reading the traces, the metrics, the JSON, the Markdown and the plots.
func TestDIMESmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("rewrites and runs gzip, sqlite3 and redis-server (skipped under -short)")
	}
	for _, c := range []string{"gzip", "sqlite3", "redis-server", "redis-benchmark"} {
		if _, err := exec.LookPath(c); err != nil {
			t.Skipf("%s not installed (scripts/setup.sh, scripts/bench-deps.sh)", c)
		}
	}
	if _, err := os.Stat(SQLiteLib); err != nil {
		t.Skip(err)
	}
	tmp := t.TempDir()
	rw := buildRewrite(t, tmp)
	var log bytes.Buffer
	d := &DIME{
		Config:     Config{Rewrite: rw, WorkDir: filepath.Join(tmp, "work"), Log: &log},
		Results:    filepath.Join(tmp, "results"),
		Name:       "smoke",
		Runs:       2,
		NativeRuns: 1,
		Budget:     "10%",
		Period:     "100ms",
		Policies:   []string{"exact", "hash"},
		// The exact + --skip-covered series too, when the rewriter has it.
		SkipCovered: true,
		Cov:         filepath.Join(tmp, "no-cov"),
		Workloads: []Workload{
			&GzipWorkload{MB: 1},
			&SQLiteWorkload{Script: "workloads/sqlite.sql", Rows: 500},
			&RedisWorkload{Requests: 500, Tests: "set,get", Clients: 4},
		},
	}
	var md bytes.Buffer
	if err := d.Run(context.Background(), &md); err != nil {
		t.Fatalf("%v\nlog:\n%s", err, log.String())
	}
	b, err := os.ReadFile(filepath.Join(d.Results, "smoke.json"))
	if err != nil {
		t.Fatal(err)
	}
	var rep DIMEReport
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}
	if len(rep.Workloads) != 3 {
		t.Fatalf("have %d workloads, want 3; notes %v", len(rep.Workloads), rep.Notes)
	}
	budget := d.caps(context.Background()).budget
	for _, w := range rep.Workloads {
		if !strings.Contains(md.String(), w.Title) {
			t.Errorf("%s: not in the Markdown", w.Title)
		}
		// One native run first, then one before every traced run.
		wantNative := 1 + 1
		if budget {
			wantNative += 2 * (1 + len(d.Policies))
		}
		if len(w.Native) < wantNative || w.NativeMedian <= 0 {
			t.Errorf("%s: %d native runs (median %v), want at least %d", w.Key, len(w.Native), w.NativeMedian, wantNative)
		}
		if w.FullEvents == 0 {
			t.Errorf("%s: the full run recorded no events", w.Key)
		}
		if w.Variants[0].Name != "full" || w.Variants[0].Runs[0].Coverage != 1 || w.Variants[0].Runs[0].Slowdown <= 0 {
			t.Errorf("%s: full run: %+v", w.Key, w.Variants[0].Runs)
		}
		if !budget {
			continue
		}
		if len(w.Variants) < 2+len(d.Policies) {
			t.Errorf("%s: %d series, want full, dime and one per policy", w.Key, len(w.Variants))
		}
		for _, v := range w.Variants[1:] {
			if len(v.Runs) != d.Runs {
				t.Errorf("%s/%s: %d runs, want %d", w.Key, v.Name, len(v.Runs), d.Runs)
			}
			prev := 0.0
			for _, r := range v.Runs {
				if r.Cumulative < prev || r.Cumulative > 1 || r.Coverage > r.Cumulative+1e-9 || r.Slowdown <= 0 {
					t.Errorf("%s/%s run %d: coverage %v, cumulative %v (before %v), slowdown %v", w.Key, v.Name, r.Run, r.Coverage, r.Cumulative, prev, r.Slowdown)
				}
				// the paired slowdown is against a native run of this workload
				want := r.Merit / r.NativeBefore
				if w.Unit == "req/s" {
					want = r.NativeBefore / r.Merit
				}
				if !slices.Contains(w.Native, r.NativeBefore) || r.SlowdownPaired != want {
					t.Errorf("%s/%s run %d: paired slowdown %v against %v, natives %v", w.Key, v.Name, r.Run, r.SlowdownPaired, r.NativeBefore, w.Native)
				}
				prev = r.Cumulative
			}
		}
		for _, f := range []string{"coverage", "slowdown", "fpfn"} {
			p := filepath.Join(d.Results, "smoke-"+w.Key+"-"+f+".svg")
			if b, err := os.ReadFile(p); err != nil || !bytes.Contains(b, []byte("<svg")) {
				t.Errorf("plot %s: %v", p, err)
			}
		}
	}
	if !budget && !strings.Contains(md.String(), "no --budget") {
		t.Error("the Markdown does not say the budgeted series were left out")
	}
	if !strings.Contains(md.String(), "cov compare is not available") {
		t.Error("the Markdown does not say cov compare was missing")
	}
}

// TestDIMEPlan: the retire series comes with three runs or more (runs 1
// and 2 are the skip-covered series' own) and with a rewriter that has
// --retire-since.
func TestDIMEPlan(t *testing.T) {
	names := func(d *DIME, c rewriterCaps) []string {
		var out []string
		for _, s := range d.plan(c) {
			out = append(out, s.name)
		}
		return out
	}
	all := rewriterCaps{budget: true, skipCovered: true, retire: true}
	d := &DIME{Runs: 3, Policies: []string{"exact"}, SkipCovered: true, Retire: true}
	if got := names(d, all); !slices.Equal(got, []string{"full", "dime", "exact", "exact+skip-covered", "exact+retire"}) {
		t.Errorf("3 runs: series %v", got)
	}
	for _, s := range d.plan(all) {
		if s.name == "exact+retire" && (!s.skip || !s.retire || s.policy != "exact") {
			t.Errorf("retire series: %+v", s)
		}
	}
	d.Runs = 2
	if got := names(d, all); slices.Contains(got, "exact+retire") {
		t.Errorf("2 runs: series %v", got)
	}
	d.Runs = 8
	if got := names(d, rewriterCaps{budget: true, skipCovered: true}); slices.Contains(got, "exact+retire") {
		t.Errorf("a rewriter without --retire-since: series %v", got)
	}
}

// buildRewrite builds cmd/rewrite into dir and returns its path.
func buildRewrite(t *testing.T, dir string) string {
	t.Helper()
	rw := filepath.Join(dir, "rewrite")
	if out, err := exec.Command("go", "build", "-o", rw, "../cmd/rewrite").CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/rewrite: %v\n%s", err, out)
	}
	return rw
}

// TestPooledFP: runs 2.. weighed by the events they recorded; run 1
// (which has nothing before it) is left out.
func TestPooledFP(t *testing.T) {
	run := func(fp float64, n int) RunDIME {
		return RunDIME{RunMetrics: RunMetrics{FalsePositive: fp, Events: n}}
	}
	runs := []RunDIME{run(0.5, 1000), run(0.01, 100), run(1, 1)}
	if got, want := pooledFP(runs), 2.0/101; got < want-1e-12 || got > want+1e-12 {
		t.Errorf("pooled FP %v, want %v", got, want)
	}
	if got := pooledFP(runs[:1]); got != 0 {
		t.Errorf("one run: pooled FP %v", got)
	}
	if got := pooledFP(nil); got != 0 {
		t.Errorf("no runs: pooled FP %v", got)
	}
}
