package policy

import (
	"github.com/stint-project/stint/internal/blocks"
	"github.com/stint-project/stint/rewrite/facts"
	"github.com/stint-project/stint/runtime"
)

// Options are what the policy reads of a rewrite's options.
type Options struct {
	Tool    runtime.Tool
	Every   bool // record every occurrence (STINT_MF_EVERY): probes never retire
	Context bool // the context-preserving mode (STINT_MF_CONTEXT)
	Budget  bool // a budget is set: the off-switch keeps open-ended sites to the windows
	// SwitchSync: the off-switch may park threads to switch patches that
	// straddle a word (STINT_MF_PARK).
	SwitchSync bool
	// Covered (--skip-covered) and Older (--retire-since, an older copy
	// of the same log); nil = none.
	Covered, Older       *Coverage
	SkipSeenIndirect     bool
	EmulateIndirectCalls bool
	Edges                string // EdgesAuto ("" too), EdgesCovered, EdgesAll, EdgesNone
	NoPPI                bool   // a compact trace's probes always call the runtime (rewrite --no-opt=ppi)
	NoPreRuns            bool   // no pre-call site runs several instructions (rewrite --no-opt=pre)
	Fallbacks            bool   // testing: every jcc and ret probed from elsewhere where it can be (rewrite.Options.Fallbacks)
	Countdown            bool   // a sampled call tool: call probes count down before calling the runtime (STINT_MF_COUNTDOWN)
}

// Failure is a site left unpatched, and why.
type Failure struct {
	Reason string
	Addr   uint64
}

// Plan is the policy's decision: which instructions are sites and which
// probes each one gets. The driver hands it to placement and asks it, per
// site, for the probes to emit.
type Plan struct {
	fx   *facts.Facts
	opts Options

	cov       *coveredSet            // --skip-covered, nil = none
	old       map[[2]uint64]int      // --retire-since: outcomes per (src, kind) in the older log
	coldRet   map[uint64]bool        // rets new code alone can give a new destination (coldRets)
	preCall   map[int]int            // pre-call site -> the call it probes (precall.go)
	noRun     map[int]bool           // calls whose pre-call sites take no run (AvoidPreRuns)
	lostRuns  [][2]int               // pre-call sites with runs given up (UnPreSite), and their calls
	edges     *blocks.Table[edgeRec] // by instruction: a jcc's destination probes, or a destination probe's jcc (edges.go); nil without edges
	preAt     []bool                 // by instruction: maybe a key of preCall or preBranch (set with them, never cleared)
	paths     map[int]runtime.Kind   // a compact complete trace's entry, resume and mark sites (paths.go, marks.go); nil otherwise
	calls     bool                   // the compact trace is a call chain (CallsSites)
	markBit   map[int]bool           // a compact complete trace's marks and their bits (marks.go)
	preBranch map[int]int            // a compact complete trace's pre-site -> its jcc or ret (marks.go)
	fallbacks []int                  // the pre-jcc and mark sites (marks.go)
	entries   map[int]int            // a sampled call tool's entry sites -> the last instruction their trampolines run (entries.go); nil otherwise

	// FiniSite is the instruction index of .fini's one site, which the
	// runtime's finaliser records (stint_module.fini_probe); -1: none.
	FiniSite int

	// Counters for Stats.
	Covered, Retired, PreCalls, Delegated, Peeks int
	// Failed lists the sites the policy refused; Notes what it noticed.
	Failed []Failure
	Notes  []string
}

// New starts the plan for the module fx describes. With --skip-covered it
// takes the module's entries of the logs (its errors and notes are the
// logs').
func New(fx *facts.Facts, opts Options) (*Plan, error) {
	p := &Plan{fx: fx, opts: opts, FiniSite: -1}
	if opts.Covered == nil {
		return p, nil
	}
	bid := fx.File.BuildID()
	cs, err := newCoveredSet(opts.Covered, bid)
	if err != nil {
		return nil, err
	}
	p.cov = cs
	p.Notes = append(p.Notes, opts.Covered.Notes...)
	if opts.Older != nil {
		p.Notes = append(p.Notes, opts.Older.Notes...)
		if err := p.loadRetire(opts.Older, bid); err != nil {
			return nil, err
		}
	}
	if !opts.SkipSeenIndirect {
		p.coldRet = p.coldRets()
	}
	return p, nil
}

// Tool is the plan's tool.
func (p *Plan) Tool() runtime.Tool { return p.opts.Tool }

func (p *Plan) fail(reason string, addr uint64) {
	p.Failed = append(p.Failed, Failure{reason, addr})
}

// mark notes instruction i in the filter *set (made on first use): a
// per-instruction lookup that misses the filter skips its map.
func (p *Plan) mark(set *[]bool, i int) {
	if *set == nil {
		*set = make([]bool, len(p.fx.Code.Insts))
	}
	(*set)[i] = true
}

// maybe reports whether instruction i may be a key of the map set
// filters.
func maybe(set []bool, i int) bool { return i < len(set) && set[i] }
