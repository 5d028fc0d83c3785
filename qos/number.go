package qos

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// ParseNumber parses a threshold or max: a decimal number, an optional
// multiplier and an optional unit that is only decoration:
//
//	30000  30k  1.5M  2G  1T          (k, M, G, T: powers of 1000)
//	64Ki  1Mi  2Gi                    (Ki, Mi, Gi, Ti: powers of 1024)
//	1MB/s  500kB  30k/s  1Mi B/s      (B, /s and B/s are ignored)
//
// A lower-case m is refused: it would be milli to some and mega to
// others (write M, or 0.001).
func ParseNumber(s string) (float64, error) {
	t := strings.TrimSpace(s)
	i := 0
	for i < len(t) && strings.IndexByte("0123456789.eE+-", t[i]) >= 0 {
		// an exponent only after a digit, so "1e3" works but "e" alone not
		if (t[i] == 'e' || t[i] == 'E') && (i == 0 || i+1 >= len(t) || strings.IndexByte("0123456789+-", t[i+1]) < 0) {
			break
		}
		i++
	}
	num, rest := t[:i], strings.TrimSpace(t[i:])
	v, err := strconv.ParseFloat(num, 64)
	if num == "" || err != nil {
		return 0, fmt.Errorf("number %q: want e.g. 30000, 30k, 1.5M or 64Ki", s)
	}
	mul := 1.0
	for _, m := range []struct {
		p string
		v float64
	}{{"Ki", 1 << 10}, {"Mi", 1 << 20}, {"Gi", 1 << 30}, {"Ti", 1 << 40}, {"k", 1e3}, {"K", 1e3}, {"M", 1e6}, {"G", 1e9}, {"T", 1e12}} {
		if strings.HasPrefix(rest, m.p) {
			mul, rest = m.v, strings.TrimSpace(rest[len(m.p):])
			break
		}
	}
	if strings.HasPrefix(rest, "m") {
		return 0, fmt.Errorf("number %q: 'm' is ambiguous (milli or mega?): write M for 10^6 or a plain decimal", s)
	}
	switch rest {
	case "", "B", "/s", "B/s":
	default:
		return 0, fmt.Errorf("number %q: unknown suffix %q (want k, M, G, T, Ki, Mi, Gi, Ti, optionally followed by B, /s or B/s)", s, rest)
	}
	v *= mul
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return 0, fmt.Errorf("number %q: not finite", s)
	}
	return v, nil
}

// FormatNumber prints v compactly with an SI multiplier (30k, 1.5M).
func FormatNumber(v float64) string {
	a := math.Abs(v)
	for _, m := range []struct {
		s string
		v float64
	}{{"T", 1e12}, {"G", 1e9}, {"M", 1e6}, {"k", 1e3}} {
		if a >= m.v {
			return strconv.FormatFloat(v/m.v, 'g', 4, 64) + m.s
		}
	}
	return strconv.FormatFloat(v, 'g', 4, 64)
}

// ParsePeriod parses the sampling period (a Go duration: 1s, 250ms,
// 1.5s) and checks that the runtime accepts it: 1ms to 1h.
func ParsePeriod(s string) (time.Duration, error) {
	d, err := time.ParseDuration(strings.TrimSpace(s))
	if err != nil {
		return 0, fmt.Errorf("period %q: want a duration such as 1s or 250ms", s)
	}
	if d < time.Millisecond || d > time.Hour {
		return 0, fmt.Errorf("period %q: want 1ms to 1h", s)
	}
	return d, nil
}

// PeriodEnv formats d the way the runtime parses STINT_PERIOD: a whole
// number and one unit (s, ms, us or ns).
func PeriodEnv(d time.Duration) string {
	switch {
	case d%time.Second == 0:
		return strconv.FormatInt(int64(d/time.Second), 10) + "s"
	case d%time.Millisecond == 0:
		return strconv.FormatInt(int64(d/time.Millisecond), 10) + "ms"
	case d%time.Microsecond == 0:
		return strconv.FormatInt(int64(d/time.Microsecond), 10) + "us"
	}
	return strconv.FormatInt(int64(d), 10) + "ns"
}

// BudgetEnv checks a default budget and returns it as STINT_BUDGET says
// it: a percentage of the period ("10%", "2.5%", up to 4 decimals as the
// runtime reads them) or a duration up to the period ("50ms"). "0",
// "0%" and "none" mean no instrumentation without a fresh sample; the
// runtime reads that from STINT_BUDGET=none when a QoS page is set.
func BudgetEnv(s string, period time.Duration) (string, error) {
	t := strings.TrimSpace(s)
	switch t {
	case "none", "0", "0%":
		return "none", nil
	}
	if p, ok := strings.CutSuffix(t, "%"); ok {
		v, err := strconv.ParseFloat(strings.TrimSpace(p), 64)
		if err != nil || math.IsNaN(v) || v < 0 || v > 100 {
			return "", fmt.Errorf("default budget %q: want a percentage from 0%% to 100%%, e.g. 10%%", s)
		}
		if v == 0 {
			return "none", nil
		}
		if v < 0.0001 {
			return "", fmt.Errorf("default budget %q: the runtime's resolution is 0.0001%%", s)
		}
		return strconv.FormatFloat(v, 'f', -1, 64) + "%", nil
	}
	d, err := time.ParseDuration(t)
	if err != nil {
		return "", fmt.Errorf("default budget %q: want a percentage of the period (10%%) or a duration (50ms)", s)
	}
	if d < 0 || d > period {
		return "", fmt.Errorf("default budget %q: want a duration from 0 to the period (%v)", s, period)
	}
	if d == 0 {
		return "none", nil
	}
	return PeriodEnv(d), nil
}
