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
	return &Asm{Base: base, Sizing: a.Sizing, Gate: a.Gate, Inline: a.Inline, Paths: a.Paths, Static: a.Static, Countdown: a.Countdown}
}

// FlushCold emits the queued cold code into a.Cold, or, without one,
// after a's own code; an error of a.Cold's becomes a's. Every
// trampoline's emission ends with it.
func (a *Asm) FlushCold() {
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
