// Package place decides how each probed instruction is redirected to its
// trampoline (E9Patch's tactics) and where fixed-address stubs go.
//
// Use: build a [Planner] over the decoded instructions, call
// [Planner.PatchAll] with the sites (or [Planner.MarkSites], then
// [Planner.Patch] per site in descending address order), then emit
// Writes, Stubs (each `jmp rel32` to Near(Stub.Inst)) and the chunks of
// [AddrSpace.Chunks] or, better, [AddrSpace.Layout], whose shared source
// area keeps the file small.
//
// Input is trusted to come from the container's decoder, but bad input
// (unsorted or overlapping instructions, bad indices, no room) gives a
// *[PatchError], never a panic; work per site is bounded.
package place

// This file is the seam between the ELF container (package rewrite) and
// the planner. The container decodes the code, chooses sites and builds trampolines;
// the planner decides which bytes of the original code change so that
// executing a site jumps to its trampoline. See docs/DESIGN.md §3.

// InstFlags describe a decoded instruction of the original code.
type InstFlags uint8

const (
	// InstTarget: the instruction is the target of a direct branch (or a
	// function start); it must keep a valid instruction at its start.
	InstTarget InstFlags = 1 << iota
	// InstUntouchable: some direct branch lands inside the instruction, or
	// it lies in a region the sweep could not decode with confidence; its
	// bytes may be neither modified nor evicted (they may still be read by
	// a pun, since reading does not change them).
	InstUntouchable
	// InstPadding: nop/int3 padding after an unconditional transfer that no
	// branch targets; tactic P may overwrite it freely.
	InstPadding
	// InstRelocatable: the container can execute this instruction from a
	// trampoline (it knows how to relocate it), so it may be evicted.
	InstRelocatable
	// InstNoRead: no other patch may depend on the bytes this
	// instruction's patch modifies (read them through a pun, or land a
	// T3 jump in them), so that the patch can always be undone alone.
	InstNoRead
	// InstNoReadSites: this instruction's patch may not depend on the
	// bytes another site's patch modifies, which would keep that site
	// patched for as long as this one is (an edge probe that is
	// restored once recorded must not pin a hot call's detour), nor
	// evict a neighbour, whose jump is then never undone.
	InstNoReadSites
	// InstData: with InstUntouchable, because a rip-relative operand
	// reads or writes the instruction's bytes (facts: markRange).
	InstData
	// InstRemapped: with InstUntouchable, because the program maps the
	// instruction's bytes again from its file at another address (V8's
	// embedded builtins, facts: v8Builtins).
	InstRemapped
)

// Inst is one decoded instruction, in address order in Planner.Insts.
// It holds its encoding itself and no pointer: a module's millions of
// them are one block the collector never scans (cc1plus: 5.1 M, whose
// slice headers were 40 bytes each with a pointer into the file).
type Inst struct {
	Addr  uint64           // link vaddr
	enc   [MaxInstLen]byte // the original encoding, enc[:n]; never modified by the planner
	n     uint8
	Flags InstFlags
}

// MaxInstLen is the longest x86-64 instruction.
const MaxInstLen = 15

// NewInst returns the instruction at addr encoded as b, copied. An
// encoding longer than MaxInstLen bytes gives an instruction of length
// 0, which the planner refuses (ErrBadInsts), as it does an empty one.
func NewInst(addr uint64, b []byte, fl InstFlags) Inst {
	in := Inst{Addr: addr, Flags: fl}
	if len(b) <= MaxInstLen {
		in.n = uint8(copy(in.enc[:], b))
	}
	return in
}

// Bytes returns the original encoding. Its capacity is its length, so
// that an append copies it instead of writing into the instruction.
func (in *Inst) Bytes() []byte { return in.enc[:in.n:in.n] }

// Len returns the instruction's length in bytes.
func (in *Inst) Len() int { return int(in.n) }

// Tactic names how a site was patched, after E9Patch (Duck et al.,
// "Binary Rewriting without Control Flow Recovery", PLDI 2020).
type Tactic uint8

const (
	TacticNone Tactic = iota // not patched
	TacticB1                 // jmp rel32 in place (instruction >= 5 bytes)
	TacticB2                 // punned jmp rel32 (with 0..n-2 prefixes)
	TacticT1                 // successor eviction + pun
	TacticT2                 // pun into an evicted successor's punned jump
	TacticT3                 // jmp rel8 to an evicted neighbour
	TacticP                  // overwrite of padding after the site
	TacticTrap               // int3 at the site's first byte: the runtime's SIGTRAP handler goes to its trampoline (Planner.Trap)
)

// Write is a change to the original code: the new bytes of one
// instruction, Insts[Inst], whole (Addr == Insts[Inst].Addr, len(Bytes) ==
// Insts[Inst].Len(); bytes that did not change keep their original value).
// There is at most one Write per instruction. Bytes may still change in
// later Patch calls (filler bytes that a later T3 uses), so read Writes
// after the last Patch. A Write whose Inst is neither a site nor in
// Evicted is padding (tactic P or a T3 jump placed in padding): nothing
// executes it, and it needs no restoring.
type Write struct {
	Addr  uint64
	Bytes []byte
	Inst  int // index into Planner.Insts
}

// Stub is a 5-byte jmp rel32 at a fixed address (chosen by the planner in
// free address space) that continues to the near trampoline of instruction
// Inst. The container emits it into a chunk.
type Stub struct {
	Addr uint64
	Inst int // index into Planner.Insts
}

// Planner chooses, instruction by instruction, how to redirect execution
// to trampolines without changing any byte a branch may land on.
//
// Call Patch for sites in descending address order (or use PatchAll): a
// pun reads the bytes after its site, which must be final by then. Insts
// must be sorted by address and not overlap. Near may be called for an
// instruction that is finally not evicted (a failed attempt); emit
// relocation trampolines only for Evicted, and probe trampolines for sites.
// Evicted lists every instruction patched because of another's tactic
// (T1/T2 successors, T3 neighbours); it may hold sites not yet passed to
// Patch, whose later Patch returns their recorded tactic. Tactics of an
// evicted instruction is the tactic of its own jump (B1 or B2).
//
// Reads also holds (site, neighbour) for T3: the site's short jump lands
// in the neighbour's patch, so the neighbour may not be restored while the
// site is patched.
type Planner struct {
	Insts []Inst
	// Space hands out addresses for stubs (windows fixed by punned bytes).
	Space *AddrSpace
	// Near returns the address of the near trampoline of instruction i:
	// for a site, its probe trampoline; for an evicted instruction, the
	// relocated copy followed by a jump back. The container allocates it
	// on the first call; the planner may call it any number of times.
	Near func(i int) uint64
	// ShortJumps: where a site's 5-byte jump would straddle an aligned
	// 16-byte word, first try a 2-byte jump to free bytes nearby
	// (tryShort), so that one atomic store can undo the patch.
	ShortJumps bool
	// NoHops: a site's jump goes straight to its trampoline or a stub,
	// never to a jump placed elsewhere in the code (no T3). Go's runtime
	// preempts a goroutine at any PC of its functions: one between the
	// two jumps is a PC whose frame is not the function's there, and its
	// unwinder then dies (a Go module).
	NoHops bool
	// Run, when set, returns for site i the address up to which the
	// bytes after it are its own to overwrite (0: none): the plain
	// instructions and the branch a pre-site's trampoline runs, which
	// never run in place and which nothing else reaches.
	Run func(i int) int64

	// Results, filled by Patch.
	Writes  []Write
	Stubs   []Stub
	Evicted []int    // instructions evicted (patched, not probed)
	Tactics []Tactic // per instruction index; TacticNone if untouched
	Reads   [][2]int // (reader, read) pairs: patch of Insts[reader] reads bytes patch of Insts[read] modified
	// Peeks: (reader, read) pairs whose pun reads bytes of read's patch
	// that hold their original values; Reads may hold the pair too. The
	// reader depends on read's patch only while those bytes are being
	// written (a sequence that passes through other values).
	Peeks [][2]int

	s *pstate // planner state, created by the first Patch
}
