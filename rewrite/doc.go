// Package rewrite is stint's static ELF rewriter: it reads an x86-64 ELF
// executable or shared object, finds the probe sites of a tool (branches,
// calls, syscalls or basic blocks), redirects each site to a trampoline
// that calls the injected runtime, and appends the runtime, the
// trampolines and the tables the runtime reads as new segments.
//
// [RewriteBytes] runs the stages, each a package that hands values to the
// next:
//
//	elfin   the input, validated            → *elfin.File
//	facts   decoded code, module facts      → *facts.Facts
//	policy  which site gets which probe     → *policy.Plan
//	place   how each site is redirected     → *place.Planner (writes, stubs)
//	        (this package: trampoline sizes and addresses, the placement
//	        loop, the patches the runtime switches, probe numbering)
//	tramp   trampoline code                 → bytes per trampoline
//	elfout  layout and output file          → []byte
//
// The binary contract with the runtime is runtime/include/stint_abi.h,
// mirrored by package runtime; every table is written through that
// mirror. docs/DESIGN.md describes the output's layout.
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
