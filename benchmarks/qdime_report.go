package benchmarks

import (
	"fmt"
	"image/color"
	"path/filepath"
	"strings"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"

	"github.com/stint-project/stint/qos"
)

// QDIMEMarkdown renders the report: the paper's Table I on this machine,
// then per application the runs in detail and the figures.
func QDIMEMarkdown(rep *QDIMEReport) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# QDIME on this machine (issue 4)\n\n")
	fmt.Fprintf(&b, "%s, %s. Period %s, default budget %s (while the analyzer has no fresh value), %d QDIME runs per tool with an exact redundancy log across runs.\n\n",
		rep.Date, rep.Host, rep.Period, rep.Default, rep.Runs)
	if rep.Command != "" {
		fmt.Fprintf(&b, "Reproduce: `%s`\n\n", rep.Command)
	}
	for _, n := range rep.Notes {
		fmt.Fprintf(&b, "- %s\n", n)
	}
	if len(rep.Notes) > 0 {
		b.WriteString("\n")
	}
	b.WriteString("## Summary (the paper's Table I)\n\n")
	b.WriteString("Slowdowns are medians against native; \"under T\" counts the analyzer's periods under load, after the first two, whose metric fell under the threshold. Coverage is of the full run's distinct events, cumulative over the runs.\n\n")
	b.WriteString("\"native under T\" is the same count for the native runs: how often this machine's noise alone crosses the threshold. \"native controls\" counts it for the native runs made right after each tool's QDIME runs (--qdime-controls), at the same time as them.\n\n")
	b.WriteString("| app | tool | threshold | full run | QDIME run 1 | QDIME run 2+ | vs full (run 1) | under T | native under T | native controls under T | coverage after 1 / all runs | runs to 95% |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, a := range rep.Apps {
		for _, t := range a.Tools {
			var later []string
			under, periods := 0, 0
			for _, r := range t.Runs {
				if r.Run > 1 {
					later = append(later, fmt.Sprintf("%.2fx", r.Slowdown))
				}
				under += r.Under
				periods += r.Periods
			}
			r1 := t.Runs[0]
			last := t.Runs[len(t.Runs)-1]
			need := "more than " + fmt.Sprint(len(t.Runs))
			if t.RunsNeeded > 0 {
				need = fmt.Sprint(t.RunsNeeded)
			}
			controls := "-"
			if len(t.ControlMerit) > 0 {
				controls = fmt.Sprintf("%d of %d", t.ControlUnder, t.ControlPeriods)
			}
			fmt.Fprintf(&b, "| %s | %s | %s (%.0f%% of native) | %.2fx | %.2fx | %s | %.1fx | %d of %d | %d of %d | %s | %s / %s | %s |\n",
				a.Key, t.Tool, metricFmt(a.Threshold), 100*a.ThresholdRel, t.FullSlowdown, r1.Slowdown, strings.Join(later, ", "),
				r1.VsFull, under, periods, a.NativeUnder, a.NativePeriods, controls, pct(r1.Cumulative), pct(last.Cumulative), need)
		}
	}
	b.WriteString("\n")
	for _, a := range rep.Apps {
		fmt.Fprintf(&b, "## %s\n\n", a.Title)
		fmt.Fprintf(&b, "Metric: %s. Native: %s %s (median of %d runs), metric %s; threshold %s = %.0f%% of native", a.MetricSource,
			merit(Median(a.NativeMerit), a.Unit), "", len(a.NativeMerit), metricFmt(a.NativeMetric), metricFmt(a.Threshold), 100*a.ThresholdRel)
		if a.Why != "" {
			fmt.Fprintf(&b, " (%s)", a.Why)
		}
		b.WriteString(".\n\n")
		b.WriteString("| tool | run | figure of merit | slowdown | mean metric under load | periods under T | budget: periods, zero, granted, used |\n|---|---|---|---|---|---|---|\n")
		for _, t := range a.Tools {
			fmt.Fprintf(&b, "| %s | full | %s | %.2fx | | | |\n", t.Tool, merit(t.FullMerit, a.Unit), t.FullSlowdown)
			for _, r := range t.Runs {
				fmt.Fprintf(&b, "| %s | %d | %s | %.2fx | %s | %d of %d | %d, %d, %.1f%%, %.1f%% |\n", t.Tool, r.Run, merit(r.Merit, a.Unit),
					r.Slowdown, metricFmt(r.MeanMetric), r.Under, r.Periods, r.BudgetPeriods, r.ZeroBudget, r.MeanGrantedPct, r.MeanUsedPct)
			}
		}
		b.WriteString("\n")
		for _, p := range rep.Plots {
			if strings.Contains(p, "-"+a.Key+"-") {
				fmt.Fprintf(&b, "![%s](%s)\n", p, p)
			}
		}
		b.WriteString("\n")
	}
	return b.String()
}

func metricFmt(x float64) string {
	switch {
	case x >= 1e6:
		return fmt.Sprintf("%.2fM", x/1e6)
	case x >= 1e3:
		return fmt.Sprintf("%.1fk", x/1e3)
	}
	return fmt.Sprintf("%.3g", x)
}

// QDIMEPlots draws, per application and tool, the metric over time
// (native, each QDIME run, the threshold) and the budget granted and
// used per period of QDIME run 1: the paper's Figures 1 and 3-6.
func QDIMEPlots(rep *QDIMEReport, dir, name string, period time.Duration) ([]string, error) {
	var files []string
	for _, t := range rep.fig {
		a := t.app
		// metric over time, seconds since the load started
		p := plot.New()
		p.Title.Text = fmt.Sprintf("%s, --tool %s: QoS metric over time", a.Key, t.Tool)
		p.X.Label.Text = "time since the load started (s)"
		p.Y.Label.Text = a.MetricSource
		series := []any{"native", samplesXY(a.nativeSeries, a.nativeLoad)}
		for i, rows := range t.samples {
			series = append(series, fmt.Sprintf("QDIME run %d", i+1), samplesXY(rows, t.loads[i]))
		}
		if err := plotutil.AddLines(p, series...); err != nil {
			return nil, err
		}
		xmax := 0.0
		for _, s := range series[1:] {
			if xy, ok := s.(plotter.XYs); ok && len(xy) > 0 {
				xmax = max(xmax, xy[len(xy)-1].X)
			}
		}
		thr, err := plotter.NewLine(plotter.XYs{{X: 0, Y: a.Threshold}, {X: xmax, Y: a.Threshold}})
		if err != nil {
			return nil, err
		}
		thr.Color = color.RGBA{R: 200, A: 255}
		thr.Dashes = []vg.Length{vg.Points(6), vg.Points(3)}
		p.Add(thr)
		p.Legend.Add("threshold", thr)
		p.Legend.Top, p.Legend.Left = false, true
		p.Y.Min = 0
		f := fmt.Sprintf("%s-%s-%s-metric.svg", name, a.Key, t.Tool)
		if err := p.Save(7*vg.Inch, 3.6*vg.Inch, filepath.Join(dir, f)); err != nil {
			return nil, err
		}
		files = append(files, f)
		// budget per period of run 1
		if len(t.periods) == 0 || len(t.periods[0]) == 0 {
			continue
		}
		bp := plot.New()
		bp.Title.Text = fmt.Sprintf("%s, --tool %s: budget per period (QDIME run 1)", a.Key, t.Tool)
		bp.X.Label.Text = "time since the load started (s)"
		bp.Y.Label.Text = "% of the period"
		var granted, used plotter.XYs
		for _, pr := range t.periods[0] {
			x := (float64(pr.Start) - float64(t.loads[0].Start)) / 1e9
			granted = append(granted, plotter.XY{X: x, Y: 100 * float64(pr.Granted) / float64(period)})
			used = append(used, plotter.XY{X: x, Y: 100 * float64(pr.Used) / float64(period)})
		}
		gl, err := plotter.NewLine(granted)
		if err != nil {
			return nil, err
		}
		gl.StepStyle = plotter.PostStep
		gl.Color = plotutil.Color(0)
		ul, err := plotter.NewScatter(used)
		if err != nil {
			return nil, err
		}
		ul.Color = plotutil.Color(1)
		ul.Shape = draw.CircleGlyph{}
		bp.Add(gl, ul)
		bp.Legend.Add("granted", gl)
		bp.Legend.Add("used", ul)
		bp.Legend.Top = true
		bp.Y.Min = 0
		f = fmt.Sprintf("%s-%s-%s-budget.svg", name, a.Key, t.Tool)
		if err := bp.Save(7*vg.Inch, 3*vg.Inch, filepath.Join(dir, f)); err != nil {
			return nil, err
		}
		files = append(files, f)
	}
	return files, nil
}

func samplesXY(rows []qos.SampleRow, load Window) plotter.XYs {
	var xy plotter.XYs
	for _, r := range rows {
		if !r.HasValue || uint64(r.Mono) < load.Start {
			continue
		}
		xy = append(xy, plotter.XY{X: (float64(r.Mono) - float64(load.Start)) / 1e9, Y: r.Value})
	}
	return xy
}
