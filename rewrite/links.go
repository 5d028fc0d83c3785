package rewrite

import (
	"github.com/stint-project/stint/rewrite/facts"
	"github.com/stint-project/stint/rewrite/place"
	"github.com/stint-project/stint/rewrite/tramp"
)

// Fragment linking (a compact complete trace, rewrite --every; off:
// --no-opt link), after DynamoRIO's: where a trampoline went back to the
// original code, it relocates the plain instructions that run from there
// up to the next probed instruction (following direct jmps, which a
// compact trace does not probe) and jumps straight into that one's
// trampoline. A jcc's outcome then costs its inline append and one jump,
// not a jump back, the plain code in place, and the next site's patch
// (often a punned jump to a stub on a page of its own) into the next
// trampoline. The trace is unchanged: the decoder walks the same code.

// tailMax bounds a tail's instructions: each is relocated once per
// trampoline whose way back reaches it.
const tailMax = 16

// tailStops marks the candidate sites: a tail never relocates one (its
// probe would be skipped); it ends there.
func (tt *trampTable) tailStops(sites []int) {
	tt.stop = make([]bool, len(tt.code.Insts))
	for _, i := range sites {
		tt.stop[i] = true
	}
}

// tails returns the trampolines' tails (nil: no linking), once every
// trampoline is placed (placed; else for sizing, with the same
// instructions and placeholder ends).
func (tt *trampTable) tails(placed bool) tramp.Tails {
	if !tt.link {
		return nil
	}
	c := tt.code
	return func(x uint64) ([]*place.Inst, uint64) {
		var steps []*place.Inst
		for n := 0; n < tailMax; n++ {
			j := c.Index(x)
			if j < 0 || c.Insts[j].Addr != x {
				break
			}
			if tt.stop[j] {
				if placed {
					x = tt.chainAt(j)
				}
				break
			}
			if c.Kinds[j] == facts.Jmp {
				x = c.Targets[j]
				continue
			}
			if c.Kinds[j].IsBranch() || tt.runStops(j) { // runStops: syscalls too
				break
			}
			steps = append(steps, &c.Insts[j])
			x += uint64(c.Insts[j].Len())
		}
		return steps, x
	}
}
