package report

import (
	"bytes"
	"errors"
	"fmt"
	"html/template"
	"image/color"
	"math"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/font"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgsvg"
)

// Figure is a chart drawn with gonum/plot as inline SVG.
type Figure struct {
	ID      string
	Title   string
	Caption string
	Series  []string      // the names in the chart's legend, in order
	SVG     template.HTML // an <svg> element, no XML prolog
}

// SeriesAttr is the series names joined with "|" (the figure's
// data-series attribute, which tests and scripts can read).
func (f *Figure) SeriesAttr() string { return strings.Join(f.Series, "|") }

// Palette is the figures' colours, in the order series use them. They are
// saturated and distinct from the page's greys.
var Palette = []color.RGBA{
	{R: 0x1f, G: 0x6f, B: 0xb4, A: 0xff}, // blue
	{R: 0xe8, G: 0x74, B: 0x0c, A: 0xff}, // orange
	{R: 0x2e, G: 0x9a, B: 0x48, A: 0xff}, // green
	{R: 0xc8, G: 0x28, B: 0x3c, A: 0xff}, // red
	{R: 0x7b, G: 0x4f, B: 0xb0, A: 0xff}, // purple
	{R: 0x8c, G: 0x56, B: 0x3a, A: 0xff}, // brown
}

func colour(i int) color.Color { return Palette[i%len(Palette)] }

// Figure size: wide and short, so a figure and its caption fit a screen.
const (
	figWidth  = 7.2 * vg.Inch
	figHeight = 3.4 * vg.Inch
)

var sans = font.Font{Typeface: "Liberation", Variant: "Sans"}

// newPlot returns a plot with sans-serif text, a light grid and the legend
// at the top left.
func newPlot(xLabel, yLabel string) *plot.Plot {
	p := plot.New()
	p.Title.TextStyle.Font = font.From(sans, 12)
	for _, a := range []*plot.Axis{&p.X, &p.Y} {
		a.Label.TextStyle.Font = font.From(sans, 11)
		a.Tick.Label.Font = font.From(sans, 9.5)
		a.Color = color.RGBA{0x55, 0x5e, 0x6e, 0xff}
		a.Tick.Color = a.Color
		a.Label.TextStyle.Color = color.RGBA{0x2a, 0x30, 0x3c, 0xff}
		a.Tick.Label.Color = a.Label.TextStyle.Color
	}
	p.X.Label.Text, p.Y.Label.Text = xLabel, yLabel
	p.Legend.TextStyle.Font = font.From(sans, 10)
	p.Legend.Top = true
	p.Legend.Left = true
	p.Legend.XOffs = vg.Points(6)
	p.Legend.YOffs = -vg.Points(2)
	g := plotter.NewGrid()
	g.Vertical.Color = color.RGBA{0xe6, 0xe9, 0xee, 0xff}
	g.Horizontal.Color = g.Vertical.Color
	p.Add(g)
	return p
}

// svgOf draws p as an inline <svg> element. gonum/plot panics on some
// degenerate inputs; that is turned into an error here (a trust boundary:
// the data comes from trace files).
func svgOf(p *plot.Plot, label string) (svg template.HTML, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("draw %s: %v", label, r)
		}
	}()
	c := vgsvg.New(figWidth, figHeight)
	p.Draw(draw.New(c))
	var buf bytes.Buffer
	if _, err := c.WriteTo(&buf); err != nil {
		return "", err
	}
	s := buf.String()
	i := strings.Index(s, "<svg")
	if i < 0 {
		return "", errors.New("draw " + label + ": no <svg> element")
	}
	s = s[i:]
	// Browsers without Liberation Sans get a metric-compatible face.
	s = strings.ReplaceAll(s, "font-family:Liberation Sans;", "font-family:'Liberation Sans',Arimo,Arial,Helvetica,sans-serif;")
	s = strings.Replace(s, "<svg ", `<svg role="img" aria-label="`+template.HTMLEscapeString(label)+`" `, 1)
	return template.HTML(s), nil
}

type series struct {
	name   string
	pts    plotter.XYs
	dashed bool
	step   bool
	points bool
}

// lineFigure draws series as lines (with points when asked) in palette
// order.
func lineFigure(id, title, caption, xLabel, yLabel string, ss []series, setup func(*plot.Plot)) (*Figure, error) {
	p := newPlot(xLabel, yLabel)
	var names []string
	for i, s := range ss {
		if len(s.pts) == 0 {
			continue
		}
		l, err := plotter.NewLine(s.pts)
		if err != nil {
			return nil, fmt.Errorf("%s: %s: %w", title, s.name, err)
		}
		l.Color = colour(i)
		l.Width = vg.Points(2)
		if s.dashed {
			l.Dashes = []vg.Length{vg.Points(6), vg.Points(4)}
		}
		if s.step {
			l.StepStyle = plotter.PostStep
		}
		p.Add(l)
		if s.points {
			sc, err := plotter.NewScatter(s.pts)
			if err != nil {
				return nil, fmt.Errorf("%s: %s: %w", title, s.name, err)
			}
			sc.GlyphStyle.Color = colour(i)
			sc.GlyphStyle.Shape = draw.CircleGlyph{}
			sc.GlyphStyle.Radius = vg.Points(3)
			p.Add(sc)
			p.Legend.Add(s.name, l, sc)
		} else {
			p.Legend.Add(s.name, l)
		}
		names = append(names, s.name)
	}
	if setup != nil {
		setup(p)
	}
	svg, err := svgOf(p, title)
	if err != nil {
		return nil, err
	}
	return &Figure{ID: id, Title: title, Caption: caption, Series: names, SVG: svg}, nil
}

// CoverageFigure draws cumulative coverage over runs (DIME*'s Figure 6):
// x is the run number (1..), cumulative and perRun are fractions (0..1);
// perRun may be nil.
func CoverageFigure(id, title, caption string, cumulative, perRun []float64, yLabel string) (*Figure, error) {
	if len(cumulative) == 0 {
		return nil, errors.New("coverage figure: no runs")
	}
	pts := func(v []float64) plotter.XYs {
		out := make(plotter.XYs, len(v))
		for i, f := range v {
			out[i].X, out[i].Y = float64(i+1), 100*f
		}
		return out
	}
	ss := []series{{name: "cumulative", pts: pts(cumulative), points: true}}
	if perRun != nil {
		ss = append(ss, series{name: "this run alone", pts: pts(perRun), dashed: true, points: true})
	}
	return lineFigure(id, title, caption, "run", yLabel, ss, func(p *plot.Plot) {
		p.Y.Min, p.Y.Max = 0, 105
		p.X.Min, p.X.Max = 0.5, float64(len(cumulative))+0.5
		p.X.Tick.Marker = integerTicks{}
		p.Legend.Top, p.Legend.Left = false, false
		p.Legend.YOffs = vg.Points(6)
		p.Legend.XOffs = -vg.Points(6)
	})
}

// integerTicks marks whole numbers only (runs are numbered).
type integerTicks struct{}

func (integerTicks) Ticks(min, max float64) []plot.Tick {
	lo, hi := math.Ceil(min), math.Floor(max)
	step := math.Max(1, math.Ceil((hi-lo+1)/12))
	var ts []plot.Tick
	for v := lo; v <= hi; v += step {
		ts = append(ts, plot.Tick{Value: v, Label: fmt.Sprintf("%.0f", v)})
	}
	return ts
}

// HistogramFigure draws a histogram of values (e.g. overshoots in µs),
// counting yLabel (e.g. periods) per bin.
func HistogramFigure(id, title, caption, xLabel, yLabel, name string, values []float64) (*Figure, error) {
	if len(values) == 0 {
		return nil, errors.New("histogram: no values")
	}
	bins := int(math.Ceil(math.Sqrt(float64(len(values))))) + 1
	bins = max(4, min(bins, 30))
	h, err := plotter.NewHist(plotter.Values(values), bins)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", title, err)
	}
	h.FillColor = colour(3)
	h.LineStyle.Color = color.White
	h.LineStyle.Width = vg.Points(0.75)
	p := newPlot(xLabel, yLabel)
	p.Add(h)
	p.Legend.Add(name, h)
	p.Legend.Left = false
	p.Y.Min = 0
	svg, err := svgOf(p, title)
	if err != nil {
		return nil, err
	}
	return &Figure{ID: id, Title: title, Caption: caption, Series: []string{name}, SVG: svg}, nil
}

// timeBase is where a run's time axis starts: its start (mono_start_ns)
// when known, else its first period's start.
func timeBase(r *RunData) uint64 {
	if s := r.Info.MonoStartNS; s != 0 && (len(r.Periods) == 0 || s <= r.Periods[0].Start) {
		return s
	}
	if len(r.Periods) > 0 {
		return r.Periods[0].Start
	}
	return r.FirstNS
}

func secondsSince(t, base uint64) float64 {
	if t < base {
		return -float64(base-t) / 1e9
	}
	return float64(t-base) / 1e9
}

// BudgetFigure draws a run's budget granted and used per period over time
// (and the budget a QoS controller computed, when there is one). It
// returns nil when the run has no budget periods.
func BudgetFigure(id string, r *RunData) (*Figure, error) {
	base := timeBase(r)
	var granted, used, computed plotter.XYs
	for _, p := range r.Periods {
		x := secondsSince(p.Start, base)
		if p.HasBudget {
			granted = append(granted, plotter.XY{X: x, Y: float64(p.Granted) / 1e6})
			used = append(used, plotter.XY{X: x, Y: float64(p.Used) / 1e6})
		}
		if p.HasQoS {
			computed = append(computed, plotter.XY{X: x, Y: float64(p.QoSBudget) / 1e6})
		}
	}
	if len(granted) == 0 {
		return nil, nil
	}
	// The last grant lasts a whole period.
	if r.Info.PeriodNS > 0 {
		last := granted[len(granted)-1]
		granted = append(granted, plotter.XY{X: last.X + float64(r.Info.PeriodNS)/1e9, Y: last.Y})
	}
	ss := []series{
		{name: "granted", pts: granted, step: true},
		{name: "used", pts: used, points: len(used) <= 200},
	}
	if len(computed) > 0 {
		ss = append(ss, series{name: "computed by QoS", pts: computed, dashed: true})
	}
	caption := fmt.Sprintf("Each period of %s (every %s) is granted a budget of instrumentation time (step line); the points are the time its probes actually used, measured with the time-stamp counter. A point above the line is an overshoot: the probe call that spent the budget finished after the grant ran out. A point a little under it can be a period whose gate closed early, keeping a reserve for the switching that follows the close.",
		r.Label(), fmtNS(r.Info.PeriodNS))
	if len(computed) > 0 {
		caption += " The dashed line is the budget the QoS controller computed from the metric."
	}
	return lineFigure(id, "Budget per period: "+r.Label(), caption, "time since start (s)", "instrumentation time (ms)", ss, func(p *plot.Plot) {
		p.Y.Min = 0
		p.Y.Max *= 1.4 // room for the legend above the lines
	})
}

// QoSFigure draws a run's QoS metric against its threshold over time. It
// returns nil when the run has no QoS rows.
func QoSFigure(id string, r *RunData) (*Figure, error) {
	base := timeBase(r)
	var metric, threshold plotter.XYs
	for _, p := range r.Periods {
		if !p.HasQoS || math.IsNaN(p.Metric) || math.IsInf(p.Metric, 0) || math.IsNaN(p.Threshold) || math.IsInf(p.Threshold, 0) {
			continue
		}
		x := secondsSince(p.Start, base)
		metric = append(metric, plotter.XY{X: x, Y: p.Metric})
		threshold = append(threshold, plotter.XY{X: x, Y: p.Threshold})
	}
	if len(metric) == 0 {
		return nil, nil
	}
	ss := []series{
		{name: "metric", pts: metric, points: len(metric) <= 200},
		{name: "threshold", pts: threshold, dashed: true, step: true},
	}
	caption := fmt.Sprintf("The QoS metric of %s as the analyzer reported it at each period's start, against the threshold the controller steers by; the controller sets the next budget from their distance (QDIME).", r.Label())
	return lineFigure(id, "QoS metric: "+r.Label(), caption, "time since start (s)", "metric", ss, func(p *plot.Plot) {
		p.Y.Max += (p.Y.Max - p.Y.Min) * 0.35
	})
}

// fmtNS formats a duration in ns for people: "850 ns", "12.5 µs",
// "3.20 ms", "1.234 s".
func fmtNS(ns uint64) string {
	switch {
	case ns == 0:
		return "0"
	case ns < 1e3:
		return fmt.Sprintf("%d ns", ns)
	case ns < 1e6:
		return fmt.Sprintf("%.1f µs", float64(ns)/1e3)
	case ns < 1e9:
		return fmt.Sprintf("%.2f ms", float64(ns)/1e6)
	}
	return fmt.Sprintf("%.3f s", float64(ns)/1e9)
}
