/*
 * stint_abi.h - the contract between the rewriter (Go, package rewrite)
 * and the injected runtime (this directory).
 *
 * The rewriter lays these structures out in a rewritten module's new
 * segments; the runtime reads them at start-up and at every probe. Every
 * layout here is mirrored in runtime/abi.go, and runtime/abi_test.go pins
 * sizes and offsets on both sides, so a change here without a change there
 * fails the tests. Bump STINT_ABI_VERSION on any incompatible change.
 *
 * Addresses called "link vaddr" are virtual addresses as written in the
 * ELF file; at run time the module's load base is added. For a PIE or a
 * shared object the base is where the loader put it; for a fixed-address
 * executable it is 0. "Module-relative" means link vaddr (the value the
 * trace records, so that runs with ASLR compare).
 */
#ifndef STINT_ABI_H
#define STINT_ABI_H

#ifdef __ASSEMBLER__
#define STINT_U64(x) x
#else
#include <stdint.h>
#define STINT_U64(x) x##ULL
#endif

/* The version also covers the layout of the process-wide state every
 * module's runtime joins (runtime/src/stint.h): a module of another
 * build must not join it. */
#define STINT_ABI_VERSION 25

/* "STINTRT1" little-endian: first 8 bytes of the runtime blob. */
#define STINT_BLOB_MAGIC STINT_U64(0x315452544e495453)
/* "STINTMOD" little-endian: first 8 bytes of struct stint_module. */
#define STINT_MODULE_MAGIC STINT_U64(0x444f4d544e495453)

/* Event kinds: the values of the trace's "kind" column (formats/ mirrors them). */
#define STINT_K_JCC_TAKEN     1
#define STINT_K_JCC_NOT_TAKEN 2
#define STINT_K_JMP           3  /* direct jmp */
#define STINT_K_CALL          4  /* direct call */
#define STINT_K_RET           5
#define STINT_K_IND_JMP       6
#define STINT_K_IND_CALL      7
#define STINT_K_SYSCALL       8  /* dst = 0, value = syscall number (rax) */
#define STINT_K_BLOCK         9  /* src = dst = first instruction of the block */
#define STINT_K_CONTEXT       10 /* a new calling context: src = call site, dst = callee,
                                  * value = parent context id << 32 | context id (0 = a thread's root) */
/* Probe kinds of a compact complete trace (STINT_MF_PATHS) that are no
 * event and never appear in a trace. */
#define STINT_K_ENTRY         11 /* a function entry: %rsi = the return address at entry ((%rsp)) */
#define STINT_K_RESUME        12 /* where a call that may leave instrumented code returns */

/* Record kinds: the runtime's own rows (tid 0, modules 0xFFFF, time =
 * the period's start). formats/kind.go documents the fields. */
#define STINT_K_PERIOD        32 /* src = period index, dst = granted ns, value = used ns */
#define STINT_K_PERIOD_STATS  33 /* src = events recorded, dst = suppressed, value = enabled ns */
#define STINT_K_PERIOD_QOS    34 /* src = metric, dst = threshold (double bits), value = computed ns */
#define STINT_K_PERIOD_SWITCH 36 /* src = sites switched on at the start, dst = sites switched off, value = switching ns (in the period's used) */
#define STINT_K_PERIOD_CLOSE  37 /* the gate closed: src = how (STINT_CLOSE_*), dst = reserve ns kept, value = used ns then */
#define STINT_CLOSE_UNKNOWN   0  /* period-close src: a charge closed the gate but had not noted how when the period rolled */
#define STINT_CLOSE_CHARGE    1  /* period-close src: a probe's charge spent the budget (used + reserve) */
#define STINT_CLOSE_START     2  /* at the period's start: no budget, or earlier periods' debt spent it */
#define STINT_CLOSE_ROLL      3  /* at the period's end: a charge spent it but had not closed the gate */
#define STINT_K_RUN_END       35 /* time = end, src = exit status or STINT_RUN_END_UNKNOWN, value = run ns,
                                  * dst = int3 sites' traps taken (ABI 21, trap.c) */
#define STINT_RUN_END_UNKNOWN 0xffffffffu /* run-end src: exit status not seen (exit through DT_FINI) */
/* STINT_K_REFUSED + event kind: the log refused the event (once per run) */
#define STINT_REFUSED_BASE    64
/* Sampled runs (rewrite --sample): */
#define STINT_K_SAMPLE_RUN    38 /* once, at the start: src = method (STINT_SAMPLE_*), dst = its parameter (ppm of the events,
                                  * or N), value = interval ns */
#define STINT_K_SAMPLE_SET    39 /* a stratum's interval: src_module/src = the stratum (no module, 0: all events), dst = events
                                  * it had in the interval, value = samples written for it; time = the interval's end */
#define STINT_K_SAMPLE_READER 40 /* at run end: src = ns the reader thread worked, dst = ns it lived, value = samples dropped */
#define STINT_K_BLOCK_COUNT   41 /* (ABI 14, STINT_MF_COUNTS) a block's count: src_module/src = the block's first instruction,
                                  * dst = executions since its previous row, value = executions since the process began;
                                  * time = when the counters were read (each period's end, the run's end) */
#define STINT_SAMPLED_BASE    96 /* + event kind: an event the sampler took; time = its interval's end */
#define STINT_SAMPLE_RATE      1 /* each event with probability ppm / 1e6 */
#define STINT_SAMPLE_EVERY     2 /* every Nth event */
#define STINT_SAMPLE_RESERVOIR 3 /* a reservoir per function (a call's callee; other events' site) and interval */
#define STINT_SAMPLE_RES_SITE  4 /* a reservoir per probe site and interval */
#define STINT_SAMPLE_MIN       8 /* the smallest reservoir: every stratum that ran in an interval has samples in it */
#define STINT_SAMPLE_SITES  0x10 /* sample-run src flag: every method's strata are sites (a countdown per call
                                  * site, STINT_MF_COUNTDOWN); else rate and every have one stratum */
#define STINT_SAMPLE_ENTRIES 0x20 /* (ABI 20) sample-run src flag: every method's strata are the called
                                   * functions (an entry probe counting down per function, STINT_MF_ENTRIES) */

/* Tools (struct stint_module.tool). */
#define STINT_TOOL_BRANCH  1
#define STINT_TOOL_CALL    2
#define STINT_TOOL_SYSCALL 3
#define STINT_TOOL_BLOCK   4

/* struct stint_module.flags */
#define STINT_MF_EVERY   0x1  /* record every occurrence; never retarget arms or restore */
#define STINT_MF_SHARED  0x2  /* module is a shared object (entered through DT_INIT) */
#define STINT_MF_EXEC    0x4  /* module is the executable (entered through e_entry) */
#define STINT_MF_STATIC  0x8  /* statically linked executable: no dynamic loader */
#define STINT_MF_CONTEXT 0x10 /* context-preserving mode (tool call, with STINT_MF_EVERY): shadow
                               * stacks; each distinct calling context recorded once (STINT_K_CONTEXT) */
#define STINT_MF_PARK    0x20 /* rewrite --switch-sync: the off-switch may park threads on "jmp ." to switch
                               * STINT_PATCH_SYNC sites while the program has several (else only self mode) */
#define STINT_MF_RETS    0x40 /* rets_vaddr and nrets are set, and direct probes' rets fields with them */
#define STINT_MF_COLD    0x80 /* some patch has STINT_PATCH_COLD (the runtime looks for them only then) */
#define STINT_MF_COUNTDOWN 0x400 /* a sampled call tool (rewrite --sample): each call probe's trampoline reads
                                  * its probe's cache2 and, when it is not 0, decrements it and skips the
                                  * runtime (a countdown the sampler sets to its next skip) */
#define STINT_MF_PATHS   0x200 /* (ABI 13) with STINT_MF_EVERY: a compact complete trace. The probes append
                                * packets (formats/packets.go) to per-thread buffers that the runtime's writer
                                * thread writes to <trace>.paths; a decoder walks the module's branch map
                                * (section .stint.paths) for the rest. A direct call probe's rets field holds
                                * the call's length in bits 28-31 (no list) */
#define STINT_MF_ENTRIES 0x2000 /* (ABI 20) with STINT_MF_COUNTDOWN: calls are probed at the functions they
                                 * enter (STINT_PF_ENTRY probes), not at the call sites: the processor's
                                 * return-stack predictor sees every call, and each function counts down */
#define STINT_MF_STRIPES 0x4000 /* (ABI 20) with STINT_MF_ENTRIES: each entry probe counts down in its slot of
                                 * the calling thread's stripe (cd_base), not in the probe: a thread's stripe
                                 * is (%fs:0 >> STINT_STRIPE_SHIFT) % STINT_STRIPES, %fs:0 its thread pointer */
#define STINT_STRIPES      16
#define STINT_STRIPE_SHIFT 12
#define STINT_STRIPE_SLOT  32 /* a slot: the countdown pair (skip last set, countdown), the stratum, unused */
#define STINT_MF_CALLS   0x1000 /* (ABI 15) with STINT_MF_PATHS: a call chain (tool call). Only calls and
                                 * rets are probed; each appends its own address (TIP; a ret to the call
                                 * stack's top a RET_TIP, any other ret then its destination, an indirect
                                 * call its destination), no outcome bits, no walk */
#define STINT_MF_COUNTS  0x800 /* (ABI 14) tool block with exact counts: each block probe's trampoline adds 1 to
                                * its uint64_t at counts_vaddr (indexed like the probes) and never calls the
                                * runtime, which writes STINT_K_BLOCK_COUNT rows each period and at the end */
#define STINT_MF_LOGGED  0x100 /* (ABI 10) rewritten with --skip-covered: log_count, log_sum and the logged
                                * list describe the log the rewriter read (struct stint_module) */
#define STINT_MF_RETIRED 0x8000 /* rewritten with --retire-since and some site retired: the sites earlier
                                 * runs covered are unpatched, so a run writes into its tables, code and
                                 * trampolines only for what is new, and the runtime makes no private
                                 * copies of them at start (each page is copied when first written) */

/* A compact trace's thread block (STINT_MF_PATHS), found through %gs: the
 * trampolines' inline appends read its first two words. A jcc's arm
 * compares the thread's %fs base (rdfsbase) with the key and, when they
 * are equal, shifts its outcome bit into the pending word itself;
 * anything else (no block, another thread's, a thread outside
 * instrumented code or under a budget) calls the runtime. */
#define STINT_PATHS_KEY_OFF  0  /* u64: the owner's %fs base while inline appends may run, else 1 */
#define STINT_PATHS_TNT_OFF  8  /* u64: address of the chunk's pending outcome bits (under a leading 1) */
#define STINT_PATHS_TOP_OFF  16 /* u8: the call stack's top, an index into the ring below */
#define STINT_PATHS_STACK_OFF 24 /* u64[256]: the ring of return addresses (0 where none) */
#define STINT_PATHS_TAIL_OFF 2072 /* u64: address of the chunk's tail and tail_bits fields (a direct call
                                   * writes its address and the pending word there: a crashed thread's end) */
#define STINT_PATHS_KEY_TIP  3  /* the key while an indirect jmp's trampoline appends its TIP inline: the
                                 * thread's probes in a signal handler meanwhile are counted lost */
#define STINT_PATHS_CUR_OFF  2080 /* u8 *: where the next packet goes (an indirect branch's inline TIP) */
#define STINT_PATHS_END_OFF  2088 /* u8 *: the end of the chunk's data */
#define STINT_PATHS_PSB_AT_OFF 2096 /* u8 *: where the last PSB (or the chunk's data) began */
#define STINT_PATHS_LAST_OFF 2104 /* u64: the last TIP, SYNC or ASYNC address (a TIP is XOR this) */
#define STINT_PATHS_PSB_OFF  2112 /* u32: a chunk began since the last PSB: the runtime writes one next */
#define STINT_PATHS_OUT_LO_OFF 2128 /* u64: the start of a module the thread's runtime-handled TIPs left to,
                                     * one without a compact trace's probes (an inline TIP there leaves too) */
#define STINT_PATHS_OUT_SIZE_OFF 2136 /* u64: its size (0: none) */
#define STINT_PATHS_ROOM_OFF  2144 /* u64: inline appends left before the runtime must run, in units of
                                   * STINT_PATHS_ROOM_UNIT bytes: a SITE takes 1 unit, any other
                                   * STINT_PATHS_ROOM_TIP (0 while a PSB is due) */
#define STINT_PATHS_CURMOD_OFF 2152 /* u64: the struct stint_module whose branches a call chain's SITE
                                     * packets index now (0: none; the last probe's own address named it) */
#define STINT_PATHS_OUTSIDE_OFF 2176 /* u32: the thread left instrumented code ("outside", paths.c) */
#define STINT_PATHS_ROOM_UNIT 4
#define STINT_PATHS_ROOM_TIP  8
#define STINT_PATHS_KEY_OUT  8  /* the key minus the owner's %fs base while it is outside: its resume probe
                                 * (at the top of the call stack) pops inline */
#define STINT_PATHS_PSB_EVERY 16384 /* bytes of packets after a PSB past which the next is due */
#define STINT_PATHS_TNT_FULL 56 /* a pending word whose leading 1 is at this bit or above is flushed */
#define STINT_PATHS_FLUSH    1  /* %rsi of a jcc probe's call that only flushes (the bit is in) */

/* struct stint_probe.flags */
#define STINT_PF_DIRECT   0x1  /* dst is known statically (probe.dst); else dst/value in %rsi */
#define STINT_PF_VALUE    0x2  /* %rsi carries a value (syscall number), not a destination */
#define STINT_PF_SLOT     0x4  /* an indirect branch through a fixed slot the program does not write (a GOT
                               * entry, RELRO data): probe.dst is the slot's module-relative address */
#define STINT_PF_DELEG    0x8  /* (ABI 9) a jcc outcome that another probe records (an edge probe at its
                               * destination) or the --skip-covered log holds: this probe never records and
                               * its patch's nprobes leaves it out. The rewriter sets its state to
                               * STINT_PROBE_WATCHED, so that its arm calls the runtime, which lists the
                               * site for the off-switch (a site whose only recording probe never fires
                               * would otherwise never be listed, and never switched off) */
#define STINT_PF_PREDICT  0x10 /* (ABI 16; compact traces) an indirect jmp whose destination is most likely
                               * probe.dst (a PLT stub's jmp to a function the module defines): there it
                               * appends outcome bit 1, anywhere else its TIP; %rsi STINT_PATHS_FLUSH only
                               * flushes (the bit was appended inline) */
#define STINT_PF_NOPUSH   0x20 /* (ABI 18; call chains) a call that pushes nothing on the call stack: a PLT
                               * stub's to a function the module does not define (its ret has no probe) */
#define STINT_PF_ENTRY    0x40 /* (ABI 20; STINT_MF_ENTRIES) a probe at the start of function probe.dst:
                               * %rsi is the return address it was entered with; the event is the call
                               * that came there (the call instruction that ends at that address) */
#define STINT_PF_FINAL    0x80 /* (ABI 25) with STINT_PF_SLOT: only a hook changes the slot once it is bound:
                               * it lies in PT_GNU_RELRO, read-only once the dynamic linker has relocated the
                               * module, or it is a lazily bound PLT slot, and then probe.rets is 1 + its
                               * value in the file (the slot holds base + that until the entry's first call).
                               * In a mode that records each outcome once, the site retires once a bound
                               * value is recorded */
#define STINT_PROBE_WATCHED 2 /* stint_probe.state: an outcome recorded elsewhere (the log, or STINT_PF_DELEG)
                               * whose arm still calls the runtime (the off-switch's watch) */

/* struct stint_patch.flags */
#define STINT_PATCH_RESTORABLE 0x1 /* no other patch reads this patch's modified bytes */
#define STINT_PATCH_AT_START   0x2 /* addr is the patched instruction's first byte: the runtime may park threads there ("jmp .") while it restores bytes no single store covers */
#define STINT_PATCH_SWITCH     0x4 /* the off-switch may restore and re-apply this patch at any time (ABI 5):
                                    * restorable, one site's own bytes, within one aligned 8- or 16-byte word
                                    * (or see STINT_PATCH_SYNC); its trampoline's gate checks read gate word 1 */
#define STINT_PATCH_SYNC       0x8 /* with STINT_PATCH_SWITCH: the bytes straddle a word, so the runtime switches
                                    * the patch with the jmp-to-self + membarrier(SYNC_CORE) sequence, in batches
                                    * (AT_START, at least 3 bytes, its first two in one aligned 16-byte word) */
#define STINT_PATCH_READ       0x10 /* with STINT_PATCH_SWITCH (ABI 6): other patches' puns read this patch's bytes
                                     * (struct stint_module.reads_vaddr lists them); the period thread switches it
                                     * off only after its readers and on before them */
#define STINT_PATCH_READER     0x20 /* this patch's pun reads bytes of STINT_PATCH_READ patches: switched on only
                                     * while they are on */
#define STINT_PATCH_COLD       0x40 /* with STINT_PATCH_SWITCH: every probe of the patch is an open-ended one (ret,
                                     * indirect jump, syscall) of a site the rewrite --skip-covered log saw: the
                                     * runtime starts it switched off and switches it on only for new code (its
                                     * function's, a new call's return), not at period starts or rearms */
#define STINT_PATCH_HALVED     0x80 /* runtime: the site's bytes are the original ones but for its jcc's rel32,
                                     * which goes to the taken probe's thunk (patch_half) */

/* struct stint_chunk.flags */
#define STINT_CHUNK_RESERVED 0x1 /* lies inside a PROT_NONE PT_LOAD the loader reserved: map with MAP_FIXED */

/*
 * Test hook: when the environment holds STINT_TEST_FAIL_CHUNK=N (decimal),
 * the runtime treats chunk N of every module as unmappable (as if mmap
 * had failed with EEXIST), so tests can exercise the restore path.
 */
#define STINT_TEST_FAIL_CHUNK_ENV "STINT_TEST_FAIL_CHUNK"
/* Test hook: STINT_TEST_MAX_MAP_COUNT=N makes the runtime take N for
 * vm.max_map_count when it decides how many chunks it may map. */
#define STINT_TEST_MAX_MAP_COUNT_ENV "STINT_TEST_MAX_MAP_COUNT"
/* Test hook: STINT_TEST_NO_MEMFD=1 makes the runtime map chunks as it
 * does where memfd_create is unavailable and the file has no stub area
 * (anonymous copies). */
#define STINT_TEST_NO_MEMFD_ENV "STINT_TEST_NO_MEMFD"
/* Test hook: STINT_TEST_NO_STUB_FILE=1 makes the runtime build the stub
 * area in a memfd, as for a file without one (ABI 7). */
#define STINT_TEST_NO_STUB_FILE_ENV "STINT_TEST_NO_STUB_FILE"
/* Test hook: STINT_TEST_NO_PROCMAP=1 makes the runtime find the module
 * of a destination outside every known one by reading /proc/self/maps,
 * as on kernels without PROCMAP_QUERY; =2 by the query alone, with no
 * scan when it cannot answer. */
#define STINT_TEST_NO_PROCMAP_ENV "STINT_TEST_NO_PROCMAP"
/* Test hook: STINT_TEST_LOG_LOAD=1 makes the runtime say on stderr, for
 * each module it applies the log to, whether it took the rewriter's list
 * of logged probes (STINT_MF_LOGGED) or looked up every probe; =2 makes
 * it look up every probe whatever the log holds (and say so). */
#define STINT_TEST_LOG_LOAD_ENV "STINT_TEST_LOG_LOAD"
/* Test hook: STINT_TEST_SAVE_HOLD=PATH makes the runtime's thread, each
 * time it saves the redundancy log, create PATH and hold the log's lock
 * for 300 ms before it writes, so a test can end the program while a
 * save is under way. */
#define STINT_TEST_SAVE_HOLD_ENV "STINT_TEST_SAVE_HOLD"
/* Test hook: STINT_TEST_SAMPLE_SEED=S seeds the sampler's draws from S
 * (rewrite --sample), so that a test's run draws the same sequence. */
#define STINT_TEST_SAMPLE_SEED_ENV "STINT_TEST_SAMPLE_SEED"
/* Test hook: STINT_TEST_SAMPLE_SLOTS=N (1024 up to the arena's size) makes
 * each half of the sampler's arena hold N samples, so that a test fills
 * one in a short run. */
#define STINT_TEST_SAMPLE_SLOTS_ENV "STINT_TEST_SAMPLE_SLOTS"
/* Test hook: STINT_TEST_CHARGE_STALL=DURATION ("30ms") makes the first
 * probe call whose charge spends a period's budget sleep that long before
 * it closes the gate, so that a test can have the period roll over in
 * between (a thread descheduled there). With "note:DURATION" the first
 * call to close a gate after period 0 sleeps between closing it and
 * noting how it closed (its KindPeriodClose row). */
#define STINT_TEST_CHARGE_STALL_ENV "STINT_TEST_CHARGE_STALL"
/* Test hook: STINT_TEST_READEE_STALL=DURATION ("200us") makes the
 * runtime's thread, in each pass that switches readees off, wait that
 * long between finding a readee's readers off and taking the readee, so
 * that a test can have the program's thread switch a reader on in
 * between (rets.c, ret_hold_readees). */
#define STINT_TEST_READEE_STALL_ENV "STINT_TEST_READEE_STALL"
/* Test hook: STINT_TEST_SWITCH_STALL=DURATION ("200us") makes the
 * runtime's thread wait that long after each site it switches on at a
 * period's start, so that a test can have that batch cost more than the
 * budget (a batch far slower than its estimate: the VM descheduling the
 * thread, membarriers that wait on busy cores). */
#define STINT_TEST_SWITCH_STALL_ENV "STINT_TEST_SWITCH_STALL"
/* Test hook: STINT_TEST_BATCH_STALL=DURATION ("3ms") makes the first
 * batch of fewer than 16 sites from the fourth period on (a window's end,
 * a rearm) spin that long of its thread's CPU time, once, so that a test
 * can see one slow small batch and what the estimates make of it
 * (budget.c, sw_site_cost). */
#define STINT_TEST_BATCH_STALL_ENV "STINT_TEST_BATCH_STALL"
/* Test hook: STINT_TEST_ROLL_KILL=K (1-4) makes the first thread to fill
 * a compact trace's chunk kill its process with SIGKILL at step K of
 * copying it out (pathsfile.c, paths_chunk_roll): 1 once the copy's space
 * is claimed, 2 once its data landed, 3 once its header landed, 4 once
 * the thread's chunk is empty and half cleared. */
#define STINT_TEST_ROLL_KILL_ENV "STINT_TEST_ROLL_KILL"

/* Bytes of struct stint_module.options (NUL included). */
#define STINT_OPTIONS_SIZE 136

#define STINT_NO_PATCH 0xffffffffu

/* Blob header: the first bytes of the runtime blob (runtime/blob/stint.bin). */
#define STINT_BLOB_OFF_MAGIC        0
#define STINT_BLOB_OFF_VERSION      8
#define STINT_BLOB_OFF_SIZE         12
#define STINT_BLOB_OFF_ENTRY_EXEC   16 /* u32: stub installed as e_entry */
#define STINT_BLOB_OFF_ENTRY_INIT   20 /* u32: stub installed as DT_INIT */
#define STINT_BLOB_OFF_ENTRY_FINI   24 /* u32: stub installed as DT_FINI */
#define STINT_BLOB_OFF_PROBE        28 /* u32: stint_probe_entry, the target of trampolines' call */
#define STINT_BLOB_OFF_MODULE_REL   32 /* i64: written by the rewriter: link vaddr of struct stint_module minus link vaddr of the blob */
#define STINT_BLOB_HEADER_SIZE      40

#ifndef __ASSEMBLER__

struct stint_blob_header {
	uint64_t magic;        /* STINT_BLOB_MAGIC */
	uint32_t abi_version;  /* STINT_ABI_VERSION */
	uint32_t size;         /* bytes of the whole blob */
	uint32_t entry_exec;   /* offsets from the start of the blob */
	uint32_t entry_init;
	uint32_t entry_fini;
	uint32_t probe;
	int64_t  module_rel;   /* patched by the rewriter */
};

/*
 * One per rewritten module, in the module's RW data segment. The rewriter
 * fills everything but the fields marked "runtime".
 *
 * ABI 2 took the last 32 bytes of options (192 -> 160 bytes) for the stub
 * list, the dependency array and the stub area size, ABI 3 another 8
 * for the gate page and ABI 4 16 for the trace ends, so the struct keeps
 * its size; ABI 6 and 7 grew it.
 */
struct stint_module {
	uint64_t magic;          /*   0: STINT_MODULE_MAGIC */
	uint32_t abi_version;    /*   8 */
	uint32_t flags;          /*  12: STINT_MF_* */
	uint32_t tool;           /*  16: STINT_TOOL_* */
	uint32_t nprobes;        /*  20 */
	uint64_t self_vaddr;     /*  24: link vaddr of this struct: base = (uintptr_t)this - self_vaddr */
	uint64_t image_end;      /*  32: link vaddr just past the highest original segment */
	uint64_t probes_vaddr;   /*  40: struct stint_probe[nprobes] */
	uint64_t patches_vaddr;  /*  48: struct stint_patch[npatches] */
	uint64_t chunks_vaddr;   /*  56: struct stint_chunk[nchunks] */
	uint32_t npatches;       /*  64 */
	uint32_t nchunks;        /*  68 */
	uint64_t text_lo;        /*  72: link vaddr range holding patched original code */
	uint64_t text_hi;        /*  80 */
	uint64_t tramp_lo;       /*  88: link vaddr range of the near trampoline segment */
	uint64_t tramp_hi;       /*  96 */
	uint64_t orig_entry;     /* 104: original e_entry (executable) or DT_INIT (shared object); 0 = none */
	uint64_t orig_fini;      /* 112: original DT_FINI; 0 = none */
	uint8_t  build_id[32];   /* 120: GNU build-id of the original file */
	uint32_t build_id_len;   /* 152 */
	uint32_t module_id;      /* 156: runtime: index in the process-wide module table */
	uint64_t base;           /* 160: runtime: load base */
	uint64_t runtime_state;  /* 168: runtime: private */
	uint64_t stubs_vaddr;    /* 176: struct stint_stub[nstubs], sorted by off */
	uint64_t deps_vaddr;     /* 184: uint32_t[ndeps]: patch indices, sliced by the chunks */
	uint64_t stub_area_size; /* 192: bytes of the stub area (a multiple of 4096) */
	uint32_t nstubs;         /* 200 */
	uint32_t ndeps;          /* 204 */
	char     options[STINT_OPTIONS_SIZE]; /* 208: NUL-terminated, e.g. "tool=branch every=0 budget=10% period=100ms" */
	uint64_t trace_ends_vaddr; /* 344: uint32_t[ntrace_ends], sorted: ends of unconditional transfers, minus text_lo */
	uint32_t ntrace_ends;    /* 352 */
	uint32_t hit;            /* 356: runtime: nonzero = its probes' calls may be answered from the hit
	                          *      table (runtime/src/hit.h); 0 in the file */
	uint64_t gate_vaddr;     /* 360: link vaddr of the gate page (4096 bytes, page aligned, zero in the file) */
	uint64_t reads_vaddr;    /* 368: struct stint_read[2 * nreads] (ABI 6): the (reader, read) pairs of switchable
	                          *      patches sorted by reader, then the same pairs sorted by read */
	uint32_t nreads;         /* 376 */
	uint32_t pad_rd;         /* 380 */
	uint64_t rets_vaddr;     /* 384: uint32_t[nrets] (STINT_MF_RETS): lists of ret probes, each a count
	                          *      followed by that many probe indices (struct stint_probe.rets) */
	uint32_t nrets;          /* 392: words */
	uint32_t pad_rt;         /* 396 */
	uint64_t stub_file_off;  /* 400: ABI 7: file offset of the stub file (struct stint_stub_file, then the
	                          *      stub area's stub_area_size bytes) in the module's own file; 0 = none:
	                          *      the runtime builds the area from the stub list */
	uint64_t stub_file_tag;  /* 408: ABI 7: the stub file's tag, so a file rewritten again is not used */
	uint64_t log_sum;        /* 416: ABI 10 (STINT_MF_LOGGED): the sum of mix(k0, k1) over the distinct entries
	                          *      of this module in the log the rewriter read (runtime: redlog.c, logkey) */
	uint32_t log_count;      /* 424: how many distinct entries that log has whose source is this module */
	uint32_t nlogged;        /* 428 */
	uint64_t logged_vaddr;   /* 432: uint32_t[nlogged]: the direct probes (not STINT_PF_DELEG) whose outcome is
	                          *      in that log. When the log read at start has the same entries for the
	                          *      module, the runtime retires these instead of looking up every probe */
	uint64_t counts_vaddr;   /* 440: ABI 14 (STINT_MF_COUNTS): uint64_t[nprobes], zero in the file: probe i's
	                          *      executions (block probes; others stay 0) */
	uint64_t cd_base;        /* 448: ABI 20 (STINT_MF_STRIPES): runtime: the entry probes' countdowns per stripe
	                          *      of threads, STINT_STRIPES x nprobes slots of STINT_STRIPE_SLOT bytes (slot
	                          *      i of stripe s at s * nprobes + i), mapped at the module's start; 0 until then
	                          *      (a trampoline then counts nothing) */
	uint64_t traps_vaddr;    /* 456: ABI 21: struct stint_trap[ntraps] (RW, after the chunks), sorted by site: the sites no jump fits,
	                          *      patched with an int3 that the runtime's SIGTRAP handler sends on to
	                          *      their trampolines */
	uint32_t ntraps;         /* 464 */
	uint32_t fini_probe;     /* 468: ABI 22: 1 + the index of the probe of .fini's one site (its ret, or its
	                          *      block), 0 = none. DT_FINI's code runs after the module's finaliser
	                          *      (stint_fini), so the finaliser records that probe itself, as if it
	                          *      fired: .fini runs straight to its ret, which goes where the
	                          *      finaliser returns (the rewriter checks both) */
	/* ABI 23 (STINT_MF_LOGGED): the --skip-covered log as the rewriter read it, whole and undamaged, so that a
	 * run of the same file grown by appends reads only what was appended (redlog.c, log_setup) */
	uint64_t log_end;        /* 472: its length; 0 = none (the runtime reads its log whole) */
	uint64_t log_last;       /* 480: the offset of its last block */
	uint8_t  log_last_head[16]; /* 488: that block's first 16 bytes (magic, count, CRC, build-id length) */
	uint64_t seen_vaddr;     /* 504: uint64_t[2 * nseen]: the runtime's keys (k0, k1) of this module's returns,
	                          *      indirect branches and syscalls in that log, sorted by k0, then k1: what
	                          *      log_seen looks up when the log's first log_end bytes go unread */
	uint32_t nseen;          /* 512 */
	uint32_t ncold;          /* 516: ABI 24 */
	uint64_t cold_vaddr;     /* 520: uint32_t[ncold]: the open-ended probes whose patch is STINT_PATCH_COLD, which
	                          *      the runtime lists off at load (sw_cold_load) without reading every probe */
};                           /* 528 */

/* ABI 21: an int3 site (place.TacticTrap) and its trampoline, both
 * module-relative. A SIGTRAP whose int3 lies at base + site resumes at
 * base + tramp, the state being the site's, as a jump would leave it. */
struct stint_trap {
	uint64_t site;   /*  0 */
	uint64_t tramp;  /*  8 */
	uint32_t patch;  /* 16: the site's patch index */
	uint32_t hits;   /* 20: runtime: traps taken (0 in the file) */
};                   /* 24 */

/* ABI 7: the header of the stub area stored in the module's file, a page
 * of its own at stub_file_off (page aligned); the area follows it. */
#define STINT_STUB_FILE_MAGIC 0x425453544e495453ULL /* "STINTSTB" */
struct stint_stub_file {
	uint64_t magic;     /* STINT_STUB_FILE_MAGIC */
	uint64_t tag;       /* = stint_module.stub_file_tag */
	uint64_t area_size; /* = stint_module.stub_area_size */
	uint64_t nstubs;    /* = stint_module.nstubs */
};

/* A pun's dependency between two switchable patches (ABI 6): patch
 * `reader`'s jump reads bytes that patch `read` modified. */
struct stint_read {
	uint32_t reader;
	uint32_t read;
};

/*
 * The gate page. Every probe call in a trampoline first loads the gate
 * word (the page's first 8 bytes) with a rip-relative mov and skips the
 * runtime call when it is STINT_GATE_CLOSED: that is how a spent budget
 * turns the probes off, at the cost of a load, a lea and a jrcxz per
 * probe (the off-switch below removes even that for most sites). The
 * runtime replaces the page with an anonymous one marked MADV_WIPEONFORK,
 * so a forked child starts with the gate open (0) and its first probe
 * reaches the runtime, which notices the fork and sets the child up.
 */
/*
 * The off-switch (ABI 5). A patch flagged STINT_PATCH_SWITCH can be undone
 * and redone by one atomic store at any time, so while the budget is
 * spent the runtime writes back the original bytes of such sites and
 * re-applies them when the next period grants a budget: the program runs
 * its own code, not a trampoline that skips the probe. The trampolines of
 * these sites read gate word 1 (the page's second 8 bytes) instead of
 * word 0. Every gate check is
 *
 *     mov word(%rip),%rcx ; lea -1(%rcx),%rcx ; jrcxz closed
 *
 * so value 1 (STINT_GATE_CLOSED) steps over the probe and any other value
 * calls it. Word 0 is 0 or 1. Word 1 is 0 while the gate is open, and
 * while it is closed either 1 (the runtime cannot switch this module's
 * sites: it steps over, as word 0 does) or STINT_GATE_SWITCH: a site that
 * still jumps to its trampoline calls the runtime, which restores the
 * site's original bytes, so the next execution runs the original code.
 *
 * ABI 6: a patch whose bytes other patches' puns read (STINT_PATCH_READ:
 * an E9Patch B2/P/T1/T2 neighbour, or an instruction evicted for one) is
 * switchable too when all its readers are. A thread only ever reaches
 * such bytes at an instruction's first byte or through a reader's jump,
 * so with the readers' original bytes back and every core serialised
 * (membarrier SYNC_CORE) nothing can decode the old pun any more: the
 * runtime's period thread switches readers off before what they read,
 * and what they read on before them. (T3 neighbours are never switchable:
 * a thread may rest on the landing pad inside them.)
 */

/*
 * Trace ends (ABI 4): where Pin-style traces stop, for the DIME* region
 * log policies. A trace entered at address A runs to the first trace end
 * above A: the address just past the first jmp, call, ret or indirect
 * transfer at or after A (conditional branches do not end it).
 */

/*
 * The QoS page (QDIME): how a metric analyzer (`stint qos run` / `qos
 * watch`, package qos) tells the runtime the traced program's service
 * level. The analyzer creates a 4096-byte file (normally in /dev/shm) and
 * passes its path in STINT_QOS; the runtime's period thread maps it
 * read-only (retrying every period until the file exists) and, at every
 * period boundary, computes the next period's budget from the latest
 * sample (the paper's Equation 1; see budget.c). All fields little-endian.
 *
 * The writer updates a sample as a seqlock: seq odd, then the fields,
 * then seq even (release stores); a reader that sees seq odd or changed
 * retries. A sample counts only while it is fresh: state RUNNING and
 * taken less than 2 * interval_ns + the period ago. Without a fresh
 * sample the runtime grants its configured budget (STINT_BUDGET /
 * --budget): never more. Metric values are doubles (IEEE-754 bits),
 * finite and >= 0; anything else counts as no sample.
 */
#define STINT_QOS_MAGIC     STINT_U64(0x534f51544e495453) /* "STINTQOS" */
#define STINT_QOS_VERSION   1
#define STINT_QOS_PAGE_SIZE 4096
#define STINT_QOS_ENV       "STINT_QOS"

/* struct stint_qos_page.flags */
#define STINT_QOS_LOWER_IS_BETTER 0x1 /* e.g. latency: the threshold is a ceiling */

/* struct stint_qos_page.tuning: the denominator of Equation 1 */
#define STINT_QOS_TUNE_SUM   0 /* (v-T)/(v+T) * P: the paper's choice (conservative) */
#define STINT_QOS_TUNE_SPAN  1 /* (v-T)/(M-T) * P: M = best value expected (max) */
#define STINT_QOS_TUNE_VALUE 2 /* (v-T)/v * P (lower is better: (T-v)/T * P) */

/* struct stint_qos_page.state */
#define STINT_QOS_STARTING 0 /* no sample yet */
#define STINT_QOS_RUNNING  1 /* value is the latest sample */
#define STINT_QOS_FAILING  2 /* the source stopped answering: value is stale */
#define STINT_QOS_STOPPED  3 /* the analyzer exited */

#ifndef __ASSEMBLER__
struct stint_qos_page {
	uint64_t magic;          /*   0: STINT_QOS_MAGIC */
	uint32_t version;        /*   8: STINT_QOS_VERSION */
	uint32_t flags;          /*  12: STINT_QOS_LOWER_IS_BETTER */
	uint32_t tuning;         /*  16: STINT_QOS_TUNE_* */
	uint32_t state;          /*  20: STINT_QOS_* state */
	uint64_t seq;            /*  24: seqlock: odd while a sample is being written */
	uint64_t threshold;      /*  32: T (double bits) */
	uint64_t max;            /*  40: M for STINT_QOS_TUNE_SPAN (double bits), else 0 */
	uint64_t value;          /*  48: v, the latest sample (double bits) */
	uint64_t sample_mono_ns; /*  56: CLOCK_MONOTONIC when v was taken; 0 = none yet */
	uint64_t interval_ns;    /*  64: the analyzer's sampling interval */
	uint64_t samples;        /*  72: samples published so far */
	uint32_t analyzer_pid;   /*  80 */
	uint32_t pad;            /*  84 */
	char     source[128];    /*  88: the metric source, NUL-terminated (for people) */
};                           /* 216; the rest of the page is zero */
#endif

#define STINT_GATE_OPEN   0
#define STINT_GATE_CLOSED 1
#define STINT_GATE_SWITCH 2 /* word 1 only: closed, and the runtime switches a calling site off */
#define STINT_GATE_WORD1  8 /* byte offset of gate word 1 in the gate page */

/*
 * One per probe outcome. A jcc site has two probes (taken, not taken);
 * every other site one. Trampolines call the runtime with %rdi = &probe.
 */
struct stint_probe {
	uint64_t src;          /*  0: module-relative address of the probed instruction */
	uint64_t dst;          /*  8: module-relative destination if STINT_PF_DIRECT, slot if STINT_PF_SLOT,
	                        *     likely destination if STINT_PF_PREDICT */
	uint64_t arm;          /* 16: module-relative address of a rel32 field in the trampoline that
	                        *     jumps to this probe's call; once the outcome is recorded the runtime
	                        *     may retarget it to arm_to (0 = no such arm) */
	uint64_t arm_to;       /* 24: module-relative address the arm jumps to once recorded
	                        *     (probes without STINT_PF_DIRECT have no arm: the runtime
	                        *     uses arm and arm_to as two more cache entries) */
	uint32_t module_back;  /* 32: bytes from this probe back to its struct stint_module */
	uint32_t patch;        /* 36: index of the site's patch, or STINT_NO_PATCH */
	uint8_t  kind;         /* 40: STINT_K_* */
	uint8_t  flags;        /* 41: STINT_PF_* */
	uint8_t  state;        /* 42: runtime: nonzero once recorded (the rewriter writes STINT_PROBE_WATCHED
	                        *     for a STINT_PF_DELEG probe, 0 for any other) */
	uint8_t  pad0[1];      /* 43: runtime (the off-switch's watch count) */
	uint32_t rets;         /* 44: a direct call's callee returns (STINT_MF_RETS): 1 + the word offset in
	                        *     rets_vaddr of the list of the ret probes it may return through (its
	                        *     own, and those of functions it tail-jumps to) in bits 0-27, the
	                        *     call's length in bits 28-31; any other direct probe: its own
	                        *     function's sites (rets, those of functions it tail-jumps to, its
	                        *     indirect jumps and calls, and its jccs if the list stays short),
	                        *     length 0; 0 = no list */
	uint64_t cache;        /* 48: runtime: last destination recorded (indirect probes); ABI 8: a direct
	                        *     probe of a STINT_PATCH_SWITCH patch holds its thunk, the module-relative
	                        *     address its arm first jumps to (written by the rewriter: the off-switch
	                        *     sends arms back there), 0 for other direct probes */
	uint64_t cache2;       /* 56: runtime: the destination recorded before cache (a second entry) */
};                         /* 64 */

/*
 * One per patched instruction: what to write back to restore the original
 * once every probe of the site has recorded (default mode).
 */
struct stint_patch {
	uint64_t addr;         /*  0: module-relative address of the first modified byte */
	uint8_t  len;          /*  8: number of modified bytes (<= 16) */
	uint8_t  flags;        /*  9: STINT_PATCH_* */
	uint16_t nprobes;      /* 10: probes that must record before the restore */
	uint32_t remaining;    /* 12: runtime: probes not yet recorded (rewriter writes nprobes) */
	uint8_t  orig[16];     /* 16: the original bytes */
};                         /* 32 */

/*
 * Stubs: the 5-byte jmp rel32 that must sit at fixed addresses (where a
 * punned jump lands). The runtime builds one "stub area" (stub_area_size
 * bytes, a memfd when it can) by writing each stub's code at its offset
 * (the rest of a page that holds stubs is int3; other pages stay zero and
 * cost nothing), then maps each chunk from the area at the chunk's vaddr.
 * The area is shared: chunks overlap in it wherever their stubs do not
 * collide (package rewrite/place, AddrSpace.Layout), so a chunk brings
 * along other chunks' stubs at offsets nothing jumps to. A stub's rel32
 * does not depend on the load base (stub and target move together), so
 * the rewriter computes it.
 */
struct stint_stub {
	uint64_t off;          /*  0: offset of the stub in the stub area */
	uint8_t  code[8];      /*  8: e9 rel32; bytes 5..7 unused (zero) */
};                         /* 16 */

/*
 * A range of stub space the runtime maps. If it cannot be mapped the
 * runtime writes back the original bytes of patches deps[deps_off ..
 * deps_off+ndeps): every patch whose stub lies in the chunk, plus,
 * transitively, every patch whose pun reads bytes a restored patch
 * modified. Then the code never reaches the chunk and the rest still runs
 * probed.
 */
struct stint_chunk {
	uint64_t vaddr;        /*  0: link vaddr where the chunk must appear (page aligned; may wrap below 0 for PIE) */
	uint64_t size;         /*  8: bytes (multiple of the page size) */
	uint64_t src_off;      /* 16: offset in the stub area of the chunk's first byte (page aligned) */
	uint32_t flags;        /* 24: STINT_CHUNK_* */
	uint32_t ndeps;        /* 28: patches to restore if the chunk cannot be mapped */
	uint32_t deps_off;     /* 32: index of the first in module.deps_vaddr */
	uint32_t pad;          /* 36 */
};                         /* 40 */

#endif /* __ASSEMBLER__ */
#endif /* STINT_ABI_H */
