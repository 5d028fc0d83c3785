package tramp

import (
	"github.com/stint-project/stint/rewrite/facts"
	"github.com/stint-project/stint/rewrite/place"
)

// RunStep is one instruction of a counted run (rewrite --counts with
// INS-OP's dynamic probe coalescing; the policy is rewrite/runs.go).
type RunStep struct {
	In   *place.Inst
	Kind facts.Kind
	Tgt  uint64 // a direct branch's destination
	// Count: a block starts here, entered only by falling through the
	// run's jcc before it; its counter (link vaddr) is added to first.
	Count     uint64
	FlagsDead bool // the flags are dead here (the count may change them)
}

// countRun emits a counted run after its head's count: every step
// relocated in order, each block's count where it starts, a jcc before
// the last step as a jcc to its destination (not taken, the run goes
// on), and the last step relocated whole (its branch, or a jump to the
// instruction after it). Every destination goes through chain: the
// trampoline that runs it when it has one (the jump in is saved), else
// itself. Execution never returns to the original code in between, so
// one jump in and one out serve every block of the run.
func (a *Asm) countRun(steps []RunStep, chain func(uint64) uint64, pic bool) {
	for k := range steps {
		s := &steps[k]
		if s.Count != 0 {
			a.count(s.Count, s.FlagsDead, a.Counts.Atomic)
		}
		switch {
		case k == len(steps)-1:
			a.relocateOn(s.In, s.Kind, chain(s.Tgt), chain(s.In.Addr+uint64(s.In.Len())), pic)
		case s.Kind == facts.Jcc:
			a.jccTo(s.In, chain(s.Tgt))
		default:
			a.RelocateBody(s.In)
		}
	}
}
