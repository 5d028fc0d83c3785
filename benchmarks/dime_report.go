package benchmarks

import (
	"fmt"
	"strings"
)

// DIMEMarkdown renders the experiment's tables: per workload a summary
// per series, then cumulative coverage, slowdown and FP/FN per run, and
// links to the plots (file names by workload key, relative to the
// Markdown file).
func DIMEMarkdown(rep *DIMEReport, plots map[string][]string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Measured %s on %s. Budget %s per period of %s; %d runs per budgeted series.\n",
		rep.Date, rep.Host, rep.Budget, rep.Period, rep.Runs)
	if rep.Command != "" {
		fmt.Fprintf(&b, "Reproduce with `%s`.\n", rep.Command)
	}
	b.WriteString("\nCoverage is the share of the full run's distinct events (the rewritten program without a budget). " +
		"FP: events a run recorded that an earlier run of the series had recorded. " +
		"FN: of the full run's events a run did not record, those no earlier run had recorded either " +
		"(as far as traces tell; budget misses count too, so the dime series shows the floor). " +
		"The pooled FP weighs each run by the events it recorded (a late run that records one event, an old one, has an FP ratio of 1 and moves the mean by 1/(runs-1)). " +
		"Slowdown is against the median of the native runs interleaved with the series; " +
		"paired slowdown against the native run just before each run (steadier on a machine whose speed changes between minutes). " +
		"Overshoot is the budget used beyond the grant, per period.\n\n")
	for _, n := range rep.Notes {
		fmt.Fprintf(&b, "- %s\n", n)
	}
	if len(rep.Notes) > 0 {
		b.WriteString("\n")
	}
	for _, w := range rep.Workloads {
		fmt.Fprintf(&b, "### %s\n\n", w.Title)
		fmt.Fprintf(&b, "Native: median %s over %d runs. Full run: %d distinct events.\n\n", merit(w.NativeMedian, w.Unit), len(w.Native), w.FullEvents)
		b.WriteString("| series | runs | coverage run 1 | cumulative after 2 | cumulative after last | slowdown (geomean) | slowdown max | paired slowdown (geomean) | FP (mean, runs 2..) | FP (pooled, runs 2..) | FN (mean, runs 2..) | overshoot median / p99 / max (µs) | metrics |\n")
		b.WriteString("|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
		for _, v := range w.Variants {
			if len(v.Runs) == 0 {
				continue
			}
			last := v.Runs[len(v.Runs)-1]
			after2 := "–"
			if len(v.Runs) >= 2 {
				after2 = pct(v.Runs[1].Cumulative)
			}
			maxSl := 0.0
			var fp, fn float64
			for i, r := range v.Runs {
				maxSl = max(maxSl, r.Slowdown)
				if i > 0 {
					fp += r.FalsePositive / float64(len(v.Runs)-1)
					fn += r.FalseNegative / float64(len(v.Runs)-1)
				}
			}
			fpS, fnS, poolS := fmt.Sprintf("%.3f", fp), fmt.Sprintf("%.3f", fn), fmt.Sprintf("%.3f", pooledFP(v.Runs))
			if len(v.Runs) < 2 {
				fpS, fnS, poolS = "–", "–", "–"
			}
			os := "–"
			if v.Overshoot.N > 0 {
				os = fmt.Sprintf("%.1f / %.1f / %.1f", v.Overshoot.Median, v.Overshoot.P99, v.Overshoot.Max)
			}
			fmt.Fprintf(&b, "| %s | %d | %s | %s | %s | %.2fx | %.2fx | %.2fx | %s | %s | %s | %s | %s |\n",
				v.Name, len(v.Runs), pct(v.Runs[0].Coverage), after2, pct(last.Cumulative), v.Slowdown, maxSl, v.SlowdownPaired, fpS, poolS, fnS, os, v.Metrics)
		}
		b.WriteString("\n")
		perRun(&b, w, "Cumulative coverage per run (the paper's Figure 6)", func(r RunDIME) string { return pct(r.Cumulative) })
		perRun(&b, w, "Coverage of each run alone", func(r RunDIME) string { return pct(r.Coverage) })
		perRun(&b, w, "Slowdown per run (paired in brackets)", func(r RunDIME) string {
			return fmt.Sprintf("%.2fx (%.2fx)", r.Slowdown, r.SlowdownPaired)
		})
		perRun(&b, w, "FP / FN ratio per run (the paper's Figure 3; for an exact log, the FN measured on the log itself in brackets)", func(r RunDIME) string {
			s := fmt.Sprintf("%.3f / %.3f", r.FalsePositive, r.FalseNegative)
			if r.LogFalseNegative != nil {
				s += fmt.Sprintf(" [%.3f of %d]", *r.LogFalseNegative, r.LogRejected)
			}
			return s
		})
		perRun(&b, w, "Overshoot p99 per run (µs)", func(r RunDIME) string {
			if r.Periods == 0 {
				return "–"
			}
			return fmt.Sprintf("%.1f", r.Overshoot.P99)
		})
		for _, f := range plots[w.Key] {
			fmt.Fprintf(&b, "![%s](%s)\n\n", f, f)
		}
		for _, n := range w.Notes {
			fmt.Fprintf(&b, "- %s\n", n)
		}
	}
	return b.String()
}

// pooledFP is the false-positive ratio of runs 2.. taken together: the
// events they recorded again over the events they recorded.
func pooledFP(runs []RunDIME) float64 {
	again, all := 0.0, 0
	for _, r := range runs[min(1, len(runs)):] {
		again += r.FalsePositive * float64(r.Events)
		all += r.Events
	}
	if all == 0 {
		return 0
	}
	return again / float64(all)
}

// perRun writes a table with one row per run and one column per
// budgeted series (nothing when there are none).
func perRun(b *strings.Builder, w *WorkloadDIME, title string, cell func(RunDIME) string) {
	var vs []*VariantDIME
	n := 0
	for _, v := range w.Variants {
		if v.Name != "full" {
			vs = append(vs, v)
			n = max(n, len(v.Runs))
		}
	}
	if len(vs) == 0 {
		return
	}
	fmt.Fprintf(b, "%s:\n\n| run |", title)
	for _, v := range vs {
		fmt.Fprintf(b, " %s |", v.Name)
	}
	b.WriteString("\n|---|" + strings.Repeat("---|", len(vs)) + "\n")
	for i := 0; i < n; i++ {
		fmt.Fprintf(b, "| %d |", i+1)
		for _, v := range vs {
			if i < len(v.Runs) {
				fmt.Fprintf(b, " %s |", cell(v.Runs[i]))
			} else {
				b.WriteString(" |")
			}
		}
		b.WriteString("\n")
	}
	b.WriteString("\n")
}

func pct(x float64) string { return fmt.Sprintf("%.1f%%", 100*x) }

func merit(x float64, unit string) string {
	if unit == "s" {
		return fmt.Sprintf("%.3f s", x)
	}
	return fmt.Sprintf("%.0f %s", x, unit)
}
