package rewrite

import (
	"encoding/hex"
	"fmt"
)

// Retiring sites (rewrite --skip-covered LOG --retire-since OLD).
//
// --skip-covered leaves a site unpatched only when every outcome it can
// have is in the log. Most sites a workload runs never get there: a
// jcc whose other side is an error path, a ret whose callers are all
// known. They stay patched in every later rewrite, and every run pays
// for them (a stub and a trampoline page touched, a listing, windows
// that switch them on and off): on the sqlite3 workload a skip-covered
// rewrite with a log of the full run's every event still ran at 1.15x
// native, against 1.04x with those sites left unpatched.
//
// OLD is a copy of the same log taken before the last run or runs. A
// site that had outcomes in OLD and has no more now was patched and
// watched by those runs and showed nothing new: it is retired, left
// unpatched like a covered one. What that gives up is an outcome those
// runs did not see; the coverage a series has reached stays. OLD tells
// nothing about whether the runs since reached the site (another
// workload may not have): retire with a copy taken before runs of the
// same workload.

// loadRetire reads the --retire-since log: the outcomes per (src, kind)
// of this module, each of which must also be in the --skip-covered log.
func (rw *rewriter) loadRetire() error {
	path := rw.opts.RetireSince
	es, err := rw.readExactLog("--retire-since", path, rw.f.buildID())
	if err != nil {
		return err
	}
	rw.old = map[[2]uint64]int{}
	lost := 0
	for _, e := range es {
		if !rw.cov.has[e] {
			lost++
			continue
		}
		rw.old[[2]uint64{e.A, uint64(e.Kind)}]++
	}
	if lost > 0 {
		return fmt.Errorf("--retire-since: %d entries of %s are not in the --skip-covered log %s: it must be an older copy of that log", lost, path, rw.opts.SkipCovered)
	}
	if len(rw.old) == 0 {
		rw.st.Notes = append(rw.st.Notes, "--retire-since log "+path+" has no entry of this module (build-id "+hex.EncodeToString(rw.f.buildID())+"): nothing is retired")
	}
	return nil
}

// retired reports whether site i (not covered) is to be left unpatched
// under --retire-since: it has an outcome in the older log, and no probe
// of it has an outcome in the newer one that the older lacks.
func (rw *rewriter) retired(i int) bool {
	if rw.old == nil || rw.opts.Tool == ToolBlock {
		return false
	}
	c := rw.c
	in := &c.insts[i]
	src := in.Addr
	var kinds []uint8
	switch c.kinds[i] {
	case kJcc, kJcxz:
		kinds = []uint8{kJccTaken, kJccNotTaken}
	case kJmp:
		kinds = []uint8{kDirJmp}
	case kCall:
		// a call is covered once it and its return are logged; retired,
		// its return is left to the callee's ret sites
		kinds = []uint8{kDirCall}
	case kRet, kIndJmp, kIndCall, kSyscall:
		kinds = []uint8{probeKindOf[c.kinds[i]]}
	default:
		return false
	}
	seen := false
	for _, k := range kinds {
		key := [2]uint64{src, uint64(k)}
		n := rw.old[key]
		if n != rw.cov.count[key] {
			return false
		}
		seen = seen || n > 0
	}
	return seen
}
