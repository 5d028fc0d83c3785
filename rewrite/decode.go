package rewrite

import (
	"bytes"
	"debug/elf"
	"slices"
	"sort"
	"strconv"

	"github.com/stint-project/stint/rewrite/place"
	"golang.org/x/arch/x86/x86asm"
)

// kind classifies a decoded instruction for site selection and relocation.
type kind uint8

const (
	kBad        kind = iota // undecodable byte (a 1-byte pseudo instruction)
	kOther                  // anything that does not transfer control
	kJcc                    // jcc rel8/rel32
	kJcxz                   // jrcxz/jecxz/loop/loope/loopne rel8
	kJmp                    // jmp rel8/rel32
	kCall                   // call rel32
	kRet                    // ret, ret imm16
	kIndJmp                 // jmp *r/m64
	kIndCall                // call *r/m64
	kSyscall                // syscall
	kFar                    // far transfers, iret, sysret, ...: never relocated
	kPCRelOther             // some other instruction with a rel operand (xbegin): never relocated
)

// isBranch: a near transfer of control (the sites of tool=branch).
func (k kind) isBranch() bool { return k >= kJcc && k <= kIndCall }

// isUncond: execution never falls through to the next instruction.
func (k kind) isUncond() bool { return k == kJmp || k == kRet || k == kIndJmp || k == kFar }

// code is the decoded executable part of the input.
type code struct {
	insts   []place.Inst
	kinds   []kind
	targets []uint64 // direct branch target per instruction (0 = none)
	starts  map[uint64]bool
	regions []region

	undecodable int // bytes that could not be decoded
}

type region struct {
	name   string
	lo, hi uint64
	data   []byte
}

// execRegions returns the executable sections (or, without section
// headers, the executable PT_LOADs), sorted by address.
func (f *elfFile) execRegions() []region {
	var out []region
	for i := range f.sects {
		s := &f.sects[i]
		if s.Type == elf.SHT_PROGBITS && s.Flags&elf.SHF_EXECINSTR != 0 && s.Flags&elf.SHF_ALLOC != 0 && s.Size > 0 {
			if _, ok := f.offsetOf(s.Addr, s.Size); !ok {
				continue
			}
			out = append(out, region{name: s.name, lo: s.Addr, hi: s.Addr + s.Size, data: f.sectData(s)})
		}
	}
	if len(out) == 0 {
		for _, p := range f.progs {
			if p.Type == elf.PT_LOAD && p.Flags&elf.PF_X != 0 && p.Filesz > 0 {
				out = append(out, region{name: "PT_LOAD", lo: p.Vaddr, hi: p.Vaddr + p.Filesz, data: f.data[p.Off : p.Off+p.Filesz]})
			}
		}
	}
	// Never treat the ELF header or the program header table as code
	// (old-style layouts map them in the executable segment).
	hdrEnd := max(uint64(ehdrSize), f.hdr.Phoff+uint64(len(f.progs))*phdrSize)
	w := 0
	for _, r := range out {
		if off, ok := f.offsetOf(r.lo, r.hi-r.lo); ok && off < hdrEnd {
			skip := min(hdrEnd-off, r.hi-r.lo)
			r.lo += skip
			r.data = r.data[skip:]
		}
		if r.lo < r.hi {
			out[w] = r
			w++
		}
	}
	out = out[:w]
	sort.Slice(out, func(i, j int) bool { return out[i].lo < out[j].lo })
	// Drop overlaps (hostile section tables).
	return dropOverlaps(out, func(r region) (uint64, uint64) { return r.lo, r.hi })
}

// dropOverlaps keeps, of ranges sorted by start, each one that starts at
// or after the end of the last one kept.
func dropOverlaps[T any](out []T, span func(T) (lo, hi uint64)) []T {
	w := 0
	for _, r := range out {
		lo, _ := span(r)
		if w > 0 {
			if _, hi := span(out[w-1]); lo < hi {
				continue
			}
		}
		out[w] = r
		w++
	}
	return out[:w]
}

var endbr = [][]byte{{0xf3, 0x0f, 0x1e, 0xfa}, {0xf3, 0x0f, 0x1e, 0xfb}}

// isEndbr reports whether b starts with endbr64 or endbr32.
func isEndbr(b []byte) bool {
	for _, e := range endbr {
		if bytes.HasPrefix(b, e) {
			return true
		}
	}
	return false
}

func decodeOne(b []byte) (x86asm.Inst, bool) {
	if isEndbr(b) {
		return x86asm.Inst{Op: x86asm.NOP, Len: 4}, true
	}
	if in, isVex, ok := vexDecode(b); isVex {
		return in, ok
	}
	in, err := x86asm.Decode(b, 64)
	if err != nil || in.Op == 0 || in.Len <= 0 || in.Len > len(b) {
		return in, false
	}
	return in, true
}

func classify(in *x86asm.Inst) (kind, int64) {
	rel, hasRel := in.Args[0].(x86asm.Rel)
	switch in.Op {
	case x86asm.JA, x86asm.JAE, x86asm.JB, x86asm.JBE, x86asm.JE, x86asm.JG, x86asm.JGE,
		x86asm.JL, x86asm.JLE, x86asm.JNE, x86asm.JNO, x86asm.JNP, x86asm.JNS, x86asm.JO,
		x86asm.JP, x86asm.JS:
		if hasRel && in.PCRel != 2 {
			return kJcc, int64(rel)
		}
		return kPCRelOther, 0
	case x86asm.JRCXZ, x86asm.JECXZ, x86asm.JCXZ, x86asm.LOOP, x86asm.LOOPE, x86asm.LOOPNE:
		if hasRel && in.PCRel == 1 {
			return kJcxz, int64(rel)
		}
		return kPCRelOther, 0
	case x86asm.JMP:
		if hasRel {
			if in.PCRel == 2 {
				return kPCRelOther, 0
			}
			return kJmp, int64(rel)
		}
		return kIndJmp, 0
	case x86asm.CALL:
		if hasRel {
			if in.PCRel == 2 {
				return kPCRelOther, 0
			}
			return kCall, int64(rel)
		}
		return kIndCall, 0
	case x86asm.RET:
		return kRet, 0
	case x86asm.SYSCALL:
		return kSyscall, 0
	case x86asm.LJMP, x86asm.LCALL, x86asm.LRET, x86asm.IRET, x86asm.IRETD, x86asm.IRETQ,
		x86asm.SYSRET, x86asm.SYSEXIT, x86asm.SYSENTER, x86asm.HLT, x86asm.UD2, x86asm.UD1, x86asm.UD0:
		return kFar, 0
	}
	for _, a := range in.Args {
		if _, ok := a.(x86asm.Rel); ok {
			return kPCRelOther, 0
		}
	}
	return kOther, 0
}

// decode sweeps the executable regions linearly, resynchronising at
// function starts after a decode failure.
func decode(f *elfFile) *code {
	c := &code{starts: map[uint64]bool{}, regions: f.execRegions()}
	var starts []uint64
	for _, s := range f.functionStarts() {
		for _, r := range c.regions {
			if s >= r.lo && s < r.hi {
				c.starts[s] = true
				starts = append(starts, s)
				break
			}
		}
	}
	for _, r := range c.regions {
		// Section starts are instruction boundaries too.
		if !c.starts[r.lo] {
			c.starts[r.lo] = true
			starts = append(starts, r.lo)
		}
	}
	slices.Sort(starts)
	starts = slices.Compact(starts)
	nextStart := func(a uint64) uint64 { // first start > a, or max
		i := sort.Search(len(starts), func(i int) bool { return starts[i] > a })
		if i == len(starts) {
			return ^uint64(0)
		}
		return starts[i]
	}
	add := func(a uint64, b []byte, k kind, tgt uint64, fl place.InstFlags) {
		c.insts = append(c.insts, place.Inst{Addr: a, Bytes: b, Flags: fl})
		c.kinds = append(c.kinds, k)
		c.targets = append(c.targets, tgt)
	}
	for ri, r := range c.regions {
		next := ^uint64(0)
		if ri+1 < len(c.regions) {
			next = c.regions[ri+1].lo
		}
		a := r.lo
		for a < r.hi {
			limit := min(r.hi, nextStart(a))
			b := r.data[a-r.lo : min(a-r.lo+15, r.hi-r.lo)]
			in, ok := decodeOne(b)
			if ok && a+uint64(in.Len) > limit && limit < r.hi {
				// An instruction straddles a function start. glibc's
				// signal trampoline, for one, has its FDE begin one
				// byte early, inside the preceding nop. Neither reading
				// can be trusted until the two decodings meet again:
				// leave every byte up to there alone.
				if m, ok := converge(r, a+uint64(in.Len), limit); ok {
					for ; a < m; a++ {
						add(a, r.data[a-r.lo:a-r.lo+1], kBad, 0, place.InstUntouchable)
						c.undecodable++
					}
					continue
				}
			}
			if !ok || a+uint64(in.Len) > limit {
				// Undecodable (or straddles a function start): every
				// byte up to the next start becomes an untouchable
				// 1-byte pseudo instruction.
				for ; a < limit; a++ {
					add(a, r.data[a-r.lo:a-r.lo+1], kBad, 0, place.InstUntouchable)
					c.undecodable++
				}
				continue
			}
			k, rel := classify(&in)
			var tgt uint64
			if k == kJcc || k == kJcxz || k == kJmp || k == kCall {
				tgt = a + uint64(in.Len) + uint64(rel)
			}
			add(a, b[:in.Len], k, tgt, 0)
			a += uint64(in.Len)
		}
		c.addTail(f, r, next, add)
	}
	c.markFlags()
	return c
}

// converge decodes forward from x and from y (x > y) and returns the
// first address both decodings reach, within a few instructions.
func converge(r region, x, y uint64) (uint64, bool) {
	for n := 0; n < 32 && x != y; n++ {
		if x < y {
			x, y = y, x
		}
		// y is behind: step it.
		if y >= r.hi {
			return 0, false
		}
		in, ok := decodeOne(r.data[y-r.lo : min(y-r.lo+15, r.hi-r.lo)])
		if !ok {
			return 0, false
		}
		y += uint64(in.Len)
	}
	return x, x == y && x <= r.hi
}

// tailBytes is how many bytes past the end of an executable section the
// planner may see: enough for a punned jump after a 1-byte instruction and
// for evicting a successor.
const tailBytes = 16

// addTail appends, as 1-byte pseudo instructions, the bytes that follow
// region r inside the same loaded segment, up to the next region: the
// planner may read them as pun bytes (a ret ending .init or .fini has no
// successor otherwise). Nothing executes or reads the zero/int3 filler
// between sections, so such bytes are padding the planner may overwrite;
// anything else is left untouchable.
func (c *code) addTail(f *elfFile, r region, next uint64, add func(uint64, []byte, kind, uint64, place.InstFlags)) {
	end := min(r.hi+tailBytes, next)
	for _, p := range f.progs {
		if p.Type == elf.PT_LOAD && p.Flags&elf.PF_X != 0 && r.hi > p.Vaddr && r.hi <= p.Vaddr+p.Filesz {
			end = min(end, p.Vaddr+p.Filesz)
			if end <= r.hi {
				return
			}
			data := f.data[p.Off+(r.hi-p.Vaddr) : p.Off+(end-p.Vaddr)]
			fl := place.InstPadding
			for _, b := range data {
				if b != 0 && b != 0xcc {
					fl = place.InstUntouchable
				}
			}
			for k := range data {
				add(r.hi+uint64(k), data[k:k+1], kBad, 0, fl)
			}
			return
		}
	}
}

// index returns the instruction that contains addr, or -1.
func (c *code) index(addr uint64) int {
	i := sort.Search(len(c.insts), func(i int) bool { return c.insts[i].Addr > addr }) - 1
	if i < 0 {
		return -1
	}
	in := &c.insts[i]
	if addr >= in.Addr+uint64(in.Len()) {
		return -1
	}
	return i
}

func (c *code) markFlags() {
	for s := range c.starts {
		if i := c.index(s); i >= 0 && c.insts[i].Addr == s {
			c.insts[i].Flags |= place.InstTarget
		}
	}
	for _, t := range c.targets {
		if t == 0 {
			continue
		}
		i := c.index(t)
		if i < 0 {
			continue
		}
		if c.insts[i].Addr == t {
			c.insts[i].Flags |= place.InstTarget
		} else {
			c.insts[i].Flags |= place.InstUntouchable
		}
	}
	// Padding: nop/int3 runs after an unconditional transfer that end at
	// a function start or a branch target and are no target themselves.
	for i := 0; i < len(c.insts); i++ {
		if !c.kinds[i].isUncond() {
			continue
		}
		j := i + 1
		for j < len(c.insts) && isPad(&c.insts[j], c.kinds[j]) && c.insts[j].Flags&(place.InstTarget|place.InstUntouchable) == 0 &&
			c.insts[j].Addr == c.insts[j-1].Addr+uint64(c.insts[j-1].Len()) {
			j++
		}
		if j == i+1 {
			continue
		}
		end := j < len(c.insts) && c.insts[j].Addr == c.insts[j-1].Addr+uint64(c.insts[j-1].Len()) &&
			c.insts[j].Flags&place.InstTarget != 0
		if end {
			for k := i + 1; k < j; k++ {
				c.insts[k].Flags |= place.InstPadding
			}
		}
		i = j - 1
	}
	for i := range c.insts {
		if c.insts[i].Flags&place.InstUntouchable == 0 && relocatable(&c.insts[i], c.kinds[i]) == nil {
			c.insts[i].Flags |= place.InstRelocatable
		}
	}
}

func isPad(in *place.Inst, k kind) bool {
	if k != kOther {
		return false
	}
	b := in.Bytes
	if len(b) == 1 && (b[0] == 0x90 || b[0] == 0xcc) {
		return true
	}
	d, ok := decodeOne(b)
	return ok && d.Op == x86asm.NOP
}

// Tool selects the probe sites.
type Tool uint32

// Tools, with the values of STINT_TOOL_*.
const (
	ToolBranch  Tool = 1
	ToolCall    Tool = 2
	ToolSyscall Tool = 3
	ToolBlock   Tool = 4
)

func (t Tool) String() string {
	switch t {
	case ToolBranch:
		return "branch"
	case ToolCall:
		return "call"
	case ToolSyscall:
		return "syscall"
	case ToolBlock:
		return "block"
	}
	return "tool(" + strconv.Itoa(int(t)) + ")"
}

// ParseTool parses a tool name.
func ParseTool(s string) (Tool, bool) {
	for _, t := range []Tool{ToolBranch, ToolCall, ToolSyscall, ToolBlock} {
		if t.String() == s {
			return t, true
		}
	}
	return 0, false
}

// sites returns the indices of the instructions the tool probes, in
// address order.
func (c *code) sites(t Tool) []int {
	var out []int
	for i, k := range c.kinds {
		var take bool
		switch t {
		case ToolBranch:
			take = k.isBranch()
		case ToolCall:
			take = k == kCall || k == kIndCall || k == kRet
		case ToolSyscall:
			take = k == kSyscall
		case ToolBlock:
			if k == kBad || c.insts[i].Flags&place.InstPadding != 0 {
				break
			}
			if c.insts[i].Flags&place.InstTarget != 0 {
				take = true
			} else if i > 0 && c.kinds[i-1].isBranch() &&
				c.insts[i-1].Addr+uint64(c.insts[i-1].Len()) == c.insts[i].Addr {
				take = true
			}
		}
		if take {
			out = append(out, i)
		}
	}
	return out
}
