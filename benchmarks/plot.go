package benchmarks

import (
	"fmt"
	"path/filepath"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

// Plots draws, for every workload with budgeted series, three SVG files
// in dir: cumulative coverage over runs per series (the paper's Figure
// 6), slowdown per run per series (Figure 4), and mean false-positive
// and false-negative ratios per series (Figure 3). It returns the file
// names (relative to dir) by workload key.
func Plots(rep *DIMEReport, dir, name string) (map[string][]string, error) {
	out := map[string][]string{}
	for _, w := range rep.Workloads {
		var series []*VariantDIME
		for _, v := range w.Variants {
			if v.Name != "full" && len(v.Runs) > 0 {
				series = append(series, v)
			}
		}
		if len(series) == 0 {
			continue
		}
		files := []struct {
			suffix string
			draw   func(*plot.Plot) error
		}{
			{"coverage", func(p *plot.Plot) error {
				p.Title.Text = w.Title + ": coverage over runs"
				p.X.Label.Text = "run"
				p.Y.Label.Text = "cumulative coverage of the full run (%)"
				p.Y.Min, p.Y.Max = 0, 105
				p.Legend.Top = false // the curves rise to the top
				return lines(p, series, func(r RunDIME) float64 { return 100 * r.Cumulative })
			}},
			{"slowdown", func(p *plot.Plot) error {
				p.Title.Text = w.Title + ": slowdown per run"
				p.X.Label.Text = "run"
				p.Y.Label.Text = "slowdown vs native (x)"
				p.Y.Min = 0
				return lines(p, series, func(r RunDIME) float64 { return r.Slowdown })
			}},
			{"fpfn", func(p *plot.Plot) error {
				p.Title.Text = w.Title + ": false positives and negatives (mean over runs 2..)"
				p.Y.Label.Text = "ratio"
				return fpfnBars(p, series)
			}},
		}
		for _, f := range files {
			p := plot.New()
			p.Legend.Top = true
			if err := f.draw(p); err != nil {
				return nil, err
			}
			file := fmt.Sprintf("%s-%s-%s.svg", name, w.Key, f.suffix)
			if err := p.Save(7*vg.Inch, 4.5*vg.Inch, filepath.Join(dir, file)); err != nil {
				return nil, err
			}
			out[w.Key] = append(out[w.Key], file)
		}
	}
	return out, nil
}

func lines(p *plot.Plot, series []*VariantDIME, y func(RunDIME) float64) error {
	var args []any
	for _, v := range series {
		pts := make(plotter.XYs, len(v.Runs))
		for i, r := range v.Runs {
			pts[i].X, pts[i].Y = float64(r.Run), y(r)
		}
		args = append(args, v.Name, pts)
	}
	return plotutil.AddLinePoints(p, args...)
}

// fpfnBars draws two bars per series: the mean FP and FN ratios over
// runs 2 and later (run 1 has no earlier run to repeat or miss).
func fpfnBars(p *plot.Plot, series []*VariantDIME) error {
	var fp, fn plotter.Values
	var names []string
	for _, v := range series {
		var sfp, sfn float64
		n := 0
		for _, r := range v.Runs[1:] {
			sfp += r.FalsePositive
			sfn += r.FalseNegative
			n++
		}
		if n > 0 {
			sfp /= float64(n)
			sfn /= float64(n)
		}
		fp, fn = append(fp, sfp), append(fn, sfn)
		names = append(names, v.Name)
	}
	w := vg.Points(14)
	b1, err := plotter.NewBarChart(fp, w)
	if err != nil {
		return err
	}
	b1.Color = plotutil.Color(0)
	b1.Offset = -w / 2
	b2, err := plotter.NewBarChart(fn, w)
	if err != nil {
		return err
	}
	b2.Color = plotutil.Color(1)
	b2.Offset = w / 2
	p.Add(b1, b2)
	p.Legend.Add("false positives", b1)
	p.Legend.Add("false negatives", b2)
	p.NominalX(names...)
	p.Y.Min = 0
	return nil
}
