/*
 * switch.c - the off-switch (stint_abi.h, ABI 5). #included by stint.c.
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
 */

#define SW_COLD 0 /* not listed: the rewriter's patch is in place */
#define SW_ON   1 /* listed, patched */
#define SW_OFF  2 /* listed, original bytes */
#define SW_BUSY 3 /* being changed */
#define SW_DEAD 4 /* listed, original bytes, never again (all probes recorded) */
#define SW_PEND 5 /* listed, patched, to be switched off by the period thread (STINT_PATCH_SYNC) */

struct sw_entry {
	uint64_t addr;    /* run-time address of the first patched byte */
	uint32_t idx;     /* patch index */
	uint8_t len;
	uint8_t ready;    /* set last: the entry is complete */
	uint8_t open;     /* an open-ended site (ret, indirect, syscall): any run may bring a new outcome */
	uint8_t sync;     /* STINT_PATCH_SYNC: switched in batches with threads parked (sw_batch) */
	uint8_t code[16]; /* the patched bytes */
};

struct sw_mod {
	uint64_t map_size;
	uint32_t n, cap;        /* entries used (may briefly exceed cap), capacity */
	uint8_t *state;         /* SW_* per patch index */
	uint8_t *misses;        /* per patch index: calls this period that recorded nothing */
	uint8_t *fresh;         /* per patch index: listed while the gate was closed, not called since with it open */
	struct sw_entry e[];
};

/* An open-ended site (ret, indirect branch) whose calls recorded nothing
 * this many times in a period is switched off for the rest of it: its
 * destinations outnumber the trampoline's inline cache, and every miss
 * costs a runtime call (sqlite's VDBE dispatch made 200k a period). */
#define SW_MISS_MAX 64

/* Set up a module's list (module init). 0 if the module has no switchable
 * patch or the memory cannot be had; its sites then step over their
 * probes while the gate is closed, as before ABI 5. */
static uint64_t sw_module_new(struct stint_module *m, uint64_t base)
{
	const struct stint_patch *pt = (const void *)(base + m->patches_vaddr);
	uint32_t n = 0;
	for (uint32_t i = 0; i < m->npatches; i++)
		if ((pt[i].flags & STINT_PATCH_SWITCH) && pt[i].len && pt[i].len <= 16)
			n++;
	if (!n)
		return 0;
	uint64_t size = sizeof(struct sw_mod) + (uint64_t)n * sizeof(struct sw_entry) + 3 * (uint64_t)m->npatches;
	size = (size + 4095) & ~(uint64_t)4095;
	long a = sys_mmap(0, size, S_PROT_READ | S_PROT_WRITE, S_MAP_PRIVATE | S_MAP_ANONYMOUS | S_MAP_NORESERVE, -1, 0);
	if (sys_failed(a))
		return 0;
	struct sw_mod *s = (struct sw_mod *)a;
	s->map_size = size;
	s->cap = n;
	s->state = (uint8_t *)&s->e[n];
	s->misses = s->state + m->npatches;
	s->fresh = s->misses + m->npatches;
	/* The first store to a text page copies it (a private file mapping):
	 * a few us each, which would land in whichever period first
	 * switches a site there. Take the copies now, at start-up, with a
	 * locked or of 0 (the code does not change). */
	uint64_t last = ~0ULL;
	for (uint32_t i = 0; i < m->npatches; i++) {
		if (!(pt[i].flags & STINT_PATCH_SWITCH))
			continue;
		uint64_t pg = (base + pt[i].addr) & ~(uint64_t)4095;
		if (pg == last)
			continue;
		last = pg;
		__atomic_fetch_or((uint8_t *)(base + pt[i].addr), 0, __ATOMIC_RELAXED);
	}
	return (uint64_t)a;
}

/* The value of a module's gate word 1 while the gate is closed (see
 * gates_set in budget.c). Without membarrier(SYNC_CORE) the sites that
 * need it could not be switched off when they call, and would call on
 * every execution: then closed means closed for all. */
static uint64_t sw_closed_word(struct stint_global *g, const struct gmodule *gm)
{
	return g->sw_on && gm->sw && g->sync_core ? STINT_GATE_SWITCH : STINT_GATE_CLOSED;
}

/* Work for the period thread, asked for with sw_request (budget.c). */
static void sw_request(struct stint_global *g, uint32_t what);
#define SW_REQ_OFF   1 /* the gate closed: switch the listed sites off */
#define SW_REQ_REARM 2 /* new code ran after the window: switch open-ended sites back on */
#define SW_REQ_SYNC  4 /* sites wait in SW_PEND: switch them off */

/* The list of the module that patch idx of m belongs to, 0 if it has
 * none (or idx is not one of its patches). */
static struct sw_mod *sw_of(struct stint_global *g, const struct stint_module *m, uint32_t idx)
{
	uint32_t id = m->module_id;
	if (idx >= m->npatches || id >= MAX_MODULES)
		return 0;
	return (struct sw_mod *)__atomic_load_n(&g->modules[id].sw, __ATOMIC_ACQUIRE);
}

/* Adjust the count of listed sites switched on (never below 0). */
static void sw_count_on(struct stint_global *g, int64_t d)
{
	uint64_t o = __atomic_load_n(&g->sw_listed_on, __ATOMIC_RELAXED), n;
	do
		n = d < 0 && o < (uint64_t)-d ? 0 : o + (uint64_t)d;
	while (!__atomic_compare_exchange_n(&g->sw_listed_on, &o, n, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED));
}

/* Write a listed patch's bytes: the original (on = 0) or the patch. */
static void sw_write(const struct stint_patch *pt, const struct sw_entry *e, int on)
{
	stint_restore_atomic(e->addr, on ? e->code : pt->orig, e->len);
}

/*
 * A runtime call from probe p of a switchable site: list the site if it
 * is not listed yet and, when closed, restore its original bytes.
 * closed_gate: the call came while the gate was closed (word 1's
 * STINT_GATE_SWITCH at work): the site is then listed as fresh, which
 * keeps it on after the window until it has been called with the gate
 * open, so that its first execution while probes are on is recorded as
 * if it had never been switched. Returns 1 if it restored the bytes.
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
	uint8_t st = __atomic_load_n(&s->state[idx], __ATOMIC_ACQUIRE);
	if (st == SW_COLD) {
		if (!__atomic_compare_exchange_n(&s->state[idx], &st, SW_BUSY, 0, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED))
			return 0;
		uint32_t k = __atomic_fetch_add(&s->n, 1, __ATOMIC_ACQ_REL);
		if (k >= s->cap) {
			/* cannot happen (one entry per patch): leave it patched */
			__atomic_store_n(&s->state[idx], SW_DEAD, __ATOMIC_RELEASE);
			return 0;
		}
		struct sw_entry *e = &s->e[k];
		e->addr = base + pt->addr;
		e->idx = idx;
		e->len = pt->len;
		e->open = !(p->flags & STINT_PF_DIRECT);
		e->sync = (pt->flags & STINT_PATCH_SYNC) != 0;
		if (closed_gate)
			s->fresh[idx] = 1;
		s_memcpy(e->code, (const void *)e->addr, pt->len);
		/* patch_done lowers remaining before it restores: if it is 0
		 * now, the copy may hold original bytes; never re-apply it */
		int dead = __atomic_load_n(&((struct stint_patch *)pt)->remaining, __ATOMIC_ACQUIRE) == 0;
		__atomic_store_n(&e->ready, 1, __ATOMIC_RELEASE);
		if (dead && e->sync) {
			/* patch_done restored it (or cannot, and it stays patched) */
			__atomic_store_n(&s->state[idx], SW_DEAD, __ATOMIC_RELEASE);
			__atomic_fetch_add(&g->sw_listed, 1, __ATOMIC_RELAXED);
			return 0;
		}
		if (closed && e->sync) {
			/* cannot be written here: the period thread will (sw_batch) */
			__atomic_store_n(&s->state[idx], SW_PEND, __ATOMIC_RELEASE);
			__atomic_fetch_add(&g->sw_listed, 1, __ATOMIC_RELAXED);
			__atomic_fetch_add(&g->sw_listed_on, 1, __ATOMIC_RELAXED);
			sw_request(g, SW_REQ_SYNC);
			return 0;
		}
		if (dead || closed)
			sw_write(pt, e, 0);
		__atomic_store_n(&s->state[idx], dead ? SW_DEAD : closed ? SW_OFF : SW_ON, __ATOMIC_RELEASE);
		__atomic_fetch_add(&g->sw_listed, 1, __ATOMIC_RELAXED);
		if (!dead && !closed) {
			__atomic_fetch_add(&g->sw_listed_on, 1, __ATOMIC_RELAXED);
			__atomic_store_n(&g->sw_is_on, 1, __ATOMIC_RELEASE); /* the next switch-off must see it */
		}
		return dead || closed;
	}
	if (st == SW_ON && closed && (pt->flags & STINT_PATCH_SYNC)) {
		if (__atomic_compare_exchange_n(&s->state[idx], &st, SW_PEND, 0, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED))
			sw_request(g, SW_REQ_SYNC);
		return 0;
	}
	if (st == SW_ON && closed &&
	    __atomic_compare_exchange_n(&s->state[idx], &st, SW_BUSY, 0, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED)) {
		stint_restore_atomic(base + pt->addr, pt->orig, pt->len);
		__atomic_store_n(&s->state[idx], SW_OFF, __ATOMIC_RELEASE);
		sw_count_on(g, -1);
		return 1;
	}
	return 0;
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

/* Module i's list (0 if it has none), its patch table and the number of
 * entries taken so far. */
static struct sw_mod *sw_list(struct stint_global *g, uint32_t i, const struct stint_patch **pts, uint32_t *n)
{
	struct gmodule *gm = &g->modules[i];
	struct sw_mod *s = (struct sw_mod *)__atomic_load_n(&gm->sw, __ATOMIC_ACQUIRE);
	if (!s || !gm->smod)
		return 0;
	const struct stint_module *m = (const struct stint_module *)gm->smod;
	*pts = (const void *)(m->base + m->patches_vaddr);
	*n = __atomic_load_n(&s->n, __ATOMIC_ACQUIRE);
	if (*n > s->cap)
		*n = s->cap;
	return s;
}

#define SWB_OPEN_ONLY  1 /* only open-ended sites */
#define SWB_KEEP_FRESH 2 /* not the fresh ones */
#define SWB_PEND_ONLY  4 /* (off) only sites waiting in SW_PEND */

/*
 * The second half of a batch for STINT_PATCH_SYNC sites: their first two
 * bytes are "jmp ." now (written in the first pass, so arriving threads
 * wait there), and no single store can write the rest. Serialise every
 * core (membarrier SYNC_CORE: no thread still runs the old bytes), write
 * the bytes after the first two, serialise again, write the first two
 * (releasing the waiters), serialise once more. The period thread blocks
 * all signals, so it never waits for itself.
 */
static void sw_sync_finish(struct stint_global *g, int on)
{
	sys_call3(SYS_membarrier, MEMBARRIER_SYNC_CORE, 0, 0);
	for (int pass = 0; pass < 2; pass++) {
		uint32_t nm = modules_n(g);
		for (uint32_t i = 0; i < nm; i++) {
			const struct stint_patch *pts;
			uint32_t n;
			struct sw_mod *s = sw_list(g, i, &pts, &n);
			if (!s)
				continue;
			for (uint32_t k = 0; k < n; k++) {
				struct sw_entry *e = &s->e[k];
				if (!e->sync || __atomic_load_n(&s->state[e->idx], __ATOMIC_ACQUIRE) != SW_BUSY)
					continue;
				const uint8_t *to = on ? e->code : pts[e->idx].orig;
				if (pass == 0) {
					for (uint32_t j = 2; j < e->len; j++)
						__atomic_store_n((uint8_t *)e->addr + j, to[j], __ATOMIC_RELEASE);
				} else {
					stint_restore_atomic(e->addr, to, 2);
					if (on)
						s->misses[e->idx] = 0;
					__atomic_store_n(&s->state[e->idx], on ? SW_ON : SW_OFF, __ATOMIC_RELEASE);
				}
			}
		}
		sys_call3(SYS_membarrier, MEMBARRIER_SYNC_CORE, 0, 0);
	}
}

/*
 * Switch every listed site of every module on (re-apply the patch where
 * a probe still has something to record) or off (original bytes); flags
 * (SWB_*) narrow it.
 * Returns the number of sites changed. The period thread's work.
 */
static uint64_t sw_batch(struct stint_global *g, int on, int flags)
{
	uint64_t changed = 0, nsync = 0;
	int open_only = flags & SWB_OPEN_ONLY, keep_fresh = flags & SWB_KEEP_FRESH, pend_only = flags & SWB_PEND_ONLY;
	static const uint8_t spin[2] = {0xeb, 0xfe};
	uint64_t all = ~0ULL, old = 0;
	long masked = sys_call4(SYS_rt_sigprocmask, S_SIG_SETMASK, (long)&all, (long)&old, 8);
	uint32_t nm = modules_n(g);
	for (uint32_t i = 0; i < nm; i++) {
		const struct stint_patch *pts;
		uint32_t n;
		struct sw_mod *s = sw_list(g, i, &pts, &n);
		if (!s)
			continue;
		for (uint32_t k = 0; k < n; k++) {
			struct sw_entry *e = &s->e[k];
			if (!__atomic_load_n(&e->ready, __ATOMIC_ACQUIRE) || (open_only && !e->open) ||
			    (keep_fresh && s->fresh[e->idx]))
				continue;
			uint8_t *sp = &s->state[e->idx];
			uint8_t st = __atomic_load_n(sp, __ATOMIC_ACQUIRE);
			if (on ? st != SW_OFF : pend_only ? st != SW_PEND : st != SW_ON && st != SW_PEND)
				continue;
			if (e->sync && !g->sync_core)
				continue;
			const struct stint_patch *pt = &pts[e->idx];
			if (on && __atomic_load_n(&pt->remaining, __ATOMIC_ACQUIRE) == 0) {
				__atomic_compare_exchange_n(sp, &st, SW_DEAD, 0, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED);
				continue;
			}
			if (!__atomic_compare_exchange_n(sp, &st, SW_BUSY, 0, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED))
				continue;
			changed++;
			if (e->sync) {
				/* first pass of the sequence; sw_sync_finish ends it */
				stint_restore_atomic(e->addr, spin, 2);
				nsync++;
				continue;
			}
			sw_write(pt, e, on);
			if (on)
				s->misses[e->idx] = 0;
			__atomic_store_n(sp, on ? SW_ON : SW_OFF, __ATOMIC_RELEASE);
		}
	}
	if (nsync)
		sw_sync_finish(g, on);
	if (!sys_failed(masked))
		sys_call4(SYS_rt_sigprocmask, S_SIG_SETMASK, (long)&old, 0, 8);
	return changed;
}

/* Whether the off-switch owns patch idx of m now (listed): patch_done
 * then leaves a STINT_PATCH_SYNC patch to it, since two writers of the
 * jmp-to-self sequence at once could leave a torn instruction. */
static int sw_owns(struct stint_module *m, uint32_t idx)
{
	struct stint_global *g = G();
	struct sw_mod *s = g->sw_on ? sw_of(g, m, idx) : 0;
	return s && __atomic_load_n(&s->state[idx], __ATOMIC_ACQUIRE) != SW_COLD;
}
