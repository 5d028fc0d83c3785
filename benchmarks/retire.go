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

// rewrite runs the rewriter and returns its --stats-json counts of
// patched and retired sites.
func (r *Retire) rewrite(ctx context.Context, in, out string, extra ...string) (patched, retired int, err error) {
	s, err := runRewrite(ctx, r.Config.Rewrite, in, out, extra...)
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

func (r *Retire) workload(ctx context.Context, w Workload) (*RetireWorkload, error) {
	base := filepath.Join(r.Config.WorkDir, "retire", w.Key())
	if err := freshDir(base); err != nil {
		return nil, err
	}
	if err := w.Prepare(ctx, r.Config.WorkDir); err != nil {
		return nil, err
	}
	out := &RetireWorkload{Key: w.Key(), Title: w.Title(), Unit: w.Unit()}
	budget := []string{"--budget", r.Budget, "--period", r.Period}
	in := &Interner{}
	// traced runs bin with log (""= none) into a fresh directory
	traced := func(name, bin, log string) (EventSet, error) {
		dir := filepath.Join(base, "traces", name)
		if err := freshDir(dir); err != nil {
			return nil, err
		}
		env := []string{"STINT_OUT=" + dir}
		if log != "" {
			env = append(env, "STINT_LOG="+log, "STINT_LOG_POLICY=exact")
		}
		m, err := w.Run(ctx, bin, env)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		rt, err := ReadRunDir(dir, in)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		fmt.Fprintf(r.Config.Log, "  %-24s %.3f %s, %d distinct events\n", name, m, w.Unit(), len(rt.Events))
		return rt.Events, nil
	}
	full := w.OutPath(mkdir(base, "full"))
	if _, _, err := r.rewrite(ctx, w.Target(), full); err != nil {
		return nil, err
	}
	fullSet, err := traced("full", full, "")
	if err != nil {
		return nil, err
	}
	out.FullEvents = len(fullSet)
	// runs 1 and 2 of the series, each followed by a copy of the log
	log := filepath.Join(base, "series.stlog")
	log1 := filepath.Join(base, "before-2.stlog")
	log2 := filepath.Join(base, "before-3.stlog")
	var s1, s2 EventSet
	for _, step := range []struct {
		name, after string
		args        []string
		set         *EventSet
	}{
		{"run 1", log1, budget, &s1},
		{"run 2 (skip-covered)", log2, append(budget, "--skip-covered", log1), &s2},
	} {
		bin := w.OutPath(mkdir(base, strings.Fields(step.name)[1]))
		if _, _, err := r.rewrite(ctx, w.Target(), bin, step.args...); err != nil {
			return nil, err
		}
		if *step.set, err = traced(step.name, bin, log); err != nil {
			return nil, err
		}
		if err := copyFile(step.after, log); err != nil {
			return nil, err
		}
	}
	out.After2 = CompareRuns([]EventSet{s1, s2}, fullSet)[1].Cumulative
	type variant struct {
		v    RetireVariant
		bin  string
		log  string // its runs' log, copied from src before each
		src  string
		args []string
		set  EventSet // its traced run's events
	}
	// prepare rewrites v's binary and traces one run of it
	prepare := func(v *variant, i int) (err error) {
		v.bin = w.OutPath(mkdir(base, fmt.Sprintf("run%d-%d", v.v.Run, i)))
		v.log = filepath.Join(base, fmt.Sprintf("run%d-%d.stlog", v.v.Run, i))
		if v.v.Patched, v.v.Retired, err = r.rewrite(ctx, w.Target(), v.bin, append(budget, v.args...)...); err != nil {
			return err
		}
		if err := copyFile(v.log, v.src); err != nil {
			return err
		}
		v.set, err = traced(fmt.Sprintf("run %d (%s)", v.v.Run, v.v.Name), v.bin, v.log)
		return err
	}
	vs := []*variant{
		{v: RetireVariant{Name: "skip-covered", Run: 3}, src: log2, args: []string{"--skip-covered", log2}},
		{v: RetireVariant{Name: "skip-covered + retire-since", Run: 3}, src: log2, args: []string{"--skip-covered", log2, "--retire-since", log1}},
	}
	for i, v := range vs {
		if err := prepare(v, i); err != nil {
			return nil, err
		}
		v.v.After3 = CompareRuns([]EventSet{s1, s2, v.set}, fullSet)[2].Cumulative
	}
	// run 4 of the retiring series, from the log its run 3 left
	log3 := filepath.Join(base, "before-4.stlog")
	if err := copyFile(log3, vs[1].log); err != nil {
		return nil, err
	}
	v4 := &variant{v: RetireVariant{Name: "skip-covered + retire-since", Run: 4}, src: log3, args: []string{"--skip-covered", log3, "--retire-since", log2}}
	if err := prepare(v4, 1); err != nil {
		return nil, err
	}
	v4.v.After4 = CompareRuns([]EventSet{s1, s2, vs[1].set, v4.set}, fullSet)[3].Cumulative
	vs = append(vs, v4)
	// The rounds: native first, the rewrites after it in turns; a
	// last native run closes the last round, so that each round's runs
	// are paired with the mean of the native runs before and after them
	// (a machine speeding up or slowing down during the rounds then does
	// not bias the ratios).
	native := func() (float64, error) {
		m, err := w.Run(ctx, "", nil)
		if err != nil {
			return 0, fmt.Errorf("native: %w", err)
		}
		out.Native = append(out.Native, m)
		return m, nil
	}
	tdir := filepath.Join(base, "traces", "rounds")
	for round := 0; round < r.Rounds; round++ {
		m, err := native()
		if err != nil {
			return nil, err
		}
		line := fmt.Sprintf("  round %d: native %.3f", round+1, m)
		for k := range vs {
			v := vs[(k+round)%len(vs)]
			if err := copyFile(v.log, v.src); err != nil {
				return nil, err
			}
			if err := freshDir(tdir); err != nil {
				return nil, err
			}
			x, err := w.Run(ctx, v.bin, []string{"STINT_OUT=" + tdir, "STINT_LOG=" + v.log, "STINT_LOG_POLICY=exact"})
			if err != nil {
				return nil, fmt.Errorf("%s: %w", v.v.Name, err)
			}
			v.v.Merit = append(v.v.Merit, x)
			line += fmt.Sprintf(", run %d %s %.3f", v.v.Run, v.v.Name, x)
		}
		fmt.Fprintf(r.Config.Log, "%s %s\n", line, w.Unit())
	}
	m, err := native()
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(r.Config.Log, "  native %.3f %s\n", m, w.Unit())
	for _, v := range vs {
		for i, x := range v.v.Merit {
			v.v.Paired = append(v.v.Paired, Slowdown(w, (out.Native[i]+out.Native[i+1])/2, x))
		}
		v.v.PairedMedian = Median(v.v.Paired)
		v.v.Slowdown = Slowdown(w, Median(out.Native), Median(v.v.Merit))
		out.Variants = append(out.Variants, v.v)
	}
	return out, nil
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
