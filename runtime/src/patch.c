/*
 * patch.c - writing code: retargeting a trampoline's arm, restoring a
 * patch's original bytes (one atomic store, or the jmp-to-self sequence
 * for a patch that straddles a word), and making the pages the runtime
 * writes private at load.
 */
#include "stint.h"

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
static int restore_sync(struct stint_global *g, uint64_t addr, const uint8_t *orig, uint32_t len, int at_start)
{
	if (len > 16)
		return 0;
	uint64_t all = ~0ULL, old = 0;
	long masked = sys_call4(SYS_rt_sigprocmask, S_SIG_SETMASK, (long)&all, (long)&old, 8);
	if (!sys_failed(masked) && sw_alone(g)) {
		/* The program has one thread, this one, and its signals are
		 * blocked: nothing can run these bytes while they are written,
		 * so no jmp-to-self and no membarrier (the off-switch's self mode
		 * writes its sync sites so), whatever the patch's length or
		 * alignment: a recorded patch left in place would keep its
		 * detour, and a direct call among them would be emulated on
		 * every run, every return above it mispredicted. */
		write_alone(addr, orig, len);
		sys_call4(SYS_rt_sigprocmask, S_SIG_SETMASK, (long)&old, 0, 8);
		return 1;
	}
	if (!at_start || len < 3 || (addr & 7) == 7 || !g->proc.sync_core) {
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

/*
 * Write len bytes of code at addr that no thread can be running: a
 * module's during its initialisation, before anything of it has run (a
 * library that dlopen has not returned yet is no different), or a sync
 * site while the program has one thread, written by that thread
 * (self mode). No jmp-to-self and no membarrier, even for bytes
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

/* Write n bytes of code at addr as a restore does: plain stores while
 * the module initialises (alone), else one atomic store or the
 * jmp-to-self sequence. 1 if written. */
static int code_write(uint64_t addr, const uint8_t *b, uint32_t n, int at_start, int alone)
{
	if (alone) {
		write_alone(addr, b, n);
		return 1;
	}
	return stint_restore_atomic(addr, b, n) || restore_sync(G(), addr, b, n, at_start);
}

/*
 * The taken probe of the jcc whose not-taken probe p just recorded, if
 * that is all patch pt still waits for and the jcc is a rel32 one: a
 * direct probe of the same site beside p in the table, not recorded,
 * not an edge probe's, with its arm still on its thunk. Else 0.
 */
static struct stint_probe *half_taken(struct stint_module *m, uint64_t base, const struct stint_patch *pt, struct stint_probe *p)
{
	if (!p || p->kind != STINT_K_JCC_NOT_TAKEN || !(pt->flags & STINT_PATCH_RESTORABLE) ||
	    G()->sw.on || p->src < pt->addr || p->src + 2 > pt->addr + pt->len)
		return 0;
	const uint8_t *op = pt->orig + (p->src - pt->addr);
	if (op[0] != 0x0f || (op[1] & 0xf0) != 0x80 || pt->len > 16 || p->src + 6 > pt->addr + 16)
		return 0;
	struct stint_probe *first = (struct stint_probe *)(base + m->probes_vaddr), *last = first + m->nprobes;
	for (struct stint_probe *t = p - 1; t <= p + 1; t += 2)
		if (t >= first && t < last && t->src == p->src && t->kind == STINT_K_JCC_TAKEN && t->patch == p->patch &&
		    (t->flags & (STINT_PF_DIRECT | STINT_PF_DELEG)) == STINT_PF_DIRECT && t->arm && t->dst &&
		    !__atomic_load_n(&t->state, __ATOMIC_ACQUIRE))
			return t;
	return 0;
}

/* The original 6 bytes of the rel32 jcc whose taken probe is t, in
 * patch pt: its opcode from the patch's original bytes, its rel32 from
 * t's destination (bytes past the patch are not in pt->orig). */
static void jcc_orig(const struct stint_patch *pt, const struct stint_probe *t, uint8_t b[6])
{
	b[0] = pt->orig[t->src - pt->addr];
	b[1] = pt->orig[t->src - pt->addr + 1];
	int32_t rel = (int32_t)((int64_t)t->dst - (int64_t)(t->src + 6));
	s_memcpy(b + 2, &rel, 4);
}

/*
 * A jcc's not-taken outcome is recorded and only its taken one is left
 * (patch_done): rather than keep the site's detour, whose every run
 * costs two jumps, give the site its original bytes with the jcc's rel32
 * aimed at the taken probe's thunk (which records, then jumps where the
 * jcc would). The common side then runs as the original code. Only a
 * rel32 jcc, and only where the bytes past the patch are still the
 * jcc's own (no other patch holds them). Once the taken outcome records,
 * patch_done writes the jcc back whole.
 */
static int patch_half(struct stint_module *m, uint64_t base, struct stint_patch *pt, struct stint_probe *p, int alone)
{
	struct stint_probe *t = half_taken(m, base, pt, p);
	if (!t)
		return 0;
	uint64_t site = base + pt->addr, jcc = base + p->src;
	uint32_t at = (uint32_t)(p->src - pt->addr), n = at + 6 > pt->len ? at + 6 : pt->len;
	int64_t orig_rel = (int64_t)t->dst - (int64_t)(p->src + 6);
	uint64_t thunk = base + t->arm + 4 + (uint64_t)(int64_t)*(const int32_t *)(base + t->arm);
	int64_t rel = (int64_t)(thunk - (jcc + 6));
	if (orig_rel != (int32_t)orig_rel || rel != (int32_t)rel)
		return 0;
	uint8_t b[16], want[6];
	s_memcpy(b, pt->orig, pt->len);
	jcc_orig(pt, t, want);
	for (uint32_t i = pt->len; i < n; i++) {
		b[i] = ((const uint8_t *)site)[i];
		if (b[i] != want[i - at])
			return 0; /* not the jcc's own byte: another patch's */
	}
	s_memcpy(b + at + 2, &(int32_t){(int32_t)rel}, 4);
	__atomic_fetch_or(&pt->flags, STINT_PATCH_HALVED, __ATOMIC_ACQ_REL);
	if (code_write(site, b, n, (pt->flags & STINT_PATCH_AT_START) != 0, alone))
		return 1;
	__atomic_fetch_and(&pt->flags, (uint8_t)~STINT_PATCH_HALVED, __ATOMIC_ACQ_REL);
	return 0;
}

/* The whole jcc of halved patch pt back (its taken probe t recorded):
 * left as it is if no store can write it, still right (the thunk jumps
 * where the jcc would). */
static void patch_unhalve(uint64_t base, const struct stint_patch *pt, const struct stint_probe *t, int alone)
{
	if (t->src < pt->addr || t->src + 2 > pt->addr + pt->len)
		return;
	uint8_t b[6];
	jcc_orig(pt, t, b);
	code_write(base + t->src, b, 6, 1, alone);
}

/* Probe p of patch idx recorded; restore the patch when it was the last
 * (a jcc's taken probe may be left: patch_half). alone: the module's
 * initialisation (write_alone). */
static void patch_done(struct stint_module *m, uint64_t base, uint32_t idx, struct stint_probe *p, int alone)
{
	if (idx == STINT_NO_PATCH || idx >= m->npatches)
		return;
	struct stint_patch *pt = (struct stint_patch *)(base + m->patches_vaddr) + idx;
	/* never below 0: an int3 site retired hot (trap_retire) counts as
	 * done while its probes may still record */
	uint32_t left = __atomic_load_n(&pt->remaining, __ATOMIC_ACQUIRE);
	do {
		if (!left)
			return;
	} while (!__atomic_compare_exchange_n(&pt->remaining, &left, left - 1, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE));
	left--;
	if (left == 1)
		patch_half(m, base, pt, p, alone);
	if (left != 0)
		return;
	if (!alone && (pt->flags & STINT_PATCH_SYNC) && sw_owns(m, idx)) {
		sw_done_sync(m, pt, idx); /* the off-switch restores it (the off-switch) */
		return;
	}
	if (__atomic_load_n(&pt->flags, __ATOMIC_ACQUIRE) & STINT_PATCH_HALVED) {
		if (p && p->kind == STINT_K_JCC_TAKEN)
			patch_unhalve(base, pt, p, alone);
		return;
	}
	if (pt->flags & STINT_PATCH_RESTORABLE) {
		code_write(base + pt->addr, pt->orig, pt->len, (pt->flags & STINT_PATCH_AT_START) != 0, alone);
		if (pt->flags & STINT_PATCH_READER)
			sw_done_stamp(m, idx);
	}
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
 * Make the pages of [lo, hi) readable, writable and executable. The range
 * may hold pages nothing maps (the gap between an executable's two code
 * segments: node's first is a page and a half, and the next starts a page
 * later), on which mprotect fails the whole call with ENOMEM: the range
 * is then done in halves, and an unmapped page is left alone. 0, or -1
 * when a mapped page cannot be changed.
 */
static int page_rwx(uint64_t lo, uint64_t hi)
{
	lo &= ~(uint64_t)4095;
	hi = (hi + 4095) & ~(uint64_t)4095;
	if (hi <= lo)
		return 0;
	long r = sys_call3(SYS_mprotect, (long)lo, (long)(hi - lo), S_PROT_READ | S_PROT_WRITE | S_PROT_EXEC);
	if (!sys_failed(r))
		return 0;
	if (r != -S_ENOMEM)
		return -1;
	if (hi - lo == 4096)
		return 0; /* not mapped */
	uint64_t mid = lo + (((hi - lo) / 2) & ~(uint64_t)4095);
	return page_rwx(lo, mid) | page_rwx(mid, hi);
}
