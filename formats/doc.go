// Package formats defines stint's trace file format and reads and writes
// it.
//
// # Trace files
//
// A trace file is an Apache Arrow IPC stream (not the IPC file format:
// a stream needs no footer, so a process that dies leaves a readable
// file). The injected runtime writes one per process, named
// <binary>.<pid>.<monotonic-ns>[.<n>].arrow. Every record batch has the
// columns of [Schema], in this order, none nullable:
//
//	#  column      type    meaning
//	0  kind        uint8   event [Kind] (STINT_K_* in runtime/include/stint_abi.h)
//	1  tid         uint32  kernel thread id
//	2  time        uint64  CLOCK_MONOTONIC, nanoseconds
//	3  src_module  uint16  module id of src (an id of the module table)
//	4  src         uint64  address of the instruction, module-relative (link vaddr)
//	5  dst_module  uint16  module id of dst; NoModule (0xFFFF): no known module
//	6  dst         uint64  destination, module-relative; absolute if dst_module is NoModule
//	7  value       uint64  syscall number for KindSyscall, else 0
//
// Per kind: a conditional branch gives KindJccTaken (dst = target) or
// KindJccNotTaken (dst = the fall-through instruction); KindRet's dst is
// the return address; KindSyscall has dst 0 and the syscall number in
// value; KindBlock has src = dst = the block's first instruction.
// Module-relative addresses are link vaddrs, so that runs under ASLR
// compare: add the module's Base for the run-time address.
//
// # Schema metadata
//
// The schema carries three key/value pairs:
//
//	stint.version  "1"
//	stint.run      one JSON object ([Run]), then spaces up to RunCap (4096) bytes
//	stint.modules  JSON lines ([Module]), then spaces up to ModulesCap (65536) bytes
//
// The run and module values have a fixed capacity because the runtime
// writes them in place inside the schema message it has already written
// (the module table grows as libraries load); in a fresh template they
// are all spaces (0x20). A reader trims trailing spaces. The run object:
//
//	{"binary":"/usr/bin/gzip","build_id":"9e1c…","tool":"branch",
//	 "options":"tool=branch every=0","pid":4242,"ppid":4200,
//	 "start_ns":1795000000123456789,"mono_start_ns":81234567890}
//
//	binary         path of the traced executable (/proc/self/exe)
//	build_id       GNU build-id of the executable's original file, lower-case hex, "" if none
//	tool           "branch", "call", "syscall" or "block" ([Tool])
//	options        the rewriter's option string
//	pid, ppid      process and parent process id
//	start_ns       CLOCK_REALTIME at start, ns since the epoch
//	mono_start_ns  CLOCK_MONOTONIC at start, ns (same clock as the time column)
//	budget_ns      budget per period, ns (absent: no budget)
//	period_ns      period, ns (absent: no budget)
//	log            redundancy log file (absent: none)
//	log_policy     "exact", "hash", "bst" or "merger" (absent: no log)
//
// Rows of the record kinds ([KindPeriod], [KindPeriodStats],
// [KindPeriodQoS], [KindPeriodSwitch], [KindPeriodClose], [KindRunEnd]) are not events: the
// runtime's per-period budget records and its end-of-run record,
// interleaved with the events.
//
// A run value that is all spaces reads as the zero [Run]. Each module
// line, terminated by "\n":
//
//	{"id":0,"path":"/usr/bin/gzip","build_id":"9e1c…","base":93824992231424,"size":102400,"rewritten":true}
//
//	id         the value of src_module/dst_module; unique, never 0xFFFF
//	path       the file the loader mapped
//	build_id   GNU build-id, lower-case hex, "" if none
//	base       load base (run-time address = link vaddr + base)
//	size       bytes from the lowest to the end of the highest PT_LOAD
//	rewritten  whether the module carries stint probes
//
// Text after the last newline is a line that the runtime had not finished
// writing (it crashed meanwhile) and is ignored. Readers ignore unknown
// JSON keys, so keys may be added without a version change.
//
// # Writing without an Arrow library
//
// [Template] returns the byte templates the runtime uses, generated into
// runtime/include/stint_arrow.h by internal/gen/arrowhdr: the complete
// schema message with the metadata values at known offsets, and one
// record batch message with the offsets of the fields to patch per batch
// (row count, body length, field node lengths, value buffer offsets and
// lengths). [Writer] writes with the same templates. A batch is sealed
// by writing its continuation marker (FF FF FF FF) last; until then the
// runtime's file holds zeros there.
//
// # Compact complete traces
//
// A trace recorded with rewrite --every and tool branch has a paths file
// beside it, <trace>.arrow.paths ([PathsSuffix]): an Arrow IPC stream of
// [PathsSchema], one chunk of one thread's packets per record batch
// (tid, seq, first_ns, last_ns, pending, tail, data). The packets
// (packets.go) hold only what the code does not imply; a decoder walks
// the rewritten module's branch map (section [PathMapSection],
// [PathMap]) between them (package analysis/paths). [PathsReader]
// validates the stream as [BatchReader] validates a trace.
//
// # How a stream ends
//
// A reader reports how the stream ended ([End]): with the end-of-stream
// marker FF FF FF FF 00 00 00 00 (closed); with zero bytes where a
// message would start (the runtime's unsealed tail: the process did not
// close its trace); at the end of the input between messages; or cut
// inside a message. In the last case every complete batch before the cut
// is returned, and the error is a *[FormatError] wrapping [ErrTruncated]
// whose Offset is where the incomplete message starts.
//
// # Hostile input
//
// The reader validates each message's framing and flatbuffer (with
// bounds-checked reads) before arrow-go decodes it: record batches must
// have one field node per column, the batch's row count in each, no
// nulls, no compression, and buffers inside the body and long enough for
// their rows. Message metadata is limited to 1 MiB; a body must fit in
// the rest of the input when its size is known (files, bytes.Reader), and
// is otherwise read in growing chunks, so allocations stay within a small
// multiple of the input's size. Malformed input gives a *[FormatError];
// it never panics (FuzzReader).
package formats
