// Package rewrite is stint's static ELF rewriter: it reads an x86-64 ELF
// executable or shared object, finds the probe sites of a tool (branches,
// calls, syscalls or basic blocks), redirects each site to a trampoline
// that calls the injected runtime, and appends the runtime, the
// trampolines and the tables the runtime reads as new segments.
//
// See docs/DESIGN.md for the layout ([Rewrite] produces §1), the tactics
// (chosen by package [github.com/stint-project/stint/rewrite/place]) and
// the trampolines (§3). The binary contract with the runtime is
// runtime/include/stint_abi.h.
//
// # Security
//
// The input is untrusted. Every header, table and offset is checked
// against the input's size before use; malformed input yields a
// [*FormatError] (with the file offset of the offending structure) or one
// of the sentinel errors ([ErrNotELF], [ErrNot64], [ErrNotX86_64],
// [ErrTruncated], [ErrNotExecutable], [ErrAlreadyRewritten]), never a
// panic. Allocations are bounded by a small multiple of the input's size;
// inputs larger than [MaxInputSize] are refused.
package rewrite
