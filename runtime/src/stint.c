/*
 * stint.c - the runtime injected into every module stint rewrites.
 *
 * Design
 * ------
 * This file is compiled freestanding (no libc, no startup files) into a
 * flat position-independent blob (runtime/blob/stint.bin) that the
 * rewriter copies into each rewritten module. It cannot use libc because
 * it runs before the program's libc is initialised (from e_entry or
 * DT_INIT), in programs that have no libc at all (static, Go), and from
 * any instruction of the program, including inside signal handlers and
 * inside libc itself while libc holds its own locks. So: raw system calls
 * (sys.h), our own memcpy/memset, no errno, no TLS (%fs is not set up when
 * we first run, and -fno-stack-protector keeps gcc from reading it).
 *
 * ABI: the System V x86-64 calling convention between the asm stubs
 * (entry.S) and C; the structures of include/stint_abi.h between the
 * rewriter and us. The blob is read-only and executable, so there are no
 * mutable globals at all: per-module state lives in the module's own
 * struct stint_module (in its RW segment) and process-wide state in one
 * anonymous mapping at a fixed address (STINT_GLOBAL_ADDR) that every
 * rewritten module of the process finds and joins. Compiled with
 * -mgeneral-regs-only, so the program's vector and x87 state is never
 * touched; stint_probe_entry saves every general register and the flags
 * the C code may change.
 *
 * Reentrancy: a probe can fire on any thread at any time, including in a
 * signal handler that interrupted the runtime itself on the same thread.
 * Nothing here ever blocks on a lock: shared state is updated with atomic
 * instructions (fetch-add to reserve a trace row, compare-and-swap to
 * claim a probe or a hash-set slot), the few things that need exclusion
 * (scanning /proc/self/maps into a shared scratch buffer, re-opening the
 * trace after fork) use a try-lock and give up when it is taken, and every
 * wait is a bounded spin after which the event is dropped and counted. A
 * handler that interrupts a half-written row therefore costs at most that
 * handler's event, never a deadlock.
 *
 * Trace file: see struct stint_trace in stint.h and docs/DESIGN.md.
 * Any setup failure prints one line to fd 2 and leaves the program running
 * untraced: the runtime never exits, aborts or signals.
 */
/*
 * The runtime is one translation unit: this file includes every
 * subsystem's file, so that gcc inlines across them on the probe path
 * (stint_record -> record_probe -> emit, hash_add, budget_charge). Each
 * file includes stint.h, the one private header.
 */
#include "stint.h"

#include "lib.c"
#include "stacks.c"
#include "process.c"
#include "options.c"
#include "trace.c"
#include "record.c"
#include "patch.c"
#include "periods.c"
#include "sample.c"
#include "qos.c"
#include "sw_list.c"
#include "sw_sync.c"
#include "sw_batch.c"
#include "sw_budget.c"
#include "redlog.c"
#include "regions.c"
#include "rets.c"
#include "contexts.c"
#include "pathsfile.c"
#include "paths.c"
#include "counts.c"
#include "chunks.c"
#include "trap.c"
#include "testhooks.c"
#include "init.c"
