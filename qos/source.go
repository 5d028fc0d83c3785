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

// deadline returns ctx's deadline, or now + d.
func deadline(ctx context.Context, d time.Duration) time.Time {
	if t, ok := ctx.Deadline(); ok {
		return t
	}
	return time.Now().Add(d)
}

var errNoValue = errors.New("no value")
