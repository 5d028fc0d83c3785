package tramp

import "github.com/stint-project/stint/runtime"

// Counts holds where a counting module's block counters are (rewrite
// --counts, STINT_MF_COUNTS): probe k's at CountsAt + 8k, for the probe
// records from ProbesAt on.
type Counts struct {
	CountsAt, ProbesAt uint64
	// FlagsDead: the status flags are dead at the site
	// (facts.Code.FlagsDead), so the count may change them.
	FlagsDead bool
	// Atomic: increments take a lock prefix (rewrite --counts-atomic).
	Atomic bool
	// Run, when set, is the site's counted run (run.go), its head the
	// site's instruction, and Chain maps a destination to the
	// trampoline to enter it by (itself when none).
	Run   []RunStep
	Chain func(uint64) uint64
}

// counter returns the link vaddr of the counter of the probe at link
// vaddr probe.
func (c *Counts) counter(probe uint64) uint64 {
	if probe < c.ProbesAt {
		return c.CountsAt // sizing: placeholders
	}
	return c.CountsAt + (probe-c.ProbesAt)/runtime.ProbeStructSize*8
}

// count adds 1 to the counter at link vaddr ctr, with no lock prefix
// unless atomic (as gcov: threads that run the block at the same instant
// may lose an increment). Where the flags are live it goes through %rax,
// below the red zone, with instructions that leave the flags alone; an
// atomic one saves them in %rax with lahf and seto and gives them back
// with add and sahf (DynamoRIO's way: popf costs about 20 cycles).
func (a *Asm) count(ctr uint64, flagsDead, atomic bool) {
	if atomic {
		if !flagsDead {
			a.Emit(0x48, 0x8d, 0x64, 0x24, 0x80) // lea -128(%rsp), %rsp
			a.Emit(0x50, 0x9f, 0x0f, 0x90, 0xc0) // push %rax; lahf; seto %al
		}
		a.Emit(0xf0, 0x48, 0x83, 0x05) // lock addq $1, ctr(%rip)
		a.rel32(ctr, 1)
		a.Emit(0x01)
		if !flagsDead {
			a.Emit(0x04, 0x7f, 0x9e, 0x58)                // add $0x7f, %al; sahf; pop %rax
			a.Emit(0x48, 0x8d, 0xa4, 0x24, 0x80, 0, 0, 0) // lea 128(%rsp), %rsp
		}
		return
	}
	if flagsDead {
		a.Emit(0x48, 0x83, 0x05) // addq $1, ctr(%rip)
		a.rel32(ctr, 1)
		a.Emit(0x01)
		return
	}
	a.Emit(0x48, 0x8d, 0x64, 0x24, 0x80) // lea -128(%rsp), %rsp
	a.Emit(0x50)                         // push %rax
	a.Emit(0x48, 0x8b, 0x05)             // mov ctr(%rip), %rax
	a.rel32(ctr, 0)
	a.Emit(0x48, 0x8d, 0x40, 0x01) // lea 1(%rax), %rax
	a.Emit(0x48, 0x89, 0x05)       // mov %rax, ctr(%rip)
	a.rel32(ctr, 0)
	a.Emit(0x58)                                  // pop %rax
	a.Emit(0x48, 0x8d, 0xa4, 0x24, 0x80, 0, 0, 0) // lea 128(%rsp), %rsp
}
