package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/pflag"
	"github.com/stint-project/stint/formats"
)

const catHelp = `Usage: trace cat [--limit N] [--kind K,...] FILE

Print a trace file for a person: the run (binary, pid, tool, options,
start time), the module table, then one line per event:

  kind           tid      time           src                dst                value
  jcc-taken      4242     +0.000184211   gzip+0x3a10        gzip+0x3a2c

time is seconds since the process started (CLOCK_MONOTONIC); src and dst
are module+offset, where offset is the link address inside the module
(the same in every run, whatever ASLR did); a dst outside every known
module is printed as an absolute address. value is the syscall number and its
name for syscall events. A compact complete trace (rewrite --every: FILE.paths
beside FILE) is decoded after the file's own rows, one thread after
another.

Flags:
  -n, --limit N       print at most N events (default: all)
  -k, --kind K,...    print only these kinds (repeatable): the events
                      jcc-taken, jcc-not-taken, jmp, call, ret, ind-jmp,
                      ind-call, syscall, block, context; the runtime's rows
                      period, period-stats, period-qos, period-switch,
                      period-close, run-end; refused-EVENT

A file cut inside a batch is printed up to the cut, then reported as an
error (exit status 1).
`

func runCat(ctx context.Context, args []string, stdout io.Writer) error {
	fs := pflag.NewFlagSet("cat", pflag.ContinueOnError)
	limit := fs.IntP("limit", "n", 0, "print at most `N` events")
	kinds := fs.StringSliceP("kind", "k", nil, "print only these event kinds")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return usagef("cat: want exactly one FILE, have %d arguments (run 'trace cat --help')", fs.NArg())
	}
	if *limit < 0 {
		return usagef("cat: --limit must not be negative")
	}
	var want [256]bool
	for _, k := range *kinds {
		kk, err := formats.ParseKind(k)
		if err != nil {
			return usagef("cat: --kind: %v", err)
		}
		want[kk] = true
	}
	filter := len(*kinds) > 0
	name := fs.Arg(0)

	r, err := formats.Open(name)
	if err != nil {
		return fileError(name, err)
	}
	defer r.Release()
	w := bufio.NewWriter(stdout)
	defer w.Flush()
	run := r.Run()
	fmt.Fprintln(w, name)
	printRun(w, run)
	n := newNamer(r.Modules())
	printModules(w, r.Modules())
	fmt.Fprintf(w, "events\n  %-13s %-8s %-14s %-22s %-22s %s\n", "kind", "tid", "time", "src", "dst", "value")
	printed := 0
	print := func(e formats.Event) bool {
		if filter && !want[e.Kind] {
			return true
		}
		if *limit > 0 && printed >= *limit {
			return false
		}
		dst := n.addr(e.DstModule, e.Dst)
		if _, refused := e.Kind.Refused(); e.Kind.IsRecord() && !refused {
			dst = fmt.Sprint(e.Dst) // a record's dst is a number (a count, ns), not an address
		} else if e.Kind == formats.KindSyscall {
			dst = "-"
		}
		val := ""
		switch {
		case e.Kind == formats.KindSyscall:
			val = fmt.Sprintf("%d %s", e.Value, formats.SyscallName(e.Value))
		case e.Value != 0:
			val = fmt.Sprint(e.Value)
		}
		line := fmt.Sprintf("  %-13s %-8d %-14s %-22s %-22s %s", e.Kind, e.TID, relTime(e.Time, run.MonoStartNS), n.addr(e.SrcModule, e.Src), dst, val)
		w.WriteString(strings.TrimRight(line, " "))
		w.WriteByte('\n')
		printed++
		return true
	}
	var evs []formats.Event
	for r.Next() {
		if err := ctx.Err(); err != nil {
			return err
		}
		evs = r.AppendEvents(evs[:0])
		for _, e := range evs {
			if !print(e) {
				return w.Flush()
			}
		}
	}
	if err := r.Err(); err != nil {
		w.Flush()
		return fileError(name, err)
	}
	if _, err := pathEvents(ctx, name, print); err != nil {
		w.Flush()
		return fileError(name, err)
	}
	return w.Flush()
}

func printRun(w io.Writer, run formats.Run) {
	if run == (formats.Run{}) {
		fmt.Fprintf(w, "  run        (no run metadata: the runtime had not written it)\n")
		return
	}
	fmt.Fprintf(w, "  run        %s pid %d (parent %d), tool %s, options %q\n", run.Binary, run.PID, run.PPID, run.Tool, run.Options)
	if run.BuildID != "" {
		fmt.Fprintf(w, "  build-id   %s\n", run.BuildID)
	}
	if run.StartNS != 0 {
		fmt.Fprintf(w, "  started    %s\n", time.Unix(0, run.StartNS).UTC().Format(time.RFC3339Nano))
	}
}

func printModules(w io.Writer, ms []formats.Module) {
	fmt.Fprintf(w, "modules\n")
	if len(ms) == 0 {
		fmt.Fprintf(w, "  (none)\n")
		return
	}
	fmt.Fprintf(w, "  %-5s %-18s %-10s %-9s %s\n", "id", "base", "size", "rewritten", "path [build-id]")
	for _, m := range ms {
		rw := "no"
		if m.Rewritten {
			rw = "yes"
		}
		bid := ""
		if m.BuildID != "" {
			bid = " [" + m.BuildID + "]"
		}
		fmt.Fprintf(w, "  %-5d %-18s %-10s %-9s %s%s\n", m.ID, fmt.Sprintf("%#x", m.Base), fmt.Sprintf("%#x", m.Size), rw, m.Path, bid)
	}
}

// namer prints module-relative addresses as name+offset.
type namer struct{ names map[uint16]string }

func newNamer(ms []formats.Module) *namer {
	n := &namer{names: map[uint16]string{}}
	count := map[string]int{}
	for _, m := range ms {
		count[baseName(m.Path)]++
	}
	for _, m := range ms {
		b := baseName(m.Path)
		if count[b] > 1 { // two modules with one base name: tell them apart
			b = fmt.Sprintf("%s#%d", b, m.ID)
		}
		n.names[m.ID] = b
	}
	return n
}

func (n *namer) module(id uint16) string {
	if s, ok := n.names[id]; ok {
		return s
	}
	if id == formats.NoModule {
		return "(none)"
	}
	return fmt.Sprintf("module#%d", id)
}

func (n *namer) addr(id uint16, a uint64) string {
	if id == formats.NoModule {
		return fmt.Sprintf("%#x", a)
	}
	return fmt.Sprintf("%s+%#x", n.module(id), a)
}

// relTime prints t as seconds after the run's start, or as raw ns if
// the start is unknown or later.
func relTime(t, start uint64) string {
	if start == 0 || t < start {
		return fmt.Sprintf("%dns", t)
	}
	d := t - start
	return fmt.Sprintf("+%d.%09d", d/1e9, d%1e9)
}
