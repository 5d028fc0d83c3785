package tramp

import "github.com/stint-project/stint/rewrite/place"

// Tails gives a trampoline's way back into the original code at x
// (rewrite/links.go, a compact trace's fragment linking): the plain
// instructions that run from x up to the next probed instruction, and
// where to jump then (that instruction's trampoline when it has one).
type Tails func(x uint64) (steps []*place.Inst, end uint64)

// jmpOn goes on at x: with a.Tail, x's tail relocated (as much of it as
// the short jumps still waiting for their stubs can jump over), then a
// jump to its end; else a jump to x. The code it relocates has no
// branch, so it runs as it would in place, and a signal that lands in
// it finds the thread right after its last event (paths.c's ASYNC).
func (a *Asm) jmpOn(x uint64) {
	if a.Tail == nil {
		a.Jmp(x)
		return
	}
	steps, end := a.Tail(x)
	room := a.nearRoom()
	for _, in := range steps {
		if a.off()+in.Len()+5 > room {
			end = in.Addr
			break
		}
		a.RelocateBody(in)
	}
	a.Jmp(end)
}

// nearRoom returns how far a's code may grow before flushNear emits its
// stubs with every short jump still reaching its own.
func (a *Asm) nearRoom() int {
	room, p := 1<<30, 0
	for _, e := range a.exits {
		if e.stub >= 0 || len(e.short) == 0 {
			continue
		}
		for _, f := range e.short {
			room = min(room, f+1+127-5*p)
		}
		p++
	}
	return room
}
