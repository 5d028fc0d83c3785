package report

import (
	"cmp"
	"fmt"
	"html/template"
	"path/filepath"
	"slices"
	"strings"

	"github.com/stint-project/stint/analysis/cct"
)

// Flame is an icicle chart of a call-context tree: the root on top,
// each context under its caller, as wide as the calls made in it and
// beneath it. The page draws every context once, laid out; an inline
// script (no request leaves the page) zooms into a context on a click
// and highlights the ones a search matches.
type Flame struct {
	ID      string
	Title   string
	Caption string
	Root    *FlameNode
}

// FlameNode is one calling context.
type FlameNode struct {
	Name     string
	Calls    uint64 // calls that entered this context
	Total    uint64 // Calls and every call beneath it
	Children []*FlameNode
}

// Flame layout bounds: a page stays light whatever the tree's size.
const (
	flameWidth    = 1000 // viewBox units
	flameRow      = 18
	flameMinShare = 1.0 / 2000 // contexts under this share of all calls are left out (their calls still count above)
	flameMaxDepth = 64
	flameMaxRects = 4000
)

// FlameFromTree converts a call-context tree (root: the threads'
// roots under one) into flame nodes, named by names (a function's name,
// or its address when it has none).
func FlameFromTree(t *cct.Tree) *FlameNode {
	if t == nil || t.Root == nil {
		return nil
	}
	var conv func(n *cct.Node) *FlameNode
	conv = func(n *cct.Node) *FlameNode {
		f := &FlameNode{Name: flameName(t, n), Calls: n.Calls + n.Inferred}
		f.Total = f.Calls
		for _, c := range n.Children {
			fc := conv(c)
			f.Total += fc.Total
			f.Children = append(f.Children, fc)
		}
		slices.SortFunc(f.Children, func(a, b *FlameNode) int {
			return cmp.Or(cmp.Compare(b.Total, a.Total), cmp.Compare(a.Name, b.Name))
		})
		return f
	}
	root := conv(t.Root)
	root.Name = "all"
	return root
}

func flameName(t *cct.Tree, n *cct.Node) string {
	if n.Name != "" {
		return n.Name
	}
	if n.Module >= 0 && n.Module < len(t.Modules) {
		return fmt.Sprintf("%s+%#x", filepath.Base(t.Modules[n.Module].Path), n.Entry)
	}
	return fmt.Sprintf("%#x", n.Entry)
}

// flameRect is one drawn context: its place in the unzoomed chart.
type flameRect struct {
	X, W        float64 // viewBox units
	Depth       int
	Name, Title string
	Hue         int
}

// layout places the contexts that get a rectangle, parents first.
func (f *Flame) layout() (rects []flameRect, depth int) {
	total := float64(f.Root.Total)
	if total == 0 {
		return nil, 0
	}
	var walk func(n *FlameNode, x float64, d int)
	walk = func(n *FlameNode, x float64, d int) {
		share := float64(n.Total) / total
		if share < flameMinShare || d >= flameMaxDepth || len(rects) >= flameMaxRects {
			return
		}
		w := share * flameWidth
		title := fmt.Sprintf("%s: %d calls in this context and beneath it (%.2f%% of all), %d into it", n.Name, n.Total, 100*share, n.Calls)
		rects = append(rects, flameRect{X: x, W: w, Depth: d, Name: n.Name, Title: title, Hue: flameHue(n.Name)})
		depth = max(depth, d+1)
		cx := x
		for _, c := range n.Children {
			walk(c, cx, d+1)
			cx += float64(c.Total) / total * flameWidth
		}
	}
	walk(f.Root, 0, 0)
	return rects, depth
}

// flameHue gives a name a stable warm hue, as flame graphs colour.
func flameHue(s string) int {
	h := uint32(2166136261)
	for i := 0; i < len(s); i++ {
		h = (h ^ uint32(s[i])) * 16777619
	}
	return int(h % 50)
}

func (f *Flame) blockHTML() (template.HTML, error) {
	if f.Root == nil {
		return "", fmt.Errorf("flame graph %q: no tree", f.Title)
	}
	rects, depth := f.layout()
	var b strings.Builder
	fmt.Fprintf(&b, `<svg class="flame-svg" viewBox="0 0 %d %d" width="100%%" role="img" aria-label="%s">`,
		flameWidth, max(depth, 1)*flameRow, template.HTMLEscapeString(f.Title))
	for _, r := range rects {
		fmt.Fprintf(&b, `<g class="fr" data-x="%.4f" data-w="%.4f" data-d="%d"><title>%s</title>`+
			`<rect x="%.3f" y="%d" width="%.3f" height="%d" fill="hsl(%d,85%%,60%%)"/>`+
			`<text x="%.3f" y="%d">%s</text></g>`,
			r.X, r.W, r.Depth, template.HTMLEscapeString(r.Title),
			r.X, r.Depth*flameRow, max(r.W-0.5, 0.1), flameRow-1, 10+r.Hue,
			r.X+3, r.Depth*flameRow+13, template.HTMLEscapeString(flameLabel(r.Name, r.W)))
	}
	b.WriteString(`</svg>`)
	return execBlock("flame", struct {
		*Flame
		SVG    template.HTML
		Script template.JS
	}{f, template.HTML(b.String()), template.JS(flameScript)})
}

// flameLabel fits a name into w viewBox units (about 6.5 a character).
func flameLabel(name string, w float64) string {
	n := int((w - 6) / 6.5)
	switch {
	case n < 3:
		return ""
	case len(name) <= n:
		return name
	}
	return name[:n-2] + ".."
}

// flameScript zooms a flame figure into the clicked context (its
// ancestors stay, full width; what lies outside it is hidden), and
// highlights the contexts whose name contains the search text, with
// their share of the calls. It runs on the figure it sits in.
const flameScript = `(function(){
var fig=document.currentScript.closest("figure"),svg=fig.querySelector("svg"),W=1000;
var gs=[].slice.call(svg.querySelectorAll("g.fr")),inp=fig.querySelector("input"),out=fig.querySelector(".flame-match");
function fit(t,w,name){var n=Math.floor((w-6)/6.5);t.textContent=n<3?"":(name.length<=n?name:name.slice(0,n-2)+"..");}
function zoom(g){var x0=+g.dataset.x,w0=+g.dataset.w,d0=+g.dataset.d;
gs.forEach(function(h){var x=+h.dataset.x,w=+h.dataset.w,d=+h.dataset.d,r=h.querySelector("rect"),t=h.querySelector("text"),name=h.querySelector("title").textContent.split(": ")[0];
var inside=x>=x0-1e-6&&x+w<=x0+w0+1e-6,above=d<d0&&x<=x0+1e-6&&x+w>=x0+w0-1e-6;
if(!(inside||above)){h.style.display="none";return;}
h.style.display="";var nx=above?0:(x-x0)/w0*W,nw=above?W:w/w0*W;
r.setAttribute("x",nx);r.setAttribute("width",Math.max(nw-0.5,0.1));t.setAttribute("x",nx+3);fit(t,nw,name);});}
gs.forEach(function(g){g.addEventListener("click",function(){zoom(g);});});
fig.querySelector("button").addEventListener("click",function(){zoom(gs[0]);});
inp.addEventListener("input",function(){var q=inp.value.toLowerCase(),m=0;
gs.forEach(function(g){var name=g.querySelector("title").textContent.split(": ")[0];var hit=q!==""&&name.toLowerCase().indexOf(q)>=0;
g.classList.toggle("flame-hit",hit);if(hit&&+g.dataset.d>0){var covered=gs.some(function(o){return o!==g&&o.classList.contains("flame-hit")&&+o.dataset.d<+g.dataset.d&&+o.dataset.x<=+g.dataset.x&&+o.dataset.x+ +o.dataset.w>=+g.dataset.x+ +g.dataset.w;});if(!covered)m+=+g.dataset.w;}});
out.textContent=q===""?"":"matched: "+(m/W*100).toFixed(1)+"% of the calls";});
})();`
