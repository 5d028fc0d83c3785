package rewrite

import (
	"errors"
	"fmt"
	"math/big"
	"slices"
	"strings"
	"time"

	"github.com/stint-project/stint/rewrite/elfout"
	"github.com/stint-project/stint/rewrite/facts"
	"github.com/stint-project/stint/rewrite/policy"
	"github.com/stint-project/stint/runtime"
)

// Options configure a rewrite.
type Options struct {
	Tool  Tool // probe sites; 0 means ToolBranch
	Every bool // STINT_MF_EVERY: record every occurrence
	// Counts (tool block only): STINT_MF_COUNTS, exact block execution
	// counts. Each block probe adds 1 to its counter inline and never
	// calls the runtime, which writes the counts that moved as
	// KindBlockCount rows each period (1 s) and at the run's end.
	Counts bool
	// CountsAtomic: the counts' increments take a lock prefix, so that
	// threads running one block at once lose none (slower: a locked add,
	// and pushf/popf where the flags are live).
	CountsAtomic bool
	// Rows: with Every and tool branch or call, record a row per event
	// (the previous encoding, kept to compare with) instead of a compact
	// complete trace (STINT_MF_PATHS; see Paths).
	Rows bool
	// Fallbacks (testing; compact traces): probe every jcc and ret from
	// elsewhere where it can be (policy/marks.go: from the instruction
	// before it, or every other jcc with marks, the jcc then left
	// unpatched), as if none could be patched in place, so that the
	// tests run those probes everywhere. A branch neither takes is
	// patched in place.
	Fallbacks bool
	// NoOpt turns instrumentation optimisations off (INS-OP's names):
	// "ppi", partial payload inlining (a compact trace's probes append
	// inline and call the runtime only on their slow paths; a block
	// count adds inline instead of calling the runtime); "pcs", partial
	// context switch (a block count leaves the flags unsaved where they
	// are dead, a compact trace's jcc arm tests with cmp there); "dpc", dynamic probe coalescing (a block count's
	// trampoline runs the blocks after it that only a jcc falls into,
	// counting each: runs.go); "link", fragment linking (a compact
	// complete trace's trampolines go on through the plain code after
	// them into the next trampoline: links.go); "pred", predicted
	// indirect jmps (a compact trace's PLT stub whose slot names a
	// function of the module's own appends one bit when it goes there:
	// tramps.go, predicted); "pre", pre-sites first (a compact trace's
	// jcc or ret too short for a jmp in place is probed from the
	// instructions before it when they make room for one:
	// policy.PreferPreSites; and a call chain's or a sampled call tool's
	// direct call after a short instruction from a run of them:
	// policy.preCallSite); "entry", entry probes (a sampled call
	// tool probes the functions calls enter, not the calls:
	// policy.EntrySites); "stripe", per-thread countdowns (an entry
	// probe counts down in its slot of the calling thread's stripe, not
	// in one word every thread writes).
	NoOpt []string
	// NoTraps leaves a site no jump fits unpatched (counted as failed)
	// instead of patching it with an int3 that the runtime's SIGTRAP
	// handler sends to its trampoline (place.Planner.Trap: a signal per
	// execution until the site is restored).
	NoTraps bool
	// TrapAll (testing): every site gets an int3 (place.Planner.Trap),
	// not a jump, so that the oracle tests the SIGTRAP path on all of them.
	TrapAll bool
	// Context (tool call only): STINT_MF_CONTEXT, the context-preserving
	// mode. Every call and return reaches the runtime, which keeps a
	// shadow stack per thread and records each distinct calling context
	// once (KindContext rows: a context id and its parent's), so a
	// budgeted run yields exact call-context tree nodes. Tracking never
	// stops (the gate does not apply); the budget limits recording.
	Context bool
	// Sample samples the events (ParseSample: all, rate:P%, every:N,
	// reservoir:P%) instead of recording each occurrence; it implies
	// every-occurrence probes, with a row per sample. The runtime's
	// STINT_SAMPLE overrides it. SamplePer ("function", the default, or
	// "site") picks a reservoir's strata; Interval (default 1s) the
	// sampling interval (STINT_SAMPLE_PER, STINT_INTERVAL).
	Sample, SamplePer, Interval string
	// Blob is the runtime blob to inject; nil means the blob of package
	// runtime.
	Blob []byte
	// ChunkGap is passed to place.AddrSpace.ChunkGap (0 = DefaultChunkGap):
	// stub pages closer than this share one chunk. Chunks are virtual
	// ranges over one shared stub area and the file holds only the stub
	// list, so a larger gap means fewer mappings at run time and the same
	// file, but more memory for stub pages (chunks share physical pages
	// only with each other) and larger ranges that must be free.
	ChunkGap uint64
	// Budget and Period: the instrumentation budget per period (see
	// ParseBudget); "" = no budget. The runtime's STINT_BUDGET and
	// STINT_PERIOD override them.
	Budget, Period string
	// Window: how long per period the off-switch leaves the sites it
	// switches on (a percentage of the period or a duration; "none" =
	// until the budget is spent; "" = as long as the budget). The
	// runtime's STINT_WINDOW overrides it. See docs/DESIGN.md §8.
	Window string
	// SwitchSync lets the off-switch undo patches that straddle a word
	// (STINT_PATCH_SYNC) in programs with several threads too, parking
	// their threads on "jmp ." at those sites while the runtime's thread
	// writes them (STINT_MF_PARK), so a descheduled runtime thread stalls
	// the program (90 ms seen on a loaded 2-core machine). Off by
	// default: sync sites are then switched only while the program has
	// one thread, by that thread (self mode, no parking), and only those
	// whose probes are all direct are flagged.
	SwitchSync bool
	// Log and LogPolicy: the redundancy log and its policy ("exact",
	// "hash", "bst", "merger"); STINT_LOG and STINT_LOG_POLICY override
	// them. "" = no log.
	Log, LogPolicy string
	// SkipCovered is an exact redundancy log (read with NewCoverage):
	// sites whose outcomes are all in it are left unpatched (they cost
	// nothing at run time).
	SkipCovered *Coverage
	// SkipSeenIndirect also leaves unpatched the indirect branches,
	// returns and syscalls of which the log holds at least one outcome;
	// new destinations of those are then not traced.
	SkipSeenIndirect bool
	// RetireSince is an older copy of the SkipCovered log (taken before
	// the last runs): a site with outcomes in it and none added since is
	// left unpatched as well, though an outcome of it is still unseen.
	// Those runs gave that outcome its chance (package policy).
	RetireSince *Coverage
	// EmulateIndirectCalls probes every indirect call in its own
	// trampoline, where it is emulated (push the return address, jump).
	// By default one is probed at the instruction before it where only
	// that instruction leads to it, so that the call runs in place and
	// the return-stack predictor stays in step (package policy).
	EmulateIndirectCalls bool
	// Edges says which jcc outcomes are probed at their destination
	// instead of at the jcc (package policy): EdgesCovered those of jccs with
	// one outcome in the --skip-covered log, EdgesAll every jcc's where
	// the destination allows, EdgesAuto ("" too) EdgesCovered's and the
	// others' at destinations a jmp rel32 replaces, EdgesNone none.
	Edges string

	// backing (RewriteFile's) holds the output image in the output
	// file's mapping instead of the heap; nil: the heap.
	backing elfout.Backing
}

// Tool selects the probe sites (STINT_TOOL_*).
type Tool = runtime.Tool

// The tools.
const (
	ToolBranch  = runtime.ToolBranch
	ToolCall    = runtime.ToolCall
	ToolSyscall = runtime.ToolSyscall
	ToolBlock   = runtime.ToolBlock
)

// ParseTool parses a tool name.
func ParseTool(s string) (Tool, bool) { return runtime.ParseTool(s) }

// Options.Edges values.
const (
	EdgesAuto    = policy.EdgesAuto
	EdgesCovered = policy.EdgesCovered
	EdgesAll     = policy.EdgesAll
	EdgesNone    = policy.EdgesNone
)

// Coverage is an exact redundancy log as --skip-covered and
// --retire-since read it.
type Coverage = policy.Coverage

// NewCoverage checks that the log l, read from path for option flag, is
// an exact one and wraps it for Options.SkipCovered or RetireSince; probs
// are the reader's notes, which become Stats notes.
var NewCoverage = policy.NewCoverage

// Budget options (DIME's rate-based budget, DIME* section 2.3): the
// instrumentation may run for at most a budget in every period. The
// runtime parses the same syntax (runtime/src/budget.c) from the module's
// option string and from STINT_BUDGET / STINT_PERIOD.

// ParseDuration parses a positive duration written as a decimal number
// and one of the units ns, us (or µs), ms, s: "100ms", "1.5s", "250us".
// Digits past the ninth decimal are dropped and the value is truncated to
// whole nanoseconds, as the runtime reads it (runtime/src/options.c,
// parse_duration); testdata/durations.tsv holds the vectors both are
// checked against. Surrounding white space is ignored.
func ParseDuration(s string) (time.Duration, error) {
	t := strings.TrimSpace(s)
	i := 0
	for i < len(t) && (t[i] >= '0' && t[i] <= '9' || t[i] == '.') {
		i++
	}
	whole, frac, scale, ok := decimal(t[:i], 9)
	if !ok {
		return 0, fmt.Errorf("duration %q: want a number and a unit (ns, us, ms, s), e.g. 100ms", s)
	}
	var mul uint64
	switch t[i:] {
	case "ns":
		mul = 1
	case "us", "µs":
		mul = 1e3
	case "ms":
		mul = 1e6
	case "s":
		mul = 1e9
	default:
		return 0, fmt.Errorf("duration %q: unknown unit %q (want ns, us, ms or s)", s, t[i:])
	}
	if whole > uint64(time.Hour)/mul {
		return 0, fmt.Errorf("duration %q: out of range (1ns to 1h)", s)
	}
	d := whole*mul + frac*mul/scale
	if d < 1 || d > uint64(time.Hour) {
		return 0, fmt.Errorf("duration %q: out of range (1ns to 1h)", s)
	}
	return time.Duration(d), nil
}

// decimal splits the unsigned decimal number s into its whole part and
// its first maxFrac decimals, as frac/scale; false when s has no digit
// or more than one point. Later decimals are dropped.
func decimal(s string, maxFrac int) (whole, frac, scale uint64, ok bool) {
	scale = 1
	digits, dot := 0, false
	for _, c := range []byte(s) {
		switch {
		case c == '.' && dot:
			return 0, 0, 0, false
		case c == '.':
			dot = true
		case c < '0' || c > '9':
			return 0, 0, 0, false
		case !dot:
			digits++
			if whole <= 1e13 {
				whole = whole*10 + uint64(c-'0')
			}
		default:
			digits++
			if scale < pow10(maxFrac) {
				frac = frac*10 + uint64(c-'0')
				scale *= 10
			}
		}
	}
	return whole, frac, scale, digits > 0
}

func pow10(n int) uint64 {
	p := uint64(1)
	for ; n > 0; n-- {
		p *= 10
	}
	return p
}

// ParseBudget parses a budget for the given period: a percentage of the
// period ("10%", "2.5%"; decimals past the fourth are dropped, as the
// runtime reads them) or a duration ("10ms"). It returns the budget as a
// duration and whether it leaves the instrumentation always on (100% or
// more of the period).
func ParseBudget(budget string, period time.Duration) (time.Duration, bool, error) {
	b := strings.TrimSpace(budget)
	if p, ok := strings.CutSuffix(b, "%"); ok {
		whole, frac, scale, ok := decimal(p, 4)
		var v uint64 // in units of 1e-4 percent, as runtime/src/options.c's parse_budget
		if ok && whole <= 100 {
			v = whole*1e4 + frac*1e4/scale
		}
		if v == 0 || v > 1e6 {
			return 0, false, fmt.Errorf("budget %q: want a percentage in (0, 100], e.g. 10%%", budget)
		}
		d := new(big.Int).Mul(big.NewInt(int64(period)), new(big.Int).SetUint64(v))
		d.Div(d, big.NewInt(1e6))
		if d.Sign() <= 0 {
			return 0, false, fmt.Errorf("budget %q: less than 1ns of the period %v", budget, period)
		}
		return time.Duration(d.Int64()), v >= 1e6, nil
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

// check validates the options.
func (o *Options) check() error {
	for _, n := range o.NoOpt {
		if !slices.Contains(Opts, n) {
			return fmt.Errorf("no-opt %q: want one of %s", n, strings.Join(Opts, ", "))
		}
	}
	switch o.Edges {
	case "", EdgesAuto, EdgesAll, EdgesCovered, EdgesNone:
	default:
		return fmt.Errorf("bad edge mode %q (want auto, all, covered or none)", o.Edges)
	}
	if o.RetireSince != nil && o.SkipCovered == nil {
		return errors.New("--retire-since needs --skip-covered (it names an older copy of that log)")
	}
	if o.Period != "" && o.Budget == "" && !o.Counts {
		return errors.New("a period needs a budget (or --counts)")
	}
	if o.Window != "" && o.Budget == "" {
		return errors.New("a window needs a budget")
	}
	if o.Budget != "" || o.Period != "" {
		period := o.Period
		if period == "" {
			period = DefaultPeriod
		}
		p, err := ParseDuration(period)
		if err != nil {
			return fmt.Errorf("period: %w", err)
		}
		if o.Budget != "" {
			if _, _, err := ParseBudget(o.Budget, p); err != nil {
				return err
			}
		}
		if w := strings.TrimSpace(o.Window); w != "" && w != "none" {
			if _, _, err := ParseBudget(w, p); err != nil {
				return fmt.Errorf("window: %w", err)
			}
		}
	}
	if err := o.sampleCheck(); err != nil {
		return err
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
	if err := o.countsCheck(); err != nil {
		return err
	}
	if o.Context && o.Tool != ToolCall {
		return errors.New("the context-preserving mode needs --tool call")
	}
	if o.Context && (o.Log != "" || o.SkipCovered != nil) {
		return errors.New("the context-preserving mode records each context once by itself; it cannot be combined with a redundancy log")
	}
	if o.Log != "" && o.Every {
		return errors.New("a redundancy log records each outcome once; it cannot be combined with every-occurrence mode")
	}
	if strings.ContainsAny(o.Log, " \t\n") {
		return fmt.Errorf("log path %q: must not contain white space (set STINT_LOG at run time instead)", o.Log)
	}
	if s := o.optionString(); len(s) >= runtime.ModuleOptionsSize {
		return fmt.Errorf("options %q are %d bytes, more than the %d the module can hold: use a shorter log path, or set STINT_LOG at run time", s, len(s), runtime.ModuleOptionsSize-1)
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
	if o.Paths() {
		s += " paths=1"
	}
	if o.Calls() {
		s += " calls=1"
	}
	if o.Counts {
		s += " counts=1"
		if o.Period != "" {
			s += " period=" + strings.TrimSpace(o.Period)
		}
	}
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
	s += o.sampleOptions()
	if o.Log != "" {
		pol := o.LogPolicy
		if pol == "" {
			pol = "exact"
		}
		s += " policy=" + pol + " log=" + o.Log
	}
	return s
}

// Paths reports whether the rewrite makes a compact complete trace: every
// occurrence with tool branch or call, without Rows or Context. The
// probes then append packets to per-thread buffers (STINT_MF_PATHS) and
// the output carries the module's branch map (section .stint.paths).
// With tool call it is a call chain (Calls).
func (o *Options) Paths() bool {
	return o.Every && (o.Tool == 0 || o.Tool == ToolBranch || o.Tool == ToolCall) && !o.Rows && !o.Context && o.Sample == ""
}

// Calls reports whether the compact trace is a call chain
// (STINT_MF_CALLS): calls and rets append their own addresses.
func (o *Options) Calls() bool { return o.Paths() && o.Tool == ToolCall }

// traps reports whether sites no jump fits get an int3. Not in a Go
// module (its runtime takes SIGTRAP for its own), nor in the C library
// or a static executable (their clone, fork and raise run with every
// signal blocked, and an int3 there kills: the kernel forces a blocked
// SIGTRAP's default action), nor in a compact trace (its fallbacks probe
// such sites from elsewhere, at no signal per run).
func (o *Options) traps(m facts.Module) bool {
	return !m.Go && !m.Static && !m.Libc && (o.TrapAll || !o.NoTraps && !o.Paths())
}

// opt reports whether optimisation name is on.
func (o *Options) opt(name string) bool {
	for _, n := range o.NoOpt {
		if n == name {
			return false
		}
	}
	return true
}

// Opts are the instrumentation optimisations NoOpt can turn off.
var Opts = []string{"ppi", "pcs", "dpc", "link", "pred", "pre", "entry", "stripe"}

// policy returns the options the policy stage reads.
func (o *Options) policy() policy.Options {
	return policy.Options{
		Tool: o.Tool, Every: o.Every, Context: o.Context, Budget: o.Budget != "", SwitchSync: o.SwitchSync,
		Covered: o.SkipCovered, Older: o.RetireSince, SkipSeenIndirect: o.SkipSeenIndirect,
		EmulateIndirectCalls: o.EmulateIndirectCalls, Edges: o.Edges, NoPPI: !o.opt("ppi"), NoPreRuns: !o.opt("pre"),
		Fallbacks: o.Fallbacks, Countdown: o.countdown(),
	}
}

// countsCheck validates Counts: block counts count every execution
// of every block, so they go with no other recording mode.
func (o *Options) countsCheck() error {
	if !o.Counts {
		if o.CountsAtomic {
			return errors.New("--counts-atomic needs --counts")
		}
		return nil
	}
	switch {
	case o.Tool != ToolBlock:
		return errors.New("--counts needs --tool block")
	case o.Every || o.Sample != "":
		return errors.New("--counts counts every execution itself; it cannot be combined with --every or --sample")
	case o.Budget != "":
		return errors.New("--counts counts every execution; it cannot be combined with a budget")
	case o.Log != "" || o.SkipCovered != nil:
		return errors.New("--counts counts every execution; it cannot be combined with a redundancy log")
	}
	return nil
}
