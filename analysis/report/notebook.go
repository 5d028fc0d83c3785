package report

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"html/template"
	"io"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/stint-project/stint/analysis/symbols"
	"github.com/yuin/goldmark"
	"github.com/yuin/goldmark/ast"
	"github.com/yuin/goldmark/extension"
	"github.com/yuin/goldmark/renderer"
	"github.com/yuin/goldmark/text"
	"github.com/yuin/goldmark/util"
)

// CellLanguage is the info-string word that makes a fenced code block a
// cell.
const CellLanguage = "stint"

// CellFunc runs a cell. args are the words after the cell's name (see
// [ParseCell]); relative paths in them are relative to env.Dir.
type CellFunc func(ctx context.Context, env *CellEnv, args []string) ([]Block, error)

// CellCommand is a command a notebook cell can run: a name of one or more
// words ("cov compare") and the function that runs it in-process.
type CellCommand struct {
	Name  string // e.g. "cov compare"
	Usage string // e.g. "cov compare [--functions N] RUN... FULL"
	Run   CellFunc
}

// CellEnv is what a running cell may use.
type CellEnv struct {
	Dir      string            // the notebook's directory
	Resolver *symbols.Resolver // shared by all cells of a notebook
	Progress io.Writer         // where long reads draw progress (nil: nowhere)
}

// Paths resolves file arguments: relative to Dir, with shell patterns
// (*, ?, [..]) expanded in sorted order. A pattern that matches nothing is
// an error.
func (e *CellEnv) Paths(args []string) ([]string, error) {
	var out []string
	for _, a := range args {
		p := a
		if !filepath.IsAbs(p) {
			p = filepath.Join(e.Dir, p)
		}
		if !strings.ContainsAny(a, "*?[") {
			out = append(out, p)
			continue
		}
		m, err := filepath.Glob(p)
		if err != nil {
			return nil, fmt.Errorf("pattern %q: %w", a, err)
		}
		if len(m) == 0 {
			return nil, fmt.Errorf("%q matches no file", a)
		}
		out = append(out, m...)
	}
	return out, nil
}

// ParseCell splits a cell's info string (after the language word) and
// body into words. Words are separated by white space; '…' and "…" quote
// (no escapes inside '…'; \" and \\ inside "…"); a body line whose first
// non-blank character is # is a comment.
func ParseCell(info, body string) ([]string, error) {
	words, err := splitWords(info)
	if err != nil {
		return nil, err
	}
	for _, line := range strings.Split(body, "\n") {
		if t := strings.TrimSpace(line); t == "" || strings.HasPrefix(t, "#") {
			continue
		}
		w, err := splitWords(line)
		if err != nil {
			return nil, err
		}
		words = append(words, w...)
	}
	return words, nil
}

func splitWords(s string) ([]string, error) {
	var out []string
	var cur strings.Builder
	in := false // inside a word
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == ' ' || c == '\t' || c == '\r' || c == '\n':
			if in {
				out = append(out, cur.String())
				cur.Reset()
				in = false
			}
		case c == '\'':
			j := strings.IndexByte(s[i+1:], '\'')
			if j < 0 {
				return nil, fmt.Errorf("unterminated ' in %q", s)
			}
			cur.WriteString(s[i+1 : i+1+j])
			i += j + 1
			in = true
		case c == '"':
			in = true
			i++
			for ; i < len(s) && s[i] != '"'; i++ {
				if s[i] == '\\' && i+1 < len(s) && (s[i+1] == '"' || s[i+1] == '\\') {
					i++
				}
				cur.WriteByte(s[i])
			}
			if i >= len(s) {
				return nil, fmt.Errorf("unterminated \" in %q", s)
			}
		default:
			cur.WriteByte(c)
			in = true
		}
	}
	if in {
		out = append(out, cur.String())
	}
	return out, nil
}

// CellError is a cell that failed.
type CellError struct {
	Line    int    // line of the cell's opening fence
	Command string // the cell's command line
	Err     error
}

func (e *CellError) Error() string { return fmt.Sprintf("line %d: %s: %v", e.Line, e.Command, e.Err) }
func (e *CellError) Unwrap() error { return e.Err }

// CellsFailedError is returned by [RenderNotebook] with the document when
// cells failed; the page shows each failure in place of the cell's output.
type CellsFailedError struct{ Cells []*CellError }

func (e *CellsFailedError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d cell%s failed", len(e.Cells), plural(len(e.Cells)))
	for _, c := range e.Cells {
		b.WriteString("\n  " + c.Error())
	}
	return b.String()
}

// NotebookOptions configure [RenderNotebook].
type NotebookOptions struct {
	Dir      string        // directory that relative paths in cells are relative to
	Name     string        // the notebook's file name, the page title when it has no heading
	Cells    []CellCommand // commands cells may run (nil: [DefaultCells])
	Resolver *symbols.Resolver
	Progress io.Writer
	Now      time.Time // shown in the footer (zero: not shown)
}

// RenderNotebook runs the cells of a markdown notebook and returns the
// page: the markdown (CommonMark with GitHub tables, strikethrough,
// autolinks and task lists; raw HTML is left out) with each cell replaced
// by its output. A cell is a fenced code block whose info string starts
// with "stint":
//
//	```stint cov compare runs/*.arrow full.arrow
//	```
//
// The words after "stint" (and any in the block's body, one or more per
// line, # starting a comment line) are the command line; the longest
// registered command name that starts it picks the command, the rest are
// its arguments. Cells run in order, in-process. A cell that fails shows
// its error in the page; the document is still returned, with a
// *[CellsFailedError]. The first level-1 heading becomes the page title.
func RenderNotebook(ctx context.Context, src []byte, opts NotebookOptions) (*Document, error) {
	cmds := opts.Cells
	if cmds == nil {
		cmds = DefaultCells()
	}
	if opts.Resolver == nil {
		opts.Resolver = symbols.NewResolver()
	}
	env := &CellEnv{Dir: opts.Dir, Resolver: opts.Resolver, Progress: opts.Progress}
	md := goldmark.New(goldmark.WithExtensions(extension.GFM))
	root := md.Parser().Parse(text.NewReader(src))

	doc := &Document{Title: strings.TrimSuffix(filepath.Base(opts.Name), filepath.Ext(opts.Name))}
	if doc.Title == "" || doc.Title == "." {
		doc.Title = "stint notebook"
	}
	// The first h1 is the title.
	for n := root.FirstChild(); n != nil; n = n.NextSibling() {
		if h, ok := n.(*ast.Heading); ok && h.Level == 1 {
			doc.Title = plainText(h, src)
			root.RemoveChild(root, h)
			break
		}
	}

	outputs := map[ast.Node]template.HTML{}
	var failed []*CellError
	cellNo := 0
	err := ast.Walk(root, func(n ast.Node, entering bool) (ast.WalkStatus, error) {
		fb, ok := n.(*ast.FencedCodeBlock)
		if !entering || !ok || string(fb.Language(src)) != CellLanguage {
			return ast.WalkContinue, nil
		}
		if err := ctx.Err(); err != nil {
			return ast.WalkStop, err
		}
		cellNo++
		info := ""
		if fb.Info != nil {
			info = string(fb.Info.Segment.Value(src))
		}
		info = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(info), CellLanguage))
		var body strings.Builder
		for i := 0; i < fb.Lines().Len(); i++ {
			seg := fb.Lines().At(i)
			body.Write(seg.Value(src))
		}
		line := lineOf(src, fb)
		words, err := ParseCell(info, body.String())
		command := strings.Join(words, " ")
		var blocks []Block
		if err == nil {
			blocks, err = runCell(ctx, env, cmds, words)
		}
		if err == nil {
			for _, b := range blocks {
				if f, ok := b.(*Figure); ok {
					f.ID = fmt.Sprintf("cell%d-%s", cellNo, f.ID)
				}
			}
		}
		var h template.HTML
		if err == nil {
			h, err = BlocksHTML(blocks)
		}
		if err != nil {
			if ctx.Err() != nil {
				return ast.WalkStop, ctx.Err()
			}
			ce := &CellError{Line: line, Command: command, Err: err}
			failed = append(failed, ce)
			h, _ = (&Note{Kind: "error", Title: "This cell failed:", Text: err.Error()}).blockHTML()
		}
		outputs[fb] = cellHTML(command, h, err != nil)
		return ast.WalkSkipChildren, nil
	})
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	md.Renderer().AddOptions(renderer.WithNodeRenderers(util.Prioritized(&cellRenderer{outputs: outputs}, 100)))
	if err := md.Renderer().Render(&buf, src, root); err != nil {
		return nil, fmt.Errorf("render markdown: %w", err)
	}
	doc.Body = template.HTML(buf.String())
	if !opts.Now.IsZero() {
		doc.Footer = "Generated by stint report on " + opts.Now.UTC().Format("2006-01-02 15:04 MST") + "."
	}
	if len(failed) > 0 {
		return doc, &CellsFailedError{Cells: failed}
	}
	return doc, nil
}

func cellHTML(command string, out template.HTML, failed bool) template.HTML {
	cls := "cell"
	if failed {
		cls += " cell-failed"
	}
	return template.HTML(`<div class="` + cls + `"><div class="cell-command"><code>` + template.HTMLEscapeString("stint "+command) + "</code></div>\n" + string(out) + "</div>\n")
}

// runCell finds the command (longest name match; of equal names the
// last, so a caller's list can override a default) and runs it.
func runCell(ctx context.Context, env *CellEnv, cmds []CellCommand, words []string) ([]Block, error) {
	if len(words) == 0 {
		return nil, fmt.Errorf("empty cell: want a command (%s)", cellNames(cmds))
	}
	best, bestLen := -1, 0
	for i, c := range cmds {
		name := strings.Fields(c.Name)
		if len(name) >= bestLen && len(name) > 0 && len(name) <= len(words) && slices.Equal(name, words[:len(name)]) {
			best, bestLen = i, len(name)
		}
	}
	if best < 0 {
		return nil, fmt.Errorf("unknown cell command %q (known: %s)", strings.Join(words, " "), cellNames(cmds))
	}
	blocks, err := cmds[best].Run(ctx, env, words[bestLen:])
	if err != nil && cmds[best].Usage != "" && errors.Is(err, errUsage) {
		err = fmt.Errorf("%w (usage: %s)", err, cmds[best].Usage)
	}
	return blocks, err
}

var errUsage = errors.New("bad arguments")

func cellNames(cmds []CellCommand) string {
	var names []string
	for _, c := range cmds {
		names = append(names, c.Name)
	}
	return strings.Join(names, ", ")
}

// lineOf returns the 1-based line of the fence of a code block (the line
// before its first content line; for an empty block, a best guess).
func lineOf(src []byte, fb *ast.FencedCodeBlock) int {
	off := -1
	if fb.Info != nil {
		off = fb.Info.Segment.Start
	} else if fb.Lines().Len() > 0 {
		off = fb.Lines().At(0).Start
	}
	if off < 0 || off > len(src) {
		return 0
	}
	return bytes.Count(src[:off], []byte("\n")) + 1
}

func plainText(n ast.Node, src []byte) string {
	var b strings.Builder
	_ = ast.Walk(n, func(c ast.Node, entering bool) (ast.WalkStatus, error) {
		if entering {
			switch t := c.(type) {
			case *ast.Text:
				b.Write(t.Segment.Value(src))
				if t.SoftLineBreak() {
					b.WriteByte(' ')
				}
			case *ast.String:
				b.Write(t.Value)
			case *ast.CodeSpan:
				// its Text children are walked
			}
		}
		return ast.WalkContinue, nil
	})
	return b.String()
}

// cellRenderer renders fenced code blocks: a cell's output in place of a
// cell, any other block as goldmark's renderer would.
type cellRenderer struct {
	outputs map[ast.Node]template.HTML
}

func (r *cellRenderer) RegisterFuncs(reg renderer.NodeRendererFuncRegisterer) {
	reg.Register(ast.KindFencedCodeBlock, r.render)
}

func (r *cellRenderer) render(w util.BufWriter, src []byte, node ast.Node, entering bool) (ast.WalkStatus, error) {
	if !entering {
		return ast.WalkContinue, nil
	}
	if h, ok := r.outputs[node]; ok {
		w.WriteString(string(h))
		return ast.WalkSkipChildren, nil
	}
	fb := node.(*ast.FencedCodeBlock)
	w.WriteString("<pre><code")
	if lang := fb.Language(src); lang != nil {
		w.WriteString(` class="language-` + template.HTMLEscapeString(string(lang)) + `"`)
	}
	w.WriteString(">")
	for i := 0; i < fb.Lines().Len(); i++ {
		seg := fb.Lines().At(i)
		w.WriteString(template.HTMLEscapeString(string(seg.Value(src))))
	}
	w.WriteString("</code></pre>\n")
	return ast.WalkSkipChildren, nil
}
