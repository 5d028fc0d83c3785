package rewrite

import (
	"fmt"
	"io"
	"maps"
	goruntime "runtime"
	"slices"

	"github.com/stint-project/stint/formats"
	"github.com/stint-project/stint/rewrite/elfin"
	"github.com/stint-project/stint/rewrite/elfout"
	"github.com/stint-project/stint/rewrite/facts"
	"github.com/stint-project/stint/rewrite/place"
	"github.com/stint-project/stint/rewrite/policy"
	"github.com/stint-project/stint/runtime"
)

// MaxInputSize is the largest input Rewrite accepts (bytes).
const MaxInputSize = 1 << 31

// DefaultChunkGap is the ChunkGap used when Options.ChunkGap is 0.
const DefaultChunkGap = elfout.DefaultChunkGap

// Rewrite rewrites the ELF file read from r and returns the new file's
// bytes. Errors are a *FormatError or wrap one of the package's sentinel
// errors for bad input.
func Rewrite(r io.ReaderAt, opts Options) ([]byte, *Stats, error) {
	data, err := readAll(r)
	if err != nil {
		return nil, nil, fmt.Errorf("read: %w", err)
	}
	return RewriteBytes(data, opts)
}

// readAll reads r from offset 0 to EOF (at most MaxInputSize bytes).
func readAll(r io.ReaderAt) ([]byte, error) {
	var out []byte
	buf := make([]byte, 1<<20)
	for {
		n, err := r.ReadAt(buf, int64(len(out)))
		out = append(out, buf[:n]...)
		if len(out) > MaxInputSize {
			return nil, ErrTooLarge
		}
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
		if n == 0 {
			return nil, io.ErrNoProgress
		}
	}
}

// RewriteBytes is Rewrite on an in-memory file; data is not modified.
//
// The stages hand values to each other: the input (package elfin) →
// its facts (package facts) → the plan (package policy: which site gets
// which probe) → placement (package place) → the patches the runtime
// switches → trampolines (package tramp) → the output (package elfout).
func RewriteBytes(data []byte, opts Options) (out []byte, st *Stats, err error) {
	out, sa, st, err := rewriteParts(data, opts, true)
	if err != nil {
		return nil, nil, err
	}
	return sa.AppendTo(out), st, nil
}

// rewriteParts is RewriteBytes but for the stub area, which sa (nil:
// none) writes after out; with areaRoom out has the capacity for it.
func rewriteParts(data []byte, opts Options, areaRoom bool) (out []byte, sa *elfout.StubArea, st *Stats, err error) {
	if len(data) > MaxInputSize {
		return nil, nil, nil, ErrTooLarge
	}
	if opts.Tool == 0 {
		opts.Tool = ToolBranch
	}
	if opts.Tool < ToolBranch || opts.Tool > ToolBlock {
		return nil, nil, nil, &OptionError{fmt.Errorf("unknown tool %d", opts.Tool)}
	}
	if err := opts.check(); err != nil {
		return nil, nil, nil, &OptionError{err}
	}
	if opts.Sample != "" {
		opts.Every = true // the sampler sees every occurrence
	}
	f, err := elfin.Parse(data)
	if err != nil {
		return nil, nil, nil, err
	}
	if f.Rewritten() {
		return nil, nil, nil, ErrAlreadyRewritten
	}
	blob, err := parseBlob(opts.Blob)
	if err != nil {
		return nil, nil, nil, err
	}
	fx, err := facts.Compute(f)
	if err != nil {
		return nil, nil, nil, err
	}
	st = &Stats{Module: fx.Module.Name(), Tool: opts.Tool.String(), Insts: len(fx.Code.Insts),
		Undecodable: fx.Code.Undecodable, Patched: map[string]int{}, Reasons: map[string]*Reason{}}
	if out, sa, err = rewrite(opts, fx, blob, st, areaRoom); err != nil {
		return nil, nil, nil, err
	}
	return out, sa, st, nil
}

// blobInfo is a validated runtime blob.
type blobInfo struct {
	elfout.Blob
	probe uint32 // stint_probe_entry's offset
}

// parseBlob validates the runtime blob (nil: package runtime's).
func parseBlob(b []byte) (blobInfo, error) {
	if b == nil {
		b = runtime.Blob()
	}
	h, err := runtime.ParseHeader(b)
	if err != nil {
		return blobInfo{}, fmt.Errorf("%w: %w", ErrNoBlob, err)
	}
	return blobInfo{elfout.Blob{Data: b, EntryExec: h.EntryExec, EntryInit: h.EntryInit, EntryFini: h.EntryFini}, h.Probe}, nil
}

// rewrite runs the stages after the facts: policy, placement, patches,
// then the output.
func rewrite(opts Options, fx *facts.Facts, blob blobInfo, st *Stats, areaRoom bool) ([]byte, *elfout.StubArea, error) {
	a, err := placeWithFallbacks(opts, fx, blob, st)
	if err != nil {
		return nil, nil, err
	}
	plan, tt, p := a.plan, a.tt, a.p
	// Placement is done: its state goes before the patch tables come,
	// the peak of a big rewrite, and its writes' slack with it.
	p.Release()
	if cap(p.Writes) > len(p.Writes)+len(p.Writes)/4 {
		p.Writes = slices.Clone(p.Writes)
	}
	ps, err := collectPatches(fx.Code, p, plan, a.patched)
	if err != nil {
		return nil, nil, err
	}
	st.addPlan(plan, ps)
	nprobe, err := numberProbes(fx.Code, tt, plan, a.patched, ps.evicted)
	if err != nil {
		return nil, nil, err
	}
	st.Probes = nprobe
	st.Patches = len(ps.order)
	return output(opts, fx, blob, st, a.fr, plan, tt, p, ps, nprobe, areaRoom)
}

// attempt is one plan and its placement.
type attempt struct {
	fr      *elfout.Frame
	plan    *policy.Plan
	tt      *trampTable
	p       *place.Planner
	patched []bool
}

// maxPlaceAttempts bounds the placements of a rewrite: a compact
// complete trace's each probe from elsewhere (pre-sites, marks:
// policy/marks.go) the jccs and rets the ones before left unpatched,
// which may take bytes another branch needed (on the Go goroutines
// fixture 96 jccs and 968 rets are left by the first; after 4 attempts,
// 28 and 179; the rewrite takes 1.5 s against 0.8 s); another
// rewrite's second, if any, leaves out the pre-call runs near a site
// left unpatched (attempt.crowdedRuns).
const maxPlaceAttempts = 4

// placeWithFallbacks plans and places the sites; it places again
// without the pre-call runs near a site an attempt left unpatched, and
// for a compact complete trace probing from elsewhere every jcc and ret
// an attempt left without a probe, until nothing changes or
// maxPlaceAttempts. st ends up with the last attempt's counts.
func placeWithFallbacks(opts Options, fx *facts.Facts, blob blobInfo, st *Stats) (*attempt, error) {
	start := *st
	// the policy marks instructions as it goes (place.InstFlags): each
	// attempt starts from the facts' own
	flags := make([]place.InstFlags, len(fx.Code.Insts))
	for i := range fx.Code.Insts {
		flags[i] = fx.Code.Insts[i].Flags
	}
	var unprobed []int
	seen, avoid, noRun := map[int]bool{}, map[int]bool{}, map[int]bool{}
	if opts.Paths() && opts.Fallbacks {
		for i, k := range fx.Code.Kinds {
			if k == facts.Jcc || k == facts.Jcxz || k == facts.Ret {
				seen[i] = true
				unprobed = append(unprobed, i)
			}
		}
	}
	for n := 1; ; n++ {
		for i := range fx.Code.Insts {
			fx.Code.Insts[i].Flags = flags[i]
		}
		*st = start
		st.Patched, st.Reasons = map[string]int{}, map[string]*Reason{}
		a, err := placeOnce(opts, fx, blob, st, unprobed, avoid, noRun)
		if err != nil || n == maxPlaceAttempts {
			return a, err
		}
		// again without the runs that crowded a site out, if any
		more := a.crowdedRuns(noRun)
		if !opts.Paths() || opts.Calls() {
			// a call chain's rets: a pre-site not placed is avoided,
			// and its ret placed where it is, the next time; once (a
			// placement of git's call chain takes a second)
			for _, i := range a.plan.Fallbacks() {
				if !a.patched[i] && !avoid[i] {
					avoid[i], more = true, true
				}
			}
			if !more || n == 2 {
				return a, nil
			}
			continue
		}
		probed := make([]bool, len(fx.Code.Insts))
		for i, ok := range a.patched {
			if j, pre := a.plan.PreSiteOf(i); ok && pre {
				probed[j] = true
			}
		}
		for _, i := range a.plan.Fallbacks() {
			if !a.patched[i] && !avoid[i] {
				avoid[i] = true
				more = more || opts.Fallbacks // plan elsewhere, or in place
			}
		}
		for i, k := range fx.Code.Kinds {
			if (k == facts.Jcc || k == facts.Jcxz || k == facts.Ret) && !a.patched[i] && !probed[i] && !seen[i] {
				seen[i], more = true, true
				unprobed = append(unprobed, i)
			}
		}
		if !more {
			return a, nil
		}
	}
}

// crowdedRuns adds to noRun the calls whose pre-call sites' runs start
// near a site this attempt left unpatched (a run's bytes may be the room
// that site needed: the sqlite3 workload's call chain lost a ret and a
// call to them), and reports whether it added any.
func (a *attempt) crowdedRuns(noRun map[int]bool) bool {
	added := false
	for i, site := range a.tt.isSite {
		if !site || a.patched[i] {
			continue
		}
		for _, j := range a.plan.PreRunsNear(a.tt.code.Insts[i].Addr, 32) {
			if !noRun[j] {
				noRun[j], added = true, true
			}
		}
	}
	return added
}

// replaceSites returns sites without those in drop and with those in
// add, sorted, each once (a pre-site may be an entry or resume site
// already).
func replaceSites(sites, add []int, drop map[int]bool) []int {
	sites = slices.DeleteFunc(sites, func(i int) bool { return drop[i] })
	sites = append(sites, add...)
	slices.Sort(sites)
	return slices.Compact(sites)
}

// placeOnce plans the sites (probing the jccs and rets in unprobed from
// elsewhere, away from the instructions in avoid; no pre-call run for the
// calls in noRun) and places them.
func placeOnce(opts Options, fx *facts.Facts, blob blobInfo, st *Stats, unprobed []int, avoid, noRun map[int]bool) (*attempt, error) {
	fr := elfout.NewFrame(fx.Module, uint64(len(fx.File.Data)), uint64(len(blob.Data)), opts.ChunkGap)
	if fr.Note != "" {
		st.Notes = append(st.Notes, fr.Note)
	}
	plan, err := policy.New(fx, opts.policy())
	if err != nil {
		return nil, err
	}
	plan.AvoidPreRuns(noRun)
	sites := policy.ToolSites(fx.Code, opts.Tool)
	if opts.entries() {
		sites = plan.EntrySites()
	} else if opts.Sample != "" && opts.Tool == ToolCall {
		// the thesis's samples: calls (their callers); a return says no more
		sites = policy.WithoutRets(fx.Code, sites)
	}
	if opts.Calls() {
		sites = plan.CallsSites(sites)
		if opts.opt("pre") {
			// its rets too short for a jump in place, from a pre-site
			add, drop := plan.PreferPreSites(sites, avoid)
			sites = replaceSites(sites, add, drop)
		}
	} else if opts.Paths() {
		sites = plan.PathsSites()
		add, drop := plan.PathsUnpatched(unprobed, avoid)
		if opts.opt("pre") {
			var short []int
			for _, i := range sites {
				if !drop[i] {
					short = append(short, i)
				}
			}
			more, out := plan.PreferPreSites(short, avoid)
			add = append(add, more...)
			maps.Copy(drop, out)
		}
		sites = replaceSites(sites, add, drop)
	}
	st.Notes = append(st.Notes, plan.Notes...) // the log's, and what picking the sites noticed
	st.Sites = len(sites)
	tt := newTrampTable(fx, plan, fr.TrampStart)
	tt.counts, tt.atomic = opts.Counts, opts.CountsAtomic
	// (the slots' stride must fit an imul's imm32)
	tt.stripe = opts.stripes(fx.Module) && len(sites)*runtime.Stripes*runtime.StripeSlot < 1<<31
	tt.noPPI, tt.noPCS = !opts.opt("ppi"), !opts.opt("pcs")
	// Go's runtime turns a fault into a panic only at its own code's
	// addresses: runs and tails would move more of them into trampolines
	tt.dpc = opts.Counts && opts.opt("dpc") && !fx.Module.Go
	tt.link = opts.Paths() && !opts.Calls() && opts.opt("link") && !fx.Module.Go
	tt.pred = opts.Paths() && !opts.Calls() && opts.opt("pred")
	cand := plan.Sites(sites)
	tt.tailStops(cand)
	ok := tt.sizeSites(opts.Tool, cand)
	ok = plan.AddEdges(ok)
	tt.sizeEdges(ok)
	plan.MarkOpenEnded(ok)
	p, patched, err := placeSites(fx, plan, tt, fr.Space, ok, !opts.Every && !opts.Context, opts.traps(fx.Module), opts.TrapAll, st)
	if err != nil {
		return nil, err
	}
	return &attempt{fr: fr, plan: plan, tt: tt, p: p, patched: patched}, nil
}

// output builds the tables of the patched module and writes the file.
func output(opts Options, fx *facts.Facts, blob blobInfo, st *Stats, fr *elfout.Frame, plan *policy.Plan,
	tt *trampTable, p *place.Planner, ps *patchSet, nprobe int, areaRoom bool) ([]byte, *elfout.StubArea, error) {
	retTable, retWord, nwords, callRets := plan.RetLists(func(i int) int {
		if t := tt.tramp(i); t != nil {
			return int(t.probe0) // -1 unless numbered
		}
		return -1
	})
	st.CallRets = callRets
	st.OwnSites = nwords - callRets
	st.Stubs = len(p.Stubs)
	dp, err := elfout.PlanDynamic(fx.File, fx.Module)
	if err != nil {
		return nil, nil, err
	}
	// The hook's trampoline comes after the others: the layout follows.
	fini := placeFiniHook(fx, tt, p.Writes, fr.RXVaddr+uint64(blob.EntryFini))
	area := fr.Space.Layout(elfout.PageSize)
	chunks, stubs, ndeps, err := chunkTables(p, area, fr, fx.Module.Shared, tt.near, ps.idx)
	if err != nil {
		return nil, nil, err
	}
	note := markerNote(opts.Tool)
	traceEnds := fx.TraceEnds()
	traps := trapTable(fx, p, tt, ps.idx)
	var seen [][2]uint64
	if opts.SkipCovered != nil && plan.LogPrefix() != nil {
		seen = plan.LogSeenKeys()
	}
	sizes := elfout.Sizes{TrampEnd: tt.seal(), BlobLen: uint64(len(blob.Data)), Progs: len(fx.File.Progs),
		Note: len(note), Stubs: len(stubs), Deps: ndeps, TraceEnds: len(traceEnds), Reads: len(ps.pairs),
		Rets: len(retTable), LoggedCap: plan.LogEntries(), Probes: nprobe, Patches: len(ps.order),
		Chunks: len(chunks), Preinit: dp.Preinit, Dynamic: -1, Traps: len(traps), Seen: len(seen), ColdCap: plan.SeenOpenCap()}
	if opts.Counts {
		sizes.Counts = nprobe
	}
	if dp.Rela != nil {
		sizes.Rela = len(dp.Rela) + 24
	}
	if dp.Entries != nil {
		sizes.Dynamic = len(dp.Entries)
	}
	l, err := elfout.NewLayout(fr, sizes)
	if err != nil {
		return nil, nil, err
	}
	st.Chunks, st.ChunkBytes, st.Deps, st.StubPages = len(chunks), area.SrcSize, ndeps, stubPages(stubs)

	if retWord == nil {
		retWord = make([]uint32, len(fx.Code.Insts)) // looked up per probe (a word of 0 sets nothing)
	}
	im := &elfout.Image{File: fx.File, Mod: fx.Module, Frame: fr, Layout: l, Blob: blob.Blob, Note: note, Backing: opts.backing}
	im.Module.StubAreaSize = area.SrcSize
	if opts.Paths() {
		im.Extra = []elfout.Section{{Name: formats.PathMapSection, Data: pathMap(fx, plan, tt, st).Encode()}}
	}
	// The output image is the rewrite's biggest allocation (cc1plus: 360
	// MB without its stub area), the trampolines and probe records
	// written straight into it. Placement's garbage, which a high GOGC
	// leaves uncollected, would stay beside it: collected first, its
	// pages take the image (cc1plus peaked at 3.3 GB in some runs, 2.2
	// GB in others).
	im.Writes = p.Writes
	p.Writes = nil // in the output from here on, with the planner's arena they hold
	goruntime.GC()
	if err := elfout.Prepare(im, areaRoom); err != nil {
		return nil, nil, err
	}
	im.Writes = nil
	e := &emitter{fx: fx, plan: plan, tt: tt, ps: ps, im: im, entry: fr.RXVaddr + uint64(blob.probe), retWord: retWord,
		nprobe: nprobe, seen: make([][2]int, len(ps.order))}
	if err := e.emit(); err != nil {
		return nil, nil, err
	}
	patches, cold := ps.runtimePatches(fx.Code, e.seen)
	st.Cold = cold
	rchunks, deps := runtimeChunks(chunks)
	im.Patches, im.Chunks, im.Stubs, im.Deps = patches, rchunks, stubs, deps
	im.TraceEnds, im.Reads, im.Rets, im.Logged, im.Dyn, im.Fini, im.Traps = traceEnds, ps.pairs, retTable, e.logged, dp, fini, traps
	im.Seen, im.Cold = seen, e.coldList(patches)
	if len(im.Cold) > sizes.ColdCap {
		return nil, nil, fmt.Errorf("internal: %d cold probes, room for %d", len(im.Cold), sizes.ColdCap)
	}
	im.Module = moduleHeader(opts, fx, plan, im, area.SrcSize, tt.stripe, nprobe)
	if i := plan.FiniSite; i >= 0 && tt.isSite[i] {
		if t := tt.tramp(i); t != nil && t.probe0 >= 0 {
			im.Module.FiniProbe = uint32(t.probe0) + 1
		}
	}
	write := elfout.WriteParts
	if areaRoom {
		write = elfout.WriteWithRoom
	}
	out, sa, notes, err := write(im)
	if err != nil {
		return nil, nil, err
	}
	st.Notes = append(st.Notes, notes...)
	return out, sa, nil
}

// moduleHeader fills the fields of struct stint_module the rewrite
// decides (stripe: the trampolines count down per stripe of threads);
// elfout.WriteParts adds the addresses.
func moduleHeader(opts Options, fx *facts.Facts, plan *policy.Plan, im *elfout.Image, stubArea uint64, stripe bool, nprobe int) runtime.Module {
	h := runtime.Module{Tool: uint32(opts.Tool), NProbes: uint32(nprobe), ImageEnd: fx.Module.ImageHi,
		NPatches: uint32(len(im.Patches)), NChunks: uint32(len(im.Chunks)),
		TextLo: fx.Module.TextLo, TextHi: fx.Module.TextHi, StubAreaSize: stubArea,
		NStubs: uint32(len(im.Stubs)), NDeps: uint32(len(im.Deps)), NTraceEnds: uint32(len(im.TraceEnds)),
		NReads: uint32(len(im.Reads)), NRets: uint32(len(im.Rets)), NTraps: uint32(len(im.Traps))}
	if opts.Every || opts.Context {
		h.Flags |= runtime.MFEvery
	}
	if opts.Paths() {
		h.Flags |= runtime.MFPaths
	}
	if opts.Calls() {
		h.Flags |= runtime.MFCalls
	}
	if opts.Counts {
		h.Flags |= runtime.MFCounts
	}
	if opts.Context {
		h.Flags |= runtime.MFContext
	}
	if opts.countdown() {
		h.Flags |= runtime.MFCountdown
	}
	if opts.entries() {
		h.Flags |= runtime.MFEntries
	}
	if stripe {
		h.Flags |= runtime.MFStripes
	}
	if fx.Module.Shared {
		h.Flags |= runtime.MFShared
	} else {
		h.Flags |= runtime.MFExec
	}
	if fx.Module.Static {
		h.Flags |= runtime.MFStatic
	}
	if opts.SwitchSync {
		h.Flags |= runtime.MFPark
	}
	if len(im.Rets) > 0 {
		h.Flags |= runtime.MFRets
	}
	for _, p := range im.Patches {
		if p.Flags&runtime.PatchCold != 0 {
			h.Flags |= runtime.MFCold
			break
		}
	}
	bid := fx.File.BuildID()
	// A build-id longer than the runtime keys logs by (32 bytes) gets no
	// list of logged probes.
	if opts.SkipCovered != nil && len(im.Logged) <= plan.LogEntries() && len(bid) <= len(h.BuildID) {
		h.Flags |= runtime.MFLogged
		h.LogCount, h.LogSum = plan.LogDigest()
		h.NLogged = uint32(len(im.Logged))
		if pre := plan.LogPrefix(); pre != nil {
			// a run of this log grown by appends reads only what was appended
			h.LogEnd, h.LogLast, h.LogLastHead = uint64(pre.End), uint64(pre.Last.Off), pre.Last.Head
			h.NSeen = uint32(len(im.Seen))
		}
	}
	if h.Flags&runtime.MFCold != 0 {
		h.NCold = uint32(len(im.Cold))
	}
	if opts.RetireSince != nil && plan.Retired > 0 {
		h.Flags |= runtime.MFRetired
	}
	h.BuildIDLen = uint32(copy(h.BuildID[:], bid))
	copy(h.Options[:len(h.Options)-1], opts.optionString())
	return h
}

// markerNote is the note that marks a rewritten file (elfin.NoteName,
// elfin.NoteType) and names its tool.
func markerNote(t Tool) []byte {
	desc := []byte(fmt.Sprintf("tool=%s", t))
	name := elfin.NoteName
	b := make([]byte, 12+elfout.AlignUp(uint64(len(name)+1), 4)+elfout.AlignUp(uint64(len(desc)), 4))
	elfin.LE.PutUint32(b[0:], uint32(len(name)+1))
	elfin.LE.PutUint32(b[4:], uint32(len(desc)))
	elfin.LE.PutUint32(b[8:], elfin.NoteType)
	copy(b[12:], name)
	copy(b[12+elfout.AlignUp(uint64(len(name)+1), 4):], desc)
	return b
}
