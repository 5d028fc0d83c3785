/*
 * sw_sync.c - the sync sites (STINT_PATCH_SYNC), written by the program's
 * only thread or with threads parked; membarriers.
 *
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
#include "stint.h"

/* Whether the program has one thread: the process's thread count is at
 * most that thread and the period thread. The count is the link count of
 * /proc/self/task less 2 (task_stat), or field 20 of /proc/self/stat (an
 * open, a read and a close: 7.5 us) where that fails. */
static int sw_alone(struct stint_global *g)
{
	uint64_t runtime = __atomic_load_n(&g->per.period_thread, __ATOMIC_ACQUIRE) ? 1 : 0;
	struct s_stat st;
	if (!sys_failed(task_stat(g, &st)) && st.nlink >= 3)
		return st.nlink - 2 <= 1 + runtime;
	char state;
	uint64_t v = 0;
	return proc_stat_threads(&state, &v, 0) == 0 && v >= 1 && v <= 1 + runtime;
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
	uint32_t gen = __atomic_load_n(&g->sw.self_gen, __ATOMIC_ACQUIRE);
	if (gen == __atomic_load_n(&g->sw.self_done, __ATOMIC_ACQUIRE) || !try_lock(&g->sw.self_lock))
		return;
	uint64_t t0 = rdtsc();
	int on = (int)__atomic_load_n(&g->sw.self_on, __ATOMIC_ACQUIRE);
	int keep_fresh = (int)__atomic_load_n(&g->sw.self_keep_fresh, __ATOMIC_ACQUIRE);
	uint64_t all = ~0ULL, old = 0;
	long masked = sys_call4(SYS_rt_sigprocmask, S_SIG_SETMASK, (long)&all, (long)&old, 8);
	int alone = __atomic_load_n(&g->sw.self, __ATOMIC_ACQUIRE) && sw_alone(g);
	sw_take(g, SW_UNBELL);
	uint64_t changed = 0;
	int ask = 0;
	if (!alone)
		__atomic_store_n(&g->sw.self, 0, __ATOMIC_RELEASE);
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
	__atomic_store_n(&g->sw.self_done, gen, __ATOMIC_RELEASE);
	unlock(&g->sw.self_lock);
	if (!sys_failed(masked))
		sys_call4(SYS_rt_sigprocmask, S_SIG_SETMASK, (long)&old, 0, 8);
	if (ask)
		sw_request(g, SW_REQ_SYNC);
	uint64_t d = rdtsc() - t0;
	if (d > g->per.charge_cap_tsc)
		d = g->per.charge_cap_tsc; /* longer: descheduled (stores and a small read) */
	d += g->per.call_overhead_tsc;
	__atomic_fetch_add(&g->sw.tsc, d, __ATOMIC_RELAXED);
	__atomic_fetch_add(&g->sw.lazy_tsc, d, __ATOMIC_RELAXED);
	__atomic_fetch_add(on ? &g->sw.ons : &g->sw.offs, changed, __ATOMIC_RELAXED);
	sw_count_on(g, on ? (int64_t)changed : -(int64_t)changed);
	if (on && changed)
		__atomic_store_n(&g->sw.is_on, 1, __ATOMIC_RELEASE);
}

static int sw_self_begin(struct stint_global *g, int recheck)
{
	int self = g->sw.self_ok && g->proc.sync_core && g->sw.has_sync &&
		   (recheck ? sw_alone(g) : (int)__atomic_load_n(&g->sw.self, __ATOMIC_ACQUIRE));
	__atomic_store_n(&g->sw.self, (uint32_t)self, __ATOMIC_RELEASE);
	if (self)
		return SW_MODE_SELF;
	if (!lock_bounded(&g->sw.self_lock))
		return SW_MODE_BUSY;
	return __atomic_load_n(&g->sw.park_ok, __ATOMIC_ACQUIRE) ? SW_MODE_PARK : SW_MODE_HOLD;
}

/* Whether the period thread writes sync site pt in this batch (mode from
 * sw_self_begin; on: switching on). */
static int sw_sync_mine(struct stint_global *g, int mode, int on, const struct stint_patch *pt)
{
	if (!g->proc.sync_core || !sw_parkable(pt))
		return 0;
	if (mode == SW_MODE_PARK)
		return 1;
	return mode == SW_MODE_HOLD && (on || __atomic_load_n(&pt->remaining, __ATOMIC_ACQUIRE) == 0);
}

/* ... and at its end: ask the program thread for the sync sites' state. */
static void sw_self_end(struct stint_global *g, int mode, int on, int keep_fresh, int ask)
{
	if (mode == SW_MODE_PARK || mode == SW_MODE_HOLD)
		unlock(&g->sw.self_lock);
	if (mode != SW_MODE_SELF || !ask)
		return;
	__atomic_store_n(&g->sw.self_on, (uint32_t)on, __ATOMIC_RELEASE);
	__atomic_store_n(&g->sw.self_keep_fresh, (uint32_t)keep_fresh, __ATOMIC_RELEASE);
	__atomic_add_fetch(&g->sw.self_gen, 1, __ATOMIC_ACQ_REL);
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
	if (!__atomic_load_n(&g->sw.self, __ATOMIC_ACQUIRE)) {
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

/* A period's start without a window (sw_quiet_skip): no
 * listed site is switched on, but the cool watched probes are watched
 * again, as at every period's start. Without it gzip's end-of-input
 * branch (a logged run's half-logged site, run some 70 times a period)
 * went unrecorded in 6 of 6 logged runs; with it, recorded in 6 of 6. */
static void sw_period_upkeep(struct stint_global *g)
{
	sw_take(g, SW_REWATCH);
}

static void sync_core(void)
{
	sys_call3(SYS_membarrier, MEMBARRIER_SYNC_CORE, 0, 0);
}

/*
 * The period thread's membarrier, counted in epochs: a reader that gets
 * its original bytes is stamped with the epoch then current (sw_stamp,
 * after its locked store), and a barrier ends the epoch it starts in, so
 * once a reader's stamp is below g->sw.synced no core still decodes its
 * old pun. A readee whose readers are all that old needs no barrier of its
 * own, which spares most batches one: IPIs cost tens of us here, and
 * milliseconds when the host has taken the target's vCPU away.
 */
static void sw_barrier(struct stint_global *g)
{
	uint32_t e = __atomic_fetch_add(&g->sw.epoch, 1, __ATOMIC_ACQ_REL);
	sync_core();
	__atomic_store_n(&g->sw.synced, e + 1, __ATOMIC_RELEASE);
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
