// Package cct builds call-context trees (CCTs) from stint traces and
// compares them, as the DIME* paper does for VLC (Arafa et al., table 1:
// the share of a reference tree's nodes and edges that a budgeted run
// extracted).
//
// # Model
//
// A node is a calling context: the path of function entries (call
// destinations, as module + address) from the root. Its Calls count the
// call events that entered it. An edge is a call made in a context: the
// caller's context, the call site and the callee's context, with the
// number of calls through it; two call sites of one function that call
// the same function are two edges into one node, which is why edge and
// node coverage differ.
//
// # Building
//
// Call, ind-call and ret events (and the refusal rows of those kinds:
// occurrences a redundancy log suppressed, which happened all the same)
// drive one shadow stack per thread (run, tid); other events are
// ignored. A call pushes a frame for the callee's context under the
// top frame's. A return to D matches the nearest frame whose call site
// S satisfies S < D <= S+15 in D's module (the trace holds the call
// instruction's address, not the return address; x86 instructions are
// at most 15 bytes): the frames above it are unwound (longjmp, C++
// exceptions, returns the trace missed) and counted. A return that
// matches no frame is counted as unmatched and changes nothing.
//
// Traces have gaps: periods whose budget was spent, calls from code that
// is not rewritten (main is called by libc), tail calls (a jmp), signal
// handlers (entered by the kernel), and in default mode every occurrence
// of a (site, destination) after its first. With a symbol resolver the
// builder repairs the stack from what each call site says: the function
// that contains the call site must be the top frame's. If it is deeper
// on the stack, the frames above it are popped (Stats.Repaired); if it
// is not on the stack, a frame for it is pushed, entered without a call
// (Node.Inferred, Stats.Inferred): this is how main, thread start
// functions, callbacks from libraries, tail-called functions and signal
// handlers get their own contexts. An unmatched return from the top
// frame's own function pops that frame (Stats.PoppedByFunc): main
// returning to libc, a handler returning to the signal trampoline.
// [WithFrameStarts] completes the symbol tables with the function starts
// of .eh_frame_hdr, so that stripped modules are repaired too (their
// functions then have no names). Without either (Options.NoRepair, or
// no readable module file) only return matching applies: callees of main hang off the root, a tail-called
// function's calls appear under the function that jumped to it, and
// after a longjmp the stale frames stay until a return unwinds them.
//
// Each thread's stack is at most Options.MaxDepth frames deep; calls
// beyond are counted (Stats.TooDeep) and not pushed.
//
// # Context-preserving mode
//
// A trace of rewrite --tool call --context holds KindContext rows
// instead of calls and returns: the runtime keeps exact shadow stacks
// (popping frames by stack pointer) and writes each new (parent
// context, call site, callee) once, parents first, with per-process
// context ids (0: a thread's root). Each row adds one call to the node
// (parent's node, callee) and its edge; no repair is needed. A row
// whose parent id was never written is attached to the thread's root
// and counted (Stats.Orphans). [Forest.ContextMode] says a forest is
// built from such traces. A budgeted run in this mode yields exact
// nodes, only fewer of them.
//
// # Default mode and --every
//
// A trace recorded with rewrite --every has every call, and counts are
// numbers of calls. In default mode the runtime records each distinct
// (site, destination) once per run, so counts are mostly 1, contexts
// reached again through an already recorded call are not seen, and
// returns are recorded once per (site, return address): the tree says
// which contexts were seen, and the repair above is what keeps it
// plausible. [Forest.Every] says which case a forest is.
//
// # Merging
//
// Threads of all runs are merged into one tree: contexts are matched by
// their path from the root (the roots of all threads are one root),
// modules across runs by build-id (else path), counts are summed.
// Options.PerThread also keeps each thread's own tree. [Merge] merges
// trees the same way.
//
// # File format
//
// [Write] writes a forest as one JSON object (addresses as "0x…"
// strings, since JSON numbers above 2^53 do not survive JavaScript):
//
//	{"format":"stint-cct","version":1,"every":false,
//	 "modules":[{"path":"/usr/bin/demo","build_id":"d00d","symbols":"…"}],
//	 "runs":[{"file":"demo.1.arrow","run":0,"pid":42,"tool":"call","every":false}],
//	 "warnings":["…"],
//	 "trees":[{"name":"merged","run":-1,"tid":0,"stats":{…Stats…},
//	   "nodes":[{"id":0,"parent":-1,"module":-1,"entry":"0x0","calls":0,"depth":0},
//	            {"id":1,"parent":0,"module":0,"entry":"0x1139","name":"main","calls":0,"inferred":1,"depth":1}],
//	   "edges":[{"caller":1,"callee":2,"module":0,"site":"0x1150","kind":"call","calls":1}]}]}
//
// The first tree is the merged one (run -1); per-thread trees follow
// (run = index into runs). Nodes are in preorder, children sorted by
// (module, entry); node 0 is the root; a node's parent is an earlier
// node. module indexes modules, -1 meaning an absolute address. An
// edge's callee is a child of its caller.
//
// # Hostile input
//
// [Read] checks every index and the tree invariants ([Tree.CheckValid])
// and returns a *[FormatError], never panics (FuzzRead). Trace input is
// read with package merge, which validates every batch.
package cct
