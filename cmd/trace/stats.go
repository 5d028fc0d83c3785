package main

import (
	"bufio"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"time"

	"github.com/spf13/pflag"
	"github.com/stint-project/stint/analysis/cov"
	"github.com/stint-project/stint/analysis/sample"
	"github.com/stint-project/stint/formats"
)

const statsHelp = `Usage: trace stats FILE...

Summarise each trace file: the run, how the file ended, the number of
record batches and events, the distinct (src, dst, kind) triples, the time
span, counts per event kind, per module (as source and as destination)
and per thread, and for a budgeted run its periods: how many, how many
closed their gate early and how (a probe's charge, the period's start, the
roll), the budget used (median, max), overshoots, and for the closed ones
what was used when the gate closed, the reserve the close kept for the
off-switch, and what of the budget was left unspent at the end.

For a sampled run (rewrite --sample): the method, the intervals, how many
samples stand for how many events, the reader thread's working time and
the samples lost, then the largest estimated counts (calls to a
function, other events at a site) with their 95% intervals, and the
largest shares of their outcomes (a function's callers, a branch's
destinations). A reservoir per function counts its function's calls
exactly; the samples estimate the callers. Functions are named from the
modules' files where those are still there.

How a file ends:
  cleanly: end-of-stream marker     the process closed its trace
  cleanly: zero padding             the process did not close its trace
                                    (killed, crashed, or still running):
                                    every sealed batch is there
  cleanly: end of input             no marker, nothing missing
  CUT at offset N                   the file ends inside a batch (copied
                                    while being written?); the counts cover
                                    the complete batches before offset N

A cut file is reported, not an error; a file that is not a trace, or is
malformed, is (exit status 1, after the other files).
`

type fileStats struct {
	batches  int
	events   int
	kinds    [256]int
	srcMod   map[uint16]int
	dstMod   map[uint16]int
	threads  map[uint32]int
	distinct map[triple]struct{}
	counted  map[triple]uint64 // block-count rows: each block's executions (rewrite --counts)
	first    uint64
	last     uint64
	periods  formats.PeriodBuilder
	traps    uint64 // run-end rows' dst: int3 sites' traps taken
}

type triple struct {
	srcMod, dstMod uint16
	kind           formats.Kind
	src, dst       uint64
}

func runStats(ctx context.Context, args []string, stdout io.Writer) error {
	fs := pflag.NewFlagSet("stats", pflag.ContinueOnError)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() == 0 {
		return usagef("stats: no FILE given (run 'trace stats --help')")
	}
	w := bufio.NewWriter(stdout)
	defer w.Flush()
	var errs []error
	for i, name := range fs.Args() {
		if i > 0 {
			fmt.Fprintln(w)
		}
		if err := statsFile(ctx, w, name); err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			errs = append(errs, fileError(name, err))
		}
	}
	if err := w.Flush(); err != nil {
		return err
	}
	return errors.Join(errs...)
}

func statsFile(ctx context.Context, w io.Writer, name string) error {
	r, err := formats.Open(name)
	if err != nil {
		return err
	}
	defer r.Release()
	s := fileStats{
		srcMod: map[uint16]int{}, dstMod: map[uint16]int{}, threads: map[uint32]int{},
		distinct: map[triple]struct{}{}, counted: map[triple]uint64{}, first: ^uint64(0),
	}
	est := sample.NewEstimator()
	add := func(e formats.Event) bool {
		est.Add(e)
		s.events++
		s.kinds[e.Kind]++
		s.srcMod[e.SrcModule]++
		s.dstMod[e.DstModule]++
		s.threads[e.TID]++
		s.distinct[triple{e.SrcModule, e.DstModule, e.Kind, e.Src, e.Dst}] = struct{}{}
		if e.Kind == formats.KindBlockCount {
			s.counted[triple{srcMod: e.SrcModule, src: e.Src}] += e.Dst
		}
		if e.Kind == formats.KindRunEnd {
			s.traps += e.Dst
		}
		s.first = min(s.first, e.Time)
		s.last = max(s.last, e.Time)
		s.periods.Add(e)
		return true
	}
	var evs []formats.Event
	for r.Next() {
		if err := ctx.Err(); err != nil {
			return err
		}
		s.batches++
		evs = r.AppendEvents(evs[:0])
		for _, e := range evs {
			add(e)
		}
	}
	end, endErr := r.End(), r.Err()
	if end == formats.EndError {
		return endErr
	}
	pst, err := pathEvents(ctx, name, add)
	if err != nil {
		return err
	}
	run := r.Run()
	fmt.Fprintln(w, name)
	printRun(w, run)
	switch end {
	case formats.EndCut:
		msg := endErr.Error()
		var fe *formats.FormatError
		if errors.As(endErr, &fe) {
			msg = fe.Msg
		}
		fmt.Fprintf(w, "  ended      CUT at offset %d: %s\n", r.EndOffset(), msg)
	default:
		fmt.Fprintf(w, "  ended      cleanly: %v at offset %d\n", end, r.EndOffset())
	}
	fmt.Fprintf(w, "  batches    %d\n", s.batches)
	printPathStats(w, pst, s.events)
	fmt.Fprintf(w, "  events     %d (distinct (src,dst,kind): %d)\n", s.events, len(s.distinct))
	printCounted(w, s.counted)
	if s.traps > 0 {
		fmt.Fprintf(w, "  int3 traps %d (sites no jump fits run through a SIGTRAP each time, until restored)\n", s.traps)
	}
	if s.events == 0 {
		return nil
	}
	span := s.last - s.first
	if run.MonoStartNS != 0 && s.first >= run.MonoStartNS {
		fmt.Fprintf(w, "  time span  %s (first %ss, last %ss after start)\n",
			secs(span), relTime(s.first, run.MonoStartNS), relTime(s.last, run.MonoStartNS))
	} else {
		fmt.Fprintf(w, "  time span  %s (first %dns, last %dns)\n", secs(span), s.first, s.last)
	}
	pct := func(n int) string { return fmt.Sprintf("%5.1f%%", 100*float64(n)/float64(s.events)) }
	fmt.Fprintf(w, "  kinds\n")
	for k := range s.kinds {
		if n := s.kinds[k]; n > 0 {
			fmt.Fprintf(w, "    %-16s %10d %s\n", formats.Kind(k), n, pct(n))
		}
	}
	nm := newNamer(r.Modules())
	fmt.Fprintf(w, "  modules    %-24s %10s %10s\n", "", "as src", "as dst")
	ids := map[uint16]bool{}
	for id := range s.srcMod {
		ids[id] = true
	}
	for id := range s.dstMod {
		ids[id] = true
	}
	for _, id := range slices.Sorted(mapKeys(ids)) {
		label := fmt.Sprintf("%d %s", id, nm.module(id))
		if id == formats.NoModule {
			label = "- (no module)"
		}
		fmt.Fprintf(w, "    %-33s %10d %10d\n", label, s.srcMod[id], s.dstMod[id])
	}
	type tc struct {
		tid uint32
		n   int
	}
	var ts []tc
	for tid, n := range s.threads {
		ts = append(ts, tc{tid, n})
	}
	slices.SortFunc(ts, func(a, b tc) int { return cmp.Or(cmp.Compare(b.n, a.n), cmp.Compare(a.tid, b.tid)) })
	fmt.Fprintf(w, "  threads    %d\n", len(ts))
	for _, t := range ts {
		fmt.Fprintf(w, "    tid %-12d %10d %s\n", t.tid, t.n, pct(t.n))
	}
	printPeriods(w, s.periods.Periods())
	printSampling(w, est, nm, r.Modules(), len(s.periods.Periods()) > 0)
	return nil
}

// printPeriods summarises a run's budget periods (nothing if it has none).
func printPeriods(w io.Writer, ps []formats.Period) {
	var used, over, atClose, reserve, unspent []uint64
	var how [4]int
	closes := 0
	granted := map[uint64]bool{}
	for _, p := range ps {
		if !p.HasBudget {
			continue
		}
		granted[p.Granted] = true
		used = append(used, p.Used)
		if p.Overshoot > 0 {
			over = append(over, p.Overshoot)
		}
		if p.HasClose {
			closes++
			unspent = append(unspent, p.Granted-min(p.Granted, p.Used))
			if p.ClosedHow == formats.CloseUnknown || p.ClosedHow >= uint64(len(how)) {
				how[0]++ // no note of what it used and kept
				continue
			}
			how[p.ClosedHow]++
			atClose = append(atClose, p.CloseUsed)
			reserve = append(reserve, p.CloseReserve)
		}
	}
	if len(used) == 0 {
		return
	}
	budget := "budgets vary"
	if len(granted) == 1 {
		for g := range granted {
			budget = "budget " + ms(g)
		}
	}
	fmt.Fprintf(w, "  periods    %d (%s); used median %s, max %s; %d over budget", len(used), budget, ms(median(used)), ms(slices.Max(used)), len(over))
	if len(over) > 0 {
		fmt.Fprintf(w, " (median %s, max %s)", ms(median(over)), ms(slices.Max(over)))
	}
	fmt.Fprintln(w)
	if closes == 0 {
		fmt.Fprintf(w, "    no gate closed\n")
		return
	}
	fmt.Fprintf(w, "    %d gates closed: %d by a probe's charge, %d at the period's start, %d at its end", closes, how[formats.CloseByCharge], how[formats.CloseAtStart], how[formats.CloseAtRoll])
	if how[0] > 0 {
		fmt.Fprintf(w, ", %d unknown", how[0])
	}
	fmt.Fprintln(w)
	if len(atClose) == 0 {
		fmt.Fprintf(w, "    unspent at the end (median) %s\n", ms(median(unspent)))
		return
	}
	fmt.Fprintf(w, "    at the close (medians): used %s, reserve kept %s; unspent at the end %s\n", ms(median(atClose)), ms(median(reserve)), ms(median(unspent)))
}

// median returns the nearest-rank median of xs (reordered), the rule cov
// compare and the report use too.
func median(xs []uint64) uint64 {
	slices.Sort(xs)
	return cov.Rank(xs, 0.5)
}

// ms prints ns as a duration: to the microsecond from a millisecond up.
func ms(ns uint64) string {
	d := time.Duration(min(ns, math.MaxInt64))
	if d >= time.Millisecond {
		d = d.Round(time.Microsecond)
	}
	return d.String()
}

func mapKeys[K comparable, V any](m map[K]V) func(func(K) bool) {
	return func(yield func(K) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

func secs(ns uint64) string { return fmt.Sprintf("%d.%09ds", ns/1e9, ns%1e9) }

// printCounted sums up a block-count trace (rewrite --counts): how many
// blocks ran, and how many times in all.
func printCounted(w io.Writer, counted map[triple]uint64) {
	if len(counted) == 0 {
		return
	}
	var total uint64
	for _, n := range counted {
		total += n
	}
	fmt.Fprintf(w, "  counts     %d blocks ran, %d block executions in all\n", len(counted), total)
}
