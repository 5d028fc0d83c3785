package rewrite

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/stint-project/stint/rewrite/facts"
	"github.com/stint-project/stint/runtime"
)

// Sample is a parsed --sample METHOD (the grammar of the runtime's
// sample_parse in runtime/src/sample.c).
type Sample struct {
	// Method is one of runtime.SampleRate, SampleEvery, SampleReservoir;
	// 0 means all: every event, no sampler.
	Method int
	// Param is the share of the events in ppm (rate and reservoir), or
	// N (every).
	Param uint64
}

// SampleMethods lists the --sample grammar, for messages and help.
const SampleMethods = "all, rate:P% (each event with probability P), every:N (every Nth) or reservoir:P% (a reservoir per function and interval, P% of its events in the interval before)"

// ParseSample parses a sampling method: all, rate:P%, every:N or
// reservoir:P%, P in (0, 100] with up to 4 decimals.
func ParseSample(s string) (Sample, error) {
	v := strings.TrimSpace(s)
	bad := func(why string) (Sample, error) {
		return Sample{}, fmt.Errorf("sampling method %q: %s; want %s", s, why, SampleMethods)
	}
	if v == "all" {
		return Sample{}, nil
	}
	if n, ok := strings.CutPrefix(v, "every:"); ok {
		x, err := strconv.ParseUint(n, 10, 64)
		if err != nil || x == 0 || x > 1e12 {
			return bad("N must be a whole number from 1 to 10^12")
		}
		return Sample{Method: runtime.SampleEvery, Param: x}, nil
	}
	m, p := 0, ""
	if q, ok := strings.CutPrefix(v, "rate:"); ok {
		m, p = runtime.SampleRate, q
	} else if q, ok := strings.CutPrefix(v, "reservoir:"); ok {
		m, p = runtime.SampleReservoir, q
	} else {
		return bad("unknown method")
	}
	pct, ok := strings.CutSuffix(p, "%")
	whole, frac, scale, dok := decimal(pct, 4)
	if !ok || !dok || whole > 100 {
		return bad("P must be a percentage in (0, 100], e.g. 20%")
	}
	ppm := whole*1e4 + frac*1e4/scale
	if ppm == 0 || ppm > 1e6 {
		return bad("P must be a percentage in (0, 100], e.g. 20%")
	}
	return Sample{Method: m, Param: ppm}, nil
}

// sampleCheck checks the sampling options against each other and the rest.
func (o *Options) sampleCheck() error {
	if o.Sample == "" {
		if o.SamplePer != "" || o.Interval != "" {
			return fmt.Errorf("--sample-per and --interval need --sample")
		}
		return nil
	}
	sm, err := ParseSample(o.Sample)
	if err != nil {
		return err
	}
	switch {
	case o.Tool == ToolBlock:
		return fmt.Errorf("--sample: block coverage is not sampled; sample --tool call, branch or syscall")
	case o.Context:
		return fmt.Errorf("--sample cannot be combined with --context (which records each calling context once)")
	case o.Log != "" || o.SkipCovered != nil:
		return fmt.Errorf("--sample estimates how often events happen; a redundancy log records each once and forgets the rest: they cannot be combined")
	}
	switch o.SamplePer {
	case "", "function":
	case "site":
		if sm.Method != runtime.SampleReservoir {
			return fmt.Errorf("--sample-per site needs a reservoir method (--sample reservoir:P%%)")
		}
	default:
		return fmt.Errorf("--sample-per %q: want function or site", o.SamplePer)
	}
	if o.Interval != "" {
		d, err := ParseDuration(o.Interval)
		if err != nil {
			return fmt.Errorf("--interval: %w", err)
		}
		if d < time.Millisecond {
			return fmt.Errorf("--interval %s: 1ms at least", o.Interval)
		}
	}
	return nil
}

// countdown reports whether the call probes count down before calling
// the runtime (STINT_MF_COUNTDOWN): a sampled call tool.
func (o *Options) countdown() bool { return o.Sample != "" && o.Tool == ToolCall }

// entries reports whether a sampled call tool probes the functions
// calls enter instead of the calls (STINT_MF_ENTRIES; policy.EntrySites):
// rate and a reservoir per function. Not with --sample-per site, whose
// strata are the call sites; not for every:N, whose every Nth call of a
// function follows the period of its callers (on the calls fixture,
// leaf's callers came out at a total variation distance of 0.124 from
// their shares); not for all, whose rows are the calls.
func (o *Options) entries() bool {
	m := strings.TrimSpace(o.Sample)
	return o.countdown() && o.SamplePer != "site" && (strings.HasPrefix(m, "rate:") || strings.HasPrefix(m, "reservoir:")) && o.opt("entry")
}

// stripes reports whether entry probes count down per stripe of threads
// (STINT_MF_STRIPES): where %fs:0 is the thread pointer (not in a static
// or Go executable), unless --no-opt stripe. One countdown per function
// that every thread writes cost MariaDB under OLTP most of what a
// skipped call costs.
func (o *Options) stripes(m facts.Module) bool {
	return o.entries() && m.FS0IsThreadPointer() && o.opt("stripe")
}

// sampleOptions is the sampling part of the module's option string.
func (o *Options) sampleOptions() string {
	if o.Sample == "" || strings.TrimSpace(o.Sample) == "all" {
		return ""
	}
	s := " sample=" + strings.TrimSpace(o.Sample)
	if o.SamplePer != "" {
		s += " sample_per=" + o.SamplePer
	}
	if o.Interval != "" {
		s += " interval=" + strings.TrimSpace(o.Interval)
	}
	return s
}
