package cct

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/stint-project/stint/analysis/merge"
	"github.com/stint-project/stint/analysis/symbols"
	"github.com/stint-project/stint/formats"
)

// Options configure [Build] and [Builder].
type Options struct {
	// Resolver names functions and lets the builder repair the shadow
	// stack from the function that contains each call site (see the
	// package documentation); nil: addresses only, no repair. A
	// *symbols.Resolver is one.
	Resolver SymbolSource
	// NoRepair keeps the names but turns the repair off: the tree is
	// then built from call and return matching alone.
	NoRepair bool
	// PerThread keeps each thread's tree besides the merged one.
	PerThread bool
	// MaxDepth bounds each thread's shadow stack (0: DefaultMaxDepth).
	MaxDepth int
}

// SymbolSource gives a module's functions; *symbols.Resolver is the one
// that reads module files.
type SymbolSource interface {
	Table(buildID, path string) (*symbols.Table, error)
}

// DefaultMaxDepth is the shadow stack depth beyond which calls are
// counted (Stats.TooDeep) but not pushed.
const DefaultMaxDepth = 1 << 14

// repairScan bounds how far down the stack a repair looks for the
// function of a call site.
const repairScan = 1024

// maxRetLen bounds the length of a call instruction: a return to D
// matches a frame whose call site S has S < D <= S+maxRetLen (the trace
// holds call sites, not return addresses).
const maxRetLen = 15

// Forest is the result of a build: the merged tree of every thread of
// every run, and, with Options.PerThread, each thread's tree.
type Forest struct {
	Modules  []Module
	Runs     []RunInfo
	Merged   *Tree
	Threads  []*Tree // with Options.PerThread, by run then first appearance
	Warnings []string
}

// Every reports whether every run recorded every occurrence (--every):
// only then are counts numbers of calls; otherwise each distinct (call
// site, destination) was recorded once per run and the trees say which
// contexts were seen.
func (f *Forest) Every() bool {
	for _, r := range f.Runs {
		if !r.Every {
			return false
		}
	}
	return len(f.Runs) > 0
}

// Timed reports whether the contexts' times (Node.NS) measure time:
// every run recorded every call and return with its own time (--every
// rows). A compact trace's events are timed by their place in their
// chunk, which follows the branches recorded, not the clock.
func (f *Forest) Timed() bool {
	for _, r := range f.Runs {
		if r.Compact {
			return false
		}
	}
	return f.Every()
}

// ContextMode reports whether every run was traced in the
// context-preserving mode (rewrite --context), whose KindContext rows
// the runtime wrote from its own exact shadow stacks: each context once,
// so counts are 1 per (context, call site).
func (f *Forest) ContextMode() bool {
	for _, r := range f.Runs {
		if !r.Context {
			return false
		}
	}
	return len(f.Runs) > 0
}

// Build builds the call-context trees of the named trace files and
// merged traces. Files are streamed: memory grows with the number of
// distinct contexts and call sites (and the depth of the stacks), not
// with the number of events.
func Build(ctx context.Context, files []string, opts Options) (*Forest, error) {
	if len(files) == 0 {
		return nil, errors.New("no traces")
	}
	b := NewBuilder(opts)
	for _, f := range files {
		if err := b.AddFile(ctx, f); err != nil {
			return nil, err
		}
	}
	return b.Forest(), nil
}

// inode, iedge, isite: the builder's arena, indexed by int32.
type inode struct {
	parent   int32
	fid      uint32
	calls    uint64
	inferred uint64
	ns       uint64 // time in the context: the frames' lives summed
}

type iedge struct {
	caller, callee int32
	site           uint32
	kind           formats.Kind
	calls          uint64
}

type isite struct {
	mod  uint32
	addr uint64
	fn   uint32 // fid+1 of the function containing it (symbols), 0: unknown
}

type ifunc struct {
	mod   uint32
	entry uint64
}

type frame struct {
	node    int32
	fid     uint32
	retMod  uint32
	retSite uint64 // the call site; 0 with synthetic
	synth   bool
	t0      uint64 // the time of the event that pushed it
}

type thread struct {
	run   int
	tid   uint32
	root  int32
	stack []frame
	st    Stats
	now   uint64 // the time of its latest event
}

// life is how long frame f has lived: from its push to the thread's
// latest event.
func (th *thread) life(f frame) uint64 {
	if th.now > f.t0 {
		return th.now - f.t0
	}
	return 0
}

// popTo pops the frames above the first n, each adding its life to its
// context's time.
func (b *Builder) popTo(th *thread, n int) {
	for _, f := range th.stack[n:] {
		b.nodes[f.node].ns += th.life(f)
	}
	th.stack = th.stack[:n]
}

const noMod = 1<<32 - 1

// Builder builds call-context trees from events, file by file or batch
// by batch.
type Builder struct {
	opts     Options
	maxDepth int

	modules []Module
	modKey  map[string]uint32
	tables  []*symbols.Table
	tried   []bool

	runs []RunInfo

	nodes  []inode
	edges  []iedge
	sites  []isite
	funcs  []ifunc
	kids   *table // (parent, fid) -> node+1
	edgeT  *table // (caller<<32|site, callee) -> edge+1
	siteT  *table // (mod, addr) -> site+1
	funcT  *table // (mod, entry) -> fid+1
	ctxT   *table // (run, context id) -> node+1 (KindContext rows)
	thr    map[uint64]*thread
	thrs   []*thread
	last   *thread
	lastK  uint64
	warns  []string
	gm     []uint32 // current file: local module id -> global
	runOff int      // current file: index of its first run
}

// NewBuilder returns an empty builder.
func NewBuilder(opts Options) *Builder {
	b := &Builder{
		opts: opts, maxDepth: opts.MaxDepth, modKey: map[string]uint32{},
		kids: newTable(1024), edgeT: newTable(1024), siteT: newTable(1024), funcT: newTable(1024), ctxT: newTable(16),
		thr: map[uint64]*thread{},
	}
	if r, ok := opts.Resolver.(*symbols.Resolver); ok && r == nil {
		b.opts.Resolver = nil
	}
	if b.maxDepth <= 0 {
		b.maxDepth = DefaultMaxDepth
	}
	b.funcs = append(b.funcs, ifunc{mod: noMod}) // fid 0: the root's
	if !opts.PerThread {
		b.nodes = append(b.nodes, inode{parent: -1})
	}
	return b
}

func (b *Builder) module(m formats.Module) uint32 {
	mm := Module{Path: m.Path, BuildID: m.BuildID}
	k := mm.Key()
	if g, ok := b.modKey[k]; ok {
		return g
	}
	g := uint32(len(b.modules))
	b.modules = append(b.modules, mm)
	b.tables = append(b.tables, nil)
	b.tried = append(b.tried, false)
	b.modKey[k] = g
	return g
}

// AddFile adds the events of a trace file or merged trace. A file cut
// inside a batch (a crash) adds its complete batches and a warning; any
// other damage is an error that names the file.
func (b *Builder) AddFile(ctx context.Context, name string) error {
	r, err := merge.Open(name)
	if err != nil {
		return err
	}
	defer r.Close()
	b.BeginFile(name, r)
	for r.Next() {
		if err := ctx.Err(); err != nil {
			return err
		}
		b.AddBatch(r.Batch())
	}
	return b.EndFile(name, r.Err())
}

// BeginFile starts a file that a reader of the caller's own reads: its
// modules and runs. [Builder.AddBatch] then takes each of its batches
// and [Builder.EndFile] ends it, so that a tool that reads a trace for
// other reasons builds the tree in the same pass (report auto).
func (b *Builder) BeginFile(name string, r *merge.Reader) {
	b.gm = make([]uint32, 1<<16)
	for i := range b.gm {
		b.gm[i] = noMod
	}
	for _, m := range r.Modules() {
		b.gm[m.ID] = b.module(m)
	}
	b.runOff = len(b.runs)
	for _, ri := range r.Runs() {
		b.runs = append(b.runs, RunInfo{File: name, Run: ri.Run, PID: ri.Info.PID, Tool: ri.Info.Tool,
			Every: ri.Info.Flag("every"), Context: ri.Info.Flag("context"), Compact: ri.Info.Flag("paths")})
	}
}

// EndFile ends the file BeginFile started, with the error its reader
// ended with: a truncated file becomes a warning, other damage an error
// that names it.
func (b *Builder) EndFile(name string, err error) error {
	if err != nil {
		if !errors.Is(err, formats.ErrTruncated) {
			return fmt.Errorf("%s: %w", name, err)
		}
		b.warns = append(b.warns, fmt.Sprintf("%s: cut short (%v): built up to its last complete batch", name, err))
	}
	return nil
}

// AddBatch adds a batch of the file BeginFile started.
func (b *Builder) AddBatch(bt *merge.Batch) {
	gm := b.gm
	for i, k := range bt.Kind {
		kind := formats.Kind(k)
		if e, ok := kind.Refused(); ok {
			kind = e
		}
		switch kind {
		case formats.KindCall, formats.KindIndCall:
			th := b.thread(bt.RunOf(i), bt.TID[i])
			th.now = max(th.now, bt.Time[i])
			b.call(th, kind, gm[bt.SrcModule[i]], bt.Src[i], gm[bt.DstModule[i]], bt.Dst[i])
		case formats.KindRet:
			th := b.thread(bt.RunOf(i), bt.TID[i])
			th.now = max(th.now, bt.Time[i])
			b.ret(th, gm[bt.SrcModule[i]], bt.Src[i], gm[bt.DstModule[i]], bt.Dst[i])
		case formats.KindContext:
			th := b.thread(bt.RunOf(i), bt.TID[i])
			b.context(th, gm[bt.SrcModule[i]], bt.Src[i], gm[bt.DstModule[i]], bt.Dst[i], bt.Value[i])
		}
	}
}

func (b *Builder) thread(run int, tid uint32) *thread {
	run += b.runOff
	k := uint64(run)<<32 | uint64(tid)
	if b.last != nil && b.lastK == k {
		return b.last
	}
	th := b.thr[k]
	if th == nil {
		th = &thread{run: run, tid: tid}
		if b.opts.PerThread {
			th.root = int32(len(b.nodes))
			b.nodes = append(b.nodes, inode{parent: -1})
		}
		th.st.Threads = 1
		b.thr[k] = th
		b.thrs = append(b.thrs, th)
	}
	b.last, b.lastK = th, k
	return th
}

func (b *Builder) site(mod uint32, addr uint64) uint32 {
	if v := b.siteT.get(uint64(mod), addr); v != 0 {
		return v - 1
	}
	s := isite{mod: mod, addr: addr}
	if b.opts.Resolver != nil && !b.opts.NoRepair && mod != noMod {
		if t := b.table(mod); t != nil {
			if f := t.Lookup(addr); f != nil {
				s.fn = b.fid(mod, f.Start) + 1
			}
		}
	}
	id := uint32(len(b.sites))
	b.sites = append(b.sites, s)
	b.siteT.put(uint64(mod), addr, id+1)
	return id
}

func (b *Builder) table(mod uint32) *symbols.Table {
	if !b.tried[mod] {
		b.tried[mod] = true
		m := &b.modules[mod]
		t, err := b.opts.Resolver.Table(m.BuildID, m.Path)
		if err != nil {
			m.Symbols = "none (" + err.Error() + ")"
		} else {
			m.Symbols = t.Source
			b.tables[mod] = t
		}
	}
	return b.tables[mod]
}

func (b *Builder) fid(mod uint32, entry uint64) uint32 {
	if v := b.funcT.get(uint64(mod), entry); v != 0 {
		return v - 1
	}
	id := uint32(len(b.funcs))
	b.funcs = append(b.funcs, ifunc{mod: mod, entry: entry})
	b.funcT.put(uint64(mod), entry, id+1)
	return id
}

func (b *Builder) child(parent int32, fid uint32) int32 {
	if v := b.kids.get(uint64(parent), uint64(fid)); v != 0 {
		return int32(v - 1)
	}
	id := int32(len(b.nodes))
	b.nodes = append(b.nodes, inode{parent: parent, fid: fid})
	b.kids.put(uint64(parent), uint64(fid), uint32(id)+1)
	return id
}

func (th *thread) top() int32 {
	if n := len(th.stack); n > 0 {
		return th.stack[n-1].node
	}
	return th.root
}

func (b *Builder) push(th *thread, f frame) bool {
	if len(th.stack) >= b.maxDepth {
		th.st.TooDeep++
		return false
	}
	th.stack = append(th.stack, f)
	th.st.MaxDepth = max(th.st.MaxDepth, len(th.stack))
	return true
}

func (b *Builder) call(th *thread, kind formats.Kind, sm uint32, src uint64, dm uint32, dst uint64) {
	th.st.Calls++
	sid := b.site(sm, src)
	if x := b.sites[sid].fn; x != 0 {
		b.repair(th, x-1)
	}
	if len(th.stack) >= b.maxDepth {
		th.st.TooDeep++
		return
	}
	parent := th.top()
	fid := b.fid(dm, dst)
	n := b.child(parent, fid)
	b.nodes[n].calls++
	b.edge(parent, sid, n, kind)
	b.push(th, frame{node: n, fid: fid, retMod: sm, retSite: src, t0: th.now})
}

func (b *Builder) edge(parent int32, sid uint32, n int32, kind formats.Kind) {
	ek := uint64(uint32(parent))<<32 | uint64(sid)
	if v := b.edgeT.get(ek, uint64(n)); v != 0 {
		b.edges[v-1].calls++
		return
	}
	b.edges = append(b.edges, iedge{caller: parent, callee: n, site: sid, kind: kind, calls: 1})
	b.edgeT.put(ek, uint64(n), uint32(len(b.edges)))
}

// repair makes the function x, which holds the call site being
// executed, the top of the stack: by popping the frames above its
// nearest frame (returns or unwinds the trace missed), or by pushing a
// frame for it (it was entered without a call event: from untraced code,
// by a tail call, as a signal handler, or during a gap).
func (b *Builder) repair(th *thread, x uint32) {
	n := len(th.stack)
	if n > 0 && th.stack[n-1].fid == x {
		return
	}
	for i := n - 2; i >= 0 && i >= n-repairScan; i-- {
		if th.stack[i].fid == x {
			th.st.Repaired += uint64(n - 1 - i)
			b.popTo(th, i+1)
			return
		}
	}
	if n >= b.maxDepth {
		return
	}
	c := b.child(th.top(), x)
	b.nodes[c].inferred++
	th.st.Inferred++
	b.push(th, frame{node: c, fid: x, synth: true, t0: th.now})
}

func (b *Builder) ret(th *thread, sm uint32, src uint64, dm uint32, dst uint64) {
	th.st.Rets++
	s := th.stack
	for i := len(s) - 1; i >= 0; i-- {
		f := &s[i]
		if !f.synth && f.retMod == dm && dst > f.retSite && dst-f.retSite <= maxRetLen {
			th.st.Matched++
			th.st.Unwound += uint64(len(s) - 1 - i)
			b.popTo(th, i)
			return
		}
	}
	th.st.Unmatched++
	if len(s) == 0 || b.opts.Resolver == nil || b.opts.NoRepair {
		return
	}
	if x := b.sites[b.site(sm, src)].fn; x != 0 && s[len(s)-1].fid == x-1 {
		th.st.PoppedByFunc++
		b.popTo(th, len(s)-1)
	}
}

// context adds a KindContext row (rewrite --context): the runtime's own
// shadow stack found a new context (parent context, call site, callee),
// numbered per process; 0 is a thread's root. It is one call into
// (parent's node, callee) through the site.
func (b *Builder) context(th *thread, sm uint32, src uint64, dm uint32, dst uint64, value uint64) {
	th.st.Contexts++
	id, pid := uint32(value), uint32(value>>32)
	parent := th.root
	if pid != 0 {
		if v := b.ctxT.get(uint64(th.run), uint64(pid)); v != 0 {
			parent = int32(v - 1)
		} else {
			th.st.Orphans++
		}
	}
	sid := b.site(sm, src)
	// A call made by a function that was entered from untraced code
	// (main called by libc, a thread's start routine, a callback): the
	// parent context's callee is not the function holding the call
	// site. As in the call/ret builder, symbols give that function an
	// inferred node, so that trees of both kinds of trace compare.
	if x := b.sites[sid].fn; x != 0 && (parent == th.root || b.nodes[parent].fid != x-1) {
		parent = b.child(parent, x-1)
		b.nodes[parent].inferred++
		th.st.Inferred++
	}
	n := b.child(parent, b.fid(dm, dst))
	b.nodes[n].calls++
	b.edge(parent, sid, n, formats.KindCall)
	if id != 0 && b.ctxT.get(uint64(th.run), uint64(id)) == 0 {
		b.ctxT.put(uint64(th.run), uint64(id), uint32(n)+1)
	}
}

// Forest returns the trees built so far. The frames still open count
// their time to their thread's latest event.
func (b *Builder) Forest() *Forest {
	f := &Forest{Modules: slices.Clone(b.modules), Runs: slices.Clone(b.runs), Warnings: slices.Clone(b.warns)}
	ptrs := make([]*Node, len(b.nodes))
	open := make([]uint64, len(b.nodes))
	for _, th := range b.thrs {
		for _, fr := range th.stack {
			open[fr.node] += th.life(fr)
		}
	}
	for i, n := range b.nodes {
		p := &Node{Module: NoModule, Calls: n.calls, Inferred: n.inferred, NS: n.ns + open[i]}
		if n.parent >= 0 {
			fn := b.funcs[n.fid]
			p.Module, p.Entry = modIndex(fn.mod), fn.entry
			if b.opts.Resolver != nil && fn.mod != noMod {
				if t := b.table(fn.mod); t != nil {
					if fc := t.Lookup(fn.entry); fc != nil && fc.Name != "" {
						p.Name = fc.Name
						if fc.Start != fn.entry {
							p.Name = fmt.Sprintf("%s+%#x", fc.Name, fn.entry-fc.Start)
						}
					}
				}
			}
		}
		ptrs[i] = p
	}
	// Nodes are created after their parents, so parents come first.
	for i, n := range b.nodes {
		if n.parent >= 0 {
			p := ptrs[n.parent]
			ptrs[i].Parent = p
			p.Children = append(p.Children, ptrs[i])
		}
	}
	for _, e := range b.edges {
		s := b.sites[e.site]
		ptrs[e.caller].Edges = append(ptrs[e.caller].Edges, &Edge{Module: modIndex(s.mod), Site: s.addr, Kind: e.kind.String(), Calls: e.calls, Callee: ptrs[e.callee]})
	}
	for _, p := range ptrs {
		sortNode(p)
	}
	f.Modules = slices.Clone(b.modules)
	finish := func(t *Tree) {
		t.Modules = f.Modules
		t.Stats.Nodes, t.Stats.Edges = t.Count()
		t.Stats.Unnamed = t.unnamed()
	}
	if !b.opts.PerThread {
		f.Merged = &Tree{Name: "merged", Run: -1, Root: ptrs[0]}
		for _, th := range b.thrs {
			f.Merged.Stats.add(th.st)
		}
		finish(f.Merged)
		return f
	}
	for _, th := range b.thrs {
		t := &Tree{Name: fmt.Sprintf("run %d tid %d", th.run, th.tid), Run: th.run, TID: th.tid, Root: ptrs[th.root], Stats: th.st}
		finish(t)
		f.Threads = append(f.Threads, t)
	}
	f.Merged = Merge("merged", f.Threads...)
	f.Merged.Modules = f.Modules
	return f
}

func modIndex(m uint32) int {
	if m == noMod {
		return NoModule
	}
	return int(m)
}
