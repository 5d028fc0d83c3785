/*
 * stacks.c - the stacks the runtime's C code runs on.
 *
 * Invariant: stint_probe_entry never runs C on the program's stack when a
 * private stack is free. A program's stack may be small or owned by
 * someone else (a Go goroutine's 8 KiB stack, whose neighbour the Go
 * runtime's stack walker reads; a coroutine; a sigaltstack), and the
 * runtime's deepest paths use a few KiB.
 *
 * STACKS_N stacks of STACKS_SIZE bytes in one NORESERVE mapping, a busy
 * word each, on a cache line of its own. A probe takes a free one with an
 * exchange (no system call, no wait: a signal handler that probes while
 * its thread holds a stack takes another) and gives it back after it has
 * switched back to the program's stack. It tries first the stack its own
 * stack's address picks, so that threads keep to stacks of their own:
 * one busy word for all made two threads' probes fight over its cache
 * line (two locked operations a probe, 36% of an every-occurrence run's
 * time on 2 threads). When every stack is busy, or before the mapping
 * exists, the C code runs on the program's stack as it always could, and
 * is counted.
 */
#include "stint.h"

/* Maps the stacks; without them every probe runs on the program's stack. */
static void stacks_init(struct stint_global *g)
{
	long r = sys_mmap(STINT_STACKS_HINT, (uint64_t)STACKS_N * STACKS_SIZE, S_PROT_READ | S_PROT_WRITE,
			  S_MAP_PRIVATE | S_MAP_ANONYMOUS | S_MAP_NORESERVE, -1, 0);
	if (sys_failed(r))
		return;
	g->stacks.base = (uint64_t)r;
}

/*
 * The top of a free private stack, now busy, or 0: run on the program's
 * stack. Called by stint_probe_entry on the program's stack, so it is a
 * leaf that needs none.
 */
STINT_API uint64_t stint_stack_get(const struct stint_probe *p)
{
	const struct stint_module *m = (const struct stint_module *)((const uint8_t *)p - p->module_back);
	if (!(__atomic_load_n(&m->runtime_state, __ATOMIC_ACQUIRE) & RS_ACTIVE))
		return 0; /* G() may not be mapped yet; stint_record returns at once */
	struct stint_global *g = G();
	uint64_t base = g->stacks.base;
	if (!base)
		return 0;
	uint64_t sp = (uint64_t)__builtin_frame_address(0);
	uint32_t i0 = (uint32_t)((sp >> 16) ^ (sp >> 22)) % STACKS_N;
	for (uint32_t j = 0; j < STACKS_N; j++) {
		uint32_t i = (i0 + j) % STACKS_N;
		if (!__atomic_load_n(&g->stacks.busy[i].w, __ATOMIC_RELAXED) &&
		    !__atomic_exchange_n(&g->stacks.busy[i].w, 1, __ATOMIC_ACQUIRE))
			return base + (i + 1) * STACKS_SIZE;
	}
	__atomic_fetch_add(&g->stacks.fallbacks, 1, __ATOMIC_RELAXED);
	return 0;
}

/* Gives back the stack whose top stint_stack_get returned. */
STINT_API void stint_stack_put(uint64_t top)
{
	struct stint_global *g = G();
	uint64_t i = (top - g->stacks.base) / STACKS_SIZE - 1;
	__atomic_store_n(&g->stacks.busy[i].w, 0, __ATOMIC_RELEASE);
}
