package policy

import (
	"github.com/stint-project/stint/rewrite/facts"
	"github.com/stint-project/stint/rewrite/place"
	"github.com/stint-project/stint/runtime"
)

// Marks (compact complete traces).
//
// A jcc the planner cannot patch (too short, with neighbours it may not
// move: a Go executable, whose padding is off limits, has about a
// hundred) leaves the decoder without its outcome, and no later probe
// tells it where the thread went. So each side of such a jcc gets a mark:
// a probe at a plain instruction on the side's run (from the
// destination straight on, through direct jmps, past no probe that
// appends) that appends a constant bit, the opposite on the two sides.
// The first outcome bit after the jcc is then its mark's. The decoder
// takes a mark's bit wherever its walk meets the mark, however the thread
// came there, so a mark needs no destination of its own. A side's mark
// is the first placed mark on its run; a jcc whose two marks are not
// both placed, or append the same bit (an odd cycle of jccs sharing
// marks), stays unresolved.

// markRun bounds the instructions a side's run is searched for a mark.
const markRun = 32

// PathsUnpatched plans the probes of the jccs and rets in failed
// (instruction indices an earlier attempt could not patch), away from
// the instructions in avoid (the ones an earlier attempt could not
// place): a pre-site where the plain instruction before the branch can
// take it (a pre-call site's conditions, precall.go; its trampoline
// then runs the branch too, at no extra cost), else, for a jcc, marks.
// It returns the sites to add and the branches to drop from the sites.
func (p *Plan) PathsUnpatched(failed []int, avoid map[int]bool) (add []int, drop map[int]bool) {
	c := p.fx.Code
	p.preBranch, p.markBit, drop = map[int]int{}, map[int]bool{}, map[int]bool{}
	var rest []int
	for n, j := range failed {
		k := c.Kinds[j]
		if k != facts.Jcc && k != facts.Jcxz && k != facts.Ret {
			continue
		}
		// testing: every other jcc takes marks, so that both kinds run
		marks := p.opts.Fallbacks && n%2 == 1 && k != facts.Ret
		if i := p.preSiteFor(j, avoid); !marks && i >= 0 {
			p.preBranch[i] = j
			p.mark(&p.preAt, i)
			drop[j] = true
			add = append(add, i)
			continue
		}
		if k != facts.Ret {
			rest = append(rest, j)
		}
	}
	add = append(add, p.pathsMarks(rest, avoid)...)
	if p.opts.Fallbacks {
		for _, j := range rest {
			if _, ok := p.MarkedJcc(j, func(int) bool { return true }); ok {
				drop[j] = true
			}
		}
	}
	p.fallbacks = add
	return add, drop
}

// PreferPreSites probes each of the jccs and rets in short (too short
// for a jmp rel32 in place) from a pre-site whose run, with the branch,
// has room for one: placed in place it would take a punned jump through
// a stub, an extra jump on every run of it (the sqlite3 workload's
// complete trace spent 9% of its samples in stubs). The run's bytes are
// the pre-site's to overwrite (PreRunEnd). It returns the sites to add
// and the branches to drop; avoid holds pre-sites an earlier attempt
// could not place.
func (p *Plan) PreferPreSites(short []int, avoid map[int]bool) (add []int, drop map[int]bool) {
	c := p.fx.Code
	drop = map[int]bool{}
	if p.preBranch == nil {
		p.preBranch = map[int]int{}
	}
	for _, j := range short {
		k := c.Kinds[j]
		if k != facts.Jcc && k != facts.Jcxz && k != facts.Ret || c.Insts[j].Len() >= 5 {
			continue
		}
		i := p.preSiteFor(j, avoid)
		if i < 0 || c.Insts[j].Addr+uint64(c.Insts[j].Len())-c.Insts[i].Addr < 5 {
			continue
		}
		p.preBranch[i] = j
		p.mark(&p.preAt, i)
		drop[j] = true
		add = append(add, i)
	}
	// one that cannot be placed is avoided the next time (as a fallback)
	p.fallbacks = append(p.fallbacks, add...)
	return add, drop
}

// PreRunEnd returns, for pre-site i of a jcc or ret, the end of the
// branch it probes, and for a pre-call site the call's start: the bytes
// after i up to there run only from its trampoline (place.Planner.Run);
// 0 for any other instruction.
func (p *Plan) PreRunEnd(i int) int64 {
	j, ok := p.preBranch[i]
	if !ok {
		if call, ok := p.preCallOf(i); ok {
			return int64(p.fx.Code.Insts[call].Addr)
		}
		return p.entryRunEnd(i)
	}
	in := &p.fx.Code.Insts[j]
	return int64(in.Addr) + int64(in.Len())
}

// maxPreRun bounds the plain instructions a pre-site's trampoline runs
// before its branch: Go's epilogues end add $n,%rsp; pop %rbp; ret,
// where the pop alone is too short to patch.
const maxPreRun = 3

// preSiteFor returns the pre-site of branch j: the nearest instruction i
// (up to maxPreRun before) from which j can be probed, or -1.
func (p *Plan) preSiteFor(j int, avoid map[int]bool) int {
	for i := j - 1; i >= 0 && i >= j-maxPreRun; i-- {
		if !p.preBranchable(i, j) {
			return -1
		}
		if _, dup := p.preBranch[i]; !dup && !avoid[i] {
			return i
		}
	}
	return -1
}

// preBranchable reports whether branch j can be probed from instruction
// i, which its trampoline runs with the ones up to j: each of them and j
// meet a pre-call site's conditions (precall.go), and none but i has a
// probe or is one (an entry or resume probe at i runs first).
func (p *Plan) preBranchable(i, j int) bool {
	for q := i; q < j; q++ {
		// an entry or resume probe at i only right before j: with more
		// in between, the Go fixture's compact traces stopped decoding
		// sooner in most runs (45k events against 440k), though runs
		// vary with signal timing and no one site was found to blame
		k, ok := p.paths[q]
		if ok && (q > i || i < j-1 || k != runtime.KEntry && k != runtime.KResume) {
			return false
		}
		if _, pre := p.preBranch[q]; pre && q > i {
			return false
		}
		if !p.preSiteable(q, q+1) || q+1 < j && p.fx.Code.Kinds[q+1] != facts.Other {
			return false
		}
	}
	return true
}

// inPreRun reports whether instruction i is one a pre-site's trampoline
// runs (its bytes in place never run).
func (p *Plan) inPreRun(i int) bool {
	for q := i; q >= 0 && q > i-maxPreRun; q-- {
		if j, ok := p.preBranch[q]; ok && j > i {
			return true
		}
	}
	return false
}

// Fallbacks returns the pre-sites and marks PathsUnpatched added.
func (p *Plan) Fallbacks() []int { return p.fallbacks }

// pathsMarks picks the marks of the jccs in failed, records them as
// compact-trace probes and returns their indices.
func (p *Plan) pathsMarks(failed []int, avoid map[int]bool) []int {
	chosen := map[int]bool{}
	var jccs []int
	for _, j := range failed {
		if _, ok := p.paths[j]; ok {
			continue
		}
		jccs = append(jccs, j)
		for _, d := range p.sides(j) {
			if m := p.markSpot(d, chosen, avoid); m >= 0 {
				chosen[m] = true
			}
		}
	}
	// A run's mark is the first chosen one on it, which a later choice
	// may have put before an earlier one: keep only marks some side
	// starts with, and colour them.
	first := func(m int) bool { return chosen[m] }
	used := map[int]bool{}
	var pairs [][2]int
	for _, j := range jccs {
		s := p.sides(j)
		a, b := p.runMark(s[0], first), p.runMark(s[1], first)
		if a >= 0 && b >= 0 && a != b {
			used[a], used[b] = true, true
			pairs = append(pairs, [2]int{a, b})
		}
	}
	bit := twoColour(pairs)
	var out []int
	for m := range used {
		p.markBit[m] = bit[m]
		k := runtime.KJccNotTaken
		if bit[m] {
			k = runtime.KJccTaken
		}
		p.paths[m] = k
		out = append(out, m)
	}
	return out
}

// MarkedJcc reports whether jcc j's outcome follows from its marks
// (placed says which marks were placed), and then the bit its taken
// side's mark appends.
func (p *Plan) MarkedJcc(j int, placed func(int) bool) (takenBit, ok bool) {
	if p.markBit == nil {
		return false, false
	}
	isMark := func(m int) bool { _, mk := p.markBit[m]; return mk && placed(m) }
	s := p.sides(j)
	a, b := p.runMark(s[0], isMark), p.runMark(s[1], isMark)
	if a < 0 || b < 0 || p.markBit[a] == p.markBit[b] {
		return false, false
	}
	return p.markBit[a], true
}

// MarkBit reports whether instruction i is a mark, and its bit.
func (p *Plan) MarkBit(i int) (bit, ok bool) {
	bit, ok = p.markBit[i]
	return bit, ok
}

// sides returns jcc j's destinations (taken, not taken) as instruction
// indices, -1 where none is decoded.
func (p *Plan) sides(j int) [2]int {
	c := p.fx.Code
	in := &c.Insts[j]
	at := func(a uint64) int {
		if i := c.Index(a); i >= 0 && c.Insts[i].Addr == a {
			return i
		}
		return -1
	}
	return [2]int{at(c.Targets[j]), at(in.Addr + uint64(in.Len()))}
}

// runMark returns the first instruction of the run from d that isMark
// says is a mark, or -1 (the run ends at a branch first).
func (p *Plan) runMark(d int, isMark func(int) bool) int {
	m := -1
	p.walkRun(d, func(i int) bool {
		if isMark(i) {
			m = i
			return false
		}
		return true
	})
	return m
}

// markSpot returns where the run from d gets its mark: a mark already
// chosen on it, else its best markable instruction not in avoid (marks
// earlier attempts could not place), or -1. Best is one a jmp rel32
// replaces whole (tactic B1: no neighbour's bytes needed), then one
// after no short site (whose tactics need this one's bytes: a mark
// there would cost that site its patch), then the first.
func (p *Plan) markSpot(d int, chosen, avoid map[int]bool) int {
	c := p.fx.Code
	best, score := -1, -1
	p.walkRun(d, func(i int) bool {
		if chosen[i] {
			best = i
			return false
		}
		if avoid[i] || !p.markable(i) {
			return true
		}
		sc := 0
		if c.Insts[i].Len() >= 5 {
			sc += 2
		}
		if i == 0 || !p.shortSite(i-1) {
			sc++
		}
		if sc > score {
			best, score = i, sc
		}
		return score < 3
	})
	return best
}

// shortSite reports whether instruction i is a site a jmp rel32 does
// not replace whole.
func (p *Plan) shortSite(i int) bool {
	c := p.fx.Code
	if c.Insts[i].Len() >= 5 {
		return false
	}
	_, probe := p.paths[i]
	return probe || c.Kinds[i].IsBranch() && c.Kinds[i] != facts.Jmp
}

// walkRun calls f on the plain instructions of the run from d, in
// order, while it returns true: straight on and through direct jmps,
// up to the first other branch (or undecoded byte, or gap).
func (p *Plan) walkRun(d int, f func(int) bool) {
	c := p.fx.Code
	for i, n := d, 0; i >= 0 && i < len(c.Insts) && n < markRun; n++ {
		switch c.Kinds[i] {
		case facts.Jmp:
			i = c.Index(c.Targets[i])
			if i < 0 || c.Insts[i].Addr != c.Targets[i] {
				return
			}
			continue
		case facts.Other:
		default:
			return
		}
		if !f(i) {
			return
		}
		in := &c.Insts[i]
		if i+1 >= len(c.Insts) || c.Insts[i+1].Addr != in.Addr+uint64(in.Len()) {
			return
		}
		i++
	}
}

// markable reports whether plain instruction i can take a mark: no other
// probe there, patchable, and runnable from a trampoline; not an endbr64
// (an indirect branch must land on it in place).
func (p *Plan) markable(i int) bool {
	c := p.fx.Code
	in := &c.Insts[i]
	if _, ok := p.paths[i]; ok {
		return false
	}
	if p.inPreRun(i) {
		return false
	}
	if in.Flags&(place.InstUntouchable|place.InstPadding) != 0 || in.Flags&place.InstRelocatable == 0 {
		return false
	}
	if p.fx.Fini.Reserved(i) || p.fx.Early[i] || facts.IsEndbr(in.Bytes()) {
		return false
	}
	return facts.Relocatable(in, c.Kinds[i]) == nil
}

// twoColour gives each node of pairs a bit so that the two of a pair
// differ where the graph allows (breadth first from each uncoloured
// node; a pair closing an odd cycle keeps equal bits).
func twoColour(pairs [][2]int) map[int]bool {
	adj := map[int][]int{}
	for _, e := range pairs {
		adj[e[0]] = append(adj[e[0]], e[1])
		adj[e[1]] = append(adj[e[1]], e[0])
	}
	bit := map[int]bool{}
	for _, e := range pairs {
		if _, done := bit[e[0]]; done {
			continue
		}
		bit[e[0]] = true
		queue := []int{e[0]}
		for len(queue) > 0 {
			n := queue[0]
			queue = queue[1:]
			for _, o := range adj[n] {
				if _, done := bit[o]; !done {
					bit[o] = !bit[n]
					queue = append(queue, o)
				}
			}
		}
	}
	return bit
}
