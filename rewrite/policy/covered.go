package policy

import (
	"cmp"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"

	"github.com/stint-project/stint/formats/redlog"
	"github.com/stint-project/stint/rewrite/facts"
	"github.com/stint-project/stint/runtime"
)

// Coverage is an exact redundancy log as --skip-covered and
// --retire-since read it: the outcomes earlier runs recorded, by module.
// The caller reads the file (package redlog) and builds it with
// NewCoverage; the policy takes the input module's entries.
type Coverage struct {
	Flag, Path string                    // how messages name it: "--skip-covered", the file
	Modules    map[string][]redlog.Entry // entries by build-id (lower-case hex)
	Notes      []string                  // what the reader noted, for Stats.Notes
	// Prefix, when the file was read whole and undamaged: its length and
	// last block, by which the runtime knows the same file grown by
	// appends and reads only what was appended (runtime.Module.LogEnd).
	Prefix *LogPrefix
}

// LogPrefix is what the runtime checks of a log: that it is at least End
// bytes long and that its block at Last.Off still starts with Last.Head.
type LogPrefix struct {
	End  int64
	Last redlog.Block
}

// NewCoverage checks that l, read from path for option flag, is an exact
// log (only an exact log says which outcomes are covered) and wraps it;
// probs are the reader's notes on it.
func NewCoverage(flag, path string, l *redlog.Log, probs []redlog.Problem) (*Coverage, error) {
	if l.Policy != redlog.Exact {
		return nil, fmt.Errorf("%s: log %s has policy %s; only an exact log says which outcomes are covered", flag, path, l.Policy)
	}
	c := &Coverage{Flag: flag, Path: path, Modules: l.Modules}
	if l.Prefix(probs) {
		c.Prefix = &LogPrefix{End: l.Size, Last: l.Last}
	}
	for _, p := range probs {
		c.Notes = append(c.Notes, flag+" log "+path+": "+p.String())
	}
	return c, nil
}

// coveredSet is what --skip-covered reads from its log: the outcomes
// already recorded for this module.
type coveredSet struct {
	self  uint64 // BuildIDHash of this module
	has   map[redlog.Entry]bool
	count map[[2]uint64]int // outcomes per (src, kind)
	retTo map[uint64]bool   // destinations of the module's own returns into itself
}

// newCoveredSet takes the module's (build-id bid) entries of cov.
func newCoveredSet(cov *Coverage, bid []byte) (*coveredSet, error) {
	if len(bid) == 0 {
		return nil, errors.New(cov.Flag + ": the input has no build-id, so no log entry can be its")
	}
	cs := &coveredSet{self: redlog.BuildIDHash(bid), has: map[redlog.Entry]bool{}, count: map[[2]uint64]int{}, retTo: map[uint64]bool{}}
	for _, e := range cov.Modules[hex.EncodeToString(bid)] {
		cs.has[e] = true
		cs.count[[2]uint64{e.A, uint64(e.Kind)}]++
		if e.Kind == uint32(runtime.KRet) && e.DstMod == cs.self {
			cs.retTo[e.B] = true
		}
	}
	return cs, nil
}

// anyFrom reports whether (src, kind) has at least one outcome.
func (cs *coveredSet) anyFrom(src uint64, kind runtime.Kind) bool {
	return cs.count[[2]uint64{src, uint64(kind)}] > 0
}

// holds reports whether the log has the outcome (dst, kind) of the site
// at src of this module.
func (cs *coveredSet) holds(src, dst uint64, kind runtime.Kind) bool {
	return cs.has[redlog.Entry{A: src, B: dst, DstMod: cs.self, Kind: uint32(kind)}]
}

// loadRetire reads the --retire-since coverage: the outcomes per (src,
// kind) of this module, each of which must also be in the --skip-covered
// log.
func (p *Plan) loadRetire(old *Coverage, bid []byte) error {
	p.old = map[[2]uint64]int{}
	lost := 0
	for _, e := range old.Modules[hex.EncodeToString(bid)] {
		if !p.cov.has[e] {
			lost++
			continue
		}
		p.old[[2]uint64{e.A, uint64(e.Kind)}]++
	}
	if lost > 0 {
		return fmt.Errorf("%s: %d entries of %s are not in the %s log %s: it must be an older copy of that log",
			old.Flag, lost, old.Path, p.opts.Covered.Flag, p.opts.Covered.Path)
	}
	if len(p.old) == 0 {
		p.Notes = append(p.Notes, old.Flag+" log "+old.Path+" has no entry of this module (build-id "+hex.EncodeToString(bid)+"): nothing is retired")
	}
	return nil
}

// probeKindOf is the event kind of the one probe of a ret, indirect or
// syscall site.
var probeKindOf = map[facts.Kind]runtime.Kind{facts.Ret: runtime.KRet, facts.IndJmp: runtime.KIndJmp, facts.IndCall: runtime.KIndCall, facts.Syscall: runtime.KSyscall}

// covered reports whether every outcome of site i is in the log.
// Indirect branches, returns and syscalls have outcomes no log can list
// in full: they count as covered only with Options.SkipSeenIndirect, once
// the log has at least one of their outcomes.
func (p *Plan) covered(i int) bool {
	cs, c := p.cov, p.fx.Code
	in := &c.Insts[i]
	next := in.Addr + uint64(in.Len())
	if p.opts.Tool == runtime.ToolBlock {
		return cs.holds(in.Addr, in.Addr, runtime.KBlock)
	}
	switch c.Kinds[i] {
	case facts.Jcc, facts.Jcxz:
		return cs.holds(in.Addr, c.Targets[i], runtime.KJccTaken) && cs.holds(in.Addr, next, runtime.KJccNotTaken)
	case facts.Jmp:
		return cs.holds(in.Addr, c.Targets[i], runtime.KJmp)
	case facts.Call:
		// and its return: a call left unpatched with its return
		// unseen would leave that return to the windows of the
		// callee's rets, which start off here (STINT_PATCH_COLD);
		// patched, its logged outcome makes the runtime switch them on
		// until the return comes (PROBE_RETWATCH), or retire the call at
		// load when it has no list of them (a call out of the module)
		return cs.holds(in.Addr, c.Targets[i], runtime.KCall) && cs.retTo[next]
	case facts.Ret, facts.IndJmp, facts.IndCall, facts.Syscall:
		if !p.opts.SkipSeenIndirect {
			return false
		}
		return cs.anyFrom(in.Addr, probeKindOf[c.Kinds[i]])
	}
	return false
}

// Retiring sites (rewrite --skip-covered LOG --retire-since OLD).
//
// --skip-covered leaves a site unpatched only when every outcome it can
// have is in the log. Most sites a workload runs never get there: a
// jcc whose other side is an error path, a ret whose callers are all
// known. They stay patched in every later rewrite, and every run pays
// for them (a stub and a trampoline page touched, a listing, windows
// that switch them on and off).
//
// OLD is a copy of the same log taken before the last run or runs. A
// site that had outcomes in OLD and has no more now was patched and
// watched by those runs and showed nothing new: it is retired, left
// unpatched like a covered one. What that gives up is an outcome those
// runs did not see; the coverage a series has reached stays. OLD tells
// nothing about whether the runs since reached the site (another
// workload may not have): retire with a copy taken before runs of the
// same workload.

// retired reports whether site i (not covered) is to be left unpatched
// under --retire-since: it has an outcome in the older log, and no probe
// of it has an outcome in the newer one that the older lacks.
func (p *Plan) retired(i int) bool {
	if p.old == nil || p.opts.Tool == runtime.ToolBlock {
		return false
	}
	c := p.fx.Code
	src := c.Insts[i].Addr
	var kinds []runtime.Kind
	switch c.Kinds[i] {
	case facts.Jcc, facts.Jcxz:
		kinds = []runtime.Kind{runtime.KJccTaken, runtime.KJccNotTaken}
	case facts.Jmp:
		kinds = []runtime.Kind{runtime.KJmp}
	case facts.Call:
		// a call is covered once it and its return are logged; retired,
		// its return is left to the callee's ret sites
		kinds = []runtime.Kind{runtime.KCall}
	case facts.Ret, facts.IndJmp, facts.IndCall, facts.Syscall:
		kinds = []runtime.Kind{probeKindOf[c.Kinds[i]]}
	default:
		return false
	}
	seen := false
	for _, k := range kinds {
		key := [2]uint64{src, uint64(k)}
		n := p.old[key]
		if n != p.cov.count[key] {
			return false
		}
		seen = seen || n > 0
	}
	return seen
}

// SeenOpen reports whether a probe of kind k at src is an open-ended one
// (ret, indirect jump, syscall) with an outcome in the --skip-covered
// log. Without --skip-seen-indirect such a site stays patched, since its
// next outcome may be new; the runtime starts it switched off
// (STINT_PATCH_COLD) and lets new code switch it on.
func (p *Plan) SeenOpen(src uint64, k runtime.Kind) bool {
	if p.cov == nil || p.opts.SkipSeenIndirect {
		return false
	}
	switch k {
	case runtime.KRet:
		return p.coldRet[src] && p.cov.anyFrom(src, k)
	case runtime.KIndJmp, runtime.KSyscall:
		return p.cov.anyFrom(src, k)
	}
	// (an indirect call stays warm: a new target of a known call into
	// known code is new code to no probe, and the windows are what see
	// it and the return that follows it)
	return false
}

// SeenOpenCap is the most probes SeenOpen can hold true for: the log's
// (src, kind) pairs of this module's returns, indirect jumps and
// syscalls.
func (p *Plan) SeenOpenCap() int {
	if p.cov == nil || p.opts.SkipSeenIndirect {
		return 0
	}
	n := 0
	for sk := range p.cov.count {
		switch runtime.Kind(sk[1]) {
		case runtime.KRet, runtime.KIndJmp, runtime.KSyscall:
			n++
		}
	}
	return n
}

// Logged reports whether the --skip-covered log holds the outcome (dst,
// k) of the direct probe at src: the runtime then retires the probe at
// load (STINT_MF_LOGGED).
func (p *Plan) Logged(src, dst uint64, k runtime.Kind) bool {
	return p.cov != nil && p.cov.holds(src, dst, k)
}

// LogEntries is how many distinct entries of this module the
// --skip-covered log has (0 without one): the most probes Logged can
// list.
func (p *Plan) LogEntries() int {
	if p.cov == nil {
		return 0
	}
	return len(p.cov.has)
}

// LogDigest is what the runtime computes of this module's entries in the
// log it reads at start (runtime/src/redlog.c, log_digest): their number
// and the sum of their keys' hashes. When the two match the rewrite's
// (STINT_MF_LOGGED), the log is the one the rewrite read, and the runtime
// retires the probes the rewrite listed instead of looking each one up.
func (p *Plan) LogDigest() (count uint32, sum uint64) {
	cs := p.cov
	for e := range cs.has {
		k := logKey(cs.self, e)
		sum += logMix(k[0], k[1])
	}
	return uint32(len(cs.has)), sum
}

// LogSeenKeys returns, sorted, the runtime's keys (k0, k1) of this
// module's returns, indirect branches and syscalls in the --skip-covered
// log: the outcomes the runtime looks up when they happen (redlog.c,
// log_seen), which it finds here instead of reading the log
// (runtime.Module.SeenVaddr). Direct outcomes it never looks up: the
// logged ones are unpatched or listed (Logged).
func (p *Plan) LogSeenKeys() [][2]uint64 {
	cs := p.cov
	if cs == nil {
		return nil
	}
	var out [][2]uint64
	for e := range cs.has {
		switch runtime.Kind(e.Kind) {
		case runtime.KRet, runtime.KIndJmp, runtime.KIndCall, runtime.KSyscall:
			out = append(out, logKey(cs.self, e))
		}
	}
	slices.SortFunc(out, func(a, b [2]uint64) int { return cmp.Or(cmp.Compare(a[0], b[0]), cmp.Compare(a[1], b[1])) })
	return out
}

// logKey is the runtime's key of entry e of the module self
// (runtime/src/redlog.c, logkey).
func logKey(self uint64, e redlog.Entry) [2]uint64 {
	return [2]uint64{logMix(self^uint64(e.Kind)*0x9e3779b97f4a7c15, e.A) | 1, logMix(e.DstMod, e.B)}
}

// logMix is the runtime's mix (runtime/src/stint.c), which its
// redundancy-log keys are made of.
func logMix(a, b uint64) uint64 {
	h := a*0x9e3779b97f4a7c15 ^ (b + 0x632be59bd9b4e019 + (a << 6) + (a >> 2))
	h ^= h >> 31
	h *= 0xbf58476d1ce4e5b9
	h ^= h >> 29
	return h
}

// LogPrefix is the --skip-covered log's prefix (nil: none, or the log
// was damaged or torn when read).
func (p *Plan) LogPrefix() *LogPrefix {
	if p.cov == nil || p.opts.Covered == nil {
		return nil
	}
	return p.opts.Covered.Prefix
}
