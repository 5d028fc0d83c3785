// Package tramp encodes trampolines (docs/DESIGN.md §4): the
// code a patched site jumps to, which checks the gate, calls the runtime
// through a probe record with every register preserved and no flag
// changed, and runs or emulates the original instruction; and the
// relocated copies of instructions evicted for a neighbour's tactic.
//
// Every encoding has a length that does not depend on where it is placed,
// so a trampoline is sized once ([Asm.Sizing]) and encoded for real once
// every address is known. [Asm] records the first error and goes on, so a
// caller checks [Asm.Err] once at the end.
package tramp
