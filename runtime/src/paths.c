/*
 * paths.c - compact complete traces (STINT_MF_PATHS): what each probe
 * appends to its thread's chunk (the packets of formats/packets.go), the
 * call stack that compresses returns, and how a thread finds its state.
 *
 * The decoder (analysis/paths) runs the same state machine on the
 * packets while it walks the code, so every rule here has its mirror
 * there:
 *   - a jcc appends its outcome bit;
 *   - a direct call pushes its return address; an indirect call appends
 *     its destination (TIP) and pushes;
 *   - an indirect jmp appends its destination (TIP), or, when it has a
 *     likely one (STINT_PF_PREDICT) and goes there, bit 1;
 *   - a ret whose destination is the top of the stack pops it and
 *     appends bit 1; any other appends a TIP and pops down to the entry
 *     that matches, if one of the top PATHS_SEARCH does;
 *   - a TIP outside instrumented code sets "outside". The next probe
 *     that runs is then either a resume probe at the return address on
 *     top of the stack (pop, nothing appended), or an entry probe (a
 *     callback: SYNC, no pop), or anything else (a SYNC at its own
 *     address: a landing pad, a longjmp, where no probe announced it);
 *   - an entry probe reached while inside, with a return address that is
 *     not the top of the stack and is the kernel's signal restorer,
 *     appends ASYNC (the handler interrupted the thread) and its ret to
 *     the restorer ASYNC_END: the decoder resumes the interrupted path.
 */
#include "stint.h"

/* glibc's __restore_rt: mov $15,%rax; syscall (rt_sigreturn). */
static const uint8_t restorer_code[9] = {0x48, 0xc7, 0xc0, 0x0f, 0x00, 0x00, 0x00, 0x0f, 0x05};

_Static_assert(__builtin_offsetof(struct paths_thread, key) == STINT_PATHS_KEY_OFF, "key");
_Static_assert(__builtin_offsetof(struct paths_thread, tnt) == STINT_PATHS_TNT_OFF, "tnt");
_Static_assert(__builtin_offsetof(struct paths_thread, top) == STINT_PATHS_TOP_OFF, "top");
_Static_assert(__builtin_offsetof(struct paths_thread, stack) == STINT_PATHS_STACK_OFF, "stack");
_Static_assert(__builtin_offsetof(struct paths_thread, tail) == STINT_PATHS_TAIL_OFF, "tail");
_Static_assert(__builtin_offsetof(struct paths_thread, cur) == STINT_PATHS_CUR_OFF, "cur");
_Static_assert(__builtin_offsetof(struct paths_thread, end) == STINT_PATHS_END_OFF, "end");
_Static_assert(__builtin_offsetof(struct paths_thread, psb_at) == STINT_PATHS_PSB_AT_OFF, "psb_at");
_Static_assert(__builtin_offsetof(struct paths_thread, last_ip) == STINT_PATHS_LAST_OFF, "last_ip");
_Static_assert(__builtin_offsetof(struct paths_thread, psb) == STINT_PATHS_PSB_OFF, "psb");
_Static_assert(__builtin_offsetof(struct paths_thread, out_lo) == STINT_PATHS_OUT_LO_OFF, "out_lo");
_Static_assert(__builtin_offsetof(struct paths_thread, out_size) == STINT_PATHS_OUT_SIZE_OFF, "out_size");
_Static_assert(__builtin_offsetof(struct paths_thread, outside) == STINT_PATHS_OUTSIDE_OFF, "outside");
_Static_assert(__builtin_offsetof(struct paths_thread, room) == STINT_PATHS_ROOM_OFF, "room");
_Static_assert(__builtin_offsetof(struct paths_thread, curmod) == STINT_PATHS_CURMOD_OFF, "curmod");
_Static_assert(PATHS_PSB_EVERY == STINT_PATHS_PSB_EVERY, "psb every");
/* an inline append of STINT_PATHS_ROOM_TIP units has the 32 bytes pk_room asks for */
_Static_assert(STINT_PATHS_ROOM_TIP * STINT_PATHS_ROOM_UNIT >= 32, "room");

static inline uint64_t gs_get(struct stint_global *g)
{
	uint64_t v = 0;
	if (g->paths.gs_mode == PATHS_GS_INSN)
		__asm__ volatile("rdgsbase %0" : "=r"(v));
	else
		sys_call2(SYS_arch_prctl, S_ARCH_GET_GS, (long)&v);
	return v;
}

static inline void gs_set(struct stint_global *g, uint64_t v)
{
	if (g->paths.gs_mode == PATHS_GS_INSN)
		__asm__ volatile("wrgsbase %0" ::"r"(v) : "memory");
	else
		sys_call2(SYS_arch_prctl, S_ARCH_SET_GS, (long)v);
}

/* The thread blocks: PATHS_THREADS of them, mapped on first use. */
static struct paths_thread *paths_blocks(struct stint_global *g)
{
	uint64_t b = __atomic_load_n(&g->paths.threads, __ATOMIC_ACQUIRE);
	if (b)
		return (struct paths_thread *)b;
	if (!lock_bounded(&g->paths.lock))
		return 0;
	if (!g->paths.threads) {
		long a = sys_mmap(0, PATHS_THREADS * sizeof(struct paths_thread), S_PROT_READ | S_PROT_WRITE,
				  S_MAP_PRIVATE | S_MAP_ANONYMOUS | S_MAP_NORESERVE, -1, 0);
		if (!sys_failed(a)) {
			/* a forked child's blocks read as zero: its key matches no
			 * thread, so its first probe calls the runtime, which sets it up */
			sys_call3(SYS_madvise, a, PATHS_THREADS * sizeof(struct paths_thread), S_MADV_WIPEONFORK);
			((struct paths_thread *)a)->key = 1; /* block 0: the one no thread owns */
			if (!g->paths.nthreads)
				g->paths.nthreads = 1;
			__atomic_store_n(&g->paths.threads, (uint64_t)a, __ATOMIC_RELEASE);
		}
	}
	unlock(&g->paths.lock);
	return (struct paths_thread *)g->paths.threads;
}

#define PATHS_REUSE_SCAN 64 /* blocks paths_reuse looks at per search */

/*
 * A block of a thread that is gone, for thread tid, once every block is
 * taken: a server starts and ends threads all its life. Searched from
 * where the last search stopped, PATHS_REUSE_SCAN blocks at most. A
 * thread is gone when tgkill(pid, its tid, 0) says ESRCH (one that got
 * its number since is alive, and keeps the block). Its chunk is whole
 * in the file; it gets its last time, as paths_close gives every other,
 * and the block starts over, zeroed, owned by tid. 0 when none is found.
 */
static struct paths_thread *paths_reuse(struct stint_global *g, struct paths_thread *bs, uint32_t tid)
{
	uint32_t start = __atomic_fetch_add(&g->paths.reuse_at, PATHS_REUSE_SCAN, __ATOMIC_RELAXED);
	for (uint32_t k = 0; k < PATHS_REUSE_SCAN; k++) {
		struct paths_thread *t = &bs[1 + (start + k) % (PATHS_THREADS - 1)]; /* block 0 is no thread's */
		uint32_t old = __atomic_load_n(&t->tid, __ATOMIC_ACQUIRE);
		if (!old || old == tid || t->pid != (uint32_t)g->pid || __atomic_load_n(&t->busy, __ATOMIC_ACQUIRE) ||
		    sys_call3(SYS_tgkill, g->pid, old, 0) != -3 /* ESRCH */)
			continue;
		if (!__atomic_compare_exchange_n(&t->tid, &old, tid, 0, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED))
			continue;
		if (t->chunk)
			put64((uint8_t *)paths_chunk_field(g, t->chunk, STINT_PATHS_BODY_LAST), now_ns(S_CLOCK_MONOTONIC));
		s_memset((uint8_t *)t + sizeof t->key, 0, sizeof *t - sizeof t->key);
		t->key = 1;
		return t;
	}
	return 0;
}

/*
 * This thread's block. %gs holds it (glibc leaves %gs alone on x86-64;
 * a thread made by clone inherits its parent's, and a forked child its
 * parent's block, so the owner's thread id decides). A thread without
 * one gets a new block, its first chunk and a SYNC at sync (0: none:
 * the exit path asking). 0 when there is no block to be had.
 */
static struct paths_thread *paths_self(struct stint_global *g, uint64_t sync)
{
	uint32_t tid = current_tid(g);
	struct paths_thread *bs = paths_blocks(g);
	if (!bs)
		return 0;
	uint64_t gs = gs_get(g);
	uint64_t lo = (uint64_t)bs, hi = lo + PATHS_THREADS * sizeof(struct paths_thread);
	if (gs >= lo && gs < hi) {
		struct paths_thread *t = (struct paths_thread *)gs;
		if (t->tid == tid && t->pid == (uint32_t)g->pid)
			return t;
	} else if (gs) {
		/* the program uses %gs: look the thread up instead */
		uint32_t n = __atomic_load_n(&g->paths.nthreads, __ATOMIC_ACQUIRE);
		for (uint32_t i = 0; i < n; i++)
			if (bs[i].tid == tid && bs[i].pid == (uint32_t)g->pid)
				return &bs[i];
	}
	if (!sync)
		return 0;
	uint32_t i = __atomic_fetch_add(&g->paths.nthreads, 1, __ATOMIC_ACQ_REL);
	struct paths_thread *t = i < PATHS_THREADS ? &bs[i] : 0;
	if (!t) {
		__atomic_store_n(&g->paths.nthreads, PATHS_THREADS, __ATOMIC_RELEASE);
		t = paths_reuse(g, bs, tid);
	}
	if (!t) {
		if (__atomic_fetch_add(&g->paths.untraced, 1, __ATOMIC_RELAXED) == 0)
			say_line("a compact trace keeps a block for each live thread, 4095 of them: threads started while "
				 "that many are alive are not traced");
		return 0;
	}
	t->tid = tid;
	t->pid = (uint32_t)g->pid;
	t->key = 1;
	if (g->paths.gs_mode == PATHS_GS_INSN)
		t->fs = fs_base();
	uint64_t now = now_ns(S_CLOCK_MONOTONIC);
	t->chunk = paths_chunk_new(g, tid, 0, now);
	uint64_t data = t->chunk + STINT_PATHS_BATCH_LEN + STINT_PATHS_BODY_DATA;
	t->alloc = ((data + 4095) & ~(uint64_t)4095) - data; /* allocated with the header's page */
	if (t->chunk)
		paths_use(g, t);
	if (!gs || (gs >= lo && gs < hi))
		gs_set(g, (uint64_t)t);
	if (t->chunk)
		pk_sync(g, t, sync);
	return t;
}

/* Start filling the thread's chunk: packets, bits and tail go there. */
static void paths_use(struct stint_global *g, struct paths_thread *t)
{
	t->cur = paths_chunk_data(g, t->chunk);
	t->end = t->cur + (t->alloc < PATHS_CHUNK_DATA ? t->alloc : PATHS_CHUNK_DATA);
	t->tnt = paths_chunk_field(g, t->chunk, STINT_PATHS_BODY_PENDING);
	t->tail = paths_chunk_field(g, t->chunk, STINT_PATHS_BODY_TAIL);
	t->psb_at = t->cur;
}

/*
 * Before a dynamically linked module's code first runs: the inline
 * paths of its trampolines load %gs:KEY without checking %gs, so the
 * thread must have a block; block 0, which no thread owns (its key
 * matches none), sends it to the runtime on its first probe. Threads
 * made later inherit it. A library loaded (dlopen) once the program has
 * threads cannot give them one: 0 then, and it runs untraced.
 */
static int paths_gs_ready(struct stint_global *g)
{
	if (gs_get(g))
		return 1;
	if (!sw_alone(g))
		return 0;
	struct paths_thread *bs = paths_blocks(g);
	if (!bs)
		return 0;
	gs_set(g, (uint64_t)&bs[0]);
	return 1;
}

/* Room for one more packet (at most 25 bytes) and a TNT flush: a new
 * chunk when the current one is full. False when there is none. */
static int pk_room(struct stint_global *g, struct paths_thread *t)
{
	if (LIKELY(t->chunk && t->end - t->cur >= 32))
		return 1;
	if (!t->chunk)
		return 0;
	if (t->end < paths_chunk_data(g, t->chunk) + PATHS_CHUNK_DATA) {
		if (paths_grow(g, t))
			return 1;
		t->chunk = 0;
		return 0;
	}
	uint64_t now = now_ns(S_CLOCK_MONOTONIC);
	if (paths_chunk_roll(g, t->chunk, t->seq, (uint64_t)(t->cur - paths_chunk_data(g, t->chunk)), now)) {
		t->chunk = 0;
		return 0;
	}
	t->seq++;
	paths_use(g, t); /* the pending bits stay, for this chunk */
	t->psb = 1;
	return 1;
}

static inline void pk_u64(struct paths_thread *t, uint64_t v)
{
	s_memcpy(t->cur, &v, 8);
	t->cur += 8;
}

/* Write the pending outcome bits: a short TNT for up to 6, else a TNT
 * of as many bytes as they and their leading 1 take (8 are stored: the
 * ones past those are 0, the PAD the chunk holds there). */
static void pk_flush(struct stint_global *g, struct paths_thread *t)
{
	if (*t->tnt <= 1 || !pk_room(g, t))
		return;
	uint64_t v = *t->tnt;
	if (v < (1u << 7)) {
		*t->cur++ = (uint8_t)(v << 1 | 1);
	} else {
		int k = (64 - __builtin_clzll(v) + 7) / 8;
		*t->cur++ = (uint8_t)(PK_TNT + 2 * k);
		s_memcpy(t->cur, &v, 8);
		t->cur += k;
	}
	*t->tnt = 1;
}

static inline void pk_bit(struct stint_global *g, struct paths_thread *t, int taken)
{
	uint64_t v = *t->tnt << 1 | (taken ? 1 : 0);
	*t->tnt = v;
	t->appended++;
	if (v >> STINT_PATHS_TNT_FULL)
		pk_flush(g, t);
}

/* A TIP (op PK_TIP; PK_RET_TIP: a call chain's ret to the stack's top):
 * the low bytes of the address XOR the last address. */
static void pk_tip_op(struct stint_global *g, struct paths_thread *t, uint8_t op, uint64_t a)
{
	pk_flush(g, t);
	if (!pk_room(g, t))
		return;
	uint64_t x = a ^ t->last_ip;
	int k = 0;
	while (k < 8 && (x >> (8 * k)))
		k++;
	t->appended++;
	*t->cur++ = (uint8_t)(op + 2 * k);
	for (int i = 0; i < k; i++)
		*t->cur++ = (uint8_t)(x >> (8 * i));
	t->last_ip = a;
}

static void pk_tip(struct stint_global *g, struct paths_thread *t, uint64_t a) { pk_tip_op(g, t, PK_TIP, a); }

/* A packet: op, then the n addresses v. */
static void pk_opv(struct stint_global *g, struct paths_thread *t, uint8_t op, const uint64_t *v, int n)
{
	pk_flush(g, t);
	if (!pk_room(g, t))
		return;
	t->appended++;
	*t->cur++ = op;
	for (int i = 0; i < n; i++)
		pk_u64(t, v[i]);
}

static void pk_op(struct stint_global *g, struct paths_thread *t, uint8_t op, uint64_t a, uint64_t b, int n)
{
	uint64_t v[2] = {a, b};
	pk_opv(g, t, op, v, n);
}

static void pk_sync(struct stint_global *g, struct paths_thread *t, uint64_t a)
{
	pk_op(g, t, PK_SYNC, a, 0, 1);
	t->last_ip = a;
}

/* The call stack: a ring of PATHS_STACK return addresses with an 8-bit
 * top, no depth: the decoder keeps the same ring, so a comparison with a
 * slot no call filled (0, or an old entry the ring came round to) comes
 * out the same on both sides. The trampolines' inline pushes and pops
 * (rewrite/tramp) do the same. */
static inline uint64_t st_top(const struct paths_thread *t) { return t->stack[(uint8_t)t->top]; }

static inline void st_push(struct paths_thread *t, uint64_t a)
{
	t->top = (uint8_t)(t->top + 1);
	t->stack[t->top] = a;
}

static inline void st_pop(struct paths_thread *t, uint32_t n) { t->top = (uint8_t)(t->top - n); }

/* Forget the stack (a gap in the path: the decoder starts afresh). */
static void st_clear(struct paths_thread *t)
{
	s_memset(t->stack, 0, sizeof t->stack);
	t->top = 0;
}

/* An unexpected return to a: pop down to the entry that holds a, if
 * one of the top PATHS_SEARCH does (frames a longjmp or an exception
 * left behind). */
static void st_unwind(struct paths_thread *t, uint64_t a)
{
	for (uint32_t k = 0; k < PATHS_SEARCH; k++) {
		if (t->stack[(uint8_t)(t->top - k)] == a) {
			st_pop(t, k + 1);
			return;
		}
	}
}

/* Whether a lies in code a compact trace instruments. A module seen for
 * the first time joins the module table, which the decoder reads. */
static int paths_inside(struct stint_global *g, uint64_t a) { return paths_inside_out(g, 0, a); }

/* paths_inside; and a module without a compact trace's probes that a is
 * in becomes thread t's out range (t not 0): an inline TIP into it
 * leaves too, without the runtime (rewrite/tramp, tip.go). */
static int paths_inside_out(struct stint_global *g, struct paths_thread *t, uint64_t a)
{
	uint32_t i = module_of(g, a);
	if (i == DST_MODULE_NONE)
		i = module_of_unknown(g, a);
	if (i == DST_MODULE_NONE || i >= MAX_MODULES)
		return 0;
	const struct gmodule *gm = &g->proc.modules[i];
	const struct stint_module *sm = (const struct stint_module *)gm->smod;
	if (sm && (sm->flags & STINT_MF_PATHS))
		return a >= gm->base + sm->text_lo && a < gm->base + sm->text_hi;
	if (t) {
		t->out_lo = gm->base;
		t->out_size = gm->size;
	}
	return 0;
}

/*
 * Whether a is the kernel's signal restorer (glibc's __restore_rt), to
 * which a signal handler returns. Known ones are remembered; a new
 * address is read with process_vm_readv, which fails instead of
 * faulting: a is whatever the stack held, not always code.
 */
static int is_restorer(struct stint_global *g, uint64_t a)
{
	for (int k = 0; k < PATHS_RESTORERS; k++) {
		uint64_t r = __atomic_load_n(&g->paths.restorers[k], __ATOMIC_RELAXED);
		if (!r)
			break;
		if (r == a)
			return 1;
	}
	if (module_of(g, a) == DST_MODULE_NONE)
		return 0;
	uint8_t b[sizeof restorer_code];
	struct { uint64_t base, len; } local = {(uint64_t)b, sizeof b}, remote = {a, sizeof b};
	long n = sys_call6(SYS_process_vm_readv, g->pid, (long)&local, 1, (long)&remote, 1, 0);
	if (n != (long)sizeof b)
		return 0;
	for (size_t k = 0; k < sizeof b; k++)
		if (b[k] != restorer_code[k])
			return 0;
	for (int k = 0; k < PATHS_RESTORERS; k++) {
		uint64_t z = 0;
		if (__atomic_compare_exchange_n(&g->paths.restorers[k], &z, a, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED) || z == a)
			break;
	}
	return 1;
}

/* A TIP to a; outside when a is not instrumented code (and a module
 * without probes there the thread's out range: paths_inside_out). */
static void paths_leave(struct stint_global *g, struct paths_thread *t, uint64_t a)
{
	pk_tip(g, t, a);
	if (!paths_inside_out(g, t, a))
		t->outside = 1;
}

/* Every thread forgets its out range: a module with a compact trace's
 * probes joins, which may lie where a module without them was. */
static void paths_forget_out(struct stint_global *g)
{
	struct paths_thread *bs = (struct paths_thread *)__atomic_load_n(&g->paths.threads, __ATOMIC_ACQUIRE);
	uint32_t n = __atomic_load_n(&g->paths.nthreads, __ATOMIC_ACQUIRE);
	for (uint32_t i = 0; bs && i < n && i < PATHS_THREADS; i++)
		__atomic_store_n(&bs[i].out_size, 0, __ATOMIC_RELEASE);
}

/* Where the kernel's signal frame, at a handler's first %rsp, keeps the
 * interrupted registers: pretcode, then the ucontext (uc_flags, uc_link,
 * uc_stack: 40 bytes), then the sigcontext's r8..r15, rdi, rsi, rbp,
 * rbx, rdx, rax, rcx, rsp, rip. */
#define UC_GREG(i) (8 + 40 + 8 * (i))
#define UC_RDX UC_GREG(12)
#define UC_RIP UC_GREG(16)

/* The inline arm of a jcc (rewrite/tramp, pathsBit) between loading
 * the pending word and storing it back: mov %gs:8,%rdx ; mov (%rdx),%rcx
 * ; lea [1](%rcx,%rcx),%rcx ; mov %rcx,(%rdx). */
static const uint8_t arm_load[12] = {0x65, 0x48, 0x8b, 0x14, 0x25, STINT_PATHS_TNT_OFF, 0, 0, 0, 0x48, 0x8b, 0x0a};
static const uint8_t arm_taken[5] = {0x48, 0x8d, 0x4c, 0x09, 0x01};
static const uint8_t arm_not[4] = {0x48, 0x8d, 0x0c, 0x09};
static const uint8_t arm_store[3] = {0x48, 0x89, 0x0a};

static int bytes_at(uint64_t a, const uint8_t *b, size_t n)
{
	const uint8_t *p = (const uint8_t *)a;
	for (size_t i = 0; i < n; i++)
		if (p[i] != b[i])
			return 0;
	return 1;
}

/*
 * A signal came while a jcc's arm was between loading the pending word
 * and storing it back (rip at the lea or the store): the handler's
 * appends would be lost to the store. Do the arm's append now, and move
 * the interrupted rip past the store, so that it comes before the
 * handler's packets, as its branch did. Elsewhere an arm has either
 * appended or not begun.
 */
static void paths_complete_arm(struct stint_global *g, struct paths_thread *t, uint64_t sp)
{
	uint64_t *rip = (uint64_t *)(sp + UC_RIP), x = *rip;
	(void)t;
	int in_tramp = 0;
	uint32_t n = modules_n(g);
	for (uint32_t k = 0; k < n && !in_tramp; k++) {
		const struct gmodule *gm = &g->proc.modules[k];
		const struct stint_module *sm = (const struct stint_module *)gm->smod;
		in_tramp = sm && (sm->flags & STINT_MF_PATHS) && x >= gm->base + sm->tramp_lo && x < gm->base + sm->tramp_hi;
	}
	if (!in_tramp)
		return;
	uint64_t *word = (uint64_t *)*(const uint64_t *)(sp + UC_RDX);
	if (bytes_at(x - sizeof arm_load, arm_load, sizeof arm_load)) {
		int taken = bytes_at(x, arm_taken, sizeof arm_taken);
		if (!taken && !bytes_at(x, arm_not, sizeof arm_not))
			return;
		*word = *word << 1 | (uint64_t)taken;
		*rip = x + (taken ? sizeof arm_taken : sizeof arm_not) + sizeof arm_store;
		return;
	}
	if (bytes_at(x, arm_store, sizeof arm_store) &&
	    ((bytes_at(x - sizeof arm_taken, arm_taken, sizeof arm_taken) &&
	      bytes_at(x - sizeof arm_taken - sizeof arm_load, arm_load, sizeof arm_load)) ||
	     (bytes_at(x - sizeof arm_not, arm_not, sizeof arm_not) &&
	      bytes_at(x - sizeof arm_not - sizeof arm_load, arm_load, sizeof arm_load)))) {
		*word = *(const uint64_t *)(sp + UC_GREG(14)); /* the value in %rcx */
		*rip = x + sizeof arm_store;
	}
}

/* A function entry at src, its return address ret; sp is the program's
 * %rsp there. A signal handler (its return address the restorer) is an
 * ASYNC even when the thread was outside instrumented code (a vDSO call,
 * a library without probes): it comes back there at ASYNC_END, outside. */
static void paths_entry(struct stint_global *g, struct paths_thread *t, uint64_t src, uint64_t ret, uint64_t sp)
{
	/* a tail call enters another function with the frame of the last
	 * handler or callback (Go's cgoSigtramp jumps to sigtramp): the
	 * same entry, said already */
	int same = (t->async && t->saved_sp[t->async - 1] == sp) || t->sync_sp == sp;
	/* a handler: its return address the restorer */
	int handler = !same && (t->outside || st_top(t) != ret) && t->async < PATHS_ASYNC && is_restorer(g, ret);
	/* a callback the runtime did not see leave (a ret without a probe);
	 * a return address below mmap_min_addr is none: a PLT0 stub's entry
	 * finds the relocation index the PLT entry pushed */
	int away = !same && !paths_inside(g, ret) && ret >= 65536;
	if ((t->outside || away) && !handler) {
		/* called from code without probes (known to be outside, or left
		 * unseen through a ret without a probe): where it returns to
		 * tells the decoder where a ret without a probe goes */
		pk_op(g, t, PK_SYNC_CALL, src, ret, 2);
		t->last_ip = src;
		t->outside = 0;
		t->sync_sp = sp;
		return;
	}
	if (!handler)
		return; /* a call the stack saw, or not a handler */
	/* the interrupted rip is in the signal frame's ucontext (pretcode,
	 * then uc_flags, uc_link, uc_stack, then sigcontext with rip at
	 * 16 * 8) */
	uint64_t at = *(const uint64_t *)(sp + UC_RIP);
	if (t->outside) {
		at = 0; /* it was outside: where it goes on is for a later probe to say */
	} else if (!paths_inside(g, at)) {
		paths_complete_arm(g, t, sp);
		at = 0; /* in a trampoline or the runtime: right after the last event */
	}
	t->saved_rip[t->async] = *(const uint64_t *)(sp + UC_RIP);
	t->saved_sp[t->async] = sp;
	t->saved_outside[t->async++] = t->outside;
	pk_op(g, t, PK_ASYNC, at, src, 2);
	t->last_ip = src;
	t->outside = 0;
}

/* A ret at src to a; sp is the program's %rsp there. */
static void paths_ret(struct stint_global *g, struct paths_thread *t, uint64_t a, uint64_t sp)
{
	if (st_top(t) == a) {
		st_pop(t, 1);
		pk_bit(g, t, 1);
		return;
	}
	if (t->async && is_restorer(g, a)) {
		st_unwind(t, a);
		if (!paths_redirected(g, t, a, sp)) {
			pk_op(g, t, PK_ASYNC_END, a, 0, 1);
			t->last_ip = a;
			t->outside = t->saved_outside[t->async - 1];
		}
		t->async--;
		return;
	}
	st_unwind(t, a);
	paths_leave(g, t, a);
}

/*
 * A signal handler's ret to the restorer a (sp: the program's %rsp, the
 * signal frame's ucontext above it) where the handler changed the rip
 * the thread goes on at: Go's asynchronous preemption, or its sigpanic,
 * pushes the interrupted rip and resumes at a function of its own, a
 * call the thread never made. ASYNC_TO says where, and the return
 * address pushed (0: none seen); the thread is outside unless that is
 * instrumented code. False when the rip is the interrupted one.
 */
static int paths_redirected(struct stint_global *g, struct paths_thread *t, uint64_t a, uint64_t sp)
{
	uint64_t rip = *(const uint64_t *)(sp + UC_RIP), was = t->saved_rip[t->async - 1];
	if (rip == was)
		return 0;
	uint64_t rsp = *(const uint64_t *)(sp + UC_GREG(15));
	uint64_t ret = rsp && *(const uint64_t *)rsp == was ? was : 0;
	uint64_t v[3] = {a, rip, ret};
	pk_opv(g, t, PK_ASYNC_TO, v, 3);
	t->last_ip = rip;
	t->outside = !paths_inside(g, rip);
	return 1;
}

/*
 * What inline appends may take before the runtime runs again, in units
 * of STINT_PATHS_ROOM_UNIT bytes: up to a PSB's being due and to 32
 * bytes before the chunk's end (pk_room's), none while a PSB is due or
 * without a chunk. Set each time the runtime hands the key back; only
 * the inline appends, which count it down, move the cursor meanwhile.
 */
static void paths_set_room(struct paths_thread *t)
{
	uint64_t room = 0;
	if (t->chunk && !t->psb) {
		uint8_t *lim = t->psb_at + PATHS_PSB_EVERY;
		if (lim > t->end - 32)
			lim = t->end - 32;
		if (t->cur < lim)
			room = (uint64_t)(lim - t->cur) / STINT_PATHS_ROOM_UNIT;
	}
	t->room = room;
}

/*
 * The probe path of a compact complete trace: probe p of module m fired
 * with value v (destination or return address); entry_sp is
 * stint_probe_entry's %rsp.
 */
static void paths_record(struct stint_global *g, struct stint_module *m, struct stint_probe *p, uint64_t v, uint64_t entry_sp)
{
	uint64_t src = m->base + p->src;
	if (UNLIKELY(__atomic_load_n(&W()->alive, __ATOMIC_ACQUIRE) != 1))
		fork_child_reopen(g); /* a forked child: its own trace and paths file */
	struct paths_thread *t = paths_self(g, src);
	if (!t || !t->chunk)
		return;
	if (UNLIKELY(t->busy || t->key == STINT_PATHS_KEY_TIP)) {
		/* a signal handler's probe while this thread appends (here, or
		 * an indirect jmp's TIP inline): its path is lost; the next
		 * probe to get here says so and resynchronises */
		t->nested++;
		return;
	}
	t->busy = 1;
	t->key = 1; /* a signal handler's arms call in meanwhile (and find the thread busy) */
	if (UNLIKELY(g->per.budget_on)) {
		/* a new period: the gate may have been closed since this thread's
		 * last probe, and what ran then is not in the trace */
		uint32_t gen = __atomic_load_n(&g->per.gate_closed, __ATOMIC_ACQUIRE) >> 1;
		if (gen != t->gen && t->appended) {
			pk_op(g, t, PK_LOST, 0, 0, 1);
			t->curmod = 0;
			st_clear(t);
			t->async = 0;
			t->outside = 0;
			pk_sync(g, t, src);
		}
		t->gen = gen;
	}
	uint64_t before = t->appended;
	if (m->flags & STINT_MF_CALLS) {
		t->outside = 0; /* no walk: every probe says where it is */
		paths_calls_event(g, t, m, p, src, v);
	} else {
		before = paths_walk_event(g, t, p, src, v, entry_sp);
	}
	/* how far the thread got, should it die now (with the bits then:
	 * bits appended later without a probe of this kind make it stale) */
	t->tail[1] = *t->tnt;
	*t->tail = t->appended == before && t->chunk ? src : 0; /* a probe whose packet found no room got nowhere */
	if (UNLIKELY(t->nested)) {
		__atomic_fetch_add(&g->paths.nested, t->nested, __ATOMIC_RELAXED);
		pk_op(g, t, PK_LOST, t->nested, 0, 1);
		t->curmod = 0;
		t->nested = 0;
		st_clear(t);
		t->async = 0;
		t->outside = 1; /* the next probe says where the thread is */
	}
	t->busy = 0;
	paths_set_room(t);
	/* inline appends are for a thread with a known %fs base, without a
	 * budget; outside instrumented code, only its resume probe's pop */
	if (!t->fs || g->per.budget_on || !t->chunk)
		t->key = 1; /* (no chunk: its recording stopped; an inline bit would shift its pending word past 64) */
	else
		t->key = t->outside ? t->fs + STINT_PATHS_KEY_OUT : t->fs;
}

/*
 * A compact branch trace's probe p at src, value v: a PSB when one is
 * due, then the probe's packets. Returns the thread's count of appended
 * packets and bits after the PSB.
 */
static uint64_t paths_walk_event(struct stint_global *g, struct paths_thread *t, struct stint_probe *p, uint64_t src, uint64_t v, uint64_t entry_sp)
{
	if (UNLIKELY(t->psb || t->cur - t->psb_at >= PATHS_PSB_EVERY))
		paths_psb(g, t, p, src, v);
	uint64_t before = t->appended;
	if (p->kind == STINT_K_RESUME) {
		if (t->outside) {
			if (st_top(t) == src)
				st_pop(t, 1); /* back from the call on top */
			else
				pk_sync(g, t, src);
			t->outside = 0;
		}
	} else if (p->kind == STINT_K_ENTRY) {
		paths_entry(g, t, src, v, entry_sp + CTX_SP_OFF);
	} else {
		if (UNLIKELY(t->outside)) {
			pk_sync(g, t, src); /* back in where no probe announced it */
			t->outside = 0;
		}
		paths_event(g, t, p, src, v, entry_sp + CTX_SP_OFF);
	}
	return before;
}

/*
 * A call chain's probe (STINT_MF_CALLS) p at src, value v (a ret's return
 * address, an indirect call's destination): its own address, and where
 * the call stack cannot tell, its destination. A PSB (the stack emptied)
 * starts each chunk and follows every PATHS_PSB_EVERY bytes.
 */
static void paths_calls_event(struct stint_global *g, struct paths_thread *t, const struct stint_module *m, const struct stint_probe *p, uint64_t src,
			      uint64_t v)
{
	if (UNLIKELY(t->psb || t->cur - t->psb_at >= PATHS_PSB_EVERY))
		pk_psb(g, t, src);
	/* each packet below names src, in m: the module SITE packets index */
	t->curmod = (uint64_t)m;
	switch (p->kind) {
	case STINT_K_CALL:
		if (!(p->flags & STINT_PF_NOPUSH))
			st_push(t, src + (p->rets >> 28));
		pk_tip(g, t, src);
		break;
	case STINT_K_IND_CALL:
		st_push(t, src + (p->rets >> 28));
		pk_tip(g, t, src);
		pk_tip(g, t, v);
		(void)paths_inside_out(g, t, v); /* its module joins the table, and may be the out range */
		break;
	case STINT_K_RET:
		if (st_top(t) == v) {
			st_pop(t, 1);
			pk_tip_op(g, t, PK_RET_TIP, src);
		} else {
			st_unwind(t, v);
			pk_tip(g, t, src);
			pk_tip(g, t, v);
			(void)paths_inside_out(g, t, v);
		}
		break;
	}
}

/*
 * Once per chunk and every PATHS_PSB_EVERY bytes, a place to
 * resynchronise at: PSB (src), the call stack emptied. Only right
 * before a packet or bit of the probe's own (a jcc or mark without
 * FLUSH, an indirect branch without FLUSH, a ret without FLUSH), so
 * that a decoder in step reads it exactly where the runtime wrote it
 * (it then empties its stack too and goes on); and not while outside
 * instrumented code or in a signal handler. A decoder that lost the
 * thread's place (at a branch without a probe) finds it again there.
 */
static void paths_psb(struct stint_global *g, struct paths_thread *t, const struct stint_probe *p, uint64_t src, uint64_t v)
{
	switch (p->kind) {
	case STINT_K_JCC_TAKEN:
	case STINT_K_JCC_NOT_TAKEN:
	case STINT_K_RET:
		if (v == STINT_PATHS_FLUSH)
			return;
		break;
	case STINT_K_IND_JMP:
		if ((p->flags & STINT_PF_PREDICT) && v == STINT_PATHS_FLUSH)
			return;
		break;
	case STINT_K_IND_CALL:
		break;
	default:
		return;
	}
	if (t->outside || t->async)
		return;
	pk_psb(g, t, src);
}

/* A PSB at src: the call stack emptied, the next one due in
 * PATHS_PSB_EVERY bytes. */
static void pk_psb(struct stint_global *g, struct paths_thread *t, uint64_t src)
{
	t->psb = 0;
	pk_op(g, t, PK_PSB, src, 0, 1);
	t->psb_at = t->cur;
	t->last_ip = src;
	st_clear(t);
}

/* The packets of branch probe p at src, value v; sp is the program's
 * %rsp at the probe. */
static void paths_event(struct stint_global *g, struct paths_thread *t, const struct stint_probe *p, uint64_t src, uint64_t v, uint64_t sp)
{
	switch (p->kind) {
	case STINT_K_JCC_TAKEN:
	case STINT_K_JCC_NOT_TAKEN:
		if (v == STINT_PATHS_FLUSH)
			pk_flush(g, t); /* an arm appended its bit inline and found the word full */
		else
			pk_bit(g, t, p->kind == STINT_K_JCC_TAKEN);
		break;
	case STINT_K_CALL:
		st_push(t, src + (p->rets >> 28));
		break;
	case STINT_K_IND_CALL:
		st_push(t, src + (p->rets >> 28));
		paths_leave(g, t, v);
		break;
	case STINT_K_IND_JMP:
		if (p->flags & STINT_PF_PREDICT) {
			/* src - p->src: the module's base */
			if (v == STINT_PATHS_FLUSH) {
				pk_flush(g, t); /* its bit is in, inline, and the word was full */
				break;
			}
			if (v == src - p->src + p->dst) {
				pk_bit(g, t, 1); /* where it most likely goes */
				break;
			}
		}
		paths_leave(g, t, v);
		break;
	case STINT_K_RET:
		if (v == STINT_PATHS_FLUSH)
			pk_flush(g, t); /* the ret popped and appended its bit inline, and found the word full */
		else
			paths_ret(g, t, v, sp);
		break;
	}
}
