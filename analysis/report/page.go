package report

import (
	"fmt"
	"html/template"
	"io"
	"strings"
)

// Document is a report page: a title, headline numbers, and sections of
// figures, tables and notes. [Document.WriteHTML] writes it as one
// self-contained HTML file.
type Document struct {
	Title    string
	Subtitle string    // e.g. what was compared
	Summary  []Stat    // headline numbers, shown first
	Sections []Section // in order
	// Body is already rendered HTML shown after the sections (a notebook's
	// markdown with its cells); it is trusted.
	Body   template.HTML
	Footer string
}

// Stat is one headline number.
type Stat struct {
	Label string // "coverage after 4 runs"
	Value string // "93.5%"
	Note  string // "603 of 645 distinct events"
	Tone  string // "", "good", "bad": colours the value
}

// Section is a titled part of a document.
type Section struct {
	ID     string // anchor (derived from Title if empty)
	Title  string
	Intro  string // a paragraph before the blocks
	Blocks []Block
	// nothing says why the section has nothing to show (its blocks are
	// then one note saying so): a notebook that asked for it shows the
	// note, report auto leaves the section out and names it in one line.
	nothing string
}

// Block is a part of a section: *[Figure], *[Flame], *[Table], *[Note],
// *[Stats] or *[Pre].
type Block interface{ blockHTML() (template.HTML, error) }

// Note is a paragraph of text set apart: "info" (default), "warn" or
// "error".
type Note struct {
	Kind  string
	Title string // bold lead-in, may be empty
	Text  string
}

// Stats is a row of headline numbers inside a section.
type Stats struct{ Items []Stat }

// Pre is preformatted text.
type Pre struct {
	Caption string
	Text    string
}

// Table is a table of text cells. Columns that are numeric are set right
// aligned with tabular figures.
type Table struct {
	Title   string
	Caption string
	Columns []Column
	Rows    [][]Cell
}

// Column is a table column.
type Column struct {
	Name    string
	Numeric bool
}

// Cell is a table cell; a cell with HasBar also draws a horizontal bar of
// Frac (0..1) behind its text.
type Cell struct {
	Text   string
	Frac   float64
	HasBar bool
}

// Text returns a plain cell.
func Text(s string) Cell { return Cell{Text: s} }

// Textf returns a plain cell with formatted text.
func Textf(format string, args ...any) Cell { return Cell{Text: fmt.Sprintf(format, args...)} }

// Bar returns a cell showing frac as a percentage with a bar.
func Bar(frac float64) Cell {
	return Cell{Text: fmt.Sprintf("%.1f%%", 100*frac), Frac: frac, HasBar: true}
}

var blockTemplates = template.Must(template.New("blocks").Funcs(template.FuncMap{
	"barStyle": func(f float64) template.CSS {
		return template.CSS(fmt.Sprintf("width:%.1f%%", 100*max(0, min(f, 1))))
	},
}).Parse(`
{{define "note"}}<div class="note note-{{.Kind}}" role="note">{{if .Title}}<strong>{{.Title}}</strong> {{end}}{{.Text}}</div>{{end}}
{{define "stats"}}<div class="stats">{{range .Items}}<div class="stat"><div class="stat-value{{if .Tone}} tone-{{.Tone}}{{end}}">{{.Value}}</div><div class="stat-label">{{.Label}}</div>{{if .Note}}<div class="stat-note">{{.Note}}</div>{{end}}</div>{{end}}</div>{{end}}
{{define "pre"}}<figure class="pre"><pre>{{.Text}}</pre>{{if .Caption}}<figcaption>{{.Caption}}</figcaption>{{end}}</figure>{{end}}
{{define "table"}}<figure class="table">{{if .Title}}<div class="fig-title">{{.Title}}</div>{{end}}<div class="table-wrap"><table>
<thead><tr>{{range .Columns}}<th{{if .Numeric}} class="num"{{end}} scope="col">{{.Name}}</th>{{end}}</tr></thead>
<tbody>{{$cols := .Columns}}{{range .Rows}}<tr>{{range $i, $c := .}}<td{{if (index $cols $i).Numeric}} class="num"{{end}}>{{if $c.HasBar}}<span class="bar"><span class="bar-fill" style="{{barStyle $c.Frac}}"></span></span>{{end}}{{$c.Text}}</td>{{end}}</tr>
{{end}}</tbody></table></div>{{if .Caption}}<figcaption>{{.Caption}}</figcaption>{{end}}</figure>{{end}}
{{define "flame"}}<figure class="figure flame" id="{{.ID}}">{{if .Title}}<div class="fig-title">{{.Title}}</div>{{end}}<div class="flame-tools"><input type="search" placeholder="search functions" aria-label="search functions"><button type="button">reset zoom</button><span class="flame-match"></span></div>{{.SVG}}{{if .Caption}}<figcaption>{{.Caption}}</figcaption>{{end}}<script>{{.Script}}</script></figure>{{end}}
{{define "figure"}}<figure class="figure" id="{{.ID}}" data-series="{{.SeriesAttr}}">{{if .Title}}<div class="fig-title">{{.Title}}</div>{{end}}{{.SVG}}{{if .Caption}}<figcaption>{{.Caption}}</figcaption>{{end}}</figure>{{end}}
`))

func execBlock(name string, v any) (template.HTML, error) {
	var b strings.Builder
	if err := blockTemplates.ExecuteTemplate(&b, name, v); err != nil {
		return "", err
	}
	return template.HTML(b.String()), nil
}

func (n *Note) blockHTML() (template.HTML, error) {
	c := *n
	if c.Kind == "" {
		c.Kind = "info"
	}
	return execBlock("note", &c)
}
func (s *Stats) blockHTML() (template.HTML, error) { return execBlock("stats", s) }
func (p *Pre) blockHTML() (template.HTML, error)   { return execBlock("pre", p) }
func (t *Table) blockHTML() (template.HTML, error) {
	for i, r := range t.Rows {
		if len(r) != len(t.Columns) {
			return "", fmt.Errorf("table %q: row %d has %d cells for %d columns", t.Title, i, len(r), len(t.Columns))
		}
	}
	return execBlock("table", t)
}
func (f *Figure) blockHTML() (template.HTML, error) { return execBlock("figure", f) }

// BlocksHTML renders blocks one after another.
func BlocksHTML(blocks []Block) (template.HTML, error) {
	var b strings.Builder
	for _, bl := range blocks {
		h, err := bl.blockHTML()
		if err != nil {
			return "", err
		}
		b.WriteString(string(h))
		b.WriteByte('\n')
	}
	return template.HTML(b.String()), nil
}

type pageSection struct {
	ID, Title, Intro string
	HTML             template.HTML
}

type pageData struct {
	Title, Subtitle, Footer string
	Summary                 template.HTML
	Sections                []pageSection
	Body                    template.HTML
	CSS                     template.CSS
}

// WriteHTML writes the document as one HTML file with inline CSS and
// inline SVG figures; it fetches nothing, and runs no script but a flame
// graph's inline one.
func (d *Document) WriteHTML(w io.Writer) error {
	pd := pageData{Title: d.Title, Subtitle: d.Subtitle, Footer: d.Footer, Body: d.Body, CSS: template.CSS(pageCSS)}
	if len(d.Summary) > 0 {
		h, err := (&Stats{Items: d.Summary}).blockHTML()
		if err != nil {
			return err
		}
		pd.Summary = h
	}
	used := map[string]int{}
	for _, s := range d.Sections {
		h, err := BlocksHTML(s.Blocks)
		if err != nil {
			return fmt.Errorf("section %q: %w", s.Title, err)
		}
		id := s.ID
		if id == "" {
			id = slug(s.Title)
		}
		if n := used[id]; n > 0 {
			id = fmt.Sprintf("%s-%d", id, n+1)
		}
		used[id]++
		pd.Sections = append(pd.Sections, pageSection{ID: id, Title: s.Title, Intro: s.Intro, HTML: h})
	}
	return pageTemplate.Execute(w, pd)
}

// slug makes an HTML id from a title.
func slug(s string) string {
	var b strings.Builder
	dash := false
	for _, r := range strings.ToLower(s) {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
			b.WriteRune(r)
			dash = false
		} else if !dash && b.Len() > 0 {
			b.WriteByte('-')
			dash = true
		}
	}
	out := strings.TrimSuffix(b.String(), "-")
	if out == "" {
		return "section"
	}
	return out
}

var pageTemplate = template.Must(template.New("page").Parse(`<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="generator" content="stint report">
<title>{{.Title}}</title>
<style>{{.CSS}}</style>
</head>
<body>
<main>
<header class="page-head">
<h1>{{.Title}}</h1>
{{if .Subtitle}}<p class="subtitle">{{.Subtitle}}</p>{{end}}
</header>
{{if .Summary}}<section class="summary" aria-label="summary">{{.Summary}}</section>{{end}}
{{if gt (len .Sections) 2}}<nav class="toc" aria-label="contents"><ol>{{range .Sections}}<li><a href="#{{.ID}}">{{.Title}}</a></li>{{end}}</ol></nav>{{end}}
{{range .Sections}}<section id="{{.ID}}">
<h2>{{.Title}}</h2>
{{if .Intro}}<p class="intro">{{.Intro}}</p>{{end}}
{{.HTML}}</section>
{{end}}
{{if .Body}}<article class="notebook">
{{.Body}}
</article>{{end}}
{{if .Footer}}<footer>{{.Footer}}</footer>{{end}}
</main>
</body>
</html>
`))

// pageCSS: a readable column, system fonts, tabular figures in tables.
// The figure colours (palette in figures.go) are kept out of the page's
// own chrome, so that a screenshot's figure colours come from figures.
const pageCSS = `
:root{--ink:#1d2433;--muted:#5b6475;--rule:#dde1e8;--paper:#ffffff;--tint:#f5f6f9;--accent:#23395d}
*{box-sizing:border-box}
html{background:var(--paper);color:var(--ink)}
body{margin:0;font:16px/1.6 system-ui,-apple-system,"Segoe UI",Roboto,"Helvetica Neue","Liberation Sans",Arial,sans-serif;-webkit-font-smoothing:antialiased}
main{max-width:60rem;margin:0 auto;padding:2.5rem 1.5rem 4rem}
h1,h2,h3,h4{line-height:1.25;color:var(--accent);font-weight:650;letter-spacing:-0.01em}
h1{font-size:2rem;margin:0 0 .25rem}
h2{font-size:1.4rem;margin:3rem 0 .75rem;padding-top:.75rem;border-top:1px solid var(--rule)}
h3{font-size:1.15rem;margin:2rem 0 .5rem}
p{margin:.6rem 0}
.subtitle{color:var(--muted);margin:0 0 1.5rem}
.intro{color:var(--ink);max-width:46rem}
a{color:var(--accent)}
code,pre{font-family:ui-monospace,"SFMono-Regular","DejaVu Sans Mono","Liberation Mono",Menlo,monospace;font-size:.88em}
pre{background:var(--tint);border:1px solid var(--rule);border-radius:6px;padding:.75rem 1rem;overflow-x:auto;line-height:1.45}
.stats{display:grid;grid-template-columns:repeat(auto-fit,minmax(10.5rem,1fr));gap:.75rem;margin:1rem 0 1.5rem}
.stat{background:var(--tint);border:1px solid var(--rule);border-radius:8px;padding:.8rem 1rem}
.stat-value{font-size:1.65rem;font-weight:650;font-variant-numeric:tabular-nums;color:var(--accent);line-height:1.2}
.stat-value.tone-good{color:#276749}.stat-value.tone-bad{color:#9b2c2c}
.stat-label{font-size:.85rem;color:var(--ink);margin-top:.2rem}
.stat-note{font-size:.78rem;color:var(--muted)}
.toc{font-size:.92rem;margin:0 0 1rem}
.toc ol{display:flex;flex-wrap:wrap;gap:.25rem 1.25rem;list-style:none;padding:0;margin:0}
figure{margin:1.25rem 0 1.75rem}
.fig-title{font-weight:600;margin-bottom:.35rem}
figure svg{display:block;width:100%;height:auto;background:#fff}
figcaption{font-size:.9rem;color:var(--muted);margin-top:.4rem;max-width:46rem}
.table-wrap{overflow-x:auto}
table{border-collapse:collapse;font-size:.9rem;width:100%}
th,td{padding:.35rem .6rem;border-bottom:1px solid var(--rule);text-align:left;vertical-align:top}
th{font-weight:600;border-bottom:2px solid #b8bfcc;white-space:nowrap}
td.num,th.num{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
tbody tr:hover{background:var(--tint)}
.bar{display:inline-block;width:4.5rem;height:.55rem;background:#e7eaf0;border-radius:3px;margin-right:.5rem;vertical-align:middle;overflow:hidden}
.bar-fill{display:block;height:100%;background:#55657f}
.note{border-left:4px solid #8a94a6;background:var(--tint);padding:.6rem .9rem;margin:1rem 0;border-radius:0 6px 6px 0;font-size:.95rem}
.note-warn{border-left-color:#b7791f;background:#fdf8ec}
.note-error{border-left-color:#9b2c2c;background:#fcf0f0}
.cell{margin:1.25rem 0}
.cell-command{font-size:.8rem;color:var(--muted);margin-bottom:.25rem}
.cell-command code{background:none}
footer{margin-top:4rem;padding-top:1rem;border-top:1px solid var(--rule);color:var(--muted);font-size:.85rem}
.flame-tools{display:flex;gap:.5rem;align-items:center;margin:.25rem 0 .5rem;font-size:.85rem}
.flame-tools input{font:inherit;padding:.15rem .4rem;width:14rem}
.flame-match{color:var(--muted)}
.flame-svg g.fr{cursor:pointer}
.flame-svg rect{stroke:#fff;stroke-width:.3}
.flame-svg text{font:11px sans-serif;fill:#222;pointer-events:none}
.flame-svg g.flame-hit rect{fill:#c45cf0}
@media print{main{max-width:none}h2{break-before:auto}figure{break-inside:avoid}}
`

// Heading is a subheading inside a section or a cell's output.
type Heading struct{ Text string }

func (h *Heading) blockHTML() (template.HTML, error) {
	return template.HTML("<h3>" + template.HTMLEscapeString(h.Text) + "</h3>"), nil
}

// Paragraph is a paragraph of text.
type Paragraph struct{ Text string }

func (p *Paragraph) blockHTML() (template.HTML, error) {
	return template.HTML("<p>" + template.HTMLEscapeString(p.Text) + "</p>"), nil
}
