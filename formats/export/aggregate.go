package export

import (
	"context"
	"math"
	"sort"

	"github.com/stint-project/stint/formats"
	"golang.org/x/arch/x86/x86asm"
)

// addr is a module-relative address (or an absolute one when mod is
// formats.NoModule).
type addr struct {
	mod  uint16
	addr uint64
}

func less(a, b addr) bool {
	if a.mod != b.mod {
		return a.mod < b.mod
	}
	return a.addr < b.addr
}

// --- call stacks -------------------------------------------------------

// node is a call context: the call at site into fn, below parent. Node 0
// is the root (no call).
type node struct {
	parent int32
	depth  int32
	site   addr // the call instruction (in the caller)
	fn     addr // the callee's entry
	count  int64
}

type nodeKey struct {
	parent int32
	site   addr
	fn     addr
}

type threadKey struct {
	run uint16
	tid uint32
}

// frame is a shadow stack entry: the context it entered, and the call
// site its return goes back after.
type frame struct {
	node int32
	site addr
}

// stacks rebuilds call contexts from call and return events with one
// shadow stack per thread (of each run).
type stacks struct {
	nodes    []node
	index    map[nodeKey]int32
	threads  map[threadKey][]frame
	maxDepth int
	dropped  int64             // frames dropped from overfull shadow stacks
	weighed  map[int32]float64 // sampled calls' weights by context, rounded into counts at the end
}

func newStacks(maxDepth int) *stacks {
	return &stacks{nodes: []node{{parent: -1}}, index: map[nodeKey]int32{}, threads: map[threadKey][]frame{}, maxDepth: maxDepth}
}

// maxCallLen is the longest x86-64 instruction: a return address lies at
// most this far after its call.
const maxCallLen = 15

// maxStack bounds a shadow stack: when calls keep coming without
// returns (returns not recorded, or a trace of a thread that never
// returns), the oldest half of the frames is dropped so that memory
// does not grow with events. Returns to dropped frames are unmatched.
const maxStack = 1 << 16

// call pushes a frame for a call at site into fn and counts the context.
// Beyond maxDepth, the frame is pushed (so that its return matches) but
// counted in the context at the bound; it reports whether it was.
func (s *stacks) call(t threadKey, site, fn addr) (truncated bool) {
	st := s.threads[t]
	if len(st) >= maxStack {
		n := copy(st, st[len(st)/2:])
		s.dropped += int64(len(st) - n)
		st = st[:n]
	}
	cur := int32(0)
	if n := len(st); n > 0 {
		cur = st[n-1].node
	}
	if int(s.nodes[cur].depth) >= s.maxDepth {
		s.nodes[cur].count++
		s.threads[t] = append(st, frame{node: cur, site: site})
		return true
	}
	k := nodeKey{cur, site, fn}
	id, ok := s.index[k]
	if !ok {
		id = int32(len(s.nodes))
		s.nodes = append(s.nodes, node{parent: cur, depth: s.nodes[cur].depth + 1, site: site, fn: fn})
		s.index[k] = id
	}
	s.nodes[id].count++
	s.threads[t] = append(st, frame{node: id, site: site})
	return false
}

// weigh counts w calls at site into fn in the context below the root:
// a sampled call, which stands for w calls.
func (s *stacks) weigh(site, fn addr, w float64) {
	k := nodeKey{0, site, fn}
	id, ok := s.index[k]
	if !ok {
		id = int32(len(s.nodes))
		s.nodes = append(s.nodes, node{parent: 0, depth: 1, site: site, fn: fn})
		s.index[k] = id
	}
	if s.weighed == nil {
		s.weighed = map[int32]float64{}
	}
	s.weighed[id] += w
}

// settle rounds the weighed counts into the contexts' counts.
func (s *stacks) settle() {
	for id, w := range s.weighed {
		s.nodes[id].count += int64(math.Round(w))
	}
	s.weighed = nil
}

// ret pops to the frame whose call the return address to follows: the
// nearest one from the top whose call site lies just before to (frames
// above it were left by longjmp, exceptions or tail calls). It reports
// false when no frame matches; the stack is then unchanged.
func (s *stacks) ret(t threadKey, to addr) bool {
	st := s.threads[t]
	for i := len(st) - 1; i >= 0; i-- {
		f := st[i].site
		if f.mod == to.mod && to.addr > f.addr && to.addr-f.addr <= maxCallLen {
			s.threads[t] = st[:i]
			return true
		}
	}
	return false
}

// path returns the locations of node id, leaf first: the callee's entry,
// then each call site up to the root.
func (s *stacks) path(id int32) []addr {
	n := s.nodes[id]
	out := make([]addr, 0, n.depth+1)
	out = append(out, n.fn)
	for ; id > 0; id = s.nodes[id].parent {
		out = append(out, s.nodes[id].site)
	}
	return out
}

// --- blocks --------------------------------------------------------------

// blockInfo is a block start's count and whether it is a single
// instruction (the source of a branch or a syscall) rather than a block
// that runs to the next control transfer.
type blockInfo struct {
	count  int64
	single bool
}

// block is an executed range of a module.
type block struct {
	at    addr
	size  uint64
	count int64
}

// agg is what the aggregating formats collect in one pass.
type agg struct {
	stacks *stacks             // call contexts (call tool), or nil
	flat   map[addr]int64      // events per location (other tools), or nil
	blocks map[addr]*blockInfo // block starts, or nil
}

// useStacks reports whether pprof and collapsed output are built from
// call stacks: for call traces. Other tools count events per location.
func (e *exporter) useStacks() bool { return e.tool == formats.ToolCall }

// aggregate reads the source once and fills what is asked for.
func (e *exporter) aggregate(ctx context.Context, wantStacks, wantFlat, wantBlocks bool) (*agg, error) {
	a := &agg{}
	if wantStacks {
		a.stacks = newStacks(e.opts.MaxDepth)
	}
	if wantFlat {
		a.flat = map[addr]int64{}
	}
	if wantBlocks {
		a.blocks = map[addr]*blockInfo{}
	}
	addBlock := func(at addr, single bool, n int64) {
		if at.mod == formats.NoModule || e.module(at.mod) == nil {
			return
		}
		bi := a.blocks[at]
		if bi == nil {
			bi = &blockInfo{single: single}
			a.blocks[at] = bi
		}
		bi.count += n
		if !single {
			bi.single = false
		}
	}
	var flatW map[addr]float64 // sampled events' weights per location
	err := e.each(ctx, func(b *Batch, i int) {
		k, ok := eventKind(b.Kind[i])
		if sk, sampled := formats.Kind(b.Kind[i]).Sampled(); sampled && e.opts.SampleWeight != nil {
			w := e.opts.SampleWeight(b.event(i))
			e.stats.Events++
			e.stats.Sampled++
			src, dst := addr{b.SrcModule[i], b.Src[i]}, addr{b.DstModule[i], b.Dst[i]}
			switch {
			case a.stacks != nil && (sk == formats.KindCall || sk == formats.KindIndCall):
				a.stacks.weigh(src, dst, w)
			case a.flat != nil:
				if flatW == nil {
					flatW = map[addr]float64{}
				}
				flatW[src] += w
			}
			if a.blocks != nil {
				addBlock(dst, false, 1)
				addBlock(src, true, 1)
			}
			return
		}
		if formats.Kind(b.Kind[i]) == formats.KindBlockCount {
			// a block's exact count since its previous row (rewrite --counts)
			n, at := int64(b.Dst[i]), addr{b.SrcModule[i], b.Src[i]}
			e.stats.Counted += n
			if a.flat != nil {
				a.flat[at] += n
			}
			if a.blocks != nil {
				addBlock(at, false, n)
			}
			return
		}
		if !ok {
			e.stats.Records++
			return
		}
		e.stats.Events++
		src := addr{b.SrcModule[i], b.Src[i]}
		dst := addr{b.DstModule[i], b.Dst[i]}
		if e.module(src.mod) == nil || (k != formats.KindSyscall && e.module(dst.mod) == nil) {
			e.stats.NoModule++
		}
		if a.stacks != nil {
			t := threadKey{b.run(i), b.TID[i]}
			switch k {
			case formats.KindCall, formats.KindIndCall:
				if a.stacks.call(t, src, dst) {
					e.stats.Truncated++
				}
			case formats.KindRet:
				if !a.stacks.ret(t, dst) {
					e.stats.Unmatched++
				}
			}
		}
		if a.flat != nil {
			at := src
			if k == formats.KindBlock {
				at = dst
			}
			a.flat[at]++
		}
		if a.blocks != nil {
			switch k {
			case formats.KindSyscall:
				addBlock(src, true, 1)
			case formats.KindBlock:
				addBlock(dst, false, 1)
			default:
				addBlock(dst, false, 1)
				addBlock(src, true, 1)
			}
		}
	})
	if a.stacks != nil {
		e.stats.Dropped = a.stacks.dropped
		a.stacks.settle()
	}
	for at, w := range flatW {
		a.flat[at] += int64(math.Round(w))
	}
	return a, err
}

// maxBlock bounds the bytes decoded for one block (drcov sizes are
// 16-bit).
const maxBlock = 4096

// blockList returns the executed blocks, sorted, with their sizes: a
// block that starts at a branch destination or a block event runs to
// its first control transfer (decoded from the module's code) but stops
// at the next such start; a single instruction (a branch's or syscall's
// source) is that instruction. Without code, sizes are 1.
func (e *exporter) blockList(a *agg) []block {
	starts := make([]addr, 0, len(a.blocks))
	for at := range a.blocks {
		starts = append(starts, at)
	}
	sort.Slice(starts, func(i, j int) bool { return less(starts[i], starts[j]) })
	out := make([]block, 0, len(starts))
	for i, at := range starts {
		bi := a.blocks[at]
		limit := uint64(maxBlock)
		if !bi.single {
			for j := i + 1; j < len(starts); j++ {
				nx := starts[j]
				if nx.mod != at.mod {
					break
				}
				if !a.blocks[nx].single {
					limit = min(limit, nx.addr-at.addr)
					break
				}
			}
		}
		size := uint64(1)
		if s := e.symbols(at.mod); s != nil && s.Code != nil {
			size = blockSize(s.Code(at.addr, int(limit)), bi.single)
		}
		out = append(out, block{at: at, size: min(max(size, 1), limit), count: bi.count})
	}
	return out
}

// blockSize decodes code up to and including its first control transfer
// (or only its first instruction when single) and returns the bytes
// decoded; at least 1 when code is not empty, 1 when it is.
func blockSize(code []byte, single bool) uint64 {
	n := 0
	for n < len(code) {
		inst, err := x86asm.Decode(code[n:], 64)
		if err != nil || inst.Len == 0 {
			break
		}
		n += inst.Len
		if single || isTransfer(inst.Op) {
			break
		}
	}
	return uint64(max(n, 1))
}

// isTransfer reports whether op may leave the straight line: jumps,
// conditional jumps and loops, calls, returns, system calls, traps.
func isTransfer(op x86asm.Op) bool {
	switch op {
	case x86asm.JA, x86asm.JAE, x86asm.JB, x86asm.JBE, x86asm.JCXZ, x86asm.JE, x86asm.JECXZ,
		x86asm.JG, x86asm.JGE, x86asm.JL, x86asm.JLE, x86asm.JMP, x86asm.JNE, x86asm.JNO,
		x86asm.JNP, x86asm.JNS, x86asm.JO, x86asm.JP, x86asm.JRCXZ, x86asm.JS,
		x86asm.LOOP, x86asm.LOOPE, x86asm.LOOPNE, x86asm.CALL, x86asm.LCALL, x86asm.LJMP,
		x86asm.RET, x86asm.LRET, x86asm.IRET, x86asm.IRETD, x86asm.IRETQ,
		x86asm.SYSCALL, x86asm.SYSENTER, x86asm.SYSEXIT, x86asm.SYSRET,
		x86asm.INT, x86asm.INTO, x86asm.UD1, x86asm.UD2, x86asm.HLT:
		return true
	}
	return false
}
