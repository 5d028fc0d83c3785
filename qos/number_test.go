package qos

import (
	"strings"
	"testing"
	"time"
)

func TestParseNumber(t *testing.T) {
	tests := []struct {
		in   string
		want float64
		err  string
	}{
		{"30000", 30000, ""},
		{"30k", 30000, ""},
		{"30K", 30000, ""},
		{"1.5M", 1.5e6, ""},
		{"1MB/s", 1e6, ""},
		{"500kB", 500e3, ""},
		{"64Ki", 65536, ""},
		{"1 Mi B/s", 1 << 20, ""},
		{"2G", 2e9, ""},
		{"1e3", 1000, ""},
		{"0.005", 0.005, ""},
		{"30k/s", 30000, ""},
		{"", 0, "want e.g."},
		{"k", 0, "want e.g."},
		{"1m", 0, "ambiguous"},
		{"1ms", 0, "ambiguous"},
		{"5 apples", 0, "unknown suffix"},
		{"1e400", 0, "want e.g."},
	}
	for _, tt := range tests {
		have, err := ParseNumber(tt.in)
		switch {
		case tt.err == "" && (err != nil || have != tt.want):
			t.Errorf("%q: have %v, %v; want %v", tt.in, have, err, tt.want)
		case tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err)):
			t.Errorf("%q: have %v, %v; want an error with %q", tt.in, have, err, tt.err)
		}
	}
}

func TestPeriodAndBudget(t *testing.T) {
	for _, tt := range []struct {
		in   time.Duration
		want string
	}{{time.Second, "1s"}, {1500 * time.Millisecond, "1500ms"}, {250 * time.Microsecond, "250us"}, {1001, "1001ns"}} {
		if have := PeriodEnv(tt.in); have != tt.want {
			t.Errorf("PeriodEnv(%v): have %q, want %q", tt.in, have, tt.want)
		}
	}
	for _, tt := range []struct{ in, err string }{{"1s", ""}, {"250ms", ""}, {"0s", "1ms to 1h"}, {"2h", "1ms to 1h"}, {"fast", "want a duration"}} {
		_, err := ParsePeriod(tt.in)
		if (tt.err == "") != (err == nil) || err != nil && !strings.Contains(err.Error(), tt.err) {
			t.Errorf("ParsePeriod(%q): have %v, want %q", tt.in, err, tt.err)
		}
	}
	for _, tt := range []struct{ in, want, err string }{
		{"10%", "10%", ""}, {"2.5%", "2.5%", ""}, {"100%", "100%", ""}, {"50ms", "50ms", ""},
		{"none", "none", ""}, {"0", "none", ""}, {"0%", "none", ""}, {"0s", "none", ""},
		{"101%", "", "0% to 100%"}, {"-1%", "", "0% to 100%"}, {"2s", "", "from 0 to the period"},
		{"lots", "", "want a percentage"}, {"0.00001%", "", "resolution"},
	} {
		have, err := BudgetEnv(tt.in, time.Second)
		switch {
		case tt.err == "" && (err != nil || have != tt.want):
			t.Errorf("BudgetEnv(%q): have %q, %v; want %q", tt.in, have, err, tt.want)
		case tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err)):
			t.Errorf("BudgetEnv(%q): have %q, %v; want an error with %q", tt.in, have, err, tt.err)
		}
	}
}
