/*
 * Exact block counts (STINT_MF_COUNTS): each block probe's trampoline
 * adds 1 to its counter (struct stint_module.counts_vaddr, one uint64_t
 * per probe) and never calls the runtime. The period thread, at each
 * period's end, and the exit path, at the run's end, turn the counters
 * into STINT_K_BLOCK_COUNT rows: one per block whose count moved since
 * the module's previous rows, with the difference and the running total.
 *
 * The trampolines add without a lock prefix unless rewritten with
 * --counts-atomic, as gcov does by default: threads that run the same
 * block at the same instant may lose an increment. A process that leaves
 * through _exit, exec or a fatal signal loses what its blocks counted
 * since the last period's rows (at most a period: 1 s by default); the
 * executable's own DT_FINI code runs after the last rows. A forked child
 * starts with its parent's counts (it inherits the counters' memory): its
 * rows' totals include them.
 */

/* The module's array of counts at its last rows, mapped on first use;
 * 0 when it cannot be. */
static uint64_t *counts_prev(struct gmodule *gm, uint32_t n)
{
	if (gm->counts_prev)
		return (uint64_t *)gm->counts_prev;
	size_t len = ((size_t)n * 8 + 4095) & ~(size_t)4095;
	long p = sys_mmap(0, len, S_PROT_READ | S_PROT_WRITE, S_MAP_PRIVATE | S_MAP_ANONYMOUS, -1, 0);
	if (sys_failed(p))
		return 0;
	gm->counts_prev = (uint64_t)p;
	return (uint64_t *)p;
}

/* Write the rows of module id's moved counters, with time mono_ns. */
static void counts_module(struct stint_global *g, uint32_t id, struct gmodule *gm, uint64_t mono_ns)
{
	const struct stint_module *m = (const struct stint_module *)gm->smod;
	uint64_t base = (uint64_t)m - m->self_vaddr;
	const uint64_t *c = (const uint64_t *)(base + m->counts_vaddr);
	const struct stint_probe *pr = (const struct stint_probe *)(base + m->probes_vaddr);
	uint64_t *prev = counts_prev(gm, m->nprobes);
	if (!prev) {
		__atomic_fetch_add(&g->trace.dropped, 1, __ATOMIC_RELAXED);
		return;
	}
	struct row rw;
	rw.kind = STINT_K_BLOCK_COUNT;
	rw.src_module = (uint16_t)id;
	rw.dst_module = DST_MODULE_NONE;
	rw.time = mono_ns;
	rw.tid = 0;
	for (uint32_t i = 0; i < m->nprobes; i++) {
		uint64_t v = __atomic_load_n(&c[i], __ATOMIC_RELAXED);
		if (v == prev[i])
			continue;
		rw.src = pr[i].src;
		rw.dst = v - prev[i];
		rw.value = v;
		emit(&rw);
		prev[i] = v;
	}
}

/* Write the rows of every counting module's moved counters (under the
 * period lock: the period thread and the exit path). */
static void counts_dump(struct stint_global *g, uint64_t mono_ns)
{
	uint32_t n = modules_n(g);
	for (uint32_t i = 0; i < n; i++) {
		struct gmodule *gm = &g->proc.modules[i];
		if (!__atomic_load_n(&gm->ready, __ATOMIC_ACQUIRE) || !gm->smod)
			continue;
		const struct stint_module *m = (const struct stint_module *)gm->smod;
		if ((m->flags & STINT_MF_COUNTS) && m->counts_vaddr)
			counts_module(g, i, gm, mono_ns);
	}
}
