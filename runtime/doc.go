// Package runtime holds stint's injected runtime: freestanding C and
// assembly (src/) built into a flat, position-independent blob
// (blob/stint.bin, embedded here) that the rewriter copies into every
// rewritten module, and the Go mirror of the binary contract between the
// two, include/stint_abi.h (abi.go).
//
// The blob starts with a [BlobHeader]: magic, ABI version, size, the
// offsets of the entry stubs (e_entry, DT_INIT, DT_FINI) and of
// stint_probe_entry, and module_rel, which the rewriter writes in its copy
// ([SetModuleRel]). The blob has no relocations: it runs wherever it is
// placed.
//
// What the runtime does at run time (process-wide state, trace files,
// dedup, code patching, fork) is described in src/stint.c and in
// docs/DESIGN.md §3–§5.
//
// # Security
//
// [ParseHeader] checks a blob's header and returns a [*HeaderError] with
// the offending offset for anything malformed; it never panics.
package runtime
