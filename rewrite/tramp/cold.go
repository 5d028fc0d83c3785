package tramp

// A compact trace's trampolines split into hot code, the fast paths a
// probe runs almost every time, and cold code, its slow ends (the calls
// into the runtime), which the hot code reaches with a rel32 jump and
// which jump back. The rewriter puts the cold code of every trampoline
// in a region of its own after them (Asm.Cold), so that the hot code of
// the sites a workload runs is dense in the caches and its fast paths
// fall through to what follows them: on the sqlite3 workload, whose
// hot trampolines did not fit in L2, the trampolines' samples were
// spread over their whole length, line after line.

// later queues cold code, emitted by FlushCold.
func (a *Asm) later(f func(c *Asm)) { a.colds = append(a.colds, f) }

// ColdAt returns an assembler for a's cold code at base: a's settings,
// a's gate.
func (a *Asm) ColdAt(base uint64) *Asm {
	c := a.coldAt(base)
	return &c
}

func (a *Asm) coldAt(base uint64) Asm {
	return Asm{Base: base, Sizing: a.Sizing, Gate: a.Gate, Inline: a.Inline, Paths: a.Paths, Calls: a.Calls, Static: a.Static, Countdown: a.Countdown,
		TextLo: a.TextLo, TextHi: a.TextHi, Module: a.Module}
}

// Recycle makes a the assembler cfg describes, with a cold one at 0
// (ColdAt), keeping the buffers of a's last use, its cold one's too:
// the rewriter sizes every site's trampoline (cc1plus: 1.3 M of them),
// and two new assemblers each time were a quarter of its allocations.
// cfg's B and Cold are not used.
func (a *Asm) Recycle(cfg Asm) {
	b, cold := a.B[:0], a.Cold
	var cb []byte
	if cold == nil {
		cold = new(Asm)
	} else {
		cb = cold.B[:0]
	}
	hits, exits := a.extraHits[:0], a.exits[:0]
	clear(a.colds[:cap(a.colds)]) // drop the closures, keep the array
	colds := a.colds[:0]
	*a = cfg
	a.B, a.extraHits, a.exits, a.colds = b, hits, exits, colds
	*cold = a.coldAt(0)
	cold.B = cb
	a.Cold = cold
}

// FlushCold emits the stubs still to emit (flushNear), then the queued
// cold code into a.Cold, or, without one, after a's own code; an error
// of a.Cold's becomes a's. Every trampoline's emission ends with it.
func (a *Asm) FlushCold() {
	a.flushNear()
	c := a.Cold
	if c == nil {
		c = a
	}
	for _, f := range a.colds {
		f(c)
	}
	a.colds = a.colds[:0]
	if c != a && c.Err != nil {
		a.setErr(c.Err)
	}
}

// An exit is a fast path's way out to its cold code, taken only on the
// slow path. Its short jumps (a jrcxz, or the jmp a passing test's
// jrcxz jumps over: taken when the fast path's test fails) reach a
// stub, a jmp rel32 to the cold code, emitted ahead of them
// (stubAhead) or at the trampoline's next point nothing falls through
// (flushNear); the cold code points the stub's rel32 field and any
// other long ones at itself.
type exit struct {
	short []int // rel8 fields of short jumps still to point at the stub
	stub  int   // offset of the stub, -1 until emitted
	long  []int // rel32 fields that go to the cold code
}

// newExit starts an exit whose stub flushNear emits.
func (a *Asm) newExit() *exit {
	e := &exit{stub: -1}
	a.exits = append(a.exits, e)
	return e
}

// stubAhead emits e's stub here, ahead of the short jumps to it, in code
// nothing falls through to.
func (a *Asm) stubAhead(e *exit) {
	e.stub = a.off()
	e.long = append(e.long, a.jmp32())
}

// shortTo emits a short jump (opcode op: 0xe3 jrcxz, 0xeb jmp) to e's
// stub.
func (a *Asm) shortTo(op byte, e *exit) {
	a.Emit(op, 0)
	f := a.off() - 1
	if e.stub >= 0 {
		a.patchRel8(f, e.stub)
		return
	}
	e.short = append(e.short, f)
}

// flushNear emits the stubs of the exits that have short jumps to them
// and none yet, here, where nothing falls through; a short jump it
// cannot reach is an error.
func (a *Asm) flushNear() {
	for _, e := range a.exits {
		if e.stub >= 0 || len(e.short) == 0 {
			continue
		}
		e.stub = a.off()
		for _, f := range e.short {
			a.patchRel8(f, e.stub)
		}
		e.short = nil
		e.long = append(e.long, a.jmp32())
	}
	a.exits = a.exits[:0]
}

// nearPending reports whether flushNear has stubs to emit.
func (a *Asm) nearPending() bool {
	for _, e := range a.exits {
		if e.stub < 0 && len(e.short) > 0 {
			return true
		}
	}
	return false
}

// toCold points e's long jumps at the cold code c is at.
func (a *Asm) toCold(e *exit, c *Asm) { a.patchAll(e.long, c.pc()) }

// patchAll points the rel32 fields fs at target.
func (a *Asm) patchAll(fs []int, target uint64) {
	for _, f := range fs {
		a.PatchRel(f, target)
	}
}
