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
// recording each outcome once, code patching, the budget, the
// off-switch, fork) is described in src/stint.c, src/stint.h (the
// subsystems and their files) and docs/DESIGN.md §5-§10. In short, for
// users of the trace files:
//
//   - one file per process, $STINT_OUT/<basename>.<pid>.<monotonic-ns>.arrow
//     (".<n>" is added before ".arrow" if the name exists); $STINT_OUT
//     defaults to ./traces, resolved against the directory at start-up;
//   - every committed row is readable while the process runs and after it
//     exits in any way (exit, _exit, exec, crash, SIGKILL): the batch
//     being filled is published in place row by row; only a clean exit
//     (DT_FINI) writes the end-of-stream marker, otherwise the stream
//     ends in zeros;
//   - a forked child writes its own file on its first event;
//   - dst_module is [DstModuleNone] for anonymous memory (dst absolute)
//     and for syscall events (dst 0, the number in value);
//   - setup failures print one line "stint: <what>: <errno>; running
//     untraced" on stderr and the program runs on, its original code
//     restored; STINT_DISABLE=1 does the same silently.
//
// # Security
//
// [ParseHeader] checks a blob's header and returns a [*HeaderError] with
// the offending offset for anything malformed; it never panics.
package runtime
