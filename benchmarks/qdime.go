package benchmarks

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"

	"github.com/stint-project/stint/formats"
	"github.com/stint-project/stint/qos"
)

// QDIME is issue 4's experiment, the QDIME paper's Table I on this
// machine: each application runs natively, fully traced, and under the
// QoS analyzer (`qos run`) with a threshold relative to its native
// metric, for each tool (syscall, call, branch), with an exact
// redundancy log across runs. Per run it reports the slowdown against
// native and against the full run, the cumulative coverage of the full
// run's distinct events, and how many periods fell under the threshold
// (after the first two periods of the load, as the paper counts); and it
// draws, per application and tool, the metric and the budget over time
// (the paper's Figures 1 and 3-6).
type QDIME struct {
	Config     Config
	Results    string // directory for the results
	Name       string // base name of the result files (default "issue4")
	Qos        string // the qos command
	Cov        string // the cov command (cov compare --json)
	Apps       []QoSApp
	Tools      []string // rewrite --tool values
	Runs       int      // QDIME runs per tool (the paper needed up to 3)
	NativeRuns int
	// Controls are native runs under the analyzer after each tool's
	// QDIME runs: the machine's noise at the same time as those runs,
	// where the first native runs may have met a faster or slower VM.
	Controls int
	Period   string // qos --period
	Default  string // qos --default-budget
	Command  string // the command line that reproduces the run
	// Libs are rewritten with the application and put first on
	// LD_LIBRARY_PATH (the paper's Pin traced all code; the syscalls of
	// these programs are in libc).
	Libs []string
}

// QoSApp is one application of the experiment.
type QoSApp struct {
	Workload QoSWorkload
	// Threshold as a fraction of the native metric (the paper's Table II
	// relative to the native rates it reports).
	Threshold float64
	Why       string // where the fraction comes from
}

// QoSWorkload is a Workload that can run under the QoS analyzer.
type QoSWorkload interface {
	Workload
	SetWrap(QoSWrap)
	LoadWindow() Window
}

func (g *GzipWorkload) SetWrap(w QoSWrap)  { g.Wrap = w }
func (g *GzipWorkload) LoadWindow() Window { return g.Load }
func (r *RedisWorkload) SetWrap(w QoSWrap) { r.Wrap = w }
func (r *RedisWorkload) LoadWindow() Window {
	return r.Load
}
func (n *NginxWorkload) SetWrap(w QoSWrap)  { n.Wrap = w }
func (n *NginxWorkload) LoadWindow() Window { return n.Load }

// QDIMEReport is what the experiment writes as JSON.
type QDIMEReport struct {
	Date    string       `json:"date"`
	Host    string       `json:"host"`
	Period  string       `json:"period"`
	Default string       `json:"default_budget"`
	Runs    int          `json:"runs"`
	Command string       `json:"command,omitempty"`
	Apps    []*AppQDIME  `json:"apps"`
	Notes   []string     `json:"notes,omitempty"`
	Plots   []string     `json:"plots,omitempty"`
	fig     []*toolQDIME // for the plots
}

// AppQDIME is one application's results.
type AppQDIME struct {
	Key          string    `json:"key"`
	Title        string    `json:"title"`
	Unit         string    `json:"unit"`       // figure of merit
	MetricSource string    `json:"metric"`     // qos --metric kind
	NativeMerit  []float64 `json:"native"`     // figure of merit per native run
	NativeMetric float64   `json:"native_qos"` // median of the native runs' samples under load
	Threshold    float64   `json:"threshold"`
	ThresholdRel float64   `json:"threshold_of_native"`
	Why          string    `json:"threshold_why,omitempty"`
	// NativeUnder and NativePeriods: the native runs' own periods under
	// the threshold (after the first two of the load): the noise floor of
	// "under T" on this machine.
	NativeUnder   int          `json:"native_under_threshold"`
	NativePeriods int          `json:"native_periods"`
	Tools         []*toolQDIME `json:"tools"`
	nativeSeries  []qos.SampleRow
	nativeLoad    Window
	nativeRuns    [][]qos.SampleRow
	nativeLoads   []Window
}

// toolQDIME is one tool's series of an application.
type toolQDIME struct {
	Tool         string     `json:"tool"`
	FullMerit    float64    `json:"full"`
	FullSlowdown float64    `json:"full_slowdown"`
	Runs         []RunQDIME `json:"runs"`
	RunsNeeded   int        `json:"runs_needed"` // first run with cumulative coverage >= 95% (0: none)
	// ControlUnder of ControlPeriods: the native control runs' periods
	// under load, after the first two, under the threshold.
	ControlUnder   int       `json:"native_control_under_threshold"`
	ControlPeriods int       `json:"native_control_periods"`
	ControlMerit   []float64 `json:"native_control"`
	app            *AppQDIME
	samples        [][]qos.SampleRow // per run
	periods        [][]formats.Period
	loads          []Window
}

// RunQDIME is one traced run under the analyzer.
type RunQDIME struct {
	Run            int     `json:"run"`
	Merit          float64 `json:"merit"`
	Slowdown       float64 `json:"slowdown"`         // vs native
	VsFull         float64 `json:"speedup_vs_full"`  // full run's slowdown / this one's
	Coverage       float64 `json:"coverage"`         // this run alone
	Cumulative     float64 `json:"cumulative"`       // runs 1..this
	Periods        int     `json:"periods"`          // analyzer periods under load, after the first two
	Under          int     `json:"under_threshold"`  // of those, with the metric under the threshold
	MeanMetric     float64 `json:"mean_metric"`      // mean of the analyzer's values under load
	BudgetPeriods  int     `json:"budget_periods"`   // the runtime's periods
	ZeroBudget     int     `json:"zero_budget"`      // periods the controller gave no budget
	MeanGrantedPct float64 `json:"mean_granted_pct"` // of the period
	MeanUsedPct    float64 `json:"mean_used_pct"`
}

// Run runs the experiment and writes <Results>/<Name>.{json,md} and the
// figures, after each application; the Markdown goes to stdout.
func (q *QDIME) Run(ctx context.Context, stdout io.Writer) error {
	if q.Name == "" {
		q.Name = "issue4"
	}
	if q.Runs < 1 || q.NativeRuns < 1 {
		return fmt.Errorf("qdime: need at least one run and one native run")
	}
	if _, err := exec.LookPath(q.Qos); err != nil {
		return fmt.Errorf("qdime: the qos command %q: %w (go build -o bin/ ./cmd/...)", q.Qos, err)
	}
	rep := &QDIMEReport{Date: time.Now().UTC().Format(time.RFC3339), Host: hostDesc(),
		Period: q.Period, Default: q.Default, Runs: q.Runs, Command: q.Command}
	for _, app := range q.Apps {
		w := app.Workload
		fmt.Fprintf(q.Config.Log, "== %s\n", w.Title())
		a, err := q.app(ctx, app)
		if errors.Is(err, ErrNoRedis) || errors.Is(err, ErrNoNginx) {
			rep.Notes = append(rep.Notes, fmt.Sprintf("%s left out: %v", w.Key(), err))
			continue
		}
		if err != nil {
			return fmt.Errorf("%s: %w", w.Key(), err)
		}
		rep.Apps = append(rep.Apps, a)
		rep.fig = append(rep.fig, a.Tools...)
		if err := q.write(rep, io.Discard); err != nil {
			return err
		}
	}
	return q.write(rep, stdout)
}

func (q *QDIME) periodDur() time.Duration {
	d, err := time.ParseDuration(q.Period)
	if err != nil || d <= 0 {
		return time.Second
	}
	return d
}

// wrap returns the analyzer wrapper for one run.
func (q *QDIME) wrap(threshold float64, samples, log string) QoSWrap {
	return func(argv []string, metric string) []string {
		a := []string{q.Qos, "run", "--metric", metric, "--threshold", strconv.FormatFloat(threshold, 'g', -1, 64),
			"--period", q.Period, "--default-budget", q.Default, "--samples", samples}
		if log != "" {
			a = append(a, "--log", log)
		}
		return append(append(a, "--"), argv...)
	}
}

func (q *QDIME) app(ctx context.Context, app QoSApp) (*AppQDIME, error) {
	w := app.Workload
	base := filepath.Join(q.Config.WorkDir, "qdime", w.Key())
	if err := freshDir(base); err != nil {
		return nil, err
	}
	if err := w.Prepare(ctx, q.Config.WorkDir); err != nil {
		return nil, err
	}
	a := &AppQDIME{Key: w.Key(), Title: w.Title(), Unit: w.Unit(), ThresholdRel: app.Threshold, Why: app.Why}
	// Native, under the analyzer (any threshold: the program has no
	// runtime to read it), for the native metric.
	var natives []float64
	for i := 0; i < q.NativeRuns; i++ {
		samples := filepath.Join(base, fmt.Sprintf("native-%d.csv", i))
		w.SetWrap(q.wrap(1, samples, ""))
		m, err := w.Run(ctx, "", nil)
		if err != nil {
			return nil, fmt.Errorf("native run: %w", err)
		}
		a.NativeMerit = append(a.NativeMerit, m)
		rows, err := readSamples(samples)
		if err != nil {
			return nil, err
		}
		vals := underLoad(rows, w.LoadWindow(), q.periodDur(), 0)
		natives = append(natives, vals...)
		a.nativeSeries, a.nativeLoad = rows, w.LoadWindow()
		a.nativeRuns, a.nativeLoads = append(a.nativeRuns, rows), append(a.nativeLoads, w.LoadWindow())
		fmt.Fprintf(q.Config.Log, "native %d: %.4g %s, metric median %.4g\n", i+1, m, w.Unit(), Median(vals))
	}
	a.NativeMetric = Median(natives)
	if a.NativeMetric <= 0 {
		return nil, fmt.Errorf("the native runs gave no metric under load (samples: %s)", base)
	}
	a.Threshold = app.Threshold * a.NativeMetric
	for i, rows := range a.nativeRuns {
		vals := underLoad(rows, a.nativeLoads[i], q.periodDur(), 2)
		a.NativePeriods += len(vals)
		a.NativeUnder += countUnder(vals, a.Threshold)
	}
	nativeMerit := Median(a.NativeMerit)
	for _, tool := range q.Tools {
		t := &toolQDIME{Tool: tool, app: a}
		dir := filepath.Join(base, tool)
		full := w.OutPath(mkdir(dir, "bin-full"))
		if err := q.rewriteAll(ctx, w.Target(), full, tool); err != nil {
			return nil, err
		}
		fullTraces := mkdir(dir, "traces-full")
		w.SetWrap(nil)
		m, err := w.Run(ctx, full, []string{"STINT_OUT=" + fullTraces, "LD_LIBRARY_PATH=" + filepath.Dir(full)})
		if err != nil {
			return nil, fmt.Errorf("%s full run: %w", tool, err)
		}
		t.FullMerit, t.FullSlowdown = m, Slowdown(w, nativeMerit, m)
		fmt.Fprintf(q.Config.Log, "%s full: %.4g %s (%.2fx)\n", tool, m, w.Unit(), t.FullSlowdown)
		qb := w.OutPath(mkdir(dir, "bin-qdime"))
		if err := q.rewriteAll(ctx, w.Target(), qb, tool); err != nil {
			return nil, err
		}
		log := filepath.Join(dir, "redundancy.log")
		var files []string
		for r := 1; r <= q.Runs; r++ {
			traces := mkdir(dir, fmt.Sprintf("traces-%d", r))
			samples := filepath.Join(dir, fmt.Sprintf("samples-%d.csv", r))
			w.SetWrap(q.wrap(a.Threshold, samples, log))
			m, err := w.Run(ctx, qb, []string{"STINT_OUT=" + traces, "LD_LIBRARY_PATH=" + filepath.Dir(qb)})
			if err != nil {
				return nil, fmt.Errorf("%s run %d: %w", tool, r, err)
			}
			rows, err := readSamples(samples)
			if err != nil {
				return nil, err
			}
			load := w.LoadWindow()
			vals := underLoad(rows, load, q.periodDur(), 2)
			run := RunQDIME{Run: r, Merit: m, Slowdown: Slowdown(w, nativeMerit, m), Periods: len(vals)}
			if run.Slowdown > 0 {
				run.VsFull = t.FullSlowdown / run.Slowdown
			}
			run.Under = countUnder(vals, a.Threshold)
			var sum float64
			for _, v := range vals {
				sum += v
			}
			if len(vals) > 0 {
				run.MeanMetric = sum / float64(len(vals))
			}
			f, err := appTraces(traces, qb)
			if err != nil || len(f) != 1 {
				return nil, fmt.Errorf("%s run %d left %d trace files in %s", tool, r, len(f), traces)
			}
			files = append(files, f[0])
			tr, err := formats.ReadFile(f[0])
			if err != nil {
				return nil, err
			}
			ps := formats.Periods(tr.Events)
			run.BudgetPeriods = len(ps)
			var g, u float64
			for _, p := range ps {
				if p.Granted == 0 {
					run.ZeroBudget++
				}
				g += float64(p.Granted)
				u += float64(p.Used)
			}
			if len(ps) > 0 {
				per := float64(q.periodDur())
				run.MeanGrantedPct = 100 * g / float64(len(ps)) / per
				run.MeanUsedPct = 100 * u / float64(len(ps)) / per
			}
			t.samples = append(t.samples, rows)
			t.periods = append(t.periods, ps)
			t.loads = append(t.loads, load)
			t.Runs = append(t.Runs, run)
			fmt.Fprintf(q.Config.Log, "%s run %d: %.4g %s (%.2fx), %d/%d periods under %.4g\n", tool, r, m, w.Unit(),
				run.Slowdown, run.Under, run.Periods, a.Threshold)
		}
		for i := 0; i < q.Controls; i++ {
			samples := filepath.Join(dir, fmt.Sprintf("control-%d.csv", i))
			w.SetWrap(q.wrap(a.Threshold, samples, ""))
			m, err := w.Run(ctx, "", nil)
			if err != nil {
				return nil, fmt.Errorf("%s native control run: %w", tool, err)
			}
			rows, err := readSamples(samples)
			if err != nil {
				return nil, err
			}
			vals := underLoad(rows, w.LoadWindow(), q.periodDur(), 2)
			under := countUnder(vals, a.Threshold)
			t.ControlMerit = append(t.ControlMerit, m)
			t.ControlUnder += under
			t.ControlPeriods += len(vals)
			fmt.Fprintf(q.Config.Log, "%s native control %d: %.4g %s, %d/%d periods under %.4g\n", tool, i+1, m, w.Unit(), under, len(vals), a.Threshold)
		}
		fullFiles, err := appTraces(fullTraces, full)
		if err != nil || len(fullFiles) != 1 {
			return nil, fmt.Errorf("%s full run left %d trace files", tool, len(fullFiles))
		}
		if err := q.coverage(ctx, t, files, fullFiles[0]); err != nil {
			return nil, fmt.Errorf("%s: cov compare: %w", tool, err)
		}
		a.Tools = append(a.Tools, t)
	}
	a.MetricSource = metricKind(w)
	return a, nil
}

// countUnder counts the values under threshold t.
func countUnder(vals []float64, t float64) int {
	n := 0
	for _, v := range vals {
		if v < t {
			n++
		}
	}
	return n
}

// rewriteAll rewrites the application's target to out and q.Libs beside
// it, with --tool tool.
func (q *QDIME) rewriteAll(ctx context.Context, target, out, tool string) error {
	d := &DIME{Config: q.Config}
	if _, err := d.rewrite(ctx, target, out, "--tool", tool); err != nil {
		return err
	}
	for _, l := range q.Libs {
		if _, err := d.rewrite(ctx, l, filepath.Join(filepath.Dir(out), filepath.Base(l)), "--tool", tool); err != nil {
			return err
		}
	}
	return nil
}

// appTraces returns the application's trace files in dir: with a
// rewritten libc on LD_LIBRARY_PATH, a dynamically linked qos leaves a
// trace there too.
func appTraces(dir, rewritten string) ([]string, error) {
	return filepath.Glob(filepath.Join(dir, filepath.Base(rewritten)+".*.arrow"))
}

func metricKind(w Workload) string {
	switch w.(type) {
	case *GzipWorkload:
		return "file-rate (output bytes/s)"
	case *RedisWorkload:
		return "redis INFO (commands/s)"
	case *NginxWorkload:
		return "log-rate (access log lines/s)"
	}
	return ""
}

func readSamples(path string) ([]qos.SampleRow, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return qos.ReadSamples(f)
}

// underLoad returns the values of the samples whose whole period lies in
// the load window, skipping the first skip of them (the paper counts
// violations after the first periods, while the controller has no
// sample yet).
func underLoad(rows []qos.SampleRow, load Window, period time.Duration, skip int) []float64 {
	var out []float64
	n := 0
	for _, r := range rows {
		end := uint64(r.Mono)
		if !r.HasValue || end < load.Start+uint64(period) || end > load.End {
			continue
		}
		if n++; n <= skip {
			continue
		}
		out = append(out, r.Value)
	}
	return out
}

// coverage fills the runs' coverage from cov compare --json.
func (q *QDIME) coverage(ctx context.Context, t *toolQDIME, files []string, full string) error {
	co, err := runCovCompare(ctx, q.Cov, files, full)
	if err != nil {
		return err
	}
	if len(co.Runs) != len(t.Runs) {
		return fmt.Errorf("%d runs in its output, want %d", len(co.Runs), len(t.Runs))
	}
	for i, r := range co.Runs {
		if r.Coverage != nil {
			t.Runs[i].Coverage = *r.Coverage
		}
		if r.CumulativeCoverage != nil {
			t.Runs[i].Cumulative = *r.CumulativeCoverage
		}
		if t.RunsNeeded == 0 && t.Runs[i].Cumulative >= 0.95 {
			t.RunsNeeded = i + 1
		}
	}
	return nil
}

func (q *QDIME) write(rep *QDIMEReport, stdout io.Writer) error {
	if err := os.MkdirAll(q.Results, 0o755); err != nil {
		return err
	}
	plots, err := QDIMEPlots(rep, q.Results, q.Name, q.periodDur())
	if err != nil {
		return err
	}
	rep.Plots = plots
	b, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(q.Results, q.Name+".json"), append(b, '\n'), 0o644); err != nil {
		return err
	}
	md := QDIMEMarkdown(rep)
	if err := os.WriteFile(filepath.Join(q.Results, q.Name+".md"), []byte(md), 0o644); err != nil {
		return err
	}
	_, err = io.WriteString(stdout, md)
	return err
}
