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
 * Trace file: see the comment above struct stint_global and DESIGN.md §4.
 * Any setup failure prints one line to fd 2 and leaves the program running
 * untraced: the runtime never exits, aborts or signals.
 */
#include "sys.h"
#include "stint_abi.h"
#include "stint_arrow.h"

#define STINT_API __attribute__((visibility("default"), used))
#define LIKELY(x) __builtin_expect(!!(x), 1)
#define UNLIKELY(x) __builtin_expect(!!(x), 0)

/* ---- the little string library we need ---- */

#ifdef STINT_BLOB
/* gcc may emit calls to these for structure copies. */
void *memcpy(void *d, const void *s, size_t n) __attribute__((visibility("hidden")));
void *memset(void *d, int c, size_t n) __attribute__((visibility("hidden")));
void *memcpy(void *d, const void *s, size_t n)
{
	unsigned char *dp = d;
	const unsigned char *sp = s;
	while (n--)
		*dp++ = *sp++;
	return d;
}
void *memset(void *d, int c, size_t n)
{
	unsigned char *dp = d;
	while (n--)
		*dp++ = (unsigned char)c;
	return d;
}
#endif

static void s_memcpy(void *d, const void *s, size_t n)
{
	unsigned char *dp = d;
	const unsigned char *sp = s;
	while (n--)
		*dp++ = *sp++;
}

static void s_memset(void *d, int c, size_t n)
{
	unsigned char *dp = d;
	while (n--)
		*dp++ = (unsigned char)c;
}

static size_t s_strlen(const char *s)
{
	size_t n = 0;
	while (s[n])
		n++;
	return n;
}

static int s_strncmp(const char *a, const char *b, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		if (a[i] != b[i])
			return (unsigned char)a[i] - (unsigned char)b[i];
		if (!a[i])
			return 0;
	}
	return 0;
}

/* A bounded string builder: writes past cap are dropped, never overrun. */
struct sbuf {
	char *p;
	size_t len, cap;
};

static void sb_putc(struct sbuf *b, char c)
{
	if (b->len < b->cap)
		b->p[b->len] = c;
	b->len++;
}

static void sb_puts(struct sbuf *b, const char *s)
{
	while (*s)
		sb_putc(b, *s++);
}

static void sb_putu(struct sbuf *b, uint64_t v)
{
	char t[24];
	int n = 0;
	do {
		t[n++] = (char)('0' + v % 10);
		v /= 10;
	} while (v);
	while (n)
		sb_putc(b, t[--n]);
}

static void sb_puthex(struct sbuf *b, const uint8_t *p, size_t n)
{
	static const char hx[] = "0123456789abcdef";
	for (size_t i = 0; i < n; i++) {
		sb_putc(b, hx[p[i] >> 4]);
		sb_putc(b, hx[p[i] & 15]);
	}
}

/* JSON string contents: escape quotes, backslashes and control bytes. */
static void sb_putjs(struct sbuf *b, const char *s)
{
	static const char hx[] = "0123456789abcdef";
	sb_putc(b, '"');
	for (; *s; s++) {
		unsigned char c = (unsigned char)*s;
		if (c == '"' || c == '\\') {
			sb_putc(b, '\\');
			sb_putc(b, (char)c);
		} else if (c < 0x20) {
			sb_puts(b, "\\u00");
			sb_putc(b, hx[c >> 4]);
			sb_putc(b, hx[c & 15]);
		} else {
			sb_putc(b, (char)c);
		}
	}
	sb_putc(b, '"');
}

static const char *errno_name(long e)
{
	switch (e) {
	case 1: return "EPERM";
	case 2: return "ENOENT";
	case 5: return "EIO";
	case 9: return "EBADF";
	case 12: return "ENOMEM";
	case 13: return "EACCES";
	case 14: return "EFAULT";
	case 16: return "EBUSY";
	case 17: return "EEXIST";
	case 20: return "ENOTDIR";
	case 21: return "EISDIR";
	case 22: return "EINVAL";
	case 23: return "ENFILE";
	case 24: return "EMFILE";
	case 27: return "EFBIG";
	case 28: return "ENOSPC";
	case 30: return "EROFS";
	case 36: return "ENAMETOOLONG";
	case 122: return "EDQUOT";
	default: return "error";
	}
}

/* One line on stderr: "stint: <msg>". */
static void say_line(const char *msg)
{
	char line[512];
	struct sbuf b = {line, 0, sizeof line - 1};
	sb_puts(&b, "stint: ");
	sb_puts(&b, msg);
	size_t n = b.len < b.cap ? b.len : b.cap;
	line[n++] = '\n';
	sys_call3(SYS_write, 2, (long)line, (long)n);
}

/* The one line a failed setup prints: "stint: <what>: <errno>; running untraced". */
static void say_untraced(const char *what, const char *arg, long err)
{
	char line[512];
	struct sbuf b = {line, 0, sizeof line - 1};
	sb_puts(&b, "stint: ");
	sb_puts(&b, what);
	if (arg) {
		sb_putc(&b, ' ');
		sb_puts(&b, arg);
	}
	sb_puts(&b, ": ");
	sb_puts(&b, errno_name(err));
	sb_puts(&b, "; running untraced\n");
	size_t n = b.len < b.cap ? b.len : b.cap;
	if (b.len > b.cap)
		line[n - 1] = '\n';
	sys_call3(SYS_write, 2, (long)line, (long)n);
}

/* ---- process-wide state ---- */

#define STINT_GLOBAL_ADDR   ((uintptr_t)0x3e5700000000ULL)
#define STINT_GLOBAL_MAGIC  0x4c424f4c47544e53ULL /* "SNTGLOBL" */
#define STINT_GLOBAL_SIZE   ((size_t)32 << 20)
#define STINT_WIPE_ADDR     (STINT_GLOBAL_ADDR + STINT_GLOBAL_SIZE)
#define STINT_WIPE_SIZE     4096
#define STINT_TRACE_HINT    (STINT_GLOBAL_ADDR + ((uintptr_t)1 << 40)) /* trace file mappings */

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
#define RES_CLOSED     0x80000000u   /* reservation count of a closed slot */
#define SPIN_LIMIT     (1u << 14) /* waits of at most ~16k pause/yield rounds */
#define FILE_RESERVE   ((uint64_t)64 << 30)

#define DST_MODULE_NONE STINT_ARROW_NO_MODULE

struct gmodule {
	uint64_t base, size;
	uint32_t ready;      /* set last (release): the entry is complete */
	uint32_t rewritten;
	uint32_t build_id_len;
	uint32_t pad;
	uint8_t build_id[32];
	uint64_t gate;       /* address of the module's gate word, 0 = none */
	uint64_t bidhash;    /* FNV-1a 64 of the build-id, 0 = none */
	uint64_t smod;       /* its struct stint_module, 0 = not rewritten */
	uint64_t sw;         /* its off-switch list (switch.c), 0 = none */
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

/*
 * The trace file is an Arrow IPC stream: the schema message, then batch
 * "slots" of a fixed size one after the other. A slot is the batch
 * metadata template (STINT_ARROW_BATCH_LEN bytes) followed by the eight
 * column buffers sized for ROWS_PER_BATCH rows. The first four bytes of a
 * slot stay zero (= end of stream to a reader) until its first row is
 * published (see publish()); from then on the batch in the file covers
 * every complete row, so a process that dies loses at most the rows being
 * written at that instant.
 *
 * cur packs (slot number << 32 | rows reserved). A writer fetch-adds 1:
 * an index below the capacity is its row; exactly the capacity means it
 * filled the slot and must open the next one; more means someone else is
 * opening it (spin, bounded, and retry). Each slot's committed-row count
 * lives in ring[slot % RING], tagged with the slot number; an entry is
 * reused only once its slot has all its rows.
 */
struct stint_global {
	uint64_t magic;
	uint32_t abi_version;
	uint32_t size;
	int32_t pid;
	uint32_t recording;          /* 0: off (disabled, or setup failed) */
	uint32_t init_lock;          /* try-lock for trace (re)opening */
	uint32_t scratch_lock;       /* try-lock for scratch */
	uint32_t warned;
	uint32_t failed;             /* trace setup failed: every module runs untraced */
	uint32_t nmodules;           /* entries reserved */
	uint32_t nanon;
	uint32_t every_any;
	uint64_t events, dropped, hash_full;
	uint64_t vdso_gettime;       /* address of __vdso_clock_gettime or 0 */
	uint64_t start_ns, mono_start_ns;
	int32_t fd;
	int32_t exe_registered;
	uint64_t fd_dev, fd_ino;     /* identity of the trace file behind fd */
	int32_t task_fd1;            /* 1 + an fd of this process's /proc/self/task (switch.c, sw_alone), 0 = none */
	int32_t task_pad;
	uint64_t task_dev, task_ino; /* its identity */
	uint64_t map;                /* file mapping (FILE_RESERVE bytes) */
	uint64_t file_len;           /* current ftruncate length */
	uint64_t next_pos;           /* where the next slot opens */
	uint64_t slot_size;
	uint64_t col_off[STINT_ARROW_NCOLS]; /* body-relative column offsets */
	uint64_t cur;
	uint64_t modules_used;       /* bytes of stint.modules filled */
	uint32_t tool;
	uint32_t tid_mode;           /* TID_*: how emit learns the thread id */
	char options[192];
	char exe_path[512];
	char out_dir[512];
	char trace_path[1024];
	uint8_t exe_build_id[32];
	uint32_t exe_build_id_len;
	uint32_t pad3;
	/* budget (budget.c) */
	uint32_t budget_on;          /* a budget below 100% of the period */
	uint32_t log_on;             /* a redundancy log is kept (redlog.c) */
	uint32_t gate_closed;        /* bit 0: the budget of this period is spent; the rest counts the periods
	                              * (period_roll), so that a charge that closes the gate for the period it
	                              * was made in (a compare-and-swap from the word it read before it was
	                              * added) cannot close the next one: GATE_CLOSED(g) reads bit 0 */
	uint32_t pad4;
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
	uint64_t test_charge_stall_ns; /* STINT_TEST_CHARGE_STALL (stint_abi.h) */
	uint64_t test_readee_stall_ns; /* STINT_TEST_READEE_STALL (stint_abi.h) */
	uint64_t test_switch_stall_ns; /* STINT_TEST_SWITCH_STALL (stint_abi.h) */
	uint64_t test_batch_stall_ns;  /* STINT_TEST_BATCH_STALL (stint_abi.h) */
	uint64_t period_idx, period_tsc0, period_mono0, period_events0;
	uint64_t cal_tsc, cal_mono;  /* calibration anchor */
	/* QoS controller (budget.c) */
	uint32_t period_lock;        /* period_roll runs under it (period thread, exit) */
	uint32_t run_ended;          /* the run-end row is written */
	uint32_t period_thread;      /* this process's period thread runs */
	uint32_t ctx_lock;           /* context tables (contexts.c) */
	uint64_t ctx;                /* struct ctx_state *, mapped on first use */
	uint32_t ctx_warned, pad8;
	/* the off-switch (switch.c, budget.c) */
	uint32_t sw_on;              /* switch sites off while the budget is spent */
	uint32_t sw_req;             /* futex, SW_REQ_*: work for the period thread (budget.c) */
	uint32_t sw_is_on;           /* the last batch switched on */
	uint32_t sw_window_over;     /* this period's window is over: calling sites switch off */
	uint32_t sw_rearmed;         /* SW_REARM_*: new code ran after the window: open-ended sites are back on */
	uint32_t sw_cold;            /* STINT_PATCH_COLD sites start off (switch.c, sw_cold_load) */
	uint32_t sw_quiet_on;        /* windows thin out in quiet periods (budget.c, sw_quiet_skip) */
	uint32_t sw_quiet;           /* windows in a row whose periods recorded nothing */
	uint32_t sw_skipped;         /* windows skipped since the last one */
	uint32_t sw_no_window;       /* this period opened no window (skipped, spent, too costly) */
	uint64_t sw_window_ns;       /* how long listed sites stay on per period (0: the budget) */
	uint64_t sw_tsc;             /* switching cost this period (batches and closed calls) */
	uint64_t sw_charged_tsc;     /* the part of sw_tsc already in used_tsc (switching on) */
	uint64_t sw_lazy_tsc;        /* the part of sw_tsc after the gate closed or the window ended (sites switching themselves off, batches of waiting sites): charged at the period's end */
	uint64_t sw_lazy_hi;         /* high mark of sw_lazy_tsc in periods whose gate closed, falling by a sixteenth a period (budget.c, sw_off_reserve) */
	uint64_t sw_debt_tsc;        /* what earlier periods' sw_lazy_tsc and late_tsc left over their budget: charged at this period's start, up to its budget */
	uint64_t late_tsc;           /* recording by sites that called after the gate closed (sw_closed_call) */
	uint64_t sw_pend_mono;       /* when the last batch of SW_PEND sites ended (CLOCK_MONOTONIC ns) */
	uint64_t sw_rearm_end;       /* when this period's rearm ends (CLOCK_MONOTONIC ns), 0 = none running */
	uint64_t sw_last_on;         /* sites the last period-start switch-on changed (0 = none yet) */
	uint64_t sw_stop_tsc;        /* the period-start switch-on stops here (0 = no limit; budget.c) */
	/* self mode (switch.c, sw_self_batch): the program's only thread writes the sync sites */
	uint32_t sw_self_ok;         /* allowed (STINT_SWITCH_SELF, default on) */
	uint32_t sw_self;            /* the period thread's last batch found the program single-threaded */
	uint32_t sw_self_gen;        /* bumped by the period thread: sync sites to be set to sw_self_on */
	uint32_t sw_self_done;       /* the generation the last self batch carried out */
	uint32_t sw_self_on;         /* the state the sync sites should have */
	uint32_t sw_self_keep_fresh; /* ... except fresh ones, which stay on */
	uint32_t sw_self_lock;       /* held while the sync sites are written, by either thread */
	uint32_t sw_has_sync;        /* a module has sync patches (without any, self mode has nothing to do) */
	uint32_t sw_park_ok;         /* a module allows parking threads for them (STINT_MF_PARK, --switch-sync) */
	uint64_t sw_listed_open;     /* listed open-ended sites (what a rearm switches) */
	uint64_t sw_site_tsc;        /* what switching one site costs (budget.c, sw_site_cost) */
	uint64_t sw_sync_tsc;        /* what one membarrier(SYNC_CORE) costs (measured at start) */
	uint64_t sw_stall_tsc;       /* room for a stall in the switch-off (budget.c, SW_STALL_NS) */
	uint64_t sw_fixed_tsc;       /* what a batch costs besides its sites (budget.c, sw_reserve) */
	uint32_t sw_off_paid;        /* this period's reserved switch-off ran (budget.c, sw_all_off) */
	uint32_t pad_off;
	uint32_t sw_epoch;           /* switch.c, sw_barrier: the current barrier epoch */
	uint32_t sw_synced;          /* epochs below this have been ended by a barrier */
	uint64_t sw_listed;          /* sites listed (switch.c), all modules */
	uint64_t sw_listed_on;       /* listed sites now switched on (about: for the reserve) */

	uint64_t sw_ons, sw_offs;    /* sites switched on / off this period */
	uint32_t rets_on, pad_rets;  /* RETS_*: STINT_RETS (rets.c) */
	uint64_t charge_cap_tsc;     /* most a call that did not grow the file is charged (budget.c) */
	uint64_t capped;             /* calls charged the cap instead of their measured time */
	uint32_t qos_on;             /* STINT_QOS names a QoS page */
	uint32_t qos_bad;            /* the page was rejected (said once) */
	uint64_t qos_page;           /* the mapped page, 0 until the file exists */
	uint64_t qos_default_ns;     /* the budget without a fresh sample */
	uint64_t qos_value, qos_threshold; /* double bits behind this period's budget (NaN: none) */
	char qos_path[256];
	/* redundancy log (redlog.c) */
	uint32_t log_policy, log_lock, log_warned, pad5;
	uint64_t logset, logset_slots, logset_n; /* entries read from the log */
	uint64_t logset_filter;      /* a bit per slots * 8, set from each entry's k0 (redlog.c, logset_has) */
	/* per source module of the log read at start: build-id hash, distinct
	 * entries, the sum of their hashes (redlog.c, log_digest) */
	uint64_t logdig[LOGDIG_MAX][3];
	uint32_t logdig_n, logdig_full; /* modules in logdig; one did not fit */
	uint32_t log_load_test, pad_llt; /* STINT_TEST_LOG_LOAD */
	uint64_t log_pending, log_npend, log_saved; /* outcomes noted this run */
	uint32_t region_mode, regions_lock; /* a region policy (regions.c) */
	uint32_t sync_core, pad6;    /* membarrier SYNC_CORE registered: restore_sync works */
	uint64_t regions, nregions, decisions, thr_slots;
	char log_path[512];
	char log_hold[256];          /* STINT_TEST_SAVE_HOLD (redlog.c, log_save) */
	uint32_t crc_ready, pad_crc;  /* crc_tab is built (redlog.c, crc_tables) */
	uint32_t crc_tab[8][256];
	struct slot_ring ring[RING];
	struct anon_region anon[MAX_ANON];
	char scratch[SCRATCH_SIZE];
	struct gmodule modules[MAX_MODULES];
	uint64_t hash_pages[HASH_SLOTS * 16 / 4096 / 64]; /* bit per page of hash: written to (hash_add) */
	uint64_t hash[] __attribute__((aligned(16)));
};

static const char *log_policy_name(uint32_t p);
static void periods_start(struct stint_global *g, int spawn);
static void periods_spawn(struct stint_global *g);
static void gates_set(struct stint_global *g, uint64_t v);
static void ctx_reset(struct stint_global *g);

struct wipe_page {
	uint32_t alive;   /* zero in a freshly forked child */
};

/* struct stint_module.runtime_state */
#define RS_ACTIVE   0x1   /* initialised, recording */
#define RS_PATCHING 0x2   /* text and trampolines writable: may retarget/restore */

static inline struct stint_global *G(void) { return (struct stint_global *)STINT_GLOBAL_ADDR; }

/* Whether this period's budget is spent (bit 0 of gate_closed). */
#define GATE_CLOSED(g) (__atomic_load_n(&(g)->gate_closed, __ATOMIC_ACQUIRE) & 1u)
static inline struct wipe_page *W(void) { return (struct wipe_page *)STINT_WIPE_ADDR; }

static inline void cpu_pause(void) { __asm__ volatile("pause" ::: "memory"); }

/*
 * One round of a bounded wait: pause at first, then yield the CPU, since
 * the thread we wait for may be preempted on an oversubscribed machine.
 */
static inline void relax(uint32_t round)
{
	if (round < 64)
		cpu_pause();
	else
		sys_call0(SYS_sched_yield);
}

static uint64_t now_ns(int clock)
{
	struct s_timespec ts = {0, 0};
	uint64_t f = G()->vdso_gettime;
	if (f && ((long (*)(long, struct s_timespec *))f)(clock, &ts) == 0)
		return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
	sys_call2(SYS_clock_gettime, clock, (long)&ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

/* ---- the vDSO ---- */

struct elf64_ehdr {
	uint8_t ident[16];
	uint16_t type, machine;
	uint32_t version;
	uint64_t entry, phoff, shoff;
	uint32_t flags;
	uint16_t ehsize, phentsize, phnum, shentsize, shnum, shstrndx;
};
struct elf64_phdr {
	uint32_t type, flags;
	uint64_t offset, vaddr, paddr, filesz, memsz, align;
};
struct elf64_shdr {
	uint32_t name, type;
	uint64_t flags, addr, offset, size;
	uint32_t link, info;
	uint64_t addralign, entsize;
};
struct elf64_sym {
	uint32_t name;
	uint8_t info, other;
	uint16_t shndx;
	uint64_t value, size;
};

/*
 * The kernel maps the whole vDSO image, section headers included, so the
 * dynamic symbol table is found through them.
 */
/* Whether eh starts a 64-bit ELF file. */
static int elf64_ident_ok(const struct elf64_ehdr *eh)
{
	return eh->ident[0] == 0x7f && eh->ident[1] == 'E' && eh->ident[2] == 'L' && eh->ident[3] == 'F' && eh->ident[4] == 2;
}

static uint64_t vdso_lookup(uint64_t ehdr_addr, const char *name)
{
	const struct elf64_ehdr *eh = (const void *)ehdr_addr;
	if (!eh || !elf64_ident_ok(eh))
		return 0;
	uint64_t load = 0;
	int found = 0;
	const struct elf64_phdr *ph = (const void *)(ehdr_addr + eh->phoff);
	for (int i = 0; i < eh->phnum; i++) {
		if (ph[i].type == 1 /* PT_LOAD */) {
			load = ehdr_addr + ph[i].offset - ph[i].vaddr;
			found = 1;
			break;
		}
	}
	if (!found || eh->shentsize != sizeof(struct elf64_shdr))
		return 0;
	const struct elf64_shdr *sh = (const void *)(ehdr_addr + eh->shoff);
	for (int i = 0; i < eh->shnum; i++) {
		if (sh[i].type != 11 /* SHT_DYNSYM */ || sh[i].link >= eh->shnum)
			continue;
		const struct elf64_sym *sym = (const void *)(ehdr_addr + sh[i].offset);
		const char *str = (const char *)(ehdr_addr + sh[sh[i].link].offset);
		uint64_t n = sh[i].size / sizeof(struct elf64_sym);
		size_t nl = s_strlen(name) + 1;
		for (uint64_t j = 0; j < n; j++) {
			if (sym[j].shndx == 0 || !sym[j].value)
				continue;
			if (s_strncmp(str + sym[j].name, name, nl) == 0)
				return load + sym[j].value;
		}
	}
	return 0;
}

/* ---- small file helpers ---- */

static long open_ro(const char *path)
{
	return sys_call4(SYS_openat, S_AT_FDCWD, (long)path, S_O_RDONLY | S_O_CLOEXEC, 0);
}

/* Read a whole small file into buf (NUL-terminated); returns bytes or -errno. */
static long read_small(const char *path, char *buf, size_t cap)
{
	long fd = open_ro(path);
	if (sys_failed(fd))
		return fd;
	size_t n = 0;
	while (n + 1 < cap) {
		long r = sys_call3(SYS_read, fd, (long)(buf + n), (long)(cap - 1 - n));
		if (r <= 0)
			break;
		n += (size_t)r;
	}
	buf[n] = 0;
	sys_call1(SYS_close, fd);
	return (long)n;
}

static uint64_t auxv_find(const uint64_t *auxv, uint64_t type)
{
	for (; auxv && auxv[0] != S_AT_NULL; auxv += 2)
		if (auxv[0] == type)
			return auxv[1];
	return 0;
}

static uint64_t proc_auxv(uint64_t type)
{
	uint64_t buf[128];
	long n = read_small("/proc/self/auxv", (char *)buf, sizeof buf);
	if (n <= 0)
		return 0;
	buf[(size_t)n / 8 < 127 ? (size_t)n / 8 : 126] = 0;
	buf[127] = 0;
	return auxv_find(buf, type);
}

static const char *env_get(char **envp, const char *name)
{
	size_t n = s_strlen(name);
	for (; envp && *envp; envp++)
		if (s_strncmp(*envp, name, n) == 0 && (*envp)[n] == '=')
			return *envp + n + 1;
	return 0;
}

/* Whether an environment value is exactly "0": how the STINT_SWITCH,
 * STINT_COLD, STINT_QUIET, STINT_RETS and STINT_SWITCH_SELF switches
 * turn a feature off (budget.c, budget_setup). */
static int env_is_zero(const char *v)
{
	return v && v[0] == '0' && !v[1];
}

static const char *base_name(const char *p)
{
	const char *b = p;
	for (; *p; p++)
		if (*p == '/')
			b = p + 1;
	return b;
}

/* ---- /proc/self/maps ---- */

struct maps_line {
	uint64_t lo, hi, off;
	const char *path; /* NUL-terminated, "" for anonymous */
};

static uint64_t parse_hex(const char **s)
{
	uint64_t v = 0;
	for (;; (*s)++) {
		char c = **s;
		if (c >= '0' && c <= '9')
			v = v * 16 + (uint64_t)(c - '0');
		else if (c >= 'a' && c <= 'f')
			v = v * 16 + (uint64_t)(c - 'a' + 10);
		else
			return v;
	}
}

/* Parses "lo-hi perms off dev inode   path" in place (line NUL-terminated). */
static int parse_maps_line(char *line, struct maps_line *m)
{
	const char *s = line;
	m->lo = parse_hex(&s);
	if (*s++ != '-')
		return 0;
	m->hi = parse_hex(&s);
	for (int field = 0; field < 1; field++) {
		while (*s == ' ')
			s++;
		while (*s && *s != ' ')
			s++;
	}
	while (*s == ' ')
		s++;
	m->off = parse_hex(&s);
	for (int field = 0; field < 2; field++) {
		while (*s == ' ')
			s++;
		while (*s && *s != ' ')
			s++;
	}
	while (*s == ' ')
		s++;
	m->path = s;
	return 1;
}

/*
 * Calls fn for every line of /proc/self/maps until it returns nonzero.
 * Uses the shared scratch buffer: the caller holds scratch_lock.
 */
typedef int (*maps_fn)(struct maps_line *m, void *arg);

static int maps_scan_buf(char *buf, size_t cap, maps_fn fn, void *arg);

static int maps_scan(maps_fn fn, void *arg) { return maps_scan_buf(G()->scratch, SCRATCH_SIZE, fn, arg); }

/* maps_scan through buf (cap bytes), for callers without the global state. */
static int maps_scan_buf(char *buf, size_t cap, maps_fn fn, void *arg)
{
	long fd = open_ro("/proc/self/maps");
	if (sys_failed(fd))
		return 0;
	size_t have = 0;
	int done = 0;
	while (!done) {
		long r = sys_call3(SYS_read, fd, (long)(buf + have), (long)(cap - 1 - have));
		if (r <= 0)
			break;
		have += (size_t)r;
		size_t start = 0;
		for (size_t i = 0; i < have; i++) {
			if (buf[i] != '\n')
				continue;
			buf[i] = 0;
			struct maps_line m;
			if (parse_maps_line(buf + start, &m) && fn(&m, arg)) {
				done = 1;
				break;
			}
			start = i + 1;
		}
		if (done)
			break;
		if (start == 0 && have == cap - 1)
			have = 0; /* an absurdly long line: skip it */
		else {
			s_memcpy(buf, buf + start, have - start);
			have -= start;
		}
	}
	sys_call1(SYS_close, fd);
	return done;
}

static int try_lock(uint32_t *l)
{
	uint32_t z = 0;
	return __atomic_compare_exchange_n(l, &z, 1, 0, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED);
}

static void unlock(uint32_t *l) { __atomic_store_n(l, 0, __ATOMIC_RELEASE); }

/*
 * Wait, boundedly, for a lock another thread holds briefly. If a signal
 * handler interrupted the holder on this very thread, the wait runs out
 * and the caller does without.
 */
static int lock_bounded(uint32_t *l)
{
	for (uint32_t spin = 0; spin < SPIN_LIMIT; spin++) {
		if (!__atomic_load_n(l, __ATOMIC_RELAXED) && try_lock(l))
			return 1;
		relax(spin);
	}
	return 0;
}

/* ---- trace file ---- */

static inline uint64_t pad8(uint64_t v) { return (v + 7) & ~(uint64_t)7; }

static void put64(uint8_t *p, uint64_t v) { s_memcpy(p, &v, 8); }

/*
 * The program may close our descriptor and reuse the number for a file of
 * its own (daemons close every fd): never ftruncate or close an fd that no
 * longer refers to the trace file.
 */
static int fd_is_ours(struct stint_global *g)
{
	struct s_stat st;
	if (g->fd < 0 || sys_failed(sys_call2(SYS_fstat, g->fd, (long)&st)))
		return 0;
	return st.dev == g->fd_dev && st.ino == g->fd_ino;
}

static void set_untraced_once(struct stint_global *g, const char *what, const char *arg, long err)
{
	if (g && __atomic_exchange_n(&g->warned, 1, __ATOMIC_ACQ_REL))
		return;
	say_untraced(what, arg, err);
}

/* Extends the file to cover [0, end); returns 0 or -errno. */
static long ensure_len(struct stint_global *g, uint64_t end)
{
	if (end <= g->file_len)
		return 0;
	if (end > FILE_RESERVE)
		return -27; /* EFBIG */
	uint64_t want = end + 4 * g->slot_size;
	if (want > FILE_RESERVE)
		want = FILE_RESERVE;
	if (!fd_is_ours(g))
		return -9; /* EBADF */
	long r = sys_call2(SYS_ftruncate, g->fd, (long)want);
	if (sys_failed(r))
		return r;
	g->file_len = want;
	return 0;
}

static const char *tool_name(uint32_t t)
{
	/* a switch, not a table: a table of pointers would need relocations */
	switch (t) {
	case STINT_TOOL_BRANCH: return "branch";
	case STINT_TOOL_CALL: return "call";
	case STINT_TOOL_SYSCALL: return "syscall";
	case STINT_TOOL_BLOCK: return "block";
	default: return "";
	}
}

/* Fill the stint.run metadata value in place. */
static void write_run(struct stint_global *g)
{
	if (!g->map)
		return;
	/* Written straight into the file (no 4 KiB buffer on a signal stack). */
	char *v = (char *)g->map + STINT_ARROW_META_RUN_OFF;
	struct sbuf b = {v, 0, STINT_ARROW_META_RUN_CAP};
	sb_puts(&b, "{\"binary\":");
	sb_putjs(&b, g->exe_path);
	sb_puts(&b, ",\"build_id\":\"");
	sb_puthex(&b, g->exe_build_id, g->exe_build_id_len);
	sb_puts(&b, "\",\"tool\":");
	sb_putjs(&b, tool_name(g->tool));
	sb_puts(&b, ",\"options\":");
	sb_putjs(&b, g->options);
	sb_puts(&b, ",\"pid\":");
	sb_putu(&b, (uint64_t)g->pid);
	sb_puts(&b, ",\"ppid\":");
	sb_putu(&b, (uint64_t)sys_call0(SYS_getppid));
	sb_puts(&b, ",\"start_ns\":");
	sb_putu(&b, g->start_ns);
	sb_puts(&b, ",\"mono_start_ns\":");
	sb_putu(&b, g->mono_start_ns);
	if (g->budget_on) {
		sb_puts(&b, ",\"budget_ns\":");
		sb_putu(&b, g->budget_ns);
		sb_puts(&b, ",\"period_ns\":");
		sb_putu(&b, g->period_ns);
	}
	if (g->qos_on) {
		sb_puts(&b, ",\"qos\":");
		sb_putjs(&b, g->qos_path);
	}
	if (g->log_on) {
		sb_puts(&b, ",\"log\":");
		sb_putjs(&b, g->log_path);
		sb_puts(&b, ",\"log_policy\":");
		sb_putjs(&b, log_policy_name(g->log_policy));
	}
	sb_putc(&b, '}');
	if (b.len > b.cap)
		b.len = 0; /* does not fit: leave it blank rather than cut the JSON */
	s_memset(v + b.len, ' ', STINT_ARROW_META_RUN_CAP - b.len);
}

/* Append module i to stint.modules as one JSON line. */
static void write_module(struct stint_global *g, uint32_t i)
{
	if (!g->map)
		return;
	struct gmodule *m = &g->modules[i];
	char tmp[1024];
	struct sbuf b = {tmp, 0, sizeof tmp};
	sb_puts(&b, "{\"id\":");
	sb_putu(&b, i);
	sb_puts(&b, ",\"path\":");
	sb_putjs(&b, m->path);
	sb_puts(&b, ",\"build_id\":\"");
	sb_puthex(&b, m->build_id, m->build_id_len);
	sb_puts(&b, "\",\"base\":");
	sb_putu(&b, m->base);
	sb_puts(&b, ",\"size\":");
	sb_putu(&b, m->size);
	sb_puts(&b, ",\"rewritten\":");
	sb_puts(&b, m->rewritten ? "true" : "false");
	sb_puts(&b, "}\n");
	if (b.len > b.cap)
		return;
	uint64_t at = __atomic_fetch_add(&g->modules_used, b.len, __ATOMIC_RELAXED);
	if (at + b.len > STINT_ARROW_META_MODULES_CAP)
		return;
	s_memcpy((char *)g->map + STINT_ARROW_META_MODULES_OFF + at, tmp, b.len);
}

/*
 * Create and map a new trace file and write the schema. Called with
 * init_lock held, by the first module to initialise and by a forked
 * child. Returns 0 or -errno with *what set.
 */
static long trace_open(struct stint_global *g, const char **what)
{
	/* mkdir -p out_dir */
	char dir[512];
	size_t dl = s_strlen(g->out_dir);
	s_memcpy(dir, g->out_dir, dl + 1);
	for (size_t i = 1; i <= dl; i++) {
		if (dir[i] != '/' && dir[i] != 0)
			continue;
		char c = dir[i];
		dir[i] = 0;
		long r = sys_call2(SYS_mkdir, (long)dir, 0755);
		dir[i] = c;
		if (sys_failed(r) && r != -S_EEXIST && c == 0) {
			*what = "create trace directory";
			return r;
		}
	}
	g->start_ns = now_ns(S_CLOCK_REALTIME);
	g->mono_start_ns = now_ns(S_CLOCK_MONOTONIC);
	long fd = -1;
	for (uint32_t attempt = 0; attempt < 1000; attempt++) {
		struct sbuf b = {g->trace_path, 0, sizeof g->trace_path - 1};
		sb_puts(&b, g->out_dir);
		sb_putc(&b, '/');
		sb_puts(&b, base_name(g->exe_path[0] ? g->exe_path : "stint"));
		sb_putc(&b, '.');
		sb_putu(&b, (uint64_t)g->pid);
		sb_putc(&b, '.');
		sb_putu(&b, g->mono_start_ns);
		if (attempt) {
			sb_putc(&b, '.');
			sb_putu(&b, attempt);
		}
		sb_puts(&b, ".arrow");
		if (b.len > b.cap) {
			*what = "trace file name";
			return -36;
		}
		g->trace_path[b.len] = 0;
		fd = sys_call4(SYS_openat, S_AT_FDCWD, (long)g->trace_path,
			       S_O_RDWR | S_O_CREAT | S_O_EXCL | S_O_CLOEXEC, 0644);
		if (fd != -S_EEXIST)
			break;
	}
	if (sys_failed(fd)) {
		*what = "open trace file";
		return fd;
	}
	g->fd = (int32_t)fd;
	struct s_stat st;
	long sr = sys_call2(SYS_fstat, fd, (long)&st);
	if (sys_failed(sr)) {
		sys_call1(SYS_close, fd);
		g->fd = -1;
		*what = "stat trace file";
		return sr;
	}
	g->fd_dev = st.dev;
	g->fd_ino = st.ino;
	/* A hint far from where the loader puts modules: placed top-down,
	 * the 64 GiB reservation lands right below the libraries, where a
	 * rewritten library loaded later (or initialised after the
	 * executable's DT_PREINIT_ARRAY hook) must map its stub chunks. The
	 * kernel takes the hint when it is free and searches as usual when
	 * not. */
	long m = sys_mmap(STINT_TRACE_HINT, FILE_RESERVE, S_PROT_READ | S_PROT_WRITE, S_MAP_SHARED | S_MAP_NORESERVE, (int)fd, 0);
	if (sys_failed(m)) {
		sys_call1(SYS_close, fd);
		*what = "map trace file";
		return m;
	}
	g->map = (uint64_t)m;
	g->file_len = 0;
	uint64_t schema_end = pad8(STINT_ARROW_SCHEMA_LEN);
	long r = ensure_len(g, schema_end + g->slot_size);
	if (r) {
		sys_call2(SYS_munmap, m, (long)FILE_RESERVE);
		sys_call1(SYS_close, fd);
		g->map = 0;
		*what = "extend trace file";
		return r;
	}
	s_memcpy((void *)m, stint_arrow_schema, STINT_ARROW_SCHEMA_LEN);
	write_run(g);
	g->modules_used = 0;
	for (uint32_t i = 0; i < g->nmodules && i < MAX_MODULES; i++)
		if (__atomic_load_n(&g->modules[i].ready, __ATOMIC_ACQUIRE))
			write_module(g, i);
	for (int i = 0; i < RING; i++) {
		g->ring[i].tagcount = 0;
		g->ring[i].pos = 0;
	}
	g->next_pos = schema_end;
	/* Slot 0 is never used: the first writer sees a full slot and opens slot 1. */
	__atomic_store_n(&g->cur, (uint64_t)ROWS_PER_BATCH, __ATOMIC_RELEASE);
	return 0;
}

/*
 * Publish slot s at file offset pos: make the batch in the file describe
 * every row of the longest run of complete rows from row 0 (a row is
 * complete once its kind, written last, is nonzero). The first publish
 * writes the metadata and then the continuation marker; later ones grow
 * the lengths in place (buffer lengths, then node lengths, then the row
 * count), so a process that dies, _exits or execs leaves every committed
 * row readable, not just the full batches. One publisher at a time per
 * slot (a try-lock); a row committed while the lock is held is picked up
 * by the holder's re-check, so nobody waits. The holder loops for as long
 * as its re-check finds a new complete row: every round publishes at
 * least one more, so a slot takes at most ROWS_PER_BATCH rounds. (It
 * gave up after 64 rounds until session 20: with eight threads and a
 * signal storm committing into one slot, rows committed in its last
 * round stayed unpublished when they were the slot's last, since nobody
 * writes to a full slot again and flush() publishes only the current
 * one; the runtime test's driver lost two counted events in a CI run.)
 */
static void publish(struct stint_global *g, struct slot_ring *ring, uint32_t s, uint64_t pos)
{
	uint8_t *slot = (uint8_t *)g->map + pos;
	const uint8_t *kinds = slot + STINT_ARROW_BATCH_LEN + g->col_off[STINT_COL_KIND];
	const uint64_t tag = (uint64_t)s << 32;
	for (uint32_t round = 0; round <= ROWS_PER_BATCH; round++) {
		uint64_t lk = tag;
		if (!__atomic_compare_exchange_n(&ring->pub_lock, &lk, tag | 1, 0, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED))
			return; /* someone else is publishing (or the slot moved on) */
		uint64_t pv = __atomic_load_n(&ring->pub, __ATOMIC_ACQUIRE);
		uint32_t n = (uint32_t)pv, m = n;
		if ((pv >> 32) == s) {
			while (m < ROWS_PER_BATCH && __atomic_load_n(&kinds[m], __ATOMIC_ACQUIRE))
				m++;
		}
		if (m > n) {
			if (n == 0) {
				s_memcpy(slot + 4, stint_arrow_batch + 4, STINT_ARROW_BATCH_LEN - 4);
				put64(slot + STINT_ARROW_BATCH_OFF_BODYLEN, g->slot_size - STINT_ARROW_BATCH_LEN);
				for (int c = 0; c < STINT_ARROW_NCOLS; c++) {
					/* no validity buffers: offset 0, length 0 (as in the template) */
					put64(slot + stint_arrow_batch_off_buf_off[2 * c], 0);
					put64(slot + stint_arrow_batch_off_buf_len[2 * c], 0);
					put64(slot + stint_arrow_batch_off_buf_off[2 * c + 1], g->col_off[c]);
				}
			}
			for (int c = 0; c < STINT_ARROW_NCOLS; c++)
				put64(slot + stint_arrow_batch_off_buf_len[2 * c + 1], (uint64_t)m * stint_arrow_col_width[c]);
			for (int c = 0; c < STINT_ARROW_NCOLS; c++)
				put64(slot + stint_arrow_batch_off_node_len[c], m);
			put64(slot + STINT_ARROW_BATCH_OFF_ROWS, m);
			if (n == 0)
				__atomic_store_n((uint32_t *)slot, 0xffffffffu, __ATOMIC_RELEASE);
			uint64_t want = pv;
			__atomic_compare_exchange_n(&ring->pub, &want, tag | m, 0, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED);
		}
		lk = tag | 1;
		__atomic_compare_exchange_n(&ring->pub_lock, &lk, tag, 0, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED);
		if ((pv >> 32) != s || m >= ROWS_PER_BATCH || !__atomic_load_n(&kinds[m], __ATOMIC_ACQUIRE))
			return;
	}
}

/*
 * Open the slot after s. Only the writer whose reservation returned
 * exactly the capacity gets here for a given s. Returns 0 on success, 1
 * if the slot's ring entry still belongs to an unsealed slot (a writer
 * stalled for RING batches: the caller hands the opening back and drops
 * its event), -1 if the file cannot grow (recording stops).
 */
static int open_next(struct stint_global *g, uint32_t s, int take_row)
{
	uint32_t n = s + 1;
	struct slot_ring *ring = &g->ring[n % RING];
	uint64_t old = __atomic_load_n(&ring->tagcount, __ATOMIC_ACQUIRE);
	if ((old >> 32) != 0 && (uint32_t)old < ROWS_PER_BATCH) {
		__atomic_store_n(&g->cur, ((uint64_t)s << 32) | ROWS_PER_BATCH, __ATOMIC_RELEASE);
		return 1;
	}
	uint64_t pos = g->next_pos;
	long r = ensure_len(g, pos + g->slot_size);
	if (r) {
		__atomic_store_n(&g->recording, 0, __ATOMIC_RELEASE);
		set_untraced_once(g, "extend trace file", g->trace_path, -r);
		return -1;
	}
	put64((uint8_t *)g->map + pos, 0);
	ring->pos = pos;
	__atomic_store_n(&ring->pub, (uint64_t)n << 32, __ATOMIC_RELEASE);
	__atomic_store_n(&ring->pub_lock, (uint64_t)n << 32, __ATOMIC_RELEASE);
	__atomic_store_n(&ring->tagcount, (uint64_t)n << 32, __ATOMIC_RELEASE);
	g->next_pos = pos + g->slot_size;
	__atomic_store_n(&g->cur, ((uint64_t)n << 32) | (take_row ? 1u : 0u), __ATOMIC_RELEASE);
	return 0;
}

struct row {
	uint8_t kind;
	uint16_t src_module, dst_module;
	uint64_t src, dst, value;
	uint64_t time;  /* record kinds only (>= STINT_K_PERIOD): events get the current time */
};

static void col_put(struct stint_global *g, uint8_t *body, int c, uint32_t i, uint64_t v)
{
	uint8_t *p = body + g->col_off[c] + (uint64_t)i * stint_arrow_col_width[c];
	switch (stint_arrow_col_width[c]) {
	case 1: *p = (uint8_t)v; break;
	case 2: *(uint16_t *)p = (uint16_t)v; break;
	case 4: *(uint32_t *)p = (uint32_t)v; break;
	default: *(uint64_t *)p = v; break;
	}
}

static void fork_child_reopen(struct stint_global *g);

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

static uint64_t fs_base(void)
{
	uint64_t fs;
	__asm__ volatile("rdfsbase %0" : "=r"(fs));
	return fs;
}

/* The first use of a thread-pointer mode: whether glibc's tid field at
 * thread pointer fs is this thread's id, read with process_vm_readv,
 * which fails instead of faulting. Decides the mode (ok, else
 * TID_SYSCALL) and returns the id. */
static uint32_t tid_check(struct stint_global *g, uint64_t fs, uint32_t ok)
{
	int32_t t = 0, real = (int32_t)sys_call0(SYS_gettid);
	struct { uint64_t base, len; } local = {(uint64_t)&t, sizeof t}, remote = {fs + GLIBC_TID_OFF, sizeof t};
	long n = sys_call6(SYS_process_vm_readv, sys_call0(SYS_getpid), (long)&local, 1, (long)&remote, 1, 0);
	__atomic_store_n(&g->tid_mode, n == (long)sizeof t && t == real ? ok : TID_SYSCALL, __ATOMIC_RELAXED);
	return (uint32_t)real;
}

static uint32_t current_tid(struct stint_global *g)
{
	uint32_t mode = __atomic_load_n(&g->tid_mode, __ATOMIC_RELAXED);
	if (mode == TID_GLIBC) {
		uint64_t fs = fs_base();
		if (fs) {
			int32_t t = *(volatile int32_t *)(fs + GLIBC_TID_OFF);
			if (t > 0)
				return (uint32_t)t;
		}
	} else if (mode == TID_PROBE) {
		uint64_t fs = fs_base();
		if (fs)
			return tid_check(g, fs, TID_GLIBC);
	} else if (mode == TID_SEG) {
		int32_t t;
		__asm__ volatile("movl %%fs:%c1, %0" : "=r"(t) : "i"(GLIBC_TID_OFF));
		if (t > 0)
			return (uint32_t)t;
	} else if (mode == TID_SEG_PROBE) {
		/*
		 * Without FSGSBASE (a VM whose kernel does not offer it) the
		 * thread pointer cannot be read cheaply, but a load relative
		 * to %fs reads the same word; a system call costs about 1 us
		 * here, and emit asks for the thread id at every event. The
		 * load faults where %fs is 0, which in a dynamically linked
		 * process only a thread made by a raw clone with a zero TLS
		 * pointer has (and that thread cannot use libc either): so
		 * this mode is only for dynamically linked programs (static
		 * ones run our probes before their TLS exists), and is taken
		 * once the word proved to be the thread id here.
		 */
		uint64_t fs = 0;
		if (!sys_failed(sys_call2(SYS_arch_prctl, S_ARCH_GET_FS, (long)&fs)) && fs)
			return tid_check(g, fs, TID_SEG);
	}
	return (uint32_t)sys_call0(SYS_gettid);
}

static void emit(const struct row *rw)
{
	struct stint_global *g = G();
	if (UNLIKELY(__atomic_load_n(&W()->alive, __ATOMIC_ACQUIRE) != 1)) {
		fork_child_reopen(g);
		if (__atomic_load_n(&W()->alive, __ATOMIC_ACQUIRE) != 1)
			return; /* being reopened by the code this handler interrupted */
	}
	if (UNLIKELY(!__atomic_load_n(&g->recording, __ATOMIC_ACQUIRE)))
		return;
	int record = rw->kind >= STINT_K_PERIOD && rw->kind < STINT_REFUSED_BASE; /* the runtime's own rows */
	uint32_t tid = record ? 0 : current_tid(g);
	uint64_t t = record ? rw->time : now_ns(S_CLOCK_MONOTONIC);
	for (uint32_t spin = 0;; spin++) {
		if (spin >= SPIN_LIMIT || !__atomic_load_n(&g->recording, __ATOMIC_ACQUIRE)) {
			__atomic_fetch_add(&g->dropped, 1, __ATOMIC_RELAXED);
			return;
		}
		uint64_t c = __atomic_fetch_add(&g->cur, 1, __ATOMIC_ACQ_REL);
		uint32_t s = (uint32_t)(c >> 32), i = (uint32_t)c;
		if (i == ROWS_PER_BATCH) {
			/* No signal handler may run on this thread while it opens the
			 * slot: it would wait for us, and every other thread with it. */
			uint64_t all = ~0ULL, old_mask = 0;
			long masked = sys_call4(SYS_rt_sigprocmask, S_SIG_SETMASK, (long)&all, (long)&old_mask, 8);
			int o = open_next(g, s, 1);
			if (!sys_failed(masked))
				sys_call4(SYS_rt_sigprocmask, S_SIG_SETMASK, (long)&old_mask, 0, 8);
			if (o > 0) {
				relax(spin);
				continue;
			}
			if (o < 0) {
				__atomic_fetch_add(&g->dropped, 1, __ATOMIC_RELAXED);
				return;
			}
			s++;
			i = 0;
		} else if (i > ROWS_PER_BATCH) {
			/* someone is opening the next slot: wait with plain loads */
			for (; spin < SPIN_LIMIT; spin++) {
				uint64_t c2 = __atomic_load_n(&g->cur, __ATOMIC_ACQUIRE);
				if ((uint32_t)(c2 >> 32) != s || (uint32_t)c2 <= ROWS_PER_BATCH)
					break;
				relax(spin);
			}
			continue;
		}
		struct slot_ring *ring = &g->ring[s % RING];
		uint64_t tc = __atomic_load_n(&ring->tagcount, __ATOMIC_ACQUIRE);
		if ((uint32_t)(tc >> 32) != s) {
			/* the slot was closed by a flush that gave up waiting for us */
			__atomic_fetch_add(&g->dropped, 1, __ATOMIC_RELAXED);
			return;
		}
		uint64_t pos = ring->pos;
		uint8_t *body = (uint8_t *)g->map + pos + STINT_ARROW_BATCH_LEN;
		col_put(g, body, STINT_COL_TID, i, tid);
		col_put(g, body, STINT_COL_TIME, i, t);
		col_put(g, body, STINT_COL_SRC_MODULE, i, rw->src_module);
		col_put(g, body, STINT_COL_SRC, i, rw->src);
		col_put(g, body, STINT_COL_DST_MODULE, i, rw->dst_module);
		col_put(g, body, STINT_COL_DST, i, rw->dst);
		col_put(g, body, STINT_COL_VALUE, i, rw->value);
		/* the kind last: a nonzero kind marks the row complete */
		__atomic_store_n(body + g->col_off[STINT_COL_KIND] + i, rw->kind ? rw->kind : 0xff, __ATOMIC_RELEASE);
		/* commit: count the row, unless the ring entry moved on meanwhile */
		while (!__atomic_compare_exchange_n(&ring->tagcount, &tc, tc + 1, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
			if ((uint32_t)(tc >> 32) != s) {
				__atomic_fetch_add(&g->dropped, 1, __ATOMIC_RELAXED);
				return;
			}
		}
		__atomic_fetch_add(&g->events, 1, __ATOMIC_RELAXED);
		publish(g, ring, s, pos);
		return;
	}
}

/*
 * Seal the partial batch and cut the file to its used length, leaving the
 * stream open for events that come later (other modules' finalisers):
 * the next writer opens a new slot where the file now ends.
 */
static void flush(struct stint_global *g)
{
	if (__atomic_load_n(&W()->alive, __ATOMIC_ACQUIRE) != 1 || !g->map)
		return;
	if (!lock_bounded(&g->init_lock))
		return;
	for (uint32_t spin = 0; spin < SPIN_LIMIT; spin++) {
		uint64_t c = __atomic_load_n(&g->cur, __ATOMIC_ACQUIRE);
		uint32_t s = (uint32_t)(c >> 32), k = (uint32_t)c;
		if (k >= ROWS_PER_BATCH) {
			if (k == ROWS_PER_BATCH || k >= RES_CLOSED) {
				/* full (or closed) and nobody opening: close it for good */
				uint64_t closed = ((uint64_t)s << 32) | RES_CLOSED;
				if (!__atomic_compare_exchange_n(&g->cur, &c, closed, 0, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED))
					continue;
				/* wait for the full slot's last commits */
				struct slot_ring *ring = &g->ring[s % RING];
				for (uint32_t w = 0; s && w < SPIN_LIMIT; w++) {
					uint64_t tc = __atomic_load_n(&ring->tagcount, __ATOMIC_ACQUIRE);
					if ((uint32_t)(tc >> 32) != s || (uint32_t)tc >= ROWS_PER_BATCH)
						break;
					relax(w);
				}
				if (s)
					publish(g, ring, s, ring->pos);
				break;
			}
			relax(spin); /* someone is opening the next slot */
			continue;
		}
		uint64_t closed = ((uint64_t)s << 32) | RES_CLOSED;
		if (!__atomic_compare_exchange_n(&g->cur, &c, closed, 0, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED))
			continue;
		struct slot_ring *ring = &g->ring[s % RING];
		if (k == 0) {
			if (s)
				g->next_pos = ring->pos; /* reuse the empty slot */
		} else {
			for (uint32_t w = 0; w < SPIN_LIMIT; w++) {
				uint64_t tc = __atomic_load_n(&ring->tagcount, __ATOMIC_ACQUIRE);
				if ((uint32_t)tc >= k)
					break;
				relax(w);
			}
			publish(g, ring, s, ring->pos);
		}
		/* Done with this slot: a late writer's commit fails, and the ring
		 * entry may be reused. (Tag s+RING never equals s.) */
		if (s)
			__atomic_store_n(&ring->tagcount, ((uint64_t)(s + RING) << 32) | ROWS_PER_BATCH, __ATOMIC_RELEASE);
		break;
	}
	/* End-of-stream marker, then cut the file after it. */
	uint64_t end = g->next_pos;
	uint8_t *e = (uint8_t *)g->map + end;
	if (end + 8 <= g->file_len) {
		put64(e, 0xffffffffULL);
		if (fd_is_ours(g))
			sys_call2(SYS_ftruncate, g->fd, (long)(end + 8));
		g->file_len = end + 8;
	}
	/* Let later events reopen: the next reservation is the capacity. */
	uint64_t c = __atomic_load_n(&g->cur, __ATOMIC_ACQUIRE);
	__atomic_store_n(&g->cur, (c & 0xffffffff00000000ULL) | ROWS_PER_BATCH, __ATOMIC_RELEASE);
	unlock(&g->init_lock);
}

/*
 * A forked child: drop the parent's file mapping and start its own file.
 * The wipe-on-fork page reads 0 in a new child; claiming it (0 -> 2) makes
 * this thread the only one to reopen (a signal handler that interrupts
 * the reopen sees 2 and drops its event), 1 means done.
 */
static int task_fd_ours(const struct stint_global *g, int32_t fd1, struct s_stat *st); /* switch.c */

static void fork_child_reopen(struct stint_global *g)
{
	uint32_t z = 0;
	if (!__atomic_compare_exchange_n(&W()->alive, &z, 2, 0, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED))
		return;
	/* Only the forking thread exists here, and it was not inside the
	 * runtime when it forked: locks held then belong to threads that are
	 * gone. */
	__atomic_store_n(&g->init_lock, 0, __ATOMIC_RELEASE);
	__atomic_store_n(&g->scratch_lock, 0, __ATOMIC_RELEASE);
	__atomic_store_n(&g->period_lock, 0, __ATOMIC_RELEASE);
	/* the parent's period thread may have been saving the log (the
	 * child's exit would wait for that save, which never ends), writing
	 * its region log or its sync sites */
	__atomic_store_n(&g->log_lock, 0, __ATOMIC_RELEASE);
	__atomic_store_n(&g->regions_lock, 0, __ATOMIC_RELEASE);
	__atomic_store_n(&g->sw_self_lock, 0, __ATOMIC_RELEASE);
	__atomic_store_n(&g->run_ended, 0, __ATOMIC_RELEASE);
	ctx_reset(g);
	g->period_thread = 0;
	/* the parent's /proc/<pid>/task (switch.c, task_stat): this child's
	 * thread count is not there */
	int32_t t1 = g->task_fd1;
	if (t1 > 0) {
		struct s_stat st;
		if (task_fd_ours(g, t1, &st))
			sys_call1(SYS_close, t1 - 1);
		__atomic_store_n(&g->task_fd1, 0, __ATOMIC_RELEASE);
	}
	int was = (int)__atomic_load_n(&g->recording, __ATOMIC_ACQUIRE);
	__atomic_store_n(&g->recording, 0, __ATOMIC_RELEASE);
	if (g->map)
		sys_call2(SYS_munmap, (long)g->map, (long)FILE_RESERVE);
	if (g->fd >= 0 && fd_is_ours(g))
		sys_call1(SYS_close, g->fd);
	g->map = 0;
	g->fd = -1;
	g->pid = (int32_t)sys_call0(SYS_getpid);
	/* the child's own registration for membarrier(SYNC_CORE), which the
	 * off-switch's readees and sync sites rely on (switch.c) */
	if (g->sync_core)
		g->sync_core = !sys_failed(sys_call3(SYS_membarrier, MEMBARRIER_REGISTER_SYNC_CORE, 0, 0));
	if (was) {
		const char *what = "";
		long r = trace_open(g, &what);
		if (r)
			say_untraced(what, g->trace_path[0] ? g->trace_path : g->out_dir, -r);
		else
			__atomic_store_n(&g->recording, 1, __ATOMIC_RELEASE);
	}
	__atomic_store_n(&W()->alive, 1, __ATOMIC_RELEASE);
	if (was) {
		periods_start(g, 1); /* the parent's period thread did not come along */
		gates_set(g, STINT_GATE_OPEN);
	}
}

/* ---- module table ---- */

struct find_path_arg {
	uint64_t base;
	char *out;
	size_t cap;
};

static int find_path_cb(struct maps_line *m, void *arg)
{
	struct find_path_arg *a = arg;
	if (m->path[0] != '/' || m->lo - m->off != a->base)
		return 0;
	size_t n = s_strlen(m->path);
	if (n >= a->cap)
		n = a->cap - 1;
	s_memcpy(a->out, m->path, n);
	a->out[n] = 0;
	return 1;
}

static uint32_t add_module(struct stint_global *g, uint64_t base, uint64_t size, const char *path,
			   const uint8_t *bid, uint32_t bid_len, int rewritten)
{
	uint32_t i = __atomic_fetch_add(&g->nmodules, 1, __ATOMIC_ACQ_REL);
	if (i >= MAX_MODULES || i >= DST_MODULE_NONE)
		return DST_MODULE_NONE;
	struct gmodule *m = &g->modules[i];
	m->base = base;
	m->size = size;
	m->rewritten = (uint32_t)rewritten;
	if (bid_len > 32)
		bid_len = 32;
	m->build_id_len = bid_len;
	s_memcpy(m->build_id, bid, bid_len);
	size_t n = path ? s_strlen(path) : 0;
	if (n >= sizeof m->path)
		n = sizeof m->path - 1;
	s_memcpy(m->path, path, n);
	m->path[n] = 0;
	__atomic_store_n(&m->ready, 1, __ATOMIC_RELEASE);
	write_module(g, i);
	return i;
}

/* Entries of the module table in use now. */
static uint32_t modules_n(struct stint_global *g)
{
	uint32_t n = __atomic_load_n(&g->nmodules, __ATOMIC_ACQUIRE);
	return n > MAX_MODULES ? MAX_MODULES : n;
}

static uint32_t module_of(struct stint_global *g, uint64_t a)
{
	uint32_t n = modules_n(g);
	for (uint32_t i = 0; i < n; i++) {
		struct gmodule *m = &g->modules[i];
		if (__atomic_load_n(&m->ready, __ATOMIC_ACQUIRE) && a - m->base < m->size)
			return i;
	}
	return DST_MODULE_NONE;
}

struct lookup_arg {
	uint64_t a;
	int found;          /* 1: file-backed, 2: anonymous */
	uint64_t base, hi, lo;
	char cur_path[512];
	uint64_t cur_base;
	char path[512];
};

static int lookup_cb(struct maps_line *m, void *arg)
{
	struct lookup_arg *l = arg;
	if (l->found == 1) {
		/* extend over the file's further mappings */
		if (s_strncmp(m->path, l->path, sizeof l->path) == 0) {
			l->hi = m->hi;
			return 0;
		}
		return 1;
	}
	if (m->path[0] == '/' && m->off == 0) {
		size_t n = s_strlen(m->path);
		if (n < sizeof l->cur_path) {
			s_memcpy(l->cur_path, m->path, n + 1);
			l->cur_base = m->lo;
		}
	}
	if (l->a < m->lo || l->a >= m->hi)
		return 0;
	if (m->path[0] == '/' && s_strncmp(m->path, l->cur_path, sizeof l->cur_path) == 0) {
		l->found = 1;
		s_memcpy(l->path, l->cur_path, sizeof l->path);
		l->base = l->cur_base;
		l->hi = m->hi;
		return 0;
	}
	l->found = 2;
	l->lo = m->lo;
	l->hi = m->hi;
	return 1;
}

/* Map a destination outside every known module to a module id (or NONE). */
static uint32_t module_of_unknown(struct stint_global *g, uint64_t a)
{
	uint32_t na = __atomic_load_n(&g->nanon, __ATOMIC_ACQUIRE);
	if (na > MAX_ANON)
		na = MAX_ANON;
	for (uint32_t i = 0; i < na; i++)
		if (a >= g->anon[i].lo && a < g->anon[i].hi)
			return DST_MODULE_NONE;
	if (na >= MAX_ANON)
		return DST_MODULE_NONE; /* stop scanning: bounded work */
	if (!lock_bounded(&g->scratch_lock))
		return DST_MODULE_NONE;
	uint32_t id = module_of(g, a); /* someone may have added it meanwhile */
	int known_anon = 0;
	na = __atomic_load_n(&g->nanon, __ATOMIC_ACQUIRE);
	for (uint32_t i = 0; id == DST_MODULE_NONE && i < na && i < MAX_ANON; i++)
		if (a >= g->anon[i].lo && a < g->anon[i].hi)
			known_anon = 1;
	if (id == DST_MODULE_NONE && !known_anon) {
		static const struct lookup_arg zero;
		struct lookup_arg l = zero;
		l.a = a;
		maps_scan(lookup_cb, &l);
		if (l.found == 1) {
			id = add_module(g, l.base, l.hi - l.base, l.path, 0, 0, 0);
		} else {
			uint64_t lo = a & ~(uint64_t)4095, hi = lo + 4096;
			if (l.found == 2) {
				lo = l.lo;
				hi = l.hi;
			}
			uint32_t k = __atomic_load_n(&g->nanon, __ATOMIC_ACQUIRE);
			if (k < MAX_ANON) {
				g->anon[k].lo = lo;
				g->anon[k].hi = hi;
				__atomic_store_n(&g->nanon, k + 1, __ATOMIC_RELEASE);
			}
		}
	}
	unlock(&g->scratch_lock);
	return id;
}

/* ---- the (probe, destination) hash set ---- */

static inline int cas16(uint64_t *p, uint64_t o0, uint64_t o1, uint64_t n0, uint64_t n1)
{
	uint8_t ok;
	__asm__ volatile("lock cmpxchg16b %1\n\tsete %0"
			 : "=q"(ok), "+m"(*(volatile uint64_t(*)[2])p), "+a"(o0), "+d"(o1)
			 : "b"(n0), "c"(n1)
			 : "memory", "cc");
	return ok;
}

static inline uint64_t mix(uint64_t a, uint64_t b)
{
	uint64_t h = a * 0x9e3779b97f4a7c15ULL ^ (b + 0x632be59bd9b4e019ULL + (a << 6) + (a >> 2));
	h ^= h >> 31;
	h *= 0xbf58476d1ce4e5b9ULL;
	h ^= h >> 29;
	return h;
}

/*
 * Slot number i (0 <= i < HASH_SEQ) of the probe sequence of the key that
 * hashes to h. The sequence is fixed per key: HASH_L12_PROBES slots in
 * level 1 (the table's first HASH_L1_SLOTS), as many in level 2 (the
 * HASH_L2_SLOTS after it), then HASH_PROBES anywhere in the table. Slots
 * only ever go from empty to a key, so every thread that looks for a key
 * walks the same slots and finds it at the same place (or the same
 * empty slot to claim), as in a table of one level. What the levels buy
 * is locality: a 16 MiB table hashed uniformly put each of a run's first
 * few thousand pairs on a page of its own, a page fault each (sqlite3:
 * 2,800 of them, about 11 us each on this VM) and a cache and TLB miss
 * at every lookup after that.
 */
static inline uint64_t hash_slot(uint64_t h, uint32_t i)
{
	if (i < HASH_L12_PROBES)
		return (h + i) & (HASH_L1_SLOTS - 1);
	if (i < 2 * HASH_L12_PROBES)
		return HASH_L1_SLOTS + (((h >> 24) + i) & (HASH_L2_SLOTS - 1));
	return ((h >> 40) * 0x9e3779b97f4a7c15ULL + i) & (HASH_SLOTS - 1);
}

/* Returns 1 if (k0, k1) was added now, 0 if it was there; -1 if full.
 * The table is anonymous memory, so the first read of a page maps the
 * zero page and the first write then faults again to copy it: a slot on
 * a page nobody has written to (hash_pages) is tried with the
 * compare-and-swap at once, which costs one fault. A racing writer makes
 * that swap fail, and the slot is then read as usual. */
static int hash_add(struct stint_global *g, uint64_t k0, uint64_t k1)
{
	uint64_t h = mix(k0, k1);
	for (uint32_t i = 0; i < HASH_SEQ; i++) {
		uint64_t slot = hash_slot(h, i);
		uint64_t *e = &g->hash[2 * slot];
		uint64_t *pw = &g->hash_pages[slot / 256 / 64], bit = 1ULL << (slot / 256 % 64);
		if (!(__atomic_load_n(pw, __ATOMIC_RELAXED) & bit) && cas16(e, 0, 0, k0, k1)) {
			__atomic_fetch_or(pw, bit, __ATOMIC_RELAXED);
			return 1;
		}
		for (;;) {
			uint64_t e0 = __atomic_load_n(&e[0], __ATOMIC_ACQUIRE);
			if (e0 == 0) {
				if (cas16(e, 0, 0, k0, k1)) {
					__atomic_fetch_or(pw, bit, __ATOMIC_RELAXED);
					return 1;
				}
				continue; /* filled meanwhile: look again */
			}
			if (e0 == k0 && __atomic_load_n(&e[1], __ATOMIC_ACQUIRE) == k1)
				return 0;
			break;
		}
	}
	__atomic_fetch_add(&g->hash_full, 1, __ATOMIC_RELAXED);
	return -1;
}

/* ---- code patching ---- */

/* Retarget a trampoline arm: one 4-byte store that does not cross a line. */
static void retarget(uint64_t base, const struct stint_probe *p)
{
	if (!p->arm || !p->arm_to)
		return;
	uint64_t a = base + p->arm;
	if ((a & 63) > 60)
		return;
	int32_t rel = (int32_t)((base + p->arm_to) - (a + 4));
	__atomic_store_n((int32_t *)a, rel, __ATOMIC_RELEASE);
}

/*
 * Write a patch's original bytes back with one atomic store: only when
 * they lie in one aligned 8- or 16-byte word (so in one cache line); the
 * bytes around them in that word are kept as they are.
 */
STINT_API int stint_restore_atomic(uint64_t addr, const uint8_t *orig, uint32_t len)
{
	if (len == 0 || len > 16)
		return 0;
	uint64_t w8 = addr & ~(uint64_t)7;
	if (addr + len <= w8 + 8) {
		uint64_t *w = (uint64_t *)w8;
		uint64_t old = __atomic_load_n(w, __ATOMIC_ACQUIRE), nw;
		do {
			nw = old;
			s_memcpy((uint8_t *)&nw + (addr - w8), orig, len);
		} while (!__atomic_compare_exchange_n(w, &old, nw, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE));
		return 1;
	}
	uint64_t w16 = addr & ~(uint64_t)15;
	if (addr + len <= w16 + 16) {
		uint64_t *w = (uint64_t *)w16;
		for (;;) {
			uint64_t o[2] = {__atomic_load_n(&w[0], __ATOMIC_ACQUIRE), __atomic_load_n(&w[1], __ATOMIC_ACQUIRE)};
			uint64_t n[2] = {o[0], o[1]};
			s_memcpy((uint8_t *)n + (addr - w16), orig, len);
			if (cas16(w, o[0], o[1], n[0], n[1]))
				return 1;
		}
	}
	return 0;
}

static void restore_all(struct stint_module *m, uint64_t base)
{
	const struct stint_patch *pt = (const void *)(base + m->patches_vaddr);
	for (uint32_t i = 0; i < m->npatches; i++)
		if (pt[i].len <= 16)
			s_memcpy((void *)(base + pt[i].addr), pt[i].orig, pt[i].len);
}

/*
 * Restore a patch whose bytes straddle an aligned 16-byte word, so no
 * single store can write them (cross-modifying code, Intel SDM vol. 3
 * 8.1.3). First the patch's first two bytes become "jmp ." (one atomic
 * store): a thread that arrives waits there. membarrier(SYNC_CORE) makes
 * every thread of the process serialise, so none still runs the old
 * bytes; then the tail is written, the cores serialised again, and the
 * first two bytes written last, releasing the waiters. Signals are
 * blocked meanwhile, so a handler on this thread never waits for itself.
 * That needs the patch to start at its instruction (at_start: where a
 * thread can arrive), 3 bytes or more, the first two in one 8-byte word.
 * A program with one thread needs none of it (below), whatever the
 * patch's length or alignment. Returns 1 if restored.
 */
static int sw_alone(struct stint_global *g);
static void write_alone(uint64_t addr, const uint8_t *b, uint32_t len);

static int restore_sync(struct stint_global *g, uint64_t addr, const uint8_t *orig, uint32_t len, int at_start)
{
	if (len > 16)
		return 0;
	uint64_t all = ~0ULL, old = 0;
	long masked = sys_call4(SYS_rt_sigprocmask, S_SIG_SETMASK, (long)&all, (long)&old, 8);
	if (!sys_failed(masked) && sw_alone(g)) {
		/* The program has one thread, this one, and its signals are
		 * blocked: nothing can run these bytes while they are written,
		 * so no jmp-to-self and no membarrier (switch.c's self mode
		 * writes its sync sites so). A sqlite3 run restored 383 sites
		 * here, three membarriers each (an IPI and a wait, about 30 us
		 * each on this VM); sw_alone's fstat costs less. Until session
		 * 19 a patch at a word's last byte, or of 2 bytes, or not at
		 * its instruction's start, was left patched for good, its
		 * arms straight: a direct call among them was emulated (push,
		 * jmp) on every run, so every return above it mispredicted
		 * (sqlite3: one call at 0xa6a9f ran its trampoline 72,000
		 * times in a run). */
		write_alone(addr, orig, len);
		sys_call4(SYS_rt_sigprocmask, S_SIG_SETMASK, (long)&old, 0, 8);
		return 1;
	}
	if (!at_start || len < 3 || (addr & 7) == 7 || !g->sync_core) {
		if (!sys_failed(masked))
			sys_call4(SYS_rt_sigprocmask, S_SIG_SETMASK, (long)&old, 0, 8);
		return 0;
	}
	const uint8_t spin[2] = {0xeb, 0xfe};
	uint8_t cur[2] = {((const uint8_t *)addr)[0], ((const uint8_t *)addr)[1]};
	int ok = stint_restore_atomic(addr, spin, 2);
	if (ok && !sys_failed(sys_call3(SYS_membarrier, MEMBARRIER_SYNC_CORE, 0, 0))) {
		for (uint32_t i = 2; i < len; i++)
			__atomic_store_n((uint8_t *)addr + i, orig[i], __ATOMIC_RELEASE);
		sys_call3(SYS_membarrier, MEMBARRIER_SYNC_CORE, 0, 0);
		stint_restore_atomic(addr, orig, 2);
		sys_call3(SYS_membarrier, MEMBARRIER_SYNC_CORE, 0, 0);
	} else if (ok) {
		stint_restore_atomic(addr, cur, 2); /* cannot serialise: leave the patch as it was */
		ok = 0;
	}
	if (!sys_failed(masked))
		sys_call4(SYS_rt_sigprocmask, S_SIG_SETMASK, (long)&old, 0, 8);
	return ok;
}

static int sw_owns(struct stint_module *m, uint32_t idx);
static void sw_done_sync(struct stint_module *m, const struct stint_patch *pt, uint32_t idx);
static void sw_done_stamp(struct stint_module *m, uint32_t idx);

/*
 * Write len bytes of code at addr that no thread can be running: a
 * module's during its initialisation, before anything of it has run (a
 * library that dlopen has not returned yet is no different), or a sync
 * site while the program has one thread, written by that thread
 * (switch.c, self mode). No jmp-to-self and no membarrier, even for bytes
 * that straddle a word. Whole aligned 8-byte words, as few as the bytes
 * span (each store to code a core runs costs it a pipeline flush), by
 * compare-and-swap: the period thread may be writing a one-store
 * neighbour in the same word.
 */
static void write_alone(uint64_t addr, const uint8_t *b, uint32_t len)
{
	uint64_t w = addr & ~(uint64_t)7, end = addr + len;
	for (; w < end; w += 8) {
		uint64_t o = __atomic_load_n((uint64_t *)w, __ATOMIC_ACQUIRE), v;
		do {
			v = o;
			for (uint32_t j = 0; j < 8; j++)
				if (w + j >= addr && w + j < end)
					((uint8_t *)&v)[j] = b[w + j - addr];
		} while (v != o && !__atomic_compare_exchange_n((uint64_t *)w, &o, v, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE));
	}
}

/* Probe of patch idx recorded; restore the patch when it was the last.
 * alone: the module's initialisation (write_alone). */
static void patch_done(struct stint_module *m, uint64_t base, uint32_t idx, int alone)
{
	if (idx == STINT_NO_PATCH || idx >= m->npatches)
		return;
	struct stint_patch *pt = (struct stint_patch *)(base + m->patches_vaddr) + idx;
	if (__atomic_sub_fetch(&pt->remaining, 1, __ATOMIC_ACQ_REL) != 0)
		return;
	if (!alone && (pt->flags & STINT_PATCH_SYNC) && sw_owns(m, idx)) {
		sw_done_sync(m, pt, idx); /* the off-switch restores it (switch.c) */
		return;
	}
	if (pt->flags & STINT_PATCH_RESTORABLE) {
		if (alone)
			write_alone(base + pt->addr, pt->orig, pt->len);
		else if (!stint_restore_atomic(base + pt->addr, pt->orig, pt->len))
			restore_sync(G(), base + pt->addr, pt->orig, pt->len, (pt->flags & STINT_PATCH_AT_START) != 0);
		if (pt->flags & STINT_PATCH_READER)
			sw_done_stamp(m, idx);
	}
}

static int record_probe(struct stint_global *g, struct stint_module *m, struct stint_probe *p, uint64_t v, uint64_t rs);

/* Whether destination v is in indirect probe p's inline cache: cache,
 * cache2, and arm and arm_to, which a probe without a direct destination
 * does not use (record_probe fills them, most recent first, with
 * recorded destinations only). */
static int probe_cached(const struct stint_probe *p, uint64_t v)
{
	return __atomic_load_n(&p->cache, __ATOMIC_RELAXED) == v || __atomic_load_n(&p->cache2, __ATOMIC_RELAXED) == v ||
	       __atomic_load_n(&p->arm, __ATOMIC_RELAXED) == v || __atomic_load_n(&p->arm_to, __ATOMIC_RELAXED) == v;
}

/* rets.c: a call's return still to see, new code's way out.
 * g->rets_on (STINT_RETS): */
#define RETS_OFF   0 /* 0: neither */
#define RETS_CALLS 1 /* calls: only calls' returns */
#define RETS_ALL   2 /* both (the default) */
static void ret_expect(struct stint_global *g, struct stint_module *m, const struct stint_probe *p);
static const uint32_t *ret_pending(struct stint_global *g, const struct stint_module *m, uint64_t base, const struct stint_probe *p, uint32_t *n);
static void ret_watched(struct stint_global *g, struct stint_module *m, struct stint_probe *p);
static const uint32_t *own_sites(const struct stint_module *m, const struct stint_probe *p, uint32_t *n);
static uint32_t ret_switch_on(struct stint_global *g, struct stint_module *m, const uint32_t *l, uint32_t n);

/* switch.c: the off-switch; budget.c: the time budget and the period
 * thread; redlog.c: the redundancy log. */
static long anon_huge(uint64_t len, int huge);
#include "switch.c"
#include "budget.c"
static long populate_write(uint64_t lo, uint64_t hi);
#include "redlog.c"
#include "regions.c"
#include "rets.c"

/* ---- recording ---- */

/* The destination fields of a row for probe p without a direct
 * destination: a value (syscall number), or v as module and
 * module-relative address. */
static void row_set_dst(struct stint_global *g, struct row *rw, const struct stint_probe *p, uint64_t v)
{
	if (p->flags & STINT_PF_VALUE) {
		rw->dst_module = DST_MODULE_NONE;
		rw->dst = 0;
		rw->value = v;
		return;
	}
	uint32_t id = module_of(g, v);
	if (id == DST_MODULE_NONE)
		id = module_of_unknown(g, v);
	rw->dst_module = (uint16_t)id;
	rw->dst = id == DST_MODULE_NONE ? v : v - g->modules[id].base;
}

/* A probe in a region-policy run (regions.c): never retires. */
static int record_region(struct stint_global *g, struct stint_module *m, struct stint_probe *p, uint64_t v)
{
	struct row rw;
	rw.kind = p->kind;
	rw.src_module = (uint16_t)m->module_id;
	rw.src = p->src;
	rw.value = 0;
	int direct = (p->flags & STINT_PF_DIRECT) != 0, value = (p->flags & STINT_PF_VALUE) != 0;
	uint64_t dst_abs = direct ? m->base + p->dst : v;
	int rec = region_event(g, m, p, dst_abs, !value);
	/* a refused event is written once per run */
	if (!rec && hash_add(g, (uint64_t)p | (1ULL << 63), value ? v : dst_abs) != 1)
		return 0;
	if (!rec) {
		rw.kind = (uint8_t)(STINT_REFUSED_BASE + p->kind);
		__atomic_fetch_add(&g->refused, 1, __ATOMIC_RELAXED);
	}
	if (direct) {
		rw.dst_module = (uint16_t)m->module_id;
		rw.dst = p->dst;
	} else {
		row_set_dst(g, &rw, p, v);
	}
	emit(&rw);
	return rec;
}

/* Record probe p's outcome v; returns 1 if an event was written. */
static int record_probe(struct stint_global *g, struct stint_module *m, struct stint_probe *p, uint64_t v, uint64_t rs)
{
	if (UNLIKELY(g->region_mode))
		return record_region(g, m, p, v);
	uint64_t base = m->base;
	int every = (m->flags & STINT_MF_EVERY) != 0;
	struct row rw;
	rw.kind = p->kind;
	rw.src_module = (uint16_t)m->module_id;
	rw.src = p->src;
	rw.value = 0;
	if (p->flags & STINT_PF_DIRECT) {
		if (!every) {
			uint8_t z = 0;
			if (__atomic_load_n(&p->state, __ATOMIC_RELAXED) ||
			    !__atomic_compare_exchange_n(&p->state, &z, 1, 0, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED))
				return 0;
		}
		rw.dst_module = (uint16_t)m->module_id;
		rw.dst = p->dst;
		emit(&rw);
		if (!every && (rs & RS_PATCHING)) {
			retarget(base, p);
			patch_done(m, base, p->patch, 0);
		}
		log_note(g, m, p, p->dst, (uint16_t)m->module_id);
		return 1;
	}
	/*
	 * Default mode: p->cache is the last destination seen, set on every
	 * call that gets this far (new or already in the set), so that the
	 * trampolines' inline check (rewrite/tramp.go: retCacheCheck) skips
	 * the probe while the destination repeats. In --every mode it is
	 * never written and stays 0, which no destination equals, so every
	 * execution reaches this function.
	 */
	if (!every) {
		/* the inline cache (probe_cached) only ever holds recorded
		 * destinations, so a racing update leaves valid entries; the
		 * newest goes first and the others move down a place */
		if (probe_cached(p, v) && __atomic_load_n(&p->state, __ATOMIC_RELAXED))
			return 0;
		uint64_t c1 = __atomic_load_n(&p->cache, __ATOMIC_RELAXED), c2 = __atomic_load_n(&p->cache2, __ATOMIC_RELAXED);
		uint64_t c3 = __atomic_load_n(&p->arm, __ATOMIC_RELAXED);
		int added = hash_add(g, (uint64_t)p, v);
		__atomic_store_n(&p->arm_to, c3, __ATOMIC_RELAXED);
		__atomic_store_n(&p->arm, c2, __ATOMIC_RELAXED);
		__atomic_store_n(&p->cache2, c1, __ATOMIC_RELAXED);
		__atomic_store_n(&p->cache, v, __ATOMIC_RELAXED);
		__atomic_store_n(&p->state, 1, __ATOMIC_RELAXED);
		if (added == 0)
			return 0;
	}
	row_set_dst(g, &rw, p, v);
	uint64_t key = (p->flags & STINT_PF_VALUE) ? v : rw.dst;
	if (!every && log_seen(g, m, p, key, rw.dst_module)) {
		/* recorded by an earlier run: say it was refused (once: the
		 * in-run set has it now) */
		rw.kind = (uint8_t)(STINT_REFUSED_BASE + p->kind);
		emit(&rw);
		__atomic_fetch_add(&g->refused, 1, __ATOMIC_RELAXED);
		return 0;
	}
	emit(&rw);
	if (!every)
		log_note(g, m, p, key, rw.dst_module);
	return 1;
}

#include "contexts.c"

/*
 * Called by stint_probe_entry for every probe that fires, with its own
 * %rsp at entry (entry_sp: the context mode finds the program's %rsp
 * from it).
 */
STINT_API void stint_record(const struct stint_probe *cp, uint64_t v, uint64_t entry_sp)
{
	struct stint_probe *p = (struct stint_probe *)cp;
	struct stint_module *m = (struct stint_module *)((uint8_t *)p - p->module_back);
	uint64_t rs = __atomic_load_n(&m->runtime_state, __ATOMIC_ACQUIRE);
	if (UNLIKELY(!(rs & RS_ACTIVE)))
		return;
	struct stint_global *g = G();
	int ctx = (m->flags & STINT_MF_CONTEXT) != 0;
	if (UNLIKELY(p->flags & STINT_PF_DELEG) && (!g->budget_on || !g->sw_on || !(rs & RS_PATCHING) || g->region_mode || !sw_of(g, m, p->patch))) {
		/* a watch for the off-switch, and there is none here: the arm
		 * goes straight on, as it would without the watch (its outcome
		 * is another probe's to record) */
		__atomic_store_n(&p->state, 1, __ATOMIC_RELAXED);
		retarget(m->base, p);
		return;
	}
	if (LIKELY(!g->budget_on)) {
		if (UNLIKELY(ctx))
			ctx_record(g, m, p, v, entry_sp, 1);
		else
			record_probe(g, m, p, v, rs);
		return;
	}
	if (UNLIKELY(__atomic_load_n(&W()->alive, __ATOMIC_ACQUIRE) != 1))
		fork_child_reopen(g); /* a child: it starts its own periods */
	if (UNLIKELY(__atomic_load_n(&g->sw_self_gen, __ATOMIC_RELAXED) != __atomic_load_n(&g->sw_self_done, __ATOMIC_RELAXED)) &&
	    (rs & RS_PATCHING))
		sw_self_batch(g); /* the sync sites are this thread's to write (switch.c) */
	if (UNLIKELY(__atomic_load_n(&p->state, __ATOMIC_RELAXED) == PROBE_RETWATCH)) {
		/* a logged call whose return is still to see (rets.c): what it
		 * costs is charged as a suppressed call, or with the gate
		 * closed at the period's end (sw_closed_call) */
		uint64_t t0 = rdtsc();
		ret_watched(g, m, p);
		if (GATE_CLOSED(g))
			__atomic_fetch_add(&g->late_tsc, call_charge(g, rdtsc() - t0, 0) + g->call_overhead_tsc, __ATOMIC_RELAXED);
		else
			budget_charge(g, t0, 0, 0);
		return;
	}
	if (GATE_CLOSED(g)) {
		/* a switchable site while the gate is closed (gate word 1), or
		 * a race with the gate closing; a context module's gate never
		 * closes: it keeps tracking, and writes nothing */
		if (UNLIKELY(ctx))
			ctx_record(g, m, p, v, entry_sp, 0);
		else if (g->sw_on && (rs & RS_PATCHING))
			sw_closed_call(g, m, p, v, rs);
		return;
	}
	uint64_t len0 = __atomic_load_n(&g->file_len, __ATOMIC_RELAXED);
	uint64_t t0 = rdtsc();
	if (UNLIKELY(ctx)) {
		/* only the writing of new contexts is charged */
		if (ctx_record(g, m, p, v, entry_sp, 1))
			budget_charge(g, t0, 1, __atomic_load_n(&g->file_len, __ATOMIC_RELAXED) != len0);
		return;
	}
	int r = record_probe(g, m, p, v, rs);
	if (g->sw_on && (rs & RS_PATCHING)) {
		if (r)
			ret_expect(g, m, p);
		sw_after_record(g, m, p, r);
	}
	budget_charge(g, t0, r, __atomic_load_n(&g->file_len, __ATOMIC_RELAXED) != len0);
}

/* ---- initialisation ---- */

#define S_MADV_HUGEPAGE 14
#define HUGE_PAGE ((uint64_t)2 << 20)

/*
 * Anonymous read-write memory of len bytes. With huge, from 512 KB up, it
 * is 2 MiB aligned and asked to be huge, so that it is faulted in a huge
 * page at a time. On this VM each 4 KiB page costs about 11 us to fault
 * in (the hypervisor's shadow tables), but a fresh huge page can cost it
 * as much as all its small ones: only for memory written all over (the
 * off-switch's lists where sites are listed by the thousand). The log's
 * set this way (557 KB, filled whole at start) took a 'select 1' from
 * 16.2 to 17.4 ms of task-clock (medians of 41 interleaved rounds; means
 * 18.9 and 20.6), and stayed in small pages. Returns the address, or
 * -errno.
 */
static long anon_huge(uint64_t len, int huge)
{
	len = (len + 4095) & ~(uint64_t)4095;
	if (!huge || len < HUGE_PAGE / 4)
		return sys_mmap(0, len, S_PROT_READ | S_PROT_WRITE, S_MAP_PRIVATE | S_MAP_ANONYMOUS | S_MAP_NORESERVE, -1, 0);
	uint64_t hl = (len + HUGE_PAGE - 1) & ~(HUGE_PAGE - 1);
	long t = sys_mmap(0, hl + HUGE_PAGE, S_PROT_READ | S_PROT_WRITE, S_MAP_PRIVATE | S_MAP_ANONYMOUS | S_MAP_NORESERVE, -1, 0);
	if (sys_failed(t))
		return t;
	uint64_t at = ((uint64_t)t + HUGE_PAGE - 1) & ~(HUGE_PAGE - 1);
	if (at > (uint64_t)t)
		sys_call2(SYS_munmap, t, (long)(at - (uint64_t)t));
	sys_call2(SYS_munmap, (long)(at + hl), (long)((uint64_t)t + HUGE_PAGE - at));
	sys_call3(SYS_madvise, (long)at, (long)hl, S_MADV_HUGEPAGE);
	return (long)at;
}

/* MADV_POPULATE_WRITE of the pages holding [lo, hi): 0, or -errno. */
static long populate_write(uint64_t lo, uint64_t hi)
{
	lo &= ~(uint64_t)4095;
	hi = (hi + 4095) & ~(uint64_t)4095;
	if (hi <= lo)
		return 0;
	long r = sys_call3(SYS_madvise, (long)lo, (long)(hi - lo), S_MADV_POPULATE_WRITE);
	return sys_failed(r) ? r : 0;
}

/*
 * Pages the runtime writes in default mode: the probe and patch tables
 * (the log's retirements and the off-switch's notes at load, each record
 * later), the original code (each restore, each switch) and the
 * trampolines (each arm retargeted once its outcome is recorded). All
 * lie in private file mappings, so each first write to a page is a
 * copy-on-write fault, and once the period thread runs each costs a TLB
 * shootdown too; on this 2-core VM a fault costs about 17 us and the IPI
 * as much again to the thread it interrupts. One MADV_POPULATE_WRITE
 * (Linux 5.14) per range makes the copies at once, before any thread but
 * this one exists. Measured on libsqlite3 (about 1,400 table pages, 240
 * of code, 1,400 of trampolines): the tables' populate replaced 1,400
 * faults at load; the code's and the trampolines' took `select 1` from
 * 88.6 to 73.9 ms (medians of 11) and a whole sqlite3 run from 1,396 TLB
 * flushes to 89. The cost is memory: the trampolines (5.5 MB there)
 * become private copies in every process. Older kernels refuse it
 * (EINVAL): the code's pages are then copied one store each here (the
 * other pages as they are written).
 */
static void tables_populate(const struct stint_module *m, uint64_t base)
{
	uint64_t lo = base + m->probes_vaddr, hi = lo + (uint64_t)m->nprobes * sizeof(struct stint_probe);
	uint64_t plo = base + m->patches_vaddr, phi = plo + (uint64_t)m->npatches * sizeof(struct stint_patch);
	if (m->npatches && plo < lo)
		lo = plo;
	if (m->npatches && phi > hi)
		hi = phi;
	populate_write(lo, hi);
	populate_write(base + m->tramp_lo, base + m->tramp_hi);
	if (populate_write(base + m->text_lo, base + m->text_hi) == 0)
		return;
	const struct stint_patch *pt = (const void *)(base + m->patches_vaddr);
	uint64_t last = ~0ULL;
	for (uint32_t i = 0; i < m->npatches; i++) {
		uint64_t pg = (base + pt[i].addr) & ~(uint64_t)4095;
		if (pg == last)
			continue;
		last = pg;
		__atomic_fetch_or((uint8_t *)(base + pt[i].addr), 0, __ATOMIC_RELAXED);
	}
}

/*
 * Create or join the process-wide state. Returns it, or 0 (after saying
 * so once) when recording is impossible.
 */
static struct stint_global *global_get(int *created, const char **what, long *err)
{
	*created = 0;
	struct stint_global *g = G();
	size_t total = sizeof(struct stint_global) + HASH_SLOTS * 16;
	total = (total + 4095) & ~(size_t)4095;
	if (total > STINT_GLOBAL_SIZE) {
		*what = "global state size";
		*err = 22;
		return 0;
	}
	long r = sys_mmap(STINT_GLOBAL_ADDR, STINT_GLOBAL_SIZE + STINT_WIPE_SIZE, S_PROT_READ | S_PROT_WRITE,
			  S_MAP_PRIVATE | S_MAP_ANONYMOUS | S_MAP_FIXED_NOREPLACE | S_MAP_NORESERVE, -1, 0);
	if (r == -S_EEXIST) {
		/* already there: join if it is ours */
		if (g->magic != STINT_GLOBAL_MAGIC || g->abi_version != STINT_ABI_VERSION || g->size != total) {
			/* another build's runtime (a module rewritten by another
			 * stint) made it: rewrite every module with one stint */
			*what = g->magic == STINT_GLOBAL_MAGIC ? "process state made by another stint version (rewrite all modules with one)"
							       : "process state at fixed address is not stint's";
			*err = S_EEXIST;
			return 0;
		}
		return g;
	}
	if (sys_failed(r)) {
		*what = "map process state";
		*err = -r;
		return 0;
	}
	if ((uintptr_t)r != STINT_GLOBAL_ADDR) {
		/* an old kernel ignoring MAP_FIXED_NOREPLACE */
		sys_call2(SYS_munmap, r, (long)(STINT_GLOBAL_SIZE + STINT_WIPE_SIZE));
		*what = "map process state";
		*err = S_EEXIST;
		return 0;
	}
	r = sys_call3(SYS_madvise, (long)STINT_WIPE_ADDR, STINT_WIPE_SIZE, S_MADV_WIPEONFORK);
	if (sys_failed(r)) {
		/* leave the mapping (magic unset) so later modules fail the same way */
		*what = "madvise(MADV_WIPEONFORK)";
		*err = -r;
		return 0;
	}
	g->abi_version = STINT_ABI_VERSION;
	g->size = (uint32_t)total;
	g->pid = (int32_t)sys_call0(SYS_getpid);
	g->fd = -1;
	uint64_t off = 0;
	for (int c = 0; c < STINT_ARROW_NCOLS; c++) {
		g->col_off[c] = off;
		off += pad8((uint64_t)ROWS_PER_BATCH * stint_arrow_col_width[c]);
	}
	g->slot_size = STINT_ARROW_BATCH_LEN + off;
	g->sync_core = !sys_failed(sys_call3(SYS_membarrier, MEMBARRIER_REGISTER_SYNC_CORE, 0, 0));
	W()->alive = 1;
	__atomic_store_n(&g->magic, STINT_GLOBAL_MAGIC, __ATOMIC_RELEASE);
	*created = 1;
	return g;
}


static int page_rwx(uint64_t lo, uint64_t hi)
{
	lo &= ~(uint64_t)4095;
	hi = (hi + 4095) & ~(uint64_t)4095;
	if (hi <= lo)
		return 0;
	long r = sys_call3(SYS_mprotect, (long)lo, (long)(hi - lo), S_PROT_READ | S_PROT_WRITE | S_PROT_EXEC);
	return sys_failed(r) ? -1 : 0;
}

/* chunks_map: the trampoline chunks (ABI 2: stub list, memfd, restore on failure). */
#include "chunks.c"

/*
 * Initialise one module. envp may be 0 (then /proc/self/environ is not
 * consulted: a module without envp joins or creates the state with
 * defaults); auxv may be 0 (then /proc/self/auxv is read).
 */
STINT_API void stint_module_init(struct stint_module *m, char **envp, const uint64_t *auxv)
{
	if (m->magic != STINT_MODULE_MAGIC || m->abi_version != STINT_ABI_VERSION)
		return;
	if (m->runtime_state & RS_ACTIVE)
		return; /* DT_INIT twice */
	uint64_t base = (uint64_t)m - m->self_vaddr;
	m->base = base;

	/* Code patching first: chunks must exist before any patched site runs. */
	int patching = page_rwx(base + m->text_lo, base + m->text_hi) == 0 &&
		       page_rwx(base + m->tramp_lo, base + m->tramp_hi) == 0;
	/* A chunk that cannot be mapped gets its patches restored, never
	 * aborts. A shared object's path, found on the way, is kept for its
	 * registration below. */
	char path[512];
	path[0] = 0;
	uint32_t chunks_lost = chunks_map(m, base, envp, patching, path, sizeof path);
	/* The gate page: anonymous and wiped on fork (stint_abi.h). If this
	 * fails the file's zero page stays: the gate works, but a child
	 * forked while it is closed records nothing until its next period. */
	uint64_t gate = m->gate_vaddr ? base + m->gate_vaddr : 0;
	if (gate && !sys_failed(sys_mmap(gate, 4096, S_PROT_READ | S_PROT_WRITE, S_MAP_PRIVATE | S_MAP_ANONYMOUS | S_MAP_FIXED, -1, 0)))
		sys_call3(SYS_madvise, (long)gate, 4096, S_MADV_WIPEONFORK);

	const char *dis = env_get(envp, "STINT_DISABLE");
	if (dis && dis[0] == '1') {
		if (patching)
			restore_all(m, base); /* run the original code at full speed */
		return;
	}

	int created, spawn = 0;
	const char *what = "";
	long err = 0;
	struct stint_global *g = global_get(&created, &what, &err);
	if (!g) {
		say_untraced(what, 0, err);
		if (patching)
			restore_all(m, base);
		return;
	}
	/* Serialise module registration against a concurrent first record of a forked child. */
	/* A forked child must not register into its parent's file. */
	if (!created && __atomic_load_n(&W()->alive, __ATOMIC_ACQUIRE) != 1)
		fork_child_reopen(g);
	if (!lock_bounded(&g->init_lock))
		return;
	if (!g->vdso_gettime) {
		uint64_t vd = auxv ? auxv_find(auxv, S_AT_SYSINFO_EHDR) : proc_auxv(S_AT_SYSINFO_EHDR);
		if (vd) {
			uint64_t f = vdso_lookup(vd, "__vdso_clock_gettime");
			if (!f)
				f = vdso_lookup(vd, "clock_gettime");
			g->vdso_gettime = f;
		}
	}
	if (g->tid_mode == TID_UNKNOWN) {
		uint64_t hw2 = auxv ? auxv_find(auxv, S_AT_HWCAP2) : proc_auxv(S_AT_HWCAP2);
		g->tid_mode = (hw2 & S_HWCAP2_FSGSBASE) ? TID_PROBE : (m->flags & STINT_MF_STATIC) ? TID_SYSCALL : TID_SEG_PROBE;
	}
	const char *execfn = auxv ? (const char *)auxv_find(auxv, S_AT_EXECFN) : 0;
	if (created) {
		long n = sys_call3(SYS_readlink, (long)"/proc/self/exe", (long)g->exe_path, sizeof g->exe_path - 1);
		if (n > 0)
			g->exe_path[n] = 0;
		else if (execfn) {
			size_t l = s_strlen(execfn);
			if (l >= sizeof g->exe_path)
				l = sizeof g->exe_path - 1;
			s_memcpy(g->exe_path, execfn, l);
			g->exe_path[l] = 0;
		}
		const char *out = env_get(envp, "STINT_OUT");
		if (!out || !out[0])
			out = "./traces";
		/* Absolute, so that a child that changed directory writes beside its parent. */
		size_t l = 0;
		if (out[0] != '/') {
			long n = sys_call2(SYS_getcwd, (long)g->out_dir, sizeof g->out_dir - 2);
			if (n > 1 && !sys_failed(n)) {
				l = s_strlen(g->out_dir);
				if (g->out_dir[l - 1] != '/')
					g->out_dir[l++] = '/';
			}
			if (out[0] == '.' && out[1] == '/')
				out += 2;
		}
		size_t ol = s_strlen(out);
		if (l + ol >= sizeof g->out_dir - 1)
			ol = sizeof g->out_dir - 2 - l;
		s_memcpy(g->out_dir + l, out, ol);
		l += ol;
		while (l > 1 && g->out_dir[l - 1] == '/')
			l--;
		g->out_dir[l] = 0;
		g->tool = m->tool;
		s_memcpy(g->options, m->options, sizeof m->options < sizeof g->options ? sizeof m->options : sizeof g->options);
		g->options[sizeof g->options - 1] = 0;
		budget_setup(g, envp, g->options);
		if (!(m->flags & STINT_MF_EVERY))
			log_setup(g, envp, g->options);
		if (m->flags & STINT_MF_EXEC) {
			g->exe_build_id_len = m->build_id_len > 32 ? 32 : m->build_id_len;
			s_memcpy(g->exe_build_id, m->build_id, g->exe_build_id_len);
			g->exe_registered = 1;
		}
		long r = trace_open(g, &what);
		if (r) {
			g->failed = 1;
			unlock(&g->init_lock);
			set_untraced_once(g, what, g->trace_path[0] && what[0] == 'o' ? g->trace_path : g->out_dir, -r);
			if (patching)
				restore_all(m, base); /* untraced: run the original code at full speed */
			return;
		}
		__atomic_store_n(&g->recording, 1, __ATOMIC_RELEASE);
		periods_start(g, 0);
		spawn = 1; /* the period thread: once this module is set up */
	} else if (g->failed) {
		unlock(&g->init_lock);
		if (patching)
			restore_all(m, base);
		return;
	} else if ((m->flags & STINT_MF_EXEC) && !g->exe_registered) {
		g->exe_build_id_len = m->build_id_len > 32 ? 32 : m->build_id_len;
		s_memcpy(g->exe_build_id, m->build_id, g->exe_build_id_len);
		g->exe_registered = 1;
		write_run(g);
	}
	unlock(&g->init_lock);

	/* Register: the module's path is the file mapped at its base. */
	if ((m->flags & STINT_MF_EXEC) && g->exe_path[0]) {
		s_memcpy(path, g->exe_path, sizeof path);
	} else if (!path[0] && lock_bounded(&g->scratch_lock)) {
		struct find_path_arg a = {base, path, sizeof path};
		maps_scan(find_path_cb, &a);
		unlock(&g->scratch_lock);
	}
	uint64_t size = m->image_end; /* link vaddrs start near 0 for PIE and shared objects */
	uint32_t id = add_module(g, base, size, path, m->build_id, m->build_id_len, 1);
	if (id == DST_MODULE_NONE) {
		if (spawn)
			periods_spawn(g);
		return;
	}
	m->module_id = id;
	g->modules[id].bidhash = m->build_id_len ? fnv64(m->build_id, m->build_id_len > 32 ? 32 : m->build_id_len) : 0;
	g->modules[id].smod = (uint64_t)m;
	if (patching && !(m->flags & STINT_MF_EVERY))
		tables_populate(m, base);
	if (g->sw_on && patching && !(m->flags & (STINT_MF_EVERY | STINT_MF_CONTEXT))) {
		__atomic_store_n(&g->modules[id].sw, sw_module_new(m, base), __ATOMIC_RELEASE);
		sw_cold_load(g, m, base);
	}
	__atomic_store_n(&g->modules[id].gate, gate, __ATOMIC_RELEASE);
	if (gate && !(m->flags & STINT_MF_CONTEXT) && GATE_CLOSED(g)) {
		__atomic_store_n((uint64_t *)gate, STINT_GATE_CLOSED, __ATOMIC_RELEASE);
		__atomic_store_n((uint64_t *)(gate + STINT_GATE_WORD1), sw_closed_word(g, &g->modules[id]), __ATOMIC_RELEASE);
	}
	if (g->log_on && !g->region_mode && patching && !(m->flags & STINT_MF_EVERY))
		log_load_module(g, m, base, chunks_lost);
	__atomic_store_n(&m->runtime_state, RS_ACTIVE | (patching && !(m->flags & STINT_MF_EVERY) ? RS_PATCHING : 0),
			 __ATOMIC_RELEASE);
	if (spawn)
		periods_spawn(g);
}

static struct stint_module *module_of_blob(const uint8_t *blob)
{
	const struct stint_blob_header *h = (const void *)blob;
	return (struct stint_module *)(blob + h->module_rel);
}

STINT_API uint64_t stint_init_exec(const uint8_t *blob, uint64_t *sp)
{
	struct stint_module *m = module_of_blob(blob);
	long argc = (long)sp[0];
	char **argv = (char **)(sp + 1);
	char **envp = argv + argc + 1;
	char **e = envp;
	while (*e)
		e++;
	const uint64_t *auxv = (const uint64_t *)(e + 1);
	stint_module_init(m, envp, auxv);
	uint64_t base = (uint64_t)m - m->self_vaddr;
	return m->orig_entry ? base + m->orig_entry : 0;
}

STINT_API uint64_t stint_init_shared(const uint8_t *blob, long argc, char **argv, char **envp)
{
	(void)argc;
	(void)argv;
	struct stint_module *m = module_of_blob(blob);
	stint_module_init(m, envp, 0);
	uint64_t base = (uint64_t)m - m->self_vaddr;
	return m->orig_entry ? base + m->orig_entry : 0;
}

STINT_API uint64_t stint_fini(const uint8_t *blob)
{
	struct stint_module *m = module_of_blob(blob);
	if (__atomic_load_n(&m->runtime_state, __ATOMIC_ACQUIRE) & RS_ACTIVE) {
		if (m->flags & STINT_MF_EXEC)
			run_end(G());
		log_save(G(), 1);
		flush(G());
	}
	uint64_t base = (uint64_t)m - m->self_vaddr;
	return m->orig_fini ? base + m->orig_fini : 0;
}

/* Counters, for tests: events written, events dropped, hash-set overflows. */
STINT_API void stint_counters(uint64_t out[3])
{
	struct stint_global *g = G();
	out[0] = g->events;
	out[1] = g->dropped;
	out[2] = g->hash_full;
}
