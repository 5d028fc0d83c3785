package place

// The tactics follow E9Patch (Duck et al., "Binary Rewriting without
// Control Flow Recovery", PLDI 2020, §3). Mapping of our names to the
// paper's: B1 = B1 (jump); B2 = B2 (punned jump) and T1 (padded punned
// jump: the same pun behind 0..n-1 redundant prefixes); T1 = T2 (successor
// eviction) when the successor gets a plain jump; T2 = T2 when the
// successor's own jump is punned too; T3 = T3 (neighbour eviction,
// including the single-byte variant that reads the successor's first byte
// as rel8); P is ours (padding after the site is free to overwrite).
//
// Key for short names: i, j, x are instruction indices (i the site, j its
// successor, x a neighbour); a is the site address, n its length; q is the
// address of an e9 opcode; k a prefix count; m the number of rel32 bytes a
// jump may choose; tx the transaction that collects one attempt's changes.
//
// Every byte of the code has a state (original, part of a jump, filler
// that nothing executes) and a lock bit set when a pun read it: a locked
// byte keeps its value for good. Planning works in any order, but a pun
// that reads an instruction not yet patched locks its first byte, so that
// instruction can no longer be patched: call Patch in descending address
// order (as E9Patch does), or use PatchAll.

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
)

// Errors Patch may return, wrapped in a *PatchError.
var (
	// ErrTooShort: the instruction is shorter than a jmp rel32 and no
	// tactic applied.
	ErrTooShort = errors.New("instruction too short for jmp rel32 and no tactic applied")
	// ErrUntouchable: the instruction is flagged InstUntouchable.
	ErrUntouchable = errors.New("instruction is untouchable")
	// ErrLocked: the instruction's first byte was read by the pun of a
	// patch made earlier (patch in descending address order).
	ErrLocked = errors.New("instruction bytes are read by another patch")
	// ErrOutOfRange: no trampoline or stub is reachable with rel32.
	ErrOutOfRange = errors.New("trampoline out of rel32 range")
	// ErrBadIndex: the instruction index is out of range.
	ErrBadIndex = errors.New("instruction index out of range")
	// ErrBadInsts: Insts are not sorted, overlap, or have a bad length.
	ErrBadInsts = errors.New("instructions not sorted by address, overlapping or of bad length")
	// ErrNoNear: Planner.Near is nil.
	ErrNoNear = errors.New("planner has no Near function")
)

// PatchError says which instruction could not be patched and why.
type PatchError struct {
	Inst int    // index into Planner.Insts
	Addr uint64 // its address
	Err  error  // one of the Err* values
}

func (e *PatchError) Error() string {
	return fmt.Sprintf("patch %#x (instruction %d): %v", e.Addr, e.Inst, e.Err)
}

func (e *PatchError) Unwrap() error { return e.Err }

var tacticNames = [...]string{"none", "B1", "B2", "T1", "T2", "T3", "P", "trap"}

func (t Tactic) String() string {
	if int(t) < len(tacticNames) {
		return tacticNames[t]
	}
	return fmt.Sprintf("Tactic(%d)", t)
}

// Byte states.
const (
	bOrig uint8 = 0    // original byte
	bJump uint8 = 1    // written: part of a jump (or its prefixes)
	bFill uint8 = 2    // written filler: nothing executes it
	bKind uint8 = 0x7f // mask of the above
	bLock uint8 = 0x80 // read by a pun: the value may not change
)

const (
	opJmp32 = 0xe9
	opJmp8  = 0xeb
	opInt3  = 0xcc
)

// jumpPrefixes are prepended to e9 to move a pun (paper: T1). Segment
// overrides are ignored on a near jmp in 64-bit mode on Intel and AMD
// alike; 0x66 is avoided (AMD would truncate the jump to 16 bits) and so
// are REX (only valid right before the opcode) and lock/rep.
var jumpPrefixes = [...]byte{0x26, 0x36, 0x3e}

type undoRec struct {
	x       int32
	off     uint8
	val, st uint8
}

// txn collects the changes of one attempt; commit keeps them, rollback
// undoes them.
type txn struct {
	undo    []undoRec
	stubs   []Stub
	touched []int
	reads   [][2]int
	peeks   [][2]int
	evicted []int
	tactics []struct {
		i int
		t Tactic
	}
}

type pstate struct {
	hint     int     // last index find returned
	tx       txn     // reused by newTx
	site     []bool  // known sites (MarkSites, PatchAll, Patch)
	patching int     // the site Patch is placing
	mat      []int32 // by instruction: 1 + where its current bytes are in the arena, 0 while original
	arena    arena
	written  []bool // Writes has an entry for the instruction
	reads    map[[2]int]bool
	peeks    map[[2]int]bool
}

func (p *Planner) init() error {
	if p.s != nil {
		return nil
	}
	if p.Near == nil {
		return ErrNoNear
	}
	for k := range p.Insts {
		in := &p.Insts[k]
		if in.Len() < 1 || in.Addr >= 1<<63 {
			return &PatchError{Inst: k, Addr: in.Addr, Err: ErrBadInsts}
		}
		if k > 0 && in.Addr < p.Insts[k-1].Addr+uint64(p.Insts[k-1].Len()) {
			return &PatchError{Inst: k, Addr: in.Addr, Err: ErrBadInsts}
		}
	}
	if p.Space == nil {
		p.Space = NewAddrSpace(nil)
	}
	if len(p.Tactics) != len(p.Insts) {
		p.Tactics = make([]Tactic, len(p.Insts))
	}
	n := len(p.Insts)
	p.s = &pstate{
		site:    make([]bool, n),
		mat:     make([]int32, n),
		written: make([]bool, n),
		reads:   map[[2]int]bool{},
		peeks:   map[[2]int]bool{},
	}
	return nil
}

// find returns the index of the instruction holding addr, or -1.
func (p *Planner) find(addr int64) int {
	// Accesses cluster around the site being planned: try the last hit
	// and its successor before searching.
	if h := p.s.hint; h < len(p.Insts) && int64(p.Insts[h].Addr) <= addr {
		if addr < p.end(h) {
			return h
		}
		if h+1 < len(p.Insts) && int64(p.Insts[h+1].Addr) <= addr && addr < p.end(h+1) {
			p.s.hint = h + 1
			return h + 1
		}
	}
	k := p.search(addr)
	if k >= 0 {
		p.s.hint = k
	}
	return k
}

func (p *Planner) search(addr int64) int {
	k := sort.Search(len(p.Insts), func(k int) bool { return int64(p.Insts[k].Addr) > addr }) - 1
	if k < 0 || addr >= int64(p.Insts[k].Addr)+int64(p.Insts[k].Len()) {
		return -1
	}
	return k
}

func (p *Planner) addr(i int) int64 { return int64(p.Insts[i].Addr) }
func (p *Planner) end(i int) int64  { return int64(p.Insts[i].Addr) + int64(p.Insts[i].Len()) }

// peek returns the current byte at addr.
func (p *Planner) peek(addr int64) (byte, uint8, int, bool) {
	x := p.find(addr)
	if x < 0 {
		return 0, 0, -1, false
	}
	off := addr - p.addr(x)
	cur, st := p.cur(x)
	if cur == nil {
		return p.Insts[x].Bytes()[off], bOrig, x, true
	}
	return cur[off], st[off], x, true
}

// isOrig: the byte holds its original value, unread by any pun, in an
// instruction that may be modified (a pre-site's run: Planner.Run).
func (p *Planner) isOrig(addr int64) bool {
	_, st, x, ok := p.peek(addr)
	return ok && st == bOrig && p.Insts[x].Flags&InstUntouchable == 0
}

// isFree: the byte may be overwritten with anything: filler of a patch, or
// padding, that no pun has read.
func (p *Planner) isFree(addr int64) bool {
	_, st, x, ok := p.peek(addr)
	if !ok {
		return false
	}
	f := p.Insts[x].Flags
	if st&bLock != 0 || f&InstUntouchable != 0 {
		return false
	}
	// Filler is never an instruction's first byte; padding that a branch
	// targets is not padding.
	return st == bFill || st == bOrig && f&InstPadding != 0 && f&InstTarget == 0
}

// materialize gives instruction x current bytes (its original ones) and
// byte states (bOrig), and returns them.
func (p *Planner) materialize(x int) ([]byte, []uint8) {
	if p.s.mat[x] == 0 {
		p.s.mat[x] = 1 + p.s.arena.alloc(p.Insts[x].Bytes())
	}
	return p.cur(x)
}

// cur returns instruction x's current bytes and byte states, nil while
// it is original. The bytes stay where they are (Write.Bytes aliases them).
func (p *Planner) cur(x int) ([]byte, []uint8) {
	m := p.s.mat[x]
	if m == 0 {
		return nil, nil
	}
	return p.s.arena.at(m-1, p.Insts[x].Len())
}

// set writes val at addr as a byte of the given kind. It refuses bytes of
// untouchable instructions, bytes already part of a jump and locked bytes
// whose value would change.
func (p *Planner) set(tx *txn, addr int64, val byte, kind uint8) bool {
	x := p.find(addr)
	if x < 0 || p.Insts[x].Flags&InstUntouchable != 0 {
		return false
	}
	cur, sts := p.materialize(x)
	off := addr - p.addr(x)
	st := sts[off]
	if st&bKind == bJump || st&bLock != 0 && cur[off] != val {
		return false
	}
	tx.undo = append(tx.undo, undoRec{int32(x), uint8(off), cur[off], st})
	cur[off] = val
	sts[off] = kind | st&bLock
	tx.touched = append(tx.touched, x)
	return true
}

// lock marks the byte at addr as read by the patch of reader and returns it.
func (p *Planner) lock(tx *txn, reader int, addr int64) (byte, bool) {
	x := p.find(addr)
	if x < 0 {
		return 0, false
	}
	if x != reader && p.s.site[x] && p.Tactics[x] == TacticNone && !slices.Contains(tx.touched, x) {
		// Reading a site that is still to be patched would lock it.
		return 0, false
	}
	cur, sts := p.materialize(x)
	off := addr - p.addr(x)
	st := sts[off]
	tx.undo = append(tx.undo, undoRec{int32(x), uint8(off), cur[off], st})
	sts[off] = st | bLock
	switch {
	case st&bKind == bOrig || x == reader:
	case cur[off] == p.Insts[x].Bytes()[off]:
		// A byte the patch wrote with its own value: the pun reads the
		// same whether x is patched or not (a jmp rel32's opcode byte).
		tx.peeks = append(tx.peeks, [2]int{reader, x})
	default:
		tx.reads = append(tx.reads, [2]int{reader, x})
	}
	return cur[off], true
}

// newTx returns an empty transaction, reusing the previous one's memory
// (a transaction ends with commit or rollback before the next begins).
func (p *Planner) newTx() *txn {
	t := &p.s.tx
	t.undo, t.stubs, t.touched, t.reads, t.peeks, t.evicted, t.tactics =
		t.undo[:0], t.stubs[:0], t.touched[:0], t.reads[:0], t.peeks[:0], t.evicted[:0], t.tactics[:0]
	return t
}

// undo puts back the byte u recorded.
func (p *Planner) undo(u undoRec) {
	cur, st := p.cur(int(u.x))
	cur[u.off] = u.val
	st[u.off] = u.st
}

func (p *Planner) rollback(tx *txn) {
	for k := len(tx.undo) - 1; k >= 0; k-- {
		p.undo(tx.undo[k])
	}
	for _, st := range tx.stubs {
		p.Space.release(int64(st.Addr))
	}
}

func (p *Planner) setTactic(tx *txn, i int, t Tactic) {
	tx.tactics = append(tx.tactics, struct {
		i int
		t Tactic
	}{i, t})
}

// commit makes tx's changes part of the plan, or, if they make a patch
// depend on an InstNoRead instruction's patch, or an InstNoReadSites
// instruction's patch depend on a site's or evict an instruction, rolls
// them back and returns false.
func (p *Planner) commit(tx *txn) bool {
	// An evicted instruction's jump is read by the patch it was evicted
	// for, so the runtime never restores it: it would run from its
	// trampoline for good.
	if len(tx.evicted) > 0 && p.Insts[p.s.patching].Flags&InstNoReadSites != 0 {
		p.rollback(tx)
		return false
	}
	for _, r := range tx.reads {
		if r[0] == r[1] {
			continue
		}
		// r[0] may be an instruction evicted for the site being patched
		// (a T3 neighbour whose jump is punned): the rule is the site's.
		if p.Insts[r[1]].Flags&InstNoRead != 0 || p.Tactics[r[1]] == TacticTrap ||
			p.Insts[p.s.patching].Flags&InstNoReadSites != 0 && p.s.site[r[1]] && r[1] != p.s.patching {
			p.rollback(tx)
			return false
		}
	}
	for _, x := range tx.touched {
		if !p.s.written[x] {
			p.s.written[x] = true
			cur, _ := p.cur(x)
			p.Writes = append(p.Writes, Write{Addr: p.Insts[x].Addr, Bytes: cur, Inst: x})
		}
	}
	p.Stubs = append(p.Stubs, tx.stubs...)
	for _, r := range tx.reads {
		if r[0] != r[1] && !p.s.reads[r] {
			p.s.reads[r] = true
			p.Reads = append(p.Reads, r)
		}
	}
	for _, r := range tx.peeks {
		if !p.s.peeks[r] {
			p.s.peeks[r] = true
			p.Peeks = append(p.Peeks, r)
		}
	}
	p.Evicted = append(p.Evicted, tx.evicted...)
	for _, t := range tx.tactics {
		p.Tactics[t.i] = t.t
	}
	return true
}

// reach returns the stub starts s from which jmp rel32 reaches target.
func reach(target int64) (int64, int64) {
	return target - StubLen - math.MaxInt32, target - StubLen - math.MinInt32 + 1
}

// window returns the targets [lo, hi) of a jump at q whose rel32 has its m
// low bytes free and the others equal to those of fixed.
func window(q int64, m int, fixed uint32) (int64, int64) {
	from := q + StubLen
	if m >= 4 {
		return from + math.MinInt32, from + math.MaxInt32 + 1
	}
	lo := from + int64(int32(fixed))
	return lo, lo + 1<<(8*m)
}

// planJump chooses the target of a jmp rel32 at q whose rel32 bytes in
// [q+1, freeEnd) are free and the rest read: Near(dst) itself when it lies
// in the window, else a new stub (recorded in tx) that jumps to Near(dst).
// It returns the target and m, the number of free rel32 bytes.
func (p *Planner) planJump(tx *txn, q, freeEnd int64, dst int, reuseOnly bool) (int64, int, bool) {
	lo, hi, near, m, ok := p.jumpWindow(q, freeEnd, dst)
	if !ok {
		return 0, m, false
	}
	if near >= lo && near < hi {
		return near, m, true
	}
	x, ok := p.Space.alloc(lo, hi, constraint{}, reuseOnly)
	if !ok {
		return 0, m, false
	}
	tx.stubs = append(tx.stubs, Stub{Addr: uint64(x), Inst: dst})
	return x, m, true
}

// jumpWindow returns, for a jump as in planJump, the stub window [lo, hi)
// (already cut to what reaches Near(dst)), Near(dst), and m.
func (p *Planner) jumpWindow(q, freeEnd int64, dst int) (lo, hi, near int64, m int, ok bool) {
	m = int(min(max(freeEnd-(q+1), 0), 4))
	var fixed uint32
	for b := m; b < 4; b++ {
		v, _, _, okp := p.peek(q + 1 + int64(b))
		if !okp {
			return 0, 0, 0, m, false
		}
		fixed |= uint32(v) << (8 * b)
	}
	lo, hi = window(q, m, fixed)
	near = int64(p.Near(dst))
	if near >= lo && near < hi {
		return lo, hi, near, m, true
	}
	rlo, rhi := reach(near)
	return max(lo, rlo), min(hi, rhi), near, m, true
}

// punOrder returns the prefix counts to try for a pun at a whose rel32 is
// free up to freeEnd: in order when reusing pages, else those whose new
// stub page would lie closest to pages in use first (fewer chunks).
func (p *Planner) punOrder(i int, a, n, freeEnd int64, reuseOnly bool) []int64 {
	var ks []int64
	for k := int64(0); k < n && k <= int64(len(jumpPrefixes)); k++ {
		ks = append(ks, k)
	}
	if reuseOnly || len(ks) == 1 || freeEnd-a >= StubLen {
		return ks
	}
	dist := make([]int64, len(ks))
	for _, k := range ks {
		dist[k] = math.MaxInt64
		lo, hi, _, _, ok := p.jumpWindow(a+k, freeEnd, i)
		if !ok {
			continue
		}
		if x, ok := p.Space.find(lo, hi, constraint{}, false); ok {
			dist[k] = p.Space.distance(x)
		}
	}
	sort.SliceStable(ks, func(u, v int) bool { return dist[ks[u]] < dist[ks[v]] })
	return ks
}

// writeJump writes e9 at q and the m free rel32 bytes reaching target, and
// locks the read ones for reader.
func (p *Planner) writeJump(tx *txn, reader int, q int64, m int, target int64) bool {
	rel := uint32(target - (q + StubLen))
	if !p.set(tx, q, opJmp32, bJump) {
		return false
	}
	for b := 0; b < 4; b++ {
		v := byte(rel >> (8 * b))
		if b < m {
			if !p.set(tx, q+1+int64(b), v, bJump) {
				return false
			}
			continue
		}
		if got, ok := p.lock(tx, reader, q+1+int64(b)); !ok || got != v {
			return false
		}
	}
	return true
}

func (p *Planner) writePrefixes(tx *txn, a int64, k int) bool {
	for t := 0; t < k; t++ {
		if !p.set(tx, a+int64(t), jumpPrefixes[t], bJump) {
			return false
		}
	}
	return true
}

func (p *Planner) fill(tx *txn, lo, hi int64) bool {
	for a := lo; a < hi; a++ {
		if !p.set(tx, a, opInt3, bFill) {
			return false
		}
	}
	return true
}

// untouched: the instruction has no modified or locked byte.
func (p *Planner) untouched(x int) bool {
	_, sts := p.cur(x)
	for _, st := range sts {
		if st != bOrig {
			return false
		}
	}
	return true
}

// evictable: x may be patched to jump to its relocation trampoline.
func (p *Planner) evictable(x int) bool {
	f := p.Insts[x].Flags
	return f&InstRelocatable != 0 && f&(InstUntouchable|InstPadding) == 0 &&
		p.Tactics[x] == TacticNone && p.untouched(x)
}

// MarkSites tells the planner which instructions will be passed to Patch,
// so that no tactic reads (and so locks) or evicts-with-a-pun the bytes of
// a site still to be patched. PatchAll calls it.
func (p *Planner) MarkSites(sites []int) error {
	if err := p.init(); err != nil {
		return err
	}
	for _, i := range sites {
		if i >= 0 && i < len(p.Insts) {
			p.s.site[i] = true
		}
	}
	return nil
}

// PatchAll patches the given instructions in descending address order
// (the order in which a pun reads already final bytes) and returns, per
// entry of sites, the error of its Patch (nil when patched).
func (p *Planner) PatchAll(sites []int) []error {
	order := make([]int, len(sites))
	for k := range order {
		order[k] = k
	}
	sort.SliceStable(order, func(a, b int) bool {
		return sites[order[a]] > sites[order[b]]
	})
	errs := make([]error, len(sites))
	if err := p.MarkSites(sites); err != nil {
		for k := range errs {
			errs[k] = err
		}
		return errs
	}
	for _, k := range order {
		_, errs[k] = p.Patch(sites[k])
	}
	return errs
}

// start readies the planner for site i and returns the tactic i already
// has (TacticNone: not patched yet).
func (p *Planner) start(i int) (Tactic, error) {
	if err := p.init(); err != nil {
		return TacticNone, err
	}
	if i < 0 || i >= len(p.Insts) {
		return TacticNone, &PatchError{Inst: i, Err: ErrBadIndex}
	}
	return p.Tactics[i], nil
}

// Patch redirects instruction i to Near(i) and returns the tactic used.
// If i was already patched (evicted by a neighbour's tactic, or patched
// before) it returns that tactic again. Errors are *PatchError.
func (p *Planner) Patch(i int) (Tactic, error) {
	if t, err := p.start(i); err != nil || t != TacticNone {
		return t, err
	}
	p.s.site[i] = true
	p.s.patching = i
	in := &p.Insts[i]
	fail := func(err error) (Tactic, error) {
		// A site that cannot be patched keeps its bytes: others may read them.
		p.s.site[i] = false
		return TacticNone, &PatchError{Inst: i, Addr: in.Addr, Err: err}
	}
	if in.Flags&InstUntouchable != 0 {
		return fail(ErrUntouchable)
	}
	if _, st := p.cur(i); st != nil && st[0] != bOrig {
		return fail(ErrLocked)
	}
	if p.ShortJumps && !p.NoHops && p.tryShort(i) {
		return TacticT3, nil
	}
	for _, reuse := range []bool{true, false} {
		if t, ok := p.tryPun(i, reuse); ok {
			return t, nil
		}
	}
	if in.Len() >= StubLen {
		return fail(ErrOutOfRange)
	}
	if t, ok := p.trySuccessor(i); ok {
		return t, nil
	}
	if !p.NoHops && p.tryNeighbour(i) {
		return TacticT3, nil
	}
	return fail(ErrTooShort)
}

// Release drops what the planner keeps to plan (byte states, the
// transaction's buffers, the read maps) once every site is patched;
// Writes, Stubs, Reads, Peeks, Evicted and Tactics stay. Patch and Trap
// must not be called after it.
func (p *Planner) Release() {
	p.s = nil
}

// Trap is the fallback for a site Patch left unpatched: an int3 at its
// first byte, which the runtime's SIGTRAP handler sends to the site's
// trampoline, Near(i) (a signal per execution: slow, so only where no
// jump fits).
// The byte must be the original one and unread by any pun (a read byte
// would change a pun's rel32); the rest of the instruction stays. No
// later pun may read it either, as of an InstNoRead instruction: the
// runtime must always be able to restore it.
func (p *Planner) Trap(i int) (Tactic, error) {
	if t, err := p.start(i); err != nil || t != TacticNone {
		return t, err
	}
	in := &p.Insts[i]
	if in.Flags&InstUntouchable != 0 {
		return TacticNone, &PatchError{Inst: i, Addr: in.Addr, Err: ErrUntouchable}
	}
	if !p.isOrig(int64(in.Addr)) {
		return TacticNone, &PatchError{Inst: i, Addr: in.Addr, Err: ErrLocked}
	}
	p.s.site[i] = true
	p.s.patching = i
	tx := p.newTx()
	if !p.set(tx, int64(in.Addr), 0xcc, bJump) {
		p.rollback(tx)
		p.s.site[i] = false
		return TacticNone, &PatchError{Inst: i, Addr: in.Addr, Err: ErrLocked}
	}
	p.setTactic(tx, i, TacticTrap)
	if !p.commit(tx) {
		p.s.site[i] = false
		return TacticNone, &PatchError{Inst: i, Addr: in.Addr, Err: ErrLocked}
	}
	p.Near(i) // no jump asks for it, but the trap goes there
	return TacticTrap, nil
}

// tryShort (Planner.ShortJumps): a site whose 5-byte jump would straddle
// an aligned 16-byte word (it starts at byte 12, 13 or 14 of one) gets a
// 2-byte jmp rel8 instead, to a jmp rel32 in free bytes (padding) within
// reach: T3 without eviction, and without filling the rest of the site,
// so that its patch is the two bytes alone, which one store writes and
// undoes (the runtime's off-switch). Free bytes only: no neighbour is
// evicted for it.
func (p *Planner) tryShort(i int) bool {
	a, n := p.addr(i), int64(p.Insts[i].Len())
	if n < 2 || a&15 < 12 || a&15 == 15 {
		return false
	}
	from := a + 2
	budget := t3Budget
	for pt := from - 128; pt <= from+127; pt++ {
		if pt+StubLen > a && pt < a+n {
			continue
		}
		run := 0
		for run < StubLen && p.isFree(pt+int64(run)) && !p.padReserved(pt+int64(run)) {
			run++
		}
		if run < StubLen {
			continue
		}
		if budget--; budget < 0 {
			return false
		}
		if p.t3fill(i, pt, -1, false) {
			return true
		}
	}
	return false
}

// tryPun: B1, P and B2 (with 0..n-1 prefixes): a jump at the site whose
// rel32 bytes inside the site (and in padding after it) are free and the
// rest read from the successor.
func (p *Planner) tryPun(i int, reuseOnly bool) (Tactic, bool) {
	a, n := p.addr(i), int64(p.Insts[i].Len())
	freeEnd := a + n
	var runEnd int64
	if p.Run != nil {
		runEnd = p.Run(i)
	}
	for freeEnd < a+n+4 && (p.isFree(freeEnd) || freeEnd < runEnd && p.isOrig(freeEnd)) {
		freeEnd++
	}
	for _, k := range p.punOrder(i, a, n, freeEnd, reuseOnly) {
		q := a + k
		tx := p.newTx()
		target, m, ok := p.planJump(tx, q, freeEnd, i, reuseOnly)
		if ok && p.writePrefixes(tx, a, int(k)) && p.writeJump(tx, i, q, m, target) &&
			p.fill(tx, q+StubLen, a+n) {
			t := TacticB2
			switch {
			case q+1+int64(m) > a+n:
				t = TacticP
				for ad := a + n; ad < q+1+int64(m); ad++ {
					if x := p.find(ad); x != i {
						tx.reads = append(tx.reads, [2]int{i, x})
					}
				}
			case m == 4:
				t = TacticB1
			}
			p.setTactic(tx, i, t)
			if p.commit(tx) {
				return t, true
			}
			continue
		}
		p.rollback(tx)
	}
	return TacticNone, false
}

// trySuccessor: T1/T2. The successor j is evicted: its first byte becomes
// e9 and its rel32 bytes are chosen jointly with the site's pun, which
// reads them.
func (p *Planner) trySuccessor(i int) (Tactic, bool) {
	a, n := p.addr(i), int64(p.Insts[i].Len())
	// The successor: the instruction after the site and any free padding.
	padEnd := a + n
	for padEnd < a+n+4 && p.isFree(padEnd) {
		padEnd++
	}
	j := p.find(padEnd)
	if j < 0 || p.addr(j) != padEnd {
		return TacticNone, false
	}
	repatch := p.repatchable(j)
	if !repatch && (!p.evictable(j) || p.s.site[j]) {
		return TacticNone, false
	}
	b, lj := p.addr(j), p.Insts[j].Len()
	nearI := int64(p.Near(i))
	for k := int64(0); k < n && k <= int64(len(jumpPrefixes)); k++ {
		q := a + k
		m := int(padEnd - q - 1) // site rel32 bytes inside the site and padding
		if m >= 4 {
			continue
		}
		s := min(3-m, lj-1)   // site rel32 bytes = j's rel32 bytes (shared)
		f := 3 - m - s        // site rel32 bytes read beyond j
		g := min(4, lj-1) - s // j's rel32 bytes it chooses alone
		h := 4 - s - g        // j's rel32 bytes read beyond j
		end := b + int64(lj)  // first byte after j
		var fixedI, fixedJ uint32
		okRead := true
		for t := 0; t < h; t++ {
			v, _, _, ok := p.peek(end + int64(t))
			okRead = okRead && ok
			fixedJ |= uint32(v) << (8 * (s + g + t))
			if t < f {
				fixedI |= uint32(v) << (8 * (m + 1 + s + t))
			}
		}
		if !okRead {
			continue
		}
		siteLo, siteHi := window(q, 4-f, fixedI)
		rlo, rhi := reach(nearI)
		siteLo, siteHi = max(siteLo, rlo), min(siteHi, rhi)
		fromI := q + StubLen
		cI := constraint{base: fromI, period: 1 << (8 * (m + 1)), off: opJmp32 << (8 * m), unit: 1 << (8 * m)}
		jLo, jHi := window(b, 4-h, fixedJ)
		nearJ := int64(-1)
		lo := siteLo
		for attempt := 0; attempt < 4 && lo < siteHi; attempt++ {
			tx := p.newTx()
			if repatch {
				p.unpatch(tx, j)
			}
			var ti int64
			if attempt == 0 && nearI >= siteLo && nearI < siteHi && cI.ok(nearI) {
				ti = nearI
			} else {
				x, ok := p.Space.alloc(lo, siteHi, cI, false)
				if !ok {
					p.rollback(tx) // undoes unpatch
					break
				}
				ti = x
				tx.stubs = append(tx.stubs, Stub{Addr: uint64(x), Inst: i})
			}
			relI := uint32(ti - fromI)
			shared := int64(relI>>(8*(m+1))) & (1<<(8*s) - 1)
			cJ := constraint{base: b + StubLen, period: 1 << (8 * s), off: shared, unit: 1}
			if nearJ < 0 {
				nearJ = int64(p.Near(j))
			}
			var tj int64
			if nearJ >= jLo && nearJ < jHi && cJ.ok(nearJ) {
				tj = nearJ
			} else {
				rl, rh := reach(nearJ)
				x, ok := p.Space.alloc(max(jLo, rl), min(jHi, rh), cJ, false)
				if !ok {
					p.rollback(tx)
					lo = ti - mod(ti-fromI, cI.period) + cI.period
					continue
				}
				tj = x
				tx.stubs = append(tx.stubs, Stub{Addr: uint64(x), Inst: j})
			}
			ok := p.writePrefixes(tx, a, int(k)) &&
				p.writeJump(tx, j, b, s+g, tj) && p.fill(tx, b+StubLen, end) &&
				p.writeJump(tx, i, q, m, ti)
			for ad := a + n; ad < padEnd; ad++ {
				tx.reads = append(tx.reads, [2]int{i, p.find(ad)})
			}
			if ok {
				t := TacticT1
				tj := TacticB1
				if h > 0 {
					t, tj = TacticT2, TacticB2
				}
				p.setTactic(tx, i, t)
				if !repatch {
					p.setTactic(tx, j, tj)
					tx.evicted = append(tx.evicted, j)
				}
				if p.commit(tx) {
					return t, true
				}
				break // it reads an InstNoRead patch, at any address
			}
			p.rollback(tx)
			break
		}
	}
	return TacticNone, false
}

// t3Budget bounds the T3 placements tried per site.
const t3Budget = 64

// tryNeighbour: T3. The site becomes `eb rel8` to a jump placed in free
// bytes or in an evicted neighbour. A one-byte site reads its rel8 from
// the successor's first byte.
func (p *Planner) tryNeighbour(i int) bool {
	a, n := p.addr(i), int64(p.Insts[i].Len())
	if n == 1 && p.isFree(a+1) {
		// A one-byte site followed by padding: the rel8 goes into the
		// padding, so it is free.
		n = 2
	}
	from := a + 2
	ok := func(pt int64) bool {
		return pt >= from-128 && pt <= from+127 && (pt+StubLen <= a || pt >= a+n)
	}
	if n == 1 {
		v, _, _, okv := p.peek(a + 1)
		if !okv {
			return false
		}
		pt := from + int64(int8(v))
		if !ok(pt) {
			return false
		}
		if p.isFree(pt) {
			return p.t3(i, pt, -1)
		}
		x := p.find(pt)
		return x >= 0 && x != i && pt > p.addr(x) && p.evictable(x) && p.t3(i, pt, x)
	}
	// Free bytes first (no eviction), longest runs first.
	type cand struct {
		pt  int64
		run int
	}
	var cands []cand
	for pt := from - 128; pt <= from+127; pt++ {
		if !ok(pt) || !p.isFree(pt) || p.padReserved(pt) {
			continue
		}
		r := 1
		for r < StubLen && p.isFree(pt+int64(r)) && !p.padReserved(pt+int64(r)) {
			r++
		}
		cands = append(cands, cand{pt, r})
	}
	sort.SliceStable(cands, func(u, v int) bool { return cands[u].run > cands[v].run })
	// Bounded effort: a hopeless site (say in data decoded as code) must
	// not cost a search over every neighbour and offset.
	budget := t3Budget
	for _, c := range cands {
		if budget--; budget < 0 {
			return false
		}
		if p.t3(i, c.pt, -1) {
			return true
		}
	}
	// Evict a neighbour: forward ones first, then backward.
	lo, hi := p.find(from-128), p.find(from+127)
	if lo < 0 {
		lo = sort.Search(len(p.Insts), func(k int) bool { return p.addr(k) >= from-128 })
	}
	if hi < 0 {
		hi = sort.Search(len(p.Insts), func(k int) bool { return p.addr(k) > from+127 }) - 1
	}
	var xs []int
	for x := i + 1; x <= hi; x++ {
		xs = append(xs, x)
	}
	for x := i - 1; x >= lo; x-- {
		xs = append(xs, x)
	}
	for _, x := range xs {
		if !p.evictable(x) {
			continue
		}
		for o := int64(p.Insts[x].Len()) - 1; o >= 1; o-- {
			pt := p.addr(x) + o
			if !ok(pt) {
				continue
			}
			if budget--; budget < 0 {
				return false
			}
			if p.t3(i, pt, x) {
				return true
			}
		}
	}
	return false
}

// t3 writes the site's short jump to pt and a jump at pt to Near(i): in
// free bytes when x < 0, else in x, which is evicted with its own jump
// before pt.
func (p *Planner) t3(i int, pt int64, x int) bool {
	return p.t3fill(i, pt, x, true)
}

// t3fill is t3; without fill the site's bytes after its short jump stay
// as they were (nothing runs them).
func (p *Planner) t3fill(i int, pt int64, x int, fill bool) bool {
	a, n := p.addr(i), int64(p.Insts[i].Len())
	tx := p.newTx()
	okAll := p.set(tx, a, opJmp8, bJump)
	switch {
	case okAll && n == 1 && p.isFree(a+1):
		okAll = p.set(tx, a+1, byte(int8(pt-(a+2))), bJump)
		tx.reads = append(tx.reads, [2]int{i, p.find(a + 1)})
	case okAll && n == 1:
		_, okAll = p.lock(tx, i, a+1)
	case okAll:
		okAll = p.set(tx, a+1, byte(int8(pt-(a+2))), bJump) && (!fill || p.fill(tx, a+2, a+n))
	}
	if !okAll {
		p.rollback(tx)
		return false
	}
	// The host jump: free bytes after pt (or the rest of x).
	freeEnd := pt + 1
	if x < 0 {
		for freeEnd < pt+StubLen && p.isFree(freeEnd) {
			freeEnd++
		}
	} else {
		freeEnd = p.end(x)
	}
	reader := p.find(pt)
	target, m, okj := p.planJump(tx, pt, freeEnd, i, false)
	if !okj || !p.writeJump(tx, reader, pt, m, target) {
		p.rollback(tx)
		return false
	}
	for ad := pt; ad < pt+1+int64(m); ad++ {
		tx.reads = append(tx.reads, [2]int{i, p.find(ad)})
	}
	if x >= 0 {
		// x's own jump, before pt, reading what lies from pt on.
		xa := p.addr(x)
		done := false
		for k := int64(0); k < pt-xa && k <= int64(len(jumpPrefixes)) && !done; k++ {
			q := xa + k
			mark, nstubs, ntouched := len(tx.undo), len(tx.stubs), len(tx.touched)
			tq, mq, okq := p.planJump(tx, q, pt, x, false)
			if okq && p.writePrefixes(tx, xa, int(k)) && p.writeJump(tx, x, q, mq, tq) &&
				p.fill(tx, q+StubLen, pt) && p.fill(tx, pt+StubLen, p.end(x)) {
				t := TacticB2
				if mq == 4 {
					t = TacticB1
				}
				p.setTactic(tx, x, t)
				tx.evicted = append(tx.evicted, x)
				done = true
				break
			}
			// Undo this prefix count only.
			for u := len(tx.undo) - 1; u >= mark; u-- {
				p.undo(tx.undo[u])
			}
			tx.undo = tx.undo[:mark]
			for _, st := range tx.stubs[nstubs:] {
				p.Space.release(int64(st.Addr))
			}
			tx.stubs = tx.stubs[:nstubs]
			tx.touched = tx.touched[:ntouched]
		}
		if !done {
			p.rollback(tx)
			return false
		}
	}
	p.setTactic(tx, i, TacticT3)
	return p.commit(tx)
}

// padReserved: the byte is padding that a short site still to be patched
// just before it may need for tactic P.
func (p *Planner) padReserved(addr int64) bool {
	for d := int64(1); d <= 4; d++ {
		y := p.find(addr - d)
		if y < 0 {
			return false
		}
		if p.Insts[y].Flags&InstPadding != 0 {
			continue
		}
		return p.s.site[y] && p.Tactics[y] == TacticNone && p.Insts[y].Len() < StubLen &&
			p.end(y)+4 > addr
	}
	return false
}

// repatchable: j is a site already patched by a plain B1 jump that nothing
// reads or jumps into, so its rel32 may be chosen again (jointly with the
// pun of the instruction before it) at no run-time cost.
func (p *Planner) repatchable(j int) bool {
	_, sts := p.cur(j)
	if p.Tactics[j] != TacticB1 || !p.s.site[j] || sts == nil {
		return false
	}
	for off, st := range sts {
		if off < StubLen && st != bJump || off >= StubLen && st != bFill {
			return false
		}
	}
	return true
}

// unpatch gives j's bytes back their original state within tx.
func (p *Planner) unpatch(tx *txn, j int) {
	cur, sts := p.cur(j)
	for off := range sts {
		tx.undo = append(tx.undo, undoRec{int32(j), uint8(off), cur[off], sts[off]})
		cur[off] = p.Insts[j].Bytes()[off]
		sts[off] = bOrig
	}
	tx.touched = append(tx.touched, j)
}
