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
 * bit each. A probe takes a free one with lock bts (no system call, no
 * wait: a signal handler that probes while its thread holds a stack takes
 * another) and gives it back after it has switched back to the program's
 * stack. When every stack is busy, or before the mapping exists, the C
 * code runs on the program's stack as it always could, and is counted.
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
	for (;;) {
		uint64_t busy = __atomic_load_n(&g->stacks.busy, __ATOMIC_RELAXED);
		if (busy == ~(uint64_t)0) {
			__atomic_fetch_add(&g->stacks.fallbacks, 1, __ATOMIC_RELAXED);
			return 0;
		}
		uint64_t i = (uint64_t)__builtin_ctzll(~busy);
		if (!(__atomic_fetch_or(&g->stacks.busy, (uint64_t)1 << i, __ATOMIC_ACQUIRE) & ((uint64_t)1 << i)))
			return base + (i + 1) * STACKS_SIZE;
	}
}

/* Gives back the stack whose top stint_stack_get returned. */
STINT_API void stint_stack_put(uint64_t top)
{
	struct stint_global *g = G();
	uint64_t i = (top - g->stacks.base) / STACKS_SIZE - 1;
	__atomic_fetch_and(&g->stacks.busy, ~((uint64_t)1 << i), __ATOMIC_RELEASE);
}
