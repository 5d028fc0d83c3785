package rewrite

import (
	"debug/elf"
	"slices"

	"github.com/stint-project/stint/formats/redlog"
	"github.com/stint-project/stint/rewrite/place"
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
// indirectTargets.

// edgeSite is a destination probe: the jcc it stands for and which of
// its outcomes (0 taken, 1 not taken).
type edgeSite struct {
	jcc     int
	outcome int
}

// edgeMaxTable bounds a scanned jump table.
const edgeMaxTable = 1 << 16

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
func (rw *rewriter) edgesEnabled() bool {
	if rw.opts.Tool != ToolBranch || rw.opts.Every || rw.opts.Context {
		return false
	}
	switch rw.opts.Edges {
	case "", EdgesAuto, EdgesAll:
		return true
	case EdgesCovered:
		return rw.cov != nil
	}
	return false
}

// planEdges picks the destination probes of the jcc sites in ok (sorted
// instruction indices that passed the site checks) and returns ok with
// them merged in, sorted. It fills rw.edgeOf, rw.edgesOf and, with
// --skip-covered, rw.covOut.
func (rw *rewriter) planEdges(ok []int) []int {
	if !rw.edgesEnabled() {
		return ok
	}
	c := rw.c
	rw.edgeOf = map[int]edgeSite{}
	rw.edgesOf = map[int][2]int{}
	rw.covOut = map[int][2]bool{}
	fdes := rw.f.fdeRanges()
	indirect := rw.indirectTargets()
	npred := map[uint64]int{}
	for i, k := range c.kinds {
		if k == kJcc || k == kJcxz || k == kJmp || k == kCall {
			npred[c.targets[i]]++
		}
	}
	isSite := make(map[int]bool, len(ok))
	for _, i := range ok {
		isSite[i] = true
	}
	usable := func(d int) bool {
		in := &c.insts[d]
		k := c.kinds[d]
		if _, taken := rw.edgeOf[d]; k != kOther || isSite[d] || taken {
			return false
		}
		if in.Flags&(place.InstUntouchable|place.InstPadding) != 0 || in.Flags&place.InstRelocatable == 0 {
			return false
		}
		if rw.fini.reserved(d) || rw.early[d] || c.starts[in.Addr] || indirect[in.Addr] || isEndbr(in.Bytes) {
			return false
		}
		return true
	}
	var out []int
	for _, j := range ok {
		k := c.kinds[j]
		if k != kJcc && k != kJcxz {
			continue
		}
		in := &c.insts[j]
		if fr, ok := fdeOf(fdes, in.Addr); ok && fr.lsda {
			continue
		}
		next := in.Addr + uint64(in.Len())
		ds := [2]int{-1, -1}
		var cov [2]bool
		if rw.cov != nil {
			has := func(kind uint32, dst uint64) bool {
				return rw.cov.has[redlog.Entry{A: in.Addr, B: dst, DstMod: rw.cov.self, Kind: kind}]
			}
			cov = [2]bool{has(kJccTaken, c.targets[j]), has(kJccNotTaken, next)}
		}
		// Not taken: the next instruction, which nothing else names.
		if n := j + 1; !cov[1] && n < len(c.insts) && c.insts[n].Addr == next &&
			c.insts[n].Flags&place.InstTarget == 0 && usable(n) {
			ds[1] = n
		}
		// Taken: a forward target only this jcc names, after an
		// instruction that never falls through (padding between them is
		// never run).
		if t := c.targets[j]; !cov[0] && t > next && npred[t] == 1 {
			if d := c.index(t); d > j+1 && c.insts[d].Addr == t && usable(d) && rw.noFallInto(d) {
				ds[0] = d
			}
		}
		// With EdgesCovered only a jcc half covered by the --skip-covered
		// log (the jcc the log says is hot on one side) gets one; with
		// EdgesAuto any other jcc only at destinations a plain jmp fits.
		if cov[0] == cov[1] {
			switch rw.opts.Edges {
			case EdgesCovered:
				continue
			case "", EdgesAuto:
				for o, d := range ds {
					if d >= 0 && c.insts[d].Len() < edgeMinLen {
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
		rw.edgesOf[j] = ds
		rw.covOut[j] = cov
		for o, d := range ds {
			if d >= 0 {
				rw.edgeOf[d] = edgeSite{jcc: j, outcome: o}
				// Once its outcome is recorded it must be undone for
				// good: no other patch may come to depend on it.
				// Nor may it depend on a site's patch, which would then
				// stay for as long as it does.
				c.insts[d].Flags |= place.InstNoRead | place.InstNoReadSites
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
func (rw *rewriter) noFallInto(d int) bool {
	c := rw.c
	for p := d - 1; p >= 0; p-- {
		if c.insts[p].Addr+uint64(c.insts[p].Len()) != c.insts[p+1].Addr {
			return false
		}
		if c.insts[p].Flags&place.InstPadding != 0 {
			continue
		}
		// It is a site: a jmp rel32 written over it must end before d,
		// or its pun would read d's bytes (and d's patch could then never
		// be restored).
		return c.kinds[p].isUncond() && c.insts[p].Addr+5 <= c.insts[d].Addr
	}
	return false
}

// indirectTargets returns the instruction starts that code may reach
// without a direct branch naming them, beyond function starts (see the
// comment at the top of this file). It errs on the side of more: an
// address listed here only loses its edge probe.
func (rw *rewriter) indirectTargets() map[uint64]bool {
	c, f := rw.c, rw.f
	out := map[uint64]bool{}
	isStart := func(a uint64) bool {
		i := c.index(a)
		return i >= 0 && c.insts[i].Addr == a && c.kinds[i] != kBad
	}
	inCode := func(a uint64) bool {
		for _, r := range c.regions {
			if a >= r.lo && a < r.hi {
				return true
			}
		}
		return false
	}
	// The loaded sections of data (allocated, not code, in the file).
	var dataSects []*sect64
	for k := range f.sects {
		if s := &f.sects[k]; s.Flags&elf.SHF_ALLOC != 0 && s.Flags&elf.SHF_EXECINSTR == 0 && s.Type == elf.SHT_PROGBITS {
			dataSects = append(dataSects, s)
		}
	}
	// data returns the bytes of the data section holding a, from a on.
	data := func(a uint64) []byte {
		for _, s := range dataSects {
			if a >= s.Addr && a < s.Addr+s.Size {
				return f.sectData(s)[a-s.Addr:]
			}
		}
		return nil
	}
	scanned := map[[2]uint64]bool{}
	// table marks the entries of a table at base: width-byte entries,
	// relative to base (rel) or absolute, up to the first that is no
	// instruction start.
	table := func(base uint64, width int, rel bool) {
		if scanned[[2]uint64{base, uint64(width)}] {
			return
		}
		scanned[[2]uint64{base, uint64(width)}] = true
		b := data(base)
		for k := 0; k < edgeMaxTable && (k+1)*width <= len(b); k++ {
			var v uint64
			switch {
			case width == 8:
				v = le.Uint64(b[k*8:])
			case rel:
				v = base + uint64(int64(int32(le.Uint32(b[k*4:]))))
			default:
				v = uint64(le.Uint32(b[k*4:]))
			}
			if !inCode(v) || !isStart(v) {
				return
			}
			out[v] = true
		}
	}
	for i := range c.insts {
		in := &c.insts[i]
		b := in.Bytes
		if c.kinds[i] == kBad || len(b) < 6 {
			continue
		}
		// lea disp32(%rip),%reg into data: a table of int32 offsets
		// from its address, or of absolute words.
		o := 0
		for o < len(b)-1 && (b[o] == 0x66 || b[o] == 0x3e || b[o] == 0x2e) {
			o++
		}
		if b[o]&0xf0 == 0x40 {
			o++
		}
		if o+6 <= len(b) && b[o] == 0x8d && b[o+1]&0xc7 == 0x05 {
			t := in.Addr + uint64(len(b)) + uint64(int64(int32(le.Uint32(b[o+2:]))))
			if !inCode(t) {
				table(t, 4, true)
				table(t, 8, false)
			}
		}
		// Any operand disp32(,%index,scale) with no base: an absolute
		// table (a fixed-address module's jump table).
		for p := 0; p+6 <= len(b); p++ {
			if sc := b[p+1] >> 6; b[p]&0xc7 == 0x04 && b[p+1]&0x07 == 0x05 && sc >= 2 {
				t := uint64(int64(int32(le.Uint32(b[p+2:]))))
				if !inCode(t) && data(t) != nil {
					table(t, 1<<sc, false)
				}
			}
		}
	}
	// Code pointers in data: relocation addends, and for a fixed-address
	// module every aligned word of data and every immediate.
	f.relas(func(_ uint64, t elf.R_X86_64, _ uint32, addend uint64) {
		if inCode(addend) {
			out[addend] = true
		}
	})
	if !rw.pic {
		for _, s := range dataSects {
			d := f.sectData(s)
			for o := 0; o+8 <= len(d); o += 4 {
				if v := le.Uint64(d[o:]); inCode(v) {
					out[v] = true
				}
				if v := uint64(le.Uint32(d[o:])); inCode(v) {
					out[v] = true
				}
			}
		}
		for i := range c.insts {
			b := c.insts[i].Bytes
			for o := 1; o+4 <= len(b); o++ {
				if v := uint64(le.Uint32(b[o:])); inCode(v) {
					out[v] = true
				}
			}
		}
	}
	return out
}

// nslotsOf returns how many probe records instruction i's site has:
// nprobesOf, and a watched jcc's STINT_PF_DELEG probe.
func (rw *rewriter) nslotsOf(i int) int {
	if rw.watch[i] {
		return rw.nprobesOf(i) + 1
	}
	return rw.nprobesOf(i)
}

// planWatch picks the watched jccs (rw.watch): a switchable jcc patch
// with one outcome probed elsewhere (rw.deleg) and one here. That
// outcome's arm would go straight on, and a site whose only probe never
// fires would never reach the runtime, so the off-switch would never
// list it: it would stay patched all run, its detour on every run of the
// delegated side (on sqlite3, the fall-through of a jcc whose taken
// side never comes, as hot as the loop around it). Its probe for the
// delegated outcome never records (the edge probe or the log has it);
// it starts watched (the runtime's PROBE_WATCHED), as an outcome the log
// holds does, so its first runs list the site and, if the program keeps
// running it, leave it to the windows.
func (rw *rewriter) planWatch(modified []*patchRec) {
	rw.watch = map[int]bool{}
	for i, d := range rw.deleg {
		if d[0] != d[1] && modified[i] != nil && modified[i].switchable {
			rw.watch[i] = true
			rw.st.Delegated++
		}
	}
}

// nprobesOf returns how many probes instruction i's site has that can
// record: an edge site one, a jcc two less those its edge sites or the
// --skip-covered log took (rw.deleg), any other site nprobes. The
// patch's remaining count starts there.
func (rw *rewriter) nprobesOf(i int) int {
	if _, ok := rw.edgeOf[i]; ok {
		return 1
	}
	n := nprobes(rw.opts.Tool, rw.c.kinds[i])
	if d, ok := rw.deleg[i]; ok {
		for _, x := range d {
			if x {
				n--
			}
		}
	}
	return n
}
