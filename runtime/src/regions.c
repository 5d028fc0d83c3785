/*
 * regions.c - the DIME* paper's region logs (section 3.2): hash, BST and
 * merger BST. They exist so that the
 * paper's comparison can be re-run against our exact policy.
 *
 * The paper works on Pin traces: straight-line code entered at one
 * address and left at the first unconditional transfer. Pin decides once
 * per trace (when it compiles it) whether to instrument it, checking the
 * log; an instrumented trace then records on every execution, and goes
 * into the log. We emulate that with our probes:
 *
 *   - a trace is entered at the destination D of every event, and runs
 *     from D to the first trace end above it (stint_abi.h: the rewriter
 *     lists the ends of unconditional transfers);
 *   - the first time a run enters a trace starting at D, the policy
 *     decides against the log (and the traces added earlier in this run)
 *     whether to instrument it; the decision holds for the whole run,
 *     and an instrumented trace is added to the log;
 *   - each thread remembers the trace it is in; a probe records an event
 *     if its site lies in that trace and the trace is instrumented. A
 *     probe outside the current trace (the thread's first event, or the
 *     first after the budget gate reopened: Pin's "version switch")
 *     enters a trace that starts at the probe itself.
 *
 * Probes never retire in these modes (like --every): every execution of
 * an instrumented trace records, within the budget, as Pin's analysis
 * routine does. The log keeps (address, length) per module; a new trace
 * is skipped when:
 *   hash:   its address is a logged address;
 *   bst:    its address lies inside a logged region;
 *   merger: it lies wholly inside a logged region, end included (else it is added and
 *           merged with the regions it overlaps or touches).
 * Before a run uses a bst or merger log, directly consecutive regions are
 * merged, as the paper does before saving.
 *
 * The shared structures take a lock; a thread that cannot get it within
 * a bounded wait drops the event rather than wait longer.
 */
#include "stint.h"


#define DEC_SLOTS ((uint64_t)1 << 20) /* per-run decisions */
#define THR_SLOTS 4096

struct region {
	uint64_t bid;   /* build-id hash of the module */
	uint64_t addr;  /* link vaddr */
	uint64_t len;
	uint64_t flags; /* REG_NEW: added by this run, not saved yet */
};
#define REG_NEW 1

struct thr_slot {
	uint32_t tid;
	uint32_t instr;
	uint64_t bid;
	uint64_t lo, hi;
};

static int reg_cmp(const struct region *r, uint64_t bid, uint64_t addr)
{
	if (r->bid != bid)
		return r->bid < bid ? -1 : 1;
	if (r->addr != addr)
		return r->addr < addr ? -1 : 1;
	return 0;
}

/* Index of the first region >= (bid, addr). */
static uint64_t reg_lower(struct stint_global *g, uint64_t bid, uint64_t addr)
{
	struct region *r = (struct region *)g->reg.tab;
	uint64_t lo = 0, hi = g->reg.n;
	while (lo < hi) {
		uint64_t mid = (lo + hi) / 2;
		if (reg_cmp(&r[mid], bid, addr) < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

static void reg_insert_at(struct stint_global *g, uint64_t i, uint64_t bid, uint64_t addr, uint64_t len, uint64_t flags)
{
	struct region *r = (struct region *)g->reg.tab;
	if (g->reg.n >= REG_MAX)
		return;
	for (uint64_t k = g->reg.n; k > i; k--)
		r[k] = r[k - 1];
	r[i].bid = bid;
	r[i].addr = addr;
	r[i].len = len;
	r[i].flags = flags;
	g->reg.n++;
}

static void reg_delete(struct stint_global *g, uint64_t i)
{
	struct region *r = (struct region *)g->reg.tab;
	for (uint64_t k = i; k + 1 < g->reg.n; k++)
		r[k] = r[k + 1];
	g->reg.n--;
}

/*
 * The policy's decision for trace (bid, a, n); when it says instrument,
 * the trace goes into the log. Called with regions_lock held.
 */
static int reg_decide(struct stint_global *g, uint64_t bid, uint64_t a, uint64_t n)
{
	struct region *r = (struct region *)g->reg.tab;
	uint64_t i = reg_lower(g, bid, a);
	int exact = i < g->reg.n && r[i].bid == bid && r[i].addr == a;
	/* the region starting at or before a */
	int64_t pi = exact ? (int64_t)i : (int64_t)i - 1;
	int inside = pi >= 0 && r[pi].bid == bid && r[pi].addr <= a && a < r[pi].addr + r[pi].len;
	switch (g->log.policy) {
	case POLICY_HASH:
		if (exact)
			return 0;
		reg_insert_at(g, i, bid, a, n, REG_NEW);
		return 1;
	case POLICY_BST:
		if (inside)
			return 0;
		reg_insert_at(g, i, bid, a, n, REG_NEW);
		return 1;
	case POLICY_MERGER: {
		if (inside && a + n <= r[pi].addr + r[pi].len)
			return 0; /* wholly inside (formats/redlog settles the paper's bound as <=) */
		/* add [a, a+n) and merge every region it overlaps or touches */
		uint64_t lo = a, hi = a + n;
		uint64_t k = inside || (pi >= 0 && r[pi].bid == bid && r[pi].addr + r[pi].len == a) ? (uint64_t)pi : i;
		while (k < g->reg.n && r[k].bid == bid && r[k].addr <= hi) {
			if (r[k].addr < lo)
				lo = r[k].addr;
			if (r[k].addr + r[k].len > hi)
				hi = r[k].addr + r[k].len;
			reg_delete(g, k);
		}
		reg_insert_at(g, reg_lower(g, bid, lo), bid, lo, hi - lo, REG_NEW);
		return 1;
	}
	}
	return 1;
}

/* The end of the trace entered at link vaddr a of module m. */
static uint64_t trace_end(struct stint_module *m, uint64_t base, uint64_t a)
{
	if (!m->ntrace_ends || a < m->text_lo)
		return a + 1;
	const uint32_t *e = (const uint32_t *)(base + m->trace_ends_vaddr);
	uint64_t x = a - m->text_lo, lo = 0, hi = m->ntrace_ends;
	while (lo < hi) {
		uint64_t mid = (lo + hi) / 2;
		if (e[mid] <= x)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo < m->ntrace_ends ? m->text_lo + e[lo] : a + 1;
}

/* This run's decision for the trace entered at (bid, a): cached per run. */
static int trace_decision(struct stint_global *g, uint64_t bid, uint64_t a, uint64_t n, int *ok)
{
	uint64_t k0 = mix(bid, a) | 1, k1 = a;
	uint64_t *t = (uint64_t *)g->reg.decisions;
	uint64_t h = mix(k0, k1);
	for (uint32_t i = 0; i < 64; i++) {
		uint64_t *e = &t[2 * ((h + i) & (DEC_SLOTS - 1))];
		uint64_t e0 = __atomic_load_n(&e[0], __ATOMIC_ACQUIRE);
		if (e0 == k0) {
			uint64_t v = __atomic_load_n(&e[1], __ATOMIC_ACQUIRE);
			if (v)
				return (int)(v & 1);
			/* being decided by another thread: decide ourselves below */
			break;
		}
		if (e0 == 0)
			break;
	}
	if (!lock_bounded(&g->reg.lock)) {
		*ok = 0;
		return 0;
	}
	/* look again under the lock, then decide and cache */
	for (uint32_t i = 0; i < 64; i++) {
		uint64_t *e = &t[2 * ((h + i) & (DEC_SLOTS - 1))];
		if (e[0] == k0 && e[1]) {
			unlock(&g->reg.lock);
			return (int)(e[1] & 1);
		}
		if (e[0] == 0) {
			int d = reg_decide(g, bid, a, n);
			__atomic_store_n(&e[1], (uint64_t)(2 | d), __ATOMIC_RELEASE);
			__atomic_store_n(&e[0], k0, __ATOMIC_RELEASE);
			unlock(&g->reg.lock);
			return d;
		}
	}
	int d = reg_decide(g, bid, a, n); /* table full around here: decide uncached */
	unlock(&g->reg.lock);
	return d;
}

static struct thr_slot *thread_slot(struct stint_global *g, uint32_t tid)
{
	struct thr_slot *s = (struct thr_slot *)g->reg.thr_slots;
	uint32_t h = (uint32_t)(mix(tid, 0x5eed) & (THR_SLOTS - 1));
	for (uint32_t i = 0; i < THR_SLOTS; i++) {
		struct thr_slot *e = &s[(h + i) & (THR_SLOTS - 1)];
		uint32_t t = __atomic_load_n(&e->tid, __ATOMIC_ACQUIRE);
		if (t == tid)
			return e;
		if (t == 0) {
			uint32_t z = 0;
			if (__atomic_compare_exchange_n(&e->tid, &z, tid, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE) || z == tid)
				return e;
		}
	}
	return 0;
}

/*
 * A probe fired in a region-policy run: should its event be recorded?
 * Also moves the thread into the trace entered at the destination.
 */
static int region_event(struct stint_global *g, struct stint_module *m, struct stint_probe *p, uint64_t dst_abs, int has_dst)
{
	uint64_t base = m->base;
	uint64_t bid = g->proc.modules[m->module_id].bidhash;
	struct thr_slot *ts = thread_slot(g, current_tid(g));
	if (!ts)
		return 1;
	int rec, ok = 1;
	if (ts->bid == bid && p->src >= ts->lo && p->src < ts->hi) {
		rec = (int)ts->instr;
	} else {
		uint64_t end = trace_end(m, base, p->src);
		rec = trace_decision(g, bid, p->src, end - p->src, &ok);
	}
	if (!ok)
		rec = 0;
	/* enter the destination's trace */
	ts->bid = 0;
	if (has_dst) {
		uint32_t id = module_of(g, dst_abs);
		if (id != DST_MODULE_NONE && g->proc.modules[id].smod) {
			struct stint_module *dm = (struct stint_module *)g->proc.modules[id].smod;
			uint64_t d = dst_abs - dm->base;
			uint64_t end = trace_end(dm, dm->base, d);
			int ok2 = 1;
			int instr = trace_decision(g, g->proc.modules[id].bidhash, d, end - d, &ok2);
			ts->lo = d;
			ts->hi = end;
			ts->instr = (uint32_t)(instr && ok2);
			ts->bid = g->proc.modules[id].bidhash;
		}
	}
	return rec;
}

static void regions_load_block(struct stint_global *g, const uint8_t *b)
{
	const uint32_t *h = (const uint32_t *)b;
	uint64_t bid = fnv64(b + 16, h[3]);
	const uint8_t *e = b + LOG_BLK_HDR;
	for (uint32_t i = 0; i < h[1]; i++, e += LOG_ENTRY) {
		uint64_t a = *(const uint64_t *)e, n = *(const uint64_t *)(e + 8);
		uint64_t at = reg_lower(g, bid, a);
		struct region *rr = (struct region *)g->reg.tab;
		if (at < g->reg.n && rr[at].bid == bid && rr[at].addr == a) {
			if (n > rr[at].len)
				rr[at].len = n;
			continue;
		}
		reg_insert_at(g, at, bid, a, n, 0);
	}
}

/* Set up the region structures and load the regions of the log. */
static int regions_setup(struct stint_global *g, const uint8_t *p, uint64_t size)
{
	long r = sys_mmap(0, REG_MAX * sizeof(struct region), S_PROT_READ | S_PROT_WRITE,
			  S_MAP_PRIVATE | S_MAP_ANONYMOUS | S_MAP_NORESERVE, -1, 0);
	long d = sys_mmap(0, DEC_SLOTS * 16, S_PROT_READ | S_PROT_WRITE, S_MAP_PRIVATE | S_MAP_ANONYMOUS | S_MAP_NORESERVE, -1, 0);
	long t = sys_mmap(0, THR_SLOTS * sizeof(struct thr_slot), S_PROT_READ | S_PROT_WRITE, S_MAP_PRIVATE | S_MAP_ANONYMOUS, -1, 0);
	if (sys_failed(r) || sys_failed(d) || sys_failed(t))
		return -1;
	g->reg.tab = (uint64_t)r;
	g->reg.decisions = (uint64_t)d;
	g->reg.thr_slots = (uint64_t)t;
	if (!p)
		return 0;
	int cut;
	log_scan(g, p, LOG_HDR, size, 1, regions_load_block, &cut);
	/* bst, merger: merge directly consecutive (and overlapping, for merger) regions */
	if (g->log.policy == POLICY_BST || g->log.policy == POLICY_MERGER) {
		struct region *rr = (struct region *)g->reg.tab;
		uint64_t w = 0;
		for (uint64_t i = 0; i < g->reg.n; i++) {
			if (w > 0 && rr[w - 1].bid == rr[i].bid &&
			    (rr[w - 1].addr + rr[w - 1].len == rr[i].addr ||
			     (g->log.policy == POLICY_MERGER && rr[i].addr < rr[w - 1].addr + rr[w - 1].len))) {
				uint64_t hi = rr[i].addr + rr[i].len;
				if (hi > rr[w - 1].addr + rr[w - 1].len)
					rr[w - 1].len = hi - rr[w - 1].addr;
				continue;
			}
			rr[w++] = rr[i];
		}
		g->reg.n = w;
	}
	return 0;
}

/* Blocks of this run's new regions (one per module): bytes written to buf. */
static uint64_t regions_blocks(struct stint_global *g, uint8_t *buf, uint64_t cap)
{
	if (!lock_bounded(&g->reg.lock))
		return 0;
	struct region *rr = (struct region *)g->reg.tab;
	uint64_t len = 0;
	uint32_t nm = __atomic_load_n(&g->proc.nmodules, __ATOMIC_ACQUIRE);
	if (nm > MAX_MODULES)
		nm = MAX_MODULES;
	for (uint32_t mod = 0; mod < nm; mod++) {
		struct gmodule *gm = &g->proc.modules[mod];
		if (!gm->build_id_len || !gm->smod)
			continue;
		uint64_t bid = gm->bidhash;
		uint64_t i = reg_lower(g, bid, 0);
		uint8_t *h = buf + len;
		uint8_t *e = h + LOG_BLK_HDR;
		uint32_t count = 0;
		for (; i < g->reg.n && rr[i].bid == bid; i++) {
			if (!(rr[i].flags & REG_NEW))
				continue;
			if ((uint64_t)(e + LOG_ENTRY - buf) > cap)
				break;
			put64(e, rr[i].addr);
			put64(e + 8, rr[i].len);
			s_memset(e + 16, 0, 16);
			rr[i].flags &= ~(uint64_t)REG_NEW;
			e += LOG_ENTRY;
			count++;
		}
		if (count)
			len += log_seal_block(g, h, count, gm);
	}
	unlock(&g->reg.lock);
	return len;
}
