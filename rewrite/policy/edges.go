package policy

import (
	"slices"

	"github.com/stint-project/stint/internal/blocks"
	"github.com/stint-project/stint/rewrite/facts"
	"github.com/stint-project/stint/rewrite/place"
	"github.com/stint-project/stint/runtime"
)

// Edge probes.
//
// A jcc's two outcomes are usually far from equally common: the one a
// run sees first is the common one, and the site then waits, patched, for
// the other. Every run of the common side pays the detour (jump to the
// trampoline and back), and outside the off-switch's windows the site is
// switched off, so a rare outcome that happens then is missed. On
// libsqlite3 these half-covered jccs were 76% of the executed patches'
// native samples with --skip-covered, and most of the jcc outcomes two
// runs missed.
//
// So an outcome whose destination can only be reached through it is
// probed at the destination instead: the fall-through instruction when no
// branch, function start or jump table names it, or a forward target
// that only this jcc names and that nothing falls into. The destination
// is patched like a block probe (relocated, with one direct probe that
// records the jcc's event: its source, destination and outcome kind), so
// it costs nothing until that outcome happens, records it whenever it
// does, and is restored once it is recorded. The jcc keeps a probe only
// for the outcomes left; with none left it is not patched at all.
//
// Reached any other way, a destination probe would record an outcome
// that did not happen. What may reach an instruction without a direct
// branch naming it: jump tables and computed gotos (int32 offsets from a
// table that a rip-relative lea addresses, or absolute entries a
// disp32(,%reg,scale) operand indexes), code pointers in data (relocation
// addends; for a fixed-address module, any word of data, and any
// immediate), an endbr64 (which marks exactly such targets), and C++
// landing pads (functions with an LSDA get no edge probes). See
// facts.IndirectTargets.

// EdgeSite is a destination probe: the jcc it stands for and which of
// its outcomes (0 taken, 1 not taken).
type EdgeSite struct {
	Jcc     int
	Outcome int
}

// edgeRec is an instruction's record in Plan.edges: a jcc's (its
// destination probes, the outcomes the log holds, those delegated, and
// whether it is watched), or a destination probe's (its jcc and
// outcome). A destination probe is never a jcc.
type edgeRec struct {
	dests     [2]int32 // a jcc's destination probes (taken, not taken; -1 = none)
	jcc       int32    // a destination probe's jcc
	inst      int32    // the instruction
	outcome   uint8    // a destination probe's outcome
	isDest    bool     // a destination probe's record (else a jcc's)
	cov       [2]bool  // a jcc's outcomes the --skip-covered log holds
	deleg     [2]bool  // a jcc's outcomes with no probe at the jcc (patched destination, or covered)
	delegated bool     // Delegate set deleg
	watch     bool     // a watched jcc (Watch)
}

// edge returns instruction i's record, nil if it has none.
func (p *Plan) edge(i int) *edgeRec {
	if p.edges == nil {
		return nil
	}
	return p.edges.Get(i)
}

// jccEdge returns jcc i's record, nil if it has no destination probes.
func (p *Plan) jccEdge(i int) *edgeRec {
	if r := p.edge(i); r != nil && !r.isDest {
		return r
	}
	return nil
}

// Options.Edges values.
const (
	EdgesAuto    = "auto"    // EdgesCovered's jccs, and every other jcc's at destinations a plain jmp fits ("" too)
	EdgesCovered = "covered" // only jccs with one outcome in the --skip-covered log
	EdgesAll     = "all"     // every jcc
	EdgesNone    = "none"
)

// edgeMinLen is the shortest destination instruction that gets an edge
// probe of a jcc the --skip-covered log says nothing one-sided about,
// under EdgesAuto: one a jmp rel32 replaces (tactic B1). A shorter one
// needs a pun or an eviction, hence a stub page to touch and neighbours
// kept from their own tactics (InstNoRead), for a probe whose outcome
// runs once before it is undone. On the sqlite3 workload (exact log,
// two runs, 3 interleaved pairs each): every jcc at any destination
// (EdgesAll) 98.84-99.06% of the full run's events at 1.57x native for
// run 1 (median of 9 alternating rounds), at destinations of 5 bytes or
// more 98.92-99.04% at 1.41x, none 98.34-98.70% at 1.43x.
const edgeMinLen = 5

// edgesEnabled reports whether edge probes apply to this rewrite.
func (p *Plan) edgesEnabled() bool {
	if p.opts.Tool != runtime.ToolBranch || p.opts.Every || p.opts.Context {
		return false
	}
	switch p.opts.Edges {
	case "", EdgesAuto, EdgesAll:
		return true
	case EdgesCovered:
		return p.cov != nil
	}
	return false
}

// AddEdges picks the destination probes of the jcc sites in ok (sorted
// instruction indices that passed the site checks) and returns ok with
// them merged in, sorted.
func (p *Plan) AddEdges(ok []int) []int {
	if !p.edgesEnabled() {
		return ok
	}
	c := p.fx.Code
	p.edges = blocks.New[edgeRec](len(c.Insts))
	indirect := p.fx.IndirectTargets()
	// direct branches to each instruction's start, 2 meaning more than one
	npred := make([]uint8, len(c.Insts))
	for i, k := range c.Kinds {
		if k == facts.Jcc || k == facts.Jcxz || k == facts.Jmp || k == facts.Call {
			if d := c.Index(c.Targets[i]); d >= 0 && c.Insts[d].Addr == c.Targets[i] && npred[d] < 2 {
				npred[d]++
			}
		}
	}
	isSite := make([]bool, len(c.Insts))
	for _, i := range ok {
		isSite[i] = true
	}
	usable := func(d int) bool {
		in := &c.Insts[d]
		k := c.Kinds[d]
		if k != facts.Other || isSite[d] || p.isEdge(d) {
			return false
		}
		if in.Flags&(place.InstUntouchable|place.InstPadding) != 0 || in.Flags&place.InstRelocatable == 0 {
			return false
		}
		if p.fx.Fini.Reserved(d) || p.fx.Early[d] || c.Starts[in.Addr] || indirect.Has(in.Addr) || facts.IsEndbr(in.Bytes()) {
			return false
		}
		return true
	}
	var out []int
	for _, j := range ok {
		k := c.Kinds[j]
		if k != facts.Jcc && k != facts.Jcxz {
			continue
		}
		in := &c.Insts[j]
		if fr, ok := p.fx.FDEOf(in.Addr); ok && fr.LSDA {
			continue
		}
		next := in.Addr + uint64(in.Len())
		ds := [2]int{-1, -1}
		var cov [2]bool
		if p.cov != nil {
			cov = [2]bool{p.cov.holds(in.Addr, c.Targets[j], runtime.KJccTaken), p.cov.holds(in.Addr, next, runtime.KJccNotTaken)}
		}
		// Not taken: the next instruction, which nothing else names.
		if n := j + 1; !cov[1] && n < len(c.Insts) && c.Insts[n].Addr == next &&
			c.Insts[n].Flags&place.InstTarget == 0 && usable(n) {
			ds[1] = n
		}
		// Taken: a forward target only this jcc names, after an
		// instruction that never falls through (padding between them is
		// never run).
		if t := c.Targets[j]; !cov[0] && t > next {
			if d := c.Index(t); d > j+1 && c.Insts[d].Addr == t && npred[d] == 1 && usable(d) && p.noFallInto(d) {
				ds[0] = d
			}
		}
		// With EdgesCovered only a jcc half covered by the --skip-covered
		// log (the jcc the log says is hot on one side) gets one; with
		// EdgesAuto any other jcc only at destinations a plain jmp fits.
		if cov[0] == cov[1] {
			switch p.opts.Edges {
			case EdgesCovered:
				continue
			case "", EdgesAuto:
				for o, d := range ds {
					if d >= 0 && c.Insts[d].Len() < edgeMinLen {
						ds[o] = -1
					}
				}
			}
		}
		// A short jcc that stays patched (its taken outcome has no
		// probe elsewhere) puns into its next instruction's bytes, which
		// an edge probe there keeps from any other patch (InstNoRead):
		// the jcc would lose its tactics. It keeps both outcomes.
		if ds[1] >= 0 && in.Len() < 6 && ds[0] < 0 && !cov[0] {
			ds[1] = -1
		}
		if ds[0] < 0 && ds[1] < 0 {
			continue
		}
		*p.edges.Add(j) = edgeRec{dests: [2]int32{int32(ds[0]), int32(ds[1])}, inst: int32(j), cov: cov}
		for o, d := range ds {
			if d >= 0 {
				*p.edges.Add(d) = edgeRec{jcc: int32(j), inst: int32(d), outcome: uint8(o), isDest: true}
				// Once its outcome is recorded it must be undone for
				// good: no other patch may come to depend on it.
				// Nor may it depend on a site's patch, which would then
				// stay for as long as it does.
				c.Insts[d].Flags |= place.InstNoRead | place.InstNoReadSites
				out = append(out, d)
			}
		}
	}
	if len(out) == 0 {
		return ok
	}
	out = append(out, ok...)
	slices.Sort(out)
	return slices.Compact(out)
}

// noFallInto reports whether control can reach instruction d only by a
// branch: the instruction before it (skipping padding) never falls
// through.
func (p *Plan) noFallInto(d int) bool {
	c := p.fx.Code
	for q := d - 1; q >= 0; q-- {
		if c.Insts[q].Addr+uint64(c.Insts[q].Len()) != c.Insts[q+1].Addr {
			return false
		}
		if c.Insts[q].Flags&place.InstPadding != 0 {
			continue
		}
		// It is a site: a jmp rel32 written over it must end before d,
		// or its pun would read d's bytes (and d's patch could then never
		// be restored).
		return c.Kinds[q].IsUncond() && c.Insts[q].Addr+5 <= c.Insts[d].Addr
	}
	return false
}

// EdgeOf returns the jcc and outcome destination probe i stands for.
func (p *Plan) EdgeOf(i int) (EdgeSite, bool) {
	if r := p.edge(i); r != nil && r.isDest {
		return EdgeSite{Jcc: int(r.jcc), Outcome: int(r.outcome)}, true
	}
	return EdgeSite{}, false
}

// isEdge reports whether instruction i is a destination probe.
func (p *Plan) isEdge(i int) bool {
	_, ok := p.EdgeOf(i)
	return ok
}

// Delegate records, for jcc site i, which of its outcomes need no probe
// at the jcc: those whose destination probe placement patched (patched,
// by instruction; the destinations lie above the jcc, so they are
// decided) and those the --skip-covered log holds. It reports whether no
// outcome is left, so that the jcc needs no patch at all.
func (p *Plan) Delegate(i int, patched []bool) bool {
	r := p.jccEdge(i)
	if r == nil {
		return false
	}
	for o, d := range r.dests {
		r.deleg[o] = r.cov[o] || d >= 0 && patched[d]
	}
	r.delegated = true
	return r.deleg[0] && r.deleg[1]
}

// Deleg returns which outcomes of jcc i have no probe at the jcc.
func (p *Plan) Deleg(i int) [2]bool {
	if r := p.jccEdge(i); r != nil && r.delegated {
		return r.deleg
	}
	return [2]bool{}
}

// Watched reports whether jcc i keeps a STINT_PF_DELEG probe (Watch).
func (p *Plan) Watched(i int) bool {
	r := p.jccEdge(i)
	return r != nil && r.watch
}
