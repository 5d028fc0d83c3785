package qos

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// A Source produces the metric, one value per period.
//
// Sample observes the source once. Rate sources (file-rate, log-rate,
// redis counters, Prometheus counters) compute the value from this and
// the previous observation over the time that really passed between
// them (CLOCK_MONOTONIC, see [Monotonic]), not the nominal period, so
// their first Sample only sets the baseline and returns ok == false. An
// error leaves the source ready to try again next period; a rate source
// then starts from a new baseline.
type Source interface {
	Sample(ctx context.Context) (v float64, ok bool, err error)
	String() string
	Close() error
}

// Clock returns CLOCK_MONOTONIC as a duration since boot: the clock of
// the page's sample_mono_ns and of the runtime's periods.
type Clock func() time.Duration

// Monotonic reads CLOCK_MONOTONIC, the clock the runtime compares
// sample times with.
func Monotonic() time.Duration {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		panic("clock_gettime(CLOCK_MONOTONIC): " + err.Error()) // cannot fail on Linux
	}
	return time.Duration(ts.Nano())
}

// SourceError is a metric source specification that cannot be used.
type SourceError struct {
	Spec string
	Msg  string
}

func (e *SourceError) Error() string { return fmt.Sprintf("metric %q: %s", e.Spec, e.Msg) }

// SourceOptions are what sources need besides their specification.
type SourceOptions struct {
	// Period bounds a cmd source's run time (3/4 of it) and is the
	// default deadline of one observation.
	Period time.Duration
	// Clock is the time of observations; nil means [Monotonic]. Tests
	// give a fake clock to check rates exactly.
	Clock Clock
}

func (o SourceOptions) clock() Clock {
	if o.Clock == nil {
		return Monotonic
	}
	return o.Clock
}

// SourceKinds lists the metric source forms, for help texts.
var SourceKinds = []string{
	"file-rate:PATH",
	"log-rate:PATH",
	"redis://HOST:PORT[?field=NAME|?rate=NAME]",
	"prom:URL#SERIES, prom:URL#rate(SERIES), prom:URL#value(SERIES)",
	"cmd:COMMAND",
}

// ParseSource makes a Source from its specification (see the package
// documentation for each form). It checks the syntax only: nothing is
// contacted, so the program that serves the metric may start later.
func ParseSource(spec string, opt SourceOptions) (Source, error) {
	if opt.Period <= 0 {
		opt.Period = time.Second
	}
	kind, arg, _ := strings.Cut(spec, ":")
	switch kind {
	case "file-rate":
		if arg == "" {
			return nil, &SourceError{spec, "want file-rate:PATH"}
		}
		return newFileRate(arg, opt), nil
	case "log-rate":
		if arg == "" {
			return nil, &SourceError{spec, "want log-rate:PATH"}
		}
		return newLogRate(arg, opt), nil
	case "redis":
		return newRedis(spec, opt)
	case "prom":
		return newProm(spec, arg, opt)
	case "cmd":
		if strings.TrimSpace(arg) == "" {
			return nil, &SourceError{spec, "want cmd:COMMAND (run with sh -c)"}
		}
		return newCmd(spec, arg, opt), nil
	}
	return nil, &SourceError{spec, "unknown kind; want one of " + strings.Join(SourceKinds, ", ")}
}

// counter turns observations of a growing count into a rate per second.
// A count that goes down (a truncated file, a restarted server) is a
// reset: the new count is what accumulated since the reset.
type counter struct {
	have bool
	last float64
	at   time.Duration
}

// observe records count c taken at t and returns the rate since the
// previous observation (ok == false for the first one, or when no time
// passed).
func (k *counter) observe(c float64, t time.Duration) (float64, bool) {
	prev, prevAt, had := k.last, k.at, k.have
	k.have, k.last, k.at = true, c, t
	if !had || t <= prevAt {
		return 0, false
	}
	d := c - prev
	if d < 0 {
		d = c // reset: count from zero
	}
	return d / (t - prevAt).Seconds(), true
}

// forget drops the baseline (after an error).
func (k *counter) forget() { k.have = false }

// A Watcher is a Source whose count grows in steps that one observation
// per period cannot place in time. gzip writes its output 256 KiB at a
// time, some 18 writes a second here: two observations a second apart
// see 17, 18 or 19 writes by the phase of the writes alone, a rate that
// jumps by 5.5% while gzip runs at an even pace, and a threshold at 90%
// of native then counts periods "under" that gzip never had. The
// [Analyzer] calls Watch between samples (see [WatchEvery]) so the
// source can note when each step appeared.
type Watcher interface {
	Watch(ctx context.Context)
}

// WatchEvery is how often the analyzer watches a [Watcher] for a given
// period: a hundredth of it, between 2 ms and 50 ms.
func WatchEvery(period time.Duration) time.Duration {
	return min(max(period/100, 2*time.Millisecond), 50*time.Millisecond)
}

// stepCounter is a counter for a count that grows in steps: see notes
// each step and when it was first seen, and a period's rate is the
// growth from the last step seen before the period to the last step
// seen in it, over the time between those two steps. The phase of the
// steps against the samples drops out; the error left is the watch
// interval over the span (1% at a second's period). When the count
// stops growing, the time since its last step beyond the mean gap
// between steps is added to the span, so a program that stalls halfway
// through a period shows about half its rate, and one that stalled
// before it shows 0.
//
// Without watching, the steps are the samples themselves and the rate
// is [counter]'s. Before a first step has been seen, or in a period
// with no step after it, the rate is counter's too.
type stepCounter struct {
	plain  counter
	have   bool
	last   float64       // count at the last observation
	at     time.Duration // time of the last observation
	anchor bool          // base is the time a step was seen
	base   time.Duration // when the last step before this period was seen
	stepAt time.Duration // when the last step was seen
	grown  float64       // growth from base to stepAt
	steps  int           // steps from base to stepAt
}

// see notes count c observed at t.
func (k *stepCounter) see(c float64, t time.Duration) {
	if !k.have {
		k.have, k.last, k.at = true, c, t
		return
	}
	if t <= k.at {
		return
	}
	k.at = t
	if c == k.last {
		return
	}
	d := c - k.last
	if d < 0 {
		d = c // reset: count from zero
	}
	k.last = c
	if !k.anchor { // growth before the first step seen has no known start
		k.anchor, k.base, k.stepAt, k.grown, k.steps = true, t, t, 0, 0
		return
	}
	k.stepAt, k.grown, k.steps = t, k.grown+d, k.steps+1
}

// observe is a period's sample: see, then the rate since the previous
// sample (ok == false for the first one, or when no time passed).
func (k *stepCounter) observe(c float64, t time.Duration) (float64, bool) {
	k.see(c, t)
	v, ok := k.plain.observe(c, t)
	if !ok || k.steps == 0 {
		return v, ok
	}
	span := k.stepAt - k.base
	if quiet, gap := t-k.stepAt, span/time.Duration(k.steps); quiet > gap {
		span += quiet - gap
	}
	v = k.grown / span.Seconds()
	k.base, k.grown, k.steps = k.stepAt, 0, 0
	return v, true
}

// restart makes the whole of the next count growth (another file now).
func (k *stepCounter) restart() {
	k.last = 0
	k.plain.last = 0
}

// forget drops the baseline (after an error).
func (k *stepCounter) forget() { *k = stepCounter{} }

// deadline returns ctx's deadline, or now + d.
func deadline(ctx context.Context, d time.Duration) time.Time {
	if t, ok := ctx.Deadline(); ok {
		return t
	}
	return time.Now().Add(d)
}

var errNoValue = errors.New("no value")
