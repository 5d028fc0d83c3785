package rewrite

import (
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/stint-project/stint/formats/redlog"
)

// Budget options (DIME's rate-based budget, DIME* section 2.3): the
// instrumentation may run for at most a budget in every period. The
// runtime parses the same syntax (runtime/src/budget.c) from the module's
// option string and from STINT_BUDGET / STINT_PERIOD.

// ParseDuration parses a positive duration written as a decimal number
// and one of the units ns, us (or µs), ms, s: "100ms", "1.5s", "250us".
func ParseDuration(s string) (time.Duration, error) {
	t := strings.TrimSpace(s)
	i := 0
	for i < len(t) && (t[i] >= '0' && t[i] <= '9' || t[i] == '.') {
		i++
	}
	num, unit := t[:i], t[i:]
	v, err := strconv.ParseFloat(num, 64)
	if num == "" || err != nil {
		return 0, fmt.Errorf("duration %q: want a number and a unit (ns, us, ms, s), e.g. 100ms", s)
	}
	var mul float64
	switch unit {
	case "ns":
		mul = 1
	case "us", "µs":
		mul = 1e3
	case "ms":
		mul = 1e6
	case "s":
		mul = 1e9
	default:
		return 0, fmt.Errorf("duration %q: unknown unit %q (want ns, us, ms or s)", s, unit)
	}
	d := v * mul
	if d < 1 || d > float64(time.Hour) {
		return 0, fmt.Errorf("duration %q: out of range (1ns to 1h)", s)
	}
	return time.Duration(d), nil
}

// ParseBudget parses a budget for the given period: a percentage of the
// period ("10%", "2.5%") or a duration ("10ms"). It returns the budget
// as a duration and whether it leaves the instrumentation always on
// (100% or more of the period).
func ParseBudget(budget string, period time.Duration) (time.Duration, bool, error) {
	b := strings.TrimSpace(budget)
	if strings.HasSuffix(b, "%") {
		v, err := strconv.ParseFloat(strings.TrimSpace(b[:len(b)-1]), 64)
		if err != nil || v <= 0 || v > 100 {
			return 0, false, fmt.Errorf("budget %q: want a percentage in (0, 100], e.g. 10%%", budget)
		}
		return time.Duration(v / 100 * float64(period)), v >= 100, nil
	}
	d, err := ParseDuration(b)
	if err != nil {
		return 0, false, fmt.Errorf("budget: %w (or a percentage of the period, e.g. 10%%)", err)
	}
	return d, d >= period, nil
}

// DefaultPeriod is the period when a budget is given without one.
const DefaultPeriod = "100ms"

// LogPolicies are the redundancy log policies the runtime knows.
var LogPolicies = []string{"exact", "hash", "bst", "merger"}

// checkBudgetOptions validates the budget and log options.
func (o *Options) checkBudgetOptions() error {
	switch o.Edges {
	case "", EdgesAuto, EdgesAll, EdgesCovered, EdgesNone:
	default:
		return fmt.Errorf("bad edge mode %q (want auto, all, covered or none)", o.Edges)
	}
	if o.RetireSince != "" && o.SkipCovered == "" {
		return errors.New("--retire-since needs --skip-covered (it names an older copy of that log)")
	}
	if o.Period != "" && o.Budget == "" {
		return errors.New("a period needs a budget")
	}
	if o.Window != "" && o.Budget == "" {
		return errors.New("a window needs a budget")
	}
	if o.Budget != "" {
		period := o.Period
		if period == "" {
			period = DefaultPeriod
		}
		p, err := ParseDuration(period)
		if err != nil {
			return fmt.Errorf("period: %w", err)
		}
		if _, _, err := ParseBudget(o.Budget, p); err != nil {
			return err
		}
		if w := strings.TrimSpace(o.Window); w != "" && w != "none" {
			if _, _, err := ParseBudget(w, p); err != nil {
				return fmt.Errorf("window: %w", err)
			}
		}
	}
	if o.LogPolicy != "" && o.Log == "" {
		return errors.New("a log policy needs a log")
	}
	if o.LogPolicy != "" {
		ok := false
		for _, p := range LogPolicies {
			ok = ok || p == o.LogPolicy
		}
		if !ok {
			return fmt.Errorf("log policy %q: want one of %s", o.LogPolicy, strings.Join(LogPolicies, ", "))
		}
	}
	if o.Context && o.Tool != ToolCall {
		return errors.New("the context-preserving mode needs --tool call")
	}
	if o.Context && (o.Log != "" || o.SkipCovered != "") {
		return errors.New("the context-preserving mode records each context once by itself; it cannot be combined with a redundancy log")
	}
	if o.Log != "" && o.Every {
		return errors.New("a redundancy log records each outcome once; it cannot be combined with every-occurrence mode")
	}
	if strings.ContainsAny(o.Log, " \t\n") {
		return fmt.Errorf("log path %q: must not contain white space (set STINT_LOG at run time instead)", o.Log)
	}
	if s := o.optionString(); len(s) >= moduleOptionsSize {
		return fmt.Errorf("options %q are %d bytes, more than the %d the module can hold: use a shorter log path, or set STINT_LOG at run time", s, len(s), moduleOptionsSize-1)
	}
	return nil
}

// optionString is the module's option string, which the runtime parses:
// space-separated key=value pairs.
func (o *Options) optionString() string {
	tool := o.Tool
	if tool == 0 {
		tool = ToolBranch
	}
	every := 0
	if o.Every {
		every = 1
	}
	s := fmt.Sprintf("tool=%s every=%d", tool, every)
	if o.Context {
		s += " context=1"
	}
	if o.Budget != "" {
		period := o.Period
		if period == "" {
			period = DefaultPeriod
		}
		s += " budget=" + strings.TrimSpace(o.Budget) + " period=" + strings.TrimSpace(period)
		if w := strings.TrimSpace(o.Window); w != "" {
			s += " window=" + w
		}
	}
	if o.Log != "" {
		pol := o.LogPolicy
		if pol == "" {
			pol = "exact"
		}
		s += " policy=" + pol + " log=" + o.Log
	}
	return s
}

func (rw *rewriter) optionString() string { return rw.opts.optionString() }

// coveredSet is what --skip-covered reads from an exact redundancy log:
// the outcomes already recorded for this module.
type coveredSet struct {
	self  uint64 // BuildIDHash of this module
	has   map[redlog.Entry]bool
	count map[[2]uint64]int // outcomes per (src, kind)
	retTo map[uint64]bool   // destinations of the module's own returns into itself
}

// anyFrom reports whether (src, kind) has at least one outcome.
func (cs *coveredSet) anyFrom(src uint64, kind uint64) bool {
	return cs.count[[2]uint64{src, kind}] > 0
}

// logged reports whether the log has the outcome (dst, kind) of the
// direct probe at src of this module.
func (cs *coveredSet) logged(src, dst uint64, kind uint8) bool {
	return cs.has[redlog.Entry{A: src, B: dst, DstMod: cs.self, Kind: uint32(kind)}]
}

// digest is what the runtime computes of this module's entries in the log
// it reads at start (runtime/src/redlog.c, log_digest): their number and
// the sum of their keys' hashes. When the two match the rewrite's
// (STINT_MF_LOGGED), the log is the one the rewrite read, and the runtime
// retires the probes the rewrite listed instead of looking each one up.
func (cs *coveredSet) digest() (count uint32, sum uint64) {
	for e := range cs.has {
		k0 := logMix(cs.self^uint64(e.Kind)*0x9e3779b97f4a7c15, e.A) | 1
		k1 := logMix(e.DstMod, e.B)
		sum += logMix(k0, k1)
	}
	return uint32(len(cs.has)), sum
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

// readExactLog reads the exact log at path named by a flag (its name
// leads each error) and returns this module's entries (bid: its
// build-id); the log's problems become notes.
func (rw *rewriter) readExactLog(flag, path string, bid []byte) ([]redlog.Entry, error) {
	l, probs, err := redlog.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", flag, err)
	}
	if l.Policy != redlog.Exact {
		return nil, fmt.Errorf("%s: log %s has policy %s; only an exact log says which outcomes are covered", flag, path, l.Policy)
	}
	for _, p := range probs {
		rw.st.Notes = append(rw.st.Notes, flag+" log "+path+": "+p.String())
	}
	return l.Modules[hex.EncodeToString(bid)], nil
}

// loadCovered reads the --skip-covered log for this module.
func (rw *rewriter) loadCovered() (*coveredSet, error) {
	bid := rw.f.buildID()
	if len(bid) == 0 {
		return nil, errors.New("--skip-covered: the input has no build-id, so no log entry can be its")
	}
	es, err := rw.readExactLog("--skip-covered", rw.opts.SkipCovered, bid)
	if err != nil {
		return nil, err
	}
	cs := &coveredSet{self: redlog.BuildIDHash(bid), has: map[redlog.Entry]bool{}, count: map[[2]uint64]int{}, retTo: map[uint64]bool{}}
	for _, e := range es {
		cs.has[e] = true
		cs.count[[2]uint64{e.A, uint64(e.Kind)}]++
		if e.Kind == kRetKind && e.DstMod == cs.self {
			cs.retTo[e.B] = true
		}
	}
	return cs, nil
}

// probeKindOf is the event kind of the one probe of a ret, indirect or
// syscall site.
var probeKindOf = map[kind]uint8{kRet: kRetKind, kIndJmp: kIndJmpKind, kIndCall: kIndCallKind, kSyscall: kSyscallKind}

// covered reports whether every outcome of site i is in the log.
// Indirect branches, returns and syscalls have outcomes no log can list
// in full: they count as covered only with Options.SkipSeenIndirect, once
// the log has at least one of their outcomes.
func (rw *rewriter) covered(i int) bool {
	cs := rw.cov
	c := rw.c
	in := &c.insts[i]
	next := in.Addr + uint64(in.Len())
	has := func(kind uint32, dst uint64) bool {
		return cs.has[redlog.Entry{A: in.Addr, B: dst, DstMod: cs.self, Kind: kind}]
	}
	if rw.opts.Tool == ToolBlock {
		return has(kBlockKind, in.Addr)
	}
	switch c.kinds[i] {
	case kJcc, kJcxz:
		return has(kJccTaken, c.targets[i]) && has(kJccNotTaken, next)
	case kJmp:
		return has(kDirJmp, c.targets[i])
	case kCall:
		// and its return: a call left unpatched with its return
		// unseen would leave that return to the windows of the
		// callee's rets, which start off here (STINT_PATCH_COLD);
		// patched, its logged outcome makes the runtime switch them on
		// until the return comes (PROBE_RETWATCH), or retire the call at
		// load when it has no list of them (a call out of the module)
		return has(kDirCall, c.targets[i]) && cs.retTo[next]
	case kRet, kIndJmp, kIndCall, kSyscall:
		if !rw.opts.SkipSeenIndirect {
			return false
		}
		return cs.anyFrom(in.Addr, uint64(probeKindOf[c.kinds[i]]))
	}
	return false
}

// seenOpen reports whether a probe of kind k at src is an open-ended one
// (ret, indirect jump, syscall) with an outcome in the --skip-covered
// log. Without --skip-seen-indirect such a site stays patched, since its
// next outcome may be new; the runtime starts it switched off
// (STINT_PATCH_COLD) and lets new code switch it on.
func (rw *rewriter) seenOpen(src uint64, k uint8) bool {
	if rw.cov == nil || rw.opts.SkipSeenIndirect {
		return false
	}
	switch k {
	case kRetKind:
		return rw.coldRet[src] && rw.cov.anyFrom(src, uint64(k))
	case kIndJmpKind, kSyscallKind:
		return rw.cov.anyFrom(src, uint64(k))
	}
	// (an indirect call stays warm: a new target of a known call into
	// known code is new code to no probe, and the windows are what see
	// it and the return that follows it)
	return false
}

// traceEnds returns the ends of the unconditional transfers (jmp, call,
// ret, indirect, far) minus textLo, sorted: where a Pin-style trace
// entered above them stops (stint_abi.h, the DIME* region policies).
func (rw *rewriter) traceEnds() []uint32 {
	var out []uint32
	for i, k := range rw.c.kinds {
		if k != kJmp && k != kCall && k != kRet && k != kIndJmp && k != kIndCall && k != kFar {
			continue
		}
		in := &rw.c.insts[i]
		end := in.Addr + uint64(in.Len())
		if end < rw.textLo || end-rw.textLo > 0xffffffff {
			continue
		}
		out = append(out, uint32(end-rw.textLo))
	}
	return out
}
