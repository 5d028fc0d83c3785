package main

import (
	"bufio"
	"context"
	"fmt"
	"io"

	"github.com/spf13/pflag"
	"github.com/stint-project/stint/formats"
	"github.com/stint-project/stint/formats/redlog"
	"github.com/stint-project/stint/internal/cli"
)

const logHelp = `Usage:
  trace log show [--entries] LOG           header, policy, damage, entries per module
  trace log check LOG...                   verify every block of each log
  trace log add [--policy P] LOG TRACE...  add the distinct events of traces
  trace log merge -o|--output OUT LOG...   merge logs of one policy into OUT

A redundancy log (rewrite --log FILE) remembers, across runs, what a
traced program has already recorded: per module (keyed by build-id) and
module-relative address, so it holds across ASLR and for shared
libraries. Its policy is one of
  exact    each site outcome (src, dst, kind) once
  hash     the DIME* paper's region logs (address, length): skip a region
  bst      whose address is logged (hash), whose address lies in a
  merger   logged region (bst), that lies wholly in one (merger)
The format is described in formats/redlog (go doc).

show prints the file's policy, its blocks and entries, any damage with
its offset, and the number of distinct entries per module; --entries
lists them (exact: kind, src -> dst and the destination module, or a
syscall's number; regions: address and length).

check reads every block and prints each problem with its offset: a torn
append at the end (a writer died; the next writer overwrites it) or a
damaged block (left in the file; reading resumes at the next good block).
Exit status 1 if any log has a problem or is not a log.

add builds an exact log offline from trace files (trace files do not
record region lengths, so only --policy exact, the default). Events of
modules without a build-id cannot be logged and are counted. A trace cut
short is used up to its last complete batch.

merge adds the distinct entries of every LOG to OUT (created if absent;
if it exists, it must have the same policy). Damage in an input is
reported and the rest of it merged.

Examples:
  trace log show --entries gzip.log
  trace log add gzip.log $STINT_OUT/gzip.*.arrow
  trace log merge -o all.log run1.log run2.log
`

func runLog(ctx context.Context, args []string, stdout io.Writer) error {
	if len(args) == 0 {
		return usagef("log: no subcommand given (show, check, add, merge; run 'trace log --help')")
	}
	cli.Subcommands(args, "show", "check", "add", "merge")
	w := bufio.NewWriter(stdout)
	defer w.Flush()
	var err error
	switch args[0] {
	case "-h", "--help", "help":
		return pflag.ErrHelp
	case "show":
		err = logShow(args[1:], w)
	case "check":
		err = logCheck(args[1:], w)
	case "add":
		err = logAdd(ctx, args[1:], w)
	case "merge":
		err = logMerge(args[1:], w)
	default:
		return usagef("log: unknown subcommand %q (show, check, add, merge)", args[0])
	}
	if ferr := w.Flush(); err == nil {
		err = ferr
	}
	return err
}

func logShow(args []string, w io.Writer) error {
	fs := pflag.NewFlagSet("log show", pflag.ContinueOnError)
	entries := fs.Bool("entries", false, "list the entries")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return usagef("log show: want one LOG (run 'trace log --help')")
	}
	name := fs.Arg(0)
	l, probs, err := redlog.ReadFile(name)
	if err != nil {
		return fileError(name, err)
	}
	fmt.Fprintln(w, name)
	fmt.Fprintf(w, "  version    %d\n", redlog.Version)
	fmt.Fprintf(w, "  policy     %v\n", l.Policy)
	fmt.Fprintf(w, "  size       %d bytes, %d blocks, %d entries (%d distinct)\n", l.Size, l.Blocks, l.Entries, l.Distinct())
	printProblems(w, "  ", probs)
	ids := l.BuildIDs()
	fmt.Fprintf(w, "  modules    %d\n", len(ids))
	byHash := map[uint64]string{}
	for _, id := range ids {
		b, _ := redlog.ParseBuildID(id)
		byHash[redlog.BuildIDHash(b)] = id
		fmt.Fprintf(w, "    %-40s %10d\n", id, len(l.Modules[id]))
	}
	if !*entries {
		return nil
	}
	for _, id := range ids {
		fmt.Fprintf(w, "entries of %s\n", id)
		for _, e := range l.Modules[id] {
			if l.Policy.Region() {
				fmt.Fprintf(w, "  %#-14x len %-8d (..%#x)\n", e.A, e.B, e.A+e.B-1)
				continue
			}
			k := formats.Kind(e.Kind)
			switch {
			case k == formats.KindSyscall && e.DstMod == 0:
				fmt.Fprintf(w, "  %-13s %#x nr %d\n", k, e.A, e.B)
			case e.DstMod == 0:
				fmt.Fprintf(w, "  %-13s %#x -> %#x (absolute, or a module without build-id)\n", k, e.A, e.B)
			default:
				mod := byHash[e.DstMod]
				if mod == "" {
					mod = fmt.Sprintf("module hash %016x", e.DstMod)
				} else if mod == id {
					mod = "same module"
				}
				fmt.Fprintf(w, "  %-13s %#x -> %#x (%s)\n", k, e.A, e.B, mod)
			}
		}
	}
	return nil
}

func printProblems(w io.Writer, indent string, probs []redlog.Problem) {
	if len(probs) == 0 {
		fmt.Fprintf(w, "%sproblems   none\n", indent)
		return
	}
	fmt.Fprintf(w, "%sproblems   %d\n", indent, len(probs))
	for _, p := range probs {
		fmt.Fprintf(w, "%s  %v\n", indent, p)
	}
}

func logCheck(args []string, w io.Writer) error {
	fs := pflag.NewFlagSet("log check", pflag.ContinueOnError)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() == 0 {
		return usagef("log check: no LOG given (run 'trace log --help')")
	}
	bad := 0
	for _, name := range fs.Args() {
		l, probs, err := redlog.ReadFile(name)
		if err != nil {
			fmt.Fprintf(w, "%v\n", fileError(name, err))
			bad++
			continue
		}
		if len(probs) == 0 {
			fmt.Fprintf(w, "%s: ok: %v, %d blocks, %d distinct entries\n", name, l.Policy, l.Blocks, l.Distinct())
			continue
		}
		bad++
		for _, p := range probs {
			fmt.Fprintf(w, "%s: %v\n", name, p)
		}
	}
	if bad > 0 {
		return fmt.Errorf("log check: %d of %d logs damaged or unreadable", bad, fs.NArg())
	}
	return nil
}

func logAdd(ctx context.Context, args []string, w io.Writer) error {
	fs := pflag.NewFlagSet("log add", pflag.ContinueOnError)
	policyName := fs.String("policy", "exact", "the log's policy (only exact can be built from traces)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	policy, err := redlog.ParsePolicy(*policyName)
	if err != nil {
		return usagef("log add: %v", err)
	}
	if policy != redlog.Exact {
		return usagef("log add: policy %v: traces do not record region lengths, so only an exact log can be built from them", policy)
	}
	if fs.NArg() < 2 {
		return usagef("log add: want LOG and at least one TRACE (run 'trace log --help')")
	}
	name := fs.Arg(0)
	set := redlog.NewExactSet()
	events, unlogged := 0, 0
	for _, tn := range fs.Args()[1:] {
		n, u, err := addTrace(ctx, w, set, tn)
		if err != nil {
			return fileError(tn, err)
		}
		events += n
		unlogged += u
	}
	st, err := redlog.Append(name, policy, set.Blocks())
	if len(st.Problems) > 0 {
		fmt.Fprintf(w, "%s: warning: the log was damaged before this append:\n", name)
		printProblems(w, "  ", st.Problems)
	}
	if err != nil {
		return fileError(name, err)
	}
	fmt.Fprintf(w, "%s: added %d entries (%d blocks) of %d distinct in %d events of %d traces\n",
		name, st.Added, st.Blocks, set.Len(), events, fs.NArg()-1)
	if unlogged > 0 {
		fmt.Fprintf(w, "%s: %d events of modules without a build-id not logged\n", name, unlogged)
	}
	return nil
}

// addTrace adds the events of one trace file to set, and returns how
// many events it read and how many it could not log.
func addTrace(ctx context.Context, w io.Writer, set *redlog.ExactSet, name string) (events, unlogged int, err error) {
	r, err := formats.Open(name)
	if err != nil {
		return 0, 0, err
	}
	defer r.Release()
	mods := redlog.NewTraceModules(r.Modules())
	var evs []formats.Event
	for r.Next() {
		if err := ctx.Err(); err != nil {
			return 0, 0, err
		}
		evs = r.AppendEvents(evs[:0])
		for _, e := range evs {
			if !e.Kind.Valid() {
				continue
			}
			events++
			id, ent, ok := mods.Entry(e)
			if !ok {
				unlogged++
				continue
			}
			set.Add(id, ent)
		}
	}
	switch r.End() {
	case formats.EndError:
		return 0, 0, r.Err()
	case formats.EndCut:
		fmt.Fprintf(w, "%s: cut at offset %d: using its complete batches\n", name, r.EndOffset())
	}
	return events, unlogged, nil
}

func logMerge(args []string, w io.Writer) error {
	fs := pflag.NewFlagSet("log merge", pflag.ContinueOnError)
	out := fs.StringP("output", "o", "", "the log to merge into (created if absent)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *out == "" {
		return usagef("log merge: -o OUT is required (run 'trace log --help')")
	}
	if fs.NArg() == 0 {
		return usagef("log merge: no LOG given (run 'trace log --help')")
	}
	var policy redlog.Policy
	all := map[string][]redlog.Entry{}
	for _, name := range fs.Args() {
		l, probs, err := redlog.ReadFile(name)
		if err != nil {
			return fileError(name, err)
		}
		if policy == 0 {
			policy = l.Policy
		} else if l.Policy != policy {
			return fileError(name, fmt.Errorf("%w: %v, not %v like %s", redlog.ErrMismatch, l.Policy, policy, fs.Arg(0)))
		}
		for _, p := range probs {
			fmt.Fprintf(w, "%s: warning: %v\n", name, p)
		}
		for id, es := range l.Modules {
			all[id] = append(all[id], es...)
		}
	}
	st, err := redlog.Append(*out, policy, all)
	for _, p := range st.Problems {
		fmt.Fprintf(w, "%s: warning: %v\n", *out, p)
	}
	if err != nil {
		return fileError(*out, err)
	}
	distinct := 0
	for _, es := range all {
		distinct += len(redlog.SortEntries(es))
	}
	fmt.Fprintf(w, "%s: %v log, %d distinct entries of %d logs, %d added\n", *out, policy, distinct, fs.NArg(), st.Added)
	return nil
}
