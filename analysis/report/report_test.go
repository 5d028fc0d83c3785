package report

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"image/color"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stint-project/stint/analysis/merge"
	"github.com/stint-project/stint/analysis/report/browsertest"
	"github.com/stint-project/stint/formats"
	"github.com/stint-project/stint/internal/progress"
	"golang.org/x/net/html"
)

// page is a parsed report page.
type page struct {
	root *html.Node
	text string // all text, space-joined
}

func parsePage(t testing.TB, b []byte) *page {
	t.Helper()
	root, err := html.Parse(bytes.NewReader(b))
	if err != nil {
		t.Fatalf("parse page: %v", err)
	}
	p := &page{root: root}
	var sb strings.Builder
	walk(root, func(n *html.Node) {
		if n.Type == html.TextNode {
			sb.WriteString(n.Data)
			sb.WriteByte(' ')
		}
	})
	p.text = strings.Join(strings.Fields(sb.String()), " ")
	return p
}

func walk(n *html.Node, f func(*html.Node)) {
	f(n)
	for c := n.FirstChild; c != nil; c = c.NextSibling {
		walk(c, f)
	}
}

func attr(n *html.Node, key string) (string, bool) {
	for _, a := range n.Attr {
		if a.Key == key {
			return a.Val, true
		}
	}
	return "", false
}

func hasClass(n *html.Node, class string) bool {
	v, _ := attr(n, "class")
	return slices.Contains(strings.Fields(v), class)
}

func (p *page) find(pred func(*html.Node) bool) []*html.Node {
	var out []*html.Node
	walk(p.root, func(n *html.Node) {
		if n.Type == html.ElementNode && pred(n) {
			out = append(out, n)
		}
	})
	return out
}

// figure is a figure element of the page, its inline SVG and the text
// drawn in the SVG.
type figure struct {
	id     string
	series []string
	svg    *html.Node
	text   string
}

// figures returns the page's figures; each must hold exactly one inline
// SVG that draws every series name of its data-series (in its legend).
func (p *page) figures(t testing.TB) map[string]figure {
	t.Helper()
	out := map[string]figure{}
	for _, n := range p.find(func(n *html.Node) bool { return n.Data == "figure" && hasClass(n, "figure") }) {
		var f figure
		f.id, _ = attr(n, "id")
		s, _ := attr(n, "data-series")
		if s != "" {
			f.series = strings.Split(s, "|")
		}
		var svgs []*html.Node
		walk(n, func(c *html.Node) {
			if c.Type == html.ElementNode && c.Data == "svg" {
				svgs = append(svgs, c)
			}
		})
		if len(svgs) != 1 {
			t.Errorf("figure %q has %d <svg> elements, want 1", f.id, len(svgs))
			continue
		}
		f.svg = svgs[0]
		var sb strings.Builder
		walk(f.svg, func(c *html.Node) {
			if c.Type == html.ElementNode && c.Data == "text" && c.FirstChild != nil {
				sb.WriteString(c.FirstChild.Data + "\n")
			}
		})
		f.text = sb.String()
		for _, name := range f.series {
			if !strings.Contains(f.text, name+"\n") {
				t.Errorf("figure %q: series %q is not drawn in its SVG (texts: %q)", f.id, name, f.text)
			}
		}
		// The lines and points use the palette.
		svg := strings.ToLower(renderNode(f.svg))
		if !slices.ContainsFunc(Palette[:4], func(c color.RGBA) bool { return strings.Contains(svg, fmt.Sprintf("#%02x%02x%02x", c.R, c.G, c.B)) }) {
			t.Errorf("figure %q: no palette colour in its SVG", f.id)
		}
		if _, dup := out[f.id]; dup {
			t.Errorf("two figures with id %q", f.id)
		}
		out[f.id] = f
	}
	return out
}

func renderNode(n *html.Node) string {
	var b bytes.Buffer
	html.Render(&b, n)
	return b.String()
}

// selfContained fails t if the page loads anything: scripts, style
// sheets, images, frames, fetches from CSS, or links off the page.
func selfContained(t testing.TB, p *page) {
	t.Helper()
	for _, n := range p.find(func(n *html.Node) bool { return true }) {
		switch n.Data {
		case "script", "link", "img", "iframe", "object", "embed", "video", "audio", "image":
			t.Errorf("page has a <%s> element", n.Data)
		}
		for _, a := range n.Attr {
			if a.Key == "src" || a.Key == "srcset" || strings.HasSuffix(a.Key, "href") && !strings.HasPrefix(a.Val, "#") && n.Data != "a" {
				t.Errorf("<%s %s=%q> loads something", n.Data, a.Key, a.Val)
			}
		}
		if n.Data == "style" && n.FirstChild != nil {
			css := n.FirstChild.Data
			if strings.Contains(css, "url(") || strings.Contains(css, "@import") {
				t.Error("the page's CSS fetches something")
			}
		}
	}
}

func writeAuto(t *testing.T, runs []string, opts AutoOptions) ([]byte, *Document) {
	t.Helper()
	d, err := Auto(context.Background(), runs, opts)
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := d.WriteHTML(&b); err != nil {
		t.Fatal(err)
	}
	return b.Bytes(), d
}

func TestAuto(t *testing.T) {
	dir := t.TempDir()
	runs, full := synthTraces(t, dir)
	b, d := writeAuto(t, runs, AutoOptions{Full: full, NativeNS: 30_000_000})
	p := parsePage(t, b)
	selfContained(t, p)
	figs := p.figures(t)
	want := map[string][]string{
		"fig-coverage":  {"cumulative", "this run alone"},
		"fig-budget-1":  {"granted", "used"},
		"fig-budget-2":  {"granted", "used", "computed by QoS"},
		"fig-budget-3":  {"granted", "used"},
		"fig-qos-1":     {"metric", "threshold"},
		"fig-overshoot": {"periods over budget"},
	}
	for id, series := range want {
		f, ok := figs[id]
		if !ok {
			t.Errorf("no figure %q", id)
			continue
		}
		if !slices.Equal(f.series, series) {
			t.Errorf("figure %q: have series %q, want %q", id, f.series, series)
		}
	}
	if len(figs) != len(want) {
		var have []string
		for id := range figs {
			have = append(have, id)
		}
		t.Errorf("have figures %q, want %d", have, len(want))
	}
	// Headline numbers: 35 of 40 events after 3 runs; run 1 alone 10 of
	// 40; overshoots: run 1 two, run 2 two, run 3 one of 12 periods.
	for _, s := range []string{
		"87.5% coverage after 3 runs 35 of 40 distinct events",
		"25.0% first run alone",
		"5 / 12 periods overshot",
		"5 of 12 periods overshot",
		"3 / 5 QoS periods at or under threshold",
		// slowdowns: run 1 40 ms, run 2 52 ms (run-end), run 3 its span
		// (20 ms), native 30 ms; median 40/30.
		"1.33× median slowdown vs native",
		"run3.arrow 20.00 ms trace time span 0.40× 0.67×",
		"run1.arrow 40.00 ms run-end record 0.80× 1.33×",
		"1 of these times are trace time spans",
		// least covered function first: the fourth page, events 30..39,
		// of which 30..34 were recorded.
		"0x4000-0x4fff demo 5 10 50.0%",
		// periods per run: run 1's two overshoots closed their gates;
		// run 3's first and last closed early (close rows, 40 and 50 µs
		// unspent), its second used its grant: unspent 0, 40, 50 µs.
		"run1.arrow 4 10.00 ms 1.00 ms 680.1 µs 2 0 12 4",
		"run3.arrow 3 10.00 ms 1.00 ms 973.0 µs 3 40.0 µs 9 3",
	} {
		if !strings.Contains(p.text, s) {
			t.Errorf("page text lacks %q", s)
		}
	}
	if d.Title != "stint report: demo" {
		t.Errorf("title %q", d.Title)
	}
	// Each figure has a caption that explains it.
	for _, n := range p.find(func(n *html.Node) bool { return n.Data == "figure" && hasClass(n, "figure") }) {
		var caps int
		walk(n, func(c *html.Node) {
			if c.Type == html.ElementNode && c.Data == "figcaption" {
				caps++
			}
		})
		if id, _ := attr(n, "id"); caps != 1 {
			t.Errorf("figure %q has %d captions", id, caps)
		}
	}

	out := filepath.Join(dir, "report.html")
	if err := os.WriteFile(out, b, 0o644); err != nil {
		t.Fatal(err)
	}
	browsertest.Check(t, out, 1100, 7000, 200, map[string]color.RGBA{
		"blue (coverage, granted)": Palette[0], "orange (used)": Palette[1], "red (overshoot bars)": Palette[3],
	})
}

func TestAutoWithoutFull(t *testing.T) {
	dir := t.TempDir()
	runs, _ := synthTraces(t, dir)
	// Runs 1 and 3: no QoS, no full run.
	b, _ := writeAuto(t, []string{runs[0], runs[2]}, AutoOptions{})
	p := parsePage(t, b)
	selfContained(t, p)
	figs := p.figures(t)
	if f, ok := figs["fig-coverage"]; !ok || !strings.Contains(p.text, "Cumulative distinct events") {
		t.Errorf("no coverage figure against the union (figures %v)", figs)
	} else if !slices.Equal(f.series, []string{"cumulative", "this run alone"}) {
		t.Errorf("coverage series %q", f.series)
	}
	for _, s := range []string{
		// the sections without data are named in one line, not shown
		"Not shown",
		"QoS (no metric analyzer drove the budget: qos run)",
		"least covered functions (give the full run: --full FULL.arrow)",
		// runs 1 (events 0..9) and 3 (15..34): 30 distinct together
		"30 distinct events in 2 runs",
	} {
		if !strings.Contains(p.text, s) {
			t.Errorf("page text lacks %q", s)
		}
	}
	for _, s := range []string{"No QoS data.", "QoS metric against threshold", "Least covered functions"} {
		if strings.Contains(p.text, s) {
			t.Errorf("page text has %q: a section without data", s)
		}
	}
	if _, ok := figs["fig-qos-1"]; ok {
		t.Error("a QoS figure without QoS data")
	}
}

func TestAutoNoBudget(t *testing.T) {
	dir := t.TempDir()
	_, full := synthTraces(t, dir)
	b, _ := writeAuto(t, []string{full}, AutoOptions{})
	p := parsePage(t, b)
	for _, s := range []string{"budget per period (traced without a budget: rewrite --budget)", "overshoot (no budget periods)", "none budget"} {
		if !strings.Contains(p.text, s) {
			t.Errorf("page text lacks %q", s)
		}
	}
	for _, s := range []string{"Budget per period", "Overshoot"} {
		if strings.Contains(p.text, s) {
			t.Errorf("page text has %q: a section without data", s)
		}
	}
	// one run and no full run: no coverage curve of one point either
	if figs := p.figures(t); len(figs) != 0 {
		t.Errorf("%d figures, want none", len(figs))
	}
	if !strings.Contains(p.text, "One run and no full run") {
		t.Errorf("page text lacks the one-run note")
	}
}

func TestAutoBadInput(t *testing.T) {
	dir := t.TempDir()
	runs, full := synthTraces(t, dir)
	junk := filepath.Join(dir, "junk.arrow")
	os.WriteFile(junk, []byte("this is not an arrow stream at all"), 0o644)
	empty := filepath.Join(dir, "empty.arrow")
	os.WriteFile(empty, nil, 0o644)
	for _, tc := range []struct {
		name  string
		runs  []string
		full  string
		wantE string
	}{
		{"junk", []string{junk}, "", "junk.arrow"},
		{"empty", []string{empty}, "", "empty.arrow"},
		{"missing", []string{filepath.Join(dir, "nope.arrow")}, "", "nope.arrow"},
		{"junk full", runs, junk, "junk.arrow"},
		{"none", nil, "", "no traces"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Auto(context.Background(), tc.runs, AutoOptions{Full: tc.full})
			if err == nil || !strings.Contains(err.Error(), tc.wantE) {
				t.Errorf("have error %v, want one naming %q", err, tc.wantE)
			}
		})
	}

	// A trace cut inside a batch is shown up to the cut, with a warning.
	data, err := os.ReadFile(runs[0])
	if err != nil {
		t.Fatal(err)
	}
	cut := filepath.Join(dir, "cut.arrow")
	os.WriteFile(cut, data[:len(data)-60], 0o644)
	b, _ := writeAuto(t, []string{cut}, AutoOptions{})
	p := parsePage(t, b)
	if !strings.Contains(p.text, "cut.arrow was cut short") {
		t.Errorf("no warning about the cut trace in %q", p.text[:min(len(p.text), 400)])
	}
	_ = full
}

func TestParseCell(t *testing.T) {
	for _, tc := range []struct {
		info, body string
		want       []string
		err        bool
	}{
		{"cov compare a.arrow b.arrow", "", []string{"cov", "compare", "a.arrow", "b.arrow"}, false},
		{"plot coverage", "# runs\n  r1.arrow r2.arrow\n\nr3.arrow\n", []string{"plot", "coverage", "r1.arrow", "r2.arrow", "r3.arrow"}, false},
		{`trace stats 'a b.arrow' "c \"d\".arrow"`, "", []string{"trace", "stats", "a b.arrow", `c "d".arrow`}, false},
		{`x ''`, "", []string{"x", ""}, false},
		{`x 'open`, "", nil, true},
		{`x "open`, "", nil, true},
		{"", "", nil, false},
	} {
		have, err := ParseCell(tc.info, tc.body)
		if (err != nil) != tc.err || !slices.Equal(have, tc.want) {
			t.Errorf("ParseCell(%q, %q): have %q, %v; want %q, error %v", tc.info, tc.body, have, err, tc.want, tc.err)
		}
	}
}

const notebook = "# Gzip under a budget\n\n" +
	"Some *markdown*, a [link](#coverage) and a table:\n\n| a | b |\n|---|---|\n| 1 | 2 |\n\n" +
	"```stint cov compare run*.arrow full.arrow --functions 2\n```\n\n" +
	"```stint plot coverage --full full.arrow\n# the runs, in order\nrun1.arrow run2.arrow\nrun3.arrow\n```\n\n" +
	"```stint plot budget run2.arrow\n```\n\n" +
	"```stint plot qos run2.arrow\n```\n\n" +
	"```stint plot qos run1.arrow\n```\n\n" +
	"```stint plot overshoot run*.arrow\n```\n\n" +
	"```stint trace stats run1.arrow full.arrow\n```\n\n" +
	"```sh\necho <b>not a cell</b>\n```\n\n" +
	"```stint cov compare missing.arrow full.arrow\n```\n\n" +
	"```stint frobnicate now\n```\n\n" +
	"<script>alert(1)</script>\n\nThe end.\n"

func TestNotebook(t *testing.T) {
	dir := t.TempDir()
	synthTraces(t, dir)
	d, err := RenderNotebook(context.Background(), []byte(notebook), NotebookOptions{Dir: dir, Name: "nb.md"})
	var cf *CellsFailedError
	if !errors.As(err, &cf) {
		t.Fatalf("have error %v, want a *CellsFailedError", err)
	}
	if d == nil {
		t.Fatal("no document with the failed cells")
	}
	var lines []int
	for _, c := range cf.Cells {
		lines = append(lines, c.Line)
	}
	if !slices.Equal(lines, []int{37, 40}) {
		t.Errorf("failed cells at lines %v, want [37 40] (%v)", lines, err)
	}
	var b bytes.Buffer
	if err := d.WriteHTML(&b); err != nil {
		t.Fatal(err)
	}
	p := parsePage(t, b.Bytes())
	selfContained(t, p)
	figs := p.figures(t)
	want := map[string][]string{
		"cell2-fig-coverage":  {"cumulative", "this run alone"},
		"cell3-fig-budget-1":  {"granted", "used", "computed by QoS"},
		"cell4-fig-qos-1":     {"metric", "threshold"},
		"cell6-fig-overshoot": {"periods over budget"},
	}
	for id, series := range want {
		if f, ok := figs[id]; !ok || !slices.Equal(f.series, series) {
			t.Errorf("figure %q: have %v (present %v), want series %q", id, f.series, ok, series)
		}
	}
	if len(figs) != len(want) {
		t.Errorf("%d figures, want %d", len(figs), len(want))
	}
	for _, s := range []string{
		"87.5% coverage after 3 runs",
		"0x4000-0x4fff demo 5 10 50.0%",
		"The 2 least covered of 4 functions.",
		"No QoS data.",
		"run1.arrow demo 101 branch end-of-stream marker 10 10 9",
		"echo <b>not a cell</b>",
		"This cell failed: open " + filepath.Join(dir, "missing.arrow"),
		`This cell failed: unknown cell command "frobnicate now"`,
		"The end.",
	} {
		if !strings.Contains(p.text, s) {
			t.Errorf("page text lacks %q", s)
		}
	}
	if d.Title != "Gzip under a budget" {
		t.Errorf("title %q, want the notebook's heading", d.Title)
	}
	if n := len(p.find(func(n *html.Node) bool { return n.Data == "table" })); n < 6 {
		t.Errorf("%d tables, want the markdown one and the cells' (at least 6)", n)
	}
	if n := len(p.find(func(n *html.Node) bool { return hasClass(n, "cell-failed") })); n != 2 {
		t.Errorf("%d failed cells in the page, want 2", n)
	}
	out := filepath.Join(dir, "nb.html")
	os.WriteFile(out, b.Bytes(), 0o644)
	browsertest.Check(t, out, 1000, 7000, 200, map[string]color.RGBA{"blue": Palette[0], "orange": Palette[1], "green (QoS budget)": Palette[2]})
}

// TestNotebookCellsPlugIn: a command added through NotebookOptions.Cells
// runs; the longest name wins.
func TestNotebookCellsPlugIn(t *testing.T) {
	var got [][]string
	cmds := append(DefaultCells(),
		CellCommand{Name: "mytool", Run: func(_ context.Context, _ *CellEnv, args []string) ([]Block, error) {
			got = append(got, append([]string{"mytool"}, args...))
			return []Block{&Paragraph{Text: "tree"}}, nil
		}},
		CellCommand{Name: "mytool compare", Run: func(_ context.Context, _ *CellEnv, args []string) ([]Block, error) {
			got = append(got, append([]string{"mytool compare"}, args...))
			return []Block{&Table{Columns: []Column{{Name: "node"}}, Rows: [][]Cell{{Text("main")}}}}, nil
		}},
		// Overrides the default of the same name.
		CellCommand{Name: "trace stats", Run: func(_ context.Context, _ *CellEnv, args []string) ([]Block, error) {
			got = append(got, append([]string{"trace stats"}, args...))
			return nil, nil
		}})
	src := "```stint mytool build a.arrow\n```\n```stint mytool compare x y\n```\n```stint trace stats z\n```\n"
	d, err := RenderNotebook(context.Background(), []byte(src), NotebookOptions{Cells: cmds})
	if err != nil {
		t.Fatal(err)
	}
	want := [][]string{{"mytool", "build", "a.arrow"}, {"mytool compare", "x", "y"}, {"trace stats", "z"}}
	if !slices.EqualFunc(got, want, slices.Equal) {
		t.Errorf("have calls %q, want %q", got, want)
	}
	if !strings.Contains(string(d.Body), "<td>main</td>") {
		t.Errorf("body lacks the plugged-in cell's table: %s", d.Body)
	}
}

func FuzzParseCell(f *testing.F) {
	f.Add("cov compare a b", "c\n# x\n'd e'")
	f.Add(`x "a\"b" 'c`, "")
	f.Fuzz(func(t *testing.T, info, body string) {
		words, err := ParseCell(info, body)
		if err == nil && len(words) > len(info)+len(body) {
			t.Errorf("%d words from %d bytes", len(words), len(info)+len(body))
		}
	})
}

// FuzzRenderNotebook: any markdown renders without panicking; cells with
// no commands registered fail cleanly.
func FuzzRenderNotebook(f *testing.F) {
	f.Add(notebook)
	f.Add("# t\n```stint\n```\n~~~stint x 'y\n~~~\n")
	f.Fuzz(func(t *testing.T, src string) {
		d, err := RenderNotebook(context.Background(), []byte(src), NotebookOptions{Cells: []CellCommand{}})
		var cf *CellsFailedError
		if err != nil && !errors.As(err, &cf) {
			t.Fatalf("error %v", err)
		}
		var b bytes.Buffer
		if err := d.WriteHTML(&b); err != nil {
			t.Fatal(err)
		}
		if strings.Contains(b.String(), "<script") {
			t.Error("a script element got into the page")
		}
	})
}

// TestMergedAndProgress: a merged trace's runs count as runs, in order,
// and reading draws progress on a terminal.
func TestMergedAndProgress(t *testing.T) {
	dir := t.TempDir()
	runs, full := synthTraces(t, dir)
	merged := filepath.Join(dir, "runs.arrow")
	f, err := os.Create(merged)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := merge.Merge(context.Background(), f, runs); err != nil {
		t.Fatal(err)
	}
	f.Close()
	var prog bytes.Buffer
	l := NewLoader()
	l.Progress = progress.New(&prog, "reading", progress.Terminal(true), progress.Interval(0), progress.Bytes())
	rd, err := l.LoadFiles(context.Background(), []string{merged})
	if err != nil {
		t.Fatal(err)
	}
	var labels []string
	for _, r := range rd {
		labels = append(labels, r.Label())
	}
	if want := []string{"runs.arrow#0", "runs.arrow#1", "runs.arrow#2"}; !slices.Equal(labels, want) {
		t.Errorf("labels %q, want %q", labels, want)
	}
	if cum, union := l.Cumulative(); !slices.Equal(cum, []int{10, 15, 35}) || union != 35 {
		t.Errorf("cumulative %v of %d, want [10 15 35] of 35", cum, union)
	}
	if ns, fromEnd := rd[2].TimeNS(); fromEnd || ns == 0 {
		t.Errorf("run 3 (no run-end row): time %d from end %v; want its span", ns, fromEnd)
	}
	if ns, fromEnd := rd[1].TimeNS(); !fromEnd || ns != 52_000_000 {
		t.Errorf("run 2: time %d from end %v; want 52 ms from its run-end row", ns, fromEnd)
	}
	if !strings.Contains(prog.String(), "100%") || !strings.Contains(prog.String(), "reading runs.arrow") {
		t.Errorf("progress %q, want the file's name and 100%%", prog.String())
	}
	// The merged file gives the report of the three files.
	b, _ := writeAuto(t, []string{merged}, AutoOptions{Full: full})
	if p := parsePage(t, b); !strings.Contains(p.text, "87.5% coverage after 3 runs") {
		t.Error("the merged runs' report lacks 87.5% after 3 runs")
	}
}

func TestCCTCells(t *testing.T) {
	dir := t.TempDir()
	run := synthRun(5, false)
	run.Tool = "call"
	ev := func(k formats.Kind, tm, src, dst uint64) formats.Event {
		return formats.Event{Kind: k, TID: 1, Time: tm, Src: src, Dst: dst}
	}
	// main (0x1000) calls f (0x2000), which calls g (0x3000) and returns;
	// the second trace lacks the call of g.
	full := []formats.Event{ev(formats.KindCall, 1, 0x1010, 0x2000), ev(formats.KindCall, 2, 0x2010, 0x3000),
		ev(formats.KindRet, 3, 0x3010, 0x2015), ev(formats.KindRet, 4, 0x2020, 0x1015)}
	writeSynth(t, filepath.Join(dir, "a.arrow"), run, full)
	writeSynth(t, filepath.Join(dir, "b.arrow"), run, []formats.Event{full[0], full[3]})
	src := "```stint cct build a.arrow\n```\n\n```stint cct compare b.arrow a.arrow\n```\n"
	d, err := RenderNotebook(context.Background(), []byte(src), NotebookOptions{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	d.WriteHTML(&b)
	p := parsePage(t, b.Bytes())
	for _, s := range []string{
		"2 contexts 2 edges", "0 unmatched returns",
		"demo+0x2000 → demo+0x3000 2 1",
		"50.0% node coverage 1 of 2 contexts",
		"Largest missing subtrees",
	} {
		if !strings.Contains(p.text, s) {
			t.Errorf("page text lacks %q", s)
		}
	}
}

// TestExampleNotebook: testdata/example.md renders without failed cells
// on traces laid out as scripts/demo.sh leaves them.
func TestExampleNotebook(t *testing.T) {
	src, err := os.ReadFile("testdata/example.md")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	runs, full := synthTraces(t, t.TempDir())
	for name, from := range map[string]string{"full": full, "run1": runs[0], "run2": runs[1]} {
		os.Mkdir(filepath.Join(dir, name), 0o755)
		b, _ := os.ReadFile(from)
		os.WriteFile(filepath.Join(dir, name, "demo.1.2.arrow"), b, 0o644)
	}
	d, err := RenderNotebook(context.Background(), src, NotebookOptions{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	d.WriteHTML(&b)
	p := parsePage(t, b.Bytes())
	// Coverage, run 1's budget and the overshoots; run 1 has no QoS rows.
	if figs := p.figures(t); len(figs) != 3 || !strings.Contains(p.text, "No QoS data.") {
		t.Errorf("%d figures, want 3 (coverage, budget, overshoot) and no QoS data", len(figs))
	}
	// Runs 1 and 2 recorded events 0..14 of the full run's 40.
	if !strings.Contains(p.text, "37.5% coverage after 2 runs 15 of 40 distinct events") {
		t.Errorf("page lacks the coverage after 2 runs")
	}
}

// TestAutoSampled: a sampled run (rewrite --sample) gets its estimated
// calls: a reservoir per function counts 1000 calls of 0x2000 exactly,
// and the top caller's share comes from the samples (3 of 5).
func TestAutoSampled(t *testing.T) {
	dir := t.TempDir()
	run := synthRun(42, false)
	run.Tool, run.Options = "call", "tool=call every=1 sample=reservoir:20%"
	smp := func(src uint64) formats.Event {
		return formats.Event{Kind: formats.KindSampledBase + formats.KindCall, TID: 7, Time: 3e9, Src: src, Dst: 0x2000}
	}
	path := filepath.Join(dir, "sampled.arrow")
	writeSynth(t, path, run, []formats.Event{
		{Kind: formats.KindSampleRun, Time: 2e9, SrcModule: formats.NoModule, DstModule: formats.NoModule, Src: formats.SampleReservoir, Dst: 200000, Value: 1e9},
		smp(0x1130), smp(0x1130), smp(0x1130), smp(0x3150), smp(0x3150),
		{Kind: formats.KindSampleSet, Time: 3e9, SrcModule: 0, Src: 0x2000, DstModule: formats.NoModule, Dst: 1000, Value: 5},
	})
	b, _ := writeAuto(t, []string{path}, AutoOptions{})
	p := parsePage(t, b)
	for _, s := range []string{"Estimated calls (sampled runs)", "1 sampled run", "1000", "exact", "(60.0%)"} {
		if !strings.Contains(p.text, s) {
			t.Errorf("page text lacks %q", s)
		}
	}
	b, _ = writeAuto(t, synthRunsOnly(t), AutoOptions{})
	if p := parsePage(t, b); !strings.Contains(p.text, "estimated calls (no sampled run)") {
		t.Errorf("an unsampled report does not say why it has no estimated calls")
	}
}

func synthRunsOnly(t *testing.T) []string {
	runs, _ := synthTraces(t, t.TempDir())
	return runs
}

// TestAutoCounts reports a block-count trace (rewrite --tool block
// --counts): functions and blocks by executions, the rows' differences
// summed, and no coverage claims.
func TestAutoCounts(t *testing.T) {
	dir := t.TempDir()
	run := synthRun(42, false)
	run.Tool, run.Options = "block", "tool=block every=0 counts=1"
	var rows []formats.Event
	for p := uint64(0); p < 3; p++ { // three periods' rows: counts that moved
		for b := uint64(0); b < 4; b++ {
			rows = append(rows, formats.Event{Kind: formats.KindBlockCount, Time: monoStart + p*1e9, Src: 0x1000 + b*0x1000, DstModule: formats.NoModule,
				Dst: (b + 1) * 100, Value: (p + 1) * (b + 1) * 100})
		}
	}
	path := filepath.Join(dir, "counts.arrow")
	writeSynth(t, path, run, rows)
	b, _ := writeAuto(t, []string{path}, AutoOptions{})
	p := parsePage(t, b)
	for _, s := range []string{"Where execution goes", "3000 in all, 4 blocks ran", "3000 block executions counted 4 blocks ran", "0x4000 demo 1 1200 40.0%"} {
		if !strings.Contains(p.text, s) {
			t.Errorf("page text lacks %q", s)
		}
	}
	if strings.Contains(p.text, "block executions (no block counts") {
		t.Errorf("counts listed as not shown")
	}
	if _, ok := p.figures(t)["fig-counts"]; !ok {
		t.Errorf("no figure of blocks by executions")
	}
	out := filepath.Join(dir, "report.html")
	if err := os.WriteFile(out, b, 0o644); err != nil {
		t.Fatal(err)
	}
	browsertest.Check(t, out, 1100, 3000, 0, nil)
}

// TestAutoSyscalls reports a syscall trace (rewrite --tool syscall
// --every): the calls by name and their timeline, loaded in Chromium.
func TestAutoSyscalls(t *testing.T) {
	dir := t.TempDir()
	run := synthRun(43, false)
	run.Tool, run.Options = "syscall", "tool=syscall every=1"
	var rows []formats.Event
	for i := uint64(0); i < 600; i++ {
		nr := uint64(0) // read
		if i%3 == 0 {
			nr = 1 // write
		}
		rows = append(rows, formats.Event{Kind: formats.KindSyscall, TID: 43, Time: monoStart + i*2_000_000, Src: 0x1000 + nr*0x10,
			DstModule: formats.NoModule, Value: nr})
	}
	path := filepath.Join(dir, "sys.arrow")
	writeSynth(t, path, run, rows)
	b, _ := writeAuto(t, []string{path}, AutoOptions{})
	p := parsePage(t, b)
	for _, s := range []string{"System calls", "read 0 400", "write 1 200"} {
		if !strings.Contains(p.text, s) {
			t.Errorf("page text lacks %q", s)
		}
	}
	if _, ok := p.figures(t)["fig-syscalls"]; !ok {
		t.Errorf("no timeline of system calls")
	}
	out := filepath.Join(dir, "report.html")
	if err := os.WriteFile(out, b, 0o644); err != nil {
		t.Fatal(err)
	}
	browsertest.Check(t, out, 1100, 3000, 0, nil)
}

// TestAutoSelfTimes reports a call trace whose calls and returns carry
// their own times (--every rows): the functions by self time, loaded in
// Chromium.
func TestAutoSelfTimes(t *testing.T) {
	dir := t.TempDir()
	run := synthRun(44, false)
	run.Tool, run.Options = "call", "tool=call every=1"
	var rows []formats.Event
	at := uint64(monoStart)
	for i := uint64(0); i < 50; i++ { // 0x2000 calls 0x3000: 10 us in each, 30 us in the callee
		rows = append(rows,
			formats.Event{Kind: formats.KindCall, TID: 44, Time: at, Src: 0x1010, Dst: 0x2000},
			formats.Event{Kind: formats.KindCall, TID: 44, Time: at + 10_000, Src: 0x2010, Dst: 0x3000},
			formats.Event{Kind: formats.KindRet, TID: 44, Time: at + 40_000, Src: 0x30f0, Dst: 0x2015},
			formats.Event{Kind: formats.KindRet, TID: 44, Time: at + 40_000, Src: 0x20f0, Dst: 0x1015})
		at += 100_000
	}
	path := filepath.Join(dir, "calls.arrow")
	writeSynth(t, path, run, rows)
	b, _ := writeAuto(t, []string{path}, AutoOptions{})
	p := parsePage(t, b)
	if !strings.Contains(p.text, "Where the time goes") || !strings.Contains(p.text, "1.5ms 75.0%") {
		t.Errorf("page lacks the self times (the callee's 1.5 ms, 75%%):\n%s", p.text)
	}
	out := filepath.Join(dir, "report.html")
	if err := os.WriteFile(out, b, 0o644); err != nil {
		t.Fatal(err)
	}
	browsertest.Check(t, out, 1100, 3000, 0, nil)
}
