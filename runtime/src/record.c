/*
 * record.c - recording a probe's outcome: the probe entry that the
 * trampolines call (stint_record), the (probe, destination) hash set that
 * records each outcome once, and the row of an event.
 */
#include "stint.h"

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
		uint64_t *pw = &g->hs.pages[slot / 256 / 64], bit = 1ULL << (slot / 256 % 64);
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
	__atomic_fetch_add(&g->hs.full, 1, __ATOMIC_RELAXED);
	return -1;
}

/* Enter pair (p, v), which the set holds, in the hit table (hit.h) when
 * p's module answers from it. The three stores may land in any order: a
 * reader checks the third word against the first two. */
static inline void hit_note(const struct stint_module *m, const struct stint_probe *p, uint64_t v)
{
	if (!__atomic_load_n(&m->hit, __ATOMIC_RELAXED))
		return;
	uint64_t k = (uint64_t)p + v;
	uint64_t *e = (uint64_t *)(HIT_ADDR + (k & (HIT_SLOTS - 1)) * 24);
	__atomic_store_n(&e[0], (uint64_t)p, __ATOMIC_RELAXED);
	__atomic_store_n(&e[1], v, __ATOMIC_RELAXED);
	__atomic_store_n(&e[2], k, __ATOMIC_RELAXED);
}

/* Whether destination v is in indirect probe p's inline cache: cache,
 * cache2, and arm and arm_to, which a probe without a direct destination
 * does not use (record_probe fills them, most recent first, with
 * recorded destinations only). */
static int probe_cached(const struct stint_probe *p, uint64_t v)
{
	return __atomic_load_n(&p->cache, __ATOMIC_RELAXED) == v || __atomic_load_n(&p->cache2, __ATOMIC_RELAXED) == v ||
	       __atomic_load_n(&p->arm, __ATOMIC_RELAXED) == v || __atomic_load_n(&p->arm_to, __ATOMIC_RELAXED) == v;
}

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
	rw->dst = id == DST_MODULE_NONE ? v : v - g->proc.modules[id].base;
}

/* Whether the n bytes at b are an indirect call (ff /2, a REX prefix
 * allowed) of exactly that length. */
static int is_ind_call(const uint8_t *b, int n)
{
	int i = (b[0] & 0xf0) == 0x40;
	if (i + 2 > n || b[i] != 0xff || ((b[i + 1] >> 3) & 7) != 2)
		return 0; /* (never a byte past b[n - 1]: r may end the text) */
	int mod = b[i + 1] >> 6, rm = b[i + 1] & 7, len = i + 2;
	if (mod != 3 && rm == 4) {
		if (len >= n)
			return 0;
		if (mod == 0 && (b[len] & 7) == 5)
			len += 4;
		len++;
	}
	if (mod == 0 && rm == 5)
		len += 4;
	else if (mod == 1)
		len += 1;
	else if (mod == 2)
		len += 4;
	return len == n;
}

/* The length of the call that ends at r, a return address in rewritten
 * code, for function f: a direct call to f, else an indirect call, else
 * a direct call elsewhere (f was reached by a tail call); 0 when no
 * call ends there. */
static int call_len_before(const uint8_t *r, uint64_t f)
{
	int32_t rel;
	s_memcpy(&rel, r - 4, 4);
	if (r[-5] == 0xe8 && (uint64_t)r + (int64_t)rel == f)
		return 5;
	for (int n = 2; n <= 7; n++)
		if (is_ind_call(r - n, n))
			return n;
	return r[-5] == 0xe8 ? 5 : 0;
}

/* The source fields of an entry probe's row (STINT_PF_ENTRY) for
 * function f entered with return address r: the call that ends at r
 * when r is in rewritten code (its bytes are read only there: an
 * address on the stack may be anything); else r itself. */
static void row_set_caller(struct stint_global *g, struct row *rw, uint64_t r, uint64_t f)
{
	uint32_t id = module_of(g, r);
	int n = 0;
	if (id != DST_MODULE_NONE) {
		const struct gmodule *gm = &g->proc.modules[id];
		const struct stint_module *sm = (const struct stint_module *)gm->smod;
		if (sm && r >= gm->base + sm->text_lo + 8 && r <= gm->base + sm->text_hi)
			n = call_len_before((const uint8_t *)r, f);
	} else {
		id = module_of_unknown(g, r);
	}
	rw->kind = n && n != 5 ? STINT_K_IND_CALL : STINT_K_CALL;
	rw->src_module = (uint16_t)id;
	rw->src = (id == DST_MODULE_NONE ? r : r - g->proc.modules[id].base) - (uint64_t)n;
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
		__atomic_fetch_add(&g->per.refused, 1, __ATOMIC_RELAXED);
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

/* An event's row: to the sampler when sampling (every-occurrence
 * modules only), else to the trace. */
static inline void emit_event(struct stint_global *g, struct stint_probe *p, const struct row *rw, int every)
{
	if (UNLIKELY(every && g->smp.method))
		sample_event(g, p, rw);
	else
		emit(rw);
}

/*
 * Slot probe p has just recorded destination v, new in this run
 * (default mode). When its slot lies in PT_GNU_RELRO (STINT_PF_FINAL),
 * read-only since the dynamic linker relocated the module, or is a PLT
 * slot lazy binding has bound (v is not the file's value), and holds v,
 * the site can bring no other outcome while the slot keeps v: it gets
 * its original bytes, and a call through a PLT stub runs as the
 * original (it ran the trampoline's inline check on every call: 14% of
 * the sqlite3 workload's samples). The site is listed: slots_poll puts
 * the patch back if the slot changes after all. Only a restorable patch
 * of this one probe; not with a budget, whose
 * off-switch keeps slot sites off while their value is a recorded one
 * (sw_slot_held), nor where outcomes record more than once.
 */
static void slot_retire(struct stint_global *g, struct stint_module *m, struct stint_probe *p, uint64_t v, uint64_t rs)
{
	if ((p->flags & (STINT_PF_SLOT | STINT_PF_FINAL)) != (STINT_PF_SLOT | STINT_PF_FINAL) || !(rs & RS_PATCHING) ||
	    g->per.budget_on || g->sw.on || (m->flags & (STINT_MF_EVERY | STINT_MF_CONTEXT | STINT_MF_COUNTDOWN)) ||
	    p->patch == STINT_NO_PATCH || p->patch >= m->npatches)
		return;
	const struct stint_patch *pt = (const struct stint_patch *)(m->base + m->patches_vaddr) + p->patch;
	uint64_t slot = m->base + p->dst;
	if (!(pt->flags & STINT_PATCH_RESTORABLE) || pt->nprobes != 1 || pt->len > 16 ||
	    __atomic_load_n((const uint64_t *)slot, __ATOMIC_RELAXED) != v)
		return;
	if (p->rets && v == m->base + p->rets - 1)
		return; /* a lazily bound slot's way to the resolver: the next value is the bound one */
	uint32_t k = __atomic_fetch_add(&g->slots.n, 1, __ATOMIC_ACQ_REL);
	if (k >= SLOTS_HELD)
		return; /* no room to watch it: it stays patched */
	struct slot_held *e = &g->slots.e[k];
	e->site = m->base + pt->addr;
	e->value = v;
	e->len = pt->len;
	e->at_start = (pt->flags & STINT_PATCH_AT_START) != 0;
	s_memcpy(e->patched, (const void *)e->site, pt->len);
	e->state = SLOT_HELD;
	code_write(e->site, pt->orig, pt->len, e->at_start, 0);
	/* listed once restored: a check that saw it earlier could put the
	 * patch back before this restore undid it */
	__atomic_store_n(&e->slot, slot, __ATOMIC_RELEASE);
}

/*
 * A retired slot site whose slot no longer holds the value it retired
 * with gets its patch back (the patched bytes it had), so that the
 * trampoline records the new destination, and retires again after.
 * Calls through it between the change and the check go unrecorded; only
 * a hooking library changes a bound slot, and the hook's own code, new
 * code, enters the runtime at once. At most every
 * SLOTS_POLL_TSC cycles (force: the period thread's, each period), by
 * one thread at a time; slots_drop holds the lock while a closing
 * module's entries go.
 */
static void slots_poll(struct stint_global *g, int force)
{
	uint32_t n = __atomic_load_n(&g->slots.n, __ATOMIC_ACQUIRE);
	if (!n)
		return; /* every runtime entry of the default mode comes here */
	uint64_t now = rdtsc();
	if ((!force && now - __atomic_load_n(&g->slots.last_tsc, __ATOMIC_RELAXED) < SLOTS_POLL_TSC) || !try_lock(&g->slots.lock))
		return;
	__atomic_store_n(&g->slots.last_tsc, now, __ATOMIC_RELAXED);
	for (uint32_t k = 0; k < n && k < SLOTS_HELD; k++) {
		struct slot_held *e = &g->slots.e[k];
		uint64_t slot = __atomic_load_n(&e->slot, __ATOMIC_ACQUIRE);
		if (!slot || e->state != SLOT_HELD || __atomic_load_n((const uint64_t *)slot, __ATOMIC_RELAXED) == e->value)
			continue;
		e->state = SLOT_REARMED;
		code_write(e->site, e->patched, e->len, e->at_start, 0);
	}
	unlock(&g->slots.lock);
}

/* Module [lo, hi) is closing: its slot sites are no longer checked. */
static void slots_drop(struct stint_global *g, uint64_t lo, uint64_t hi)
{
	uint32_t n = __atomic_load_n(&g->slots.n, __ATOMIC_ACQUIRE);
	if (!n)
		return;
	int locked = lock_bounded(&g->slots.lock);
	for (uint32_t k = 0; k < n && k < SLOTS_HELD; k++) {
		struct slot_held *e = &g->slots.e[k];
		if (e->site >= lo && e->site < hi)
			e->state = SLOT_GONE;
	}
	if (locked)
		unlock(&g->slots.lock);
}

/* Record probe p's outcome v; returns 1 if an event was written. */
static int record_probe(struct stint_global *g, struct stint_module *m, struct stint_probe *p, uint64_t v, uint64_t rs)
{
	if (UNLIKELY(g->reg.mode))
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
		if (p->flags & STINT_PF_ENTRY)
			row_set_caller(g, &rw, v, base + p->dst);
		emit_event(g, p, &rw, every);
		if (!every && (rs & RS_PATCHING)) {
			retarget(base, p);
			patch_done(m, base, p->patch, p, 0);
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
	int added = -1;
	if (!every) {
		/* the inline cache (probe_cached) only ever holds recorded
		 * destinations, so a racing update leaves valid entries; the
		 * newest goes first and the others move down a place */
		if (probe_cached(p, v) && __atomic_load_n(&p->state, __ATOMIC_RELAXED))
			return 0;
		uint64_t c1 = __atomic_load_n(&p->cache, __ATOMIC_RELAXED), c2 = __atomic_load_n(&p->cache2, __ATOMIC_RELAXED);
		uint64_t c3 = __atomic_load_n(&p->arm, __ATOMIC_RELAXED);
		added = hash_add(g, (uint64_t)p, v);
		__atomic_store_n(&p->arm_to, c3, __ATOMIC_RELAXED);
		__atomic_store_n(&p->arm, c2, __ATOMIC_RELAXED);
		__atomic_store_n(&p->cache2, c1, __ATOMIC_RELAXED);
		__atomic_store_n(&p->cache, v, __ATOMIC_RELAXED);
		__atomic_store_n(&p->state, 1, __ATOMIC_RELAXED);
		if (added == 0) {
			hit_note(m, p, v);
			return 0;
		}
	}
	row_set_dst(g, &rw, p, v);
	uint64_t key = (p->flags & STINT_PF_VALUE) ? v : rw.dst;
	if (!every && log_seen(g, m, p, key, rw.dst_module)) {
		/* recorded by an earlier run: say it was refused (once: the
		 * in-run set has it now) */
		rw.kind = (uint8_t)(STINT_REFUSED_BASE + p->kind);
		emit(&rw);
		__atomic_fetch_add(&g->per.refused, 1, __ATOMIC_RELAXED);
		if (added > 0) {
			hit_note(m, p, v);
			slot_retire(g, m, p, v, rs);
		}
		return 0;
	}
	emit_event(g, p, &rw, every);
	if (!every)
		log_note(g, m, p, key, rw.dst_module);
	if (added > 0) {
		hit_note(m, p, v); /* after the row: a hit skips only what is written */
		slot_retire(g, m, p, v, rs);
	}
	return 1;
}

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
	if (m->flags & STINT_MF_COUNTS) {
		/* a block count without inlining (rewrite --no-opt ppi): the
		 * probe's counter, as the inline add would */
		const struct stint_probe *p0 = (const struct stint_probe *)(m->base + m->probes_vaddr);
		__atomic_fetch_add((uint64_t *)(m->base + m->counts_vaddr) + (p - p0), 1, __ATOMIC_RELAXED);
		return;
	}
	struct stint_global *g = G();
	int ctx = (m->flags & STINT_MF_CONTEXT) != 0;
	if (UNLIKELY(p->flags & STINT_PF_DELEG) && (!g->per.budget_on || !g->sw.on || !(rs & RS_PATCHING) || g->reg.mode || !sw_of(g, m, p->patch))) {
		/* a watch for the off-switch, and there is none here: the arm
		 * goes straight on, as it would without the watch (its outcome
		 * is another probe's to record) */
		__atomic_store_n(&p->state, 1, __ATOMIC_RELAXED);
		if (rs & RS_PATCHING)
			retarget(m->base, p); /* else the trampolines may not be writable */
		return;
	}
	if (m->flags & STINT_MF_PATHS) {
		if (LIKELY(!g->per.budget_on)) {
			paths_record(g, m, p, v, entry_sp);
			return;
		}
		if (GATE_CLOSED(g))
			return; /* a race with the gate closing */
		uint64_t t0 = rdtsc();
		paths_record(g, m, p, v, entry_sp);
		budget_charge(g, t0, 1, 0);
		return;
	}
	if (LIKELY(!g->per.budget_on)) {
		if (UNLIKELY(ctx))
			ctx_record(g, m, p, v, entry_sp, 1);
		else
			record_probe(g, m, p, v, rs);
		slots_poll(g, 0);
		return;
	}
	if (UNLIKELY(__atomic_load_n(&W()->alive, __ATOMIC_ACQUIRE) != 1))
		fork_child_reopen(g); /* a child: it starts its own periods */
	if (UNLIKELY(__atomic_load_n(&g->sw.self_gen, __ATOMIC_RELAXED) != __atomic_load_n(&g->sw.self_done, __ATOMIC_RELAXED)) &&
	    (rs & RS_PATCHING))
		sw_self_batch(g); /* the sync sites are this thread's to write (the off-switch) */
	if (UNLIKELY(__atomic_load_n(&p->state, __ATOMIC_RELAXED) == PROBE_RETWATCH)) {
		/* a logged call whose return is still to see (rets.c): what it
		 * costs is charged as a suppressed call, or with the gate
		 * closed at the period's end (sw_closed_call) */
		uint64_t t0 = rdtsc();
		ret_watched(g, m, p);
		if (GATE_CLOSED(g))
			__atomic_fetch_add(&g->per.late_tsc, call_charge(g, rdtsc() - t0, 0) + g->per.call_overhead_tsc, __ATOMIC_RELAXED);
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
		else if (g->sw.on && (rs & RS_PATCHING))
			sw_closed_call(g, m, p, v, rs);
		return;
	}
	uint64_t len0 = __atomic_load_n(&g->trace.file_len, __ATOMIC_RELAXED);
	uint64_t t0 = rdtsc();
	if (UNLIKELY(ctx)) {
		/* only the writing of new contexts is charged */
		if (ctx_record(g, m, p, v, entry_sp, 1))
			budget_charge(g, t0, 1, __atomic_load_n(&g->trace.file_len, __ATOMIC_RELAXED) != len0);
		return;
	}
	int r = record_probe(g, m, p, v, rs);
	if (g->sw.on && (rs & RS_PATCHING)) {
		if (r)
			ret_expect(g, m, p);
		sw_after_record(g, m, p, r);
	}
	budget_charge(g, t0, r, __atomic_load_n(&g->trace.file_len, __ATOMIC_RELAXED) != len0);
}
