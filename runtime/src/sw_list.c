/*
 * sw_list.c - the off-switch (stint_abi.h): its lists of sites.
 *
 * While the budget is spent, a site whose patch is still in place costs
 * a trampoline detour on every execution even though its probe is
 * skipped: a jcc with one outcome left, a ret, an indirect branch. For
 * the patches flagged STINT_PATCH_SWITCH (restorable, one atomic store)
 * the runtime instead writes the original bytes back, so the program
 * runs its own code until the next period grants a budget, and then
 * writes the patch again. Two ways in:
 *
 *  - Warm sites: a site whose probe reached the runtime while patched
 *    goes on its module's list once (its patched bytes copied there).
 *    When the gate closes the period thread restores every listed site
 *    (sw_batch(g, 0)); when a period opens it re-applies them
 *    (sw_batch(g, 1)), except those whose probes have all recorded.
 *  - Cold sites (never seen while the gate was open): gate word 1 is
 *    STINT_GATE_SWITCH while the gate is closed, so such a site calls the
 *    runtime, which restores it there and then and lists it (sw_call).
 *    Each site does this at most once per closed stretch.
 *
 * Per listed patch a state byte says where it is; every transition is a
 * compare-and-swap through SW_BUSY, so the period thread and program
 * threads never write the same site's bytes at once. Patch bytes are
 * written with stint_restore_atomic (one locked store): a thread running
 * the site sees either the original instruction or the jump, both of
 * which are correct at any time. patch_done (all probes recorded) may
 * restore a listed site concurrently; a re-apply that races with it at
 * worst leaves a jump to a trampoline whose arms go straight to the
 * destinations, which the next switch-off removes for good.
 *
 * Readees (STINT_PATCH_READ, ABI 6): a patch whose bytes other patches'
 * puns read is written only by the period thread, in passes: switching
 * off, it first makes sure every reader holds its original bytes (it
 * switches listed readers off and lists and switches off readers never
 * seen), serialises every core, then restores the readee; switching on,
 * it re-applies readees before their readers, and a reader whose readee
 * is off stays off. Chains (a readee that reads another) take one pass
 * per link. A readee is listed when its own probe calls or when one of
 * its readers is listed (an evicted instruction has no probe).
 */
#include "stint.h"

/* A probe whose outcome an earlier run logged, at a site with an outcome
 * still to record (redlog.c, log_load_module), keeps calling the runtime
 * for this many runs of its logged outcome before its arm goes straight
 * through (sw_watched). */
#define SW_WATCH_MAX 16
/* ... and if those took at least this long, the site runs rarely enough
 * for its detour to cost next to nothing (under 1,600 runs a second): it
 * stays fresh, on after the windows, for its other outcome, with its arm
 * straight until the next period, which watches it again (a site cool at
 * start-up may run hot later). */
#define SW_WATCH_COOL_NS 10000000ULL

/* Set up a module's list (module init). 0 if the module has no switchable
 * patch or the memory cannot be had; its sites then step over their
 * probes while the gate is closed, as before ABI 5. */
static uint64_t sw_module_new(struct stint_module *m, uint64_t base)
{
	const struct stint_patch *pt = (const void *)(base + m->patches_vaddr);
	uint32_t n = 0, nfew = 0, nsync = 0, ncold = 0;
	for (uint32_t i = 0; i < m->npatches; i++)
		if ((pt[i].flags & STINT_PATCH_SWITCH) && pt[i].len && pt[i].len <= 16) {
			n++;
			nfew += (pt[i].flags & (STINT_PATCH_SYNC | STINT_PATCH_READ)) != 0;
			nsync += (pt[i].flags & STINT_PATCH_SYNC) != 0;
			ncold += (pt[i].flags & STINT_PATCH_COLD) != 0;
		}
	if (!n)
		return 0;
	if (nsync)
		__atomic_store_n(&G()->sw.has_sync, 1, __ATOMIC_RELEASE); /* self mode has work (sw_self_begin) */
	if (nsync && (m->flags & STINT_MF_PARK))
		__atomic_store_n(&G()->sw.park_ok, 1, __ATOMIC_RELEASE);
	uint64_t words = ((uint64_t)m->npatches + 63) / 64, pwords = ((uint64_t)m->nprobes + 63) / 64;
	uint64_t size = sizeof(struct sw_mod) + (uint64_t)n * sizeof(struct sw_entry) + 8 * (words + 3 * pwords) + 12 * (uint64_t)nfew +
			11 * (uint64_t)m->npatches;
	size = (size + 4095) & ~(uint64_t)4095;
	/* In huge pages where sites will be listed by the thousand (a first
	 * run lists each site that records, a plain log run each one with an
	 * outcome left, a --skip-covered one its cold sites at load), all
	 * over the per-patch arrays: each 4 KiB page a fault of about 11 us
	 * here. 'select 1' on libsqlite3, 21 interleaved rounds: a first
	 * run 45.0 -> 40.4 ms of task-clock, a --skip-covered rewrite with
	 * 1,309 cold sites 33.1 -> 26.7. One with few cold sites lists few,
	 * and a fresh huge page can cost the hypervisor as much as its small
	 * ones: 3 ms more on a retiring rewrite, which keeps small pages. */
	long a = anon_huge(size, !((m->flags & STINT_MF_LOGGED) && ncold < 256));
	if (sys_failed(a))
		return 0;
	struct sw_mod *s = (struct sw_mod *)a;
	s->map_size = size;
	s->cap = n;
	s->pend = (uint64_t *)&s->e[n];
	s->bell = &s->pend[words];
	s->cool = &s->bell[pwords];
	s->muted = &s->cool[pwords];
	s->few = (uint32_t *)&s->muted[pwords];
	s->capfew = nfew;
	s->work = &s->few[nfew];
	s->parked = &s->work[nfew];
	s->eidx = &s->parked[nfew];
	s->offep = &s->eidx[m->npatches];
	s->state = (uint8_t *)&s->offep[m->npatches];
	s->misses = s->state + m->npatches;
	s->fresh = s->misses + m->npatches;
	return (uint64_t)a;
}

/* The value of a module's gate word 1 while the gate is closed (see
 * gates_set). Without membarrier(SYNC_CORE) the sites that
 * need it could not be switched off when they call, and would call on
 * every execution: then closed means closed for all. */
static uint64_t sw_closed_word(struct stint_global *g, const struct gmodule *gm)
{
	return g->sw.on && gm->sw && g->proc.sync_core ? STINT_GATE_SWITCH : STINT_GATE_CLOSED;
}

/* The list of the module that patch idx of m belongs to, 0 if it has
 * none (or idx is not one of its patches). */
static struct sw_mod *sw_of(struct stint_global *g, const struct stint_module *m, uint32_t idx)
{
	uint32_t id = m->module_id;
	if (idx >= m->npatches || id >= MAX_MODULES)
		return 0;
	return (struct sw_mod *)__atomic_load_n(&g->proc.modules[id].sw, __ATOMIC_ACQUIRE);
}

/* Adjust the count of listed sites switched on (never below 0). */
static void sw_count_on(struct stint_global *g, int64_t d)
{
	uint64_t o = __atomic_load_n(&g->sw.listed_on, __ATOMIC_RELAXED), n;
	do
		n = d < 0 && o < (uint64_t)-d ? 0 : o + (uint64_t)d;
	while (!__atomic_compare_exchange_n(&g->sw.listed_on, &o, n, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED));
}

/* Write a listed patch's bytes: the original (on = 0) or the patch. */
static void sw_write(const struct stint_patch *pt, const struct sw_entry *e, int on)
{
	stint_restore_atomic(e->addr, on ? e->code : pt->orig, e->len);
}

/* The pairs in which patch idx of m is the reader (by_read = 0) or the
 * read patch (by_read = 1), *n of them (struct stint_read, ABI 6). */
static const struct stint_read *sw_pairs(const struct stint_module *m, uint32_t idx, int by_read, uint32_t *n)
{
	*n = 0;
	if (!m->nreads || !m->reads_vaddr)
		return 0;
	const struct stint_read *rd = (const struct stint_read *)(m->base + m->reads_vaddr) + (by_read ? m->nreads : 0);
	uint32_t lo = 0, hi = m->nreads;
	while (lo < hi) {
		uint32_t mid = lo + (hi - lo) / 2;
		if ((by_read ? rd[mid].read : rd[mid].reader) < idx)
			lo = mid + 1;
		else
			hi = mid;
	}
	uint32_t k = lo;
	while (k < m->nreads && (by_read ? rd[k].read : rd[k].reader) == idx)
		k++;
	*n = k - lo;
	return rd + lo;
}

/* Whether patch idx of m holds its original bytes now. */
static int sw_is_orig(const struct stint_module *m, uint32_t idx)
{
	const struct stint_patch *pt = (const struct stint_patch *)(m->base + m->patches_vaddr) + idx;
	const volatile uint8_t *b = (const volatile uint8_t *)(m->base + pt->addr);
	for (uint32_t j = 0; j < pt->len; j++)
		if (b[j] != pt->orig[j])
			return 0;
	return 1;
}

/* Reader patch idx (STINT_PATCH_READER) has its original bytes now,
 * written with a locked store (a full fence): stamp the epoch. */
static void sw_stamp(struct stint_global *g, struct sw_mod *s, const struct stint_patch *pt, uint32_t idx)
{
	if (pt->flags & STINT_PATCH_READER)
		__atomic_store_n(&s->offep[idx], __atomic_load_n(&g->sw.epoch, __ATOMIC_ACQUIRE), __ATOMIC_RELEASE);
}

/* Patch idx went to SW_PEND: note it for the period thread's next
 * batch of waiting sites (sw_batch, SWB_PEND_ONLY). */
static void sw_pend_mark(struct sw_mod *s, uint32_t idx)
{
	__atomic_fetch_or(&s->pend[idx / 64], 1ULL << (idx % 64), __ATOMIC_RELEASE);
}

/* End watched probe p's watch (PROBE_WATCHED, log_load_module): its arm
 * goes straight through. 0 if it was not watched. */
static int sw_unwatch(struct stint_module *m, struct stint_probe *p)
{
	uint8_t w = PROBE_WATCHED;
	if (!__atomic_compare_exchange_n(&p->state, &w, 1, 0, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED))
		return 0;
	retarget(m->base, p);
	return 1;
}

/* A site on (SW_ON) that only the period thread may switch off: leave it
 * waiting in SW_PEND and ask for a batch of waiting sites. */
static void sw_pend_on(struct stint_global *g, struct sw_mod *s, uint32_t idx)
{
	uint8_t st = SW_ON;
	if (__atomic_compare_exchange_n(&s->state[idx], &st, SW_PEND, 0, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED)) {
		sw_pend_mark(s, idx);
		sw_request(g, SW_REQ_SYNC);
	}
}

/*
 * List patch idx of m (state SW_COLD, its rewriter's patch in place):
 * take its state to SW_BUSY and fill an entry with its patched bytes.
 * The caller stores the state the site is left in. 0 if another thread
 * took it first (or the list is full, which cannot happen).
 */
static struct sw_entry *sw_add(struct stint_global *g, struct stint_module *m, struct sw_mod *s, uint32_t idx, int open, int fresh,
				const struct stint_probe *p)
{
	uint8_t st = SW_COLD;
	if (!__atomic_compare_exchange_n(&s->state[idx], &st, SW_BUSY, 0, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED))
		return 0;
	uint32_t k = __atomic_fetch_add(&s->n, 1, __ATOMIC_ACQ_REL);
	if (k >= s->cap) {
		__atomic_store_n(&s->state[idx], SW_DEAD, __ATOMIC_RELEASE); /* leave it patched */
		return 0;
	}
	const struct stint_patch *pt = (const struct stint_patch *)(m->base + m->patches_vaddr) + idx;
	struct sw_entry *e = &s->e[k];
	__atomic_store_n(&s->eidx[idx], k + 1, __ATOMIC_RELEASE);
	e->addr = m->base + pt->addr;
	e->idx = idx;
	e->len = pt->len;
	e->open = open;
	e->sync = (pt->flags & STINT_PATCH_SYNC) != 0;
	e->read = (pt->flags & STINT_PATCH_READ) != 0;
	e->reader = (pt->flags & STINT_PATCH_READER) != 0;
	e->nr = e->nd = 0;
	e->np = 0;
	e->p0 = 0;
	if (p) {
		/* the site's probes are adjacent in the table (a jcc has two) */
		const struct stint_probe *pr = (const struct stint_probe *)(m->base + m->probes_vaddr);
		uint32_t a = (uint32_t)(p - pr), b = a + 1;
		while (a > 0 && pr[a - 1].patch == idx)
			a--;
		while (b < m->nprobes && pr[b].patch == idx && b - a < 255)
			b++;
		e->p0 = a;
		e->np = (uint8_t)(b - a);
	}
	if (e->read || e->reader) {
		/* looked up once: the batches walk them often */
		const struct stint_read *base_rd = (const struct stint_read *)(m->base + m->reads_vaddr);
		uint32_t nr, nd;
		const struct stint_read *r = sw_pairs(m, idx, 0, &nr), *d = sw_pairs(m, idx, 1, &nd);
		e->nr = nr > 0xffff ? 0xffff : (uint16_t)nr;
		e->nd = nd > 0xffff ? 0xffff : (uint16_t)nd;
		e->r0 = r ? (uint32_t)(r - base_rd) : 0;
		e->d0 = d ? (uint32_t)(d - base_rd) : 0;
	}
	if (fresh)
		s->fresh[idx] = 1;
	if (open)
		__atomic_fetch_add(&g->sw.listed_open, 1, __ATOMIC_RELAXED);
	s_memcpy(e->code, (const void *)e->addr, pt->len);
	if (e->sync || e->read) {
		uint32_t f = __atomic_fetch_add(&s->nfew, 1, __ATOMIC_ACQ_REL);
		if (f < s->capfew)
			__atomic_store_n(&s->few[f], k + 1, __ATOMIC_RELEASE);
	}
	__atomic_fetch_add(&g->sw.listed, 1, __ATOMIC_RELAXED);
	return e;
}

/* Reader idx of m was listed or switched off (off): list the readees it
 * reads, and when it is off ask the period thread to switch them off. */
static void sw_readees_of(struct stint_global *g, struct stint_module *m, struct sw_mod *s, uint32_t idx, int off)
{
	uint32_t n;
	const struct stint_read *rd = sw_pairs(m, idx, 0, &n);
	int ask = 0;
	for (uint32_t k = 0; k < n; k++) {
		uint32_t r = rd[k].read;
		if (r >= m->npatches)
			continue;
		struct sw_entry *e = sw_add(g, m, s, r, 0, 0, 0);
		if (e) {
			__atomic_store_n(&e->ready, 1, __ATOMIC_RELEASE);
			__atomic_store_n(&s->state[r], off ? SW_PEND : SW_ON, __ATOMIC_RELEASE);
			__atomic_fetch_add(&g->sw.listed_on, 1, __ATOMIC_RELAXED);
			if (off)
				sw_pend_mark(s, r);
			else
				__atomic_store_n(&g->sw.is_on, 1, __ATOMIC_RELEASE);
			ask |= off;
			continue;
		}
		uint8_t st = SW_ON;
		if (off && __atomic_compare_exchange_n(&s->state[r], &st, SW_PEND, 0, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED)) {
			sw_pend_mark(s, r);
			ask = 1;
		}
	}
	if (ask)
		sw_request(g, SW_REQ_SYNC);
}

/* Whether threads can be parked at sync patch pt while the rest of it is
 * written (sw_put): it starts at its instruction's first byte, where
 * arriving threads wait on "jmp .", and that 2-byte store is atomic. The
 * rewriter flags other straddling patches sync too, for self mode only. */
static int sw_parkable(const struct stint_patch *pt)
{
	return (pt->flags & STINT_PATCH_AT_START) && pt->len >= 3 && (pt->addr & 15) != 15;
}

/*
 * Whether a sync site that should go off is the program thread's to
 * switch (self mode) or held on (several threads, and parking them is
 * not allowed: sw_self_begin's SW_MODE_HOLD): either way the period
 * thread does not park threads for it now.
 */
static int sw_no_park(struct stint_global *g, const struct stint_patch *pt)
{
	return __atomic_load_n(&g->sw.self, __ATOMIC_ACQUIRE) || !__atomic_load_n(&g->sw.park_ok, __ATOMIC_ACQUIRE) ||
	       !sw_parkable(pt);
}

/*
 * A runtime call from probe p of a switchable site: list the site if it
 * is not listed yet and, when closed, restore its original bytes.
 * closed_gate: the call came while the gate was closed (word 1's
 * STINT_GATE_SWITCH at work): the site is then listed as fresh, which
 * keeps it on after the window until it has been called with the gate
 * open, so that its first execution while probes are on is recorded as
 * if it had never been switched. Returns 1 if it restored the bytes.
 * Sites the period thread must write (STINT_PATCH_SYNC, _READ) are left
 * to it in SW_PEND.
 */
static int sw_call(struct stint_global *g, struct stint_module *m, const struct stint_probe *p, int closed, int closed_gate)
{
	uint32_t idx = p->patch;
	struct sw_mod *s = sw_of(g, m, idx);
	if (!s)
		return 0;
	uint64_t base = m->base;
	const struct stint_patch *pt = (const struct stint_patch *)(base + m->patches_vaddr) + idx;
	if (!(pt->flags & STINT_PATCH_SWITCH))
		return 0;
	if (!closed_gate && s->fresh[idx])
		s->fresh[idx] = 0; /* called with the gate open: an ordinary listed site now */
	int deferred = (pt->flags & (STINT_PATCH_SYNC | STINT_PATCH_READ)) != 0;
	int read = (pt->flags & STINT_PATCH_READ) != 0;
	int off = 0, changed = 0;
	uint8_t st = __atomic_load_n(&s->state[idx], __ATOMIC_ACQUIRE);
	if (st == SW_COLD) {
		struct sw_entry *e = sw_add(g, m, s, idx, !(p->flags & STINT_PF_DIRECT), closed_gate, p);
		if (!e)
			return 0;
		changed = 1;
		/* patch_done lowers remaining before it restores: if it is 0
		 * now, the copy may hold original bytes; never re-apply it (a
		 * readee stays: its readers may need it) */
		int dead = !read && __atomic_load_n(&((struct stint_patch *)pt)->remaining, __ATOMIC_ACQUIRE) == 0;
		__atomic_store_n(&e->ready, 1, __ATOMIC_RELEASE);
		if (dead && e->sync) {
			/* patch_done restored it (or cannot, and it stays patched) */
			__atomic_store_n(&s->state[idx], SW_DEAD, __ATOMIC_RELEASE);
			return 0;
		}
		if (closed && deferred && e->sync && !read && sw_no_park(g, pt)) {
			/* the program thread's to write (self mode), or held on */
			__atomic_store_n(&s->state[idx], SW_ON, __ATOMIC_RELEASE);
			__atomic_fetch_add(&g->sw.listed_on, 1, __ATOMIC_RELAXED);
			sw_sync_closed(g, m, s, p, idx);
			return 0;
		}
		if (closed && deferred) {
			/* cannot be written here: the period thread will (sw_batch) */
			__atomic_store_n(&s->state[idx], SW_PEND, __ATOMIC_RELEASE);
			__atomic_fetch_add(&g->sw.listed_on, 1, __ATOMIC_RELAXED);
			sw_pend_mark(s, idx);
			sw_request(g, SW_REQ_SYNC);
			sw_mute(m, s, (struct stint_probe *)p);
			return 0;
		}
		off = dead || closed;
		if (off) {
			sw_write(pt, e, 0);
			sw_stamp(g, s, pt, idx);
		}
		__atomic_store_n(&s->state[idx], dead ? SW_DEAD : closed ? SW_OFF : SW_ON, __ATOMIC_RELEASE);
		if (!off) {
			__atomic_fetch_add(&g->sw.listed_on, 1, __ATOMIC_RELAXED);
			__atomic_store_n(&g->sw.is_on, 1, __ATOMIC_RELEASE); /* the next switch-off must see it */
		}
	} else if (st == SW_ON && closed && deferred && !read && (pt->flags & STINT_PATCH_SYNC) && sw_no_park(g, pt)) {
		sw_sync_closed(g, m, s, p, idx);
		return 0;
	} else if (st == SW_ON && closed && deferred) {
		sw_pend_on(g, s, idx);
		sw_mute(m, s, (struct stint_probe *)p);
		return 0;
	} else if (st == SW_PEND && closed) {
		sw_mute(m, s, (struct stint_probe *)p); /* another arm of a waiting site */
		return 0;
	} else if (st == SW_ON && closed &&
		   __atomic_compare_exchange_n(&s->state[idx], &st, SW_BUSY, 0, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED)) {
		stint_restore_atomic(base + pt->addr, pt->orig, pt->len);
		sw_stamp(g, s, pt, idx);
		__atomic_store_n(&s->state[idx], SW_OFF, __ATOMIC_RELEASE);
		sw_count_on(g, -1);
		off = changed = 1;
	}
	if (changed && (pt->flags & STINT_PATCH_READER))
		sw_readees_of(g, m, s, idx, off);
	return off;
}

/*
 * A call from open-ended probe p recorded nothing (recorded = 0) or a new
 * destination: returns 1 when the site has missed SW_MISS_MAX times this
 * period and should be switched off.
 */
static int sw_missed(struct stint_global *g, struct stint_module *m, const struct stint_probe *p, int recorded)
{
	uint32_t idx = p->patch;
	struct sw_mod *s = sw_of(g, m, idx);
	if (!s)
		return 0;
	uint8_t *c = &s->misses[idx];
	if (recorded) {
		*c = 0;
		return 0;
	}
	uint8_t v = *c; /* racy counts are fine: a heuristic */
	if (v < 255)
		*c = ++v;
	return v >= SW_MISS_MAX;
}

/*
 * A call from a watched probe (PROBE_WATCHED): a site the log half-retired
 * at load whose logged outcome ran again. The site is listed fresh, so
 * windows leave it on: its other outcome, if it ever comes, is what this
 * run is for. That is cheap for a site that rarely runs and costly for
 * one the program keeps running (its detour on every run, outside the
 * windows too: sqlite3's logged runs spent 12% of their samples in such
 * trampolines). So the logged arm keeps calling for its first
 * SW_WATCH_MAX runs; a site that gets there quickly (the program keeps
 * running it) is ordinary from then on: its arm goes straight through,
 * the window's end switches it off (now, if the window is over), and its
 * other outcome is left to the windows. One that took SW_WATCH_COOL_NS
 * or more stays fresh with its arm straight: cheap to keep on.
 */
static void sw_watched(struct stint_global *g, struct stint_module *m, struct stint_probe *p)
{
	if (p->flags & STINT_PF_DELEG) {
		/* its outcome is another probe's (the rewriter's
		 * STINT_PF_DELEG): the site is listed fresh on its first run,
		 * as log_load_module lists a half-logged site at load */
		struct sw_mod *s0 = sw_of(g, m, p->patch);
		if (s0 && __atomic_load_n(&s0->state[p->patch], __ATOMIC_ACQUIRE) == SW_COLD)
			sw_call(g, m, p, 0, 1);
	}
	uint8_t *c = &p->pad0[0];
	uint8_t v = *c; /* racy counts are fine: a heuristic */
	if (v < 255)
		*c = ++v;
	if (v == 1)
		p->cache2 = rdtsc(); /* a direct probe's cache2 is free */
	if (v < SW_WATCH_MAX || !sw_unwatch(m, p))
		return;
	struct sw_mod *s = sw_of(g, m, p->patch);
	if (!s)
		return;
	uint32_t i = (uint32_t)(p - (struct stint_probe *)(m->base + m->probes_vaddr));
	if (rdtsc() - p->cache2 >= ns_to_tsc(g, SW_WATCH_COOL_NS) && p->cache && i < m->nprobes) {
		/* cool: stays fresh, its arm straight until sw_take */
		__atomic_fetch_or(&s->cool[i / 64], 1ULL << (i % 64), __ATOMIC_RELEASE);
		return;
	}
	s->fresh[p->patch] = 0;
	if (__atomic_load_n(&g->sw.window_over, __ATOMIC_ACQUIRE) &&
	    __atomic_load_n(&g->sw.rearmed, __ATOMIC_ACQUIRE) != SW_REARM_ON && sw_call(g, m, p, 1, 0))
		__atomic_fetch_add(&g->sw.offs, 1, __ATOMIC_RELAXED);
}

/*
 * At load, before anything of module m runs: switch its cold patches
 * off (STINT_PATCH_COLD: every probe of the patch is a ret, an indirect
 * jump or a syscall of a site the rewrite --skip-covered log saw).
 * Such a site stays patched in a skip-covered rewrite, since its next
 * outcome may be new, but the program keeps running it with outcomes
 * it has seen: patched, its first run costs a page fault or two (its
 * stub's and trampoline's pages) and a refused call before the window's
 * end switches it off, and every window after that its detour (sqlite3
 * with a complete log: 2,387 refused calls a run, and the run at 1.24x
 * native against 1.19x with such sites left unpatched). Listed off and
 * cold, it is left out of the batches (period starts, rearms): only new
 * code switches it on, as it does any listed site (ret_switch_on: a new
 * call's callee's rets, the own sites of a function running new code),
 * which is when a return or an indirect jump meets a new destination.
 * What that misses (known code combined anew: a known call returning
 * through another of its callee's known rets) the windows caught with
 * the budget's odds (rewrite/rets.go, coldRets, says which rets may be
 * cold). Sites the period thread must write (STINT_PATCH_SYNC, _READ)
 * stay as they are. STINT_COLD=0 leaves all of them on.
 */
static int sw_cold_on(const struct stint_global *g)
{
	return g->sw.cold && g->per.budget_on && g->sw.on && !g->reg.mode;
}

static void sw_cold_load(struct stint_global *g, struct stint_module *m, uint64_t base)
{
	if (!sw_cold_on(g) || !(m->flags & STINT_MF_COLD))
		return;
	struct stint_probe *pr = (struct stint_probe *)(base + m->probes_vaddr);
	const struct stint_patch *pts = (const struct stint_patch *)(base + m->patches_vaddr);
	const uint32_t *cold = (const uint32_t *)(base + m->cold_vaddr);
	/* the rewriter's list: reading every probe record for them took 1.6
	 * ms of a retiring libsqlite3's start (82k records, 5 MB) */
	for (uint32_t j = 0; j < m->ncold && m->cold_vaddr; j++) {
		if (cold[j] >= m->nprobes)
			continue;
		struct stint_probe *p = &pr[cold[j]];
		uint32_t idx = p->patch;
		if (idx >= m->npatches || (p->flags & STINT_PF_DIRECT))
			continue;
		const struct stint_patch *pt = &pts[idx];
		if ((pt->flags & (STINT_PATCH_COLD | STINT_PATCH_SWITCH | STINT_PATCH_SYNC | STINT_PATCH_READ)) !=
		    (STINT_PATCH_COLD | STINT_PATCH_SWITCH))
			continue;
		struct sw_mod *s = sw_of(g, m, idx);
		if (!s || __atomic_load_n(&s->state[idx], __ATOMIC_ACQUIRE) != SW_COLD)
			continue; /* (the site's other probe listed it) */
		if (!sw_call(g, m, p, 1, 0))
			continue;
		uint32_t ei = __atomic_load_n(&s->eidx[idx], __ATOMIC_ACQUIRE);
		if (ei)
			__atomic_store_n(&s->e[ei - 1].cold, 1, __ATOMIC_RELAXED);
	}
}

/*
 * At load, after the log retired probes (redlog.c): a readee whose own
 * probes have all recorded (an evicted instruction has none) and whose
 * readers all hold their original bytes serves nobody. It would stay
 * patched for good, never listed (nothing of it calls the runtime), and
 * cost its detour on every run: restore it with plain stores (alone, as
 * patch_done at load) and mark it dead for the off-switch. A readee that
 * is a reader itself may free its own readees: a pass per link of a
 * chain (the rewriter makes them at most four long). A cold reader
 * (sw_cold_load) holds its original bytes but is not done: new code may
 * switch it on, which needs its readees (ret_hold_readees).
 */
static void log_restore_readees(struct stint_global *g, struct stint_module *m, uint64_t base)
{
	const struct stint_patch *pts = (const struct stint_patch *)(base + m->patches_vaddr);
	struct sw_mod *s = sw_of(g, m, 0);
	int cold = sw_cold_on(g);
	for (int pass = 0; pass < 4; pass++) {
		int changed = 0;
		for (uint32_t i = 0; i < m->npatches; i++) {
			const struct stint_patch *pt = &pts[i];
			if (!(pt->flags & STINT_PATCH_READ) || pt->remaining || sw_is_orig(m, i))
				continue;
			if (s && __atomic_load_n(&s->state[i], __ATOMIC_ACQUIRE) != SW_COLD)
				continue;
			uint32_t n;
			const struct stint_read *rd = sw_pairs(m, i, 1, &n);
			int free = n > 0;
			for (uint32_t k = 0; k < n && free; k++)
				free = rd[k].reader < m->npatches && sw_is_orig(m, rd[k].reader) &&
				       !(cold && (pts[rd[k].reader].flags & STINT_PATCH_COLD));
			if (!free)
				continue;
			write_alone(base + pt->addr, pt->orig, pt->len);
			if (s)
				__atomic_store_n(&s->state[i], SW_DEAD, __ATOMIC_RELEASE);
			changed = 1;
		}
		if (!changed)
			break;
	}
}

/* Module i's list (0 if it has none), its module, its patch table and
 * the number of entries taken so far. */
static struct sw_mod *sw_list(struct stint_global *g, uint32_t i, const struct stint_module **mp, const struct stint_patch **pts, uint32_t *n)
{
	struct gmodule *gm = &g->proc.modules[i];
	struct sw_mod *s = (struct sw_mod *)__atomic_load_n(&gm->sw, __ATOMIC_ACQUIRE);
	if (!s || !gm->smod)
		return 0;
	const struct stint_module *m = (const struct stint_module *)gm->smod;
	*mp = m;
	*pts = (const void *)(m->base + m->patches_vaddr);
	*n = __atomic_load_n(&s->n, __ATOMIC_ACQUIRE);
	if (*n > s->cap)
		*n = s->cap;
	return s;
}

static struct sw_walk sw_walk(struct stint_global *g)
{
	struct sw_walk w = {g, 0, modules_n(g), 0, 0, 0, 0};
	return w;
}

static int sw_next(struct sw_walk *w)
{
	while (w->i < w->nm)
		if ((w->s = sw_list(w->g, w->i++, &w->m, &w->pts, &w->n)))
			return 1;
	return 0;
}

/* The k-th of module list s's sync and readee entries, 0 if not filled
 * yet; *n is how many there are. */
static struct sw_entry *sw_few(struct sw_mod *s, uint32_t k)
{
	uint32_t v = __atomic_load_n(&s->few[k], __ATOMIC_ACQUIRE);
	if (!v || v > s->cap)
		return 0;
	struct sw_entry *e = &s->e[v - 1];
	return __atomic_load_n(&e->ready, __ATOMIC_ACQUIRE) ? e : 0;
}

static uint32_t sw_nfew(const struct sw_mod *s)
{
	uint32_t n = __atomic_load_n(&s->nfew, __ATOMIC_ACQUIRE);
	return n < s->capfew ? n : s->capfew;
}

/* Send probe p's arm back to its thunk (p->cache: module-relative, the
 * rewriter's, ABI 8). */
static void sw_arm_thunk(const struct stint_module *m, const struct stint_probe *p)
{
	uint64_t a = m->base + p->arm;
	__atomic_store_n((int32_t *)a, (int32_t)(m->base + p->cache - (a + 4)), __ATOMIC_RELEASE);
}
