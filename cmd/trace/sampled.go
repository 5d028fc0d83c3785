package main

import (
	"fmt"
	"io"

	"github.com/stint-project/stint/analysis/sample"
	"github.com/stint-project/stint/analysis/symbols"
	"github.com/stint-project/stint/formats"
)

// sampledTop and sampledOutcomes bound what trace stats prints of a
// sampled run's estimates: the largest targets and their largest outcomes.
const (
	sampledTop      = 10
	sampledOutcomes = 3
)

var methodNames = map[int]string{
	formats.SampleRate: "rate", formats.SampleEvery: "every", formats.SampleReservoir: "reservoir per function",
	formats.SampleResSite: "reservoir per site",
}

// printSampling summarises a sampled run (nothing for another): how it
// sampled, what the samples stand for, and the largest estimated counts
// with their largest outcomes (callers of a function, destinations of a
// branch), each with its 95% interval.
func printSampling(w io.Writer, est *sample.Estimator, nm *namer, mods []formats.Module, budgeted bool) {
	run := est.Run()
	if run.Method == 0 {
		return
	}

	param := fmt.Sprintf("%g%%", float64(run.Param)/1e4)
	if run.Method == formats.SampleEvery {
		param = fmt.Sprintf("N=%d", run.Param)
	}
	name := methodNames[run.Method]
	switch {
	case run.Entries && run.Method != formats.SampleReservoir:
		name += " per function" // a sampled call tool's function entries count down
	case run.Sites && run.Method != formats.SampleResSite:
		name += " per site" // a sampled call tool's call sites count down
	}
	fmt.Fprintf(w, "  sampling   %s %s, interval %s: %d intervals, %d strata-intervals, %d samples for %d events\n",
		name, param, ms(run.IntervalNS), run.Intervals, run.Sets, run.Samples, run.Events)
	if run.HasReader {
		busy := 0.0
		if run.ReaderLifeNS > 0 {
			busy = 100 * float64(run.ReaderBusyNS) / float64(run.ReaderLifeNS)
		}
		fmt.Fprintf(w, "    reader thread worked %s of %s (%.2f%%); %d samples lost\n", ms(run.ReaderBusyNS), ms(run.ReaderLifeNS), busy, run.Lost)
	} else {
		fmt.Fprintf(w, "    no sample-reader row: the process did not exit (killed?); its last interval is missing\n")
	}
	if budgeted {
		fmt.Fprintf(w, "    a budgeted run: the counts are of the events while its gates were open\n")
	}
	if run.Unmatched > 0 {
		fmt.Fprintf(w, "    %d samples without their stratum's sample-set row (not counted)\n", run.Unmatched)
	}
	locName := symbolNamer(nm, mods)
	fmt.Fprintf(w, "  estimated  counts with 95%% intervals (exact: a reservoir's own stratum)\n")
	for i, e := range est.Estimates() {
		if i == sampledTop {
			break
		}
		what := "calls to"
		if e.Kind != formats.KindCall {
			what = e.Kind.String() + " at"
		}
		ci := "exact"
		if !e.Exact {
			ci = fmt.Sprintf("%.0f..%.0f", e.Low, e.High)
		}
		fmt.Fprintf(w, "    %-44s %12.0f  %-22s %d samples\n", what+" "+locName(e.Loc), e.Est, ci, e.Samples)
		for j, o := range e.Outcomes {
			if j == sampledOutcomes {
				fmt.Fprintf(w, "      ... %d more\n", len(e.Outcomes)-j)
				break
			}
			label := locName(o.Loc)
			if e.Kind == formats.KindSyscall {
				label = fmt.Sprintf("syscall %d", o.Value)
			} else if e.Kind == formats.KindCall {
				label = "from " + label
			} else {
				label = "to " + label
			}
			fmt.Fprintf(w, "      %-42s %6.2f%% (%.2f..%.2f%%)\n", label, 100*o.Share, 100*o.ShareLow, 100*o.ShareHigh)
		}
	}
}

// symbolNamer names an address function+offset (module+address) where a
// module's file is still there to read symbols from; module+address else.
func symbolNamer(nm *namer, mods []formats.Module) func(sample.Loc) string {
	tabs := map[uint16]*symbols.Table{}
	for _, m := range mods {
		if t, err := symbols.Load(m.Path); err == nil {
			tabs[m.ID] = t
		}
	}
	return func(l sample.Loc) string {
		a := nm.addr(l.Module, l.Addr)
		if t := tabs[l.Module]; t != nil {
			if f := t.Lookup(l.Addr); f != nil {
				if l.Addr == f.Start {
					return f.Name + " (" + a + ")"
				}
				return fmt.Sprintf("%s+%#x (%s)", f.Name, l.Addr-f.Start, a)
			}
		}
		return a
	}
}
