package paths

import (
	"fmt"

	"github.com/stint-project/stint/formats"
)

// The runtime's call stack and search depth (runtime/src/stint.h,
// PATHS_STACK and PATHS_SEARCH): the decoder keeps the same ring of 256
// with an 8-bit top and no depth, so that it compresses and unwinds
// exactly as the runtime did, a comparison with a slot no call filled
// included.
const (
	stackSize   = 256
	stackSearch = 16
	asyncMax    = 8
)

// saved is a thread's state when a signal handler interrupted it.
type saved struct {
	pos     uint64
	known   bool
	outside bool
	rlen    int // the depth of the real call stack
	// back: the walk had passed where the signal landed; the stacks as
	// they were there (for a handler that resumes the thread elsewhere,
	// which comes back to that place later)
	back *walkRun
}

// walkRun is a straight run walked without a packet, from lo to the
// direct transfer or ret without a probe at hi, and the stacks before
// that transfer.
type walkRun struct {
	lo, hi uint64
	top    uint8
	rlen   int
}

// thread decodes one thread's packets while it walks the code: the
// runtime's state machine (runtime/src/paths.c) run backwards.
type thread struct {
	d          *Decoder
	tid        uint32
	pr         formats.PacketReader
	pending    formats.Packet // a packet read ahead (when hasPending)
	hasPending bool
	bits       uint64 // outcome bits not yet used, oldest in bit nbits-1
	nbits      int
	pos        uint64  // run-time address of the next instruction
	m          *module // the module of the last lookup
	bi         int     // the index in m's map of the next branch at or after pos; -1: look it up
	known      bool    // pos is where the thread is
	// lostAt: the branch without a probe where the walk lost the
	// thread's place, until it finds it again (0: not lost there)
	lostAt  uint64
	outside bool   // the last transfer left instrumented code
	left    uint64 // where it went (fast)
	stack   [stackSize]uint64
	// stackBi: of each entry of stack a call of fast's pushed, the index
	// of the branch at or after it in the call's module; -1: look it up
	stackBi [stackSize]int32
	top     uint8
	async   []saved
	// rstack is the real call stack: every call the walk took, popped by
	// every return. Unlike the runtime's ring (stack), it sees calls
	// without a probe, and it tells where a ret without one goes.
	rstack []uint64
	idle   int // transfers walked since the last packet
	// walked: the straight runs (from, to the transfer) of the direct
	// transfers and inferred rets walked since the last bit or packet
	// taken, a ring of the last len of them: a signal that landed there
	// came before the walk got to the packet that says so
	walked  [16]walkRun
	nwalked int
	tail    bool    // finish is walking to the tail
	s       *Stream // where events go
	lastPos int     // the packet position of the last event, and its time
	lastT   uint64
	emitted int
	chunk   int           // the chunk being read, for errors
	cache   [1024]indexed // branch indices of destinations (index)
	waiting callSite      // a call chain's event waiting for its destination (calls.go)
	sitemod *module       // a call chain's: the module SITE packets index (calls.go)
}

func (t *thread) push(a uint64) {
	t.top++
	t.stack[t.top], t.stackBi[t.top] = a, -1
}

func (t *thread) pop(n int) {
	t.top -= uint8(n)
}

// rret pops the real call stack down to and including a, if it holds a
// (a return to an older frame: a longjmp or exception skipped some).
func (t *thread) rret(a uint64) {
	for k := len(t.rstack) - 1; k >= 0 && k >= len(t.rstack)-stackSearch; k-- {
		if t.rstack[k] == a {
			t.rstack = t.rstack[:k]
			return
		}
	}
}

// rpush pushes a return address on the real call stack (bounded: the
// oldest half goes when it is full).
func (t *thread) rpush(a uint64) {
	if len(t.rstack) >= 1<<20 {
		t.rstack = append(t.rstack[:0], t.rstack[len(t.rstack)/2:]...)
	}
	t.rstack = append(t.rstack, a)
}

func (t *thread) unwind(a uint64) {
	for k := 0; k < stackSearch; k++ {
		if t.stack[t.top-uint8(k)] == a {
			t.pop(k + 1)
			return
		}
	}
}

// next returns the next packet; errStarved at the end of the thread's
// packets so far (its current chunk).
func (t *thread) next() (formats.Packet, error) {
	for {
		var p formats.Packet
		if t.hasPending {
			p = t.pending
			t.hasPending = false
		} else {
			q, ok, err := t.pr.Next()
			if err != nil {
				return q, fmt.Errorf("chunk %d: %w", t.chunk, err)
			}
			if !ok {
				return q, errStarved
			}
			p = q
			t.idle = 0
		}
		if p.Kind == formats.PacketPSB && t.known && !t.outside {
			// read where the runtime wrote it: it emptied its stack
			t.stack, t.top = [stackSize]uint64{}, 0
			continue
		}
		if p.Kind == formats.PacketSyncCall && t.known && !t.outside {
			// a function entered with a return address outside
			// instrumented code, which the walk followed already (a new
			// thread's start, a tail call); it places only a walk that
			// left unseen (through a ret without a probe)
			continue
		}
		if p.Kind != formats.PacketAsync {
			t.nwalked = 0
		}
		return p, nil
	}
}

func (t *thread) unread(p formats.Packet) { t.pending, t.hasPending = p, true }

// more reports whether the walk has a packet or a bit left to go on
// with (or is walking to the tail, where finish says how far).
func (t *thread) more() bool { return t.tail || t.nbits > 0 || t.hasPending || t.pr.More() }

// errResync says the walk met a packet that places the thread anew (a
// LOST, or a SYNC where the walk did not expect one): place() takes it.
var errResync = fmt.Errorf("resynchronise")

// midWalk takes a packet met where the walk wanted a bit or a
// destination, when it is one that places the thread anew: a LOST, a
// SYNC (the place() loop takes them), or an ASYNC: a signal handler that
// interrupted the thread before this branch's packet was appended (in a
// trampoline, before its probe ran): the walk goes to the handler and,
// at its ASYNC_END, comes back to the branch. errResync then; nil for
// any other packet, which the caller reads.
func (t *thread) midWalk(p formats.Packet) error {
	switch p.Kind {
	case formats.PacketLost, formats.PacketSync, formats.PacketSyncCall:
		t.unread(p)
		t.known = false
		return errResync
	case formats.PacketAsync:
		if err := t.asyncEnter(p); err != nil {
			return err
		}
		return errResync
	}
	return nil
}

// errStarved says the thread's packets ran out where the walk needs one:
// the next chunk continues (or the thread ended there).
var errStarved = fmt.Errorf("out of packets")

// bit returns the next outcome bit.
func (t *thread) bit(what string, at uint64) (bool, error) {
	if t.nbits == 0 {
		p, err := t.next()
		if err != nil {
			return false, err
		}
		if err := t.midWalk(p); err != nil {
			return false, err
		}
		if p.Kind != formats.PacketTNT {
			return false, t.errf("%s at %#x needs an outcome bit, the packet is %v", what, at, p.Kind)
		}
		t.bits, t.nbits = p.Bits, p.N
	}
	t.nbits--
	t.nwalked = 0
	return t.bits>>t.nbits&1 == 1, nil
}

// walk notes a straight run from lo to the transfer at hi, walked
// without a packet.
func (t *thread) walk(lo, hi uint64) {
	t.walked[t.nwalked%len(t.walked)] = walkRun{lo, hi, t.top, len(t.rstack)}
	t.nwalked++
}

// passed returns the run walked since the last bit or packet that a
// lies on, or nil.
func (t *thread) passed(a uint64) *walkRun {
	for k := 0; k < min(t.nwalked, len(t.walked)); k++ {
		if r := &t.walked[k]; a >= r.lo && a <= r.hi {
			rr := *r
			return &rr
		}
	}
	return nil
}

func (t *thread) errf(format string, args ...any) error {
	return fmt.Errorf("thread %d, chunk %d, packet at %d: %s", t.tid, t.chunk, t.pr.Pos(), fmt.Sprintf(format, args...))
}

// run decodes until it has emitted at least max events (nil) or the
// thread's packets run out (errStarved).
func (t *thread) run(max int) error {
	if t.d.calls {
		return t.runCalls(max)
	}
	for start := t.emitted; t.emitted-start < max; {
		if !t.known || t.outside {
			if err := t.place(); err != nil {
				return err
			}
			continue
		}
		n := t.emitted
		if t.fast(max - (n - start)); t.emitted != n {
			continue // it may have left instrumented code
		}
		if err := t.step(); err != nil && err != errResync {
			return err
		}
	}
	return nil
}

// out emits an event into the stream's batch, timed by its packet's
// place in the chunk.
func (t *thread) out(k formats.Kind, src, dst uint64) error {
	t.emitted++
	s := t.s
	if s.d.only != 0 && s.d.only&(1<<k) == 0 {
		return nil
	}
	tm := t.time()
	n := len(s.buf)
	if n == cap(s.buf) {
		s.buf = append(s.buf, formats.Event{})
	} else {
		s.buf = s.buf[:n+1]
	}
	s.d.fill(&s.buf[n], t.m, k, t.tid, tm, src, dst)
	return nil
}

// place reads packets until the thread's position is known again: a
// SYNC, PSB or ASYNC, or (outside) any other packet, which means the
// thread came back to the return address on top of the stack. A walk
// lost at a branch without a probe skips packets until then.
func (t *thread) place() error {
	p, err := t.next()
	if err != nil {
		return err
	}
	switch p.Kind {
	case formats.PacketSync:
		t.setPos(p.Addr)
		t.known, t.outside, t.lostAt = true, false, 0
	case formats.PacketSyncCall:
		t.setPos(p.Addr)
		t.known, t.outside, t.lostAt = true, false, 0
		t.rpush(p.At)
	case formats.PacketAsync:
		return t.asyncEnter(p)
	case formats.PacketLost:
		t.lost()
	case formats.PacketAsyncTo:
		if len(t.async) == 0 {
			return t.errf("a signal handler's return without its start")
		}
		t.unwind(p.Addr)
		t.handlerReturn(p) // a place, wherever the walk was
	case formats.PacketPSB:
		if t.known && t.stack[t.top] != 0 {
			// outside: the thread came back first (a silent resume probe)
			t.back(p)
			return nil
		}
		// the place the walk lost at a branch without a probe, found
		// again
		t.setPos(p.Addr)
		if !t.known {
			t.d.resynced++
		}
		t.known, t.outside, t.lostAt = true, false, 0
		t.stack, t.top = [stackSize]uint64{}, 0
		t.async, t.rstack = t.async[:0], t.rstack[:0]
	default:
		if !t.known && t.lostAt != 0 {
			t.d.skipped++ // until the next SYNC or PSB
			return nil
		}
		if !t.known || t.stack[t.top] == 0 {
			return t.errf("%v where the thread's place is unknown", p.Kind)
		}
		t.back(p)
	}
	return nil
}

// back takes an outside walk back to the return address on top of the
// stack, where the thread came back before packet p.
func (t *thread) back(p formats.Packet) {
	t.setPos(t.stack[t.top])
	t.pop(1)
	t.rret(t.pos)
	t.outside = false
	t.unread(p)
}

func (t *thread) lost() {
	t.known, t.outside, t.nbits = false, false, 0
	t.stack, t.top = [stackSize]uint64{}, 0
	t.async = t.async[:0]
	t.rstack = t.rstack[:0]
	t.d.lost++
}

// asyncEnter: a signal handler at p.Addr interrupted the thread at
// p.At (0: right after its last event), where the walk goes first.
func (t *thread) asyncEnter(p formats.Packet) error {
	// a signal the walk has passed (it went on through direct transfers
	// and rets without probes to the branch that needed this packet)
	// stays where the walk is: its events come after those
	var back *walkRun
	if p.At != 0 && t.known && !t.outside {
		if back = t.passed(p.At); back == nil {
			if err := t.walkTo(p.At); err != nil {
				return err
			}
		}
	}
	t.nwalked = 0
	if len(t.async) >= asyncMax {
		return t.errf("more than %d nested signal handlers", asyncMax)
	}
	t.async = append(t.async, saved{t.pos, t.known, t.outside, len(t.rstack), back})
	t.setPos(p.Addr)
	t.known, t.outside = true, false
	return nil
}

// walkTo follows the code from the current place to a, through direct
// jmps and calls only (it is where a signal interrupted the thread).
func (t *thread) walkTo(a uint64) error {
	for guard := 0; guard < 1<<20; guard++ {
		if t.pos == a {
			return nil
		}
		m, br, err := t.branch()
		if err != nil {
			return err
		}
		at := m.Base + br.Addr
		if a >= t.pos && a <= at {
			t.setPos(a)
			return nil
		}
		switch br.Kind {
		case formats.BrJmp:
			if err := t.out(formats.KindJmp, at, m.Base+br.Target); err != nil {
				return err
			}
			t.goTarget(m)
		case formats.BrCall:
			if err := t.out(formats.KindCall, at, m.Base+br.Target); err != nil {
				return err
			}
			if br.Flags&formats.BranchProbed != 0 {
				t.push(at + uint64(br.Len))
			}
			t.rpush(at + uint64(br.Len))
			t.goTarget(m)
		default:
			return t.errf("a signal at %#x, past the %v at %#x", a, br.Kind, at)
		}
	}
	return t.errf("no way to %#x", a)
}

// branch returns the next control transfer at or after the position:
// known already after a direct transfer (goTarget, goNext), else looked
// up, in the module of the last lookup first.
func (t *thread) branch() (*module, *formats.Branch, error) {
	if t.bi < 0 {
		m := t.m
		if m == nil || !m.inText(t.pos) {
			var in bool
			if m, in = t.d.mods.inside(t.pos); !in {
				return nil, nil, t.errf("at %#x, outside every branch map", t.pos)
			}
		}
		t.m, t.bi = m, t.index(m, t.pos)
	}
	if t.bi >= len(t.m.m.Branches) {
		return nil, nil, t.errf("no branch after %#x in %s", t.pos, t.m.Path)
	}
	return t.m, &t.m.m.Branches[t.bi], nil
}

// setPos puts the thread at a: its next branch is looked up.
func (t *thread) setPos(a uint64) { t.pos, t.bi = a, -1 }

// goTarget follows the direct branch t.bi of m to its target.
func (t *thread) goTarget(m *module) {
	br := &m.m.Branches[t.bi]
	t.pos = m.Base + br.Target
	t.bi = int(m.tgt[t.bi])
}

// goNext falls through the branch t.bi of m, to next.
func (t *thread) goNext(m *module, next uint64) {
	t.pos = next
	t.bi++
}
