package benchmarks

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// DIME is the experiment of issue 3, after the DIME* paper's section 4
// (Figures 2-4 and 6-7) on this machine: for each workload, native
// runs; one full run (rewritten, no budget: the reference for coverage);
// DIME (budget, no log) and DIME* (budget and a redundancy log, one
// fresh log per policy, runs in sequence so the log accumulates) for
// Runs runs each; the exact policy with --skip-covered, the binary
// rewritten from the current log before each run after the first; and
// with 3 runs or more that series again with --retire-since from run 3.
//
// The series run interleaved: run 1 of each, then run 2 of each, and so
// on. Every traced run is preceded by a native run, so native is
// measured throughout the experiment; slowdowns are against the median
// of all native runs of the workload, and paired ones against the
// native run just before.
//
// The budgeted variants need `rewrite --budget`; when the rewriter does
// not offer it yet, only native and full run and the report says so.
type DIME struct {
	Config     Config
	Results    string     // directory for the results
	Name       string     // base name of the result files (default "issue3")
	Workloads  []Workload // in order
	Runs       int        // runs per budgeted variant (the paper: 8)
	NativeRuns int        // native runs before the series (at least 1)
	Budget     string     // rewrite --budget value, e.g. "10%"
	Period     string     // rewrite --period value, e.g. "100ms"
	Policies   []string   // log policies (exact, hash, bst, merger)
	Edges      string     // rewrite --edges for the budgeted series ("" = the rewriter's default)
	// SkipCovered adds the exact + --skip-covered series.
	SkipCovered bool
	// Retire adds, with 3 runs or more, the exact + --skip-covered series
	// whose runs from the third on also retire (rewrite --retire-since)
	// the sites the run before showed nothing new at.
	Retire bool
	// NoSwitch adds the exact series run with STINT_SWITCH=0 (every
	// patch stays in place while the budget is spent), to show what the
	// off-switch saves.
	NoSwitch bool
	// Cov is the cov command; when it runs `cov compare --json`, its
	// numbers replace the in-process ones (see [CompareRuns]).
	Cov string
	// Command is the command line that reproduces the run (for the
	// report).
	Command string
}

// DIMEReport is what the experiment writes as JSON.
type DIMEReport struct {
	Date      string          `json:"date"`
	Host      string          `json:"host"`
	Budget    string          `json:"budget"`
	Period    string          `json:"period"`
	Runs      int             `json:"runs"`
	Command   string          `json:"command,omitempty"`
	Workloads []*WorkloadDIME `json:"workloads"`
	Notes     []string        `json:"notes,omitempty"`
}

// WorkloadDIME is one workload's results.
type WorkloadDIME struct {
	Key          string         `json:"key"`
	Title        string         `json:"title"`
	Unit         string         `json:"unit"` // of the figures of merit: "s" or "req/s"
	Native       []float64      `json:"native"`
	NativeMedian float64        `json:"native_median"`
	FullEvents   int            `json:"full_distinct_events"`
	Variants     []*VariantDIME `json:"variants"`
	Notes        []string       `json:"notes,omitempty"`
}

// VariantDIME is one series of runs.
type VariantDIME struct {
	Name     string    `json:"name"` // full, dime, exact, hash, bst, merger, exact+skip-covered
	Policy   string    `json:"log_policy,omitempty"`
	Metrics  string    `json:"metrics_from"` // "cov compare" or "traces (in-process)"
	Runs     []RunDIME `json:"runs"`
	Slowdown float64   `json:"slowdown_geomean"`
	// SlowdownPaired is the geometric mean of the runs' SlowdownPaired.
	SlowdownPaired float64 `json:"slowdown_paired_geomean"`
	// Overshoot is the distribution over every period of every run.
	Overshoot Dist `json:"overshoot"`
}

// RunDIME is one run of a series.
type RunDIME struct {
	Run      int     `json:"run"`
	Merit    float64 `json:"merit"` // seconds or requests/s
	Slowdown float64 `json:"slowdown"`
	// NativeBefore is the native run just before this one, and
	// SlowdownPaired the slowdown against it: a machine whose speed
	// changes between minutes (this VM has two speed states) moves both
	// runs of a pair alike, and the median of all natives not.
	NativeBefore   float64 `json:"native_before"`
	SlowdownPaired float64 `json:"slowdown_paired"`
	RunMetrics
	OvershootP99Cov *float64 `json:"overshoot_p99_us_cov,omitempty"` // cov compare's figure, when it ran
	// LogFalseNegative is the false-negative ratio of an exact log
	// measured on the log itself (see [LogFalseNegatives]), with the
	// number of the full run's events the log rejected.
	LogFalseNegative *float64 `json:"log_false_negative_ratio,omitempty"`
	LogRejected      int      `json:"log_rejected,omitempty"`
	Overshoot        Dist     `json:"overshoot"`
	Periods          int      `json:"periods"`
	Recorded         uint64   `json:"recorded"`   // events recorded, summed over periods
	Suppressed       uint64   `json:"suppressed"` // probe calls that recorded nothing, summed over periods
	RunTimeMS        float64  `json:"run_time_ms,omitempty"`
	Patched          *int     `json:"patched_sites,omitempty"` // --skip-covered: sites the rewrite patched
	Traces           []string `json:"traces"`
	Warnings         []string `json:"warnings,omitempty"`
}

// rewriterCaps says which issue-3 options the rewriter offers.
type rewriterCaps struct{ budget, skipCovered, retire bool }

func (d *DIME) caps(ctx context.Context) rewriterCaps {
	out, _ := exec.CommandContext(ctx, d.Config.Rewrite, "--help").CombinedOutput()
	h := string(out)
	return rewriterCaps{budget: strings.Contains(h, "--budget"), skipCovered: strings.Contains(h, "--skip-covered"), retire: strings.Contains(h, "--retire-since")}
}

// Run runs the experiment and writes <Results>/<Name>.{json,md} and the
// plots, after each workload so an interrupted run keeps what it
// measured; the Markdown goes to stdout at the end.
func (d *DIME) Run(ctx context.Context, stdout io.Writer) error {
	if d.Name == "" {
		d.Name = "issue3"
	}
	if d.Runs < 1 || d.NativeRuns < 1 {
		return fmt.Errorf("dime: need at least one run and one native run (have %d, %d)", d.Runs, d.NativeRuns)
	}
	if err := os.MkdirAll(d.Config.WorkDir, 0o755); err != nil {
		return err
	}
	rep := &DIMEReport{Date: time.Now().UTC().Format(time.RFC3339), Host: hostDesc(),
		Budget: d.Budget, Period: d.Period, Runs: d.Runs, Command: d.Command}
	c := d.caps(ctx)
	if !c.budget {
		rep.Notes = append(rep.Notes, "the rewriter has no --budget yet: only native and the full run were measured")
	} else if d.SkipCovered && !c.skipCovered {
		rep.Notes = append(rep.Notes, "the rewriter has no --skip-covered yet: that series was left out")
	}
	if d.Cov != "" && !d.covWorks(ctx) {
		rep.Notes = append(rep.Notes, "cov compare is not available: coverage, FP and FN computed from the traces in-process")
		d.Cov = ""
	}
	for _, w := range d.Workloads {
		fmt.Fprintf(d.Config.Log, "== %s\n", w.Title())
		wr, err := d.workload(ctx, w, c)
		if errors.Is(err, ErrNoRedis) {
			rep.Notes = append(rep.Notes, fmt.Sprintf("%s left out: %v", w.Key(), err))
			continue
		}
		if err != nil {
			return fmt.Errorf("%s: %w", w.Key(), err)
		}
		rep.Workloads = append(rep.Workloads, wr)
		if err := d.write(rep, io.Discard); err != nil {
			return err
		}
	}
	return d.write(rep, stdout)
}

// series is one variant to run: how to rewrite and what to set.
type series struct {
	name   string
	policy string
	runs   int
	skip   bool     // rewrite with --skip-covered from the log before runs 2..
	retire bool     // and --retire-since the log before the previous run, from run 3 on
	env    []string // more environment for the traced runs
}

func (d *DIME) plan(c rewriterCaps) []series {
	ss := []series{{name: "full", runs: 1}}
	if !c.budget {
		return ss
	}
	ss = append(ss, series{name: "dime", runs: d.Runs})
	for _, p := range d.Policies {
		ss = append(ss, series{name: p, policy: p, runs: d.Runs})
	}
	if d.SkipCovered && c.skipCovered {
		ss = append(ss, series{name: "exact+skip-covered", policy: "exact", runs: d.Runs, skip: true})
	}
	if d.Retire && c.retire && d.Runs >= 3 {
		ss = append(ss, series{name: "exact+retire", policy: "exact", runs: d.Runs, skip: true, retire: true})
	}
	if d.NoSwitch {
		ss = append(ss, series{name: "exact+no-switch", policy: "exact", runs: d.Runs, env: []string{"STINT_SWITCH=0"}})
	}
	return ss
}

// dimeWorkload is one workload's series in progress.
type dimeWorkload struct {
	d          *DIME
	w          Workload
	base       string
	budgetArgs []string
	full       string // the full (every event once, no budget) rewrite
	budgeted   string // the budgeted rewrite ("" if the rewriter has no budget)
	in         *Interner
	wr         *WorkloadDIME
	fullSet    EventSet
	fullTrace  string
}

// dimeSeries is one series' state across its runs.
type dimeSeries struct {
	s         series
	v         *VariantDIME
	logFile   string
	sets      []EventSet
	files     [][]string
	all       []uint64 // overshoots of every period of the series
	snapshots []string // the log before each run ("" = none)
}

func (d *DIME) workload(ctx context.Context, w Workload, c rewriterCaps) (*WorkloadDIME, error) {
	x := &dimeWorkload{d: d, w: w, base: filepath.Join(d.Config.WorkDir, "dime", w.Key()), in: &Interner{},
		budgetArgs: []string{"--budget", d.Budget, "--period", d.Period},
		wr:         &WorkloadDIME{Key: w.Key(), Title: w.Title(), Unit: w.Unit()}}
	if err := freshDir(x.base); err != nil {
		return nil, err
	}
	if err := w.Prepare(ctx, d.Config.WorkDir); err != nil {
		return nil, err
	}
	if d.Edges != "" {
		x.budgetArgs = append(x.budgetArgs, "--edges", d.Edges)
	}
	x.full = w.OutPath(mkdir(x.base, "bin-full"))
	if _, err := d.rewrite(ctx, w.Target(), x.full); err != nil {
		return nil, err
	}
	if c.budget {
		x.budgeted = w.OutPath(mkdir(x.base, "bin-budget"))
		if _, err := d.rewrite(ctx, w.Target(), x.budgeted, x.budgetArgs...); err != nil {
			return nil, err
		}
	}
	for i := 0; i < d.NativeRuns; i++ {
		if err := x.native(ctx); err != nil {
			return nil, err
		}
	}
	// The series run interleaved, run by run (run 1 of every series,
	// then run 2 of every series, ...), each run after a native run of
	// its own: this VM's speed changes by up to 1.6x from one minute to
	// the next, and a series run whole after another met other minutes.
	var sts []*dimeSeries
	most := 0
	for _, s := range d.plan(c) {
		sts = append(sts, &dimeSeries{s: s, v: &VariantDIME{Name: s.name, Policy: s.policy, Metrics: "traces (in-process)"},
			logFile: filepath.Join(x.base, "log-"+strings.ReplaceAll(s.name, "+", "-")+".stlog")})
		most = max(most, s.runs)
	}
	for i := 1; i <= most; i++ {
		for _, st := range sts {
			if i > st.s.runs {
				continue
			}
			if err := x.native(ctx); err != nil {
				return nil, err
			}
			if err := x.run(ctx, st, i); err != nil {
				return nil, err
			}
		}
	}
	x.finish(ctx, sts)
	return x.wr, nil
}

// native times a native run.
func (x *dimeWorkload) native(ctx context.Context) error {
	v, err := x.w.Run(ctx, "", nil)
	if err != nil {
		return fmt.Errorf("native: %w", err)
	}
	x.wr.Native = append(x.wr.Native, v)
	fmt.Fprintf(x.d.Config.Log, "  native: %.3f %s\n", v, x.w.Unit())
	return nil
}

// binary returns the rewrite series st runs at its run i: the full or
// budgeted one, or a --skip-covered rewrite of its log (retiring since
// the log before the previous run, for a retiring series), with its
// patched sites.
func (x *dimeWorkload) binary(ctx context.Context, st *dimeSeries, i int) (string, *int, error) {
	s := st.s
	if s.name == "full" {
		return x.full, nil, nil
	}
	if !s.skip || i == 1 {
		return x.budgeted, nil, nil
	}
	bin := x.w.OutPath(mkdir(x.base, fmt.Sprintf("bin-%s-%d", strings.ReplaceAll(s.name, "+", "-"), i)))
	args := append(append([]string(nil), x.budgetArgs...), "--skip-covered", st.logFile)
	if s.retire && i > 2 && st.snapshots[i-2] != "" {
		args = append(args, "--retire-since", st.snapshots[i-2])
	}
	n, err := x.d.rewrite(ctx, x.w.Target(), bin, args...)
	return bin, n, err
}

// run times run i of series st, with a snapshot of its log before it.
func (x *dimeWorkload) run(ctx context.Context, st *dimeSeries, i int) error {
	s, v := st.s, st.v
	bin, patched, err := x.binary(ctx, st, i)
	if err != nil {
		return err
	}
	name := strings.ReplaceAll(s.name, "+", "-")
	dir := filepath.Join(x.base, "traces", name, fmt.Sprint(i))
	if err := freshDir(dir); err != nil {
		return err
	}
	env := []string{"STINT_OUT=" + dir}
	snapshot := ""
	if s.policy != "" {
		if b, err := os.ReadFile(st.logFile); err == nil {
			snapshot = filepath.Join(x.base, fmt.Sprintf("log-%s-before-%d.stlog", name, i))
			if err := os.WriteFile(snapshot, b, 0o644); err != nil {
				return err
			}
		}
		env = append(env, "STINT_LOG="+st.logFile, "STINT_LOG_POLICY="+s.policy)
	}
	st.snapshots = append(st.snapshots, snapshot)
	env = append(env, s.env...)
	m, err := x.w.Run(ctx, bin, env)
	if err != nil {
		return fmt.Errorf("%s run %d: %w", s.name, i, err)
	}
	rt, err := ReadRunDir(dir, x.in)
	if err != nil {
		return fmt.Errorf("%s run %d: %w", s.name, i, err)
	}
	r := RunDIME{Run: i, Merit: m, NativeBefore: x.wr.Native[len(x.wr.Native)-1], Traces: rt.Files, Warnings: rt.Warnings, Patched: patched,
		Overshoot: Distribution(Overshoots(rt.Periods)), Periods: len(rt.Periods), RunTimeMS: float64(rt.RunTimeNS) / 1e6}
	for _, p := range rt.Periods {
		r.Recorded += p.Recorded
		r.Suppressed += p.Suppressed
	}
	v.Runs = append(v.Runs, r)
	st.sets = append(st.sets, rt.Events)
	st.all = append(st.all, Overshoots(rt.Periods)...)
	st.files = append(st.files, rt.Files)
	fmt.Fprintf(x.d.Config.Log, "  %-20s run %d: %.3f %s, %d distinct events, %d periods\n", s.name, i, m, x.w.Unit(), len(rt.Events), len(rt.Periods))
	if s.name == "full" {
		x.fullSet = rt.Events
		if len(rt.Files) == 1 {
			x.fullTrace = rt.Files[0]
		}
	}
	return nil
}

// finish works out each series' coverage, false negatives and slowdowns.
func (x *dimeWorkload) finish(ctx context.Context, sts []*dimeSeries) {
	wr := x.wr
	for _, st := range sts {
		s, v, sets, snapshots := st.s, st.v, st.sets, st.snapshots
		v.Overshoot = Distribution(st.all)
		ms := CompareRuns(sets, x.fullSet)
		prior := EventSet{}
		for i := range v.Runs {
			v.Runs[i].RunMetrics = ms[i]
			if snapshots[i] != "" {
				fn, rej, ok, err := LogFalseNegatives(snapshots[i], x.fullSet, prior, x.in)
				if err != nil {
					wr.Notes = append(wr.Notes, fmt.Sprintf("%s run %d: log: %v", s.name, i+1, err))
				} else if ok {
					v.Runs[i].LogFalseNegative, v.Runs[i].LogRejected = &fn, rej
				}
			}
			for k := range sets[i] {
				prior[k] = struct{}{}
			}
		}
		if x.d.Cov != "" && x.fullTrace != "" && s.name != "full" {
			if err := x.d.covCompare(ctx, v, st.files, x.fullTrace); err != nil {
				wr.Notes = append(wr.Notes, fmt.Sprintf("%s: cov compare failed, in-process metrics used: %v", s.name, err))
			}
		}
		wr.Variants = append(wr.Variants, v)
	}
	wr.FullEvents = len(x.fullSet)
	wr.NativeMedian = Median(wr.Native)
	for _, v := range wr.Variants {
		var sl, sp []float64
		for i := range v.Runs {
			r := &v.Runs[i]
			r.Slowdown = Slowdown(x.w, wr.NativeMedian, r.Merit)
			r.SlowdownPaired = Slowdown(x.w, r.NativeBefore, r.Merit)
			sl = append(sl, r.Slowdown)
			sp = append(sp, r.SlowdownPaired)
		}
		v.Slowdown = GeoMean(sl)
		v.SlowdownPaired = GeoMean(sp)
	}
}

func mkdir(parts ...string) string {
	p := filepath.Join(parts...)
	os.MkdirAll(p, 0o755)
	return p
}

// rewriteStats is what a rewrite's --stats-json says of its sites.
type rewriteStats struct {
	Patched map[string]int `json:"patched"` // per tactic
	Retired int            `json:"retired"`
}

// patched is the number of patched sites, all tactics together.
func (s *rewriteStats) patched() int {
	n := 0
	for _, v := range s.Patched {
		n += v
	}
	return n
}

// runRewrite runs the rewrite command rw on in, writing out and its
// --stats-json beside it; the statistics are nil when the rewriter
// wrote none that reads as such (an older rewriter).
func runRewrite(ctx context.Context, rw, in, out string, extra ...string) (*rewriteStats, error) {
	stats := out + ".stats.json"
	args := append([]string{"-q", "--stats-json", stats, "-o", out}, extra...)
	if _, err := RunOnce(ctx, Cmd{Argv: append(append([]string{rw}, args...), in)}); err != nil {
		return nil, err
	}
	b, err := os.ReadFile(stats)
	if err != nil {
		return nil, nil
	}
	var s rewriteStats
	if json.Unmarshal(b, &s) != nil || s.Patched == nil {
		return nil, nil
	}
	return &s, nil
}

// rewrite rewrites in to out and returns the number of patched sites
// from --stats-json (nil if the statistics do not say).
func (d *DIME) rewrite(ctx context.Context, in, out string, extra ...string) (*int, error) {
	s, err := runRewrite(ctx, d.Config.Rewrite, in, out, extra...)
	if err != nil || s == nil {
		return nil, err
	}
	n := s.patched()
	return &n, nil
}

// covWorks reports whether d.Cov runs `compare`.
func (d *DIME) covWorks(ctx context.Context) bool {
	out, err := exec.CommandContext(ctx, d.Cov, "compare", "--help").CombinedOutput()
	return err == nil && strings.Contains(string(out), "compare")
}

// covOutput is the part of `cov compare --json` the harness reads (the
// keys issue 3 fixes).
type covOutput struct {
	Coverage *float64 `json:"coverage"`
	Runs     []struct {
		Coverage           *float64 `json:"coverage"`
		CumulativeCoverage *float64 `json:"cumulative_coverage"`
		FalsePositiveRatio *float64 `json:"false_positive_ratio"`
		FalseNegativeRatio *float64 `json:"false_negative_ratio"`
		OvershootP99US     *float64 `json:"overshoot_p99_us"`
	} `json:"runs"`
}

// runCovCompare runs `cov compare --json RUN... FULL` and decodes what
// the harness reads of its output.
func runCovCompare(ctx context.Context, cov string, runs []string, full string) (*covOutput, error) {
	args := append(append([]string{"compare", "--json"}, runs...), full)
	var stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, cov, args...)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("%w: %s", err, lastLine(stderr.String()))
	}
	var co covOutput
	if err := json.Unmarshal(out, &co); err != nil {
		return nil, err
	}
	return &co, nil
}

// covCompare replaces v's metrics by those of `cov compare --json`. It
// needs one trace file per run.
func (d *DIME) covCompare(ctx context.Context, v *VariantDIME, files [][]string, full string) error {
	var one []string
	for i, f := range files {
		if len(f) != 1 {
			return fmt.Errorf("run %d left %d trace files", i+1, len(f))
		}
		one = append(one, f[0])
	}
	co, err := runCovCompare(ctx, d.Cov, one, full)
	if err != nil {
		return err
	}
	if len(co.Runs) != len(v.Runs) {
		return fmt.Errorf("%d runs in its output, want %d", len(co.Runs), len(v.Runs))
	}
	set := func(dst *float64, src *float64) {
		if src != nil {
			*dst = *src
		}
	}
	for i, r := range co.Runs {
		m := &v.Runs[i]
		set(&m.Coverage, r.Coverage)
		set(&m.Cumulative, r.CumulativeCoverage)
		set(&m.FalsePositive, r.FalsePositiveRatio)
		set(&m.FalseNegative, r.FalseNegativeRatio)
		m.OvershootP99Cov = r.OvershootP99US
	}
	v.Metrics = "cov compare"
	return nil
}

func (d *DIME) write(rep *DIMEReport, stdout io.Writer) error {
	if err := os.MkdirAll(d.Results, 0o755); err != nil {
		return err
	}
	b, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(d.Results, d.Name+".json"), append(b, '\n'), 0o644); err != nil {
		return err
	}
	plots, err := Plots(rep, d.Results, d.Name)
	if err != nil {
		return fmt.Errorf("plots: %w", err)
	}
	md := DIMEMarkdown(rep, plots)
	if err := os.WriteFile(filepath.Join(d.Results, d.Name+".md"), []byte(md), 0o644); err != nil {
		return err
	}
	_, err = io.WriteString(stdout, md)
	return err
}
