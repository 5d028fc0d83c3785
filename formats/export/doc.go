// Package export writes stint traces in the formats of other tools:
// pprof profiles, folded stacks, drcov coverage, lcov tracefiles,
// Parquet tables and CSV.
//
// [Write] reads a [Source] (a module table and batches of rows, each
// row with its run; cmd/trace adapts trace files and merged traces to
// it) and symbolizes addresses through [Options].Symbolize, which the
// caller backs with ELF symbols, DWARF line tables and code (package
// formats knows nothing about ELF, so neither does this package).
//
// # What each format holds
//
//   - pprof: a gzip'd profile.proto for go tool pprof. A call trace
//     (tool "call") gives call contexts rebuilt with one shadow stack per
//     thread of each run: a call pushes (call site, callee), a return
//     pops to the nearest frame whose call site lies at most 15 bytes
//     before the return address (frames above it were left by longjmp,
//     exceptions or tail calls), and a return that matches no frame is
//     counted in [Stats].Unmatched and otherwise ignored. Each context is
//     one sample whose value is the number of calls into it; its
//     locations are the callee's entry, then the call sites to the root.
//     Other traces give one sample per event location (a branch's or
//     syscall's source, a block's start) with the number of events
//     there. Locations carry function names and file:line, mappings the
//     module's path and build-id. Addresses are link vaddrs placed in one
//     synthetic 2^40-byte range per module, since a trace (or several
//     runs combined) has no single address space.
//   - collapsed: "root;…;leaf COUNT" lines (flamegraph.pl, speedscope):
//     the same call contexts by function name (the functions holding
//     the call sites, root first, then the callee: a caller reached by
//     an untraced call still shows), or "module;function COUNT" for
//     traces of other tools.
//   - drcov: DynamoRIO's drcov, file version 2 with a version 2 module
//     table (Lighthouse, bncov): every module of the trace, and a BB
//     record per executed block. Blocks start where execution is known
//     to arrive: branch destinations (of jcc taken and not taken, jmp,
//     call, ret, indirect jmp and call) and block events. A block runs
//     to its first control transfer, decoded with x86asm from the
//     module's original code (Symbols.Code), but stops at the next
//     block start; each branch's source and each syscall is also a
//     block of its one instruction. Without code a block's size is 1.
//     Offsets count from the module's link base.
//   - lcov: a tracefile for genhtml: per source file of the modules'
//     DWARF line tables, DA for every line with code (0 if it did not
//     run), FN/FNDA per function; a module with symbols but no line
//     table gets one record, named after the module file, where line i
//     stands for its i-th function (genhtml then shows the binary as
//     its "source": use --no-source).
//     See writeLCOV for how counts are defined.
//   - parquet: every row (records too) with the trace's columns, its run,
//     its kind's name and the functions at src and dst ([ParquetSchema]).
//   - csv: a header ([CSVHeader]) and one row per trace row with the
//     kind's name, module+0xoffset, function and file:line of src and dst.
//
// Refusal rows (an event the redundancy log kept from being recorded)
// count as the event they stand for in the aggregating formats: the
// event happened. The runtime's record rows (periods, run end) are
// skipped by them and kept by csv and parquet.
//
// In the runtime's default mode each distinct event is recorded once
// per run, so counts say "seen" rather than "how often", and call
// contexts are those whose calls and returns were first seen; record
// with --every for counts.
//
// # Memory
//
// csv and parquet stream. The other formats hold one entry per distinct
// location, block or call context, and one shadow stack per thread,
// never anything per event. Call contexts deeper than [Options].MaxDepth
// are folded into the context at that depth.
//
// # Hostile input
//
// Rows come from package formats' and merge's validating readers;
// module ids not in the table are treated as "no module". [ParseDrCov]
// checks every line and record and returns a *[DrCovError] with the
// offset of what is wrong; it never panics (FuzzParseDrCov).
package export
