package paths

import "github.com/stint-project/stint/formats"

// noFast turns the fast walk off: TestFastSameAsStep decodes both ways.
var noFast = false

// fast takes, in one loop, the transfers most of a trace is made of,
// from module t.m: direct jmps and calls and probed jccs with the
// thread's hot state in locals (a jcc's two sides chosen without a
// branch: its outcome is the data, and a branch on it mispredicts half
// the time), and probed rets, indirect branches and marks through
// fastOther. For each it does what step does (step.go). It stops before
// anything else (any other transfer or packet, another module, a full
// batch, the idle bound) and leaves that to step, with nothing of it
// taken: the state it leaves is the one step would have left.
func (t *thread) fast(max int) {
	m, s := t.m, t.s
	if noFast || m == nil || m.m == nil || t.d.only != 0 || t.tail {
		return
	}
	if t.hasPending && t.pending.Kind != formats.PacketTNT {
		return // a packet read ahead (place) that step takes
	}
	if t.bi < 0 {
		// where branch would look first
		if !m.inText(t.pos) {
			return
		}
		t.bi = t.index(m, t.pos)
	}
	brs, tgt := m.m.Branches, m.tgt
	base, id, size := m.Base, m.ID, m.Size
	buf := s.buf
	limit := min(cap(buf), len(buf)+max)
	bi, pos, bits, nbits, idle := t.bi, t.pos, t.bits, t.nbits, t.idle
	tm := t.time()
	start := len(buf)
loop:
	for len(buf) < limit && uint(bi) < uint(len(brs)) && idle < maxIdle && !t.outside {
		br := &brs[bi]
		at := base + br.Addr
		var k formats.Kind
		switch {
		case br.Kind == formats.BrJmp || br.Kind == formats.BrCall:
			// implied: step's more() holds while bits are left or a
			// packet follows
			if nbits == 0 && !t.hasPending {
				if !t.pr.More() {
					break loop
				}
				tm = t.time() // More skips padding
			}
			idle++
			t.walk(pos, at)
			k = formats.KindJmp
			if br.Kind == formats.BrCall {
				k = formats.KindCall
				next := at + uint64(br.Len)
				if br.Flags&formats.BranchProbed != 0 {
					t.top++
					t.stack[t.top], t.stackBi[t.top] = next, int32(bi+1)
				}
				t.rpush(next)
			}
			pos, bi = base+br.Target, int(tgt[bi])
		case br.Kind == formats.BrJcc && br.Flags&formats.BranchProbed != 0:
			if nbits == 0 {
				t.idle = idle + 1
				var ok bool
				if bits, nbits, ok = t.nextBits(); !ok {
					break loop
				}
				idle, tm = t.idle, t.time()
			} else {
				idle++
			}
			nbits--
			t.nwalked = 0
			// both sides without a branch: mask is all ones when taken
			tk := bits >> uint(nbits) & 1
			mask := -tk
			npos, nbi := at+uint64(br.Len), uint64(bi+1)
			pos = npos ^ (npos^(base+br.Target))&mask
			bi = int(int64(nbi ^ (nbi^uint64(int64(tgt[bi])))&mask))
			k = formats.KindJccNotTaken - formats.Kind(tk)
		default:
			t.bi, t.pos, t.bits, t.nbits = bi, pos, bits, nbits
			t.idle = idle + 1 // as step: a packet read sets it to 0
			var ok bool
			if k, ok = t.fastOther(m, br, at); !ok {
				// nothing taken, or a packet read before an error that
				// step says: the state is step's either way
				if t.idle == idle+1 {
					t.idle = idle
				}
				bi, pos, bits, nbits, idle = t.bi, t.pos, t.bits, t.nbits, t.idle
				break loop
			}
			bi, pos, bits, nbits, idle, tm = t.bi, t.pos, t.bits, t.nbits, t.idle, t.lastT
			if k == 0 {
				continue // a mark: no event
			}
		}
		n := len(buf)
		buf = buf[:n+1]
		e := &buf[n]
		if dst := t.dst(pos); dst-base < size {
			e.Kind, e.TID, e.Time = k, t.tid, tm
			e.SrcModule, e.Src, e.DstModule, e.Dst, e.Value = id, br.Addr, id, dst-base, 0
		} else {
			t.d.fill(e, m, k, t.tid, tm, at, dst)
		}
	}
	t.emitted += len(buf) - start
	s.buf = buf
	t.bi, t.pos, t.bits, t.nbits, t.idle = bi, pos, bits, nbits, idle
}

// dst is the destination of the event fast emits: where the thread
// went, unless a ret or indirect branch left instrumented code
// (fastOther kept it in t.left).
func (t *thread) dst(pos uint64) uint64 {
	if t.outside {
		return t.left
	}
	return pos
}

// fastOther takes, for fast, the probed ret, indirect branch or mark br
// of m at at, as step would, from the thread's state (t.pos, t.bi,
// t.bits...): ok false when it takes nothing (the next packet is not
// one it reads, or something is wrong, which step says); k is the
// event's kind, 0 for a mark's none.
func (t *thread) fastOther(m *module, br *formats.Branch, at uint64) (k formats.Kind, ok bool) {
	probed := br.Flags&formats.BranchProbed != 0
	switch {
	case br.Kind == formats.BrMark:
		if t.nbits == 0 && !t.fastTNT() || !t.fastBit(br.Flags&formats.BranchBit != 0) {
			return 0, false
		}
		t.pos, t.bi = at+uint64(br.Len), t.bi+1
		return 0, true
	case br.Kind == formats.BrRet && probed:
		if t.stack[t.top] == 0 && t.nbits > 0 {
			return 0, false // an error: step says it
		}
		if t.nbits > 0 || t.stack[t.top] != 0 && t.fastTNT() {
			if dst, sbi := t.stack[t.top], t.stackBi[t.top]; dst != 0 && t.fastBit(true) {
				t.pop(1)
				t.rret(dst)
				if sbi >= 0 && m.inText(dst) {
					// a call of m pushed it: the branch after that call
					t.pos, t.bi = dst, int(sbi)
				} else {
					t.fastGo(m, dst)
				}
				return formats.KindRet, true
			}
			return 0, false
		}
		dst, ok := t.fastTIP()
		if !ok {
			return 0, false
		}
		t.unwind(dst)
		t.rret(dst)
		t.fastLeave(m, dst)
		return formats.KindRet, true
	case br.Kind == formats.BrIndJmp && probed && br.Flags&formats.BranchPredicted != 0:
		if t.nbits > 0 || t.fastTNT() {
			if !t.fastBit(true) {
				return 0, false
			}
			if br.Flags&formats.BranchSwitch != 0 {
				t.rstack = t.rstack[:0]
			}
			t.pos, t.bi = m.Base+br.Target, int(m.tgt[t.bi])
			return formats.KindIndJmp, true
		}
		return t.fastIndirect(m, br, at, 0)
	case (br.Kind == formats.BrIndJmp || br.Kind == formats.BrIndCall) && probed:
		return t.fastIndirect(m, br, at, at+uint64(br.Len))
	}
	return 0, false
}

// fastIndirect takes indirect branch br at at (its next instruction
// next, 0 for a predicted jmp's) to the next packet's address, when the
// next packet is a TIP.
func (t *thread) fastIndirect(m *module, br *formats.Branch, at, next uint64) (formats.Kind, bool) {
	dst, ok := t.fastTIP()
	if !ok {
		return 0, false
	}
	if br.Flags&formats.BranchSwitch != 0 {
		t.rstack = t.rstack[:0]
	}
	k := formats.KindIndJmp
	if br.Kind == formats.BrIndCall {
		k = formats.KindIndCall
		t.push(next)
		t.rpush(next)
	}
	t.fastLeave(m, dst)
	return k, true
}

// nextBits reads the next packet when it is a TNT (a TNT read ahead
// first), as next does: false, and nothing read, for any other.
func (t *thread) nextBits() (uint64, int, bool) {
	if t.hasPending { // a TNT: fast takes no other
		t.hasPending, t.nwalked = false, 0
		return t.pending.Bits, t.pending.N, true
	}
	v, n, ok := t.pr.NextTNT()
	if ok {
		t.idle, t.nwalked = 0, 0
	}
	return v, n, ok
}

// fastTNT takes the next packet's bits when it is a TNT (bitsOr's part).
func (t *thread) fastTNT() bool {
	v, n, ok := t.nextBits()
	if ok {
		t.bits, t.nbits = v, n
		t.time()
	}
	return ok
}

// fastTIP reads the next packet when it is a TIP.
func (t *thread) fastTIP() (uint64, bool) {
	if t.hasPending {
		return 0, false // a TNT comes first
	}
	a, ok := t.pr.NextPlainTIP()
	if ok {
		t.idle, t.nwalked = 0, 0
		t.time()
	}
	return a, ok
}

// fastBit takes the next outcome bit (there is one) when it is want.
func (t *thread) fastBit(want bool) bool {
	if t.bits>>uint(t.nbits-1)&1 == 1 != want {
		return false
	}
	t.nbits--
	t.nwalked = 0
	return true
}

// fastGo puts the thread at a, looked up in m first.
func (t *thread) fastGo(m *module, a uint64) {
	if m.inText(a) {
		t.pos, t.bi = a, t.index(m, a)
		return
	}
	t.setPos(a)
}

// fastLeave is leave for fast: it goes to a, or outside.
func (t *thread) fastLeave(m *module, a uint64) {
	if _, in := t.d.mods.inside(a); in {
		t.fastGo(m, a)
		return
	}
	t.outside, t.left = true, a
}

// time is the time of an event emitted now: where the chunk's reader
// is, interpolated in the chunk's span (kept for the next event there).
func (t *thread) time() uint64 {
	if pos := t.pr.Pos(); pos != t.lastPos {
		t.lastPos, t.lastT = pos, t.s.d.timeAt(&t.s.c, pos)
	}
	return t.lastT
}

// index returns the index in m's map of the first branch at or after
// run-time address a (inside m's text), from a small cache of the
// destinations looked up before: rets and indirect branches go back to
// few places.
func (t *thread) index(m *module, a uint64) int {
	c := &t.cache[(a^a>>10)%uint64(len(t.cache))]
	if c.a == a && c.m == m {
		return int(c.bi)
	}
	bi := m.m.At(a - m.Base)
	*c = indexed{a, m, int32(bi)}
	return bi
}

// indexed is an entry of thread.cache.
type indexed struct {
	a  uint64
	m  *module
	bi int32
}
