package paths

import (
	"errors"
	"math/bits"

	"github.com/stint-project/stint/formats"
)

// maxIdle bounds the transfers the walk takes without a packet: a loop
// of direct jmps and calls alone never ends.
const maxIdle = 1 << 22

// step walks from the position to the next control transfer and takes
// it, with the packets it needs. On errStarved nothing has changed: the
// step is taken again once more packets come.
func (t *thread) step() error {
	m, br, err := t.branch()
	if err != nil {
		return err
	}
	if t.idle++; t.idle > maxIdle {
		return t.errf("%d transfers walked without a packet (a loop with no conditional branch or return in it?)", maxIdle)
	}
	at := m.Base + br.Addr
	next := at + uint64(br.Len)
	probed := br.Flags&formats.BranchProbed != 0
	if implied := br.Kind == formats.BrJmp || br.Kind == formats.BrCall || br.Kind == formats.BrRet && !probed; implied {
		if !t.more() {
			// past the last packet so far: whether the thread got here
			// is for the next chunk, or its tail (finish), to say
			return errStarved
		}
		t.walk(t.pos, at)
	}
	switch br.Kind {
	case formats.BrJmp:
		t.goTarget(m)
		return t.out(formats.KindJmp, at, t.pos)
	case formats.BrCall:
		if probed {
			t.push(next)
		}
		t.rpush(next)
		t.goTarget(m)
		return t.out(formats.KindCall, at, t.pos)
	}
	if br.Kind == formats.BrMark {
		return t.mark(m, br, at, next)
	}
	if !probed {
		if br.Kind == formats.BrJcc && br.Flags&formats.BranchMarked != 0 {
			return t.markedJcc(m, br, at, next)
		}
		if n := len(t.rstack); br.Kind == formats.BrRet && n > 0 {
			// a ret without a probe: it went where the real call stack
			// says (the runtime did not see it: its stack stays)
			t.d.inferred++
			dst := t.rstack[n-1]
			t.rstack = t.rstack[:n-1]
			t.leave(dst)
			return t.out(formats.KindRet, at, dst)
		}
		// its outcome is unknown until the next SYNC
		t.unprobed(br, at)
		return nil
	}
	switch br.Kind {
	case formats.BrJcc:
		taken, err := t.bit("the jcc", at)
		if err != nil {
			return err
		}
		return t.jcc(m, taken, at, next)
	case formats.BrRet:
		return t.ret(at)
	case formats.BrIndJmp, formats.BrIndCall:
		if br.Flags&formats.BranchPredicted != 0 {
			return t.predicted(m, br, at)
		}
		p, err := t.next()
		if err != nil {
			return err
		}
		if err := t.midWalk(p); err != nil {
			return err
		}
		if p.Kind != formats.PacketTIP {
			return t.errf("the %v at %#x needs a destination, the packet is %v", br.Kind, at, p.Kind)
		}
		return t.indirect(br, at, next, p.Addr)
	}
	return t.errf("branch kind %v", br.Kind)
}

// indirect takes the indirect branch br at at (its next instruction
// next) to dst.
func (t *thread) indirect(br *formats.Branch, at, next, dst uint64) error {
	if br.Flags&formats.BranchSwitch != 0 {
		t.rstack = t.rstack[:0] // another stack: its frames were not walked
	}
	k := formats.KindIndJmp
	if br.Kind == formats.BrIndCall {
		k = formats.KindIndCall
		t.push(next)
		t.rpush(next)
	}
	t.leave(dst)
	return t.out(k, at, dst)
}

// predicted takes the predicted indirect jmp br at at: bit 1 when it
// went to its likely destination, else a TIP (which comes after the
// bits pending before it, as a ret's does).
func (t *thread) predicted(m *module, br *formats.Branch, at uint64) error {
	p, got, err := t.bitsOr()
	if err != nil {
		return err
	}
	if got {
		if p.Kind == formats.PacketTIP {
			return t.indirect(br, at, 0, p.Addr)
		}
		if err := t.midWalk(p); err != nil {
			return err
		}
		return t.errf("the %v at %#x needs a bit or a destination, the packet is %v", br.Kind, at, p.Kind)
	}
	taken, err := t.bit("the indirect jmp", at)
	if err != nil {
		return err
	}
	if !taken {
		return t.errf("the predicted %v at %#x: bit 0", br.Kind, at)
	}
	if br.Flags&formats.BranchSwitch != 0 {
		t.rstack = t.rstack[:0]
	}
	t.goTarget(m)
	return t.out(formats.KindIndJmp, at, t.pos)
}

// ret takes the ret at at: a bit when the runtime's stack had its
// destination on top, else a TIP (or ASYNC_END: a signal handler's
// return to the restorer).
func (t *thread) ret(at uint64) error {
	p, got, err := t.bitsOr()
	if err != nil {
		return err
	}
	if got {
		switch p.Kind {
		case formats.PacketTIP:
			t.unwind(p.Addr)
			t.rret(p.Addr)
			t.leave(p.Addr)
			return t.out(formats.KindRet, at, p.Addr)
		case formats.PacketAsyncEnd, formats.PacketAsyncTo:
			if len(t.async) == 0 {
				return t.errf("a signal handler's return without its start")
			}
			t.unwind(p.Addr)
			if err := t.out(formats.KindRet, at, p.Addr); err != nil {
				return err
			}
			t.handlerReturn(p)
			return nil
		default:
			if err := t.midWalk(p); err != nil {
				return err
			}
			return t.errf("the ret at %#x needs a bit or a destination, the packet is %v", at, p.Kind)
		}
	}
	taken, err := t.bit("the ret", at)
	if err != nil {
		return err
	}
	if !taken || t.stack[t.top] == 0 {
		return t.errf("the ret at %#x: bit %v, %#x on top of the stack", at, taken, t.stack[t.top])
	}
	dst := t.stack[t.top]
	t.pop(1)
	t.rret(dst)
	t.setPos(dst)
	return t.out(formats.KindRet, at, dst)
}

// bitsOr, with no outcome bits left, reads the next packet: a TNT's bits
// become the ones left (got false), any other packet is returned (a
// ret's or a predicted jmp's TIP comes after the bits before it).
func (t *thread) bitsOr() (p formats.Packet, got bool, err error) {
	if t.nbits > 0 {
		return p, false, nil
	}
	if p, err = t.next(); err != nil {
		return p, false, err
	}
	if p.Kind == formats.PacketTNT {
		t.bits, t.nbits = p.Bits, p.N
		return p, false, nil
	}
	return p, true, nil
}

// leave goes to a, or outside when a is not instrumented code.
func (t *thread) leave(a uint64) {
	if _, in := t.d.mods.inside(a); in {
		t.setPos(a)
		return
	}
	t.outside = true
}

// finish ends the thread after its last chunk c: the outcome bits the
// runtime had not written yet, then the direct transfers up to the last
// probe that ran (c.Tail): where a thread that died, or is still
// running, got to.
func (t *thread) finish(c *formats.Chunk) error {
	if c.Pending > 1 {
		n := 63 - bits.LeadingZeros64(c.Pending)
		t.bits = t.bits<<uint(n) | c.Pending&^(1<<uint(n))
		t.nbits += n
		if err := t.run(1 << 30); err != nil && !errors.Is(err, errStarved) {
			return err
		}
	}
	if c.Tail == 0 || c.TailBits != c.Pending || !t.known {
		return nil
	}
	if t.outside {
		// a probe ran since: the thread came back where the stack says
		if t.stack[t.top] == 0 {
			return nil
		}
		t.setPos(t.stack[t.top])
		t.pop(1)
		t.rret(t.pos)
		t.outside = false
	}
	t.tail = true
	defer func() { t.tail = false }()
	for guard := 0; guard < 1<<16; guard++ {
		m, br, err := t.branch()
		if err != nil {
			return nil
		}
		at := m.Base + br.Addr
		if c.Tail >= t.pos && c.Tail < at || br.Kind != formats.BrJmp && br.Kind != formats.BrCall {
			return nil // an entry or resume probe's site reached, or a branch that needs a packet
		}
		if err := t.step(); err != nil {
			return err
		}
		if at == c.Tail {
			return nil
		}
	}
	return nil
}

// mark takes the bit of the mark at at (formats.BrMark): the one it
// always appends.
func (t *thread) mark(m *module, br *formats.Branch, at, next uint64) error {
	b, err := t.bit("the mark", at)
	if err != nil {
		return err
	}
	if want := br.Flags&formats.BranchBit != 0; b != want {
		return t.errf("the mark at %#x appends %v, the bit is %v", at, want, b)
	}
	t.goNext(m, next)
	return nil
}

// markedJcc takes a jcc without a probe whose sides lead to marks
// (formats.BranchMarked).
func (t *thread) markedJcc(m *module, br *formats.Branch, at, next uint64) error {
	taken, ok, err := t.markedSide(m, br, at, next)
	if err != nil {
		return err
	}
	if !ok {
		t.unprobed(br, at)
		return nil
	}
	return t.jcc(m, taken, at, next)
}

// jcc takes the jcc at at (its next instruction next) one way.
func (t *thread) jcc(m *module, taken bool, at, next uint64) error {
	if taken {
		t.goTarget(m)
		return t.out(formats.KindJccTaken, at, t.pos)
	}
	t.goNext(m, next)
	return t.out(formats.KindJccNotTaken, at, next)
}

// markedSide says which way marked jcc br at at went: the next bit is
// its side's mark's (left for the mark to take), unless a signal
// interrupted the thread on the way, and its ASYNC says where.
func (t *thread) markedSide(m *module, br *formats.Branch, at, next uint64) (taken, ok bool, err error) {
	takenBit := br.Flags&formats.BranchBit != 0
	if t.nbits == 0 {
		p, err := t.next()
		if err != nil {
			return false, false, err
		}
		switch {
		case p.Kind == formats.PacketTNT:
			t.bits, t.nbits = p.Bits, p.N
		case p.Kind == formats.PacketAsync && p.At != 0:
			t.unread(p)
			onT, onN := t.onRun(m, m.Base+br.Target, p.At), t.onRun(m, next, p.At)
			return onT, onT != onN, nil
		default:
			if err := t.midWalk(p); err != nil {
				return false, false, err
			}
			return false, false, t.errf("the jcc at %#x needs its mark's bit, the packet is %v", at, p.Kind)
		}
	}
	return (t.bits>>(t.nbits-1)&1 == 1) == takenBit, true, nil
}

// onRun reports whether a lies on the run from d to its mark: straight
// on, through direct jmps of module m.
func (t *thread) onRun(m *module, d, a uint64) bool {
	if !m.inText(d) {
		return false
	}
	bi := m.m.At(d - m.Base)
	for n := 0; n < 32 && bi >= 0 && bi < len(m.m.Branches); n++ {
		br := &m.m.Branches[bi]
		if a >= d && a <= m.Base+br.Addr {
			return true
		}
		if br.Kind != formats.BrJmp {
			return false
		}
		d, bi = m.Base+br.Target, int(m.tgt[bi])
	}
	return false
}

// unprobed loses the thread's place at branch br at at, which has no
// probe (or marks that say where it went).
func (t *thread) unprobed(br *formats.Branch, at uint64) {
	t.d.unprobed++
	t.known, t.nbits = false, 0 // the bits left are for branches it cannot place
	t.lostAt = at
}

// handlerReturn ends the innermost signal handler at its ASYNC_END (the
// walk goes on where the signal interrupted it) or ASYNC_TO (it goes on
// where the handler sent the thread, the return address pushed there on
// the real call stack).
func (t *thread) handlerReturn(p formats.Packet) {
	s := t.async[len(t.async)-1]
	t.async = t.async[:len(t.async)-1]
	t.rstack = t.rstack[:min(s.rlen, len(t.rstack))]
	if p.Kind == formats.PacketAsyncEnd {
		t.setPos(s.pos)
		t.known, t.outside = s.known, s.outside
		return
	}
	if s.back != nil {
		// the walk went on past where the signal landed; the thread will
		// come back there (to the return address pushed) and run that
		// code then: the stacks go back to how they were there (the
		// events walked stay, and come again)
		t.top = s.back.top
		t.rstack = t.rstack[:min(s.back.rlen, len(t.rstack))]
	}
	if p.Ret != 0 {
		t.rpush(p.Ret)
	}
	t.known, t.outside, t.lostAt = true, false, 0
	t.leave(p.At)
}
