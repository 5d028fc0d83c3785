package benchmarks

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// Retire is the experiment behind `rewrite --retire-since`: what the
// third run of an exact series costs rewritten with --skip-covered alone
// against with --retire-since too, both from the same log, and what the
// retiring series' fourth run costs, timed in turns between native runs
// (paired: each round's traced runs against the mean of the native runs
// before and after them, which a machine whose speed changes from minute
// to minute needs), and what each adds to coverage.
//
// Per workload: a full run (the reference events); run 1 of the budgeted
// rewrite with a fresh exact log; run 2 of a --skip-covered rewrite of
// that log; then the two run-3 rewrites of the log after run 2, the
// second retiring since the log before run 2; then run 4, rewritten from
// the log after the retiring run 3 and retiring since the log after run
// 2 (what every later run of the series is like: run 3's rewrite still
// patches the sites that showed something new in run 2, which run 4's
// retires). One traced run of each measures coverage after its run; the
// rounds that follow each use a log of their own, copied before every
// run from the log its rewrite was made from.
type Retire struct {
	Config    Config
	Results   string // directory for the results
	Name      string // base name of the result files (default "issue3-retire")
	Workloads []Workload
	Rounds    int    // timed rounds (native, then the rewrites in turn)
	Budget    string // rewrite --budget, e.g. "10%"
	Period    string // rewrite --period, e.g. "100ms"
	Command   string // the command line that reproduces it
}

// RetireReport is what the experiment writes as JSON.
type RetireReport struct {
	Date      string            `json:"date"`
	Host      string            `json:"host"`
	Command   string            `json:"command,omitempty"`
	Budget    string            `json:"budget"`
	Period    string            `json:"period"`
	Rounds    int               `json:"rounds"`
	Workloads []*RetireWorkload `json:"workloads"`
}

// RetireWorkload is one workload's result.
type RetireWorkload struct {
	Key        string          `json:"key"`
	Title      string          `json:"title"`
	Unit       string          `json:"unit"`
	FullEvents int             `json:"full_events"`
	After2     float64         `json:"cumulative_after_2"` // coverage after runs 1 and 2
	Native     []float64       `json:"native"`             // one before each round and one after the last
	Variants   []RetireVariant `json:"variants"`           // run 3 skip-covered, run 3 retire, run 4 retire
}

// RetireVariant is one rewrite: of run 3, or of the retiring series' run 4.
type RetireVariant struct {
	Name    string    `json:"name"`
	Run     int       `json:"run"` // 3 or 4
	Patched int       `json:"patched_sites"`
	Retired int       `json:"retired_sites"`
	After3  float64   `json:"cumulative_after_3,omitempty"` // a run-3 rewrite: with its traced run 3
	After4  float64   `json:"cumulative_after_4,omitempty"` // the run-4 rewrite: with the retiring run 3 and its traced run 4
	Merit   []float64 `json:"merit"`                        // one a round
	Paired  []float64 `json:"paired_slowdown"`              // against the mean of the native runs before and after the round
	// PairedMedian is the median of Paired; Slowdown the median merit
	// against the median native one.
	PairedMedian float64 `json:"paired_median"`
	Slowdown     float64 `json:"slowdown"`
}

// Run runs the experiment and writes <Name>.json and <Name>.md.
func (r *Retire) Run(ctx context.Context, stdout io.Writer) error {
	if r.Name == "" {
		r.Name = "issue3-retire"
	}
	if r.Rounds < 1 {
		return fmt.Errorf("retire: %d rounds", r.Rounds)
	}
	rep := &RetireReport{Date: time.Now().UTC().Format(time.RFC3339), Host: hostDesc(), Command: r.Command,
		Budget: r.Budget, Period: r.Period, Rounds: r.Rounds}
	for _, w := range r.Workloads {
		fmt.Fprintf(r.Config.Log, "%s\n", w.Title())
		rw, err := r.workload(ctx, w)
		if err != nil {
			return fmt.Errorf("%s: %w", w.Key(), err)
		}
		rep.Workloads = append(rep.Workloads, rw)
	}
	if err := os.MkdirAll(r.Results, 0o755); err != nil {
		return err
	}
	b, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(r.Results, r.Name+".json"), append(b, '\n'), 0o644); err != nil {
		return err
	}
	md := RetireMarkdown(rep)
	if err := os.WriteFile(filepath.Join(r.Results, r.Name+".md"), []byte(md), 0o644); err != nil {
		return err
	}
	_, err = io.WriteString(stdout, md)
	return err
}

// rewrite runs the rewrite command rw and returns its --stats-json counts of
// patched and retired sites.
func (r *Retire) rewrite(ctx context.Context, rw, in, out string, extra ...string) (patched, retired int, err error) {
	s, err := runRewrite(ctx, rw, in, out, extra...)
	if err != nil {
		return 0, 0, err
	}
	if s == nil {
		return 0, 0, fmt.Errorf("rewrite %s: no statistics in %s.stats.json", in, out)
	}
	return s.patched(), s.Retired, nil
}

func copyFile(dst, src string) error {
	b, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	return os.WriteFile(dst, b, 0o644)
}

// retireRun is one workload's experiment in progress.
type retireRun struct {
	r      *Retire
	w      Workload
	base   string
	budget []string
	in     *Interner
	out    *RetireWorkload
	full   EventSet
}

// retireVariant is one rewrite of run 3 or 4 and what its runs need.
type retireVariant struct {
	v     RetireVariant
	rw    string // the rewrite command that made it
	bin   string
	log   string // its runs' log, copied from src before each
	src   string
	args  []string
	set   EventSet // its traced run's events
	prior []EventSet
}

func (r *Retire) workload(ctx context.Context, w Workload) (*RetireWorkload, error) {
	base := filepath.Join(r.Config.WorkDir, "retire", w.Key())
	if err := freshDir(base); err != nil {
		return nil, err
	}
	if err := w.Prepare(ctx, r.Config.WorkDir); err != nil {
		return nil, err
	}
	x := &retireRun{r: r, w: w, base: base, budget: []string{"--budget", r.Budget, "--period", r.Period},
		in: &Interner{}, out: &RetireWorkload{Key: w.Key(), Title: w.Title(), Unit: w.Unit()}}
	log1, log2, s1, s2, err := x.series(ctx)
	if err != nil {
		return nil, err
	}
	vs, err := x.variants(ctx, log1, log2, s1, s2)
	if err != nil {
		return nil, err
	}
	if err := x.rounds(ctx, vs); err != nil {
		return nil, err
	}
	return x.out, nil
}

// traced runs bin with log (""= none) into a fresh directory and returns
// the distinct events it recorded.
func (x *retireRun) traced(ctx context.Context, name, bin, log string) (EventSet, error) {
	dir := filepath.Join(x.base, "traces", name)
	if err := freshDir(dir); err != nil {
		return nil, err
	}
	env := []string{"STINT_OUT=" + dir}
	if log != "" {
		env = append(env, "STINT_LOG="+log, "STINT_LOG_POLICY=exact")
	}
	m, err := x.w.Run(ctx, bin, env)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	rt, err := ReadRunDir(dir, x.in)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	fmt.Fprintf(x.r.Config.Log, "  %-24s %.3f %s, %d distinct events\n", name, m, x.w.Unit(), len(rt.Events))
	return rt.Events, nil
}

// series runs the full reference run and runs 1 and 2 of the series, and
// returns the log before run 2, the log before run 3 and the two runs'
// events.
func (x *retireRun) series(ctx context.Context) (log1, log2 string, s1, s2 EventSet, err error) {
	full := x.w.OutPath(mkdir(x.base, "full"))
	if _, _, err := x.r.rewrite(ctx, x.r.Config.Rewrite, x.w.Target(), full); err != nil {
		return "", "", nil, nil, err
	}
	if x.full, err = x.traced(ctx, "full", full, ""); err != nil {
		return "", "", nil, nil, err
	}
	x.out.FullEvents = len(x.full)
	log := filepath.Join(x.base, "series.stlog")
	log1 = filepath.Join(x.base, "before-2.stlog")
	log2 = filepath.Join(x.base, "before-3.stlog")
	for _, step := range []struct {
		name, after string
		args        []string
		set         *EventSet
	}{
		{"run 1", log1, x.budget, &s1},
		{"run 2 (skip-covered)", log2, append(x.budget, "--skip-covered", log1), &s2},
	} {
		bin := x.w.OutPath(mkdir(x.base, strings.Fields(step.name)[1]))
		if _, _, err := x.r.rewrite(ctx, x.r.Config.Rewrite, x.w.Target(), bin, step.args...); err != nil {
			return "", "", nil, nil, err
		}
		if *step.set, err = x.traced(ctx, step.name, bin, log); err != nil {
			return "", "", nil, nil, err
		}
		if err := copyFile(step.after, log); err != nil {
			return "", "", nil, nil, err
		}
	}
	x.out.After2 = CompareRuns([]EventSet{s1, s2}, x.full)[1].Cumulative
	return log1, log2, s1, s2, nil
}

// prepare rewrites v's binary and traces one run of it; its coverage is
// the share of the full run's events after prior and it.
func (x *retireRun) prepare(ctx context.Context, v *retireVariant, i int) (err error) {
	v.bin = x.w.OutPath(mkdir(x.base, fmt.Sprintf("run%d-%d", v.v.Run, i)))
	v.log = filepath.Join(x.base, fmt.Sprintf("run%d-%d.stlog", v.v.Run, i))
	if v.v.Patched, v.v.Retired, err = x.r.rewrite(ctx, v.rw, x.w.Target(), v.bin, append(x.budget, v.args...)...); err != nil {
		return err
	}
	if err := copyFile(v.log, v.src); err != nil {
		return err
	}
	if v.set, err = x.traced(ctx, fmt.Sprintf("run %d (%s)", v.v.Run, v.v.Name), v.bin, v.log); err != nil {
		return err
	}
	after := CompareRuns(append(v.prior, v.set), x.full)[len(v.prior)].Cumulative
	if v.v.Run == 4 {
		v.v.After4 = after
	} else {
		v.v.After3 = after
	}
	return nil
}

// variants rewrites and traces the two run-3 rewrites and the retiring
// series' run 4, each also with Config.Other when it is set.
func (x *retireRun) variants(ctx context.Context, log1, log2 string, s1, s2 EventSet) ([]*retireVariant, error) {
	builds := []struct{ rw, suffix string }{{x.r.Config.Rewrite, ""}}
	if x.r.Config.Other != "" {
		builds = append(builds, struct{ rw, suffix string }{x.r.Config.Other, ", other build"})
	}
	var vs []*retireVariant
	for _, b := range builds {
		run3 := []*retireVariant{
			{v: RetireVariant{Name: "skip-covered" + b.suffix, Run: 3}, src: log2, args: []string{"--skip-covered", log2}},
			{v: RetireVariant{Name: "skip-covered + retire-since" + b.suffix, Run: 3}, src: log2, args: []string{"--skip-covered", log2, "--retire-since", log1}},
		}
		for _, v := range run3 {
			v.rw, v.prior = b.rw, []EventSet{s1, s2}
			if err := x.prepare(ctx, v, len(vs)); err != nil {
				return nil, err
			}
			vs = append(vs, v)
		}
		// run 4 of the retiring series, from the log its run 3 left
		log3 := filepath.Join(x.base, fmt.Sprintf("before-4-%d.stlog", len(vs)))
		if err := copyFile(log3, run3[1].log); err != nil {
			return nil, err
		}
		v4 := &retireVariant{v: RetireVariant{Name: "skip-covered + retire-since" + b.suffix, Run: 4}, rw: b.rw, src: log3,
			args: []string{"--skip-covered", log3, "--retire-since", log2}, prior: []EventSet{s1, s2, run3[1].set}}
		if err := x.prepare(ctx, v4, len(vs)); err != nil {
			return nil, err
		}
		vs = append(vs, v4)
	}
	return vs, nil
}

// rounds times the variants: native first, the rewrites after it in
// turns; a last native run closes the last round, so that each round's
// runs are paired with the mean of the native runs before and after them
// (a machine speeding up or slowing down during the rounds then does not
// bias the ratios).
func (x *retireRun) rounds(ctx context.Context, vs []*retireVariant) error {
	native := func() (float64, error) {
		m, err := x.w.Run(ctx, "", nil)
		if err != nil {
			return 0, fmt.Errorf("native: %w", err)
		}
		x.out.Native = append(x.out.Native, m)
		return m, nil
	}
	tdir := filepath.Join(x.base, "traces", "rounds")
	for round := 0; round < x.r.Rounds; round++ {
		m, err := native()
		if err != nil {
			return err
		}
		line := fmt.Sprintf("  round %d: native %.3f", round+1, m)
		for k := range vs {
			v := vs[(k+round)%len(vs)]
			if err := copyFile(v.log, v.src); err != nil {
				return err
			}
			if err := freshDir(tdir); err != nil {
				return err
			}
			t, err := x.w.Run(ctx, v.bin, []string{"STINT_OUT=" + tdir, "STINT_LOG=" + v.log, "STINT_LOG_POLICY=exact"})
			if err != nil {
				return fmt.Errorf("%s: %w", v.v.Name, err)
			}
			v.v.Merit = append(v.v.Merit, t)
			line += fmt.Sprintf(", run %d %s %.3f", v.v.Run, v.v.Name, t)
		}
		fmt.Fprintf(x.r.Config.Log, "%s %s\n", line, x.w.Unit())
	}
	m, err := native()
	if err != nil {
		return err
	}
	fmt.Fprintf(x.r.Config.Log, "  native %.3f %s\n", m, x.w.Unit())
	for _, v := range vs {
		for i, t := range v.v.Merit {
			v.v.Paired = append(v.v.Paired, Slowdown(x.w, (x.out.Native[i]+x.out.Native[i+1])/2, t))
		}
		v.v.PairedMedian = Median(v.v.Paired)
		v.v.Slowdown = Slowdown(x.w, Median(x.out.Native), Median(v.v.Merit))
		x.out.Variants = append(x.out.Variants, v.v)
	}
	return nil
}

// RetireMarkdown renders the experiment's table.
func RetireMarkdown(rep *RetireReport) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Measured %s on %s. Budget %s per period of %s; %d rounds.\n", rep.Date, rep.Host, rep.Budget, rep.Period, rep.Rounds)
	if rep.Command != "" {
		fmt.Fprintf(&b, "Reproduce with `%s`.\n", rep.Command)
	}
	b.WriteString("\nRun 1: the budgeted rewrite with a fresh exact log; run 2: a --skip-covered rewrite of it. " +
		"Run 3 is rewritten from the log after run 2 twice: with --skip-covered alone, and with --retire-since the log before run 2 too. " +
		"Run 4 of the retiring series is rewritten from the log after its run 3, retiring since the log after run 2: every later run is like it. " +
		"Coverage is the share of the full run's distinct events after the run (run 4: after runs 1, 2, the retiring run 3 and run 4); the timed rounds run native, then the rewrites " +
		"(in turns), each from a fresh copy of the log it was rewritten from, and a native run closes each round. Paired: against the mean of the native runs before and after the round (median over rounds).\n\n")
	b.WriteString("| workload | native (median) | after 2 runs | run | rewrite | patched sites | retired | after the run | paired slowdown (median) | paired range | slowdown of medians |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, w := range rep.Workloads {
		for _, v := range w.Variants {
			lo, hi := 0.0, 0.0
			for i, x := range v.Paired {
				if i == 0 || x < lo {
					lo = x
				}
				hi = max(hi, x)
			}
			after := v.After3
			if v.Run == 4 {
				after = v.After4
			}
			fmt.Fprintf(&b, "| %s | %s | %s | %d | %s | %d | %d | %s | %.3fx | %.2f-%.2fx | %.3fx |\n",
				w.Title, merit(Median(w.Native), w.Unit), pct(w.After2), v.Run, v.Name, v.Patched, v.Retired, pct(after),
				v.PairedMedian, lo, hi, v.Slowdown)
		}
	}
	return b.String()
}
