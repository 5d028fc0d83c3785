/*
 * sw_batch.c - the period thread's batches: switching the listed sites
 * on and off, readees in passes between membarriers, sync sites with
 * threads parked; and what patch_done leaves to the off-switch.
 */
#include "stint.h"

/* Write entry e's bytes (on: the patch, else the original) now, or for a
 * STINT_PATCH_SYNC one start the sequence (sw_sync_finish ends it).
 * Returns 1 for a started sequence. The state must be one only the
 * period thread moves (SW_BUSY or SW_NEXT). */
static int sw_put(struct sw_mod *s, struct sw_entry *e, const struct stint_patch *pt, int on)
{
	static const uint8_t spin[2] = {0xeb, 0xfe};
	if (e->sync && s->nparked < s->capfew) {
		stint_restore_atomic(e->addr, spin, 2);
		__atomic_store_n(&s->state[e->idx], SW_SYNC, __ATOMIC_RELEASE);
		s->parked[s->nparked++] = (uint32_t)(e - s->e);
		return 1;
	}
	if (e->sync) {
		/* cannot happen (one slot per sync patch): leave it as it was */
		__atomic_store_n(&s->state[e->idx], on ? SW_OFF : SW_ON, __ATOMIC_RELEASE);
		return 0;
	}
	sw_write(pt, e, on);
	if (on)
		s->misses[e->idx] = 0;
	else
		sw_stamp(G(), s, pt, e->idx);
	__atomic_store_n(&s->state[e->idx], on ? SW_ON : SW_OFF, __ATOMIC_RELEASE);
	return 0;
}

/* Entry e's pairs as the reader (by_read = 0) or as the read patch. */
static const struct stint_read *sw_epairs(const struct stint_module *m, const struct sw_entry *e, int by_read, uint32_t *n)
{
	*n = by_read ? e->nd : e->nr;
	return (const struct stint_read *)(m->base + m->reads_vaddr) + (by_read ? e->d0 : e->r0);
}

/* Whether listed patch r holds its original bytes, from its state: off
 * or dead, or never listed (a reader's patch_done may have restored it). */
static int sw_orig_now(const struct stint_module *m, struct sw_mod *s, uint32_t r)
{
	uint8_t st = __atomic_load_n(&s->state[r], __ATOMIC_ACQUIRE);
	return st == SW_OFF || st == SW_DEAD || (st == SW_COLD && sw_is_orig(m, r));
}

/* Whether every reader of readee e has its original bytes now (what
 * sw_readers_off ends with, and sw_readees checks again once it has
 * taken e). */
static int sw_readers_orig(const struct stint_module *m, struct sw_mod *s, const struct sw_entry *e)
{
	uint32_t n;
	const struct stint_read *rd = sw_epairs(m, e, 1, &n);
	for (uint32_t k = 0; k < n; k++)
		if (rd[k].reader < m->npatches && !sw_orig_now(m, s, rd[k].reader))
			return 0;
	return 1;
}

/* Whether every readee that entry e reads is patched now. (A readee's
 * own patch_done never restores it, so its state says.) */
static int sw_readees_on(const struct stint_module *m, struct sw_mod *s, const struct sw_entry *e)
{
	uint32_t n;
	const struct stint_read *rd = sw_epairs(m, e, 0, &n);
	for (uint32_t k = 0; k < n; k++) {
		if (rd[k].read >= m->npatches)
			continue;
		uint8_t st = __atomic_load_n(&s->state[rd[k].read], __ATOMIC_ACQUIRE);
		if (st == SW_OFF || st == SW_DEAD)
			return 0;
	}
	return 1;
}

/* Whether readee e is worth re-applying: it or a reader still has a
 * probe to record. */
static int sw_needed(const struct stint_module *m, const struct stint_patch *pts, const struct sw_entry *e)
{
	if (__atomic_load_n(&pts[e->idx].remaining, __ATOMIC_ACQUIRE))
		return 1;
	uint32_t n;
	const struct stint_read *rd = sw_epairs(m, e, 1, &n);
	for (uint32_t k = 0; k < n; k++)
		if (rd[k].reader < m->npatches && __atomic_load_n(&pts[rd[k].reader].remaining, __ATOMIC_ACQUIRE))
			return 1;
	return 0;
}

/*
 * Switching readee idx off: make sure each of its readers holds its
 * original bytes. Listed readers on are switched off, readers never
 * listed are listed (fresh, as if they had switched themselves off) and
 * switched off; a reader that is itself a readee waits for its own pass.
 * Returns 0 if a reader is still on, 1 if every reader is off but one
 * only since the last barrier (sw_barrier), 2 if a barrier has passed
 * since the last got its original bytes; *forced counts the readers this
 * switched off.
 */
static int sw_readers_off(struct stint_global *g, const struct stint_module *m, struct sw_mod *s, const struct sw_entry *re, int flags, uint64_t *forced)
{
	uint32_t n;
	const struct stint_read *rd = sw_epairs(m, re, 1, &n);
	const struct stint_patch *pts = (const struct stint_patch *)(m->base + m->patches_vaddr);
	int all = 1;
	for (uint32_t k = 0; k < n; k++) {
		uint32_t r = rd[k].reader;
		if (r >= m->npatches || sw_orig_now(m, s, r))
			continue;
		all = 0;
		const struct stint_patch *pt = &pts[r];
		if ((flags & SWB_KEEP_FRESH) && s->fresh[r])
			return 0; /* kept on, and so is what it reads */
		if ((pt->flags & (STINT_PATCH_READ | STINT_PATCH_SYNC)) || !(pt->flags & STINT_PATCH_SWITCH))
			continue; /* its own pass (the rewriter never lets a sync patch read a readee) */
		uint8_t st = __atomic_load_n(&s->state[r], __ATOMIC_ACQUIRE);
		if (st == SW_COLD) {
			struct sw_entry *e = sw_add(g, (struct stint_module *)m, s, r, 0, 1, 0);
			if (!e)
				continue;
			/* listed patched, so on, and then switched off: the batch's
			 * count (sw_timed) takes it off the listed sites on again */
			sw_count_on(g, 1);
			__atomic_store_n(&e->ready, 1, __ATOMIC_RELEASE);
			sw_write(pt, e, 0);
			sw_stamp(g, s, pt, r);
			__atomic_store_n(&s->state[r], SW_OFF, __ATOMIC_RELEASE);
			(*forced)++;
		} else if ((st == SW_ON || st == SW_PEND) &&
			   __atomic_compare_exchange_n(&s->state[r], &st, SW_BUSY, 0, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED)) {
			stint_restore_atomic(m->base + pt->addr, pt->orig, pt->len);
			sw_stamp(g, s, pt, r);
			__atomic_store_n(&s->state[r], SW_OFF, __ATOMIC_RELEASE);
			(*forced)++;
		}
	}
	if (!all && !sw_readers_orig(m, s, re))
		return 0;
	uint32_t synced = __atomic_load_n(&g->sw.synced, __ATOMIC_ACQUIRE);
	int covered = 1;
	for (uint32_t k = 0; k < n; k++)
		if (rd[k].reader < m->npatches)
			covered &= __atomic_load_n(&s->offep[rd[k].reader], __ATOMIC_ACQUIRE) < synced;
	return covered ? 2 : 1;
}

/* The entries a readees' pass visits: the batch's SW_PEND readees (pend)
 * or every sync and readee entry. */
static uint32_t sw_nvisit(const struct sw_mod *s, int pend)
{
	return pend ? s->nwork : sw_nfew(s);
}

static struct sw_entry *sw_visit(struct sw_mod *s, int pend, uint32_t k)
{
	return pend ? &s->e[s->work[k]] : sw_few(s, k);
}

/*
 * A batch of sites waiting in SW_PEND (their bits in the modules' pend
 * maps): start the sequence for the sync ones (sw_put) and put the
 * readees on the modules' work lists for sw_readees. Returns the sites
 * parked; *changed counts them.
 */
static uint64_t sw_drain(struct stint_global *g, uint64_t *changed, int self, int *selfpend)
{
	uint64_t nsync = 0;
	for (struct sw_walk it = sw_walk(g); sw_next(&it);) {
		const struct stint_module *m = it.m;
		const struct stint_patch *pts = it.pts;
		uint32_t n = it.n;
		struct sw_mod *s = it.s;
		s->nwork = 0;
		uint32_t words = (m->npatches + 63) / 64;
		for (uint32_t w = 0; w < words; w++) {
			if (!__atomic_load_n(&s->pend[w], __ATOMIC_RELAXED))
				continue;
			uint64_t v = __atomic_exchange_n(&s->pend[w], 0, __ATOMIC_ACQ_REL);
			while (v) {
				uint32_t idx = w * 64 + (uint32_t)__builtin_ctzll(v);
				v &= v - 1;
				uint32_t k = __atomic_load_n(&s->eidx[idx], __ATOMIC_ACQUIRE);
				if (!k || k > n)
					continue;
				struct sw_entry *e = &s->e[k - 1];
				uint8_t st = SW_PEND;
				if (!__atomic_load_n(&e->ready, __ATOMIC_ACQUIRE) || __atomic_load_n(&s->state[idx], __ATOMIC_ACQUIRE) != st)
					continue;
				if (e->read) {
					if (s->nwork < s->capfew)
						s->work[s->nwork++] = k - 1;
				} else if (e->sync && self == SW_MODE_SELF) {
					*selfpend = 1; /* the program thread's (sw_self_batch) */
				} else if (e->sync && sw_sync_mine(g, self, 0, &pts[idx]) &&
					   __atomic_compare_exchange_n(&s->state[idx], &st, SW_BUSY, 0, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED)) {
					nsync += sw_put(s, e, &pts[idx], 0);
					(*changed)++;
				} else if (e->sync && (self == SW_MODE_HOLD || self == SW_MODE_PARK)) {
					/* stays on (sw_sync_closed holds its arms) */
					__atomic_compare_exchange_n(&s->state[idx], &st, SW_ON, 0, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED);
				}
			}
		}
	}
	return nsync;
}

/* After a batch of waiting sites: readees that had to stay in SW_PEND (a
 * reader could not be switched yet) wait for the next one. */
static void sw_requeue(struct stint_global *g)
{
	for (struct sw_walk it = sw_walk(g); sw_next(&it);) {
		struct sw_mod *s = it.s;
		for (uint32_t k = 0; k < s->nwork; k++) {
			struct sw_entry *e = &s->e[s->work[k]];
			if (__atomic_load_n(&s->state[e->idx], __ATOMIC_ACQUIRE) == SW_PEND)
				sw_pend_mark(s, e->idx);
		}
		s->nwork = 0;
	}
}

/*
 * The readees' passes of a batch (see the top of the file): on, re-apply
 * listed readees (those a reader still needs) whose own readees are on;
 * off, switch off listed readees whose readers are all off, switching
 * readers off first. Each pass decides (state SW_NEXT), serialises every
 * core, then writes; a chain takes a pass per link. Returns the readees
 * changed; *forced counts readers switched off on the way.
 */
static uint64_t sw_readees(struct stint_global *g, int on, int flags, uint64_t *forced)
{
	uint64_t changed = 0;
	int pend = (flags & SWB_PEND_ONLY) != 0;
	if (!g->proc.sync_core)
		return 0; /* nothing can serialise the cores: readees stay patched */
	for (int pass = 0; pass < 8; pass++) {
		uint64_t marked = 0, nsync = 0;
		int barrier = 0;
		for (struct sw_walk it = sw_walk(g); sw_next(&it);) {
			const struct stint_module *m = it.m;
			const struct stint_patch *pts = it.pts;
			struct sw_mod *s = it.s;
			if (!m->nreads)
				continue;
			uint32_t nv = sw_nvisit(s, pend);
			for (uint32_t k = 0; k < nv; k++) {
				struct sw_entry *e = sw_visit(s, pend, k);
				if (!e || !e->read)
					continue;
				uint8_t *sp = &s->state[e->idx];
				uint8_t st = __atomic_load_n(sp, __ATOMIC_ACQUIRE);
				if (on) {
					if (st != SW_OFF || (e->reader && !sw_readees_on(m, s, e)))
						continue;
					if (!sw_needed(m, pts, e)) {
						__atomic_compare_exchange_n(sp, &st, SW_DEAD, 0, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED);
						continue;
					}
				} else {
					if ((flags & SWB_PEND_ONLY) ? st != SW_PEND : st != SW_ON && st != SW_PEND)
						continue;
					if ((flags & SWB_KEEP_FRESH) && s->fresh[e->idx])
						continue;
					int r = sw_readers_off(g, m, s, e, flags, forced);
					if (!r)
						continue;
					if (UNLIKELY(g->test.on))
						test_stall(S_CLOCK_MONOTONIC, g->test.readee_stall_ns);
					barrier |= r == 1;
				}
				if (__atomic_compare_exchange_n(sp, &st, SW_NEXT, 0, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED))
					marked++;
			}
		}
		if (!marked)
			break;
		/* off: what the readers' old bytes read is no longer decoded
		 * anywhere (unless a barrier has passed since they changed) */
		if (barrier)
			sw_barrier(g);
		for (struct sw_walk it = sw_walk(g); sw_next(&it);) {
			const struct stint_module *m = it.m;
			const struct stint_patch *pts = it.pts;
			struct sw_mod *s = it.s;
			if (!m->nreads)
				continue;
			uint32_t nv = sw_nvisit(s, pend);
			for (uint32_t k = 0; k < nv; k++) {
				struct sw_entry *e = sw_visit(s, pend, k);
				if (e && e->read && __atomic_load_n(&s->state[e->idx], __ATOMIC_ACQUIRE) == SW_NEXT) {
					if (!on && !sw_readers_orig(m, s, e)) {
						/* a reader went on after sw_readers_off looked: the
						 * program thread had held this readee (on or
						 * waiting) to switch it on (ret_hold_readees) and
						 * let it go again. None can now (SW_NEXT): it
						 * stays on, or the reader's pun would read the
						 * original bytes and jump anywhere */
						__atomic_store_n(&s->state[e->idx], SW_ON, __ATOMIC_RELEASE);
						continue;
					}
					nsync += sw_put(s, e, &pts[e->idx], on);
					changed++;
				}
			}
		}
		if (nsync)
			sw_sync_finish(g, on);
		else if (on)
			sw_barrier(g); /* the readees' new bytes are seen before a reader (or the next link) goes on */
	}
	return changed;
}

/*
 * A switch-off (the window's end, or the budget spent): the readees on
 * go to SW_PEND, for a batch of waiting sites to switch off after their
 * readers. Their passes serialise every core, which costs much more than
 * the stores (IPIs; far more on a VM), so they are left out of the batch
 * the budget reserves for and come as the sites that run after the
 * budget is spent do: their cost is charged at the period's end. At the
 * window's end (SWB_KEEP_FRESH) a readee stays on while a reader is
 * kept on.
 */
static void sw_readees_defer(struct stint_global *g, int flags)
{
	int any = 0;
	for (struct sw_walk it = sw_walk(g); sw_next(&it);) {
		const struct stint_module *m = it.m;
		struct sw_mod *s = it.s;
		if (!m->nreads)
			continue;
		uint32_t nf = sw_nfew(s);
		for (uint32_t k = 0; k < nf; k++) {
			struct sw_entry *e = sw_few(s, k);
			if (!e || !e->read)
				continue;
			uint8_t *sp = &s->state[e->idx];
			uint8_t st = SW_ON;
			if (__atomic_load_n(sp, __ATOMIC_ACQUIRE) != st)
				continue;
			if (flags & SWB_KEEP_FRESH) {
				int kept = s->fresh[e->idx];
				uint32_t nd;
				const struct stint_read *rd = sw_epairs(m, e, 1, &nd);
				for (uint32_t j = 0; j < nd && !kept; j++)
					kept = rd[j].reader < m->npatches && s->fresh[rd[j].reader];
				if (kept)
					continue;
			}
			if (__atomic_compare_exchange_n(sp, &st, SW_PEND, 0, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED)) {
				sw_pend_mark(s, e->idx);
				any = 1;
			}
		}
	}
	if (any)
		sw_request(g, SW_REQ_SYNC);
}

/*
 * Whether every probe of listed site e reads its destination from a slot
 * the program does not write (STINT_PF_SLOT: a GOT entry or RELRO data,
 * such as a PLT stub's jmp *GOT(%rip)) and has recorded the slot's
 * present value (it is in the probe's inline cache, which holds only
 * recorded destinations). Such a site can bring no new outcome while the
 * slot keeps its value, so a switch-on leaves it off. The dynamic
 * linker's lazy binding, or a program that changes the slot after all,
 * gives it a new value: the next switch-on sees that and re-applies the
 * patch, and its trampoline records the new destination.
 */
static int sw_slot_held(const struct stint_module *m, const struct sw_entry *e)
{
	if (!e->np)
		return 0;
	const struct stint_probe *pr = (const struct stint_probe *)(m->base + m->probes_vaddr);
	for (uint32_t j = e->p0; j < e->p0 + e->np; j++) {
		const struct stint_probe *p = &pr[j];
		if (j >= m->nprobes || !(p->flags & STINT_PF_SLOT) || !__atomic_load_n(&p->state, __ATOMIC_ACQUIRE))
			return 0;
		if (!probe_cached(p, __atomic_load_n((const uint64_t *)(m->base + p->dst), __ATOMIC_RELAXED)))
			return 0;
	}
	return 1;
}

/*
 * Switch every listed site of every module on (re-apply the patch where
 * a probe still has something to record) or off (original bytes); flags
 * (SWB_*) narrow it. Readees are switched after their readers (off) or
 * before them (on): sw_readees.
 * Returns the number of sites changed. The period thread's work.
 */
static uint64_t sw_batch(struct stint_global *g, int on, int flags)
{
	uint64_t changed = 0, nsync = 0, forced = 0;
	int open_only = flags & SWB_OPEN_ONLY, keep_fresh = flags & SWB_KEEP_FRESH, pend_only = flags & SWB_PEND_ONLY;
	uint64_t all = ~0ULL, old = 0;
	long masked = sys_call4(SYS_rt_sigprocmask, S_SIG_SETMASK, (long)&all, (long)&old, 8);
	int self = sw_self_begin(g, !pend_only && !open_only), selfpend = 0;
	if (on && !open_only && !pend_only) {
		sw_take(g, SW_UNMUTE);
		sw_take(g, SW_REWATCH);
	}
	if (on && !open_only)
		changed += sw_readees(g, 1, flags, &forced);
	if (pend_only)
		nsync = sw_drain(g, &changed, self, &selfpend);
	/* a period's switch-on stops at g->sw.stop_tsc (budget_gates_start) */
	uint64_t stop = on && !open_only ? __atomic_load_n(&g->sw.stop_tsc, __ATOMIC_RELAXED) : 0;
	for (struct sw_walk it = sw_walk(g); !pend_only && !(stop && rdtsc() > stop) && sw_next(&it);) {
		const struct stint_module *m = it.m;
		const struct stint_patch *pts = it.pts;
		uint32_t n = it.n;
		struct sw_mod *s = it.s;
		for (uint32_t k = 0; k < n; k++) {
			struct sw_entry *e = &s->e[k];
			if (!__atomic_load_n(&e->ready, __ATOMIC_ACQUIRE) || e->read || (open_only && !e->open) ||
			    (keep_fresh && s->fresh[e->idx]))
				continue;
			uint8_t *sp = &s->state[e->idx];
			uint8_t st = __atomic_load_n(sp, __ATOMIC_ACQUIRE);
			if (on ? st != SW_OFF : st != SW_ON && st != SW_PEND)
				continue;
			const struct stint_patch *pt = &pts[e->idx];
			if (e->sync && !sw_sync_mine(g, self, on, pt))
				continue; /* no membarrier, or not the period thread's to write (sw_self_begin) */
			if (on && __atomic_load_n(&pt->remaining, __ATOMIC_ACQUIRE) == 0) {
				__atomic_compare_exchange_n(sp, &st, SW_DEAD, 0, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED);
				continue;
			}
			if (on && e->reader && !sw_readees_on(m, s, e))
				continue; /* what it reads is off: it stays off */
			if (on && e->open && sw_slot_held(m, e))
				continue; /* its slot holds a recorded destination */
			if (on && __atomic_load_n(&e->cold, __ATOMIC_RELAXED))
				continue; /* new code's to switch on (sw_cold_load) */
			if (!__atomic_compare_exchange_n(sp, &st, SW_BUSY, 0, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED))
				continue;
			changed++;
			nsync += sw_put(s, e, pt, on);
			if (UNLIKELY(g->test.on) && on && !open_only)
				test_stall(S_CLOCK_MONOTONIC, g->test.switch_stall_ns);
			if (stop && rdtsc() > stop)
				break;
		}
	}
	if (nsync)
		sw_sync_finish(g, on);
	sw_self_end(g, self, on && !pend_only, keep_fresh && !pend_only, (!pend_only && !open_only) || selfpend);
	if (pend_only)
		changed += sw_readees(g, 0, flags, &forced);
	else if (!on)
		sw_readees_defer(g, flags);
	if (pend_only)
		sw_requeue(g);
	if (!sys_failed(masked))
		sys_call4(SYS_rt_sigprocmask, S_SIG_SETMASK, (long)&old, 0, 8);
	return changed + forced;
}

/* patch_done restored reader patch idx of m for good: stamp it. */
static void sw_done_stamp(struct stint_module *m, uint32_t idx)
{
	struct stint_global *g = G();
	struct sw_mod *s = g->sw.on ? sw_of(g, m, idx) : 0;
	if (s)
		sw_stamp(g, s, (const struct stint_patch *)(m->base + m->patches_vaddr) + idx, idx);
}

/* patch_done: the last probe of sync patch pt (index idx of m) recorded,
 * and the off-switch owns it (sw_owns). With several threads, ask the
 * period thread to restore it now (a batch of waiting sites), as
 * patch_done would, instead of at the window's end; in self mode the
 * program's thread does at the window's end. A site threads cannot be
 * parked at stays on with several threads (sw_sync_mine): no batch. */
static void sw_done_sync(struct stint_module *m, const struct stint_patch *pt, uint32_t idx)
{
	struct stint_global *g = G();
	struct sw_mod *s = g->sw.on ? sw_of(g, m, idx) : 0;
	if (!s || __atomic_load_n(&g->sw.self, __ATOMIC_ACQUIRE) || !g->proc.sync_core || !sw_parkable(pt))
		return;
	sw_pend_on(g, s, idx);
}

/* Whether the off-switch owns patch idx of m now (listed): patch_done
 * then leaves a STINT_PATCH_SYNC patch to it, since two writers of the
 * jmp-to-self sequence at once could leave a torn instruction. */
static int sw_owns(struct stint_module *m, uint32_t idx)
{
	struct stint_global *g = G();
	struct sw_mod *s = g->sw.on ? sw_of(g, m, idx) : 0;
	return s && __atomic_load_n(&s->state[idx], __ATOMIC_ACQUIRE) != SW_COLD;
}
