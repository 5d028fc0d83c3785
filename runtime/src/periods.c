/*
 * periods.c - DIME's time budget: instrumentation may run for at most B in
 * every period T (DIME* section 2.3, "Trace Version": the budget is
 * checked at every instrumentation point).
 *
 * What is counted. Every probe call that reaches the runtime while the
 * budget is on is timed with the time-stamp counter, from the top of
 * stint_record to its end, flushes and file growth included; to that we
 * add the cost of getting there and back (the thunk's pushes, the entry
 * stub's register saves and popfq), measured once at start by timing
 * calls of stint_probe_entry on an inactive probe. So the budget is
 * charged what the probes really cost, not an estimate per event: an
 * event that grows the file costs more than one that does not, and the
 * TSC read (about 20 cycles, twice per call) is cheap next to the rest.
 * TSC ticks are converted with a rate calibrated against CLOCK_MONOTONIC
 * by the period thread: first over 10 ms, then at every period over the
 * whole run.
 *
 * What is not counted: probes skipped at the gate. When the budget is
 * spent the runtime closes the gate word of every rewritten module (the
 * gate page, stint_abi.h); a trampoline then costs one load and a jrcxz,
 * which we do not time (timing it would cost more than it does).
 *
 * The period. A thread of our own (raw clone, all signals blocked, never
 * touches libc or TLS) sleeps until each period boundary with
 * clock_nanosleep, writes the period's records, refills the budget and
 * opens the gates. So no signal or timer of the program is taken over.
 * A forked child has no such thread: its gate pages are wiped on fork,
 * so its first probe reaches the runtime, which notices the fork and
 * starts the child's own thread.
 */
#include "stint.h"

#define TIMER_STACK ((size_t)64 << 10)
#define CHARGE_CAP_MAX_NS 100000 /* the measured cap's ceiling (charge_cap_measure) */
#define TOUCH_PAGES 8 /* pages charge_cap_measure touches */
/* The shortest time between two batches of SW_PEND sites. */
#define SW_PEND_GAP_NS 1000000ULL

/*
 * Quiet periods. A window costs what its sites' detours cost, which no
 * probe call is charged for: a sqlite3 run of 3.4 s (10% of 100 ms)
 * whose listed sites were all kept on (STINT_SWITCH=0) took 2.19x, so
 * windows as long as the budget cost some 12% of the run, more than the
 * budget, in periods that recorded nothing at all (most of that run's
 * 37). So the windows back off: after q windows in a row whose periods
 * recorded nothing, the next 2^q - 1 periods get none (q at most
 * SW_QUIET_MAX: one window in eight periods). Any period that records
 * (new code is running: its sites are patched whether or not the listed
 * ones are on) brings a window back in every period from the next on.
 * A skipped window switches nothing, so its switching costs nothing
 * either. Runs whose periods all record something (sqlite3's 0.45 s
 * workload) are unchanged. STINT_QUIET=0 keeps a window in every period.
 */
#define SW_QUIET_MAX 3

static uint64_t tsc_to_ns(struct stint_global *g, uint64_t t) { return mul_div(t, 1000000000ULL, g->per.tsc_hz); }

static uint64_t ns_to_tsc(struct stint_global *g, uint64_t ns) { return mul_div(ns, g->per.tsc_hz, 1000000000ULL); }

/* A period's budget ticks in ns as its gate judged them: scaled by the
 * budget (granted ns over budget_tsc, fixed at the period's start), not
 * by a calibration taken since, so that a gate closed at used + reserve
 * >= budget_tsc reads as reaching the granted ns (a recalibration at the
 * roll moved them by 1.1% in a CI run). */
static uint64_t budget_tsc_ns(struct stint_global *g, uint64_t t, uint64_t budget_tsc)
{
	return g->per.budget_ns && budget_tsc ? mul_div(t, g->per.budget_ns, budget_tsc) : tsc_to_ns(g, t);
}

/* Open or close the gate of every rewritten module. While the gate is
 * closed, gate word 1 (the off-switch's sites) reads STINT_GATE_SWITCH:
 * a site that runs then switches itself off (the off-switch). */
static void gates_set(struct stint_global *g, uint64_t v)
{
	uint32_t n = modules_n(g);
	for (uint32_t i = 0; i < n; i++) {
		struct gmodule *gm = &g->proc.modules[i];
		if (!__atomic_load_n(&gm->ready, __ATOMIC_ACQUIRE) || !gm->gate)
			continue;
		if (gm->smod && (((const struct stint_module *)gm->smod)->flags & STINT_MF_CONTEXT))
			continue; /* context modules keep tracking (contexts.c) */
		__atomic_store_n((uint64_t *)gm->gate, v, __ATOMIC_RELEASE);
		__atomic_store_n((uint64_t *)(gm->gate + STINT_GATE_WORD1), v == STINT_GATE_OPEN ? STINT_GATE_OPEN : sw_closed_word(g, gm),
				 __ATOMIC_RELEASE);
	}
}

/*
 * What a probe call that took d ticks is charged: what the TSC measured,
 * except that a call that did not grow the trace file (grew = 0) is
 * charged at most g->per.charge_cap_tsc: such a call does a hash lookup, a
 * row write and perhaps a log note (hundreds of ns), and now and then
 * touches a page of the trace, a list or a table for the first time,
 * which costs a page fault; anything longer is time the thread spent
 * descheduled or in an interrupt, which is not instrumentation work and
 * would otherwise show up as a period's overshoot. The cap is
 * CHARGE_CAP_NS plus two first touches as measured on this machine at
 * start (charge_cap_measure). File growth (an ftruncate) is charged in
 * full.
 */
static uint64_t call_charge(struct stint_global *g, uint64_t d, int grew)
{
	if (!grew && d > g->per.charge_cap_tsc) {
		__atomic_fetch_add(&g->per.capped, 1, __ATOMIC_RELAXED);
		return g->per.charge_cap_tsc;
	}
	return d;
}

/*
 * Note how this period's gate closed (STINT_CLOSE_*), what the period
 * had used then and what the close kept in reserve (sw_off_reserve), for
 * its KindPeriodClose row: a gate closes when used + reserve reaches the
 * budget, so a period may end with up to the reserve unspent (switching
 * that the reserve was kept for and that did not happen), which the row
 * lets a reader tell from a bug. Written by whoever closes the gate,
 * read by the period roll.
 */
static void close_note(struct stint_global *g, uint32_t how, uint64_t used, uint64_t reserve)
{
	g->per.close_used_tsc = used;
	g->per.close_reserve_tsc = reserve;
	/* last: the roll takes how first and trusts the rest only with it */
	__atomic_store_n(&g->per.close_how, how, __ATOMIC_RELEASE);
}

/*
 * Charge a probe call that started at t0 to the period's budget
 * (call_charge); close the gates when it is spent. recorded: whether the
 * call wrote an event; grew: whether it extended the trace file.
 */
static void budget_charge(struct stint_global *g, uint64_t t0, int recorded, int grew)
{
	uint64_t t1 = rdtsc();
	uint64_t d = call_charge(g, t1 - t0, grew) + g->per.call_overhead_tsc;
	/* keep what switching the listed sites off will cost (sw_reserve:
	 * a margin on the average per site, a guess until the first batch
	 * is measured, and what a batch costs besides) */
	uint64_t reserve = sw_off_reserve(g), budget = __atomic_load_n(&g->per.budget_tsc, __ATOMIC_RELAXED);
	/* The gate word before the charge is added: the period it names is
	 * the one this charge may close. A charge about to spend the budget
	 * says when it ended first, so that a period roll that takes it in
	 * before it closes the gate (its thread descheduled in between) can
	 * still tell when the period was spent. */
	uint32_t gw = __atomic_load_n(&g->per.gate_closed, __ATOMIC_ACQUIRE);
	if (__atomic_load_n(&g->per.used_tsc, __ATOMIC_RELAXED) + d + reserve >= budget)
		__atomic_store_n(&g->per.spend_tsc, t1, __ATOMIC_RELAXED);
	uint64_t used = __atomic_add_fetch(&g->per.used_tsc, d, __ATOMIC_ACQ_REL);
	if (!recorded)
		__atomic_fetch_add(&g->per.suppressed, 1, __ATOMIC_RELAXED);
	if (used + reserve < budget || (gw & 1u))
		return;
	if (UNLIKELY(g->test.on))
		test_charge_stall(g, 0);
	/* fails if the period rolled meanwhile: the roll took this charge
	 * (period_roll), and the next period is not this charge's to close
	 * (a charge added after the roll is seen by the next call) */
	if (__atomic_compare_exchange_n(&g->per.gate_closed, &gw, gw | 1u, 0, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED)) {
		if (UNLIKELY(g->test.on))
			test_charge_stall(g, 1);
		/* A roll since the compare-and-swap (this thread descheduled
		 * here) took the period as closed, with no note of how (its row
		 * says unknown), and opened the next one's gates: those are not
		 * this charge's to close. Between this check and gates_set the
		 * window is a few instructions. */
		if ((__atomic_load_n(&g->per.gate_closed, __ATOMIC_ACQUIRE) ^ gw) >> 1)
			return;
		g->per.closed_at_tsc = t1;
		close_note(g, STINT_CLOSE_CHARGE, used, reserve);
		gates_set(g, STINT_GATE_CLOSED);
		sw_request(g, SW_REQ_OFF);
	}
}

/*
 * At the start of a period: a zero budget keeps the gates closed for the
 * whole period (and the sites switched off); otherwise open the gates if
 * the last period closed them and switch the listed sites back on
 * (unless the window is skipped, sw_quiet_skip).
 *
 * Switching costs are instrumentation time: each period's used time
 * (the KindPeriod row) is what its probes were charged plus what
 * switching cost in it (sw_tsc). Switching on is done before the budget
 * starts to run, so its cost comes out of the budget at once; switching
 * off comes after the budget is spent, so budget_charge closes the gate
 * early by what switching the sites now on would cost (their number
 * times the measured cost per site). When switching the listed sites
 * on and off would take more than half the budget they stay off for the
 * period: the budget goes to probes that are still patched (how many
 * there are is guessed from the last switch-on).
 */
static void budget_gates_start(struct stint_global *g, uint64_t was_closed, uint64_t now_tsc, int last)
{
	g->sw.charged_tsc = 0;
	g->sw.off_paid = 0;
	/* until a window opens below: a period without one (skipped, spent
	 * at its start, too costly to switch) is no sign of quiet */
	g->sw.no_window = 1;
	uint64_t budget = __atomic_load_n(&g->per.budget_tsc, __ATOMIC_RELAXED);
	int spent = !g->per.budget_ns;
	uint64_t used0 = 0, reserve0 = 0;
	if (g->sw.debt_tsc && !last) {
		/* what earlier periods' switching and recording after their
		 * gates closed left over their budgets (period_roll) */
		uint64_t debt = g->sw.debt_tsc, reserve = sw_off_reserve(g), pay = debt;
		uint64_t room = __atomic_load_n(&g->per.used_tsc, __ATOMIC_RELAXED) + reserve;
		room = budget > room ? budget - room : 0;
		/* A debt larger than what the period can pay (keeping what
		 * switching off the sites now on would cost) is paid up to that
		 * and the rest carried to the next period: a period never starts
		 * over its budget, so a burst of switching (the period thread
		 * descheduled in mid-batch, a window's end with thousands of
		 * sites on) closes the next periods' gates instead of showing as
		 * one period's overshoot. Every ns is still charged. A zero
		 * budget (QoS) pays it at once: nothing would ever pay it. */
		if (g->per.budget_ns && debt > room)
			pay = room;
		g->sw.debt_tsc = debt - pay;
		uint64_t used = __atomic_add_fetch(&g->per.used_tsc, pay, __ATOMIC_RELAXED);
		/* A debt that leaves no budget spends the period at its start, as
		 * a zero budget does: the gate stays closed, nothing is switched
		 * on, and what is on is switched off as when a probe spends it. */
		spent = spent || used + reserve >= budget;
		used0 = used;
		reserve0 = reserve;
	}
	if (spent) {
		g->per.closed_at_tsc = now_tsc;
		close_note(g, STINT_CLOSE_START, used0, reserve0);
		__atomic_fetch_or(&g->per.gate_closed, 1u, __ATOMIC_ACQ_REL);
		gates_set(g, STINT_GATE_CLOSED);
		if (g->sw.on && g->sw.is_on && !last)
			sw_all_off(g, 0);
		return;
	}
	__atomic_store_n(&g->sw.rearmed, SW_REARM_NONE, __ATOMIC_RELEASE);
	g->sw.rearm_end = 0;
	if (g->sw.on && !last && __atomic_load_n(&g->sw.window_over, __ATOMIC_ACQUIRE)) {
		__atomic_store_n(&g->sw.window_over, 0, __ATOMIC_RELEASE);
		if (!was_closed)
			gates_word1(g, STINT_GATE_OPEN);
	}
	if (was_closed) {
		__atomic_fetch_and(&g->per.gate_closed, ~1u, __ATOMIC_ACQ_REL);
		gates_set(g, STINT_GATE_OPEN);
	}
	if (!g->sw.on || last)
		return;
	if (sw_quiet_skip(g)) {
		sw_period_upkeep(g);
		return;
	}
	/* what the last switch-on took (at first every listed site); when it
	 * is too much, halve the guess each period, so that a later period,
	 * when more sites have recorded all they had to, tries again */
	uint64_t guess = g->sw.last_on ? g->sw.last_on : __atomic_load_n(&g->sw.listed, __ATOMIC_RELAXED);
	if (2 * guess * g->sw.site_tsc > budget / 2) {
		g->sw.last_on = guess / 2 ? guess / 2 : 1;
		return;
	}
	/* nor when the debt leaves too little to switch them on and off */
	uint64_t used = __atomic_load_n(&g->per.used_tsc, __ATOMIC_RELAXED), fixed = 2 * sw_fixed(g);
	if (used + 2 * guess * g->sw.site_tsc + fixed > budget)
		return;
	/* The estimate can be far off (the thread descheduled in mid-batch,
	 * membarriers waiting on busy cores): the batch stops at half of
	 * what the period has left, so that switching its sites off again
	 * fits too (TestSwitchOnWithinBudget); the sites it did not reach
	 * stay off this period. */
	uint64_t left = budget > used + fixed ? budget - used - fixed : 0;
	g->sw.stop_tsc = rdtsc() + left / 2;
	g->sw.last_on = sw_timed(g, 1, 0, 1);
	g->sw.no_window = 0;
	g->sw.stop_tsc = 0;
	if (!g->sw.last_on)
		g->sw.last_on = 1;
	g->sw.is_on = 1;
}

/* When the ending period's budget was spent, for a gate that no charge
 * closed in time: the end of the last charge that spent it (spend_tsc),
 * if that lies within the period, else now_tsc. */
static uint64_t spent_at(struct stint_global *g, uint64_t now_tsc)
{
	uint64_t at = __atomic_load_n(&g->per.spend_tsc, __ATOMIC_RELAXED);
	return at >= g->per.period_tsc0 && at <= now_tsc ? at : now_tsc;
}

/* End the current period at (now_tsc, now_mono) and start the next
 * (last: the program is leaving; nothing is switched on). */
static void period_roll(struct stint_global *g, uint64_t now_tsc, uint64_t now_mono, int last)
{
	/* Recalibrate over the whole run so far. */
	if (now_mono > g->per.cal_mono + 5000000 && now_tsc > g->per.cal_tsc) {
		uint64_t hz = mul_div(now_tsc - g->per.cal_tsc, 1000000000ULL, now_mono - g->per.cal_mono);
		if (hz > 10000000ULL)
			g->per.tsc_hz = hz;
	}
	/* A new period number first: from here no charge closes the period
	 * that ends (budget_charge's compare-and-swap fails), so bit 0 read
	 * here is final for it. */
	uint64_t closed = __atomic_fetch_add(&g->per.gate_closed, 2u, __ATOMIC_ACQ_REL) & 1u;
	uint64_t budget_tsc = __atomic_load_n(&g->per.budget_tsc, __ATOMIC_RELAXED);
	uint64_t used = __atomic_exchange_n(&g->per.used_tsc, 0, __ATOMIC_ACQ_REL);
	uint64_t reserve = sw_off_reserve(g);
	if (!closed && g->per.budget_ns && used + reserve >= budget_tsc) {
		/* spent by a charge that had not closed the gate yet, and now
		 * never will: the period ended spent when that charge did */
		g->per.closed_at_tsc = spent_at(g, now_tsc);
		close_note(g, STINT_CLOSE_ROLL, used, reserve);
		closed = 1;
	}
	/* How this period's gate closed, taken so that no later period can
	 * read it as its own. 0 with the gate closed: the charge that closed
	 * it won its compare-and-swap but has not noted it yet (its thread
	 * descheduled in between), so the note and closed_at_tsc may still
	 * be an earlier period's: the row says "unknown" and the enabled time
	 * ends where that charge spent the budget. */
	uint32_t how = closed ? __atomic_exchange_n(&g->per.close_how, STINT_CLOSE_UNKNOWN, __ATOMIC_ACQUIRE) : STINT_CLOSE_UNKNOWN;
	if (closed && how == STINT_CLOSE_UNKNOWN) {
		g->per.closed_at_tsc = spent_at(g, now_tsc);
	}
	uint64_t sw = __atomic_exchange_n(&g->sw.tsc, 0, __ATOMIC_ACQ_REL);
	uint64_t ons = __atomic_exchange_n(&g->sw.ons, 0, __ATOMIC_ACQ_REL);
	uint64_t offs = __atomic_exchange_n(&g->sw.offs, 0, __ATOMIC_ACQ_REL);
	uint64_t lazy = __atomic_exchange_n(&g->sw.lazy_tsc, 0, __ATOMIC_ACQ_REL);
	/* switching not charged as it ran, except the sites' own (below) */
	used += sw > g->sw.charged_tsc + lazy ? sw - g->sw.charged_tsc - lazy : 0;
	/* What came after the gate closed or the window ended (sites that
	 * switched or recorded on their way off, batches of waiting sites):
	 * this period's as far as its budget has room (sw_off_reserve keeps
	 * room for the switching), the rest the next periods' debt (added
	 * after a carry). A zero budget (QoS) pays it at once. */
	uint64_t own = lazy + __atomic_exchange_n(&g->per.late_tsc, 0, __ATOMIC_ACQ_REL), pay = own;
	if (g->per.budget_ns && used + own > budget_tsc)
		pay = budget_tsc > used ? budget_tsc - used : 0;
	used += pay;
	g->sw.debt_tsc += own - pay;
	if (closed && !last) {
		uint64_t hi = g->sw.lazy_hi - g->sw.lazy_hi / 16;
		g->sw.lazy_hi = lazy > hi ? lazy : hi;
	}
	if (last) {
		/* no next period to pay it: the last one is charged its own */
		used += g->sw.debt_tsc;
		g->sw.debt_tsc = 0;
	}
	uint64_t suppressed = __atomic_exchange_n(&g->per.suppressed, 0, __ATOMIC_ACQ_REL);
	uint64_t events = __atomic_load_n(&g->trace.events, __ATOMIC_RELAXED);
	uint64_t refused = __atomic_exchange_n(&g->per.refused, 0, __ATOMIC_ACQ_REL);
	uint64_t recorded = events - g->per.period_events0 - refused; /* refusal rows are not events */
	uint64_t enabled_tsc = (closed ? g->per.closed_at_tsc : now_tsc) - g->per.period_tsc0;
	if (recorded)
		g->sw.quiet = 0;
	else if (!g->sw.no_window && g->sw.quiet < SW_QUIET_MAX)
		g->sw.quiet++;
	uint64_t granted = g->per.budget_ns;
	uint64_t rows = 2; /* the rows emitted here, which count as events */
	emit_record(STINT_K_PERIOD, g->per.period_mono0, g->per.period_idx, granted, budget_tsc_ns(g, used, budget_tsc));
	emit_record(STINT_K_PERIOD_STATS, g->per.period_mono0, recorded, suppressed,
		    (int64_t)enabled_tsc > 0 ? tsc_to_ns(g, enabled_tsc) : 0);
	if (g->qos.on) {
		emit_record(STINT_K_PERIOD_QOS, g->per.period_mono0, g->qos.value, g->qos.threshold, granted);
		qos_next(g, now_mono);
		rows++;
	}
	if (g->sw.on) {
		emit_record(STINT_K_PERIOD_SWITCH, g->per.period_mono0, ons, offs, tsc_to_ns(g, sw));
		rows++;
	}
	if (closed) {
		int noted = how != STINT_CLOSE_UNKNOWN;
		emit_record(STINT_K_PERIOD_CLOSE, g->per.period_mono0, how,
			    noted ? budget_tsc_ns(g, g->per.close_reserve_tsc, budget_tsc) : 0,
			    noted ? budget_tsc_ns(g, g->per.close_used_tsc, budget_tsc) : 0);
		rows++;
	}
	g->per.period_idx++;
	g->per.period_tsc0 = now_tsc;
	g->per.period_mono0 = now_mono;
	/* the count read above and the rows just emitted, not a new read:
	 * an event written while the records were emitted (the thread
	 * descheduled there) would count in neither period
	 * (TestBudgetAccounting saw 3 so in a slow CI run) */
	g->per.period_events0 = events + rows;
	__atomic_store_n(&g->per.budget_tsc, ns_to_tsc(g, g->per.budget_ns), __ATOMIC_RELAXED);
	budget_gates_start(g, closed, now_tsc, last);
}

/*
 * The cap on a call's charge (call_charge), in TSC ticks: CHARGE_CAP_NS
 * plus two first touches of a page, the median of TOUCH_PAGES timed
 * first writes to fresh anonymous pages. A fixed 4 us cap assumed a
 * fault of a few us; on the VM these numbers come from a first touch
 * costs 10-20 us, and a sqlite3 run had about 1,600 calls over 4 us (900
 * of 4-8 us, 400 of 8-16, 120 of 16-32), 19-20 ms a run that no period
 * was charged, against some 28 ms that was. A call descheduled for
 * longer is still charged the cap, as before.
 */
static uint64_t charge_cap_measure(struct stint_global *g)
{
	uint64_t cap = ns_to_tsc(g, CHARGE_CAP_NS);
	long a = sys_mmap(0, TOUCH_PAGES * 4096, S_PROT_READ | S_PROT_WRITE, S_MAP_PRIVATE | S_MAP_ANONYMOUS, -1, 0);
	if (sys_failed(a))
		return cap;
	uint64_t t[TOUCH_PAGES];
	for (int i = 0; i < TOUCH_PAGES; i++) {
		volatile uint8_t *p = (volatile uint8_t *)(a + (long)i * 4096);
		uint64_t t0 = rdtsc();
		*p = 1;
		t[i] = rdtsc() - t0;
	}
	sys_call2(SYS_munmap, a, TOUCH_PAGES * 4096);
	cap += 2 * median_of(t, TOUCH_PAGES);
	uint64_t most = ns_to_tsc(g, CHARGE_CAP_MAX_NS);
	return cap < most ? cap : most;
}

/* Cost of reaching stint_record and coming back, in TSC ticks: the median
 * of 64 timed calls of the entry stub on an inactive probe. */
static uint64_t measure_call_overhead(void)
{
	struct {
		struct stint_module m;
		struct stint_probe p;
	} d;
	s_memset(&d, 0, sizeof d);
	d.p.module_back = (uint32_t)((uint8_t *)&d.p - (uint8_t *)&d.m);
	uint64_t best[64];
	for (int i = 0; i < 64; i++) {
		uint64_t t0 = rdtsc();
		__asm__ volatile("lea -0x80(%%rsp),%%rsp\n\t"
				 "push %%rdi\n\tpush %%rsi\n\t"
				 "mov %0,%%rdi\n\txor %%esi,%%esi\n\t"
				 "call stint_probe_entry\n\t"
				 "pop %%rsi\n\tpop %%rdi\n\t"
				 "lea 0x80(%%rsp),%%rsp"
				 :
				 : "r"(&d.p)
				 : "memory");
		best[i] = rdtsc() - t0;
	}
	return median_of(best, 64);
}

/*
 * The window. Listed sites (the off-switch) are switched on at a period's start
 * and stay on for at most the window (by default as long as the budget:
 * 10 ms of a 100 ms period at a 10% budget), or until the budget is
 * spent. Their trampoline detours are what a budget of measured probe
 * time does not see: a jcc with one outcome left, or a ret whose
 * destination the inline cache knows, never reaches the runtime, yet
 * costs a few ns on every execution. Bounding the time they are on
 * bounds that cost. Sites that were never listed stay patched all
 * period: the first execution of new code is still recorded (and the
 * site then switched off) whenever the budget lasts. After the window
 * gate word 1 reads STINT_GATE_SWITCH while word 0 stays open.
 */
static void window_close(struct stint_global *g)
{
	__atomic_store_n(&g->sw.window_over, 1, __ATOMIC_RELEASE);
	gates_word1(g, STINT_GATE_SWITCH);
	if (g->sw.is_on)
		sw_all_off(g, 1);
}

/* Wait until mono_ns, bounded by a futex wait on g->sw.req; returns 1 if
 * woken by a request, 0 at the time. */
static int wait_req(struct stint_global *g, uint64_t mono_ns) { return wait_word(&g->sw.req, mono_ns); }

/*
 * Wait until mono_ns (the period's end): close the window when it ends
 * and switch the listed sites off whenever a probe closes the gate
 * meanwhile (sw_request wakes us through g->sw.req).
 */
static void wait_period(struct stint_global *g, uint64_t mono_ns)
{
	if (!g->sw.on) {
		sleep_until(mono_ns);
		return;
	}
	uint64_t win = g->sw.window_ns ? g->sw.window_ns : g->per.budget_ns;
	uint64_t win_end = g->per.period_mono0 + win;
	for (;;) {
		int over = __atomic_load_n(&g->sw.window_over, __ATOMIC_ACQUIRE) || win_end >= mono_ns;
		uint64_t rearm_end = g->sw.rearm_end && g->sw.rearm_end < mono_ns ? g->sw.rearm_end : 0;
		int req = wait_req(g, !over ? win_end : rearm_end ? rearm_end : mono_ns);
		if (!req && over && rearm_end) {
			if (lock_bounded(&g->per.period_lock)) {
				if (!__atomic_load_n(&g->per.run_ended, __ATOMIC_ACQUIRE))
					sw_rearm_over(g);
				unlock(&g->per.period_lock);
			}
			continue;
		}
		if (!req && over)
			return;
		if (!lock_bounded(&g->per.period_lock))
			continue;
		uint32_t what = __atomic_exchange_n(&g->sw.req, 0, __ATOMIC_ACQ_REL);
		int closed = GATE_CLOSED(g);
		if (what == SW_REQ_SYNC) {
			/* Sites reach SW_PEND one by one as they first run after the
			 * gate closed, thousands in a row in a large program: gather
			 * them for SW_PEND_GAP_NS (they call in meanwhile, cheaply)
			 * rather than run a batch per site. */
			uint64_t now = now_ns(S_CLOCK_MONOTONIC);
			if (now < g->sw.pend_mono + SW_PEND_GAP_NS && now + SW_PEND_GAP_NS < mono_ns) {
				__atomic_fetch_or(&g->sw.req, what, __ATOMIC_ACQ_REL);
				unlock(&g->per.period_lock);
				sleep_until(g->sw.pend_mono + SW_PEND_GAP_NS);
				continue;
			}
		}
		if (!__atomic_load_n(&g->per.run_ended, __ATOMIC_ACQUIRE)) {
			if (what & SW_REQ_SYNC) {
				sw_timed(g, 0, SWB_PEND_ONLY, 0); /* the SW_PEND sites */
				g->sw.pend_mono = now_ns(S_CLOCK_MONOTONIC);
			}
			if (!req && !closed)
				window_close(g);
			else if (!req)
				__atomic_store_n(&g->sw.window_over, 1, __ATOMIC_RELEASE);
			else if (closed && g->sw.is_on)
				sw_all_off(g, 0);
			else if (!closed && (what & SW_REQ_REARM) && __atomic_load_n(&g->sw.window_over, __ATOMIC_ACQUIRE))
				sw_rearm(g);
		}
		unlock(&g->per.period_lock);
	}
}

/* The period thread. */
static void period_main(void)
{
	struct stint_global *g = G();
	g->per.call_overhead_tsc = measure_call_overhead();
	/* calibrate the TSC over 10 ms */
	uint64_t t0 = rdtsc(), m0 = now_ns(S_CLOCK_MONOTONIC);
	sleep_until(m0 + 10000000ULL);
	uint64_t t1 = rdtsc(), m1 = now_ns(S_CLOCK_MONOTONIC);
	if (m1 > m0 && t1 > t0)
		g->per.tsc_hz = mul_div(t1 - t0, 1000000000ULL, m1 - m0);
	__atomic_store_n(&g->per.budget_tsc, ns_to_tsc(g, g->per.budget_ns), __ATOMIC_RELAXED);
	g->per.charge_cap_tsc = charge_cap_measure(g);
	g->sw.stall_tsc = ns_to_tsc(g, SW_STALL_NS);
	if (g->proc.sync_core) {
		/* what one membarrier(SYNC_CORE) costs here (IPIs: much more on
		 * a VM than on bare metal), for the switch-off reserve */
		uint64_t best = ~0ULL;
		for (int i = 0; i < 4; i++) {
			uint64_t a = rdtsc();
			sync_core();
			uint64_t d = rdtsc() - a;
			best = d < best ? d : best;
		}
		g->sw.sync_tsc = best;
	}
	uint64_t last_save = m1, left_check = 0;
	for (;;) {
		uint64_t next = g->per.period_mono0 + (g->per.period_ns ? g->per.period_ns : 1000000000ULL);
		wait_period(g, next);
		leave_if_program_left(g, &left_check);
		if (!lock_bounded(&g->per.period_lock))
			continue;
		if (__atomic_load_n(&g->per.run_ended, __ATOMIC_ACQUIRE)) {
			unlock(&g->per.period_lock);
			continue; /* the program is leaving: the exit path wrote the last period */
		}
		uint64_t nt = rdtsc(), nm = now_ns(S_CLOCK_MONOTONIC);
		if (g->per.budget_on)
			period_roll(g, nt, nm, 0);
		else
			g->per.period_mono0 = nm;
		if (g->per.counts_on)
			counts_dump(g, nm);
		unlock(&g->per.period_lock);
		slots_poll(g, 1);
		if (g->log.on && nm - last_save >= 1000000000ULL) {
			log_save(g, 0);
			last_save = nm;
		}
	}
}

/*
 * The program is leaving through exit (the executable's DT_FINI or the
 * static exit hook): write the last, partial period's rows, so the
 * periods cover the whole run, and one KindRunEnd row: time = now,
 * value = run time. exit() does not pass its status to destructors, so
 * src is STINT_RUN_END_UNKNOWN. Once per process (a forked child has its
 * own run).
 */
static void run_end(struct stint_global *g)
{
	if (__atomic_load_n(&W()->alive, __ATOMIC_ACQUIRE) != 1)
		fork_child_reopen(g); /* a child that never reached a probe: its own trace */
	int locked = lock_bounded(&g->per.period_lock); /* else a period thread is stuck: write the end anyway */
	if (__atomic_load_n(&g->per.run_ended, __ATOMIC_ACQUIRE) || !__atomic_load_n(&g->recording, __ATOMIC_ACQUIRE)) {
		if (locked)
			unlock(&g->per.period_lock);
		return;
	}
	uint64_t nt = rdtsc(), nm = now_ns(S_CLOCK_MONOTONIC);
	if (locked && g->per.budget_on && g->per.period_thread)
		period_roll(g, nt, nm, 1);
	sample_end(g);
	if (g->per.counts_on)
		counts_dump(g, nm);
	emit_record(STINT_K_RUN_END, nm, STINT_RUN_END_UNKNOWN, __atomic_load_n(&g->trap.hits, __ATOMIC_RELAXED),
		    nm > g->proc.mono_start_ns ? nm - g->proc.mono_start_ns : 0);
	__atomic_store_n(&g->per.run_ended, 1, __ATOMIC_RELEASE);
	if (locked)
		unlock(&g->per.period_lock);
}

/*
 * Start period 0 (at set-up and in a forked child) and, with spawn, the
 * period thread (periods_spawn).
 */
static void periods_start(struct stint_global *g, int spawn)
{
	if (!g->per.budget_on && !g->log.on && !g->per.counts_on)
		return;
	g->per.period_idx = 0;
	g->per.period_tsc0 = rdtsc();
	g->per.period_mono0 = now_ns(S_CLOCK_MONOTONIC);
	g->per.cal_tsc = g->per.period_tsc0;
	g->per.cal_mono = g->per.period_mono0;
	g->per.period_events0 = __atomic_load_n(&g->trace.events, __ATOMIC_RELAXED);
	__atomic_store_n(&g->per.used_tsc, 0, __ATOMIC_RELAXED);
	__atomic_store_n(&g->per.suppressed, 0, __ATOMIC_RELAXED);
	__atomic_store_n(&g->per.gate_closed, 0, __ATOMIC_RELAXED);
	if (g->qos.on) {
		/* a forked child starts over from the default, like its parent did */
		qos_fallback(g);
		__atomic_store_n(&g->per.budget_tsc, ns_to_tsc(g, g->per.budget_ns), __ATOMIC_RELAXED);
	}
	__atomic_store_n(&g->sw.tsc, 0, __ATOMIC_RELAXED);
	__atomic_store_n(&g->sw.ons, 0, __ATOMIC_RELAXED);
	__atomic_store_n(&g->sw.offs, 0, __ATOMIC_RELAXED);
	__atomic_store_n(&g->sw.req, 0, __ATOMIC_RELAXED);
	__atomic_store_n(&g->sw.lazy_tsc, 0, __ATOMIC_RELAXED);
	__atomic_store_n(&g->per.late_tsc, 0, __ATOMIC_RELAXED);
	g->sw.debt_tsc = 0;
	g->sw.quiet = 0;
	g->sw.skipped = 0;
	g->sw.no_window = 0;
	if (!g->sw.site_tsc)
		g->sw.site_tsc = ns_to_tsc(g, 300); /* until a batch is measured */
	g->sw.is_on = 1; /* as the rewriter left them, or as the parent had them: switch on to be sure */
	if (g->per.budget_on)
		budget_gates_start(g, 0, g->per.period_tsc0, 0);
	if (spawn)
		periods_spawn(g);
}

/*
 * Start the period thread. All signals stay blocked in it, so the
 * program's handlers never run there. stint_module_init calls it
 * once the first module is set up, not at periods_start: while the
 * process has one thread, the start-up's first stores to text pages
 * (copy on write: sw_module_new's page copies, log_load_module's
 * restores) need no TLB shootdown on another CPU, which on a VM is an
 * IPI each.
 */
static void periods_spawn(struct stint_global *g)
{
	if (!g->per.budget_on && !g->log.on && !g->per.counts_on)
		return;
	long st = sys_mmap(0, TIMER_STACK, S_PROT_READ | S_PROT_WRITE, S_MAP_PRIVATE | S_MAP_ANONYMOUS, -1, 0);
	if (sys_failed(st)) {
		say_line("cannot map the period thread's stack; running without a budget");
		g->per.budget_on = 0;
		g->log.on = 0;
		return;
	}
	uint64_t all = ~0ULL, old = 0;
	long masked = sys_call4(SYS_rt_sigprocmask, S_SIG_SETMASK, (long)&all, (long)&old, 8);
	long r = stint_spawn((uint64_t)st + TIMER_STACK, period_main);
	if (!sys_failed(masked))
		sys_call4(SYS_rt_sigprocmask, S_SIG_SETMASK, (long)&old, 0, 8);
	if (sys_failed(r)) {
		sys_call2(SYS_munmap, st, (long)TIMER_STACK);
		say_line("cannot start the period thread; running without a budget");
		g->per.budget_on = 0; /* no periods: record without a budget rather than stop for good */
		g->per.period_thread = 0;
		return;
	}
	g->per.period_thread = 1;
}
