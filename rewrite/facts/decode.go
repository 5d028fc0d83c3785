package facts

import (
	"bytes"
	"debug/elf"
	"slices"
	"sort"

	"github.com/stint-project/stint/rewrite/elfin"
	"github.com/stint-project/stint/rewrite/place"
	"golang.org/x/arch/x86/x86asm"
)

// Kind classifies a decoded instruction for site selection and relocation.
type Kind uint8

const (
	Bad        Kind = iota // undecodable byte (a 1-byte pseudo instruction)
	Other                  // anything that does not transfer control
	Jcc                    // jcc rel8/rel32
	Jcxz                   // jrcxz/jecxz/loop/loope/loopne rel8
	Jmp                    // jmp rel8/rel32
	Call                   // call rel32
	Ret                    // ret, ret imm16
	IndJmp                 // jmp *r/m64
	IndCall                // call *r/m64
	Syscall                // syscall
	Far                    // far transfers, iret, sysret, ...: never relocated
	PCRelOther             // some other instruction with a rel operand (xbegin): never relocated
)

func (k Kind) String() string {
	return [...]string{"bad", "other", "jcc", "jcxz", "jmp", "call", "ret", "indirect jmp", "indirect call", "syscall", "far", "pc-relative"}[k]
}

// IsBranch: a near transfer of control (the sites of tool=branch).
func (k Kind) IsBranch() bool { return k >= Jcc && k <= IndCall }

// IsUncond: execution never falls through to the next instruction.
func (k Kind) IsUncond() bool { return k == Jmp || k == Ret || k == IndJmp || k == Far }

// Code is the decoded executable part of the input.
type Code struct {
	// Insts are the instructions in address order. Their flags are the
	// decoder's (InstTarget, InstUntouchable, InstPadding,
	// InstRelocatable) and the module's reservations (Early, Fini); the
	// policy stage adds its own to the same slice before placement.
	Insts   []place.Inst
	Kinds   []Kind
	Targets []uint64 // direct branch target per instruction (0 = none)
	Starts  map[uint64]bool
	Regions []Region

	Undecodable int // bytes that could not be decoded

	noPadding bool     // padding is untouchable (Module.Go)
	flagsDead []uint8  // FlagsDead's answers by instruction (0: not asked yet)
	block     []uint32 // Index's table (buildIndex); nil: binary search
}

// Region is an executable section (or segment) of the file.
type Region struct {
	Name   string
	Lo, Hi uint64
	Data   []byte
}

// execRegions returns the executable sections (or, without section
// headers, the executable PT_LOADs), sorted by address.
func execRegions(f *elfin.File) []Region {
	var out []Region
	for i := range f.Sects {
		s := &f.Sects[i]
		if s.Type == elf.SHT_PROGBITS && s.Flags&elf.SHF_EXECINSTR != 0 && s.Flags&elf.SHF_ALLOC != 0 && s.Size > 0 {
			if _, ok := f.OffsetOf(s.Addr, s.Size); !ok {
				continue
			}
			out = append(out, Region{Name: s.NameStr, Lo: s.Addr, Hi: s.Addr + s.Size, Data: f.SectData(s)})
		}
	}
	if len(out) == 0 {
		for _, p := range f.Progs {
			if p.Type == elf.PT_LOAD && p.Flags&elf.PF_X != 0 && p.Filesz > 0 {
				out = append(out, Region{Name: "PT_LOAD", Lo: p.Vaddr, Hi: p.Vaddr + p.Filesz, Data: f.Data[p.Off : p.Off+p.Filesz]})
			}
		}
	}
	// Never treat the ELF header or the program header table as Code
	// (old-style layouts map them in the executable segment).
	hdrEnd := max(uint64(elfin.EhdrSize), f.Hdr.Phoff+uint64(len(f.Progs))*elfin.PhdrSize)
	w := 0
	for _, r := range out {
		if off, ok := f.OffsetOf(r.Lo, r.Hi-r.Lo); ok && off < hdrEnd {
			skip := min(hdrEnd-off, r.Hi-r.Lo)
			r.Lo += skip
			r.Data = r.Data[skip:]
		}
		if r.Lo < r.Hi {
			out[w] = r
			w++
		}
	}
	out = out[:w]
	sort.Slice(out, func(i, j int) bool { return out[i].Lo < out[j].Lo })
	// Drop overlaps (hostile section tables).
	return dropOverlaps(out, func(r Region) (uint64, uint64) { return r.Lo, r.Hi })
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

// IsEndbr reports whether b starts with endbr64 or endbr32.
func IsEndbr(b []byte) bool {
	for _, e := range endbr {
		if bytes.HasPrefix(b, e) {
			return true
		}
	}
	return false
}

// DecodeOne decodes the instruction at the start of b (endbr64 as a nop,
// VEX and EVEX forms by their length only: see vexDecode).
func DecodeOne(b []byte) (x86asm.Inst, bool) {
	if IsEndbr(b) {
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

// Classify returns the kind of a decoded instruction and, for a direct
// branch, its rel displacement.
func Classify(in *x86asm.Inst) (Kind, int64) {
	rel, hasRel := in.Args[0].(x86asm.Rel)
	switch in.Op {
	case x86asm.JA, x86asm.JAE, x86asm.JB, x86asm.JBE, x86asm.JE, x86asm.JG, x86asm.JGE,
		x86asm.JL, x86asm.JLE, x86asm.JNE, x86asm.JNO, x86asm.JNP, x86asm.JNS, x86asm.JO,
		x86asm.JP, x86asm.JS:
		if hasRel && in.PCRel != 2 {
			return Jcc, int64(rel)
		}
		return PCRelOther, 0
	case x86asm.JRCXZ, x86asm.JECXZ, x86asm.JCXZ, x86asm.LOOP, x86asm.LOOPE, x86asm.LOOPNE:
		if hasRel && in.PCRel == 1 {
			return Jcxz, int64(rel)
		}
		return PCRelOther, 0
	case x86asm.JMP:
		if hasRel {
			if in.PCRel == 2 {
				return PCRelOther, 0
			}
			return Jmp, int64(rel)
		}
		return IndJmp, 0
	case x86asm.CALL:
		if hasRel {
			if in.PCRel == 2 {
				return PCRelOther, 0
			}
			return Call, int64(rel)
		}
		return IndCall, 0
	case x86asm.RET:
		return Ret, 0
	case x86asm.SYSCALL:
		return Syscall, 0
	case x86asm.LJMP, x86asm.LCALL, x86asm.LRET, x86asm.IRET, x86asm.IRETD, x86asm.IRETQ,
		x86asm.SYSRET, x86asm.SYSEXIT, x86asm.SYSENTER, x86asm.HLT, x86asm.UD2, x86asm.UD1, x86asm.UD0:
		return Far, 0
	}
	for _, a := range in.Args {
		if _, ok := a.(x86asm.Rel); ok {
			return PCRelOther, 0
		}
	}
	return Other, 0
}

// decode sweeps the executable regions linearly, resynchronising at
// function starts after a decode failure. A large region is swept in
// two halves at once, split at a function start (sweepSplit).
func decode(f *elfin.File, functionStarts []uint64, noPadding bool, keep [][2]uint64) *Code {
	c := &Code{Starts: map[uint64]bool{}, Regions: execRegions(f), noPadding: noPadding}
	var starts []uint64
	for _, s := range functionStarts {
		for _, r := range c.Regions {
			if s >= r.Lo && s < r.Hi {
				c.Starts[s] = true
				starts = append(starts, s)
				break
			}
		}
	}
	for _, r := range c.Regions {
		// Section starts are instruction boundaries too.
		if !c.Starts[r.Lo] {
			c.Starts[r.Lo] = true
			starts = append(starts, r.Lo)
		}
	}
	slices.Sort(starts)
	starts = slices.Compact(starts)
	var parts []*sweepPart
	for ri, r := range c.Regions {
		next := ^uint64(0)
		if ri+1 < len(c.Regions) {
			next = c.Regions[ri+1].Lo
		}
		parts = append(parts, sweepSplit(r, starts)...)
		tail := &sweepPart{}
		c.addTail(f, r, next, tail.add)
		parts = append(parts, tail)
	}
	// the tables at their length: they stay to the end of the rewrite
	n := 0
	for _, pt := range parts {
		n += len(pt.insts)
	}
	c.Insts, c.Kinds, c.Targets = make([]place.Inst, 0, n), make([]Kind, 0, n), make([]uint64, 0, n)
	var reads [][2]uint64 // rip-relative data operands' bytes (markRange)
	for _, pt := range parts {
		c.Insts = append(c.Insts, pt.insts...)
		c.Kinds = append(c.Kinds, pt.kinds...)
		c.Targets = append(c.Targets, pt.targets...)
		reads = append(reads, pt.reads...)
		c.Undecodable += pt.undecodable
	}
	c.markRange(keep, place.InstUntouchable|place.InstRemapped)
	c.markRange(reads, place.InstUntouchable|place.InstData)
	c.buildIndex()
	c.markFlags()
	return c
}

// sweepPart is what the sweep of part of a region found, in address
// order.
type sweepPart struct {
	insts       []place.Inst
	kinds       []Kind
	targets     []uint64
	reads       [][2]uint64 // rip-relative data operands' bytes
	undecodable int
	end         uint64 // where the sweep stopped
}

func (pt *sweepPart) add(a uint64, b []byte, k Kind, tgt uint64, fl place.InstFlags) {
	pt.insts = append(pt.insts, place.NewInst(a, b, fl))
	pt.kinds = append(pt.kinds, k)
	pt.targets = append(pt.targets, tgt)
}

// splitMin is the smallest region swept in two halves at once.
const splitMin = 1 << 20

// sweepSplit sweeps region r: a large one as two halves at once, split
// at the function start nearest its middle. The second half is kept
// only if the first ended exactly there (a sweep runs past a start that
// an instruction straddles); else it is swept again from where the
// first stopped, so the result is always the whole sweep's.
func sweepSplit(r Region, starts []uint64) []*sweepPart {
	mid := r.Lo + (r.Hi-r.Lo)/2
	k := sort.Search(len(starts), func(i int) bool { return starts[i] >= mid })
	if r.Hi-r.Lo < splitMin || k == len(starts) || starts[k] >= r.Hi {
		return []*sweepPart{sweep(r, r.Lo, r.Hi, starts)}
	}
	s := starts[k]
	var second *sweepPart
	done := make(chan struct{})
	go func() {
		second = sweep(r, s, r.Hi, starts)
		close(done)
	}()
	first := sweep(r, r.Lo, s, starts)
	<-done
	if first.end != s {
		second = sweep(r, first.end, r.Hi, starts)
	}
	return []*sweepPart{first, second}
}

// sweep decodes r from `from` (an instruction boundary) until it reaches
// `to` or passes it. Its tables' capacity is a guess: x86-64 code
// averages about 4 bytes an instruction (cc1plus 4.35, libsqlite3 3.87),
// and append grows them if it falls short.
func sweep(r Region, from, to uint64, starts []uint64) *sweepPart {
	n := int((max(to, from)-from)*2/7) + 16
	pt := &sweepPart{insts: make([]place.Inst, 0, n), kinds: make([]Kind, 0, n), targets: make([]uint64, 0, n)}
	next := sort.Search(len(starts), func(i int) bool { return starts[i] > from }) // the first start after a
	a := from
	for a < to {
		for next < len(starts) && starts[next] <= a {
			next++
		}
		limit := r.Hi
		if next < len(starts) {
			limit = min(limit, starts[next])
		}
		b := r.Data[a-r.Lo : min(a-r.Lo+15, r.Hi-r.Lo)]
		in, ok := DecodeOne(b)
		if ok && a+uint64(in.Len) > limit && limit < r.Hi {
			// An instruction straddles a function start. glibc's
			// signal trampoline, for one, has its FDE begin one
			// byte early, inside the preceding nop. Neither reading
			// can be trusted until the two decodings meet again:
			// leave every byte up to there alone.
			if m, ok := converge(r, a+uint64(in.Len), limit); ok {
				for ; a < m; a++ {
					pt.add(a, r.Data[a-r.Lo:a-r.Lo+1], Bad, 0, place.InstUntouchable)
					pt.undecodable++
				}
				continue
			}
		}
		if !ok || a+uint64(in.Len) > limit {
			// Undecodable (or straddles a function start): every
			// byte up to the next start becomes an untouchable
			// 1-byte pseudo instruction.
			for ; a < limit; a++ {
				pt.add(a, r.Data[a-r.Lo:a-r.Lo+1], Bad, 0, place.InstUntouchable)
				pt.undecodable++
			}
			continue
		}
		k, rel := Classify(&in)
		var tgt uint64
		if k == Jcc || k == Jcxz || k == Jmp || k == Call {
			tgt = a + uint64(in.Len) + uint64(rel)
		}
		if lo, n := ripData(&in, a+uint64(in.Len)); n > 0 {
			pt.reads = append(pt.reads, [2]uint64{lo, lo + n})
		}
		pt.add(a, b[:in.Len], k, tgt, 0)
		a += uint64(in.Len)
	}
	pt.end = a
	return pt
}

// ripData returns the bytes a rip-relative memory operand of in reads
// or writes (next: the address after in), n 0 when it has none. lea
// only computes an address, and a nop's operand is never accessed.
func ripData(in *x86asm.Inst, next uint64) (lo, n uint64) {
	if in.Op == x86asm.LEA || in.Op == x86asm.NOP {
		return 0, 0
	}
	for _, a := range in.Args {
		if a == nil {
			break
		}
		if m, ok := a.(x86asm.Mem); ok && m.Base == x86asm.RIP {
			n = uint64(in.MemBytes)
			if n == 0 {
				n = 8
			}
			return next + uint64(int64(int32(m.Disp))), n // x86asm leaves disp32 unextended
		}
	}
	return 0, 0
}

// markRange sets flags on every instruction that overlaps one of the
// spans: the bytes rip-relative operands read or write (reads, from
// decode: they are data too; V8's builtins in node reload a constant
// from the immediate of an earlier movabs, and patching that movabs
// changed it), and those the caller keeps (keep: V8's builtins).
func (c *Code) markRange(spans [][2]uint64, flags place.InstFlags) {
	for _, r := range spans {
		i := sort.Search(len(c.Insts), func(i int) bool { return c.Insts[i].Addr > r[0] }) - 1
		if i < 0 || c.Insts[i].Addr+uint64(c.Insts[i].Len()) <= r[0] {
			i++
		}
		for ; i < len(c.Insts) && c.Insts[i].Addr < r[1]; i++ {
			c.Insts[i].Flags |= flags
		}
	}
}

// converge decodes forward from x and from y (x > y) and returns the
// first address both decodings reach, within a few instructions.
func converge(r Region, x, y uint64) (uint64, bool) {
	for n := 0; n < 32 && x != y; n++ {
		if x < y {
			x, y = y, x
		}
		// y is behind: step it.
		if y >= r.Hi {
			return 0, false
		}
		in, ok := DecodeOne(r.Data[y-r.Lo : min(y-r.Lo+15, r.Hi-r.Lo)])
		if !ok {
			return 0, false
		}
		y += uint64(in.Len)
	}
	return x, x == y && x <= r.Hi
}

// tailBytes is how many bytes past the end of an executable section the
// planner may see: enough for a punned jump after a 1-byte instruction and
// for evicting a successor.
const tailBytes = 16

// addTail appends, as 1-byte pseudo instructions, the bytes that follow
// Region r inside the same loaded segment, up to the next Region: the
// planner may read them as pun bytes (a ret ending .init or .fini has no
// successor otherwise). Nothing executes or reads the zero/int3 filler
// between sections, so such bytes are padding the planner may overwrite;
// anything else is left untouchable.
func (c *Code) addTail(f *elfin.File, r Region, next uint64, add func(uint64, []byte, Kind, uint64, place.InstFlags)) {
	end := min(r.Hi+tailBytes, next)
	for _, p := range f.Progs {
		if p.Type == elf.PT_LOAD && p.Flags&elf.PF_X != 0 && r.Hi > p.Vaddr && r.Hi <= p.Vaddr+p.Filesz {
			end = min(end, p.Vaddr+p.Filesz)
			if end <= r.Hi {
				return
			}
			data := f.Data[p.Off+(r.Hi-p.Vaddr) : p.Off+(end-p.Vaddr)]
			fl := c.paddingFlag()
			for _, b := range data {
				if b != 0 && b != 0xcc {
					fl = place.InstUntouchable
				}
			}
			for k := range data {
				add(r.Hi+uint64(k), data[k:k+1], Bad, 0, fl)
			}
			return
		}
	}
}

// blockShift sets the span of the address index's blocks (16 bytes:
// about four instructions).
const blockShift = 4

// buildIndex makes Index's table: for each 16-byte block from the first
// instruction to the end of the last, the last instruction starting at
// or before the block's first byte. Code whose span is sparse (more
// blocks than four per instruction: sections far apart) keeps the
// binary search, so that the table stays within 16 bytes an
// instruction.
func (c *Code) buildIndex() {
	c.block = nil
	n := len(c.Insts)
	if n == 0 {
		return
	}
	lo, last := c.Insts[0].Addr, &c.Insts[n-1]
	blocks := (last.Addr + uint64(last.Len()) - lo + (1<<blockShift - 1)) >> blockShift
	if blocks > 4*uint64(n) || n > 1<<31 {
		return
	}
	c.block = make([]uint32, blocks)
	i := 0
	for b := range c.block {
		at := lo + uint64(b)<<blockShift
		for i+1 < n && c.Insts[i+1].Addr <= at {
			i++
		}
		c.block[b] = uint32(i)
	}
}

// Index returns the instruction that contains addr, or -1: a lookup in
// the block table and a few steps from there, or a binary search where
// there is no table.
func (c *Code) Index(addr uint64) int {
	var i int
	switch {
	case len(c.Insts) == 0 || addr < c.Insts[0].Addr:
		return -1
	case c.block != nil:
		b := (addr - c.Insts[0].Addr) >> blockShift
		if b >= uint64(len(c.block)) {
			return -1
		}
		i = int(c.block[b])
		for i+1 < len(c.Insts) && c.Insts[i+1].Addr <= addr {
			i++
		}
	default:
		i = sort.Search(len(c.Insts), func(i int) bool { return c.Insts[i].Addr > addr }) - 1
	}
	in := &c.Insts[i]
	if addr >= in.Addr+uint64(in.Len()) {
		return -1
	}
	return i
}

// paddingFlag is the flag of padding bytes: InstPadding, free for the
// planner, or InstUntouchable in a module whose padding must stay as it
// is (noPadding).
func (c *Code) paddingFlag() place.InstFlags {
	if c.noPadding {
		return place.InstUntouchable
	}
	return place.InstPadding
}

func (c *Code) markFlags() {
	for s := range c.Starts {
		if i := c.Index(s); i >= 0 && c.Insts[i].Addr == s {
			c.Insts[i].Flags |= place.InstTarget
		}
	}
	for _, t := range c.Targets {
		if t == 0 {
			continue
		}
		i := c.Index(t)
		if i < 0 {
			continue
		}
		if c.Insts[i].Addr == t {
			c.Insts[i].Flags |= place.InstTarget
		} else {
			c.Insts[i].Flags |= place.InstUntouchable
		}
	}
	// Padding: nop/int3 runs after an unconditional transfer that end at
	// a function start or a branch target and are no target themselves.
	for i := 0; i < len(c.Insts); i++ {
		if !c.Kinds[i].IsUncond() {
			continue
		}
		j := i + 1
		for j < len(c.Insts) && isPad(&c.Insts[j], c.Kinds[j]) && c.Insts[j].Flags&(place.InstTarget|place.InstUntouchable) == 0 &&
			c.Insts[j].Addr == c.Insts[j-1].Addr+uint64(c.Insts[j-1].Len()) {
			j++
		}
		if j == i+1 {
			continue
		}
		end := j < len(c.Insts) && c.Insts[j].Addr == c.Insts[j-1].Addr+uint64(c.Insts[j-1].Len()) &&
			c.Insts[j].Flags&place.InstTarget != 0
		if end {
			for k := i + 1; k < j; k++ {
				c.Insts[k].Flags |= c.paddingFlag()
			}
		}
		i = j - 1
	}
	for i := range c.Insts {
		if c.Insts[i].Flags&place.InstUntouchable == 0 && Relocatable(&c.Insts[i], c.Kinds[i]) == nil {
			c.Insts[i].Flags |= place.InstRelocatable
		}
	}
}

func isPad(in *place.Inst, k Kind) bool {
	if k != Other {
		return false
	}
	b := in.Bytes()
	if len(b) == 1 && (b[0] == 0x90 || b[0] == 0xcc) {
		return true
	}
	d, ok := DecodeOne(b)
	return ok && d.Op == x86asm.NOP
}
