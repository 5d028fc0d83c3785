package qos

import (
	"strings"
	"testing"
	"time"

	"github.com/stint-project/stint/internal/testvec"
	"github.com/stint-project/stint/rewrite"
)

// TestGrammarVectors checks the qos command's conversions against the
// runtime's duration and budget grammar (testdata/durations.tsv). qos
// reads Go durations ("1m" too), a superset, and passes the runtime its
// own spelling (PeriodEnv, BudgetEnv): whatever qos accepts must reach
// the runtime as the value the grammar gives, and what the grammar
// refuses qos must refuse, unless it is Go syntax the grammar lacks.
func TestGrammarVectors(t *testing.T) {
	for _, v := range testvec.Durations(t) {
		if v.Budget {
			checkBudgetVector(t, v)
			continue
		}
		d, err := ParsePeriod(v.Input)
		inRange := !v.Err && v.Want >= int64(time.Millisecond) && v.Want <= int64(time.Hour)
		switch {
		case err != nil && inRange:
			t.Errorf("line %d: period %q: %v, want %d", v.Line, v.Input, err, v.Want)
		case err != nil:
		case inRange && int64(d) != v.Want:
			t.Errorf("line %d: period %q: %d, want %d", v.Line, v.Input, d, v.Want)
		case v.Err && !goDuration(v.Input):
			t.Errorf("line %d: period %q: accepted (%v), which the grammar refuses", v.Line, v.Input, d)
		default:
			if back, err := rewrite.ParseDuration(PeriodEnv(d)); err != nil || back != d {
				t.Errorf("line %d: period %q: the runtime reads %q as %v (%v)", v.Line, v.Input, PeriodEnv(d), back, err)
			}
		}
	}
}

func checkBudgetVector(t *testing.T, v testvec.Grammar) {
	t.Helper()
	period := time.Duration(v.Period)
	if period < time.Millisecond {
		return // no period qos accepts (ParsePeriod)
	}
	s, err := BudgetEnv(v.Input, period)
	if err != nil || s == "none" {
		return // refused, or no instrumentation without a sample ("0%")
	}
	d, _, perr := rewrite.ParseBudget(s, period)
	switch {
	case perr != nil:
		t.Errorf("line %d: budget %q: passed as %q, which the runtime refuses: %v", v.Line, v.Input, s, perr)
	case v.Err && !goDuration(v.Input) && !spaced(v.Input, period):
		t.Errorf("line %d: budget %q: accepted as %q, which the grammar refuses", v.Line, v.Input, s)
	case !v.Err && int64(d) != v.Want:
		t.Errorf("line %d: budget %q: passed as %q = %d, want %d", v.Line, v.Input, s, d, v.Want)
	}
}

// spaced reports whether s is a budget of the grammar with white space
// inside, which qos drops ("10 %").
func spaced(s string, period time.Duration) bool {
	_, _, err := rewrite.ParseBudget(strings.Join(strings.Fields(s), ""), period)
	return err == nil && strings.ContainsAny(s, " \t")
}

// goDuration reports whether s is a Go duration that is no percentage.
func goDuration(s string) bool {
	_, err := time.ParseDuration(s)
	return err == nil && !strings.HasSuffix(s, "%")
}
