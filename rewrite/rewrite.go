package rewrite

import (
	"cmp"
	"debug/elf"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"slices"
	"sort"
	"strconv"

	"github.com/stint-project/stint/rewrite/place"
)

// Options configure a rewrite.
type Options struct {
	Tool  Tool // probe sites; 0 means ToolBranch
	Every bool // STINT_MF_EVERY: record every occurrence
	// Context (tool call only): STINT_MF_CONTEXT, the context-preserving
	// mode. Every call and return reaches the runtime, which keeps a
	// shadow stack per thread and records each distinct calling context
	// once (KindContext rows: a context id and its parent's), so a
	// budgeted run yields exact call-context tree nodes. Tracking never
	// stops (the gate does not apply); the budget limits recording.
	Context bool
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
	// SkipCovered names an exact redundancy log: sites whose outcomes
	// are all in it are left unpatched (they cost nothing at run time).
	SkipCovered string
	// SkipSeenIndirect also leaves unpatched the indirect branches,
	// returns and syscalls of which the log holds at least one outcome;
	// new destinations of those are then not traced.
	SkipSeenIndirect bool
	// RetireSince names an older copy of the SkipCovered log (taken
	// before the last runs): a site with outcomes in it and none added
	// since is left unpatched as well, though an outcome of it is still
	// unseen. Those runs gave that outcome its chance (retire.go).
	RetireSince string
	// EmulateIndirectCalls probes every indirect call in its own
	// trampoline, where it is emulated (push the return address, jump),
	// as before session 17. By default one is probed at the instruction
	// before it where only that instruction leads to it, so that the
	// call runs in place and the return-stack predictor stays in step
	// (precall.go).
	EmulateIndirectCalls bool
	// Edges says which jcc outcomes are probed at their destination
	// instead of at the jcc (edges.go): EdgesCovered those of jccs with
	// one outcome in the --skip-covered log, EdgesAll every jcc's where
	// the destination allows, EdgesAuto ("" too) EdgesCovered's and the
	// others' at destinations a jmp rel32 replaces, EdgesNone none.
	Edges string
}

// Hex is an address that marshals to JSON as a "0x..." string.
type Hex uint64

func (h Hex) MarshalText() ([]byte, error) {
	return []byte("0x" + strconv.FormatUint(uint64(h), 16)), nil
}

// Reason aggregates the sites that failed for one reason.
type Reason struct {
	Count int   `json:"count"`
	First []Hex `json:"first"` // the first few addresses (link vaddrs)
}

// maxReasonAddrs is how many addresses a Reason keeps.
const maxReasonAddrs = 5

// Stats count what a rewrite did. Every site is either patched (with one
// tactic), handled by a fallback, or failed with a reason.
type Stats struct {
	Module      string             `json:"module"` // "executable", "pie", "static", "static-pie", "shared"
	Tool        string             `json:"tool"`
	Insts       int                `json:"insts"`       // decoded instructions
	Undecodable int                `json:"undecodable"` // bytes of code that could not be decoded
	Sites       int                `json:"sites"`
	Patched     map[string]int     `json:"patched"` // tactic name -> sites
	Fallback    int                `json:"fallback"`
	Failed      int                `json:"failed"`
	Covered     int                `json:"covered"` // left unpatched: every outcome is in the --skip-covered log
	Retired     int                `json:"retired"` // left unpatched: outcomes logged before --retire-since's log and none added since
	Cold        int                `json:"cold"`    // switchable patches of returns and indirect jumps the --skip-covered log saw: they start off (STINT_PATCH_COLD)
	Reasons     map[string]*Reason `json:"reasons"` // why sites failed
	Evicted     int                `json:"evicted"` // neighbours moved to relocated-instruction trampolines
	Probes      int                `json:"probes"`
	Patches     int                `json:"patches"`
	Stubs       int                `json:"stubs"`
	Chunks      int                `json:"chunks"`      // ranges the runtime maps
	ChunkBytes  uint64             `json:"chunk_bytes"` // bytes of the stub area the chunks map (built at run time)
	StubPages   int                `json:"stub_pages"`  // pages of the stub area that hold stubs: the memory the chunks cost
	Deps        int                `json:"deps"`        // patch indices listed for chunks that fail to map
	Switchable  int                `json:"switchable"`  // patches the off-switch may undo and redo (STINT_PATCH_SWITCH)
	// SwitchableRead counts the switchable patches that other patches'
	// puns read (STINT_PATCH_READ: switched after their readers).
	SwitchableRead int `json:"switchable_read"`
	// CallRets counts the direct calls whose probes carry the list of
	// their callee's ret probes (STINT_MF_RETS).
	CallRets int `json:"call_rets"`
	// OwnSites counts the other direct probes' sites that carry the list
	// of their function's own sites (STINT_MF_RETS).
	OwnSites int `json:"own_sites"`
	// Peeks counts the (reader, readee) pairs left out because the
	// reader's pun reads only bytes the readee's one-store patch wrote
	// with their own values (keepPeeks).
	Peeks int `json:"peeks"`
	// EdgeProbes counts the destinations patched to record a jcc outcome
	// there (edges.go); EdgeFailed the ones the planner could not patch
	// (their jcc keeps that outcome's probe). Jccs with every outcome
	// probed at its destination are not patched and count in Patched as
	// "edge".
	// PreCalls counts the indirect calls probed at the instruction
	// before them (precall.go), so that they run in place.
	// Delegated counts the jccs with one outcome probed elsewhere that
	// keep a STINT_PF_DELEG probe for it (planWatch); Probes counts
	// those probes too.
	PreCalls   int      `json:"pre_calls"`
	EdgeProbes int      `json:"edge_probes"`
	EdgeFailed int      `json:"edge_failed"`
	Delegated  int      `json:"delegated"`
	Notes      []string `json:"notes,omitempty"`
}

// PatchedTotal returns the number of patched sites.
func (s *Stats) PatchedTotal() int {
	n := 0
	for _, v := range s.Patched {
		n += v
	}
	return n
}

func (s *Stats) fail(reason string, addr uint64) {
	s.Failed++
	r := s.Reasons[reason]
	if r == nil {
		r = &Reason{}
		s.Reasons[reason] = r
	}
	r.Count++
	if len(r.First) < maxReasonAddrs {
		r.First = append(r.First, Hex(addr))
	}
}

// JSON returns the stats as indented JSON.
func (s *Stats) JSON() []byte {
	b, _ := json.MarshalIndent(s, "", "  ")
	return append(b, '\n')
}

var tacticNames = map[place.Tactic]string{
	place.TacticB1: "B1", place.TacticB2: "B2", place.TacticT1: "T1",
	place.TacticT2: "T2", place.TacticT3: "T3", place.TacticP: "P",
}

const (
	pageSize  = 0x1000
	gib       = 1 << 30
	reachSlop = 16 << 20 // keep stubs this far inside rel32 reach
	// belowGap is the space right below a shared object kept free of
	// stubs: libraries loaded after it land there.
	belowGap = 256 << 20
	// hugePage is the size of the pages the runtime asks for when it
	// copies the trampolines and the tables into anonymous memory
	// (runtime/src/chunks.c, tables_huge): only whole ones that hold
	// nothing else are copied, so the layout puts both on its boundaries.
	hugePage = 2 << 20
)

// DefaultChunkGap is the ChunkGap used when Options.ChunkGap is 0 (see
// place.DefaultChunkGap for the trade-off between mappings and memory).
// Stub space below a shared object uses at most belowChunkGap whatever
// the option: a library initialised late (dlopen) may find things mapped
// there, and a chunk that clashes loses its sites.
const DefaultChunkGap = place.DefaultChunkGap

const belowChunkGap = 1 << 20

func alignUp(v, a uint64) uint64   { return (v + a - 1) &^ (a - 1) }
func alignDown(v, a uint64) uint64 { return v &^ (a - 1) }

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

// RewriteBytes is Rewrite on an in-memory file; data is not modified.
func RewriteBytes(data []byte, opts Options) (out []byte, st *Stats, err error) {
	if len(data) > MaxInputSize {
		return nil, nil, ErrTooLarge
	}
	if opts.Tool == 0 {
		opts.Tool = ToolBranch
	}
	if opts.Tool < ToolBranch || opts.Tool > ToolBlock {
		return nil, nil, fmt.Errorf("unknown tool %d", opts.Tool)
	}
	if err := opts.checkBudgetOptions(); err != nil {
		return nil, nil, err
	}
	f, err := parseELF(data)
	if err != nil {
		return nil, nil, err
	}
	if f.rewritten() {
		return nil, nil, ErrAlreadyRewritten
	}
	blobBytes := opts.Blob
	if blobBytes == nil {
		if blobBytes, err = defaultBlob(); err != nil {
			return nil, nil, err
		}
	}
	blob, err := parseBlob(blobBytes)
	if err != nil {
		return nil, nil, err
	}
	rw := &rewriter{f: f, opts: opts, blob: blob, st: &Stats{
		Tool: opts.Tool.String(), Patched: map[string]int{}, Reasons: map[string]*Reason{},
	}}
	out, err = rw.run()
	if err != nil {
		return nil, nil, err
	}
	return out, rw.st, nil
}

type tramp struct {
	addr   uint64
	size   int
	site   bool
	probe0 int // first probe index, -1 until numbered
}

type rewriter struct {
	f    *elfFile
	opts Options
	blob *blobInfo
	st   *Stats
	c    *code

	// module kind
	exec, shared, static, pic bool

	origLo, origHi uint64
	textLo, textHi uint64
	rxVaddr, rxOff uint64
	rxCursor       uint64
	reserveVaddr   uint64
	hasReserve     bool
	stubLo, stubHi uint64 // upper stub range

	isSite    []bool   // by instruction index
	siteSize  []int    // by instruction index: bytes of the site's trampoline
	tramps    []*tramp // by instruction index: near trampoline, nil until allocated
	siteArms  [][]int  // by instruction index: offsets of the site trampoline's arm rel32 fields
	trampList []int    // instruction indices in allocation order
	cov       *coveredSet
	old       map[[2]uint64]int // --retire-since: outcomes per (src, kind) in the older log
	coldRet   map[uint64]bool   // rets new code alone can give a new destination (coldRets), with rw.cov
	fini      *finiHook         // static executables: the _fini hook
	early     map[int]bool      // shared objects: instructions that run before DT_INIT (early.go)
	stable    [][2]uint64       // stableSlot's ranges (classify)

	// Edge probes (edges.go), by instruction index.
	edgeOf  map[int]edgeSite // destination probe -> its jcc and outcome
	edgesOf map[int][2]int   // jcc -> its destination probes (taken, not taken; -1 = none)
	covOut  map[int][2]bool  // jcc -> outcomes the --skip-covered log holds
	preCall map[int]int      // pre-call site -> the indirect call it probes (precall.go)
	deleg   map[int][2]bool  // jcc -> outcomes with no probe at the jcc (patched destination, or covered)
	// watch: switchable jccs with one outcome in deleg; that outcome
	// keeps a probe here too (STINT_PF_DELEG), which never records but
	// calls the runtime, so that the site is listed for the off-switch.
	watch map[int]bool
}

// stableSlot reports whether the 8 bytes at link vaddr a lie where only
// the dynamic linker writes: the PT_GNU_RELRO range (read-only once
// relocated: .got, .data.rel.ro) or the PLT's GOT (DT_PLTGOT, its three
// reserved words and one per PLT relocation), which lazy binding writes
// once per entry. An indirect branch through such a slot has the slot's
// value as its only destination, so the runtime need not switch it on
// again once that value is recorded (STINT_PF_SLOT).
func (rw *rewriter) stableSlot(a uint64) bool {
	for _, r := range rw.stable {
		if a >= r[0] && a+8 <= r[1] {
			return true
		}
	}
	return false
}

func (rw *rewriter) classify() {
	f := rw.f
	dyn := f.dynamic()
	interp := f.prog(elf.PT_INTERP) != nil
	flags1, _ := dynVal(dyn, elf.DT_FLAGS_1)
	_, soname := dynVal(dyn, elf.DT_SONAME)
	pieFlag := flags1&uint64(elf.DF_1_PIE) != 0
	rw.pic = f.hdr.Type == elf.ET_DYN
	if p := f.prog(elf.PT_GNU_RELRO); p != nil {
		rw.stable = append(rw.stable, [2]uint64{p.Vaddr, p.Vaddr + p.Memsz})
	}
	if got, ok := dynVal(dyn, elf.DT_PLTGOT); ok {
		n, _ := dynVal(dyn, elf.DT_PLTRELSZ)
		rw.stable = append(rw.stable, [2]uint64{got, got + 8*(3+n/24)})
	}
	switch {
	case f.hdr.Type == elf.ET_EXEC:
		rw.exec = true
		rw.static = !interp
	case pieFlag || (interp && !soname):
		rw.exec = true
		rw.static = !interp
	default:
		rw.shared = true
	}
	switch {
	case rw.shared:
		rw.st.Module = "shared"
	case rw.static && rw.pic:
		rw.st.Module = "static-pie"
	case rw.static:
		rw.st.Module = "static"
	case rw.pic:
		rw.st.Module = "pie"
	default:
		rw.st.Module = "executable"
	}
}

func (rw *rewriter) run() ([]byte, error) {
	f := rw.f
	rw.classify()
	rw.origLo, rw.origHi = f.imageRange()
	rw.c = decode(f)
	c := rw.c
	rw.st.Insts = len(c.insts)
	rw.st.Undecodable = c.undecodable
	if len(c.regions) == 0 {
		return nil, formatErr(int64(f.hdr.Phoff), nil, "no executable code")
	}
	rw.textLo, rw.textHi = c.regions[0].lo, c.regions[len(c.regions)-1].hi
	rw.fini = rw.planFiniHook()
	rw.early = rw.planEarly()

	// Layout of what we know now: the RX segment (blob, then trampolines
	// allocated as the planner asks for them) comes first above the image.
	// The blob takes the pages right below a 2 MiB boundary, so that the
	// trampolines start on one (the gap below the blob is address space,
	// not file).
	blobPages := alignUp(uint64(len(rw.blob.data)), pageSize)
	rw.rxVaddr = alignUp(alignUp(rw.origHi, pageSize)+blobPages, hugePage) - blobPages
	rw.rxOff = alignUp(uint64(len(f.data)), pageSize)
	rw.rxCursor = rw.rxVaddr + blobPages

	// Stub space: above the brk gap, below the reserve page; for a
	// fixed-address executable also below the image.
	rw.stubLo = alignUp(rw.origHi+gib, pageSize)
	limit := rw.textLo + 2*gib - reachSlop
	var allowed []place.Range
	if limit > rw.stubLo+2*pageSize {
		rw.hasReserve = true
		rw.reserveVaddr = alignDown(limit, pageSize) - pageSize
		rw.stubHi = rw.reserveVaddr
		allowed = append(allowed, place.Range{Lo: rw.stubLo, Hi: rw.stubHi})
	} else {
		rw.st.Notes = append(rw.st.Notes, "image too large for a stub area above it; no reserve segment")
	}
	if rw.pic {
		// A PIE executable is loaded far from anything else (the kernel's
		// ELF_ET_DYN_BASE, with the mmap area far above), so the 2 GiB
		// below it are free at start-up; stub addresses wrap below 0 as
		// link vaddrs and are mapped relative to the load base. A shared
		// object has its neighbours right below it: it gets the space
		// below its first belowGap bytes, mapped with
		// MAP_FIXED_NOREPLACE; a chunk that clashes there costs only
		// its own sites (the runtime restores their patches).
		lo := rw.textHi - 2*gib + reachSlop
		hi := alignDown(rw.origLo, pageSize) - pageSize
		// A static PIE has no interpreter, so the kernel maps it in the
		// mmap area too, with [vvar] and [vdso] placed right below it.
		if rw.shared || rw.static {
			hi = alignDown(rw.origLo, pageSize) - belowGap
		}
		if int64(hi) > int64(alignUp(lo, pageSize)) {
			allowed = append([]place.Range{{Lo: alignUp(lo, pageSize), Hi: hi}}, allowed...)
		}
	}
	if !rw.pic {
		lo := uint64(64 << 10)
		if reach := rw.origHi + gib + reachSlop; reach > 2*gib {
			lo = max(lo, reach-2*gib)
		}
		if rw.origLo > lo+pageSize {
			allowed = append([]place.Range{{Lo: alignUp(lo, pageSize), Hi: alignDown(rw.origLo, pageSize)}}, allowed...)
		}
	}
	space := place.NewAddrSpace(allowed)
	space.ChunkGap = rw.opts.ChunkGap
	if space.ChunkGap == 0 {
		space.ChunkGap = DefaultChunkGap
	}
	if rw.shared || (rw.pic && rw.static) {
		space.TightGap = min(space.ChunkGap, belowChunkGap)
		space.TightBelow = alignDown(rw.origLo, pageSize)
	}
	space.Reserve(place.Range{Lo: alignDown(rw.origLo, pageSize), Hi: rw.stubLo})

	// Sites.
	sites := c.sites(rw.opts.Tool)
	rw.st.Sites = len(sites)
	if rw.opts.SkipCovered != "" {
		cs, err := rw.loadCovered()
		if err != nil {
			return nil, err
		}
		rw.cov = cs
		if rw.opts.RetireSince != "" {
			if err := rw.loadRetire(); err != nil {
				return nil, err
			}
		}
		if !rw.opts.SkipSeenIndirect {
			rw.coldRet = rw.coldRets()
		}
		w := 0
		for _, i := range sites {
			if rw.covered(i) {
				rw.st.Covered++
				continue
			}
			if rw.retired(i) {
				rw.st.Retired++
				continue
			}
			sites[w] = i
			w++
		}
		sites = sites[:w]
	}
	sites = rw.planPreCalls(sites)
	rw.isSite = make([]bool, len(c.insts))
	rw.siteSize = make([]int, len(c.insts))
	rw.tramps = make([]*tramp, len(c.insts))
	rw.siteArms = make([][]int, len(c.insts))
	var ok []int
	rw.deleg = map[int][2]bool{}
	for _, i := range sites {
		in := &c.insts[i]
		if rw.fini.reserved(i) {
			rw.st.fail("reserved for the exit hook (a static executable's .fini)", in.Addr)
			continue
		}
		if rw.early[i] {
			rw.st.fail("runs before the module's initializer (an IFUNC resolver or __libc_early_init, or code they call)", in.Addr)
			continue
		}
		if in.Flags&place.InstUntouchable != 0 {
			rw.st.fail("untouchable: a branch lands inside the instruction", in.Addr)
			continue
		}
		if rw.opts.Tool == ToolBlock {
			if err := relocatable(in, c.kinds[i]); err != nil {
				rw.st.fail("cannot relocate: "+err.Error(), in.Addr)
				continue
			}
		}
		a := &asm{sizing: true}
		sp := rw.siteTramp(a, rw.opts.Tool, i, nil, 0)
		for _, pr := range sp {
			if pr.arm >= 0 {
				rw.siteArms[i] = append(rw.siteArms[i], pr.arm)
			}
		}
		if a.err != nil {
			rw.st.fail("no trampoline: "+a.err.Error(), in.Addr)
			continue
		}
		rw.isSite[i] = true
		rw.siteSize[i] = len(a.b)
		ok = append(ok, i)
	}
	ok = rw.planEdges(ok)
	for _, i := range ok {
		if _, edge := rw.edgeOf[i]; edge {
			in := &c.insts[i]
			a := &asm{sizing: true}
			sp := a.siteTramp(ToolBlock, in, c.kinds[i], c.targets[i], nil, 0, rw.pic)
			rw.siteArms[i] = []int{sp[0].arm}
			rw.isSite[i] = true
			rw.siteSize[i] = len(a.b)
		}
	}

	if rw.opts.Budget != "" && !rw.opts.Every && !rw.opts.Context {
		// Returns and indirect branches never run out of outcomes, so
		// the off-switch is what keeps their detours to the windows: no
		// other patch may depend on their bytes, which would keep them
		// patched for good (libsqlite3's hot tail call through a
		// function pointer in sqlite3PcacheFetch was one).
		for _, i := range ok {
			_, pre := rw.preCall[i]
			if k := c.kinds[i]; k == kRet || k == kIndJmp || k == kIndCall || pre {
				c.insts[i].Flags |= place.InstNoRead
			}
		}
	}
	p := &place.Planner{Insts: c.insts, Space: space, Near: rw.near, ShortJumps: !rw.opts.Every && !rw.opts.Context}
	// The planner must know every site before the first patch, or a
	// lower site's bytes may be locked by a higher site's pun.
	if err := p.MarkSites(ok); err != nil {
		return nil, fmt.Errorf("plan: %w", err)
	}
	// Patch from the highest address down, as E9Patch does: a site's
	// successor has then already been decided when the site is planned.
	patched := make([]bool, len(c.insts))
	for k := len(ok) - 1; k >= 0; k-- {
		i := ok[k]
		if _, edge := rw.edgeOf[i]; edge {
			if _, err := p.Patch(i); err != nil {
				rw.st.EdgeFailed++
				rw.isSite[i] = false // evicted later, it is a plain relocation
				continue
			}
			rw.st.EdgeProbes++
			patched[i] = true
			continue
		}
		if ds, has := rw.edgesOf[i]; has {
			// Its destination probes lie above it, so they are decided.
			cov := rw.covOut[i]
			var d [2]bool
			for o := range ds {
				d[o] = cov[o] || ds[o] >= 0 && patched[ds[o]]
			}
			rw.deleg[i] = d
			if d[0] && d[1] {
				rw.st.Patched["edge"]++
				rw.isSite[i] = false
				continue
			}
		}
		t, err := p.Patch(i)
		if j, pre := rw.preCall[i]; err != nil && pre && rw.unPreCall(i, j) {
			// the call, probed where it is after all
			i = j
			t, err = p.Patch(i)
		}
		if err != nil {
			rw.st.fail(reasonOf(err), c.insts[i].Addr)
			continue
		}
		name, known := tacticNames[t]
		if !known {
			rw.st.fail("planner returned no tactic", c.insts[i].Addr)
			continue
		}
		rw.st.Patched[name]++
		patched[i] = true
	}
	rw.st.Evicted = len(p.Evicted)
	return rw.emit(p, space, patched)
}

// reasonOf aggregates planner errors by their innermost cause (the
// outer layers name the instruction).
func reasonOf(err error) string {
	for {
		u := errors.Unwrap(err)
		if u == nil {
			return err.Error()
		}
		err = u
	}
}

// near allocates the near trampoline of instruction i (Planner.Near).
func (rw *rewriter) near(i int) uint64 {
	if t := rw.tramps[i]; t != nil {
		return t.addr
	}
	t := &tramp{addr: rw.rxCursor, site: rw.isSite[i], probe0: -1}
	if t.site {
		t.size = rw.siteSize[i]
		// The runtime retargets an arm with one 4-byte store, which it
		// only does when the rel32 stays inside a 64-byte line (else the
		// probe keeps calling in): move the trampoline until every arm
		// does. The skipped bytes stay int3.
		for k := 0; k < 64 && armsCrossLine(t.addr, rw.siteArms[i]); k++ {
			t.addr++
		}
		rw.rxCursor = t.addr
	} else {
		a := &asm{sizing: true}
		// Errors surface when an evicted instruction is emitted.
		a.relocate(&rw.c.insts[i], rw.c.kinds[i], rw.c.targets[i], rw.pic)
		t.size = len(a.b)
	}
	rw.rxCursor += uint64(t.size)
	rw.tramps[i] = t
	rw.trampList = append(rw.trampList, i)
	return t.addr
}

// armsCrossLine reports whether a trampoline at addr would have an arm's
// rel32 (at the given offsets) straddle a 64-byte line.
func armsCrossLine(addr uint64, arms []int) bool {
	for _, off := range arms {
		if (addr+uint64(off))&63 > 60 {
			return true
		}
	}
	return false
}

type chunkOut struct {
	r     place.Range
	src   uint64 // offset in the stub area
	flags uint32
	deps  []uint32 // patches to restore if the chunk cannot be mapped
}

type stubOut struct {
	off  uint64 // in the stub area
	code []byte // jmp rel32
}

// patchRec is the record of one modified instruction's patch.
type patchRec struct {
	inst       int
	addr       uint64
	lo, hi     uint64 // modified byte range [lo, hi)
	nprobes    int
	restorable bool
	switchable bool
	sync       bool // switchable with the jmp-to-self + membarrier sequence
	readee     bool // switchable, and other patches' puns read it (STINT_PATCH_READ)
	reader     bool // its pun reads a switchable readee (STINT_PATCH_READER)
}

// keepPeeks adds to p.Reads the peeks (Planner.Peeks) that matter: a pun
// that reads bytes its readee's patch wrote with their own values reads
// the same whichever form that patch has, but not while the bytes are
// being written, if a sequence writes them (the runtime's jmp-to-self,
// for a patch that straddles a word). A patch that fits one aligned word
// is written by one store, so a pun that only peeks at it does not
// depend on it: neither is a reader nor a readee for it. On libsqlite3
// those are rets whose pun reads the opcode of a following jmp rel32
// whose patch changed only its rel32.
func (rw *rewriter) keepPeeks(p *place.Planner, modified []*patchRec) {
	strong := make(map[[2]int]bool, len(p.Reads))
	for _, r := range p.Reads {
		strong[r] = true
	}
	for _, r := range p.Peeks {
		switch pr := modified[r[1]]; {
		case strong[r]:
		case pr != nil && !oneWord(pr.lo, pr.hi-pr.lo):
			p.Reads = append(p.Reads, r)
		default:
			rw.st.Peeks++
		}
	}
}

func (rw *rewriter) emit(p *place.Planner, space *place.AddrSpace, patched []bool) ([]byte, error) {
	f, c := rw.f, rw.c
	st := rw.st

	// Patch records: one per modified instruction.
	modified := make([]*patchRec, len(c.insts))
	var patchOrder []int
	for _, w := range p.Writes {
		for k, b := range w.Bytes {
			a := w.Addr + uint64(k)
			i := c.index(a)
			if i < 0 {
				return nil, fmt.Errorf("planner wrote outside the decoded code at %#x", a)
			}
			in := &c.insts[i]
			if in.Bytes[a-in.Addr] == b {
				continue
			}
			pr := modified[i]
			if pr == nil {
				pr = &patchRec{inst: i, lo: a, hi: a + 1}
				modified[i] = pr
				patchOrder = append(patchOrder, i)
			}
			pr.lo = min(pr.lo, a)
			pr.hi = max(pr.hi, a+1)
		}
	}
	slices.Sort(patchOrder)
	evicted := make([]bool, len(c.insts))
	for _, i := range p.Evicted {
		evicted[i] = true
	}
	rw.keepPeeks(p, modified)
	read := make([]bool, len(c.insts))
	for _, r := range p.Reads {
		read[r[1]] = true
	}
	patchIdx := map[int]int{}
	for k, i := range patchOrder {
		patchIdx[i] = k
		pr := modified[i]
		if pr.hi-pr.lo > 16 {
			return nil, fmt.Errorf("patch of %#x modifies %d bytes", c.insts[i].Addr, pr.hi-pr.lo)
		}
		if patched[i] {
			pr.nprobes = rw.nprobesOf(i)
		}
		// Padding writes (neither site nor evicted) are never executed
		// and need no restoring.
		pr.restorable = !read[i] && (patched[i] || evicted[i])
	}
	pairs := rw.planSwitch(p, patchOrder, modified, patched, evicted, read)
	rw.planWatch(modified)
	for _, i := range patchOrder {
		if pr := modified[i]; pr.switchable {
			st.Switchable++
			if pr.readee {
				st.SwitchableRead++
			}
		}
	}

	// Number the probes of patched sites, in address order.
	nprobe := 0
	var siteOrder []int // in address order
	for i, site := range rw.isSite {
		if site && (patched[i] || evicted[i]) {
			siteOrder = append(siteOrder, i)
		}
	}
	for _, i := range siteOrder {
		t := rw.tramps[i]
		if t == nil {
			return nil, fmt.Errorf("site %#x patched without a trampoline", c.insts[i].Addr)
		}
		t.probe0 = nprobe
		nprobe += rw.nslotsOf(i)
	}
	st.Probes = nprobe
	st.Patches = len(patchOrder)
	retTable, retWord, callRets := rw.retLists(func(i int) int {
		if t := rw.tramps[i]; t != nil {
			return t.probe0 // -1 unless numbered above
		}
		return -1
	})
	st.CallRets = callRets
	st.OwnSites = len(retWord) - callRets
	st.Stubs = len(p.Stubs)

	// Dynamic section: moved to the RW segment (it cannot grow in place)
	// with our DT_INIT/DT_FINI and, for a dynamic executable, a
	// DT_PREINIT_ARRAY that initialises the runtime before any library
	// constructor runs (they may call into the executable's patched code,
	// whose stubs exist only once the runtime has mapped its chunks).
	dp, err := rw.planDynamic()
	if err != nil {
		return nil, err
	}

	if rw.fini != nil && !rw.placeFiniHook(rw.fini, p.Writes) {
		rw.fini = nil
	}
	// Layout: RX | R (phdrs, note, relocations, chunk sources) | RW, then
	// the reserve.
	rxSize := rw.rxCursor - rw.rxVaddr
	if tramps := rw.rxCursor - rw.rxVaddr - alignUp(uint64(len(rw.blob.data)), pageSize); tramps > hugePage {
		// More than one huge page of trampolines: pad the last one
		// out (int3), so that it is copied whole too.
		rxSize = alignUp(rw.rxCursor, hugePage) - rw.rxVaddr
	}
	rVaddr := alignUp(rw.rxVaddr+rxSize, pageSize)
	rOff := rw.rxOff + (rVaddr - rw.rxVaddr)

	nph := len(f.progs) + 4 // RX, R, RW, note
	if rw.hasReserve {
		nph++
	}
	phOff := uint64(0)
	noteOff := alignUp(phOff+uint64(nph)*phdrSize, 8)
	noteDesc := []byte(fmt.Sprintf("tool=%s", rw.opts.Tool))
	noteBytes := make([]byte, 12+alignUp(uint64(len(stintNoteName)+1), 4)+alignUp(uint64(len(noteDesc)), 4))
	le.PutUint32(noteBytes[0:], uint32(len(stintNoteName)+1))
	le.PutUint32(noteBytes[4:], uint32(len(noteDesc)))
	le.PutUint32(noteBytes[8:], stintNoteType)
	copy(noteBytes[12:], stintNoteName)
	copy(noteBytes[12+alignUp(uint64(len(stintNoteName)+1), 4):], noteDesc)
	relaOff := alignUp(noteOff+uint64(len(noteBytes)), 8)
	relaLen := uint64(0)
	if dp.rela != nil {
		relaLen = uint64(len(dp.rela)) + 24
	}
	// Chunks: ranges over one shared stub area that the runtime builds
	// from the stub list (ABI 2), so the file carries 16 bytes per stub.
	layout := space.Layout(pageSize)
	chunks, stubs, ndeps, err := rw.chunkTables(p, layout, patchIdx)
	if err != nil {
		return nil, err
	}
	stubsOff := alignUp(relaOff+relaLen, 16)
	depsOff := stubsOff + uint64(len(stubs))*stubSize
	traceEnds := rw.traceEnds()
	traceEndsOff := alignUp(depsOff+uint64(ndeps)*4, 8)
	readsOff := alignUp(traceEndsOff+uint64(len(traceEnds))*4, 8)
	retsOff := alignUp(readsOff+2*uint64(len(pairs))*readSize, 8)
	// The probes whose outcome the --skip-covered log has (at most one
	// per entry of the module; more, and the list is left out).
	loggedOff := alignUp(retsOff+4*uint64(len(retTable)), 8)
	loggedCap := 0
	if rw.cov != nil {
		loggedCap = len(rw.cov.has)
	}
	rSize := alignUp(loggedOff+4*uint64(loggedCap), pageSize)
	var logged []uint32
	st.Chunks = len(chunks)
	st.ChunkBytes = layout.SrcSize
	st.Deps = ndeps
	for k := range stubs {
		if k == 0 || stubs[k].off/pageSize != stubs[k-1].off/pageSize {
			st.StubPages++
		}
		if (stubs[k].off+place.StubLen-1)/pageSize != stubs[k].off/pageSize {
			st.StubPages++
		}
	}

	// RW: the module's header in the page right below a 2 MiB boundary,
	// the tables (probes, patches, chunks) from that boundary on, and,
	// when they take more than one huge page, padding to the next one,
	// so that the runtime can copy every page of them into huge pages;
	// then the DT_PREINIT_ARRAY, the dynamic section and the gate page,
	// which it leaves where they are. The gap below the header is
	// address space, not file.
	rwOff := rOff + rSize
	rwVaddr := alignUp(rVaddr+rSize+pageSize, hugePage) - pageSize
	probesAt := rwVaddr + pageSize
	const _ = uint(pageSize - moduleSize) // (the header fits its page)
	patchesAt := probesAt + uint64(nprobe)*probeSize
	chunksAt := patchesAt + uint64(len(patchOrder))*patchSize
	tablesEnd := chunksAt + uint64(len(chunks))*chunkSize
	preinitAt := alignUp(tablesEnd, 16)
	if tablesEnd-probesAt > hugePage {
		preinitAt = alignUp(tablesEnd, hugePage)
	}
	dynAt := preinitAt
	if dp.preinit {
		dynAt += 16
	}
	dynSize := uint64(0)
	if dp.entries != nil {
		dynSize = uint64(len(dp.entries)+6) * 16 // room for our tags and DT_NULL
	}
	gateAt := alignUp(dynAt+dynSize, pageSize)
	rwSize := gateAt + gateSize - rwVaddr
	newEnd := rwVaddr + alignUp(rwSize, pageSize)
	if newEnd > rw.stubLo {
		return nil, fmt.Errorf("new segments (%d MiB) do not fit below the stub area", (newEnd-rw.rxVaddr)>>20)
	}
	probeEntry := rw.rxVaddr + uint64(rw.blob.probe)

	// File: original | RX | R | RW | [shstrtab copy, section headers].
	fileEnd := rwOff + alignUp(rwSize, pageSize)
	out := make([]byte, fileEnd, fileEnd+uint64(len(f.sects)+4)*shdrSize+4096)
	copy(out, f.data)
	// In the planner's order: a later write to a byte wins.
	for _, w := range p.Writes {
		off, ok := f.offsetOf(w.Addr, uint64(len(w.Bytes)))
		if !ok {
			return nil, fmt.Errorf("patched bytes %#x+%d are not in the file", w.Addr, len(w.Bytes))
		}
		copy(out[off:], w.Bytes)
	}

	// RX: blob and trampolines.
	copy(out[rw.rxOff:], rw.blob.data)
	le.PutUint64(out[rw.rxOff+blobOffModuleRel:], rwVaddr-rw.rxVaddr)
	fillInt3(out[rw.rxOff+uint64(len(rw.blob.data)) : rw.rxOff+rxSize])
	probes := make([]byte, uint64(nprobe)*probeSize)
	// Per patch index: its probes, and how many of them are open-ended
	// ones of a site the --skip-covered log saw (STINT_PATCH_COLD).
	seenOf := map[uint32][2]int{}
	for _, i := range rw.trampList {
		t := rw.tramps[i]
		in := &c.insts[i]
		a := &asm{base: t.addr, gate: gateAt}
		if pr := modified[i]; pr != nil && pr.switchable {
			a.gate = gateAt + gateWord1
		}
		if t.site && t.probe0 >= 0 {
			tool, src := rw.opts.Tool, in.Addr
			e, edge := rw.edgeOf[i]
			if edge {
				tool, src = ToolBlock, c.insts[e.jcc].Addr
			}
			if j, pre := rw.preCall[i]; pre {
				src = c.insts[j].Addr
			}
			// The trampoline has a probe slot per outcome; an outcome
			// with no probe here (rw.deleg) gets another probe's
			// address in its dead thunk and an arm that goes straight on.
			// The site's probes are numbered from t.probe0, in slot order.
			// A watched site (rw.watch) keeps the slot's probe, flagged
			// STINT_PF_DELEG.
			n := nprobes(tool, c.kinds[i])
			deleg := rw.deleg[i]
			skip := deleg
			if rw.watch[i] {
				skip = [2]bool{}
			}
			probeAt := func(k int) uint64 { return probesAt + uint64(t.probe0+k)*probeSize }
			pv := make([]uint64, n)
			kept := 0
			for k := range pv {
				pv[k] = probeAt(0) // a skipped slot's dead thunk
				if k >= 2 || !skip[k] {
					pv[k] = probeAt(kept)
					kept++
				}
			}
			if kept == 0 || kept != rw.nslotsOf(i) {
				return nil, fmt.Errorf("site %#x: %d probes, want %d", in.Addr, kept, rw.nslotsOf(i))
			}
			sp := rw.siteTramp(a, tool, i, pv, probeEntry)
			if a.err == nil && len(sp) != n {
				a.err = errors.New("probe count mismatch")
			}
			var probed []siteProbe
			for k, s := range sp {
				if k < 2 && skip[k] {
					a.patchRel(s.arm, s.armTo)
					continue
				}
				if edge {
					s.kind = uint8(kJccTaken + e.outcome)
				}
				if k < 2 && deleg[k] {
					s.flags |= pfDeleg
				}
				probed = append(probed, s)
			}
			for k, s := range probed {
				b := probes[uint64(t.probe0+k)*probeSize:]
				le.PutUint64(b[0:], src)
				if s.flags&pfSlot != 0 && !rw.stableSlot(s.dst) {
					s.flags &^= pfSlot
				}
				if s.flags&(pfDirect|pfSlot) != 0 {
					le.PutUint64(b[8:], s.dst)
				}
				if s.arm >= 0 {
					le.PutUint64(b[16:], t.addr+uint64(s.arm))
					le.PutUint64(b[24:], s.armTo)
					if pr := modified[i]; pr != nil && pr.switchable && s.flags&pfDirect != 0 {
						// the thunk, where the off-switch sends the arm
						// back (ABI 8: the runtime no longer reads
						// every arm at load to learn it)
						rel := int32(le.Uint32(a.b[s.arm:]))
						le.PutUint64(b[48:], t.addr+uint64(s.arm)+4+uint64(int64(rel)))
					}
				}
				le.PutUint32(b[32:], uint32(probeAt(k)-rwVaddr))
				pidx := uint32(noPatch)
				if k, ok := patchIdx[i]; ok {
					pidx = uint32(k)
				}
				le.PutUint32(b[36:], pidx)
				if pidx != noPatch {
					n := seenOf[pidx]
					n[0]++
					if rw.seenOpen(src, s.kind) {
						n[1]++
					}
					seenOf[pidx] = n
				}
				b[40] = s.kind
				b[41] = s.flags
				if s.flags&pfDeleg != 0 {
					b[42] = probeWatched
				} else if rw.cov != nil && s.flags&pfDirect != 0 && rw.cov.logged(src, s.dst, s.kind) {
					logged = append(logged, uint32(t.probe0+k))
				}
				if w, ok := retWord[i]; ok && s.flags&pfDirect != 0 {
					le.PutUint32(b[44:], w)
				}
			}
		} else {
			if !evicted[i] {
				continue // a failed attempt of the planner: leave int3
			}
			a.relocate(in, c.kinds[i], c.targets[i], rw.pic)
			if t.site && len(a.b) <= t.size {
				// sized as a site that ended up with no probes (a jcc
				// its destination probes took over, an edge site that
				// failed), then evicted
				for len(a.b) < t.size {
					a.emit(0xcc)
				}
			}
		}
		if a.err != nil {
			return nil, fmt.Errorf("trampoline for %#x: %w", in.Addr, a.err)
		}
		if len(a.b) != t.size {
			return nil, fmt.Errorf("trampoline for %#x: %d bytes, sized %d", in.Addr, len(a.b), t.size)
		}
		copy(out[rw.rxOff+(t.addr-rw.rxVaddr):], a.b)
	}

	// R: program headers, note, stub list, chunk dependencies.
	rbuf := out[rOff : rOff+rSize]
	copy(rbuf[noteOff:], noteBytes)
	for k, so := range stubs {
		b := rbuf[stubsOff+uint64(k)*stubSize:]
		le.PutUint64(b[0:], so.off)
		copy(b[8:16], so.code)
	}
	for k, e := range traceEnds {
		le.PutUint32(rbuf[traceEndsOff+uint64(k)*4:], e)
	}
	// The pairs sorted by reader, then (the second half) by read.
	for k, pr := range pairs {
		le.PutUint32(rbuf[readsOff+uint64(k)*readSize:], pr.reader)
		le.PutUint32(rbuf[readsOff+uint64(k)*readSize+4:], pr.read)
	}
	byRead := slices.Clone(pairs)
	slices.SortFunc(byRead, func(a, b pairIdx) int { return cmp.Or(cmp.Compare(a.read, b.read), cmp.Compare(a.reader, b.reader)) })
	for k, pr := range byRead {
		b := rbuf[readsOff+uint64(len(pairs)+k)*readSize:]
		le.PutUint32(b, pr.reader)
		le.PutUint32(b[4:], pr.read)
	}
	for k, w := range retTable {
		le.PutUint32(rbuf[retsOff+uint64(k)*4:], w)
	}
	// A build-id longer than the runtime keys logs by (32 bytes) gets no list.
	listLogged := rw.cov != nil && len(logged) <= loggedCap && len(rw.f.buildID()) <= 32
	if listLogged {
		for k, pi := range logged {
			le.PutUint32(rbuf[loggedOff+uint64(k)*4:], pi)
		}
	}
	dk := uint64(0)
	for _, co := range chunks {
		for _, d := range co.deps {
			le.PutUint32(rbuf[depsOff+dk*4:], d)
			dk++
		}
	}

	// RW: module, probes, patches, chunks.
	m := out[rwOff : rwOff+rwSize]
	le.PutUint64(m[0:], moduleMagic)
	le.PutUint32(m[8:], abiVersion)
	var mf uint32
	if rw.opts.Every || rw.opts.Context {
		mf |= mfEvery
	}
	if rw.opts.Context {
		mf |= mfContext
	}
	if rw.shared {
		mf |= mfShared
	} else {
		mf |= mfExec
	}
	if rw.static {
		mf |= mfStatic
	}
	if rw.opts.SwitchSync {
		mf |= mfPark
	}
	if listLogged {
		mf |= mfLogged
		count, sum := rw.cov.digest()
		le.PutUint64(m[moduleLogOff:], sum)
		le.PutUint32(m[moduleLogOff+8:], count)
		le.PutUint32(m[moduleLogOff+12:], uint32(len(logged)))
		le.PutUint64(m[moduleLogOff+16:], rVaddr+loggedOff)
	}
	if len(retTable) > 0 {
		mf |= mfRets
		le.PutUint64(m[moduleRetsOff:], rVaddr+retsOff)
		le.PutUint32(m[moduleRetsOff+8:], uint32(len(retTable)))
	}
	le.PutUint32(m[12:], mf)
	le.PutUint32(m[16:], uint32(rw.opts.Tool))
	le.PutUint32(m[20:], uint32(nprobe))
	le.PutUint64(m[24:], rwVaddr)
	le.PutUint64(m[32:], rw.origHi)
	le.PutUint64(m[40:], probesAt)
	le.PutUint64(m[48:], patchesAt)
	le.PutUint64(m[56:], chunksAt)
	le.PutUint32(m[64:], uint32(len(patchOrder)))
	le.PutUint32(m[68:], uint32(len(chunks)))
	le.PutUint64(m[72:], rw.textLo)
	le.PutUint64(m[80:], rw.textHi)
	le.PutUint64(m[88:], rw.rxVaddr)
	le.PutUint64(m[96:], rw.rxVaddr+rxSize)
	bid := f.buildID()
	if len(bid) > 32 {
		bid = bid[:32]
	}
	copy(m[120:], bid)
	le.PutUint32(m[152:], uint32(len(bid)))
	le.PutUint64(m[176:], rVaddr+stubsOff)
	le.PutUint64(m[184:], rVaddr+depsOff)
	le.PutUint64(m[192:], layout.SrcSize)
	le.PutUint32(m[200:], uint32(len(stubs)))
	le.PutUint32(m[204:], uint32(ndeps))
	copy(m[moduleOptionsOff:moduleOptionsOff+moduleOptionsSize-1], rw.optionString())
	le.PutUint64(m[moduleGateOff:], gateAt)
	le.PutUint64(m[moduleTraceEndOff:], rVaddr+traceEndsOff)
	le.PutUint32(m[moduleTraceEndOff+8:], uint32(len(traceEnds)))
	if len(pairs) > 0 {
		le.PutUint64(m[moduleReadsOff:], rVaddr+readsOff)
		le.PutUint32(m[moduleReadsOff+8:], uint32(len(pairs)))
	}
	copy(m[probesAt-rwVaddr:], probes)
	for k, i := range patchOrder {
		pr := modified[i]
		b := m[patchesAt-rwVaddr+uint64(k)*patchSize:]
		le.PutUint64(b[0:], pr.lo)
		b[8] = byte(pr.hi - pr.lo)
		if pr.restorable {
			b[9] = patchRestorable
		}
		if pr.lo == c.insts[i].Addr {
			b[9] |= patchAtStart
		}
		if pr.switchable {
			b[9] |= patchSwitch
		}
		if pr.sync {
			b[9] |= patchSync
		}
		if pr.readee {
			b[9] |= patchRead
		}
		if pr.reader {
			b[9] |= patchReader
		}
		if n := seenOf[uint32(k)]; pr.switchable && !pr.sync && !pr.readee && n[0] > 0 && n[1] == n[0] {
			b[9] |= patchCold
			rw.st.Cold++
		}
		le.PutUint16(b[10:], uint16(pr.nprobes))
		le.PutUint32(b[12:], uint32(pr.nprobes))
		in := &c.insts[i]
		copy(b[16:32], in.Bytes[pr.lo-in.Addr:pr.hi-in.Addr])
	}
	if rw.st.Cold > 0 {
		le.PutUint32(m[12:], le.Uint32(m[12:])|mfCold)
	}

	dk = 0
	for k, co := range chunks {
		b := m[chunksAt-rwVaddr+uint64(k)*chunkSize:]
		le.PutUint64(b[0:], co.r.Lo)
		le.PutUint64(b[8:], co.r.Hi-co.r.Lo)
		le.PutUint64(b[16:], co.src)
		le.PutUint32(b[24:], co.flags)
		le.PutUint32(b[28:], uint32(len(co.deps)))
		le.PutUint32(b[32:], uint32(dk))
		dk += uint64(len(co.deps))
	}

	// Entry points.
	var origEntry, origFini uint64
	entryInit := rw.rxVaddr + uint64(rw.blob.entryInit)
	if rw.exec && !dp.preinit {
		origEntry = f.hdr.Entry
		le.PutUint64(out[24:], rw.rxVaddr+uint64(rw.blob.entryExec))
	}
	var newDyn *prog64
	if dp.entries != nil {
		d := dp.entries
		set := func(tag elf.DynTag, val uint64) (old uint64) {
			for k := range d {
				if d[k].Tag == tag {
					old = d[k].Val
					d[k].Val = val
					return old
				}
			}
			d = append(d, dynEntry{Tag: tag, Val: val})
			return 0
		}
		if rw.shared {
			origEntry = set(elf.DT_INIT, entryInit)
		}
		origFini = set(elf.DT_FINI, rw.rxVaddr+uint64(rw.blob.entryFini))
		if dp.preinit {
			set(elf.DT_PREINIT_ARRAY, preinitAt)
			set(elf.DT_PREINIT_ARRAYSZ, 8)
			le.PutUint64(m[preinitAt-rwVaddr:], entryInit)
			if dp.rela != nil {
				relaVaddr := rVaddr + relaOff
				copy(rbuf[relaOff:], dp.rela)
				r := rbuf[relaOff+uint64(len(dp.rela)):]
				le.PutUint64(r[0:], preinitAt)
				le.PutUint64(r[8:], uint64(elf.R_X86_64_RELATIVE))
				le.PutUint64(r[16:], entryInit)
				set(elf.DT_RELA, relaVaddr)
				set(elf.DT_RELASZ, relaLen)
			}
		}
		if uint64(len(d)+1)*16 > dynSize {
			return nil, errors.New("internal error: dynamic section overflow")
		}
		for k, e := range d {
			le.PutUint64(m[dynAt-rwVaddr+uint64(k)*16:], uint64(e.Tag))
			le.PutUint64(m[dynAt-rwVaddr+uint64(k)*16+8:], e.Val)
		}
		newDyn = &prog64{Type: elf.PT_DYNAMIC, Flags: elf.PF_R | elf.PF_W, Off: rwOff + (dynAt - rwVaddr), Vaddr: dynAt, Paddr: dynAt,
			Filesz: dynSize, Memsz: dynSize, Align: 8}
	} else if rw.fini != nil && rw.fini.patch(f, out, rw.rxOff, rw.rxVaddr, rw.rxVaddr+uint64(rw.blob.entryFini)) {
		origFini = rw.fini.tramp
	} else {
		st.Notes = append(st.Notes, "static executable without a usable .fini: no exit hook (the trace has no end marker; the log is saved every second only)")
	}
	st.Notes = append(st.Notes, dp.notes...)
	le.PutUint64(m[104:], origEntry)
	le.PutUint64(m[112:], origFini)

	// Program headers.
	newPh := rw.programHeaders(rVaddr, rOff, rSize, noteOff, uint64(len(noteBytes)), nph,
		rw.rxVaddr, rw.rxOff, rxSize, rwVaddr, rwOff, rwSize, newDyn)
	for k, ph := range newPh {
		putProg(rbuf[phOff+uint64(k)*phdrSize:], ph)
	}
	le.PutUint64(out[32:], rOff+phOff)
	le.PutUint16(out[56:], uint16(nph))

	// Section headers.
	out = rw.sections(out, rVaddr+noteOff, rOff+noteOff, uint64(len(noteBytes)),
		rw.rxVaddr, rw.rxOff, rxSize, rwVaddr, rwOff, rwSize, newDyn)
	return appendStubFile(out, rwOff, layout.SrcSize, stubs), nil
}

// appendStubFile appends the stub area, as the runtime would build it
// from the stub list, behind a header page (struct stint_stub_file) at a
// page-aligned offset past everything else, and points the module struct
// (at file offset modOff) at it. The runtime then maps the chunks from the
// file: no stub area to write at every start, and its pages are shared
// through the page cache by every run. Pages without stubs stay zero
// (holes on disk, see writeSparse). A file whose stub file is gone
// (stripped) or does not match the module's tag still runs: the runtime
// builds the area from the stub list as before.
func appendStubFile(out []byte, modOff, area uint64, stubs []stubOut) []byte {
	if len(stubs) == 0 || area == 0 {
		return out
	}
	h := fnv.New64a()
	var w [16]byte
	le.PutUint64(w[:], area)
	h.Write(w[:8])
	for _, so := range stubs {
		le.PutUint64(w[:], so.off)
		copy(w[8:], so.code)
		h.Write(w[:8+len(so.code)])
	}
	tag := h.Sum64() | 1 // never 0
	at := alignUp(uint64(len(out)), pageSize)
	out = append(out, make([]byte, at+pageSize+area-uint64(len(out)))...)
	hdr := out[at:]
	le.PutUint64(hdr[0:], stubFileMagic)
	le.PutUint64(hdr[8:], tag)
	le.PutUint64(hdr[16:], area)
	le.PutUint64(hdr[24:], uint64(len(stubs)))
	a := out[at+pageSize:]
	filled := map[uint64]bool{}
	for _, so := range stubs {
		for pg := so.off / pageSize; pg <= (so.off+uint64(len(so.code))-1)/pageSize; pg++ {
			if !filled[pg] {
				filled[pg] = true
				fillInt3(a[pg*pageSize : (pg+1)*pageSize])
			}
		}
		copy(a[so.off:], so.code)
	}
	le.PutUint64(out[modOff+moduleStubFile:], at)
	le.PutUint64(out[modOff+moduleStubFile+8:], tag)
	return out
}

// fillInt3 fills b with int3 (0xcc).
func fillInt3(b []byte) {
	if len(b) == 0 {
		return
	}
	b[0] = 0xcc
	for n := 1; n < len(b); n *= 2 {
		copy(b[n:], b[:n])
	}
}

func putProg(b []byte, p prog64) {
	le.PutUint32(b[0:], uint32(p.Type))
	le.PutUint32(b[4:], uint32(p.Flags))
	le.PutUint64(b[8:], p.Off)
	le.PutUint64(b[16:], p.Vaddr)
	le.PutUint64(b[24:], p.Paddr)
	le.PutUint64(b[32:], p.Filesz)
	le.PutUint64(b[40:], p.Memsz)
	le.PutUint64(b[48:], p.Align)
}

func (rw *rewriter) programHeaders(rVaddr, rOff, rSize, noteOff, noteLen uint64, nph int,
	rxVaddr, rxOff, rxSize, rwVaddr, rwOff, rwSize uint64, newDyn *prog64) []prog64 {
	var out []prog64
	var loads []prog64
	for _, p := range rw.f.progs {
		switch p.Type {
		case elf.PT_PHDR:
			p.Off, p.Vaddr, p.Paddr = rOff, rVaddr, rVaddr
			p.Filesz, p.Memsz = uint64(nph)*phdrSize, uint64(nph)*phdrSize
			out = append([]prog64{p}, out...)
		case elf.PT_LOAD:
			loads = append(loads, p)
		case elf.PT_DYNAMIC:
			if newDyn != nil {
				p = *newDyn
			}
			out = append(out, p)
		default:
			out = append(out, p)
		}
	}
	load := func(fl elf.ProgFlag, off, vaddr, size uint64) prog64 {
		return prog64{Type: elf.PT_LOAD, Flags: fl, Off: off, Vaddr: vaddr, Paddr: vaddr, Filesz: size, Memsz: size, Align: pageSize}
	}
	loads = append(loads,
		load(elf.PF_R|elf.PF_X, rxOff, rxVaddr, rxSize),
		load(elf.PF_R, rOff, rVaddr, rSize),
		load(elf.PF_R|elf.PF_W, rwOff, rwVaddr, rwSize))
	if rw.hasReserve {
		// The reserve maps a page of the RX segment's file bytes: not
		// the program headers' page, or the kernel (which takes the last
		// PT_LOAD holding e_phoff) would report AT_PHDR there.
		loads = append(loads, load(elf.PF_R, rxOff, rw.reserveVaddr, pageSize))
	}
	sort.SliceStable(loads, func(i, j int) bool { return loads[i].Vaddr < loads[j].Vaddr })
	// Insert the loads where the first original PT_LOAD was, keeping
	// PT_PHDR and PT_INTERP before them.
	pos := 0
	for pos < len(out) && (out[pos].Type == elf.PT_PHDR || out[pos].Type == elf.PT_INTERP) {
		pos++
	}
	// Preserve the original relative order of the other headers.
	rest := append([]prog64{}, out[pos:]...)
	out = append(append(out[:pos], loads...), rest...)
	out = append(out, prog64{Type: elf.PT_NOTE, Flags: elf.PF_R, Off: rOff + noteOff, Vaddr: rVaddr + noteOff,
		Paddr: rVaddr + noteOff, Filesz: noteLen, Memsz: noteLen, Align: 4})
	return out
}

// sections appends a new section name table and section header table
// with .stint (the marker note), .stint.text and .stint.data.
func (rw *rewriter) sections(out []byte, noteVaddr, noteOff, noteLen, rxVaddr, rxOff, rxSize, rwVaddr, rwOff, rwSize uint64, newDyn *prog64) []byte {
	f := rw.f
	if len(f.sects) == 0 || f.extendedShnum || int(f.hdr.Shstrndx) >= len(f.sects) || f.hdr.Shstrndx == 0 ||
		len(f.sects)+3 >= int(elf.SHN_LORESERVE) {
		rw.st.Notes = append(rw.st.Notes, "section headers left unchanged (marker note in PT_NOTE only)")
		return out
	}
	str := f.sects[f.hdr.Shstrndx]
	names := append([]byte{}, f.sectData(&str)...)
	if len(names) == 0 || names[len(names)-1] != 0 {
		names = append(names, 0)
	}
	add := func(s string) uint32 {
		off := uint32(len(names))
		names = append(append(names, s...), 0)
		return off
	}
	sects := append([]sect64{}, f.sects...)
	sects = append(sects,
		sect64{Name: add(".stint"), Type: elf.SHT_NOTE, Flags: elf.SHF_ALLOC, Addr: noteVaddr, Off: noteOff, Size: noteLen, Addralign: 4},
		sect64{Name: add(".stint.text"), Type: elf.SHT_PROGBITS, Flags: elf.SHF_ALLOC | elf.SHF_EXECINSTR, Addr: rxVaddr, Off: rxOff, Size: rxSize, Addralign: 16},
		sect64{Name: add(".stint.data"), Type: elf.SHT_PROGBITS, Flags: elf.SHF_ALLOC | elf.SHF_WRITE, Addr: rwVaddr, Off: rwOff, Size: rwSize, Addralign: 64},
	)
	if newDyn != nil {
		for k := range sects {
			if sects[k].Type == elf.SHT_DYNAMIC {
				sects[k].Addr, sects[k].Off, sects[k].Size = newDyn.Vaddr, newDyn.Off, newDyn.Filesz
			}
		}
	}
	strOff := uint64(len(out))
	out = append(out, names...)
	sects[f.hdr.Shstrndx].Off = strOff
	sects[f.hdr.Shstrndx].Size = uint64(len(names))
	for uint64(len(out))%8 != 0 {
		out = append(out, 0)
	}
	shOff := uint64(len(out))
	for _, s := range sects {
		var b [shdrSize]byte
		le.PutUint32(b[0:], s.Name)
		le.PutUint32(b[4:], uint32(s.Type))
		le.PutUint64(b[8:], uint64(s.Flags))
		le.PutUint64(b[16:], s.Addr)
		le.PutUint64(b[24:], s.Off)
		le.PutUint64(b[32:], s.Size)
		le.PutUint32(b[40:], s.Link)
		le.PutUint32(b[44:], s.Info)
		le.PutUint64(b[48:], s.Addralign)
		le.PutUint64(b[56:], s.Entsize)
		out = append(out, b[:]...)
	}
	le.PutUint64(out[40:], shOff)
	le.PutUint16(out[60:], uint16(len(sects)))
	return out
}

// dynPlan is what happens to the dynamic section.
type dynPlan struct {
	entries []dynEntry // the original entries up to DT_NULL (nil: no PT_DYNAMIC)
	preinit bool       // initialise the runtime from DT_PREINIT_ARRAY
	rela    []byte     // PIE with preinit: the DT_RELA table, copied and extended
	notes   []string
}

func (rw *rewriter) planDynamic() (*dynPlan, error) {
	f := rw.f
	dp := &dynPlan{}
	if f.prog(elf.PT_DYNAMIC) == nil {
		return dp, nil
	}
	for _, e := range f.dynamic() {
		if e.Tag == elf.DT_NULL {
			break
		}
		dp.entries = append(dp.entries, e)
	}
	if dp.entries == nil {
		dp.entries = []dynEntry{}
	}
	if !rw.exec || rw.static {
		return dp, nil
	}
	if _, ok := dynVal(dp.entries, elf.DT_PREINIT_ARRAY); ok {
		dp.notes = append(dp.notes, "executable has DT_PREINIT_ARRAY: runtime starts at e_entry, after library constructors")
		return dp, nil
	}
	if rw.pic {
		// The array entry must be relocated: copy DT_RELA and append an
		// R_X86_64_RELATIVE for it.
		rela, ok1 := dynVal(dp.entries, elf.DT_RELA)
		relasz, ok2 := dynVal(dp.entries, elf.DT_RELASZ)
		if !ok1 || !ok2 || relasz%24 != 0 {
			dp.notes = append(dp.notes, "PIE without DT_RELA: runtime starts at e_entry, after library constructors")
			return dp, nil
		}
		// Some linkers count .rela.plt in DT_RELASZ; ld.so then skips
		// it in the DT_RELA range, which it could not once we move it.
		if jmp, ok := dynVal(dp.entries, elf.DT_JMPREL); ok {
			if psz, ok := dynVal(dp.entries, elf.DT_PLTRELSZ); ok && jmp+psz == rela+relasz && psz <= relasz {
				relasz -= psz
			}
		}
		off, ok := f.offsetOf(rela, relasz)
		if !ok {
			return nil, formatErr(0, ErrTruncated, "DT_RELA %#x+%#x is not in the file", rela, relasz)
		}
		dp.rela = f.data[off : off+relasz]
	}
	dp.preinit = true
	return dp, nil
}

// chunkTables builds the chunk table (with each chunk's dependent
// patches), the stub list sorted by offset in the stub area, and the
// total number of dependency entries.
//
// A chunk's dependencies are the patches whose stubs it holds and,
// transitively, every patch whose pun reads bytes that a dependency
// modified (Planner.Reads): once those bytes are restored the reader's
// jump would land elsewhere, so it must be restored too.
func (rw *rewriter) chunkTables(p *place.Planner, layout *place.Layout, patchIdx map[int]int) ([]chunkOut, []stubOut, int, error) {
	chunks := make([]chunkOut, len(layout.Chunks))
	for k, c := range layout.Chunks {
		chunks[k] = chunkOut{r: c.Range, src: c.Src}
		if rw.shared && rw.hasReserve && int64(c.Lo) >= int64(rw.stubLo) && c.Hi <= rw.reserveVaddr {
			chunks[k].flags |= chunkReserved
		}
		if c.Src%pageSize != 0 || c.Src+(c.Hi-c.Lo) > layout.SrcSize {
			return nil, nil, 0, fmt.Errorf("chunk %#x-%#x: source %#x outside the stub area (%#x bytes)", c.Lo, c.Hi, c.Src, layout.SrcSize)
		}
	}
	chunkOf := func(a uint64) int {
		k := sort.Search(len(chunks), func(k int) bool { return int64(chunks[k].r.Hi) > int64(a) })
		if k < len(chunks) && int64(chunks[k].r.Lo) <= int64(a) {
			return k
		}
		return -1
	}
	readers := readersOf(p.Reads, patchIdx)
	direct := make([][]int, len(chunks))
	stubs := make([]stubOut, 0, len(p.Stubs))
	for _, s := range p.Stubs {
		k := chunkOf(s.Addr)
		if k < 0 || chunkOf(s.Addr+place.StubLen-1) != k {
			return nil, nil, 0, fmt.Errorf("stub at %#x lies in no chunk", s.Addr)
		}
		a := &asm{base: s.Addr}
		a.jmp(rw.near(s.Inst))
		if a.err != nil {
			return nil, nil, 0, fmt.Errorf("stub at %#x: %w", s.Addr, a.err)
		}
		if len(a.b) != place.StubLen {
			return nil, nil, 0, fmt.Errorf("stub at %#x: %d bytes of code", s.Addr, len(a.b))
		}
		stubs = append(stubs, stubOut{off: chunks[k].src + (s.Addr - chunks[k].r.Lo), code: a.b})
		if pi, ok := patchIdx[s.Inst]; ok {
			direct[k] = append(direct[k], pi)
		}
	}
	sort.Slice(stubs, func(i, j int) bool { return stubs[i].off < stubs[j].off })
	for k := 1; k < len(stubs); k++ {
		if stubs[k].off < stubs[k-1].off+place.StubLen {
			return nil, nil, 0, fmt.Errorf("stubs collide in the stub area at offset %#x", stubs[k].off)
		}
	}
	ndeps := 0
	for k, d := range closure(direct, readers) {
		chunks[k].deps = d
		ndeps += len(d)
	}
	return chunks, stubs, ndeps, nil
}

// readersOf maps each patch index to the patches whose puns read bytes it
// modified (Planner.Reads, translated from instructions to patches).
func readersOf(reads [][2]int, patchIdx map[int]int) map[int][]int {
	readers := map[int][]int{}
	for _, r := range reads {
		rd, ok1 := patchIdx[r[0]]
		wr, ok2 := patchIdx[r[1]]
		if ok1 && ok2 && rd != wr {
			readers[wr] = append(readers[wr], rd)
		}
	}
	return readers
}

// closure returns, for each chunk's direct patches, the sorted set of
// patches to restore: the direct ones and, transitively, their readers.
func closure(direct [][]int, readers map[int][]int) [][]uint32 {
	out := make([][]uint32, len(direct))
	for k, d := range direct {
		seen := map[int]bool{}
		work := append([]int(nil), d...)
		for len(work) > 0 {
			x := work[len(work)-1]
			work = work[:len(work)-1]
			if seen[x] {
				continue
			}
			seen[x] = true
			work = append(work, readers[x]...)
		}
		for x := range seen {
			out[k] = append(out[k], uint32(x))
		}
		slices.Sort(out[k])
	}
	return out
}

// oneWord reports whether n bytes at addr lie in one aligned 8- or 16-byte
// word, so that one atomic store (the runtime's stint_restore_atomic) can
// write them all.
func oneWord(addr, n uint64) bool {
	return n > 0 && (addr+n <= addr&^7+8 || addr+n <= addr&^15+16)
}
