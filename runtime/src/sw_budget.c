/*
 * sw_budget.c - the off-switch and the budget: the period thread's work
 * requests, what switching costs and what the gate keeps in reserve for
 * it, the windows (sites on for part of a period), rearms after new
 * code, and quiet periods.
 */
#include "stint.h"

/*
 * How long a rearm keeps the open-ended sites on: at most a window, and
 * at most SW_REARM_NS. What a rearm is for comes soon after the new code
 * that asked for it (the returns of the functions it calls, the cases
 * its branches take); the rest of a window-long rearm was detours. On
 * the sqlite3 series (10% of 100 ms, so windows of 10 ms), 2 ms against
 * a window: after two runs 99.25% against 99.11% of the full run's
 * events (means of 11 interleaved pairs of sets), run times equal
 * within this VM's noise; 0.5 ms gave 98.8%, and no rearm for returns
 * 93-95%.
 */
#define SW_REARM_NS 2000000ULL

/* Ask the period thread for work (SW_REQ_*) and wake it. */
static void sw_request(struct stint_global *g, uint32_t what)
{
	if (!g->sw.on || !g->per.period_thread)
		return;
	if (!(__atomic_fetch_or(&g->sw.req, what, __ATOMIC_ACQ_REL) & what))
		sys_call3(SYS_futex, (long)&g->sw.req, S_FUTEX_WAKE_PRIVATE, 1);
}

/*
 * After a recording call from a switchable site (open gate): list the
 * site; after the window, switch it off again (it has recorded what it
 * came for). A new event after the window means code not seen before is
 * running, which is when a ret or an indirect branch meets new
 * destinations (a new caller, a new case): the first one in a period
 * asks the period thread to switch the open-ended sites back on for as
 * long as a window lasts (the rearm, once a period: the time sites are
 * on stays within two windows a period), and meanwhile open-ended sites
 * stay on after recording. An open-ended site that keeps calling without
 * recording (SW_MISS_MAX) is switched off for the period.
 *
 * Each such event of a direct site also switches its own function's
 * sites on, from here (own_sites, rets.c): what follows new code (a ret
 * to a caller it had not returned to that way, its jump table's new case,
 * the other side of a jcc that had only gone one way) comes at once,
 * mostly before the period thread's rearm, and often after it is over.
 * A site that then records goes off again (after the window, as above);
 * a jcc whose recorded side runs waits, on, for the next switch-off. On
 * the sqlite3 series (exact log, two runs sharing a fresh one,
 * interleaved pairs; run 1 times from alternating rounds):
 *  - open-ended sites only, 24 pairs: a median of 99.00% of the full
 *    run's events after two runs (14 of 24 at 99% or more) against
 *    98.85% without (10 of 24); run 1 1.43x native against 1.44x;
 *  - instead of the rearm: 98.37% (5 pairs);
 *  - with the jccs, 11 pairs: run 1 alone a median of 97.6% against
 *    94.3-94.9%, after two runs 99.37% against 99.33-99.40%; run 1
 *    1.43-1.47x against 1.42-1.45x (three sets of 9-15 rounds).
 */
static void sw_after_record(struct stint_global *g, struct stint_module *m, const struct stint_probe *p, int recorded)
{
	if (UNLIKELY(__atomic_load_n(&p->state, __ATOMIC_RELAXED) == PROBE_WATCHED)) {
		sw_watched(g, m, (struct stint_probe *)p);
		return;
	}
	int over = __atomic_load_n(&g->sw.window_over, __ATOMIC_ACQUIRE);
	int open = !(p->flags & STINT_PF_DIRECT);
	int rearmed = __atomic_load_n(&g->sw.rearmed, __ATOMIC_ACQUIRE);
	int saturated = open && sw_missed(g, m, p, recorded);
	if (sw_call(g, m, p, saturated || (over && !(open && rearmed == SW_REARM_ON)), 0))
		__atomic_fetch_add(&g->sw.offs, 1, __ATOMIC_RELAXED);
	if (!over || !recorded)
		return;
	uint32_t n;
	const uint32_t *own = !open && g->sw.rets_on == RETS_ALL ? own_sites(m, p, &n) : 0;
	if (own)
		ret_switch_on(g, m, own, n);
	uint32_t z = 0;
	if (!rearmed &&
	    __atomic_compare_exchange_n(&g->sw.rearmed, &z, 1, 0, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED))
		sw_request(g, SW_REQ_REARM);
}

/*
 * A switchable site called while the gate is closed: record what it saw
 * and switch it off now (the off-switch). It calls once, to be switched off,
 * whatever it does: the outcome costs little more, and is otherwise lost
 * to every run whose budget is spent at the same point (start-up code
 * that runs once, at the same time in every run, was never recorded by
 * any). The switching is switching time, reported in this period's
 * switch row, the recording is not. Both are charged when the period
 * ends (period_roll): to it as far as its budget has room (the gate
 * closes early by a reserve for such switching, sw_off_reserve), the
 * rest to the next periods as debt: they come in amounts nobody can set
 * aside exactly (how many sites run for the first time after the gate
 * closed is not known). Over periods every ns is charged; a period's
 * overshoot is not made of work its budget could not have foreseen,
 * except in the last period, which has no next one. What is owed so far
 * caps the recording at half a budget a period (then a site is switched
 * off unrecorded, as before, and counted as suppressed, as is a call
 * that had nothing new). The paper's region logs never record late:
 * their DIME* instruments nothing while the budget is spent, and looks
 * at its log only when it instruments (regions.c); late refusal rows
 * also ran the last period, which has no next one to pay its debt, 1 ms
 * over on gzip (TestRegionNoLateRecord).
 */
static void sw_closed_call(struct stint_global *g, struct stint_module *m, struct stint_probe *p, uint64_t v, uint64_t rs)
{
	uint64_t len0 = __atomic_load_n(&g->trace.file_len, __ATOMIC_RELAXED);
	uint64_t t0 = rdtsc();
	/* charged at the period's end, perhaps to the next: at most half a
	 * budget (none when the budget is zero: QoS wants the program left
	 * alone) */
	uint64_t owed = __atomic_load_n(&g->per.late_tsc, __ATOMIC_RELAXED) + __atomic_load_n(&g->sw.lazy_tsc, __ATOMIC_RELAXED);
	int r = !g->reg.mode && owed < __atomic_load_n(&g->per.budget_tsc, __ATOMIC_RELAXED) / 2 ? record_probe(g, m, p, v, rs) : 0;
	if (r)
		ret_expect(g, m, p); /* its callee's return, which comes next (rets.c) */
	uint64_t t1 = rdtsc();
	/* A site that recorded is listed as an ordinary warm site (not
	 * fresh): its recorded arm now goes straight, so it would never
	 * call with the gate open to lose freshness, and a fresh site stays
	 * on after the windows (its detour on every run of a hot site for
	 * good). Its other outcomes are left to the windows. One that
	 * recorded nothing is listed fresh, as before. */
	int off = sw_call(g, m, p, 1, !r);
	uint64_t t2 = rdtsc();
	uint64_t rec = call_charge(g, t1 - t0, __atomic_load_n(&g->trace.file_len, __ATOMIC_RELAXED) != len0), d = t2 - t1;
	if (d > g->per.charge_cap_tsc)
		d = g->per.charge_cap_tsc; /* longer: the thread was descheduled (a store or two and a list entry) */
	d += g->per.call_overhead_tsc;
	if (!r)
		__atomic_fetch_add(&g->per.suppressed, 1, __ATOMIC_RELAXED);
	__atomic_fetch_add(&g->per.late_tsc, rec, __ATOMIC_RELAXED);
	__atomic_fetch_add(&g->sw.tsc, d, __ATOMIC_RELAXED);
	__atomic_fetch_add(&g->sw.lazy_tsc, d, __ATOMIC_RELAXED);
	if (off)
		__atomic_fetch_add(&g->sw.offs, 1, __ATOMIC_RELAXED);
}

/* What a batch besides its sites costs (at least what was measured at
 * start: the cap and three membarriers). */
static uint64_t sw_fixed(struct stint_global *g)
{
	uint64_t fixed = g->per.charge_cap_tsc + 3 * g->sw.sync_tsc;
	return g->sw.fixed_tsc > fixed ? g->sw.fixed_tsc : fixed;
}

/*
 * Fold a batch's cost into the estimates: per site, from batches of 16
 * sites or more (a moving average, which plans the period's switch-on
 * and sizes the reserves), and besides its sites, from smaller batches,
 * which are mostly that (the walk of the listed sites and of the
 * readees, membarriers, the signal mask). The fixed part follows a fall
 * slowly and a rise at once, but at most to twice what it was (or its
 * floor, sw_fixed) per batch. Under the e2e suite's load a batch of
 * 13 sites took 1.4 ms of the period thread's CPU time (membarriers
 * waiting on busy or descheduled vCPUs, or the host's stalls, which
 * count as CPU time here; not told apart), with a 2 ms budget: taken at
 * once, twice that left no room for any window, and with no windows
 * there were few batches to bring it down, so the next periods of the
 * run switched nothing on (TestQuietWindows failed so in CI). The batch
 * is still charged all it took; a rise that lasts is followed in a few
 * batches.
 */
static void sw_site_cost(struct stint_global *g, uint64_t d, uint64_t n)
{
	if (n >= 16) {
		g->sw.site_tsc = (7 * g->sw.site_tsc + d / n) / 8;
		return;
	}
	uint64_t est = g->sw.fixed_tsc, cap = 2 * sw_fixed(g);
	if (d > cap)
		d = cap;
	g->sw.fixed_tsc = d > est ? d : (7 * est + d) / 8;
}

/*
 * What a batch switching n sites is kept in reserve for: a quarter more
 * than the average per site, and the fixed part. (An average, not a
 * high mark: one slow batch would raise a high mark for many periods,
 * and with thousands of sites on the gates would close far too early.)
 */
static uint64_t sw_reserve(struct stint_global *g, uint64_t n)
{
	return n * g->sw.site_tsc * 5 / 4 + sw_fixed(g);
}

/*
 * What switching off the listed sites now on is kept in reserve for: a
 * batch's fixed part even when the count of those on (an estimate) is 0
 * (the self batch of a single-threaded program's sync sites comes with
 * it), a stall (SW_STALL_NS), and the switching that comes after the
 * gate closes (sites switching themselves off, batches of waiting
 * sites: sw_lazy_tsc), a quarter more than its high mark over the
 * recent periods whose gate closed (falling by a sixteenth a period),
 * at most an eighth of the budget, even while no batch left sites on.
 * That switching is charged to its own period as far as the budget has
 * room (period_roll), so the reserve is spent, not lost; what does not
 * fit is the next periods' debt, except in the last period, which has
 * no next one: without this reserve a run that spends every period's
 * budget (the region logs) would end over it. Nothing while none was
 * ever listed (sw_all_off runs no batch).
 */
static uint64_t sw_off_reserve(struct stint_global *g)
{
	if (!g->sw.on || !__atomic_load_n(&g->sw.listed, __ATOMIC_RELAXED))
		return 0;
	uint64_t budget = __atomic_load_n(&g->per.budget_tsc, __ATOMIC_RELAXED);
	uint64_t stall = budget / 64, lazy = g->sw.lazy_hi * 5 / 4;
	stall = g->sw.stall_tsc < stall ? g->sw.stall_tsc : stall;
	lazy = lazy < budget / 8 ? lazy : budget / 8;
	if (!g->sw.is_on)
		return lazy; /* sites the file left on, or that switched on for a call, still switch off */
	return sw_reserve(g, __atomic_load_n(&g->sw.listed_on, __ATOMIC_RELAXED)) + stall + lazy;
}

/* Set gate word 1 of every module that has switchable sites. */
static void gates_word1(struct stint_global *g, uint64_t v)
{
	uint32_t n = modules_n(g);
	for (uint32_t i = 0; i < n; i++) {
		struct gmodule *gm = &g->proc.modules[i];
		if (!__atomic_load_n(&gm->ready, __ATOMIC_ACQUIRE) || !gm->gate || !gm->sw)
			continue;
		__atomic_store_n((uint64_t *)(gm->gate + STINT_GATE_WORD1), v, __ATOMIC_RELEASE);
	}
}

/*
 * A batch (sw_batch), timed and counted: its time is switching time
 * (sw_tsc), and with charge also taken from the budget as it runs (a
 * switch-on); its sites go to the period's on or off count and to the
 * count of listed sites on; its cost per site feeds the estimate (not a
 * batch of parked SW_PEND sites: they cost more than the sites the
 * estimate is for). Returns the sites changed.
 */
static uint64_t sw_timed(struct stint_global *g, int on, int flags, int charge)
{
	uint64_t c0 = now_ns(S_CLOCK_THREAD_CPUTIME_ID);
	uint64_t t0 = rdtsc();
	uint64_t n = sw_batch(g, on, flags);
	if (UNLIKELY(g->test.on) && n < 16 && !(flags & SWB_PEND_ONLY) && g->per.period_idx >= 3)
		test_batch_stall(g);
	uint64_t d = rdtsc() - t0;
	/* The time the period thread ran, not the time it waited for a CPU:
	 * descheduled in the middle of a batch (this VM does that for
	 * milliseconds) it costs the program nothing, as a probe call's
	 * thread does not (CHARGE_CAP_NS). */
	uint64_t c = ns_to_tsc(g, now_ns(S_CLOCK_THREAD_CPUTIME_ID) - c0);
	if (c < d)
		d = c;
	__atomic_fetch_add(&g->sw.tsc, d, __ATOMIC_RELAXED);
	/* Sites waiting in SW_PEND got there by running after the budget
	 * was spent or the window ended, as the sites of sw_closed_call do,
	 * and a window's end (or a rearm's) comes when the budget has
	 * decided nothing: their cost is charged at the period's end, as the
	 * closed calls' is (period_roll), so that it does not close this
	 * period's gate early (the first run of new code is what the budget
	 * is for); what does not fit is the next periods' debt. */
	if (flags & (SWB_PEND_ONLY | SWB_KEEP_FRESH | SWB_DEBT)) {
		__atomic_fetch_add(&g->sw.lazy_tsc, d, __ATOMIC_RELAXED);
		charge = 0;
	}
	if (charge) {
		__atomic_fetch_add(&g->sw.charged_tsc, d, __ATOMIC_RELAXED);
		__atomic_fetch_add(&g->per.used_tsc, d, __ATOMIC_RELAXED);
	}
	__atomic_fetch_add(on ? &g->sw.ons : &g->sw.offs, n, __ATOMIC_RELAXED);
	sw_count_on(g, on ? (int64_t)n : -(int64_t)n);
	if (!(flags & SWB_PEND_ONLY))
		sw_site_cost(g, d, n);
	return n;
}

/* The period thread: switch every listed site off (at the window's end
 * not the fresh ones: see sw_call). When the budget is spent this was
 * reserved for (budget_charge) and is charged as it runs, once a period:
 * sites switched on after that (a call's callee's rets, rets.c; readees)
 * were switched on by calls after the gate closed, so switching them off
 * again is, like those calls, charged at the period's end, as at a
 * window's end (sw_timed). */
static void sw_all_off(struct stint_global *g, int window)
{
	int flags = SWB_KEEP_FRESH;
	if (!window) {
		flags = g->sw.off_paid ? SWB_DEBT : 0;
		g->sw.off_paid = 1;
		if (!__atomic_load_n(&g->sw.listed, __ATOMIC_RELAXED)) {
			g->sw.is_on = 0; /* none was ever listed: nothing to switch */
			return;
		}
	}
	sw_timed(g, 0, flags, 1);
	/* At a window's end fresh sites stay on, and one whose logged
	 * outcome goes straight through its arm never calls to switch
	 * itself off: the next spent or zero budget must still see them. */
	if (!window)
		g->sw.is_on = 0;
}

/* The period thread: switch the open-ended listed sites back on (the
 * rearm, see sw_after_record), charged to the budget as it runs. */
static void sw_rearm(struct stint_global *g)
{
	/* not when switching the open-ended sites on and off again would
	 * take the budget past its end (charged as it runs, it would be an
	 * overshoot) */
	uint64_t cost = 2 * sw_reserve(g, __atomic_load_n(&g->sw.listed_open, __ATOMIC_RELAXED));
	if (__atomic_load_n(&g->per.used_tsc, __ATOMIC_RELAXED) + cost + g->per.charge_cap_tsc > __atomic_load_n(&g->per.budget_tsc, __ATOMIC_RELAXED)) {
		__atomic_store_n(&g->sw.rearmed, SW_REARM_DONE, __ATOMIC_RELEASE);
		return;
	}
	if (sw_timed(g, 1, SWB_OPEN_ONLY, 1))
		g->sw.is_on = 1;
	uint64_t win = g->sw.window_ns ? g->sw.window_ns : g->per.budget_ns;
	g->sw.rearm_end = now_ns(S_CLOCK_MONOTONIC) + (win < SW_REARM_NS ? win : SW_REARM_NS);
}

/* The period thread: the rearm's time is over; the sites go off as at
 * the window's end, and new code may ask for another. */
static void sw_rearm_over(struct stint_global *g)
{
	g->sw.rearm_end = 0;
	__atomic_store_n(&g->sw.rearmed, SW_REARM_NONE, __ATOMIC_RELEASE);
	if (g->sw.is_on && !GATE_CLOSED(g))
		sw_all_off(g, 1);
}

static int sw_quiet_skip(struct stint_global *g)
{
	if (!g->sw.quiet_on || !g->sw.quiet) {
		g->sw.skipped = 0;
		return 0;
	}
	if (g->sw.skipped + 1 < (1u << g->sw.quiet)) {
		g->sw.skipped++;
		return 1;
	}
	g->sw.skipped = 0;
	return 0;
}
