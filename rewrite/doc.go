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
// Where this differs from docs/DESIGN.md §1:
//   - The RX segment (blob, trampolines) comes first above the image, then
//     R (program headers, marker note, relocations, stub list, chunk
//     dependencies), then RW (module, probes, patches, chunks, preinit
//     slot, .dynamic); the
//     reserve page maps RX file bytes, because the kernel reports AT_PHDR
//     from the last PT_LOAD that contains e_phoff.
//   - A dynamic executable keeps its e_entry: the runtime starts from a
//     DT_PREINIT_ARRAY entry (the blob's DT_INIT stub, module.orig_entry
//     0), so that patched code reached from library constructors before
//     e_entry already finds its stubs mapped. For a PIE the entry is
//     relocated by an R_X86_64_RELATIVE appended to a copy of DT_RELA.
//     Static executables (and executables that already have a preinit
//     array) start at e_entry.
//   - Chunks are not stored: the file lists the stubs (ABI 2, 16 bytes
//     each) and each chunk's offset in one shared stub area, which the
//     runtime builds in a memfd and maps every chunk from. A chunk that
//     cannot be mapped costs only the sites whose patches depend on it.
//     Shared objects also get stub space below their image (past the
//     first 256 MiB, where later libraries go).
//   - .dynamic is moved into the RW segment (PT_DYNAMIC and the section
//     header follow), so DT_INIT, DT_FINI and DT_PREINIT_ARRAY can be
//     added even when the original has no spare slot.
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
