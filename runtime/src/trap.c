/*
 * trap.c - the int3 fallback (ABI 21). A site no jump fits holds an int3
 * at its first byte (place.Planner.Trap); the SIGTRAP handler here sends
 * a thread that trapped there on to the site's trampoline, with the
 * state the site had, as a jump would. Any other SIGTRAP goes to the
 * action the program had before (its handler, or the default: a core
 * dump). A signal costs microseconds: the rewriter uses this only where
 * no jump fits, and a site's restore (all its outcomes seen, the
 * off-switch) removes the int3 as it removes a jump.
 *
 * Limits (docs/DESIGN.md): a thread that runs an int3 site with SIGTRAP
 * blocked is killed by the kernel, and a program that installs its own
 * SIGTRAP handler later receives the int3 sites' traps itself; rewrite
 * --no-traps leaves such sites unpatched instead.
 */
#include "stint.h"

#define S_SIGTRAP     5
#define S_SA_SIGINFO  0x4
#define S_SA_RESTORER 0x04000000
#define S_SA_ONSTACK  0x08000000
#define S_SA_RESTART  0x10000000
#define S_SA_NODEFER  0x40000000
#define S_SI_KERNEL   0x80
/* struct ucontext's rip: uc_flags, uc_link, uc_stack (40 bytes), then
 * the sigcontext's r8-r15, rdi, rsi, rbp, rbx, rdx, rax, rcx, rsp, rip */
#define UC_RIP_OFF    168
/* traps a site takes before it is retired (trap_handler) */
#define TRAP_HOT      1024

void stint_sigreturn(void); /* entry.S: mov $15,%rax; syscall */

/* The int3 site at addr, and with it its module, if a rewritten module
 * has one there. Reads the module list and the trap tables. */
static struct stint_trap *trap_find(struct stint_global *g, uint64_t addr, struct stint_module **mod)
{
	uint32_t n = modules_n(g);
	for (uint32_t i = 0; i < n; i++) {
		struct gmodule *gm = &g->proc.modules[i];
		if (!__atomic_load_n(&gm->ready, __ATOMIC_ACQUIRE))
			continue;
		struct stint_module *m = (void *)__atomic_load_n(&gm->smod, __ATOMIC_ACQUIRE);
		if (!m || !m->ntraps)
			continue;
		uint64_t a = addr - m->base;
		if (a < m->text_lo || a >= m->text_hi)
			continue;
		struct stint_trap *t = (void *)(m->base + m->traps_vaddr);
		_Static_assert(__builtin_offsetof(struct stint_trap, site) == 0, "the key first");
		uint32_t lo = first_key_at_least(t, m->ntraps, sizeof *t, a);
		*mod = m;
		return lo < m->ntraps && t[lo].site == a ? &t[lo] : 0;
	}
	return 0;
}

/* Restore an int3 site's original byte for good: its patch counts as
 * done, so the off-switch never applies it again. */
static void trap_retire(struct stint_module *m, const struct stint_trap *t)
{
	if (t->patch >= m->npatches)
		return;
	struct stint_patch *pt = (struct stint_patch *)(m->base + m->patches_vaddr) + t->patch;
	if (__atomic_exchange_n(&pt->remaining, 0, __ATOMIC_ACQ_REL) && (pt->flags & STINT_PATCH_RESTORABLE))
		stint_restore_atomic(m->base + pt->addr, pt->orig, pt->len);
}

/* A SIGTRAP not from an int3 site: what the program's action says. */
static void trap_pass(struct stint_global *g, int sig, void *si, void *uc, int code)
{
	const struct k_sigaction *o = &g->trap.old;
	if (o->handler > 1) { /* neither SIG_DFL nor SIG_IGN */
		if (o->flags & S_SA_SIGINFO)
			((void (*)(int, void *, void *))o->handler)(sig, si, uc);
		else
			((void (*)(int))o->handler)(sig);
		return;
	}
	if (o->handler == 1 && code != S_SI_KERNEL)
		return; /* ignored, as a sent SIGTRAP would be */
	/* The default action, as the program would have met it: raised
	 * again with ours gone, it is delivered once this handler returns. */
	struct k_sigaction dfl = {0, 0, 0, 0};
	sys_call4(SYS_rt_sigaction, S_SIGTRAP, (long)&dfl, 0, 8);
	sys_call3(SYS_tgkill, sys_call0(SYS_getpid), sys_call0(SYS_gettid), S_SIGTRAP);
}

static void trap_handler(int sig, void *si, void *uc)
{
	struct stint_global *g = G();
	uint64_t *rip = (uint64_t *)((char *)uc + UC_RIP_OFF);
	int code = ((const int *)si)[2]; /* si_code */
	struct stint_module *m = 0;
	struct stint_trap *t = code == S_SI_KERNEL ? trap_find(g, *rip - 1, &m) : 0;
	if (!t) {
		trap_pass(g, sig, si, uc, code);
		return;
	}
	*rip = m->base + t->tramp;
	__atomic_fetch_add(&g->trap.hits, 1, __ATOMIC_RELAXED);
	/* A hot site costs a signal a run (about 1.2 us here: a libsqlite3
	 * ret took 1.36 M, 1.65 s, in the sqlite3 workload): where a site retires
	 * anyway (not --every or --counts, which must see every run), it
	 * is retired after TRAP_HOT, its later new outcomes unrecorded
	 * (STINT_TRAP_RETIRE=0: never). */
	if (__atomic_add_fetch(&t->hits, 1, __ATOMIC_RELAXED) == TRAP_HOT && TABLES_WRITTEN(m) &&
	    (m->runtime_state & RS_PATCHING) && !g->trap.keep)
		trap_retire(m, t); /* (a site's hits say whether it retired) */
}

/* Write the original first byte of each of m's int3 sites back (m runs
 * without the handler). */
static void trap_restore(struct stint_module *m, uint64_t base)
{
	const struct stint_trap *t = (const void *)(base + m->traps_vaddr);
	const struct stint_patch *pt = (const void *)(base + m->patches_vaddr);
	for (uint32_t k = 0; k < m->ntraps; k++)
		if (t[k].patch < m->npatches)
			stint_restore_atomic(base + pt[t[k].patch].addr, pt[t[k].patch].orig, pt[t[k].patch].len);
}

/*
 * Once per process, when a module with int3 sites registers (its smod
 * set, so trap_find sees it): install the handler, keeping the action it
 * replaces. Where that fails, the module's int3 sites are restored.
 * patching: the module's text is writable. STINT_TRAP_RETIRE=0 keeps
 * hot sites (trap_handler).
 */
static void trap_install(struct stint_global *g, struct stint_module *m, uint64_t base, int patching, char **envp)
{
	if (!m->ntraps || __atomic_load_n(&g->trap.installed, __ATOMIC_ACQUIRE))
		return;
	int ok = 0;
	if (lock_bounded(&g->trap.lock)) {
		ok = g->trap.installed;
		if (!ok) {
			g->trap.keep = env_is_zero(env_get(envp, "STINT_TRAP_RETIRE"));
			/* SA_NODEFER: an int3 site in a handler the program had
			 * (trap_pass calls it) would otherwise trap with SIGTRAP
			 * blocked, which kills */
			struct k_sigaction sa = {(uint64_t)trap_handler,
						 S_SA_SIGINFO | S_SA_ONSTACK | S_SA_RESTART | S_SA_RESTORER | S_SA_NODEFER,
						 (uint64_t)stint_sigreturn, 0};
			ok = !sys_failed(sys_call4(SYS_rt_sigaction, S_SIGTRAP, (long)&sa, (long)&g->trap.old, 8));
			__atomic_store_n(&g->trap.installed, ok, __ATOMIC_RELEASE);
		}
		unlock(&g->trap.lock);
	}
	if (!ok && patching)
		trap_restore(m, base);
}
