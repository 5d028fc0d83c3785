package qos

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/prometheus/common/expfmt"
)

// TestParseOpenMetrics: an OpenMetrics exposition gives the samples a
// text exposition would: a counter under its _total name (its _created
// dropped), a histogram's buckets, sum and count, and the TYPE that
// decides whether a series is a rate.
func TestParseOpenMetrics(t *testing.T) {
	om := `# TYPE req counter
# HELP req Requests.
req_total{code="200"} 5
req_created{code="200"} 1.7e9
req_total{code="500"} 2
# TYPE lat histogram
lat_bucket{le="0.5"} 1
lat_bucket{le="+Inf"} 3
lat_sum 4.5
lat_count 3
# TYPE temp gauge
temp{room="a b"} 21.5
# EOF
`
	e, err := ParseExposition([]byte(om), expfmt.NewFormat(expfmt.TypeOpenMetrics))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		series  string
		v       float64
		n       int
		counter bool
	}{
		{`req_total`, 7, 2, true},
		{`req_total{code="500"}`, 2, 1, true},
		{`lat_bucket{le="+Inf"}`, 3, 1, true},
		{`lat_bucket{le="0.5"}`, 1, 1, true},
		{`lat_count`, 3, 1, true},
		{`temp{room="a b"}`, 21.5, 1, false},
		{`req_created`, 0, 0, false},
	} {
		s, err := ParseSeries(c.series)
		if err != nil {
			t.Fatal(err)
		}
		v, n := e.Value(s)
		if v != c.v || n != c.n {
			t.Errorf("%s: %v over %d samples, want %v over %d", c.series, v, n, c.v, c.n)
		}
		if n > 0 && e.IsCounter(s.Name) != c.counter {
			t.Errorf("%s: IsCounter %v, want %v", c.series, !c.counter, c.counter)
		}
	}
}

// TestParseExpositionErrors: a malformed line is a *PromError with its
// line number; an OpenMetrics exposition without "# EOF" is an error too.
func TestParseExpositionErrors(t *testing.T) {
	_, err := ParsePromText([]byte("ok 1\nbad{ 1\n"))
	var pe *PromError
	if !errors.As(err, &pe) || pe.Line != 2 || !strings.Contains(err.Error(), "line 2") {
		t.Errorf("text: have %v, want a *PromError at line 2", err)
	}
	if _, err := ParseExposition([]byte("# TYPE a gauge\na 1\n"), expfmt.NewFormat(expfmt.TypeOpenMetrics)); err == nil {
		t.Error("OpenMetrics without # EOF: no error")
	}
}

// TestPromOpenMetricsServer: a server that answers in OpenMetrics (as it
// may, given promSource's Accept header) is read as such: its counter
// becomes a rate.
func TestPromOpenMetricsServer(t *testing.T) {
	var scrapes atomic.Int64
	var accept atomic.Value
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		accept.Store(r.Header.Get("Accept"))
		n := scrapes.Add(1)
		w.Header().Set("Content-Type", "application/openmetrics-text; version=1.0.0; charset=utf-8")
		fmt.Fprintf(w, "# TYPE jobs counter\njobs_total %d\n# EOF\n", 100*n)
	}))
	defer srv.Close()
	s := mustSource(t, "prom:"+srv.URL+"/metrics#jobs_total")
	sample(t, s, want{})
	sample(t, s, want{100, true})
	if a, _ := accept.Load().(string); !strings.HasPrefix(a, "application/openmetrics-text") {
		t.Errorf("Accept: %q", a)
	}
}
