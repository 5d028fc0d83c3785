/*
 * rets.c - a call's return still to see (STINT_MF_RETS).
 *
 * A direct call has one outcome and retires once it is recorded: in the
 * run, or at the next run's load from the log. The return to the call's
 * next instruction is the outcome of one of the callee's ret sites, which
 * are open-ended and so on only during the windows (the off-switch). A call
 * that runs outside them returns unrecorded, and once the call is retired
 * nothing new runs to bring the ret sites back on: on sqlite3 such
 * returns were half of the events two runs missed. The rewriter lists per
 * direct call the ret probes its callee may return through (rewrite/
 * rets.go). With that list:
 *
 *  - ret_expect: a call recorded now whose return is not recorded yet
 *    (in this run or the log) switches those ret sites on, from the
 *    program thread, before the callee runs. A ret site that runs while
 *    the gate is closed calls once to be switched off, and records its
 *    outcome then (sw_closed_call): the return is recorded either way.
 *  - At load (log_load_module) a logged call whose return is not logged
 *    is not retired: it stays patched, its arm calling, in state
 *    PROBE_RETWATCH. Each time it runs, ret_watched does what ret_expect
 *    does; once the return is recorded, or after RET_WATCH_MAX runs that
 *    did not bring it (a callee that longjmps, or whose rets cannot be
 *    switched from here), the call retires as it would have at load.
 *
 * The rewriter also lists, per function, its own sites: open-ended
 * probes (rets, indirect jumps and calls; the rets of the functions it
 * tail-jumps to too) and, where the list stays short enough, its jccs,
 * in the rets field of its other direct probes (call length 0). When one
 * records a new outcome after the window, new code is running, and what
 * follows it in the function may be new too (own_sites, sw_after_record
 * in sw_budget.c).
 *
 * Plain switchable ret sites, readers and readees are switched on here
 * (a reader while the patches it reads are held patched:
 * ret_hold_readees; a readee with a membarrier before it counts as on);
 * a sync site only while the program has one thread (ret_switch_sync,
 * as a self batch would), else it is the period thread's to write
 * (the off-switch), and is left as it is.
 */
#include "stint.h"

#define RET_WATCH_MAX 16 /* runs of a PROBE_RETWATCH call (the off-switch), counted in pad0[0] */

/* The list a stint_probe.rets word names (n probe indices), or 0. */
static const uint32_t *rets_list(const struct stint_module *m, uint64_t base, uint32_t word, uint32_t *n)
{
	uint32_t off = (word & 0x0fffffff) - 1;
	if (off >= m->nrets)
		return 0;
	const uint32_t *w = (const uint32_t *)(base + m->rets_vaddr) + off;
	if (!w[0] || w[0] > m->nrets - off - 1)
		return 0;
	*n = w[0];
	return w + 1;
}

/* The ret probe list of direct call probe p of m (n of them, probe
 * indices) and the call's module-relative return address; 0 if none. */
static const uint32_t *call_rets(const struct stint_module *m, uint64_t base, const struct stint_probe *p, uint32_t *n, uint64_t *ret)
{
	if (!(m->flags & STINT_MF_RETS) || !m->rets_vaddr || !(p->flags & STINT_PF_DIRECT) || !(p->rets & 0x0fffffff) ||
	    !(p->rets >> 28))
		return 0;
	*ret = p->src + (p->rets >> 28);
	return rets_list(m, base, p->rets, n);
}

/* The own list of direct probe p of m (any site but a call: the word's
 * call length is 0): its function's own sites, n of them; 0 if none. */
static const uint32_t *own_sites(const struct stint_module *m, const struct stint_probe *p, uint32_t *n)
{
	if (!(m->flags & STINT_MF_RETS) || !m->rets_vaddr || !(p->flags & STINT_PF_DIRECT) || !(p->rets & 0x0fffffff) ||
	    (p->rets >> 28))
		return 0;
	return rets_list(m, m->base, p->rets, n);
}

/* Whether (k0, k1) is in the in-run set (hash_add's probe sequence; the
 * set never loses an entry, so an empty slot ends the search). */
static int hash_has(struct stint_global *g, uint64_t k0, uint64_t k1)
{
	uint64_t h = mix(k0, k1);
	for (uint32_t i = 0; i < HASH_SEQ; i++) {
		const uint64_t *e = &g->hash[2 * hash_slot(h, i)];
		uint64_t e0 = __atomic_load_n(&e[0], __ATOMIC_ACQUIRE);
		if (e0 == 0)
			return 0;
		if (e0 == k0 && __atomic_load_n(&e[1], __ATOMIC_ACQUIRE) == k1)
			return 1;
	}
	return 0;
}

/* Whether one of the n ret probes l of m has recorded the return to
 * module-relative ret: in this run, or in the log. */
static int ret_seen(struct stint_global *g, const struct stint_module *m, uint64_t base, const uint32_t *l, uint32_t n, uint64_t ret)
{
	struct stint_probe *pr = (struct stint_probe *)(base + m->probes_vaddr);
	int logged = g->log.on && log_nonempty(g) && m->build_id_len;
	uint64_t bid = logged && m->module_id < MAX_MODULES ? g->proc.modules[m->module_id].bidhash : 0;
	for (uint32_t k = 0; k < n; k++) {
		if (l[k] >= m->nprobes)
			continue;
		const struct stint_probe *r = &pr[l[k]];
		if (__atomic_load_n(&r->state, __ATOMIC_RELAXED) && probe_cached(r, base + ret))
			return 1;
		if (hash_has(g, (uint64_t)r, base + ret))
			return 1;
		uint64_t k0, k1;
		if (logged) {
			logkey(bid, r->src, r->kind, bid, ret, &k0, &k1);
			if (log_has(g, m, k0, k1))
				return 1;
		}
	}
	return 0;
}

#define RET_READEES_MAX 8

/* Give the first nheld readees of reader idx their states back. */
static void ret_release_readees(const struct stint_module *m, struct sw_mod *s, uint32_t idx, const uint8_t *held, uint32_t nheld)
{
	uint32_t n;
	const struct stint_read *rd = sw_pairs(m, idx, 0, &n);
	for (uint32_t k = 0; k < nheld && k < n; k++)
		__atomic_store_n(&s->state[rd[k].read], held[k], __ATOMIC_RELEASE);
}

/* Reader idx of m is about to be switched on by a program thread: hold
 * each patch it reads in SW_BUSY, from a state in which it is patched
 * (held[] keeps the states to go back to). The period thread switches a
 * readee off only from SW_ON or SW_PEND (to SW_NEXT, after finding its
 * readers off: sw_readees), so while the readees are held it cannot
 * take them away under the reader; a reader it finds SW_BUSY counts as
 * on, so it waits for its next pass.
 *
 * A readee that is off (most are instructions evicted for the reader,
 * switched off with it at the window's end) is switched on here, as the
 * period thread's readees' pass would: a one-store patch that reads
 * nothing itself, written, then every core serialised (membarrier: with
 * only this thread running, no other CPU is interrupted; a program with
 * several running threads pays their IPIs, within the budget's charge)
 * before the reader's pun may read its bytes. It goes back as SW_ON, for the
 * period thread's next switch-off to take off after its readers. 0
 * (nothing held) if a readee is busy, about to change, or cannot be
 * switched from here. */
static int ret_hold_readees(struct stint_global *g, const struct stint_module *m, struct sw_mod *s, uint32_t idx, uint8_t *held, uint32_t *nheld)
{
	uint32_t n;
	const struct stint_read *rd = sw_pairs(m, idx, 0, &n);
	const struct stint_patch *pts = (const struct stint_patch *)(m->base + m->patches_vaddr);
	*nheld = 0;
	if (!n || n > RET_READEES_MAX)
		return 0;
	int wrote = 0;
	for (uint32_t k = 0; k < n; k++) {
		uint32_t r = rd[k].read;
		uint8_t st = r < m->npatches ? __atomic_load_n(&s->state[r], __ATOMIC_ACQUIRE) : SW_DEAD;
		int patched = st == SW_ON || st == SW_PEND || (st == SW_COLD && !sw_is_orig(m, r));
		uint32_t ei = 0;
		int off = !patched && st == SW_OFF && g->proc.sync_core &&
			  !(pts[r].flags & (STINT_PATCH_SYNC | STINT_PATCH_READER)) &&
			  (ei = __atomic_load_n(&s->eidx[r], __ATOMIC_ACQUIRE)) != 0;
		int ok = (patched || off) &&
			 __atomic_compare_exchange_n(&s->state[r], &st, SW_BUSY, 0, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED);
		if (!ok) {
			ret_release_readees(m, s, idx, held, k);
			if (wrote)
				sync_core(); /* the readees written are seen before anything reads them */
			return 0;
		}
		held[k] = st;
		*nheld = k + 1;
		if (off) {
			sw_write(&pts[r], &s->e[ei - 1], 1);
			s->misses[r] = 0;
			sw_count_on(g, 1);
			__atomic_store_n(&g->sw.is_on, 1, __ATOMIC_RELEASE); /* the next switch-off must see it */
			held[k] = SW_ON;
			wrote = 1;
		}
	}
	if (wrote)
		sync_core();
	return 1;
}

/* The ret probe list of direct call probe p of m (n of them) when its
 * return is still to see: it has a list, STINT_RETS allows, and none of
 * them has recorded the return, in this run or in the log; else 0. */
static const uint32_t *ret_pending(struct stint_global *g, const struct stint_module *m, uint64_t base, const struct stint_probe *p, uint32_t *n)
{
	uint64_t ret;
	const uint32_t *l = g->sw.rets_on && p->rets ? call_rets(m, base, p, n, &ret) : 0;
	return l && !ret_seen(g, m, base, l, *n, ret) ? l : 0;
}

/* The sync sites among the n sites l of m that are off (and read by no
 * other patch): switched on here while the program has this one thread
 * (self mode), as a self batch would (sw_self_batch: under the self
 * batches' lock, signals blocked, so that no handler runs the bytes half
 * written). Not near the budget's end: the call is charged as any is
 * (call_charge), capped, and its three syscalls could take it past.
 * Returns how many it switched on. */
static uint32_t ret_switch_sync(struct stint_global *g, struct stint_module *m, const uint32_t *l, uint32_t n)
{
	if (!__atomic_load_n(&g->sw.self, __ATOMIC_ACQUIRE) ||
	    __atomic_load_n(&g->per.used_tsc, __ATOMIC_RELAXED) + sw_off_reserve(g) + 4 * g->per.charge_cap_tsc >=
		    __atomic_load_n(&g->per.budget_tsc, __ATOMIC_RELAXED) ||
	    !try_lock(&g->sw.self_lock))
		return 0;
	const struct stint_probe *pr = (const struct stint_probe *)(m->base + m->probes_vaddr);
	const struct stint_patch *pts = (const struct stint_patch *)(m->base + m->patches_vaddr);
	uint64_t all = ~0ULL, old = 0;
	long masked = sys_call4(SYS_rt_sigprocmask, S_SIG_SETMASK, (long)&all, (long)&old, 8);
	uint32_t on = 0;
	if (!sys_failed(masked) && sw_alone(g)) {
		for (uint32_t k = 0; k < n; k++) {
			if (l[k] >= m->nprobes)
				continue;
			uint32_t idx = pr[l[k]].patch;
			struct sw_mod *s = sw_of(g, m, idx);
			const struct stint_patch *pt = &pts[idx];
			if (!s || (pt->flags & (STINT_PATCH_SYNC | STINT_PATCH_READ)) != STINT_PATCH_SYNC ||
			    __atomic_load_n(&s->state[idx], __ATOMIC_ACQUIRE) != SW_OFF ||
			    __atomic_load_n(&pt->remaining, __ATOMIC_ACQUIRE) == 0)
				continue;
			uint32_t ei = __atomic_load_n(&s->eidx[idx], __ATOMIC_ACQUIRE);
			if (!ei)
				continue;
			const struct sw_entry *e = &s->e[ei - 1];
			write_alone(e->addr, e->code, e->len);
			__atomic_store_n(&s->state[idx], SW_ON, __ATOMIC_RELEASE);
			on++;
		}
	}
	unlock(&g->sw.self_lock);
	if (!sys_failed(masked))
		sys_call4(SYS_rt_sigprocmask, S_SIG_SETMASK, (long)&old, 0, 8);
	if (on) {
		sw_count_on(g, on);
		__atomic_store_n(&g->sw.is_on, 1, __ATOMIC_RELEASE); /* the next switch-off must see it */
	}
	return on;
}

/* Switch the n sites l of m (probe indices) on where this thread may
 * (those off now that are plain switchable sites, readers or readees;
 * sync sites in self mode). Returns how many of them are on after it. */
static uint32_t ret_switch_on(struct stint_global *g, struct stint_module *m, const uint32_t *l, uint32_t n)
{
	const struct stint_probe *pr = (const struct stint_probe *)(m->base + m->probes_vaddr);
	const struct stint_patch *pts = (const struct stint_patch *)(m->base + m->patches_vaddr);
	uint32_t on = 0, nsync = 0;
	for (uint32_t k = 0; k < n; k++) {
		if (l[k] >= m->nprobes)
			continue;
		uint32_t idx = pr[l[k]].patch;
		struct sw_mod *s = sw_of(g, m, idx);
		if (!s)
			continue;
		const struct stint_patch *pt = &pts[idx];
		uint8_t st = __atomic_load_n(&s->state[idx], __ATOMIC_ACQUIRE);
		if (st == SW_COLD || st == SW_ON || st == SW_PEND) {
			on++;
			continue;
		}
		/* a readee as ret_hold_readees switches one on: its readers
		 * stay off, and every core is serialised before the period
		 * thread may see it on and switch one of them on to read it */
		int read = (pt->flags & STINT_PATCH_READ) != 0;
		if (st == SW_OFF && (pt->flags & STINT_PATCH_SYNC) && !read)
			nsync++;
		if (st != SW_OFF || (pt->flags & STINT_PATCH_SYNC) || (read && !g->proc.sync_core))
			continue;
		uint32_t ei = __atomic_load_n(&s->eidx[idx], __ATOMIC_ACQUIRE);
		if (!ei || !__atomic_compare_exchange_n(&s->state[idx], &st, SW_BUSY, 0, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED))
			continue;
		uint8_t held[RET_READEES_MAX];
		uint32_t nheld = 0;
		if ((pt->flags & STINT_PATCH_READER) && !ret_hold_readees(g, m, s, idx, held, &nheld)) {
			__atomic_store_n(&s->state[idx], SW_OFF, __ATOMIC_RELEASE);
			continue;
		}
		sw_write(pt, &s->e[ei - 1], 1);
		if (read)
			sync_core(); /* (before the state says it is on) */
		__atomic_store_n(&s->state[idx], SW_ON, __ATOMIC_RELEASE);
		if (pt->flags & STINT_PATCH_READER)
			ret_release_readees(m, s, idx, held, nheld);
		sw_count_on(g, 1);
		__atomic_store_n(&g->sw.is_on, 1, __ATOMIC_RELEASE); /* the next switch-off must see it */
		on++;
	}
	if (nsync)
		on += ret_switch_sync(g, m, l, n);
	return on;
}

/* Probe p of m recorded now: if it is a direct call whose return is
 * still to see, switch the callee's ret sites on for it. */
static void ret_expect(struct stint_global *g, struct stint_module *m, const struct stint_probe *p)
{
	uint32_t n;
	const uint32_t *l = ret_pending(g, m, m->base, p, &n);
	if (l)
		ret_switch_on(g, m, l, n);
}

/* A run of watched call p (PROBE_RETWATCH): switch its callee's ret
 * sites on until its return is recorded, then retire it as the log would
 * have at load. */
static void ret_watched(struct stint_global *g, struct stint_module *m, struct stint_probe *p)
{
	uint32_t n;
	uint8_t *c = &p->pad0[0];
	const uint32_t *l = *c < RET_WATCH_MAX ? ret_pending(g, m, m->base, p, &n) : 0;
	if (l) {
		*c = (uint8_t)(*c + 1); /* racy counts are fine: a bound */
		if (ret_switch_on(g, m, l, n))
			return;
	}
	uint8_t w = PROBE_RETWATCH;
	if (!__atomic_compare_exchange_n(&p->state, &w, 1, 0, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED))
		return;
	retarget(m->base, p);
	patch_done(m, m->base, p->patch, p, 0);
}
