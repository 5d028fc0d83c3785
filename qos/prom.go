package qos

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
)

// Expositions are parsed by expfmt, the format's own parser: the text
// format (version 0.0.4) and OpenMetrics 1.0, whichever the server
// answers with (promSource asks for either). Each metric family becomes
// the sample lines a text exposition shows for it: a histogram's
// NAME_bucket{le=...}, NAME_sum and NAME_count, a summary's
// NAME{quantile=...}, NAME_sum and NAME_count.

// PromError is a malformed exposition line.
type PromError struct {
	Line int // 1-based; 0 when the parser names none
	Msg  string
}

func (e *PromError) Error() string {
	if e.Line == 0 {
		return "prometheus exposition: " + e.Msg
	}
	return fmt.Sprintf("prometheus exposition, line %d: %s", e.Line, e.Msg)
}

// Label is one name="value" pair.
type Label struct{ Name, Value string }

// PromSample is one sample line.
type PromSample struct {
	Name   string
	Labels []Label
	Value  float64
}

// Exposition is a parsed exposition: the samples in order and the TYPE of
// each metric family that declared one.
type Exposition struct {
	Samples []PromSample
	Types   map[string]string
}

// ParsePromText parses a text exposition (version 0.0.4).
func ParsePromText(data []byte) (*Exposition, error) {
	return ParseExposition(data, expfmt.NewFormat(expfmt.TypeTextPlain))
}

// ParseExposition parses an exposition in format (expfmt.ResponseFormat
// of the response's header tells which). A malformed one gives a
// *PromError, with its line when the parser names one.
func ParseExposition(data []byte, format expfmt.Format) (*Exposition, error) {
	e := &Exposition{Types: make(map[string]string)}
	d := expfmt.NewDecoder(bytes.NewReader(data), format)
	for {
		var mf dto.MetricFamily
		if err := d.Decode(&mf); err == io.EOF {
			return e, nil
		} else if err != nil {
			var pe expfmt.ParseError
			if errors.As(err, &pe) {
				return nil, &PromError{Line: pe.Line, Msg: pe.Msg}
			}
			return nil, &PromError{Msg: err.Error()}
		}
		e.addFamily(&mf)
	}
}

// addFamily appends the samples of one metric family and notes its type.
func (e *Exposition) addFamily(mf *dto.MetricFamily) {
	name := mf.GetName()
	if mf.GetType() != dto.MetricType_UNTYPED {
		// as a TYPE line says it (an untyped family has none: its
		// name's _total decides, IsCounter)
		e.Types[name] = strings.ToLower(mf.GetType().String())
	}
	for _, m := range mf.Metric {
		ls := make([]Label, 0, len(m.Label))
		for _, l := range m.Label {
			ls = append(ls, Label{l.GetName(), l.GetValue()})
		}
		add := func(n string, v float64, extra ...Label) {
			e.Samples = append(e.Samples, PromSample{Name: n, Labels: append(ls[:len(ls):len(ls)], extra...), Value: v})
		}
		switch mf.GetType() {
		case dto.MetricType_COUNTER:
			add(name, m.GetCounter().GetValue())
		case dto.MetricType_GAUGE:
			add(name, m.GetGauge().GetValue())
		case dto.MetricType_HISTOGRAM, dto.MetricType_GAUGE_HISTOGRAM:
			h := m.GetHistogram()
			for _, b := range h.GetBucket() {
				add(name+"_bucket", float64(b.GetCumulativeCount()), Label{"le", promFloat(b.GetUpperBound())})
			}
			add(name+"_sum", h.GetSampleSum())
			add(name+"_count", float64(h.GetSampleCount()))
		case dto.MetricType_SUMMARY:
			sm := m.GetSummary()
			for _, q := range sm.GetQuantile() {
				add(name, q.GetValue(), Label{"quantile", promFloat(q.GetQuantile())})
			}
			add(name+"_sum", sm.GetSampleSum())
			add(name+"_count", float64(sm.GetSampleCount()))
		default:
			add(name, m.GetUntyped().GetValue())
		}
	}
}

// promFloat writes a le or quantile label value as expositions do.
func promFloat(v float64) string {
	switch {
	case math.IsInf(v, 1):
		return "+Inf"
	case math.IsInf(v, -1):
		return "-Inf"
	}
	return strconv.FormatFloat(v, 'g', -1, 64)
}

func nameChar(c byte, first bool) bool {
	return c == '_' || c == ':' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || !first && c >= '0' && c <= '9'
}

func validName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !nameChar(s[i], i == 0) {
			return false
		}
	}
	return true
}

// scanName returns the metric or label name at the start of s.
func scanName(s string) (string, string) {
	i := 0
	for i < len(s) && nameChar(s[i], i == 0) {
		i++
	}
	return s[:i], s[i:]
}

// parseLabels parses `{a="x",b="y"}` at the start of s (s[0] == '{').
func parseLabels(s string) ([]Label, string, error) {
	s = s[1:]
	var ls []Label
	for {
		s = strings.TrimLeft(s, " \t")
		if strings.HasPrefix(s, "}") {
			return ls, s[1:], nil
		}
		var name string
		name, s = scanName(s)
		if name == "" {
			return nil, "", fmt.Errorf("want a label name or }, have %q", clip(s))
		}
		s = strings.TrimLeft(s, " \t")
		if !strings.HasPrefix(s, "=") {
			return nil, "", fmt.Errorf("want = after label %s", name)
		}
		s = strings.TrimLeft(s[1:], " \t")
		if !strings.HasPrefix(s, `"`) {
			return nil, "", fmt.Errorf("want a quoted value for label %s", name)
		}
		var b strings.Builder
		i := 1
		for ; i < len(s) && s[i] != '"'; i++ {
			if s[i] == '\\' && i+1 < len(s) {
				i++
				switch s[i] {
				case 'n':
					b.WriteByte('\n')
				case '\\', '"':
					b.WriteByte(s[i])
				default:
					b.WriteByte('\\')
					b.WriteByte(s[i])
				}
				continue
			}
			b.WriteByte(s[i])
		}
		if i >= len(s) {
			return nil, "", fmt.Errorf("label %s: value not closed by \"", name)
		}
		ls = append(ls, Label{name, b.String()})
		s = strings.TrimLeft(s[i+1:], " \t")
		if strings.HasPrefix(s, ",") {
			s = s[1:]
		} else if !strings.HasPrefix(s, "}") {
			return nil, "", fmt.Errorf("want , or } after label %s", name)
		}
	}
}

func clip(s string) string {
	if len(s) > 20 {
		return s[:20] + "..."
	}
	return s
}

// Series selects samples: a metric name and label values that must
// match (other labels may have any value). How its value is used:
// Rate true makes it a per-second rate; Auto means "decide from the
// exposition" (see IsCounter).
type Series struct {
	Name   string
	Labels []Label
	Rate   bool
	Auto   bool
}

func (s Series) String() string {
	var b strings.Builder
	b.WriteString(s.Name)
	if len(s.Labels) > 0 {
		b.WriteByte('{')
		for i, l := range s.Labels {
			if i > 0 {
				b.WriteByte(',')
			}
			fmt.Fprintf(&b, "%s=%q", l.Name, l.Value)
		}
		b.WriteByte('}')
	}
	switch {
	case s.Auto:
		return b.String()
	case s.Rate:
		return "rate(" + b.String() + ")"
	}
	return "value(" + b.String() + ")"
}

// ParseSeries parses NAME, NAME{label="v",...}, rate(...) or value(...).
func ParseSeries(s string) (Series, error) {
	t := strings.TrimSpace(s)
	sel := Series{Auto: true}
	for _, fn := range []string{"rate", "value"} {
		if inner, ok := strings.CutPrefix(t, fn+"("); ok {
			if !strings.HasSuffix(inner, ")") {
				return sel, fmt.Errorf("series %q: %s( without )", s, fn)
			}
			t = strings.TrimSpace(inner[:len(inner)-1])
			sel.Auto, sel.Rate = false, fn == "rate"
			break
		}
	}
	name, rest := scanName(t)
	if name == "" {
		return sel, fmt.Errorf("series %q: want a metric name, e.g. http_requests_total{code=\"200\"}", s)
	}
	sel.Name = name
	rest = strings.TrimSpace(rest)
	if strings.HasPrefix(rest, "{") {
		ls, r, err := parseLabels(rest)
		if err != nil {
			return sel, fmt.Errorf("series %q: %v", s, err)
		}
		sel.Labels, rest = ls, strings.TrimSpace(r)
	}
	if rest != "" {
		return sel, fmt.Errorf("series %q: unexpected %q after the series", s, clip(rest))
	}
	return sel, nil
}

// Match reports whether sample p is selected by s.
func (s Series) Match(p PromSample) bool {
	if p.Name != s.Name {
		return false
	}
outer:
	for _, want := range s.Labels {
		for _, have := range p.Labels {
			if have.Name == want.Name {
				if have.Value != want.Value {
					return false
				}
				continue outer
			}
		}
		if want.Value != "" { // an absent label equals ""
			return false
		}
	}
	return true
}

// IsCounter decides whether a series without rate()/value() is a
// counter, from the exposition's TYPE lines: a series of a counter
// family (name, or name without _total), or the _count, _sum or _bucket
// series of a histogram or summary. A series no TYPE line speaks for is
// a counter when its name ends in _total (the naming convention).
func (e *Exposition) IsCounter(name string) bool {
	if t, ok := e.Types[name]; ok {
		return t == "counter"
	}
	for _, suf := range []string{"_total", "_count", "_sum", "_bucket", "_created"} {
		fam, ok := strings.CutSuffix(name, suf)
		if !ok {
			continue
		}
		switch e.Types[fam] {
		case "counter":
			return suf == "_total"
		case "histogram", "summary":
			return suf != "_created"
		case "":
		default:
			return false
		}
	}
	return strings.HasSuffix(name, "_total")
}

// Value sums the samples s selects (several series match when labels
// are left out: http_requests_total without code= is every code) and
// says whether any matched.
func (e *Exposition) Value(s Series) (float64, int) {
	var sum float64
	n := 0
	for _, p := range e.Samples {
		if s.Match(p) {
			sum += p.Value
			n++
		}
	}
	return sum, n
}

// promSource is prom:URL#SERIES.
type promSource struct {
	url    string
	series Series
	opt    SourceOptions
	client *http.Client
	k      counter
}

const maxPromBody = 16 << 20

func newProm(spec, arg string, opt SourceOptions) (*promSource, error) {
	raw, sel, ok := strings.Cut(arg, "#")
	if !ok || strings.TrimSpace(sel) == "" {
		return nil, &SourceError{spec, `want prom:URL#SERIES, e.g. prom:http://127.0.0.1:9100/metrics#node_network_receive_bytes_total{device="eth0"}`}
	}
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, &SourceError{spec, fmt.Sprintf("URL %q: want http://HOST:PORT/PATH", raw)}
	}
	s, err := ParseSeries(sel)
	if err != nil {
		return nil, &SourceError{spec, err.Error()}
	}
	return &promSource{url: raw, series: s, opt: opt, client: &http.Client{}}, nil
}

func (s *promSource) String() string { return "prom:" + s.url + "#" + s.series.String() }
func (s *promSource) Close() error   { s.client.CloseIdleConnections(); return nil }

func (s *promSource) Sample(ctx context.Context) (float64, bool, error) {
	v, ok, err := s.sample(ctx)
	if err != nil {
		s.k.forget()
		return 0, false, fmt.Errorf("prom %s: %w", s.url, err)
	}
	return v, ok, nil
}

func (s *promSource) sample(ctx context.Context) (float64, bool, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.url, nil)
	if err != nil {
		return 0, false, err
	}
	req.Header.Set("Accept", "application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5")
	resp, err := s.client.Do(req)
	if err != nil {
		return 0, false, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, false, fmt.Errorf("HTTP %s", resp.Status)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxPromBody+1))
	if err != nil {
		return 0, false, err
	}
	now := s.opt.clock()()
	if len(body) > maxPromBody {
		return 0, false, fmt.Errorf("exposition larger than %d MiB", maxPromBody>>20)
	}
	e, err := ParseExposition(body, expfmt.ResponseFormat(resp.Header))
	if err != nil {
		return 0, false, err
	}
	v, n := e.Value(s.series)
	if n == 0 {
		return 0, false, fmt.Errorf("no series %s among %d samples", s.series, len(e.Samples))
	}
	rate := s.series.Rate
	if s.series.Auto {
		rate = e.IsCounter(s.series.Name)
	}
	if !rate {
		return v, true, nil
	}
	r, ok := s.k.observe(v, now)
	return r, ok, nil
}
