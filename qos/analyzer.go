package qos

import (
	"context"
	"fmt"
	"io"
	"time"
)

// Analyzer is QDIME's metric analyzer: every Period it observes Source
// and publishes the value on Page. A source that errors sets the page's
// state to Failing (the runtime then grants its default budget) and is
// tried again next period; Log gets one message when a source starts
// failing and one when it answers again, never one per period.
type Analyzer struct {
	Source  Source
	Page    *Page
	Period  time.Duration
	Samples *SamplesWriter // optional
	Log     io.Writer      // messages for people; nil = none
	Clock   Clock          // nil = Monotonic

	stats   Stats
	failing bool
	lastErr string
}

// Stats counts what an analyzer did.
type Stats struct {
	Periods   int // observations made
	Published int // samples published
	Errors    int // observations that failed
}

// Stats returns the counts so far.
func (a *Analyzer) Stats() Stats { return a.stats }

func (a *Analyzer) clock() time.Duration {
	if a.Clock == nil {
		return Monotonic()
	}
	return a.Clock()
}

func (a *Analyzer) logf(format string, args ...any) {
	if a.Log != nil {
		fmt.Fprintf(a.Log, "qos: "+format+"\n", args...)
	}
}

// Step makes one observation (bounded by 3/4 of the period) and
// publishes its outcome. It returns the source's error, if any, which
// Step has already handled (state Failing, one message).
func (a *Analyzer) Step(ctx context.Context) error {
	sctx, cancel := context.WithTimeout(ctx, a.Period*3/4)
	v, ok, err := a.Source.Sample(sctx)
	cancel()
	if err == nil && ok {
		err = a.Page.Publish(v, a.clock())
		if err != nil {
			err = fmt.Errorf("%s: %w", a.Source, err)
		}
	}
	a.stats.Periods++
	row := SampleRow{Mono: a.clock()}
	switch {
	case err != nil:
		a.stats.Errors++
		if ctx.Err() != nil {
			return err // stopping: not the source's fault
		}
		a.Page.SetState(Failing)
		if !a.failing {
			a.logf("metric source %s failing: %v; the program runs with the default budget until it answers (retrying every %v)", a.Source, err, a.Period)
		}
		a.failing = true
	case ok:
		a.stats.Published++
		row.Value, row.HasValue = v, true
		if a.failing && a.stats.Published == 1 {
			a.logf("metric source %s answers", a.Source)
		} else if a.failing {
			a.logf("metric source %s answers again", a.Source)
		}
		a.failing = false
	}
	if snap, serr := a.Page.Snapshot(); serr == nil {
		row.State = snap.State
	}
	if a.Samples != nil {
		if werr := a.Samples.Write(row); werr != nil && a.stats.Periods == 1 {
			a.logf("samples file: %v", werr)
		}
	}
	return err
}

// Run observes the source at once and then every Period until ctx is
// done, then sets the page's state to Stopped (and writes a last
// samples row saying so). A [Watcher] source is also watched every
// [WatchEvery] in between. Run does not close the page or the source.
func (a *Analyzer) Run(ctx context.Context) Stats {
	t := time.NewTicker(a.Period)
	defer t.Stop()
	var watch <-chan time.Time
	w, _ := a.Source.(Watcher)
	if w != nil {
		wt := time.NewTicker(WatchEvery(a.Period))
		defer wt.Stop()
		watch = wt.C
	}
	for {
		a.Step(ctx)
		for due := false; !due; {
			select {
			case <-ctx.Done():
				a.stop()
				return a.stats
			case <-watch:
				w.Watch(ctx)
			case <-t.C:
				due = true
			}
		}
	}
}

func (a *Analyzer) stop() {
	a.Page.SetState(Stopped)
	if a.Samples != nil {
		a.Samples.Write(SampleRow{Mono: a.clock(), State: Stopped})
	}
}
