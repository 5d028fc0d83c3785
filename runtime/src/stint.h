/*
 * stint.h - the runtime's private header: the process-wide state (one
 * sub-struct per subsystem), the types the subsystems share, and a
 * prototype of every function. The .c files are one translation unit
 * (stint.c includes them), so that gcc inlines across subsystems on the
 * probe path; each includes this header and nothing of the others.
 */
#ifndef STINT_H
#define STINT_H

#include "sys.h"
#include "stint_abi.h"
#include "stint_arrow.h"
#include "hit.h"

#define STINT_API __attribute__((visibility("default"), used))
#define LIKELY(x) __builtin_expect(!!(x), 1)
#define UNLIKELY(x) __builtin_expect(!!(x), 0)

/* ---- the little string library we need ---- */

#ifdef STINT_BLOB
/* gcc may emit calls to these for structure copies. */
void *memcpy(void *d, const void *s, size_t n) __attribute__((visibility("hidden")));
void *memset(void *d, int c, size_t n) __attribute__((visibility("hidden")));
#endif

/* A bounded string builder: writes past cap are dropped, never overrun. */
struct sbuf {
	char *p;
	size_t len, cap;
};

/* ---- process-wide state ---- */

#define STINT_GLOBAL_ADDR   ((uintptr_t)0x3e5700000000ULL)
#define STINT_GLOBAL_MAGIC  0x4c424f4c47544e53ULL /* "SNTGLOBL" */
#define STINT_GLOBAL_SIZE   ((size_t)32 << 20)
#define STINT_WIPE_ADDR     (STINT_GLOBAL_ADDR + STINT_GLOBAL_SIZE)
#define STINT_WIPE_SIZE     4096
_Static_assert(HIT_ADDR == STINT_GLOBAL_ADDR + STINT_GLOBAL_SIZE - HIT_BYTES && HIT_SLOTS * 24 <= HIT_BYTES, "hit table");
_Static_assert(__builtin_offsetof(struct stint_module, hit) == HIT_MODULE_OFF, "hit word");
_Static_assert(__builtin_offsetof(struct stint_probe, module_back) == HIT_PROBE_BACK, "module_back");

#define MAX_MODULES   1024
#define LOGDIG_MAX    256 /* source modules of the log whose digest is kept */
#define MAX_ANON      256
#define HASH_SLOTS    ((size_t)1 << 20) /* (probe, dst) pairs, 16 MiB */
#define HASH_PROBES   64
/* The set's first two levels (hash_slot): small regions at the table's
 * start that a key tries before the whole table, so that a run with a
 * few thousand pairs writes a few dozen pages, not thousands. */
#define HASH_L1_SLOTS ((size_t)1 << 13) /* 128 KiB */
#define HASH_L2_SLOTS ((size_t)1 << 16) /* 1 MiB, after level 1 */
#define HASH_L12_PROBES 16              /* probes in each of levels 1 and 2 */
#define HASH_SEQ      (2 * HASH_L12_PROBES + HASH_PROBES)
#define RING          64
#define SCRATCH_SIZE  8192

#define ROWS_PER_BATCH 4096u
#define SPIN_LIMIT     (1u << 14) /* waits of at most ~16k pause/yield rounds */
#define FILE_RESERVE   ((uint64_t)64 << 30)

#define DST_MODULE_NONE STINT_ARROW_NO_MODULE

struct gmodule {
	uint64_t base, size;
	uint32_t ready;      /* set last (release): the entry is complete */
	uint32_t rewritten;
	uint32_t build_id_len;
	uint32_t log_lazy;   /* its log keys are its seen table (log_setup read the log's tail only) */
	uint8_t build_id[32];
	uint64_t gate;       /* address of the module's gate word, 0 = none */
	uint64_t bidhash;    /* FNV-1a 64 of the build-id, 0 = none */
	uint64_t smod;       /* its struct stint_module, 0 = not rewritten */
	uint64_t sw;         /* its off-switch list (the off-switch), 0 = none */
	uint64_t counts_prev; /* STINT_MF_COUNTS: uint64_t[nprobes], the counts its last rows gave; 0 = none yet */
	char path[512];
};

struct anon_region {
	uint64_t lo, hi;
};

struct slot_ring {
	uint64_t tagcount;   /* slot number << 32 | rows committed */
	uint64_t pos;        /* file offset of the slot */
	uint64_t pub;        /* slot number << 32 | rows published in the file */
	uint64_t pub_lock;   /* slot number << 32 | 1 while someone publishes */
};

/* The process: executable, output directory, vDSO, thread ids, the
 * modules and anonymous regions seen (process.c). */
struct stint_proc {
	uint32_t nmodules;           /* entries reserved */
	uint32_t nanon;
	uint64_t vdso_gettime;       /* address of __vdso_clock_gettime or 0 */
	uint64_t start_ns, mono_start_ns;
	int32_t exe_registered;
	int32_t task_fd1;            /* 1 + an fd of this process's /proc/self/task (sw_alone), 0 = none */
	uint64_t task_dev, task_ino; /* its identity */
	uint32_t tid_mode;           /* TID_*: how emit learns the thread id */
	uint32_t sync_core;          /* membarrier SYNC_CORE registered: restore_sync works */
	char exe_path[512];
	char out_dir[512];
	uint8_t exe_build_id[32];
	uint32_t exe_build_id_len;
	uint32_t pad;
	struct anon_region anon[MAX_ANON];
	char scratch[SCRATCH_SIZE];
	struct gmodule modules[MAX_MODULES];
};

/*
 * The trace file (trace.c) is an Arrow IPC stream: the schema message,
 * then batch "slots" of a fixed size one after the other. A slot is the
 * batch metadata template (STINT_ARROW_BATCH_LEN bytes) followed by the
 * eight column buffers sized for ROWS_PER_BATCH rows. The first four
 * bytes of a slot stay zero (= end of stream to a reader) until its first
 * row is published (see publish()); from then on the batch in the file
 * covers every complete row, so a process that dies loses at most the
 * rows being written at that instant.
 *
 * cur packs (slot number << 32 | rows reserved). A writer fetch-adds 1:
 * an index below the capacity is its row; exactly the capacity means it
 * filled the slot and must open the next one; more means someone else is
 * opening it (spin, bounded, and retry). Each slot's committed-row count
 * lives in ring[slot % RING], tagged with the slot number; an entry is
 * reused only once its slot has all its rows.
 */
struct stint_trace {
	uint64_t events, dropped;
	int32_t fd;
	int32_t pad;
	uint64_t fd_dev, fd_ino;     /* identity of the trace file behind fd */
	uint64_t map;                /* file mapping (reserve bytes) */
	uint64_t file_len;           /* current ftruncate length */
	uint64_t reserve;            /* the trace's and the paths file's mappings: file_reserve() at open */
	uint64_t next_pos;           /* where the next slot opens */
	uint64_t slot_size;
	uint64_t col_off[STINT_ARROW_NCOLS]; /* body-relative column offsets */
	uint64_t cur;
	uint64_t modules_used;       /* bytes of stint.modules filled */
	char path[1024];
	struct slot_ring ring[RING];
};

/* The budget and its periods (periods.c, options.c). */
struct stint_period {
	uint32_t budget_on;          /* a budget below 100% of the period */
	uint32_t gate_closed;        /* bit 0: the budget of this period is spent; the rest counts the periods
	                              * (period_roll), so that a charge that closes the gate for the period it
	                              * was made in (a compare-and-swap from the word it read before it was
	                              * added) cannot close the next one: GATE_CLOSED(g) reads bit 0 */
	uint64_t budget_ns, period_ns;
	uint64_t tsc_hz;             /* TSC ticks per second, calibrated */
	uint64_t budget_tsc;         /* this period's budget in ticks */
	uint64_t used_tsc;           /* charged so far this period */
	uint64_t suppressed;         /* runtime calls that recorded nothing, this period */
	uint64_t refused;            /* refusal rows written, this period */
	uint64_t call_overhead_tsc;  /* cost of entering and leaving the runtime */
	uint64_t closed_at_tsc;
	uint64_t close_used_tsc;     /* what this period had used when its gate closed */
	uint64_t close_reserve_tsc;  /* what that close kept in reserve (sw_off_reserve) */
	uint32_t close_how;          /* STINT_CLOSE_* of this period's close */
	uint32_t pad_close;
	uint64_t spend_tsc;          /* the end of the last charge that spent (or was about to spend) the budget */
	uint64_t period_idx, period_tsc0, period_mono0, period_events0;
	uint64_t cal_tsc, cal_mono;  /* calibration anchor */
	uint32_t period_lock;        /* period_roll runs under it (period thread, exit) */
	uint32_t run_ended;          /* the run-end row is written */
	uint32_t period_thread;      /* this process's period thread runs */
	uint32_t counts_on;          /* a module counts blocks (STINT_MF_COUNTS): the period thread reads them */
	uint64_t charge_cap_tsc;     /* most a call that did not grow the file is charged (call_charge) */
	uint64_t capped;             /* calls charged the cap instead of their measured time */
	uint64_t late_tsc;           /* recording by sites that called after the gate closed (sw_closed_call) */
};

/* QDIME's QoS-aware budget (qos.c). */
struct stint_qos {
	uint32_t on;                 /* STINT_QOS names a QoS page */
	uint32_t bad;                /* the page was rejected (said once) */
	uint64_t page;               /* the mapped page, 0 until the file exists */
	uint64_t default_ns;         /* the budget without a fresh sample */
	uint64_t value, threshold;   /* double bits behind this period's budget (NaN: none) */
	char path[256];
};

/* The context-preserving mode's tables (contexts.c). */
struct stint_ctx {
	uint32_t lock;               /* context tables */
	uint32_t warned;
	uint64_t state;              /* struct ctx_state *, mapped on first use */
};

/* The off-switch (sw_*.c). */
struct stint_sw {
	uint32_t on;                 /* switch sites off while the budget is spent */
	uint32_t req;                /* futex, SW_REQ_*: work for the period thread (periods.c) */
	uint32_t is_on;              /* the last batch switched on */
	uint32_t window_over;        /* this period's window is over: calling sites switch off */
	uint32_t rearmed;            /* SW_REARM_*: new code ran after the window: open-ended sites are back on */
	uint32_t cold;               /* STINT_PATCH_COLD sites start off (sw_cold_load) */
	uint32_t quiet_on;           /* windows thin out in quiet periods (sw_quiet_skip) */
	uint32_t quiet;              /* windows in a row whose periods recorded nothing */
	uint32_t skipped;            /* windows skipped since the last one */
	uint32_t no_window;          /* this period opened no window (skipped, spent, too costly) */
	uint64_t window_ns;          /* how long listed sites stay on per period (0: the budget) */
	uint64_t tsc;                /* switching cost this period (batches and closed calls) */
	uint64_t charged_tsc;        /* the part of tsc already in used_tsc (switching on) */
	uint64_t lazy_tsc;           /* the part of tsc after the gate closed or the window ended (sites switching themselves off, batches of waiting sites): charged at the period's end */
	uint64_t lazy_hi;            /* high mark of lazy_tsc in periods whose gate closed, falling by a sixteenth a period (sw_off_reserve) */
	uint64_t debt_tsc;           /* what earlier periods' lazy_tsc and late_tsc left over their budget: charged at this period's start, up to its budget */
	uint64_t pend_mono;          /* when the last batch of SW_PEND sites ended (CLOCK_MONOTONIC ns) */
	uint64_t rearm_end;          /* when this period's rearm ends (CLOCK_MONOTONIC ns), 0 = none running */
	uint64_t last_on;            /* sites the last period-start switch-on changed (0 = none yet) */
	uint64_t stop_tsc;           /* the period-start switch-on stops here (0 = no limit; budget_gates_start) */
	/* self mode (sw_self_batch): the program's only thread writes the sync sites */
	uint32_t self_ok;            /* allowed (STINT_SWITCH_SELF, default on) */
	uint32_t self;               /* the period thread's last batch found the program single-threaded */
	uint32_t self_gen;           /* bumped by the period thread: sync sites to be set to self_on */
	uint32_t self_done;          /* the generation the last self batch carried out */
	uint32_t self_on;            /* the state the sync sites should have */
	uint32_t self_keep_fresh;    /* ... except fresh ones, which stay on */
	uint32_t self_lock;          /* held while the sync sites are written, by either thread */
	uint32_t has_sync;           /* a module has sync patches (without any, self mode has nothing to do) */
	uint32_t park_ok;            /* a module allows parking threads for them (STINT_MF_PARK, --switch-sync) */
	uint32_t pad;
	uint64_t listed_open;        /* listed open-ended sites (what a rearm switches) */
	uint64_t site_tsc;           /* what switching one site costs (sw_site_cost) */
	uint64_t sync_tsc;           /* what one membarrier(SYNC_CORE) costs (measured at start) */
	uint64_t stall_tsc;          /* room for a stall in the switch-off (SW_STALL_NS) */
	uint64_t fixed_tsc;          /* what a batch costs besides its sites (sw_reserve) */
	uint32_t off_paid;           /* this period's reserved switch-off ran (sw_all_off) */
	uint32_t pad_off;
	uint32_t epoch;              /* sw_barrier: the current barrier epoch */
	uint32_t synced;             /* epochs below this have been ended by a barrier */
	uint64_t listed;             /* sites listed, all modules */
	uint64_t listed_on;          /* listed sites now switched on (about: for the reserve) */
	uint64_t ons, offs;          /* sites switched on / off this period */
	uint32_t rets_on, pad_rets;  /* RETS_*: STINT_RETS (rets.c) */
};

/* The redundancy log (redlog.c). */
struct stint_log {
	uint32_t fsize_said;         /* the file size limit stopped a save: said once */
	uint32_t on;                 /* a redundancy log is kept */
	uint32_t policy, lock, warned;
	uint64_t set, set_slots, set_n; /* entries read from the log */
	uint64_t set_filter;         /* a bit per slots * 8, set from each entry's k0 (logset_has) */
	/* per source module of the log read at start: build-id hash, distinct
	 * entries, the sum of their hashes (log_digest) */
	uint64_t dig[LOGDIG_MAX][4]; /* [3]: how many of them are direct outcomes */
	uint32_t dig_n, dig_full;    /* modules in dig; one did not fit */
	/* log_setup read the file from here on: the entries before it are
	 * the lazy modules' (log_seen_table); 0 = read whole */
	uint64_t lazy_end;
	/* a prefix of the file known to hold good blocks (log_known): its
	 * end, its last block's offset and that block's first 16 bytes */
	uint64_t known_end, known_last, known_head[2];
	uint64_t pending, npend, saved; /* outcomes noted this run */
	char path[512];
	uint32_t crc_ready, pad_crc; /* crc_tab is built (crc_tables) */
	uint32_t crc_tab[8][256];
};

/* The DIME* paper's region policies (regions.c). */
struct stint_regions {
	uint32_t mode, lock;         /* a region policy is in force */
	uint64_t tab, n, decisions, thr_slots;
};

/* The test hooks (testhooks.c, STINT_TEST_* in stint_abi.h): all zero
 * in a run without them. */
struct stint_tests {
	uint32_t on;                 /* some hook is set */
	uint32_t log_load;           /* STINT_TEST_LOG_LOAD */
	uint64_t charge_stall_ns;    /* STINT_TEST_CHARGE_STALL */
	uint64_t readee_stall_ns;    /* STINT_TEST_READEE_STALL */
	uint64_t switch_stall_ns;    /* STINT_TEST_SWITCH_STALL */
	uint64_t batch_stall_ns;     /* STINT_TEST_BATCH_STALL */
	uint32_t roll_kill;          /* STINT_TEST_ROLL_KILL */
	uint32_t no_procmap;         /* STINT_TEST_NO_PROCMAP */
	char save_hold[256];         /* STINT_TEST_SAVE_HOLD (log_save) */
};

/* A compact complete trace (paths.c, pathsfile.c, STINT_MF_PATHS). */
#define PATHS_CHUNK_DATA ((uint64_t)256 << 10) /* bytes of packets per chunk */
#define PATHS_ALLOC_FIRST ((uint64_t)4 << 10) /* a chunk's data is allocated to its header's page end, then 4 KiB, then doubling */
#define PATHS_PSB_EVERY  ((long)16 << 10)      /* bytes of packets between PSBs, at most about (STINT_PATHS_PSB_EVERY) */
#define PATHS_THREADS    4096                  /* thread blocks (a gone thread's is reused: paths_reuse) */
#define PATHS_STACK      256                   /* call stack entries per thread (a ring: an 8-bit top) */
#define PATHS_SEARCH     16                    /* entries an unexpected return looks down */
#define PATHS_ASYNC      8                     /* nested signal handlers a thread tracks */
#define PATHS_RESTORERS  4                     /* signal restorer addresses remembered */
#define PATHS_GS_INSN    1                     /* gs_mode: rdgsbase/wrgsbase (FSGSBASE) */
#define PATHS_GS_PRCTL   2                     /* gs_mode: arch_prctl */
#define PK_SYNC     0x04                       /* the packets: formats/packets.go */
#define PK_ASYNC    0x06
#define PK_ASYNC_END 0x08
#define PK_LOST     0x0a
#define PK_SYNC_CALL 0x0c
#define PK_PSB      0x0e
#define PK_ASYNC_TO 0x10
#define PK_TIP      0x20
#define PK_TNT      0x40 /* + 2k: k bytes of bits */
#define PK_RET_TIP  0x60 /* + 2k: a call chain's ret to the stack's top */

/* One thread's state: found through %gs (paths_self). */
struct paths_thread {
	uint64_t key;                /* STINT_PATHS_KEY_OFF: fs while inline appends may run, else 1 */
	uint64_t *tnt;               /* STINT_PATHS_TNT_OFF: outcome bits under a leading 1: the chunk's pending field */
	uint64_t top;                /* STINT_PATHS_TOP_OFF: the call stack's top, its low byte (a ring index) */
	uint64_t stack[PATHS_STACK]; /* STINT_PATHS_STACK_OFF: the ring of return addresses, zero where none */
	uint64_t *tail;              /* STINT_PATHS_TAIL_OFF: the chunk's tail field: the last silent probe */
	                             /* since a packet, followed by tail_bits: the pending word then */
	uint8_t *cur, *end;          /* STINT_PATHS_CUR_OFF, _END_OFF: where the next packet goes, the end of the data */
	uint8_t *psb_at;             /* STINT_PATHS_PSB_AT_OFF: where the last PSB (or the chunk's data) began */
	uint64_t last_ip;            /* STINT_PATHS_LAST_OFF: the last TIP, SYNC or ASYNC address */
	uint32_t psb;                /* STINT_PATHS_PSB_OFF: a chunk began since the last PSB (paths_psb) */
	uint32_t pad0;
	uint64_t fs;                 /* the owner's %fs base (0: unknown: no inline appends) */
	uint64_t out_lo, out_size;   /* STINT_PATHS_OUT_LO_OFF, _SIZE_OFF: a module without probes left to */
	uint64_t room;               /* STINT_PATHS_ROOM_OFF: inline appends left (paths_set_room) */
	uint64_t curmod;             /* STINT_PATHS_CURMOD_OFF: the module a call chain's SITEs index */
	uint32_t tid, pid;           /* owner */
	uint32_t seq;                /* the current chunk's number */
	uint32_t busy;               /* a probe of this thread is appending */
	uint32_t outside;            /* STINT_PATHS_OUTSIDE_OFF: the last transfer left instrumented code */
	uint32_t nested;             /* probes of a signal handler that came while busy */
	uint32_t async;              /* signal handlers entered (ASYNC) and not left */
	uint32_t gen;                /* the budget period of this thread's last probe (a new one resynchronises) */
	uint32_t saved_outside[PATHS_ASYNC];
	uint64_t saved_rip[PATHS_ASYNC]; /* where each signal interrupted the thread (its ucontext's rip then) */
	uint64_t saved_sp[PATHS_ASYNC];  /* each handler's %rsp at its entry: its signal frame */
	uint64_t sync_sp;                /* %rsp at the last SYNC_CALL's entry */
	uint64_t appended;           /* packets and bits appended (a probe that adds none sets tail) */
	uint64_t chunk;              /* file offset of the chunk being filled, 0 = none */
	uint64_t alloc;              /* bytes of the chunk's data the file has allocated (end stops there) */
};

struct stint_paths {
	uint32_t on;                 /* some module records a compact trace */
	uint32_t lock;               /* the file and the block table */
	uint32_t gs_mode;            /* PATHS_GS_* */
	uint32_t nthreads;           /* blocks handed out */
	uint32_t failed, closed;
	int32_t fd;
	uint32_t reuse_at;           /* where paths_reuse looks next */
	uint64_t fd_dev, fd_ino;
	uint64_t map, file_len, next_pos;
	uint64_t threads;            /* struct paths_thread[PATHS_THREADS], mapped on first use */
	uint64_t chunks, bytes, nested, untraced;
	uint64_t restorers[PATHS_RESTORERS];
	char path[1040];
};

/* The (probe, destination) hash set (record.c); its slots are the
 * global state's last member, hash[]. */
/* The runtime's private stacks (stacks.c). */
#define STACKS_N    64          /* each with a busy word on a cache line of its own */
#define STACKS_SIZE (256u << 10) /* a program's signal handler may run on one too */
#define STINT_STACKS_HINT (STINT_GLOBAL_ADDR + ((uintptr_t)2 << 40))
struct stint_stacks {
	uint64_t base;      /* the mapping, 0 = none */
	uint64_t fallbacks; /* probes that ran on the program's stack: every stack busy */
	/* busy[i].w: stack i is in use, each word on a cache line of its own */
	struct {
		uint64_t w;
		uint64_t pad[7];
	} busy[STACKS_N] __attribute__((aligned(64)));
};

/*
 * The sampler (sample.c, rewrite --sample). Each interval has one of two
 * halves, by the parity of its index (epoch): the program's threads put
 * samples in the current half while the reader thread writes out the
 * other one (the thesis's double buffer). A stratum (function or site)
 * has its state in both halves; the slots its samples go to come from
 * the half's arena.
 */
#define SMP_FUNCS   (1u << 16)        /* strata the table holds */
#define SMP_ARENA   (1u << 22)        /* sample slots per half (32 B each: reserved, touched as used) */
#define SMP_BUSY    (~0ULL)           /* smp_half.next while its taker computes the next */
#define SMP_CLAIM   (~0ULL)           /* smp_fn.key while its inserter sets it up */
#define SMP_NOROOM  0xffffffffu       /* smp_half.base: the arena was full */
#define SMP_GRACE_NS 2000000ULL       /* the reader's wait after a flip for probes still on the old half */
#define SMP_SKIP_MAX (1ULL << 40)
#define SMP_TAB      1024             /* entries of the log2 and exp2 tables (interpolated) */
#define SMP_UP_BLOCK 64               /* upper-half slots a stripe claims at a time */

struct smp_slot {
	uint64_t src, dst;                /* dst: a syscall's number */
	uint16_t src_module, dst_module;
	uint8_t kind, pad8;               /* kind 0: empty */
	uint16_t pad16;
	uint32_t tid, pad32;
};

struct smp_half {
	uint64_t n;                       /* events in this interval: a fetch-add gives each its index */
	uint64_t next;                    /* Algorithm L: the index of the next event to take */
	int64_t lw;                       /* Algorithm L: log2 W, Q32.32 */
	uint32_t k;                       /* the reservoir's size */
	uint32_t base;                    /* 1 + its first slot in the half's arena; 0: none yet */
	uint64_t taken;                   /* fresh, or a countdown's rate and every: samples taken (in the arena's upper half) */
	uint32_t fresh, pad;              /* the stratum's first interval: no reservoir, each event at P% */
};

struct smp_fn {
	uint64_t key;                     /* stratum: (module + 1) << 48 | address; 0 free */
	uint32_t stripe, pad;             /* the threads whose events it samples (smp_stripe) */
	uint64_t cd;                      /* countdown: its probe's countdown pair (cache: the skip last set; cache2: the count), else 0 */
	struct smp_half h[2];
};

/* What the threads of one stripe (smp_stripe) count and draw from, on a
 * cache line of its own. */
#define SMP_STRIPES 64
struct smp_stripe {
	uint64_t rng;                     /* the draws' Weyl sequence */
	uint64_t seen[2];                 /* per half: events (rate, every) */
	uint64_t up[2];                   /* per half: 1 + its next slot in the arena's upper half, in a block of
	                                   * SMP_UP_BLOCK it claimed; 0, or at a block's end: claim one */
	uint64_t pad[3];
};

struct stint_sample {
	uint32_t method;                  /* STINT_SAMPLE_*, 0: not sampling */
	uint32_t lock;                    /* the reader's flips and drains, and the run's end */
	uint64_t param;                   /* rate and reservoir: ppm of the events; every: N */
	uint64_t thresh;                  /* rate: take an event when a draw is below it */
	uint64_t interval_ns;
	uint64_t epoch;                   /* the interval's index; its half is epoch & 1 */
	uint64_t mono0;                   /* when the interval began */
	uint64_t used[2];                 /* per half: arena slots handed out */
	uint64_t upper[2];                /* per half: slots of fresh strata handed out (from SMP_ARENA / 2 up) */
	uint64_t dropped;                 /* samples with no slot (arena full, slots not yet set up) */
	uint64_t unstratified;            /* events of strata the table had no room for */
	uint64_t fns, arena[2];           /* the mappings: struct smp_fn[SMP_FUNCS], struct smp_slot[SMP_ARENA] each */
	uint64_t live;                    /* uint32_t[SMP_FUNCS]: the table's used entries, in order of use */
	uint32_t nlive, pad2;
	uint64_t busy_ns, start_ns;       /* the reader's working time, and its start */
	uint32_t thread, pending;         /* reader started; a flipped half not yet drained (1 + half) */
	uint32_t ended;                   /* the run's end wrote the last interval */
	uint32_t countdown;               /* call probes count down (STINT_MF_COUNTDOWN and rate, every or per site; with STINT_MF_ENTRIES any) */
	uint32_t entries;                 /* the countdowns are function entries' (STINT_MF_ENTRIES): strata are functions */
	uint32_t reader_up;               /* the reader thread runs (leave_if_program_left counts it) */
	int64_t lw_rate;                  /* log2 of P (Q32.32): rate's and fresh strata's geometric skips */
	uint64_t pend_end;                /* when the pending half's interval ended */
	uint64_t cap;                     /* slots of a half in use: SMP_ARENA (a test hook lowers it) */
	uint32_t flip_req;                /* futex: a half filled, end the interval now (smp_full) */
	uint32_t pad3;
	uint64_t pow2[32];                /* 2^-(2^-(i+1)), Q0.64: smp_exp2's factors */
	uint64_t log2tab[SMP_TAB + 1];    /* log2(1 + i/SMP_TAB), Q0.32: smp_log2_fast */
	uint64_t exp2tab[SMP_TAB + 1];    /* 2^(-i/SMP_TAB), Q0.64: smp_exp2_fast */
	struct smp_stripe stripe[SMP_STRIPES] __attribute__((aligned(64)));
};

/*
 * Sites retired by their slot's value (slot_retire), checked at most
 * every SLOTS_POLL_TSC cycles by a thread that enters the runtime, and
 * each period by the period thread when there is one (slots_poll): a
 * slot written after all (a hooking library's mprotect and store) gets
 * its site's patch back, and its new destination records at the site's
 * next run.
 */
#define SLOTS_HELD 2048
#define SLOTS_POLL_TSC (1ULL << 24) /* ~5 ms at 3 GHz; no calibration needed */
struct slot_held {
	uint64_t slot;        /* the slot's address; 0 while the entry fills */
	uint64_t value;       /* its value when the site retired */
	uint64_t site;        /* the patch's first byte */
	uint8_t patched[16];  /* the patch's bytes */
	uint8_t len, at_start;
	uint8_t state;        /* SLOT_HELD, SLOT_REARMED, SLOT_GONE */
};
#define SLOT_HELD 1
#define SLOT_REARMED 2
#define SLOT_GONE 3
struct stint_slots {
	uint32_t n;           /* entries taken (may pass SLOTS_HELD: the rest are not retired) */
	uint32_t lock;        /* held by a check (slots_poll) and by slots_drop */
	uint64_t last_tsc;    /* the last check */
	struct slot_held e[SLOTS_HELD];
};

struct stint_hashset {
	uint64_t full;               /* keys refused: the set was full */
	uint64_t pages[HASH_SLOTS * 16 / 4096 / 64]; /* bit per page of hash: written to (hash_add) */
};

/* The kernel's struct sigaction (rt_sigaction, an 8-byte mask). */
struct k_sigaction {
	uint64_t handler;
	uint64_t flags;
	uint64_t restorer;
	uint64_t mask;
};

/* The int3 fallback (trap.c). */
struct stint_traps {
	uint32_t installed;     /* the SIGTRAP handler is in */
	uint32_t lock;
	uint32_t keep;          /* STINT_TRAP_RETIRE=0: hot sites are never retired */
	uint32_t pad;
	uint64_t hits;          /* traps sent on to a trampoline (the run-end row's dst) */
	struct k_sigaction old; /* the action the handler replaced */
};

/*
 * The process-wide state: one anonymous mapping at STINT_GLOBAL_ADDR that
 * every rewritten module of the process finds and joins (init.c,
 * global_get), one sub-struct per subsystem.
 */
struct stint_global {
	uint64_t magic;
	uint32_t abi_version;
	uint32_t size;
	int32_t pid;
	uint32_t recording;          /* 0: off (disabled, or setup failed) */
	uint32_t init_lock;          /* try-lock for trace (re)opening */
	uint32_t scratch_lock;       /* try-lock for proc.scratch */
	uint32_t warned;
	uint32_t failed;             /* trace setup failed: every module runs untraced */
	uint32_t tool;
	uint32_t hit_advised;        /* the hit table was asked to be a huge page */
	char options[192];
	struct stint_proc proc;
	struct stint_stacks stacks;
	struct stint_trace trace;
	struct stint_period per;
	struct stint_qos qos;
	struct stint_ctx ctx;
	struct stint_sw sw;
	struct stint_log log;
	struct stint_regions reg;
	struct stint_tests test;
	struct stint_paths paths;
	struct stint_sample smp;
	struct stint_hashset hs;
	struct stint_traps trap;
	struct stint_slots slots;
	uint64_t hash[] __attribute__((aligned(16)));
};

struct wipe_page {
	uint32_t alive;   /* zero in a freshly forked child */
};

/* struct stint_module.runtime_state */
#define RS_ACTIVE   0x1   /* initialised, recording */
#define RS_PATCHING 0x2   /* text and trampolines writable: may retarget/restore */

/* Whether the runtime writes module m's probe and patch tables and its
 * trampolines as it runs (the off-switch, retiring, the log): not for
 * --every or --counts, whose probes never retire. Only then are they
 * copied into huge pages and populated for writing at start. */
#define TABLES_WRITTEN(m) (!((m)->flags & (STINT_MF_EVERY | STINT_MF_COUNTS)))

static inline struct stint_global *G(void) { return (struct stint_global *)STINT_GLOBAL_ADDR; }

/* Whether this period's budget is spent (bit 0 of gate_closed). */
#define GATE_CLOSED(g) (__atomic_load_n(&(g)->per.gate_closed, __ATOMIC_ACQUIRE) & 1u)
static inline struct wipe_page *W(void) { return (struct wipe_page *)STINT_WIPE_ADDR; }

struct maps_line {
	uint64_t lo, hi, off;
	const char *path; /* NUL-terminated, "" for anonymous */
};

/* A /proc/self/maps walker's callback (maps_scan). */
typedef int (*maps_fn)(struct maps_line *m, void *arg);

/* A row of the trace (trace.c, emit). */
struct row {
	uint8_t kind;
	uint16_t src_module, dst_module;
	uint64_t src, dst, value;
	uint64_t time;  /* record kinds and sampled events only: events get the current time */
	uint32_t tid;   /* sampled events only: the thread that ran it (others: the current one, 0 for records) */
};

/*
 * The thread id of every event. A gettid system call per event made
 * --every mode hundreds of times slower than native, so where we can we
 * read it from glibc's thread descriptor instead: %fs points at glibc's
 * struct pthread, whose tid field sits at a fixed offset (the one
 * libthread_db reads; glibc keeps it current across fork and clears it at
 * thread exit). rdfsbase (only when the kernel enables FSGSBASE, AT_HWCAP2)
 * tells whether %fs is set up at all: before libc has set up TLS it is 0.
 * The offset is checked once against gettid with process_vm_readv, which
 * fails instead of faulting when %fs points at something else (another
 * libc); any doubt falls back to the system call.
 */
#define TID_UNKNOWN 0  /* not decided yet: system call */
#define TID_PROBE 1    /* FSGSBASE available: check the offset on first use */
#define TID_GLIBC 2    /* read %fs:GLIBC_TID_OFF */
#define TID_SYSCALL 3  /* always the system call */
#define TID_SEG_PROBE 4 /* no FSGSBASE: check %fs:GLIBC_TID_OFF against gettid on first use */
#define TID_SEG 5      /* read %fs:GLIBC_TID_OFF with a segment-relative load */
#define GLIBC_TID_OFF 0x2d0 /* offsetof(struct pthread, tid), glibc 2.34-2.38 x86-64 */

/* Module registration's and lookup's walks of /proc/self/maps (process.c). */
struct find_path_arg {
	uint64_t base;
	char *out;
	size_t cap;
};

struct lookup_arg {
	uint64_t a;
	int found;          /* 1: file-backed, 2: anonymous */
	uint64_t base, hi, lo;
	char cur_path[512];
	uint64_t cur_base;
	char path[512];
};

/* rets.c: a call's return still to see, new code's way out.
 * g->sw.rets_on (STINT_RETS): */
#define RETS_OFF   0 /* 0: neither */
#define RETS_CALLS 1 /* calls: only calls' returns */
#define RETS_ALL   2 /* both (the default) */

#define S_MADV_HUGEPAGE 14
#define HUGE_PAGE ((uint64_t)2 << 20)
#define SYS_futex 202
#define S_FUTEX_WAKE_PRIVATE 129        /* FUTEX_WAKE | FUTEX_PRIVATE_FLAG */
#define S_FUTEX_WAIT_BITSET_PRIVATE 137 /* FUTEX_WAIT_BITSET | FUTEX_PRIVATE_FLAG: absolute CLOCK_MONOTONIC */

#define CHARGE_CAP_NS 4000 /* see call_charge */
#define TEST_STALL_AT_NOTE (1ULL << 63) /* test.charge_stall_ns: stall between the close and its note */

/*
 * Room the switch-off reserve keeps besides for one stall of the machine
 * in the middle of the batch (sw_off_reserve). On this VM the host takes
 * a vCPU away about 1,300 times a second, nearly always for 31-61 us (a
 * loop that only reads the TSC, pinned to CPU 0 of the idle VM, loses
 * 5-6% of its time so), and the guest counts that as the running
 * thread's CPU time (there is no steal time here), so sw_timed cannot
 * leave it out. A switch-off of 50-150 us meets one about once in ten.
 * In redis-server's first period (10% of 100 ms), where the budget is
 * spent with 100-600 sites on, 7 of 20 runs went 0.9-49 us over without
 * this room and 0 of 20 with it (interleaved); the period used 9.91 ms
 * (median) instead of 9.99. Instrumented runs put the excess in the
 * batch: a gap of 13-59 us in its loop in 3 of 5 that went over, else a
 * copy-on-write fault on a code page it wrote first, or the walk over
 * every listed entry (about 17 us for 4,600), which the per-site estimate
 * does not see. On a machine without such stalls this is 0.6% of a 10 ms
 * budget; it is never more than 1/64 of the budget.
 */
#define SW_STALL_NS 60000ULL

/* Whether a setting's value (n bytes at s) is usable, given the period. */
typedef int (*setting_ok_fn)(const char *s, size_t n, uint64_t period);

/* stint_spawn (entry.S): clone a thread that runs fn on stack_top. */
long stint_spawn(uint64_t stack_top, void (*fn)(void)) __attribute__((visibility("hidden")));
void stint_probe_entry(void) __attribute__((visibility("hidden")));

/* ---- the off-switch (sw_*.c) ---- */

#define SW_COLD 0 /* not listed: the rewriter's patch is in place */
#define SW_ON   1 /* listed, patched */
#define SW_OFF  2 /* listed, original bytes */
#define SW_BUSY 3 /* being changed */
#define SW_DEAD 4 /* listed, original bytes, never again (all probes recorded) */
#define SW_PEND 5 /* listed, patched, to be switched off by the period thread (STINT_PATCH_SYNC, _READ) */
#define SW_SYNC 6 /* the period thread is writing it with threads parked (sw_sync_finish) */
#define SW_NEXT 7 /* the period thread will write it after the next membarrier (sw_readees) */

struct sw_entry {
	uint64_t addr;    /* run-time address of the first patched byte */
	uint32_t idx;     /* patch index */
	uint8_t len;
	uint8_t ready;    /* set last: the entry is complete */
	uint8_t open;     /* an open-ended site (ret, indirect, syscall): any run may bring a new outcome */
	uint8_t sync;     /* STINT_PATCH_SYNC: switched in batches with threads parked (sw_batch) */
	uint8_t read;     /* STINT_PATCH_READ: other patches read it (sw_readees) */
	uint8_t reader;   /* STINT_PATCH_READER: on only while what it reads is on */
	uint16_t nr, nd;  /* its pairs as the reader, as the read patch (struct stint_read) */
	uint8_t np;       /* its probes: np from index p0 (0 if not known: listed by a reader or readee) */
	uint8_t cold;     /* started off by sw_cold_load: on only for new code (ret_switch_on), never in batches */
	uint32_t p0;
	uint32_t r0, d0;  /* where they start in the table's two halves */
	uint8_t code[16]; /* the patched bytes */
};

struct sw_mod {
	uint64_t map_size;
	uint32_t n, cap;        /* entries used (may briefly exceed cap), capacity */
	uint8_t *state;         /* SW_* per patch index */
	uint8_t *misses;        /* per patch index: calls this period that recorded nothing */
	uint8_t *fresh;         /* per patch index: listed while the gate was closed, not called since with it open */
	uint32_t *few;          /* entry indices + 1 of the sync and readee entries, which the period thread's
	                         * passes visit (0 = a slot not filled yet) */
	uint32_t nfew, capfew;
	uint64_t *pend;         /* bit per patch index: gone to SW_PEND since the period thread last looked */
	uint64_t *bell;         /* per probe: a recorded arm of a sync site sent back to its thunk so that
	                         * the site calls once more: the period thread's doorbell (self mode) */
	uint64_t *cool;         /* per probe: a watched probe whose site runs rarely, its arm straight for the
	                         * rest of the period; watched again at the next one's start (sw_take) */
	uint64_t *muted;        /* per probe: an unrecorded arm of a sync site sent straight through while
	                         * the site waits for a self batch (sw_mute); back at the period's start */
	uint32_t *eidx;         /* per patch index: its entry's index + 1 (0 = not listed) */
	uint32_t *offep;        /* per reader patch: g->sw.epoch when it last got its original bytes */
	uint32_t *work;         /* period thread: the SW_PEND readees of the batch at hand (entry indices) */
	uint32_t *parked;       /* period thread: the entries parked on "jmp ." by the batch at hand */
	uint32_t nwork, nparked;
	struct sw_entry e[];
};

/* An open-ended site (ret, indirect branch) whose calls recorded nothing
 * this many times in a period is switched off for the rest of it: its
 * destinations outnumber the trampoline's inline cache, and every miss
 * costs a runtime call (sqlite's VDBE dispatch made 200k a period). */
#define SW_MISS_MAX 64

#define PROBE_WATCHED STINT_PROBE_WATCHED /* stint_probe.state: logged (or STINT_PF_DELEG), arm still calls (count in pad0[0]) */
#define PROBE_RETWATCH 3 /* stint_probe.state: logged call, its return not: arm still calls (rets.c) */
/* Work for the period thread, asked for with sw_request. */
#define SW_REQ_OFF   1 /* the gate closed: switch the listed sites off */
#define SW_REQ_REARM 2 /* new code ran after the window: switch open-ended sites back on */
#define SW_REQ_SYNC  4 /* sites wait in SW_PEND: switch them off */

/* g->sw.rearmed: this period's rearm (sw_after_record) */
#define SW_REARM_NONE 0
#define SW_REARM_ON   1 /* open-ended sites are back on after the window */
#define SW_REARM_DONE 2 /* the budget cannot pay for one: no other this period */
/* A walk over the modules that have a list (sw_list):
 *	for (struct sw_walk it = sw_walk(g); sw_next(&it);) ... it.m, it.pts, it.n, it.s */
struct sw_walk {
	struct stint_global *g;
	uint32_t i, nm, n;
	const struct stint_module *m;
	const struct stint_patch *pts;
	struct sw_mod *s;
};
/* What sw_take does to each probe whose bit it takes (below). */
enum sw_take_what {
	SW_UNBELL,   /* bell: a belled arm goes straight again (the self batch) */
	SW_REWATCH,  /* cool: a cool watched probe is watched again, if its site is still fresh (the period's start) */
	SW_UNMUTE,   /* muted: a muted arm calls again, unless it recorded since (the period's start) */
};

/*
 * Who writes the sync sites (at the start of each of the period thread's
 * batches): the program's thread while it is the only one (SW_MODE_SELF),
 * else the period thread, parking threads (SW_MODE_PARK, rewrite
 * --switch-sync). Without --switch-sync (SW_MODE_HOLD) the period thread
 * parks threads only for what must be written: a site whose outcomes are
 * all recorded goes off for good (as patch_done would restore it), and
 * sites a one-thread phase of the program switched off go back on at a
 * period's start (once a run, unless the program goes back to one
 * thread); a site that should go off for the window's end stays on, its
 * calling arms held straight (sw_sync_closed). SW_MODE_BUSY: a self batch
 * holds the lock, and the sync sites are left alone this time.
 */
#define SW_MODE_PARK 0
#define SW_MODE_SELF 1
#define SW_MODE_BUSY 2
#define SW_MODE_HOLD 3

#define SWB_OPEN_ONLY  1 /* only open-ended sites */
#define SWB_KEEP_FRESH 2 /* not the fresh ones */
#define SWB_PEND_ONLY  4 /* (off) only sites waiting in SW_PEND */
#define SWB_DEBT       8 /* (sw_timed) charged at the period's end; sw_batch ignores it */

/* ---- prototypes ---- */

struct ctx_slot;
struct ctx_state;
struct ctx_thread;
struct elf64_ehdr;
struct elf64_phdr;
struct gmodule;
struct maps_line;
struct paths_thread;
struct region;
struct row;
struct s_stat;
struct sbuf;
struct slot_ring;
struct smp_fn;
struct smp_half;
struct smp_slot;
struct stint_chunk;
struct stint_global;
struct stint_module;
struct stint_patch;
struct stint_probe;
struct stint_qos_page;
struct stint_read;
struct stint_sample;
struct stint_stub;
struct sw_entry;
struct sw_mod;
struct sw_walk;
struct thr_slot;

/* lib.c */
static void s_memcpy(void *d, const void *s, size_t n);
static uint32_t first_key_at_least(const void *table, uint32_t n, size_t stride, uint64_t key);
static void s_memset(void *d, int c, size_t n);
static size_t s_strlen(const char *s);
static int s_strncmp(const char *a, const char *b, size_t n);
static void sb_putc(struct sbuf *b, char c);
static void sb_puts(struct sbuf *b, const char *s);
static void sb_putu(struct sbuf *b, uint64_t v);
static void sb_puthex(struct sbuf *b, const uint8_t *p, size_t n);
static void sb_putjs(struct sbuf *b, const char *s);
static const char *errno_name(long e);
static uint64_t fsize_limit(void);
static int fd_refers_to(int32_t fd, uint64_t dev, uint64_t ino);
static long file_extend(int32_t *fd, uint64_t dev, uint64_t ino, const char *path, uint64_t *len, uint64_t end, uint64_t step,
			uint64_t map, uint64_t reserve, int alloc);
static int fd_ours_again(int32_t *fd, uint64_t dev, uint64_t ino, const char *path);
static uint64_t file_reserve(void);
static long open_high(const char *path, long flags, long mode);
static void say_write(const char *line, size_t n);
static void say_line(const char *msg);
static void say_untraced(const char *what, const char *arg, long err);
static inline void cpu_pause(void);
static inline void relax(uint32_t round);
static uint64_t now_ns(int clock);
static int try_lock(uint32_t *l);
static void unlock(uint32_t *l);
static int lock_bounded(uint32_t *l);
static inline uint64_t rdtsc(void);
static inline uint64_t mul_div(uint64_t a, uint64_t b, uint64_t c);
static uint64_t median_of(uint64_t *t, int n);
static void sleep_until(uint64_t mono_ns);
static int wait_word(uint32_t *w, uint64_t mono_ns);

/* stacks.c */
static void stacks_init(struct stint_global *g);
STINT_API uint64_t stint_stack_get(const struct stint_probe *p);
STINT_API void stint_stack_put(uint64_t top);

/* process.c */
static int elf64_ident_ok(const struct elf64_ehdr *eh);
static uint64_t vdso_lookup(uint64_t ehdr_addr, const char *name);
static long open_ro(const char *path);
static long read_small(const char *path, char *buf, size_t cap);
static int proc_stat_threads(char *state, uint64_t *threads, uint64_t *code);
static uint64_t mem_room(void);
static uint64_t parse_dec(const char *s, const char **end);
static void leave_if_program_left(struct stint_global *g, uint64_t *last_check);
static void run_left(struct stint_global *g);
static uint64_t auxv_find(const uint64_t *auxv, uint64_t type);
static uint64_t proc_auxv(uint64_t type);
static const char *env_get(char **envp, const char *name);
static int env_is_zero(const char *v);
static const char *base_name(const char *p);
static uint64_t parse_hex(const char **s);
static int parse_maps_line(char *line, struct maps_line *m);
static int maps_scan(maps_fn fn, void *arg);
static int maps_scan_buf(char *buf, size_t cap, maps_fn fn, void *arg);
static int find_path_cb(struct maps_line *m, void *arg);
static uint32_t add_module(struct stint_global *g, uint64_t base, uint64_t size, const char *path,
			   const uint8_t *bid, uint32_t bid_len, int rewritten);
static uint32_t modules_n(struct stint_global *g);
static uint32_t module_of(struct stint_global *g, uint64_t a);
static int lookup_cb(struct maps_line *m, void *arg);
static uint32_t module_of_unknown(struct stint_global *g, uint64_t a);
static uint64_t fs_base(void);
static uint32_t tid_check(struct stint_global *g, uint64_t fs, uint32_t ok);
static uint32_t current_tid(struct stint_global *g);
static long anon_huge(uint64_t len, int huge);
static long populate_write(uint64_t lo, uint64_t hi);
static long task_stat_path(struct s_stat *st);
static int task_fd_ours(const struct stint_global *g, int32_t fd1, struct s_stat *st);
static long task_stat(struct stint_global *g, struct s_stat *st);

/* options.c */
static uint64_t parse_duration(const char *s, size_t n);
static uint64_t parse_budget(const char *s, size_t n, uint64_t period);
static const char *opt_find(const char *opts, const char *key, size_t *n);
static const char *setting_checked(char **envp, const char *env, const char *opts, const char *key, size_t *n,
				   setting_ok_fn ok, uint64_t period, const char *bad);
static const char *setting(char **envp, const char *env, const char *opts, const char *key, size_t *n);
static int is_none(const char *s, size_t n);
static int period_ok(const char *s, size_t n, uint64_t period);
static int share_ok(const char *s, size_t n, uint64_t period);
static void budget_setup(struct stint_global *g, char **envp, const char *opts);

/* trace.c */
static inline uint64_t pad8(uint64_t v);
static void put64(uint8_t *p, uint64_t v);
static int fd_is_ours(struct stint_global *g);
static void set_untraced_once(struct stint_global *g, const char *what, const char *arg, long err);
static long ensure_len(struct stint_global *g, uint64_t end);
static const char *tool_name(uint32_t t);
static void write_run(struct stint_global *g);
static void write_module(struct stint_global *g, uint32_t i);
static long trace_open(struct stint_global *g, const char **what);
static void publish(struct stint_global *g, struct slot_ring *ring, uint32_t s, uint64_t pos);
static int open_next(struct stint_global *g, uint32_t s, int take_row);
static void col_put(struct stint_global *g, uint8_t *body, int c, uint32_t i, uint64_t v);
static void emit(const struct row *rw);
static void flush(struct stint_global *g);
static void fork_child_reopen(struct stint_global *g);
static void emit_record(uint8_t kind, uint64_t time, uint64_t src, uint64_t dst, uint64_t value);

/* record.c */
static inline int cas16(uint64_t *p, uint64_t o0, uint64_t o1, uint64_t n0, uint64_t n1);
static inline uint64_t mix(uint64_t a, uint64_t b);
static inline uint64_t hash_slot(uint64_t h, uint32_t i);
static int hash_add(struct stint_global *g, uint64_t k0, uint64_t k1);
static inline void hit_note(const struct stint_module *m, const struct stint_probe *p, uint64_t v);
static int probe_cached(const struct stint_probe *p, uint64_t v);
static void row_set_dst(struct stint_global *g, struct row *rw, const struct stint_probe *p, uint64_t v);
static int is_ind_call(const uint8_t *b, int n);
static int call_len_before(const uint8_t *r, uint64_t f);
static void row_set_caller(struct stint_global *g, struct row *rw, uint64_t r, uint64_t f);
static int record_region(struct stint_global *g, struct stint_module *m, struct stint_probe *p, uint64_t v);
static inline void emit_event(struct stint_global *g, struct stint_probe *p, const struct row *rw, int every);
static int record_probe(struct stint_global *g, struct stint_module *m, struct stint_probe *p, uint64_t v, uint64_t rs);
STINT_API void stint_record(const struct stint_probe *cp, uint64_t v, uint64_t entry_sp);

/* patch.c */
static void retarget(uint64_t base, const struct stint_probe *p);
STINT_API int stint_restore_atomic(uint64_t addr, const uint8_t *orig, uint32_t len);
static void restore_all(struct stint_module *m, uint64_t base);
static int restore_sync(struct stint_global *g, uint64_t addr, const uint8_t *orig, uint32_t len, int at_start);
static void write_alone(uint64_t addr, const uint8_t *b, uint32_t len);
static void patch_done(struct stint_module *m, uint64_t base, uint32_t idx, struct stint_probe *p, int alone);
static int code_write(uint64_t addr, const uint8_t *b, uint32_t n, int at_start, int alone);
static int patch_half(struct stint_module *m, uint64_t base, struct stint_patch *pt, struct stint_probe *p, int alone);
static void tables_populate(const struct stint_module *m, uint64_t base);
static int page_rwx(uint64_t lo, uint64_t hi);

/* periods.c */
static uint64_t tsc_to_ns(struct stint_global *g, uint64_t t);
static uint64_t ns_to_tsc(struct stint_global *g, uint64_t ns);
static void gates_set(struct stint_global *g, uint64_t v);
static uint64_t call_charge(struct stint_global *g, uint64_t d, int grew);
static void close_note(struct stint_global *g, uint32_t how, uint64_t used, uint64_t reserve);
static void budget_charge(struct stint_global *g, uint64_t t0, int recorded, int grew);
static void budget_gates_start(struct stint_global *g, uint64_t was_closed, uint64_t now_tsc, int last);
static uint64_t spent_at(struct stint_global *g, uint64_t now_tsc);
static void period_roll(struct stint_global *g, uint64_t now_tsc, uint64_t now_mono, int last);
static uint64_t charge_cap_measure(struct stint_global *g);
static uint64_t measure_call_overhead(void);
static void window_close(struct stint_global *g);
static int wait_req(struct stint_global *g, uint64_t mono_ns);
static void wait_period(struct stint_global *g, uint64_t mono_ns);
static void period_main(void);
static void run_end(struct stint_global *g);
static void periods_start(struct stint_global *g, int spawn);
static void periods_spawn(struct stint_global *g);

/* sample.c */
static inline uint32_t smp_stripe_of(void);
static uint64_t smp_rand(struct stint_sample *s);
static int64_t smp_log2(uint64_t x);
static uint64_t smp_isqrt(unsigned __int128 v);
static void smp_pow2_init(struct stint_sample *s);
static int64_t smp_log2_fast(const struct stint_sample *s, uint64_t x);
static uint64_t smp_exp2_fast(const struct stint_sample *s, int64_t lw);
static uint64_t smp_exp2(const struct stint_sample *s, int64_t lw);
static inline uint64_t mul64(uint64_t a, uint64_t b);
static uint64_t smp_skip(struct stint_sample *s, int64_t lw);
static void smp_half_init(struct stint_sample *s, struct smp_half *hf, uint32_t k);
static struct smp_fn *smp_find(struct stint_sample *s, uint64_t key, uint32_t st);
static void smp_each(struct stint_sample *s, void (*fn)(struct stint_sample *, struct smp_fn *, uint64_t, uint32_t), uint32_t a);
static struct smp_slot *smp_slot_of(struct stint_sample *s, uint32_t h, struct smp_half *hf, uint32_t k, uint64_t i);
static struct smp_slot *smp_fresh(struct stint_sample *s, uint32_t h, struct smp_half *hf, uint64_t i);
static struct smp_slot *smp_upper(struct stint_sample *s, uint32_t h, struct smp_half *hf);
static struct smp_slot *smp_reservoir(struct stint_sample *s, struct smp_fn *f);
static struct smp_slot *smp_stream(struct stint_sample *s);
static struct smp_slot *smp_countdown(struct stint_sample *s, struct smp_fn *f, uint64_t *cw);
static void smp_settle(struct stint_sample *s, struct smp_fn *f, uint64_t key, uint32_t a);
static inline uint64_t smp_loc_key(uint16_t mod, uint64_t a);
static uint64_t smp_key(const struct stint_sample *s, const struct row *rw);
static struct smp_fn *smp_find_cached(struct stint_sample *s, uint64_t key, uint32_t st, uint64_t *cache);
static struct smp_slot *smp_count_in(struct stint_sample *s, struct smp_fn *f, uint64_t *cw);
static struct smp_slot *smp_pick(struct stint_sample *s, const struct row *rw, uint64_t *cache);
static struct smp_slot *smp_pick_countdown(struct stint_sample *s, struct stint_probe *p, const struct row *rw);
static inline uint32_t smp_thread_stripe(void);
static void sample_module(struct stint_module *m);
static struct smp_slot *smp_pick_stripe(struct stint_sample *s, const struct stint_module *m, struct stint_probe *p,
					const struct row *rw);
static void sample_event(struct stint_global *g, struct stint_probe *p, const struct row *rw);
static void smp_size(struct stint_sample *s, struct smp_fn *f, uint64_t key, uint32_t a);
static void smp_prepare(struct stint_sample *s, uint32_t a);
static void smp_emit(const struct smp_slot *sl, uint8_t kind, uint64_t end);
static uint64_t smp_emit_slots(struct smp_slot *sl, uint64_t n, uint64_t end);
static void smp_set_row(uint64_t key, uint64_t n, uint64_t taken, uint64_t end);
static void smp_drain_one(struct stint_sample *s, struct smp_fn *f, uint64_t key, uint32_t a);
static void smp_drain(struct stint_sample *s);
static void smp_flip(struct stint_sample *s, uint64_t end);
static void sample_main(void);
static void smp_seed(struct stint_sample *s, uint64_t seed);
static int sample_parse(const char *v, size_t n, uint64_t *param);
static int sample_ok(const char *v, size_t n, uint64_t unused);
static int interval_ok(const char *v, size_t n, uint64_t unused);
static void sample_setup(struct stint_global *g, char **envp, const char *opts, uint32_t mflags);
static void sample_spawn(struct stint_global *g);
static void sample_end(struct stint_global *g);
static void smp_forget(struct stint_sample *s, struct smp_fn *f, uint64_t key, uint32_t a);
static void sample_fork(struct stint_global *g);

/* qos.c */
static void qos_fallback(struct stint_global *g);
static int dbl_decode(uint64_t bits, uint64_t *m, int *e);
static int dbl_align(const uint64_t *bits, uint64_t *out, int n);
static uint64_t qos_equation(const struct stint_qos_page *s, uint64_t period);
static void qos_map(struct stint_global *g);
static void qos_next(struct stint_global *g, uint64_t now_mono);

/* sw_list.c */
static uint64_t sw_module_new(struct stint_module *m, uint64_t base);
static uint64_t sw_closed_word(struct stint_global *g, const struct gmodule *gm);
static struct sw_mod *sw_of(struct stint_global *g, const struct stint_module *m, uint32_t idx);
static void sw_count_on(struct stint_global *g, int64_t d);
static void sw_write(const struct stint_patch *pt, const struct sw_entry *e, int on);
static const struct stint_read *sw_pairs(const struct stint_module *m, uint32_t idx, int by_read, uint32_t *n);
static int sw_is_orig(const struct stint_module *m, uint32_t idx);
static void sw_stamp(struct stint_global *g, struct sw_mod *s, const struct stint_patch *pt, uint32_t idx);
static void sw_pend_mark(struct sw_mod *s, uint32_t idx);
static int sw_unwatch(struct stint_module *m, struct stint_probe *p);
static void sw_pend_on(struct stint_global *g, struct sw_mod *s, uint32_t idx);
static struct sw_entry *sw_add(struct stint_global *g, struct stint_module *m, struct sw_mod *s, uint32_t idx, int open, int fresh,
				const struct stint_probe *p);
static void sw_readees_of(struct stint_global *g, struct stint_module *m, struct sw_mod *s, uint32_t idx, int off);
static int sw_parkable(const struct stint_patch *pt);
static int sw_no_park(struct stint_global *g, const struct stint_patch *pt);
static int sw_call(struct stint_global *g, struct stint_module *m, const struct stint_probe *p, int closed, int closed_gate);
static int sw_missed(struct stint_global *g, struct stint_module *m, const struct stint_probe *p, int recorded);
static void sw_watched(struct stint_global *g, struct stint_module *m, struct stint_probe *p);
static int sw_cold_on(const struct stint_global *g);
static void sw_cold_load(struct stint_global *g, struct stint_module *m, uint64_t base);
static void log_restore_readees(struct stint_global *g, struct stint_module *m, uint64_t base);
static struct sw_mod *sw_list(struct stint_global *g, uint32_t i, const struct stint_module **mp, const struct stint_patch **pts, uint32_t *n);
static struct sw_walk sw_walk(struct stint_global *g);
static int sw_next(struct sw_walk *w);
static struct sw_entry *sw_few(struct sw_mod *s, uint32_t k);
static uint32_t sw_nfew(const struct sw_mod *s);
static void sw_arm_thunk(const struct stint_module *m, const struct stint_probe *p);

/* sw_sync.c */
static int sw_alone(struct stint_global *g);
static void sw_self_batch(struct stint_global *g);
static int sw_self_begin(struct stint_global *g, int recheck);
static int sw_sync_mine(struct stint_global *g, int mode, int on, const struct stint_patch *pt);
static void sw_self_end(struct stint_global *g, int mode, int on, int keep_fresh, int ask);
static void sw_mute(struct stint_module *m, struct sw_mod *s, struct stint_probe *p);
static void sw_bell(struct stint_global *g);
static void sw_sync_closed(struct stint_global *g, struct stint_module *m, struct sw_mod *s, const struct stint_probe *p, uint32_t idx);
static void sw_take(struct stint_global *g, enum sw_take_what what);
static void sw_period_upkeep(struct stint_global *g);
static void sync_core(void);
static void sw_barrier(struct stint_global *g);
static void sw_sync_finish(struct stint_global *g, int on);

/* sw_batch.c */
static int sw_put(struct sw_mod *s, struct sw_entry *e, const struct stint_patch *pt, int on);
static const struct stint_read *sw_epairs(const struct stint_module *m, const struct sw_entry *e, int by_read, uint32_t *n);
static int sw_orig_now(const struct stint_module *m, struct sw_mod *s, uint32_t r);
static int sw_readers_orig(const struct stint_module *m, struct sw_mod *s, const struct sw_entry *e);
static int sw_readees_on(const struct stint_module *m, struct sw_mod *s, const struct sw_entry *e);
static int sw_needed(const struct stint_module *m, const struct stint_patch *pts, const struct sw_entry *e);
static int sw_readers_off(struct stint_global *g, const struct stint_module *m, struct sw_mod *s, const struct sw_entry *re, int flags, uint64_t *forced);
static uint32_t sw_nvisit(const struct sw_mod *s, int pend);
static struct sw_entry *sw_visit(struct sw_mod *s, int pend, uint32_t k);
static uint64_t sw_drain(struct stint_global *g, uint64_t *changed, int self, int *selfpend);
static void sw_requeue(struct stint_global *g);
static uint64_t sw_readees(struct stint_global *g, int on, int flags, uint64_t *forced);
static void sw_readees_defer(struct stint_global *g, int flags);
static int sw_slot_held(const struct stint_module *m, const struct sw_entry *e);
static uint64_t sw_batch(struct stint_global *g, int on, int flags);
static void sw_done_stamp(struct stint_module *m, uint32_t idx);
static void sw_done_sync(struct stint_module *m, const struct stint_patch *pt, uint32_t idx);
static int sw_owns(struct stint_module *m, uint32_t idx);

/* sw_budget.c */
static void sw_request(struct stint_global *g, uint32_t what);
static void sw_after_record(struct stint_global *g, struct stint_module *m, const struct stint_probe *p, int recorded);
static void sw_closed_call(struct stint_global *g, struct stint_module *m, struct stint_probe *p, uint64_t v, uint64_t rs);
static uint64_t sw_fixed(struct stint_global *g);
static void sw_site_cost(struct stint_global *g, uint64_t d, uint64_t n);
static uint64_t sw_reserve(struct stint_global *g, uint64_t n);
static uint64_t sw_off_reserve(struct stint_global *g);
static void gates_word1(struct stint_global *g, uint64_t v);
static uint64_t sw_timed(struct stint_global *g, int on, int flags, int charge);
static void sw_all_off(struct stint_global *g, int window);
static void sw_rearm(struct stint_global *g);
static void sw_rearm_over(struct stint_global *g);
static int sw_quiet_skip(struct stint_global *g);

/* redlog.c */
static const char *log_policy_name(uint32_t p);
static uint64_t fnv64(const uint8_t *b, size_t n);
static const uint32_t (*crc_tables(struct stint_global *g))[256];
static uint32_t crc32_ieee(struct stint_global *g, const uint8_t *b, size_t n);
static inline void logkey(uint64_t srcbid, uint64_t src, uint32_t kind, uint64_t dstbid, uint64_t dst, uint64_t *k0, uint64_t *k1);
static inline uint64_t logset_bit(const struct stint_global *g, uint64_t k0);
static int logset_has(const struct stint_global *g, uint64_t k0, uint64_t k1);
static int logset_put(struct stint_global *g, uint64_t k0, uint64_t k1);
static uint64_t *logdig_find(struct stint_global *g, uint64_t bid);
static uint64_t *log_digest(struct stint_global *g, uint64_t bid);
static void say_log(struct stint_global *g, const char *what, uint64_t off);
static uint64_t log_good_block(struct stint_global *g, const uint8_t *p, uint64_t n, uint64_t off);
static int log_torn_prefix(const uint8_t *b, uint64_t n);
static uint64_t log_scan(struct stint_global *g, const uint8_t *p, uint64_t from, uint64_t size, int report,
			 void (*each)(struct stint_global *, const uint8_t *), int *cut);
static uint64_t log_seal_block(struct stint_global *g, uint8_t *h, uint32_t count, const struct gmodule *gm);
static void log_load_block(struct stint_global *g, const uint8_t *b);
static void log_setup(struct stint_global *g, char **envp, const char *opts, const struct stint_module *m);
static int log_lock_shared(long fd);
static void log_read(struct stint_global *g, const uint8_t *p, uint64_t from, uint64_t size, int shared);
static void log_know(struct stint_global *g, uint64_t end, uint64_t last, const uint8_t *head);
static uint64_t log_known(const struct stint_global *g, const uint8_t *p, uint64_t size);
static void log_complete(struct stint_global *g);
static int log_seen_table(const struct stint_global *g, const struct stint_module *m, uint64_t k0, uint64_t k1);
static int log_has(const struct stint_global *g, const struct stint_module *m, uint64_t k0, uint64_t k1);
static int log_nonempty(const struct stint_global *g);
static void log_load_module(struct stint_global *g, struct stint_module *m, uint64_t base, uint32_t chunks_lost);
static uint64_t module_bid(struct stint_global *g, uint16_t id);
static int log_seen(struct stint_global *g, struct stint_module *m, struct stint_probe *p, uint64_t dst, uint16_t dst_mod);
static void log_note(struct stint_global *g, struct stint_module *m, struct stint_probe *p, uint64_t dst, uint16_t dst_mod);
static int log_lock_exit(struct stint_global *g);
static void log_save(struct stint_global *g, int exiting);

/* regions.c */
static int reg_cmp(const struct region *r, uint64_t bid, uint64_t addr);
static uint64_t reg_lower(struct stint_global *g, uint64_t bid, uint64_t addr);
static void reg_insert_at(struct stint_global *g, uint64_t i, uint64_t bid, uint64_t addr, uint64_t len, uint64_t flags);
static void reg_delete(struct stint_global *g, uint64_t i);
static int reg_decide(struct stint_global *g, uint64_t bid, uint64_t a, uint64_t n);
static uint64_t trace_end(struct stint_module *m, uint64_t base, uint64_t a);
static int trace_decision(struct stint_global *g, uint64_t bid, uint64_t a, uint64_t n, int *ok);
static struct thr_slot *thread_slot(struct stint_global *g, uint32_t tid);
static int region_event(struct stint_global *g, struct stint_module *m, struct stint_probe *p, uint64_t dst_abs, int has_dst);
static void regions_load_block(struct stint_global *g, const uint8_t *b);
static int regions_setup(struct stint_global *g, const uint8_t *p, uint64_t size);
static uint64_t regions_blocks(struct stint_global *g, uint8_t *buf, uint64_t cap);

/* rets.c */
static const uint32_t *rets_list(const struct stint_module *m, uint64_t base, uint32_t word, uint32_t *n);
static const uint32_t *call_rets(const struct stint_module *m, uint64_t base, const struct stint_probe *p, uint32_t *n, uint64_t *ret);
static const uint32_t *own_sites(const struct stint_module *m, const struct stint_probe *p, uint32_t *n);
static int hash_has(struct stint_global *g, uint64_t k0, uint64_t k1);
static int ret_seen(struct stint_global *g, const struct stint_module *m, uint64_t base, const uint32_t *l, uint32_t n, uint64_t ret);
static void ret_release_readees(const struct stint_module *m, struct sw_mod *s, uint32_t idx, const uint8_t *held, uint32_t nheld);
static int ret_hold_readees(struct stint_global *g, const struct stint_module *m, struct sw_mod *s, uint32_t idx, uint8_t *held, uint32_t *nheld);
static const uint32_t *ret_pending(struct stint_global *g, const struct stint_module *m, uint64_t base, const struct stint_probe *p, uint32_t *n);
static uint32_t ret_switch_sync(struct stint_global *g, struct stint_module *m, const uint32_t *l, uint32_t n);
static uint32_t ret_switch_on(struct stint_global *g, struct stint_module *m, const uint32_t *l, uint32_t n);
static void ret_expect(struct stint_global *g, struct stint_module *m, const struct stint_probe *p);
static void ret_watched(struct stint_global *g, struct stint_module *m, struct stint_probe *p);

/* contexts.c */
static struct ctx_state *ctx_get(struct stint_global *g);
static struct ctx_thread *ctx_thread(struct ctx_state *c, uint32_t tid);
static struct ctx_slot *ctx_find(struct ctx_state *c, uint64_t h, uint32_t parent, uint16_t sm, uint64_t src,
				 uint16_t dm, uint64_t dst, int64_t *free_ix);
static struct ctx_slot *ctx_intern(struct ctx_state *c, uint32_t parent, uint16_t sm, uint64_t src,
				   uint16_t dm, uint64_t dst);
static void ctx_emit(struct ctx_slot *s);
static int ctx_write(struct ctx_state *c, struct ctx_slot *s);
static int ctx_record(struct stint_global *g, struct stint_module *m, struct stint_probe *p, uint64_t v,
		      uint64_t entry_sp, int may_write);
static void ctx_reset(struct stint_global *g);

/* pathsfile.c */
static uint64_t paths_chunk_size(void);
static long paths_file_open(struct stint_global *g);
static long paths_extend(struct stint_global *g, uint64_t end);
static long paths_alloc(struct stint_global *g, uint64_t lo, uint64_t hi);
static int paths_grow(struct stint_global *g, struct paths_thread *t);
static uint64_t paths_chunk_new(struct stint_global *g, uint32_t tid, uint32_t seq, uint64_t first_ns);
static void test_roll_kill(struct stint_global *g, uint32_t step);
static void test_paths_setup(struct stint_global *g, char **envp);
static void test_procmap_setup(struct stint_global *g, char **envp);
static uint64_t paths_reserve(struct stint_global *g, uint64_t len, uint64_t alloc);
static void paths_header(uint8_t *c, uint64_t len, uint64_t n);
static uint64_t paths_claim(struct stint_global *g, uint64_t len, uint64_t n);
static long paths_chunk_roll(struct stint_global *g, uint64_t pos, uint32_t seq, uint64_t n, uint64_t now);
static uint64_t *paths_chunk_field(struct stint_global *g, uint64_t pos, uint32_t off);
static uint8_t *paths_chunk_data(struct stint_global *g, uint64_t pos);
static void paths_close(struct stint_global *g);
static void paths_fork(struct stint_global *g);

/* counts.c */
static void counts_dump(struct stint_global *g, uint64_t mono_ns);

/* paths.c */
static inline uint64_t gs_get(struct stint_global *g);
static inline void gs_set(struct stint_global *g, uint64_t v);
static struct paths_thread *paths_blocks(struct stint_global *g);
static struct paths_thread *paths_self(struct stint_global *g, uint64_t sync);
static void paths_use(struct stint_global *g, struct paths_thread *t);
static int paths_gs_ready(struct stint_global *g);
static int pk_room(struct stint_global *g, struct paths_thread *t);
static inline void pk_u64(struct paths_thread *t, uint64_t v);
static void pk_flush(struct stint_global *g, struct paths_thread *t);
static inline void pk_bit(struct stint_global *g, struct paths_thread *t, int taken);
static void pk_tip(struct stint_global *g, struct paths_thread *t, uint64_t a);
static void pk_opv(struct stint_global *g, struct paths_thread *t, uint8_t op, const uint64_t *v, int n);
static void pk_op(struct stint_global *g, struct paths_thread *t, uint8_t op, uint64_t a, uint64_t b, int n);
static void pk_sync(struct stint_global *g, struct paths_thread *t, uint64_t a);
static inline uint64_t st_top(const struct paths_thread *t);
static inline void st_push(struct paths_thread *t, uint64_t a);
static inline void st_pop(struct paths_thread *t, uint32_t n);
static void st_clear(struct paths_thread *t);
static void st_unwind(struct paths_thread *t, uint64_t a);
static int paths_inside(struct stint_global *g, uint64_t a);
static int is_restorer(struct stint_global *g, uint64_t a);
static void paths_leave(struct stint_global *g, struct paths_thread *t, uint64_t a);
static int paths_inside_out(struct stint_global *g, struct paths_thread *t, uint64_t a);
static int bytes_at(uint64_t a, const uint8_t *b, size_t n);
static void paths_complete_arm(struct stint_global *g, struct paths_thread *t, uint64_t sp);
static void paths_entry(struct stint_global *g, struct paths_thread *t, uint64_t src, uint64_t ret, uint64_t sp);
static void paths_ret(struct stint_global *g, struct paths_thread *t, uint64_t a, uint64_t sp);
static int paths_redirected(struct stint_global *g, struct paths_thread *t, uint64_t a, uint64_t sp);
static void paths_record(struct stint_global *g, struct stint_module *m, struct stint_probe *p, uint64_t v, uint64_t entry_sp);
static void paths_psb(struct stint_global *g, struct paths_thread *t, const struct stint_probe *p, uint64_t src, uint64_t v);
static void pk_psb(struct stint_global *g, struct paths_thread *t, uint64_t src);
static uint64_t paths_walk_event(struct stint_global *g, struct paths_thread *t, struct stint_probe *p, uint64_t src, uint64_t v, uint64_t entry_sp);
static void paths_calls_event(struct stint_global *g, struct paths_thread *t, const struct stint_module *m, const struct stint_probe *p, uint64_t src,
			      uint64_t v);
static void paths_event(struct stint_global *g, struct paths_thread *t, const struct stint_probe *p, uint64_t src, uint64_t v, uint64_t sp);

/* chunks.c */
static uint32_t stubs_from(const struct stint_stub *st, uint32_t n, uint64_t lo);
static void stubs_fill(uint8_t *dst, uint64_t lo, uint64_t len, const struct stint_stub *st, uint32_t n);
static long pwrite_all(long fd, const uint8_t *buf, uint64_t n, uint64_t off);
static long stubs_pwrite(long fd, uint64_t area, const struct stint_stub *st, uint32_t n, uint8_t *buf);
static long chunk_fail_hook(char **envp);
static uint64_t chunk_restore(struct stint_module *m, uint64_t base, const struct stint_chunk *c, int writable);
static long stubs_file_open(const struct stint_module *m, uint64_t base, char **envp, char *path, size_t cap);
static void range_clip(uint64_t *lo, uint64_t *hi, uint64_t xlo, uint64_t xhi);
static void seg_huge(const struct elf64_phdr *ph, uint64_t base, uint64_t lo, uint64_t hi, long fd, int prot);
static void tables_huge(const struct stint_module *m, uint64_t base, long fd, int writable);
static long stubs_memfd(const struct stint_stub *st, uint32_t nst, uint64_t area, char **envp);
static uint32_t chunks_map(struct stint_module *m, uint64_t base, char **envp, int writable, char *path, size_t cap, int roomy);

/* trap.c */
static struct stint_trap *trap_find(struct stint_global *g, uint64_t addr, struct stint_module **mod);
static void trap_retire(struct stint_module *m, const struct stint_trap *t);
static void trap_restore(struct stint_module *m, uint64_t base);
static void trap_install(struct stint_global *g, struct stint_module *m, uint64_t base, int patching, char **envp);

/* testhooks.c */
static void test_setup(struct stint_global *g, char **envp);
static void test_log_setup(struct stint_global *g, char **envp);
__attribute__((cold, noinline)) static void test_stall(int clock, uint64_t ns);
__attribute__((cold, noinline)) static void test_charge_stall(struct stint_global *g, int at_note);
__attribute__((cold, noinline)) static void test_batch_stall(struct stint_global *g);
__attribute__((cold, noinline)) static void test_save_hold(struct stint_global *g);

/* init.c */
static struct stint_global *global_get(int *created, const char **what, long *err);
STINT_API void stint_module_init(struct stint_module *m, char **envp, const uint64_t *auxv);
static struct stint_module *module_of_blob(const uint8_t *blob);
STINT_API uint64_t stint_init_exec(const uint8_t *blob, uint64_t *sp);
STINT_API uint64_t stint_init_shared(const uint8_t *blob, long argc, char **argv, char **envp);
STINT_API uint64_t stint_fini(const uint8_t *blob, uint64_t ret);
STINT_API void stint_counters(uint64_t out[3]);

#endif
