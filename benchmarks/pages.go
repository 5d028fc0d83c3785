package benchmarks

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
)

// pages measures what first touches of scattered pages cost the sqlite3
// workload on this machine: the workload natively, and with
// workloads/touch_pages.c preloaded, which touches 1,300 pages (about
// what a sqlite3 run's stubs touch) over 700 MiB (about their span), the
// same over 8 MiB, and 5,000 over 700 MiB. The pages are touched before
// the workload starts and never again, so whatever the ratios show beyond
// the touches' own cost is what the touches leave behind.
func (s *Suite) pages(ctx context.Context, rep *Report) error {
	cfg := s.Config
	src, err := filepath.Abs("benchmarks/workloads/touch_pages.c")
	if err != nil {
		return err
	}
	sql, err := filepath.Abs("benchmarks/workloads/sqlite.sql")
	if err != nil {
		return err
	}
	so := filepath.Join(cfg.WorkDir, "touch_pages.so")
	if out, err := exec.CommandContext(ctx, "gcc", "-O2", "-shared", "-fPIC", "-o", so, src).CombinedOutput(); err != nil {
		return fmt.Errorf("gcc %s: %w: %s", src, err, lastLine(string(out)))
	}
	// Each variant touches pages pages spread over spanMB MiB.
	touches := []struct {
		name          string
		pages, spanMB int
	}{
		{"1,300 pages over 700 MiB", 1300, 700},
		{"1,300 pages over 8 MiB", 1300, 8},
		{"5,000 pages over 700 MiB", 5000, 700},
	}
	vs := []variant{{"native", Cmd{Argv: []string{"sqlite3", ":memory:"}, Stdin: sql, Pin: true}, cfg.Runs}}
	reports := make([]string, len(touches))
	for i, tc := range touches {
		reports[i] = filepath.Join(cfg.WorkDir, fmt.Sprintf("touch-%d-%d.ns", tc.pages, tc.spanMB))
		os.Remove(reports[i])
		env := []string{"LD_PRELOAD=" + so, fmt.Sprintf("STINT_TOUCH_PAGES=%d", tc.pages),
			fmt.Sprintf("STINT_TOUCH_SPAN_MB=%d", tc.spanMB), "STINT_TOUCH_REPORT=" + reports[i]}
		vs = append(vs, variant{tc.name, Cmd{Argv: []string{"sqlite3", ":memory:"}, Stdin: sql, Env: env, Pin: true}, cfg.Runs})
	}
	fmt.Fprintf(cfg.Log, "sqlite3 workload: native, and after touching scattered pages\n")
	t, err := s.timeVariants(ctx, vs)
	if err != nil {
		return err
	}
	// What the touches took while they ran, beside what the run lost.
	if len(t) != len(vs) {
		return fmt.Errorf("pages: %d timings for %d variants (--runs 0?)", len(t), len(vs))
	}
	native := t[0].Median
	for i, tc := range touches {
		ns, err := readNanos(reports[i])
		if err != nil {
			return fmt.Errorf("%s: %w", tc.name, err)
		}
		own := Median(ns) / 1e9
		t[i+1].Note = fmt.Sprintf("touches took %.1f ms (%.1f us a touch); the run lost %.1f ms",
			own*1e3, own*1e6/float64(tc.pages), (t[i+1].Median-native)*1e3)
	}
	rep.Slowdown["sqlite3 workload after first touches of scattered pages (benchmarks/workloads/touch_pages.c)"] = t
	rep.Notes["pages"] = "touch_pages.so reads one byte of each page before main (each maps the zero page); " +
		"the workload itself is unchanged, so a ratio above 1 is what the touches cost, during and after"
	return nil
}

// readNanos reads one integer per line.
func readNanos(path string) ([]float64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var xs []float64
	for _, l := range strings.Fields(string(b)) {
		v, err := strconv.ParseFloat(l, 64)
		if err != nil {
			return nil, fmt.Errorf("%s: %q: %w", path, l, err)
		}
		xs = append(xs, v)
	}
	if len(xs) == 0 {
		return nil, fmt.Errorf("%s: no runs reported", path)
	}
	return xs, nil
}
