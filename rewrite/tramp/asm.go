package tramp

import (
	"fmt"

	"github.com/stint-project/stint/rewrite/elfin"
)

// Asm is a tiny x86-64 emitter for the few instructions trampolines use.
type Asm struct {
	B      []byte
	Base   uint64 // link vaddr of B[0]
	Sizing bool   // addresses are placeholders: skip range checks
	Gate   uint64 // link vaddr of the gate word (struct stint_module.gate_vaddr)
	Err    error  // the first error; later emits go on, so check once at the end
	// Inline: a compact complete trace's probes append inline and call
	// the runtime only on their slow paths (paths.go; INS-OP's partial
	// payload inlining).
	Inline bool
	// Paths: a compact complete trace's trampolines (STINT_MF_PATHS).
	Paths bool
	// Calls: with Paths, a call chain's (STINT_MF_CALLS, calls.go).
	Calls bool
	// Static: the module's %fs:0 is not the thread pointer when its
	// probes run: a static executable (its first probes run before libc
	// sets it) or Go's (its runtime points %fs at its own TLS, where
	// %fs:0 is not a self-pointer). The inline paths then read %fs and
	// %gs with rdfsbase and rdgsbase (slower) instead of loads.
	Static bool
	// FlagsDead, when set, says whether the status flags are dead at an
	// address: a compact trace's jcc arm whose destination has them dead
	// tests with cmp and jne, not jrcxz (paths.go, pathsBitFlags).
	FlagsDead func(addr uint64) bool
	// Countdown: a sampled call tool's call probes read their probe's
	// Cache2 and, when it is not 0, decrement it and skip the runtime
	// (STINT_MF_COUNTDOWN; thunk.go, countdown).
	Countdown bool
	// Stripes, when set, makes entry probes count down in their slots of
	// the calling thread's stripe (STINT_MF_STRIPES; thunk.go,
	// EntryProbe).
	Stripes *Stripes

	// Tail, when set, takes a compact trace's trampolines back through
	// the code that follows them (tail.go).
	Tail Tails

	// Counts, when set, makes a block site's trampoline count its
	// executions inline instead of calling the runtime (count.go).
	Counts *Counts

	// Module is the link vaddr of the module's struct stint_module: a
	// call chain's probes name it as the module their SITE packets index.
	Module uint64
	// CallSite, in a call chain's trampolines, gives the number of the
	// call or ret at addr among the module's direct calls and rets and
	// whether a call pushes nothing (callsSite); ok false: the probe
	// appends addresses.
	CallSite func(addr uint64) (idx uint32, noPush, ok bool)

	// Predict, when not 0, is the likely destination of the indirect jmp
	// whose trampoline this is (a compact trace's: predict.go).
	Predict uint64

	// TextLo and TextHi bound the module's code (facts.Module): an
	// inline TIP to a destination outside goes to the runtime.
	TextLo, TextHi uint64
	// Cold, when set, takes the trampoline's cold code (cold.go); its
	// Base is where that code goes.
	Cold *Asm

	extraHits []int          // rel8 fields of cache compares still to point at the hit path
	colds     []func(c *Asm) // cold code still to emit (FlushCold)
	exits     []*exit        // exits whose stubs flushNear may have to emit
}

func (a *Asm) pc() uint64     { return a.Base + uint64(len(a.B)) }
func (a *Asm) Emit(b ...byte) { a.B = append(a.B, b...) }
func (a *Asm) off() int       { return len(a.B) }
func (a *Asm) setErr(err error) {
	if a.Err == nil {
		a.Err = err
	}
}

func (a *Asm) u32(v uint32) { a.B = append(a.B, byte(v), byte(v>>8), byte(v>>16), byte(v>>24)) }

// rel32 emits a rel32 field whose instruction ends `after` bytes past the
// field's end (for fields followed by an immediate).
func (a *Asm) rel32(target uint64, after int) {
	end := a.pc() + 4 + uint64(after)
	d := int64(target - end)
	if !a.Sizing && d != int64(int32(d)) {
		a.setErr(fmt.Errorf("rel32 from %#x to %#x out of range", end, target))
	}
	a.u32(uint32(int32(d)))
}

func (a *Asm) Jmp(target uint64) { a.Emit(0xe9); a.rel32(target, 0) }

// patchRel8 sets the rel8 field at offset off to reach offset to.
func (a *Asm) patchRel8(off, to int) {
	d := to - (off + 1)
	if d != int(int8(d)) {
		a.setErr(fmt.Errorf("rel8 of %d bytes out of range", d))
	}
	a.B[off] = byte(int8(d))
}

// patchRel sets the rel32 field at offset off to reach target.
func (a *Asm) PatchRel(off int, target uint64) {
	end := a.Base + uint64(off) + 4
	d := int64(target - end)
	if !a.Sizing && d != int64(int32(d)) {
		a.setErr(fmt.Errorf("rel32 to %#x out of range", target))
	}
	elfin.LE.PutUint32(a.B[off:], uint32(int32(d)))
}
