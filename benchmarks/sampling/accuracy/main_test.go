package main

import (
	"bytes"
	"strings"
	"testing"
)

// TestReport: a sampled run whose shares and callers match the
// exhaustive one's but for one function is reported so, with functions
// under the minimum left out and one never sampled counted.
func TestReport(t *testing.T) {
	f, g, h, rare, gone := loc{"m", 0x10}, loc{"m", 0x20}, loc{"m", 0x30}, loc{"m", 0x40}, loc{"m", 0x50}
	a, b := loc{"m", 0x100}, loc{"m", 0x200}
	ex := &calls{callers: map[loc]map[loc]float64{}}
	ex.add(f, a, 6000)
	ex.add(f, b, 4000)
	ex.add(g, a, 5000)
	ex.add(h, b, 5000)
	ex.add(rare, a, 10)
	ex.add(gone, a, 2000)
	sm := &calls{callers: map[loc]map[loc]float64{}}
	sm.add(f, a, 600) // the same shares, a tenth of the calls
	sm.add(f, b, 400)
	sm.add(g, a, 500)
	sm.add(h, a, 500) // h's callers all wrong
	sm.add(loc{"m", 0x60}, a, 200)
	var out bytes.Buffer
	report(&out, ex, sm, 1000, false)
	got := out.String()
	for _, want := range []string{
		"1000 calls or more: 3 compared, 1 without a sample",
		"share of calls: 3 of 3 within 5%",
		"callers: 2 of 3 within a total variation distance of 0.05",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("report %q: want %q", got, want)
		}
	}
}

// TestReportCounts: with counts, a tenth of the calls is a tenth, not
// the same share; exact counts are within.
func TestReportCounts(t *testing.T) {
	f, g, a := loc{"m", 0x10}, loc{"m", 0x20}, loc{"m", 0x100}
	ex := &calls{callers: map[loc]map[loc]float64{}}
	ex.add(f, a, 6000)
	ex.add(g, a, 4000)
	sm := &calls{callers: map[loc]map[loc]float64{}}
	sm.add(f, a, 600)
	sm.add(g, a, 4100) // 2.5% over
	var out bytes.Buffer
	report(&out, ex, sm, 1000, true)
	if got, want := out.String(), "estimated calls: 1 of 2 within 5%"; !strings.Contains(got, want) {
		t.Errorf("report %q: want %q", got, want)
	}
}
