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
	uint32_t *offep;        /* per reader patch: g->sw_epoch when it last got its original bytes */
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
#define PROBE_WATCHED STINT_PROBE_WATCHED /* stint_probe.state: logged (or STINT_PF_DELEG), arm still calls (count in pad0[0]) */
#define PROBE_RETWATCH 3 /* stint_probe.state: logged call, its return not: arm still calls (rets.c) */

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
		__atomic_store_n(&G()->sw_has_sync, 1, __ATOMIC_RELEASE); /* self mode has work (sw_self_begin) */
	if (nsync && (m->flags & STINT_MF_PARK))
		__atomic_store_n(&G()->sw_park_ok, 1, __ATOMIC_RELEASE);
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

/* g->sw_rearmed: this period's rearm (budget.c, sw_after_record) */
#define SW_REARM_NONE 0
#define SW_REARM_ON   1 /* open-ended sites are back on after the window */
#define SW_REARM_DONE 2 /* the budget cannot pay for one: no other this period */

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

/* Test hooks (STINT_TEST_READEE_STALL, _SWITCH_STALL, _BATCH_STALL):
 * spin ns on clock. */
static void test_stall(int clock, uint64_t ns)
{
	uint64_t until = now_ns(clock) + ns;
	while (now_ns(clock) < until)
		__asm__ volatile("pause");
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
		__atomic_store_n(&s->offep[idx], __atomic_load_n(&g->sw_epoch, __ATOMIC_ACQUIRE), __ATOMIC_RELEASE);
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
		__atomic_fetch_add(&g->sw_listed_open, 1, __ATOMIC_RELAXED);
	s_memcpy(e->code, (const void *)e->addr, pt->len);
	if (e->sync || e->read) {
		uint32_t f = __atomic_fetch_add(&s->nfew, 1, __ATOMIC_ACQ_REL);
		if (f < s->capfew)
			__atomic_store_n(&s->few[f], k + 1, __ATOMIC_RELEASE);
	}
	__atomic_fetch_add(&g->sw_listed, 1, __ATOMIC_RELAXED);
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
			__atomic_fetch_add(&g->sw_listed_on, 1, __ATOMIC_RELAXED);
			if (off)
				sw_pend_mark(s, r);
			else
				__atomic_store_n(&g->sw_is_on, 1, __ATOMIC_RELEASE);
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

static void sw_self_batch(struct stint_global *g);
static void sw_sync_closed(struct stint_global *g, struct stint_module *m, struct sw_mod *s, const struct stint_probe *p, uint32_t idx);
static void sw_mute(struct stint_module *m, struct sw_mod *s, struct stint_probe *p);
static void sw_bell(struct stint_global *g);
static inline uint64_t rdtsc(void);
static uint64_t ns_to_tsc(struct stint_global *g, uint64_t ns);

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
	return __atomic_load_n(&g->sw_self, __ATOMIC_ACQUIRE) || !__atomic_load_n(&g->sw_park_ok, __ATOMIC_ACQUIRE) ||
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
			__atomic_fetch_add(&g->sw_listed_on, 1, __ATOMIC_RELAXED);
			sw_sync_closed(g, m, s, p, idx);
			return 0;
		}
		if (closed && deferred) {
			/* cannot be written here: the period thread will (sw_batch) */
			__atomic_store_n(&s->state[idx], SW_PEND, __ATOMIC_RELEASE);
			__atomic_fetch_add(&g->sw_listed_on, 1, __ATOMIC_RELAXED);
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
			__atomic_fetch_add(&g->sw_listed_on, 1, __ATOMIC_RELAXED);
			__atomic_store_n(&g->sw_is_on, 1, __ATOMIC_RELEASE); /* the next switch-off must see it */
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
	if (__atomic_load_n(&g->sw_window_over, __ATOMIC_ACQUIRE) &&
	    __atomic_load_n(&g->sw_rearmed, __ATOMIC_ACQUIRE) != SW_REARM_ON && sw_call(g, m, p, 1, 0))
		__atomic_fetch_add(&g->sw_offs, 1, __ATOMIC_RELAXED);
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
	return g->sw_cold && g->budget_on && g->sw_on && !g->region_mode;
}

static void sw_cold_load(struct stint_global *g, struct stint_module *m, uint64_t base)
{
	if (!sw_cold_on(g) || !(m->flags & STINT_MF_COLD))
		return;
	struct stint_probe *pr = (struct stint_probe *)(base + m->probes_vaddr);
	const struct stint_patch *pts = (const struct stint_patch *)(base + m->patches_vaddr);
	for (uint32_t i = 0; i < m->nprobes; i++) {
		struct stint_probe *p = &pr[i];
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
	struct gmodule *gm = &g->modules[i];
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

/* A walk over the modules that have a list (sw_list):
 *	for (struct sw_walk it = sw_walk(g); sw_next(&it);) ... it.m, it.pts, it.n, it.s */
struct sw_walk {
	struct stint_global *g;
	uint32_t i, nm, n;
	const struct stint_module *m;
	const struct stint_patch *pts;
	struct sw_mod *s;
};

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

/* What sw_take does to each probe whose bit it takes (below). */
enum sw_take_what {
	SW_UNBELL,   /* bell: a belled arm goes straight again (the self batch) */
	SW_REWATCH,  /* cool: a cool watched probe is watched again, if its site is still fresh (the period's start) */
	SW_UNMUTE,   /* muted: a muted arm calls again, unless it recorded since (the period's start) */
};

static void sw_take(struct stint_global *g, enum sw_take_what what);

/*
 * Self mode. A patch that straddles a word (STINT_PATCH_SYNC) cannot be
 * written with one store while another thread may run it: the period
 * thread parks arriving threads on "jmp ." meanwhile (sw_put), and a
 * descheduled period thread, or a vCPU the host takes away during the
 * membarriers, then holds the program for as long (50-90 ms seen on this
 * VM). But most programs we trace have one thread (sqlite3, gzip, each
 * nginx or postgres worker), and a thread that writes code it alone can
 * run needs neither: x86 keeps a core's own stores to code coherent with
 * what it fetches next. So while the program has one thread, the period
 * thread leaves the sync sites alone and says what they should be
 * (sw_self_gen, sw_self_on); the program's thread sets them at its next
 * runtime call, with plain stores and its signals blocked (no handler of
 * the program may run half-written code). Nothing but that thread can
 * start another program thread, and it is busy here: the count read at
 * the start holds until the end. With more threads the period thread
 * goes back to parking.
 */

/*
 * The link count of this process's /proc/<pid>/task (2 + its threads)
 * into *st, by an fstat of a descriptor kept open, else by a stat of the
 * path. A sqlite3 run asks about 900 times, and the path's walk through
 * /proc was most of the cost (perf: about 4 ms a run in the kernel's
 * lookups on this VM). The descriptor is checked each time: the program
 * may close it, or give its number to another file (its identity then
 * differs). A forked child inherits its parent's, opened for another
 * pid: fork_child_reopen closes it, and until that has run the child
 * stats the path.
 */
static long task_stat_path(struct s_stat *st)
{
	return sys_call4(SYS_newfstatat, S_AT_FDCWD, (long)"/proc/self/task", (long)st, 0);
}

/* Whether fd1 (1 + a descriptor) is still the one task_stat opened:
 * open, on the same file (*st: its fstat). */
static int task_fd_ours(const struct stint_global *g, int32_t fd1, struct s_stat *st)
{
	return fd1 > 0 && !sys_failed(sys_call2(SYS_fstat, fd1 - 1, (long)st)) && st->dev == g->task_dev && st->ino == g->task_ino;
}

static long task_stat(struct stint_global *g, struct s_stat *st)
{
	int alive = __atomic_load_n(&W()->alive, __ATOMIC_ACQUIRE) == 1;
	int32_t fd1 = __atomic_load_n(&g->task_fd1, __ATOMIC_ACQUIRE);
	if (fd1 > 0) {
		if (!alive) /* a child before fork_child_reopen: its parent's */
			return task_stat_path(st);
		if (task_fd_ours(g, fd1, st))
			return 0;
		/* the program closed it or gave its number to another file: not
		 * ours to close */
		__atomic_compare_exchange_n(&g->task_fd1, &fd1, 0, 0, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED);
	}
	if (!alive || !lock_bounded(&g->scratch_lock))
		return task_stat_path(st);
	long r = 0;
	if (__atomic_load_n(&g->task_fd1, __ATOMIC_ACQUIRE) == 0) {
		long fd = sys_call4(SYS_openat, S_AT_FDCWD, (long)"/proc/self/task", S_O_RDONLY | S_O_DIRECTORY | S_O_CLOEXEC, 0);
		r = sys_failed(fd) ? fd : sys_call2(SYS_fstat, fd, (long)st);
		if (!sys_failed(r)) {
			g->task_dev = st->dev;
			g->task_ino = st->ino;
			__atomic_store_n(&g->task_fd1, (int32_t)fd + 1, __ATOMIC_RELEASE);
		} else if (!sys_failed(fd)) {
			sys_call1(SYS_close, fd);
		}
	} else {
		r = task_stat_path(st);
	}
	unlock(&g->scratch_lock);
	return r;
}

/* Whether the program has one thread: the process's thread count is at
 * most that thread and the period thread. The count is the link count of
 * /proc/self/task less 2 (task_stat), or field 20 of /proc/self/stat (an
 * open, a read and a close: 7.5 us) where that fails. */
static int sw_alone(struct stint_global *g)
{
	uint64_t runtime = __atomic_load_n(&g->period_thread, __ATOMIC_ACQUIRE) ? 1 : 0;
	struct s_stat st;
	if (!sys_failed(task_stat(g, &st)) && st.nlink >= 3)
		return st.nlink - 2 <= 1 + runtime;
	char buf[512];
	long n = read_small("/proc/self/stat", buf, sizeof buf);
	if (n <= 0)
		return 0;
	long i = n - 1;
	while (i > 0 && buf[i] != ')')
		i--; /* the command name may hold spaces and parentheses */
	if (i <= 0)
		return 0;
	uint64_t v = 0;
	int field = 2, digits = 0;
	for (long j = i + 1; j < n && field <= 20; j++) {
		if (buf[j] == ' ') {
			field++;
		} else if (field == 20) {
			if (buf[j] < '0' || buf[j] > '9')
				return 0;
			v = v * 10 + (uint64_t)(buf[j] - '0');
			digits++;
		}
	}
	return digits && v >= 1 && v <= 1 + runtime;
}

/*
 * The program's thread, at a runtime call: set the sync sites to the
 * state the period thread last asked for (sw_self_gen), if the program
 * still has one thread; else hand them back to the period thread (the
 * ones to go off wait in SW_PEND, when it may park threads). Its time is
 * switching time, charged at the period's end like a closed call's.
 */
static void sw_self_batch(struct stint_global *g)
{
	uint32_t gen = __atomic_load_n(&g->sw_self_gen, __ATOMIC_ACQUIRE);
	if (gen == __atomic_load_n(&g->sw_self_done, __ATOMIC_ACQUIRE) || !try_lock(&g->sw_self_lock))
		return;
	uint64_t t0 = rdtsc();
	int on = (int)__atomic_load_n(&g->sw_self_on, __ATOMIC_ACQUIRE);
	int keep_fresh = (int)__atomic_load_n(&g->sw_self_keep_fresh, __ATOMIC_ACQUIRE);
	uint64_t all = ~0ULL, old = 0;
	long masked = sys_call4(SYS_rt_sigprocmask, S_SIG_SETMASK, (long)&all, (long)&old, 8);
	int alone = __atomic_load_n(&g->sw_self, __ATOMIC_ACQUIRE) && sw_alone(g);
	sw_take(g, SW_UNBELL);
	uint64_t changed = 0;
	int ask = 0;
	if (!alone)
		__atomic_store_n(&g->sw_self, 0, __ATOMIC_RELEASE);
	for (struct sw_walk it = sw_walk(g); sw_next(&it);) {
		const struct stint_patch *pts = it.pts;
		struct sw_mod *s = it.s;
		uint32_t nf = sw_nfew(s);
		for (uint32_t k = 0; k < nf; k++) {
			struct sw_entry *e = sw_few(s, k);
			if (!e || !e->sync || e->read)
				continue;
			uint8_t *sp = &s->state[e->idx];
			uint8_t st = __atomic_load_n(sp, __ATOMIC_ACQUIRE);
			const struct stint_patch *pt = &pts[e->idx];
			if (!alone) {
				/* the period thread's now: what waits for off must be in
				 * its bitmap (a batch may have taken the bit meanwhile) */
				if (st == SW_PEND ||
				    (!on && st == SW_ON && !(keep_fresh && s->fresh[e->idx]) &&
				     __atomic_compare_exchange_n(sp, &st, SW_PEND, 0, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED))) {
					sw_pend_mark(s, e->idx);
					ask = 1;
				}
				continue;
			}
			if (on) {
				if (st != SW_OFF)
					continue;
				if (__atomic_load_n(&pt->remaining, __ATOMIC_ACQUIRE) == 0) {
					__atomic_store_n(sp, SW_DEAD, __ATOMIC_RELEASE);
					continue;
				}
				write_alone(e->addr, e->code, e->len);
				s->misses[e->idx] = 0;
				__atomic_store_n(sp, SW_ON, __ATOMIC_RELEASE);
			} else {
				if ((st != SW_ON && st != SW_PEND) || (keep_fresh && s->fresh[e->idx]))
					continue;
				write_alone(e->addr, pt->orig, e->len);
				__atomic_store_n(sp, SW_OFF, __ATOMIC_RELEASE);
			}
			changed++;
		}
	}
	__atomic_store_n(&g->sw_self_done, gen, __ATOMIC_RELEASE);
	unlock(&g->sw_self_lock);
	if (!sys_failed(masked))
		sys_call4(SYS_rt_sigprocmask, S_SIG_SETMASK, (long)&old, 0, 8);
	if (ask)
		sw_request(g, SW_REQ_SYNC);
	uint64_t d = rdtsc() - t0;
	if (d > g->charge_cap_tsc)
		d = g->charge_cap_tsc; /* longer: descheduled (stores and a small read) */
	d += g->call_overhead_tsc;
	__atomic_fetch_add(&g->sw_tsc, d, __ATOMIC_RELAXED);
	__atomic_fetch_add(&g->sw_lazy_tsc, d, __ATOMIC_RELAXED);
	__atomic_fetch_add(on ? &g->sw_ons : &g->sw_offs, changed, __ATOMIC_RELAXED);
	sw_count_on(g, on ? (int64_t)changed : -(int64_t)changed);
	if (on && changed)
		__atomic_store_n(&g->sw_is_on, 1, __ATOMIC_RELEASE);
}

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
static int sw_self_begin(struct stint_global *g, int recheck)
{
	int self = g->sw_self_ok && g->sync_core && g->sw_has_sync &&
		   (recheck ? sw_alone(g) : (int)__atomic_load_n(&g->sw_self, __ATOMIC_ACQUIRE));
	__atomic_store_n(&g->sw_self, (uint32_t)self, __ATOMIC_RELEASE);
	if (self)
		return SW_MODE_SELF;
	if (!lock_bounded(&g->sw_self_lock))
		return SW_MODE_BUSY;
	return __atomic_load_n(&g->sw_park_ok, __ATOMIC_ACQUIRE) ? SW_MODE_PARK : SW_MODE_HOLD;
}

/* Whether the period thread writes sync site pt in this batch (mode from
 * sw_self_begin; on: switching on). */
static int sw_sync_mine(struct stint_global *g, int mode, int on, const struct stint_patch *pt)
{
	if (!g->sync_core || !sw_parkable(pt))
		return 0;
	if (mode == SW_MODE_PARK)
		return 1;
	return mode == SW_MODE_HOLD && (on || __atomic_load_n(&pt->remaining, __ATOMIC_ACQUIRE) == 0);
}

/* ... and at its end: ask the program thread for the sync sites' state. */
static void sw_self_end(struct stint_global *g, int mode, int on, int keep_fresh, int ask)
{
	if (mode == SW_MODE_PARK || mode == SW_MODE_HOLD)
		unlock(&g->sw_self_lock);
	if (mode != SW_MODE_SELF || !ask)
		return;
	__atomic_store_n(&g->sw_self_on, (uint32_t)on, __ATOMIC_RELEASE);
	__atomic_store_n(&g->sw_self_keep_fresh, (uint32_t)keep_fresh, __ATOMIC_RELEASE);
	__atomic_add_fetch(&g->sw_self_gen, 1, __ATOMIC_ACQ_REL);
	if (!on)
		sw_bell(g);
}

/* Probe p of a site that should be off called, and the site waits for a
 * batch: the program's thread's next self batch (a sync site in self
 * mode), or the period thread's next batch of SW_PEND sites (at most one
 * a ms; a readee only after its readers). Until then send the probe's
 * arm straight through (as if recorded), so that a hot site does not
 * call on every run: in one sqlite3 run 62,000 calls of waiting readees
 * in the first period, 11 ms of the next period's budget. The period's
 * start sends it back to its thunk (sw_take). */
static void sw_mute(struct stint_module *m, struct sw_mod *s, struct stint_probe *p)
{
	if (!(p->flags & STINT_PF_DIRECT) || !p->arm || !p->arm_to || !p->cache || __atomic_load_n(&p->state, __ATOMIC_ACQUIRE) != 0)
		return;
	if (((m->base + p->arm) & 63) > 60)
		return;
	uint32_t i = (uint32_t)(p - (struct stint_probe *)(m->base + m->probes_vaddr));
	if (i >= m->nprobes)
		return;
	__atomic_fetch_or(&s->muted[i / 64], 1ULL << (i % 64), __ATOMIC_RELEASE);
	retarget(m->base, p);
}

/*
 * The doorbell (self mode). The period thread cannot write the sync
 * sites, and the program's thread only sets them at a runtime call,
 * which a program that runs code it has recorded makes rarely: a sync
 * site on at a window's end would stay on for the period. So with the
 * request to switch them off, the period thread sends the recorded arms
 * of the sync sites that are on back to their thunks (a 4-byte store,
 * like retarget): the first of them that runs calls the runtime, whose
 * self batch switches them all off and sends those arms straight again.
 */
static void sw_bell(struct stint_global *g)
{
	for (struct sw_walk it = sw_walk(g); sw_next(&it);) {
		const struct stint_module *m = it.m;
		struct sw_mod *s = it.s;
		struct stint_probe *pr = (struct stint_probe *)(m->base + m->probes_vaddr);
		uint32_t nf = sw_nfew(s);
		for (uint32_t k = 0; k < nf; k++) {
			struct sw_entry *e = sw_few(s, k);
			if (!e || !e->sync || e->read)
				continue;
			uint8_t st = __atomic_load_n(&s->state[e->idx], __ATOMIC_ACQUIRE);
			if (st != SW_ON && st != SW_PEND)
				continue;
			for (uint32_t j = e->p0; j < e->p0 + e->np && j < m->nprobes; j++) {
				struct stint_probe *p = &pr[j];
				/* (an indirect probe has no arm: its arm fields are
				 * cache entries, destinations; its trampoline checks the
				 * gate at every run, so it calls anyway once the window
				 * is over) */
				if (!(p->flags & STINT_PF_DIRECT) || !p->cache || !p->arm || ((m->base + p->arm) & 63) > 60)
					continue;
				uint8_t ps = __atomic_load_n(&p->state, __ATOMIC_ACQUIRE);
				uint64_t bit = 1ULL << (j % 64);
				if (ps == 1 && st == SW_ON) {
					__atomic_fetch_or(&s->bell[j / 64], bit, __ATOMIC_RELEASE);
					sw_arm_thunk(m, p);
				} else if (ps == 0 && (__atomic_load_n(&s->muted[j / 64], __ATOMIC_RELAXED) & bit) &&
					   (__atomic_fetch_and(&s->muted[j / 64], ~bit, __ATOMIC_ACQ_REL) & bit)) {
					/* muted while its site waits for this very
					 * batch (sw_sync_closed): it calls again, and
					 * its call runs the batch. Left muted, a site
					 * whose arms have recorded nothing waited for
					 * some other call or a switch-on to unmute it
					 * (a spent budget skips those): a direct call
					 * stayed emulated (push, jmp) all that time,
					 * and the returns above it mispredicted (with
					 * a 1 us budget, a call in sqlite3's sorter for
					 * 0.3 s: TestSyncCallSwitchedOffSoon) */
					sw_arm_thunk(m, p);
				}
			}
		}
	}
}

/*
 * Self mode: a sync site called while it should be off. Its calling arm
 * goes straight through until the period's start (sw_mute, sw_take); the site
 * waits in SW_PEND, and the period thread's next batch of waiting sites
 * (at most one a ms) asks the program's thread to switch it off
 * (sw_self_end, whose doorbell makes that soon). A self batch per such
 * call would read the thread count each time: thousands of times a
 * period when a logged run's watched sites turn ordinary. With several
 * threads and no parking (SW_MODE_HOLD) the site stays on, its calling
 * arm straight: until the period's start, or for good if it was watched.
 */
static void sw_sync_closed(struct stint_global *g, struct stint_module *m, struct sw_mod *s, const struct stint_probe *p, uint32_t idx)
{
	sw_mute(m, s, (struct stint_probe *)p);
	if (!__atomic_load_n(&g->sw_self, __ATOMIC_ACQUIRE)) {
		/* held on: a watched arm (log_load_module) would call on every
		 * run while it stays on, so its watch ends here */
		sw_unwatch(m, (struct stint_probe *)p);
		return;
	}
	sw_pend_on(g, s, idx);
}

/* Take every bit of one of the per-probe bitmaps (bell, cool, muted) of
 * every module, and do what to each probe. */
static void sw_take(struct stint_global *g, enum sw_take_what what)
{
	for (struct sw_walk it = sw_walk(g); sw_next(&it);) {
		const struct stint_module *m = it.m;
		struct sw_mod *s = it.s;
		uint64_t *bits = what == SW_UNBELL ? s->bell : what == SW_REWATCH ? s->cool : s->muted;
		struct stint_probe *pr = (struct stint_probe *)(m->base + m->probes_vaddr);
		uint32_t words = (m->nprobes + 63) / 64;
		for (uint32_t w = 0; w < words; w++) {
			if (!__atomic_load_n(&bits[w], __ATOMIC_RELAXED))
				continue;
			uint64_t v = __atomic_exchange_n(&bits[w], 0, __ATOMIC_ACQ_REL);
			while (v) {
				struct stint_probe *p = &pr[w * 64 + (uint32_t)__builtin_ctzll(v)];
				v &= v - 1;
				uint8_t st = __atomic_load_n(&p->state, __ATOMIC_ACQUIRE);
				if (what == SW_UNBELL) {
					if (st == 1)
						retarget(m->base, p);
				} else if (what == SW_REWATCH) {
					if (st != 1 || !s->fresh[p->patch] || !p->cache || !p->arm)
						continue;
					p->pad0[0] = 0;
					if (__atomic_compare_exchange_n(&p->state, &st, PROBE_WATCHED, 0, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED))
						sw_arm_thunk(m, p);
				} else if (!st && p->cache) {
					sw_arm_thunk(m, p); /* recorded since: its arm stays straight */
				}
			}
		}
	}
}

/* A period's start without a window (budget.c, sw_quiet_skip): no
 * listed site is switched on, but the cool watched probes are watched
 * again, as at every period's start. Without it gzip's end-of-input
 * branch (a logged run's half-logged site, run some 70 times a period)
 * went unrecorded in 6 of 6 logged runs; with it, recorded in 6 of 6. */
static void sw_period_upkeep(struct stint_global *g)
{
	sw_take(g, SW_REWATCH);
}

#define SWB_OPEN_ONLY  1 /* only open-ended sites */
#define SWB_KEEP_FRESH 2 /* not the fresh ones */
#define SWB_PEND_ONLY  4 /* (off) only sites waiting in SW_PEND */
#define SWB_DEBT       8 /* (budget.c, sw_timed) charged at the period's end; sw_batch ignores it */

static void sync_core(void)
{
	sys_call3(SYS_membarrier, MEMBARRIER_SYNC_CORE, 0, 0);
}

/*
 * The period thread's membarrier, counted in epochs: a reader that gets
 * its original bytes is stamped with the epoch then current (sw_stamp,
 * after its locked store), and a barrier ends the epoch it starts in, so
 * once a reader's stamp is below g->sw_synced no core still decodes its
 * old pun. A readee whose readers are all that old needs no barrier of its
 * own, which spares most batches one: IPIs cost tens of us here, and
 * milliseconds when the host has taken the target's vCPU away.
 */
static void sw_barrier(struct stint_global *g)
{
	uint32_t e = __atomic_fetch_add(&g->sw_epoch, 1, __ATOMIC_ACQ_REL);
	sync_core();
	__atomic_store_n(&g->sw_synced, e + 1, __ATOMIC_RELEASE);
}

/*
 * The second half of a batch for STINT_PATCH_SYNC sites: their first two
 * bytes are "jmp ." now (written in the first pass, so arriving threads
 * wait there; their state is SW_SYNC), and no single store can write the
 * rest. Serialise every core (membarrier SYNC_CORE: no thread still runs
 * the old bytes), write the bytes after the first two, serialise again,
 * write the first two (releasing the waiters), serialise once more. The
 * period thread blocks all signals, so it never waits for itself.
 */
static void sw_sync_finish(struct stint_global *g, int on)
{
	sw_barrier(g);
	for (int pass = 0; pass < 2; pass++) {
		for (struct sw_walk it = sw_walk(g); sw_next(&it);) {
			const struct stint_patch *pts = it.pts;
			struct sw_mod *s = it.s;
			for (uint32_t k = 0; k < s->nparked; k++) {
				struct sw_entry *e = &s->e[s->parked[k]];
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
			if (pass == 1)
				s->nparked = 0;
		}
		sw_barrier(g);
	}
}

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
	uint32_t synced = __atomic_load_n(&g->sw_synced, __ATOMIC_ACQUIRE);
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
	if (!g->sync_core)
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
					if (UNLIKELY(g->test_readee_stall_ns))
						test_stall(S_CLOCK_MONOTONIC, g->test_readee_stall_ns);
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
	/* a period's switch-on stops at g->sw_stop_tsc (budget.c) */
	uint64_t stop = on && !open_only ? __atomic_load_n(&g->sw_stop_tsc, __ATOMIC_RELAXED) : 0;
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
			if (UNLIKELY(g->test_switch_stall_ns) && on && !open_only)
				test_stall(S_CLOCK_MONOTONIC, g->test_switch_stall_ns);
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
	struct sw_mod *s = g->sw_on ? sw_of(g, m, idx) : 0;
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
	struct sw_mod *s = g->sw_on ? sw_of(g, m, idx) : 0;
	if (!s || __atomic_load_n(&g->sw_self, __ATOMIC_ACQUIRE) || !g->sync_core || !sw_parkable(pt))
		return;
	sw_pend_on(g, s, idx);
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
