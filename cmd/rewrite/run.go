package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/spf13/pflag"
	"github.com/stint-project/stint/formats/redlog"
	"github.com/stint-project/stint/internal/cli"
	"github.com/stint-project/stint/rewrite"
)

const usageText = `Usage: rewrite [flags] -o OUT IN

rewrite instruments the x86-64 ELF executable or shared object IN and
writes the result to OUT. Every probe site of the chosen tool is patched in
place (E9Patch's tactics: no code is moved) to jump to a trampoline that
calls stint's runtime, which is added to the file. When OUT runs, each
process writes an Apache Arrow trace file; by default each distinct event
(source, destination, kind) is recorded once and the patch is then undone,
so the program soon runs at nearly full speed.

Tools (--tool):
  branch   every jmp, jcc, call and ret, direct and indirect (default)
  call     every call and ret
  syscall  every syscall instruction (the event carries the number)
  block    the first instruction of every basic block (coverage)

Example:
  $ rewrite -o gzip.stint /usr/bin/gzip
  rewrite: /usr/bin/gzip (pie, tool branch): 3208 sites, 3206 patched (B1 2138, B2 703, ...) = 99.94%, ...
  $ STINT_OUT=/tmp/traces ./gzip.stint -c big.txt > big.txt.gz
  $ ls /tmp/traces
  gzip.stint.12345.1106339105427.arrow

  Shared objects are rewritten the same way; put the rewritten library
  first on LD_LIBRARY_PATH. Events of every rewritten module of a process
  go to the same trace file.

Time budget (DIME): with --budget, instrumentation runs for at most the
budget in every period; once it is spent the probes are switched off
until the next period. The runtime measures what probes cost with the
time-stamp counter. Every period leaves a record in the trace: budget
granted and used, overshoot, events recorded and suppressed, time
enabled, sites switched. A thread of the runtime's own starts the
periods; no signal or timer of the program is used.
  $ rewrite --budget 10% --period 100ms -o gzip.stint /usr/bin/gzip

The off-switch: most patched sites (those one atomic store can undo) get
their original bytes back while probes are off, so the program then runs
its own code, not trampolines. Sites that keep reaching their trampoline
(a jcc with one outcome left to see, returns, indirect branches) are
patched again at each period's start and switched off after the window
(--window, by default as long as the budget) or when the budget is spent.
Windows thin out while periods record nothing (one in two, four, then
eight periods) and come back in every period once one records; code
never seen before stays patched and is recorded the first time it
runs while the budget lasts.

Redundancy log (DIME*): with --log, outcomes recorded by earlier runs are
not recorded again (code they covered runs unprobed from the start), and
new ones are appended to the log every second and at exit. Concurrent
runs share the file safely (flock, append only).
  $ rewrite --budget 10% --log gzip.log -o gzip.stint /usr/bin/gzip
  $ for i in 1 2 3; do ./gzip.stint -c big.txt > /dev/null; done
With --skip-covered LOG, sites whose outcomes are all in the log are left
unpatched, so a later rewrite costs nothing where earlier runs covered:
  $ rewrite --budget 10% --log gzip.log --skip-covered gzip.log -o gzip.stint /usr/bin/gzip
Returns and indirect jumps the log saw stay patched (a new destination is
possible) but start switched off: new code switches them on (a new call
its callee's returns, new code in a function its own sites).
Most sites a workload runs keep an outcome it never shows (an error
path), so they stay patched, and cost, in every skip-covered rewrite.
--retire-since OLD, with OLD a copy of the log taken before the last
run, leaves unpatched too every site that has outcomes in OLD and got
no new one since: that run had its chance there (OLD cannot tell
whether it ran the site, so run the same workload). Retired sites stay
unpatched, and what they did not show is given up:
  $ cp gzip.log gzip.log.before; ./gzip.stint -c big.txt > /dev/null
  $ rewrite --budget 10% --log gzip.log --skip-covered gzip.log --retire-since gzip.log.before -o gzip.stint /usr/bin/gzip

Sampling (the reservoir thesis): with --sample, every occurrence reaches
a sampler, which keeps some and writes them with how many events they
stand for, so counts and caller proportions can be estimated (trace
stats) at a fixed cost. rate:P% takes each event with probability P,
every:N every Nth, reservoir:P% keeps a reservoir per function (a call's
callee; other events' site) and interval, sized at P% of that function's
events in the interval before and at least 8, so every function that
ran appears in each interval's samples. A thread of the runtime's own
writes the samples at each interval's end (sooner when the interval's
room for samples fills); the last interval at exit.
  $ rewrite --tool call --sample reservoir:20% --interval 1s -o prog.stint prog

Block counts (INS-OP's block profiler): with --tool block --counts, each
block's trampoline adds 1 to its counter and goes on, never calling the
runtime; each second and at exit the trace gets the counts that moved
(block_count rows), which the exports turn into hit counts (lcov lines,
pprof samples). The increment takes no lock, as gcov's default: threads
running one block at the same instant may lose a count; --counts-atomic
takes a lock prefix instead. --period sets how often rows are written.
  $ rewrite --tool block --counts -o prog.stint prog

Environment read by the rewritten program:
  STINT_OUT         directory for trace files (default ./traces)
  STINT_DISABLE     set to 1 to restore the original code at start-up and
                    record nothing
  STINT_BUDGET      budget per period, overriding --budget ("10%", "5ms";
                    "none" for no budget). A bad value is reported and
                    --budget holds.
  STINT_PERIOD      period, overriding --period ("100ms", "1s"); a bad
                    value is reported and --period holds
  STINT_WINDOW      window, overriding --window ("10%", "5ms", "none");
                    a bad value is reported and --window holds
  STINT_SWITCH      set to 0 to keep every patch in place (no off-switch),
                    e.g. to measure what the off-switch saves
  STINT_RETS        set to 0 to stop a call whose return is not recorded
                    from switching its callee's ret sites on (and a
                    logged call from waiting for its return), and new
                    code after the window from switching its function's
                    rets, indirect branches and jccs on; "calls" stops
                    only the last
  STINT_COLD        set to 0 to start the returns and indirect jumps a
                    --skip-covered log saw switched on, like other sites
  STINT_QUIET       set to 0 to keep a window in every period; by default
                    windows back off after periods that record nothing
                    (down to one in eight periods) until one records
  STINT_HUGE        set to 0 to keep the tables and trampolines in the
                    file's 4 KiB pages instead of 2 MiB anonymous pages
                    (--every modules always keep them)
  STINT_SWITCH_SELF set to 0 to stop a program with one thread from
                    switching the patches that straddle a word itself
                    (they then stay on, or with --switch-sync the
                    runtime's thread parks the program to switch them)
  STINT_TRAP_RETIRE set to 0 to keep a hot int3 site (one no jump fits)
                    trapping; by default its 1,024th trap restores it,
                    its later new outcomes unrecorded (--every and
                    --counts never retire one)
  STINT_SAMPLE      sampling method, overriding --sample; a bad value is
                    reported and --sample holds
  STINT_SAMPLE_PER  function or site, overriding --sample-per
  STINT_INTERVAL    sampling interval, overriding --interval
  STINT_LOG         redundancy log file, overriding --log
  STINT_LOG_POLICY  log policy, overriding --log-policy

Exit status: 0 on success, 1 on error, 2 on bad usage.

Flags:
`

// toolValue is the --tool flag.
type toolValue struct{ t *rewrite.Tool }

func (v toolValue) String() string { return v.t.String() }
func (v toolValue) Type() string   { return "tool" }
func (v toolValue) Set(s string) error {
	t, ok := rewrite.ParseTool(s)
	if !ok {
		return fmt.Errorf("unknown tool %q (want branch, call, syscall or block)", s)
	}
	*v.t = t
	return nil
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := pflag.NewFlagSet("rewrite", pflag.ContinueOnError)
	opts := rewrite.Options{Tool: rewrite.ToolBranch}
	var out, statsJSON, skipCovered, retireSince string
	var quiet bool
	fs.VarP(toolValue{&opts.Tool}, "tool", "t", "probe sites: branch, call, syscall or block")
	fs.BoolVar(&opts.Every, "every", false, "record every occurrence of an event, not just the first (never undoes patches); with --tool branch a compact complete trace: each thread's path as packets in <trace>.paths, which trace cat and the other commands decode; with --tool call a compact call chain: each call and return appends its own address")
	fs.StringSliceVar(&opts.NoOpt, "no-opt", nil, "turn instrumentation optimisations off, to measure what each buys: ppi (a compact trace's probes append inline, calling the runtime only on their slow paths; --counts adds inline instead of calling the runtime), pcs (--counts saves the flags only where they are live; a compact trace's jcc arm tests with cmp where they are dead), dpc (--counts: a block's trampoline runs on through the blocks only a jcc falls into, counting each, and jumps straight into the next trampoline), link (--every with the branch tool: a trampoline goes on through the plain code after it and jumps straight into the next one), pred (--every with the branch tool: a PLT stub to a function of the module's own appends one bit when it goes there), pre (--every: a jcc or ret too short for a jump in place is probed from the instructions before it; with the call tool, its rets, and direct calls after instructions shorter than a jump from the run of them that makes one), entry (--sample with the call tool: calls are probed at the functions they enter, each counting down to its next sample, not at the call sites), stripe (with entry: each thread counts down in a slot of its own)")
	fs.BoolVar(&opts.NoTraps, "no-traps", false, "leave a site no jump fits unpatched (reported as failed) instead of patching it with an int3 that the runtime's SIGTRAP handler sends to its trampoline; for programs that block SIGTRAP in threads that run such sites, or install a SIGTRAP handler of their own (Go executables and compact traces never get int3 sites)")
	fs.BoolVar(&opts.Counts, "counts", false, "with --tool block: count every execution of every block (no runtime call: each trampoline adds 1 inline); the trace gets the counts that moved each second and at exit, which the exports carry as hit counts")
	fs.BoolVar(&opts.CountsAtomic, "counts-atomic", false, "with --counts: increment with a lock prefix, so that threads running one block at the same instant lose no count (slower)")
	fs.BoolVar(&opts.Rows, "rows", false, "with --every and --tool branch or call: write a row per event instead of a compact trace (the older, larger and slower encoding)")
	fs.BoolVar(&opts.Context, "context", false, "with --tool call: keep a shadow stack per thread and record each distinct calling context once, with its parent (exact call-context trees even under a budget; every call and ret reaches the runtime)")
	fs.StringVar(&opts.Sample, "sample", "", "sample the events with `METHOD`: all, rate:P%, every:N or reservoir:P% (see Sampling above)")
	fs.StringVar(&opts.SamplePer, "sample-per", "", "with --sample reservoir:P%: a reservoir per `S`, function (default: a call's callee, other events' site) or site")
	fs.StringVar(&opts.Interval, "interval", "", "with --sample: the sampling interval `T` (default 1s; 1ms at least)")
	fs.StringVarP(&out, "output", "o", "", "write the rewritten file to `OUT` (required)")
	fs.StringVar(&statsJSON, "stats-json", "", "write the rewrite statistics as JSON to `FILE`")
	fs.BoolVarP(&quiet, "quiet", "q", false, "print nothing on success")
	fs.StringVar(&opts.Budget, "budget", "", "instrumentation budget per period: `B` = a percentage of the period (10%) or a duration (5ms)")
	fs.StringVar(&opts.Period, "period", "", "budget period `T`, e.g. 100ms or 1s (default 100ms with --budget); with --counts how often the counts are written (default 1s)")
	fs.BoolVar(&opts.SwitchSync, "switch-sync", false, "with --budget: let the off-switch undo patches that straddle a word in programs with several threads too, by parking their threads on a jmp-to-self while the runtime writes them (experimental: a descheduled runtime thread then stalls the program); without it only a program with one thread has them switched, by that thread")
	fs.StringVar(&opts.Window, "window", "", "with --budget: leave sites the off-switch re-applies on for at most `W` per period (a percentage or a duration; default: as long as the budget; none: until the budget is spent)")
	fs.StringVar(&opts.Log, "log", "", "redundancy log `FILE`: skip outcomes recorded by earlier runs, append new ones")
	fs.StringVar(&opts.LogPolicy, "log-policy", "", "redundancy log `POLICY`: exact (default: each outcome once, probes retire), or the DIME* paper's region logs hash, bst, merger (for comparison: instrumented traces record every execution)")
	fs.StringVar(&skipCovered, "skip-covered", "", "leave unpatched every site whose outcomes are all in the exact redundancy log `LOG` (code covered by earlier runs then costs nothing)")
	fs.StringVar(&retireSince, "retire-since", "", "with --skip-covered LOG: also leave unpatched every site that has outcomes in `OLD`, an older copy of LOG (say, taken before the last run), and no outcome added since; those runs showed nothing new there, and what they did not see is given up")
	fs.BoolVar(&opts.SkipSeenIndirect, "skip-seen-indirect", false, "with --skip-covered, also leave unpatched returns, indirect branches and syscalls with at least one logged outcome (their new destinations are then not traced)")
	fs.StringVar(&opts.Edges, "edges", "auto", "probe a jcc outcome at its destination, where only the jcc leads, instead of at the jcc, so the jcc's common side runs unpatched and its rare side is recorded whenever it happens: `MODE` auto (the jccs of covered, and every other jcc's at destinations of 5 bytes or more, which a jmp replaces), covered (jccs with one outcome in the --skip-covered log), all (every jcc at any destination: slower on sqlite3), or none")
	fs.BoolVar(&opts.EmulateIndirectCalls, "emulate-indirect-calls", false, "probe every indirect call in its own trampoline, where it is emulated (push the return address, jump); by default one is probed at the instruction before it where only that instruction leads to it, so that the call runs in place and the processor's return-stack predictor stays in step")
	fs.Var(cli.Bytes{N: &opts.ChunkGap}, "chunk-gap", "merge stub pages closer than `SIZE` (bytes, or with K, M, G) into one run-time mapping (0 = default 1M; smaller = fewer resident stub pages, more mappings)")
	if err := parseFlags(fs, args); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			fmt.Fprint(stdout, usageText)
			fs.SetOutput(stdout)
			fs.PrintDefaults()
			return nil
		}
		return err
	}
	if fs.NArg() != 1 {
		return cli.Usagef("want exactly one input file, got %d (run 'rewrite --help')", fs.NArg())
	}
	if out == "" {
		return cli.Usagef("missing -o OUT (run 'rewrite --help')")
	}
	err := ctx.Err()
	if err != nil {
		return err
	}
	if opts.SkipCovered, err = readCoverage("--skip-covered", skipCovered); err != nil {
		return err
	}
	if opts.RetireSince, err = readCoverage("--retire-since", retireSince); err != nil {
		return err
	}
	in := fs.Arg(0)
	limitMemory(in)
	st, err := rewrite.RewriteFile(in, out, opts)
	if oe := (*rewrite.OptionError)(nil); errors.As(err, &oe) {
		return cli.Usagef("%w (run 'rewrite --help')", err) // a bad option value: bad usage, like a bad flag
	}
	if err != nil {
		return err
	}
	if statsJSON != "" {
		if err := rewrite.WriteFileAtomic(statsJSON, st.JSON(), 0o644); err != nil {
			return fmt.Errorf("stats: %w", err)
		}
	}
	if !quiet {
		fmt.Fprintln(stderr, summary(in, st))
	}
	return nil
}

// summary is the one-paragraph report printed after a rewrite.
func summary(name string, st *rewrite.Stats) string {
	var b strings.Builder
	fmt.Fprintf(&b, "rewrite: %s (%s, tool %s): %d sites, %d patched", name, st.Module, st.Tool, st.Sites, st.PatchedTotal())
	var tactics []string
	for _, t := range []string{"B1", "B2", "T1", "T2", "T3", "P"} {
		if n := st.Patched[t]; n > 0 {
			tactics = append(tactics, fmt.Sprintf("%s %d", t, n))
		}
	}
	if n := st.Patched["edge"]; n > 0 {
		tactics = append(tactics, fmt.Sprintf("jccs probed at their destinations %d", n))
	}
	if n := st.Patched["trap"]; n > 0 {
		tactics = append(tactics, fmt.Sprintf("int3 %d (a signal per execution: no jump fits)", n))
	}
	if len(tactics) > 0 {
		fmt.Fprintf(&b, " (%s)", strings.Join(tactics, ", "))
	}
	if n := st.Sites - st.Covered - st.Retired; n > 0 {
		fmt.Fprintf(&b, " = %.2f%%", 100*float64(st.PatchedTotal())/float64(n))
	}
	if st.EdgeProbes > 0 || st.EdgeFailed > 0 {
		fmt.Fprintf(&b, ", %d edge probes (%d destinations could not be patched)", st.EdgeProbes, st.EdgeFailed)
	}
	if st.PreJccs > 0 || st.PreRets > 0 || st.Marks > 0 || st.UnknownJccs > 0 {
		fmt.Fprintf(&b, ", probed from the instruction before: %d jccs, %d rets; %d jccs told by %d marks, %d unknown",
			st.PreJccs, st.PreRets, st.MarkedJccs, st.Marks, st.UnknownJccs)
	}
	if st.Predicted > 0 {
		fmt.Fprintf(&b, ", %d indirect jmps predicted", st.Predicted)
	}
	if st.Covered > 0 {
		fmt.Fprintf(&b, ", %d covered by the log (left unpatched)", st.Covered)
	}
	if st.Retired > 0 {
		fmt.Fprintf(&b, ", %d retired (nothing new since --retire-since's log; left unpatched)", st.Retired)
	}
	if st.Cold > 0 {
		fmt.Fprintf(&b, ", %d returns and indirect jumps it saw start off", st.Cold)
	}
	fmt.Fprintf(&b, ", %d fallback, %d failed, %d evicted; %d stubs on %d pages in %d mappings",
		st.Fallback, st.Failed, st.Evicted, st.Stubs, st.StubPages, st.Chunks)
	reasons := make([]string, 0, len(st.Reasons))
	for r := range st.Reasons {
		reasons = append(reasons, r)
	}
	sort.Slice(reasons, func(i, j int) bool {
		ci, cj := st.Reasons[reasons[i]].Count, st.Reasons[reasons[j]].Count
		if ci != cj {
			return ci > cj
		}
		return reasons[i] < reasons[j]
	})
	for _, r := range reasons {
		fmt.Fprintf(&b, "\n  failed %d: %s", st.Reasons[r].Count, r)
	}
	for _, n := range st.Notes {
		fmt.Fprintf(&b, "\n  note: %s", n)
	}
	return b.String()
}

func parseFlags(fs *pflag.FlagSet, args []string) error { return cli.ParseFlags(fs, "rewrite", args) }

// readCoverage reads the exact redundancy log at path for option flag
// ("" = none).
func readCoverage(flag, path string) (*rewrite.Coverage, error) {
	if path == "" {
		return nil, nil
	}
	l, probs, err := redlog.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", flag, err)
	}
	return rewrite.NewCoverage(flag, path, l, probs)
}
