/*
 * budget.c - DIME's time budget: instrumentation may run for at most B in
 * every period T (DIME* section 2.3, "Trace Version": the budget is
 * checked at every instrumentation point). #included by stint.c.
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

#define S_CLONE_THREAD_FLAGS 0x50f00 /* VM|FS|FILES|SIGHAND|THREAD|SYSVSEM */
#define S_TIMER_ABSTIME 1
#define SYS_clock_nanosleep 230
#define SYS_exit 60
#define SYS_flock 73
#define TIMER_STACK ((size_t)64 << 10)
#define CHARGE_CAP_NS 4000 /* see call_charge */
#define TEST_STALL_AT_NOTE (1ULL << 63) /* test_charge_stall_ns: stall between the close and its note */

/*
 * Room the switch-off reserve keeps besides for one stall of the machine
 * in the middle of the batch (sw_off_reserve). On this VM the host takes
 * a vCPU away about 1,300 times a second, nearly always for 31-61 us (a
 * loop that only reads the TSC, pinned to CPU 0 of the idle VM, loses
 * 5-6% of its time so), and the guest counts that as the running
 * thread's CPU time (there is no steal time here), so sw_timed cannot
 * leave it out. A switch-off of 50-150 us meets one about once in ten.
 * In redis-server's first period (10% of 100 ms), where the budget is
 * spent with 100-600 sites on, 7 of 20 runs went 0.9-49 us over without
 * this room and 0 of 20 with it (interleaved); the period used 9.91 ms
 * (median) instead of 9.99. Instrumented runs put the excess in the
 * batch: a gap of 13-59 us in its loop in 3 of 5 that went over, else a
 * copy-on-write fault on a code page it wrote first, or the walk over
 * every listed entry (about 17 us for 4,600), which the per-site estimate
 * does not see. On a machine without such stalls this is 0.6% of a 10 ms
 * budget; it is never more than 1/64 of the budget.
 */
#define SW_STALL_NS 60000ULL
#define CHARGE_CAP_MAX_NS 100000 /* the measured cap's ceiling (charge_cap_measure) */
#define TOUCH_PAGES 8 /* pages charge_cap_measure touches */
#define QOS_NAN 0x7ff8000000000000ULL /* a QoS row's metric when there was none */

/* stint_spawn (entry.S): clone a thread that runs fn on stack_top. */
long stint_spawn(uint64_t stack_top, void (*fn)(void)) __attribute__((visibility("hidden")));
void stint_probe_entry(void) __attribute__((visibility("hidden")));

static inline uint64_t rdtsc(void)
{
	uint32_t lo, hi;
	__asm__ volatile("rdtsc" : "=a"(lo), "=d"(hi));
	return ((uint64_t)hi << 32) | lo;
}

/* a * b / c with a 128-bit intermediate (no libgcc: mul and div by hand);
 * saturates when the quotient does not fit. */
static inline uint64_t mul_div(uint64_t a, uint64_t b, uint64_t c)
{
	if (!c)
		return 0;
	uint64_t lo, hi, q, r;
	__asm__("mulq %3" : "=a"(lo), "=d"(hi) : "a"(a), "rm"(b) : "cc");
	if (hi >= c)
		return ~0ULL;
	__asm__("divq %4" : "=a"(q), "=d"(r) : "a"(lo), "d"(hi), "rm"(c) : "cc");
	(void)r;
	return q;
}

static uint64_t tsc_to_ns(struct stint_global *g, uint64_t t) { return mul_div(t, 1000000000ULL, g->tsc_hz); }
static uint64_t ns_to_tsc(struct stint_global *g, uint64_t ns) { return mul_div(ns, g->tsc_hz, 1000000000ULL); }

/*
 * Parse "<decimal><unit>" (unit ns, us, ms, s) into ns; 0 on error. The
 * syntax of rewrite.ParseDuration.
 */
static uint64_t parse_duration(const char *s, size_t n)
{
	uint64_t ip = 0, frac = 0, fdiv = 1;
	size_t i = 0;
	int digits = 0, dot = 0;
	for (; i < n && ((s[i] >= '0' && s[i] <= '9') || s[i] == '.'); i++) {
		if (s[i] == '.') {
			if (dot++)
				return 0;
			continue;
		}
		digits++;
		if (!dot) {
			if (ip > 1000000000000ULL)
				return 0;
			ip = ip * 10 + (uint64_t)(s[i] - '0');
		} else if (fdiv < 1000000000ULL) {
			frac = frac * 10 + (uint64_t)(s[i] - '0');
			fdiv *= 10;
		}
	}
	if (!digits)
		return 0;
	uint64_t mul;
	size_t ul = n - i;
	const char *u = s + i;
	if (ul == 2 && u[0] == 'n' && u[1] == 's')
		mul = 1;
	else if (ul == 2 && u[0] == 'u' && u[1] == 's')
		mul = 1000;
	else if (ul == 3 && (uint8_t)u[0] == 0xc2 && (uint8_t)u[1] == 0xb5 && u[2] == 's')
		mul = 1000;
	else if (ul == 2 && u[0] == 'm' && u[1] == 's')
		mul = 1000000;
	else if (ul == 1 && u[0] == 's')
		mul = 1000000000ULL;
	else
		return 0;
	uint64_t v = ip * mul + mul_div(frac, mul, fdiv);
	if (v == 0 || v > 3600ULL * 1000000000ULL)
		return 0;
	return v;
}

/* Parse a budget: "<decimal>%" of period, or a duration. 0 on error. */
static uint64_t parse_budget(const char *s, size_t n, uint64_t period)
{
	if (n && s[n - 1] == '%') {
		/* percentage with up to 4 decimals, in units of 1e-4 % */
		uint64_t v = 0, scale = 0;
		int dot = 0, digits = 0;
		for (size_t i = 0; i + 1 < n; i++) {
			if (s[i] == '.') {
				if (dot++)
					return 0;
				continue;
			}
			if (s[i] < '0' || s[i] > '9')
				return 0;
			digits++;
			if (dot && scale >= 4)
				continue;
			v = v * 10 + (uint64_t)(s[i] - '0');
			if (dot)
				scale++;
			if (v > 1000000000ULL)
				return 0;
		}
		for (; scale < 4; scale++)
			v *= 10;
		if (!digits || v == 0 || v > 1000000)
			return 0;
		return mul_div(period, v, 1000000);
	}
	return parse_duration(s, n);
}

/* Find key=value in a space-separated option string; returns the value
 * and its length in *n, or 0. */
static const char *opt_find(const char *opts, const char *key, size_t *n)
{
	size_t kl = s_strlen(key);
	const char *p = opts;
	while (*p) {
		while (*p == ' ')
			p++;
		const char *e = p;
		while (*e && *e != ' ')
			e++;
		if ((size_t)(e - p) > kl && p[kl] == '=' && s_strncmp(p, key, kl) == 0) {
			*n = (size_t)(e - p) - kl - 1;
			return p + kl + 1;
		}
		p = e;
	}
	return 0;
}

/* Whether a setting's value (n bytes at s) is usable, given the period. */
typedef int (*setting_ok_fn)(const char *s, size_t n, uint64_t period);

/*
 * A setting from the environment (STINT_<NAME>) or else the module's
 * option. With ok, an environment value ok refuses is reported (bad) and
 * the module's option holds: a typo in an override must not undo what
 * the binary was rewritten with (a bad STINT_BUDGET used to leave the
 * program without a budget, every probe recording).
 */
static const char *setting_checked(char **envp, const char *env, const char *opts, const char *key, size_t *n,
				   setting_ok_fn ok, uint64_t period, const char *bad)
{
	const char *v = env_get(envp, env);
	if (v) {
		*n = s_strlen(v);
		if (!ok || ok(v, *n, period))
			return v;
		say_line(bad);
	}
	return opt_find(opts, key, n);
}

static const char *setting(char **envp, const char *env, const char *opts, const char *key, size_t *n)
{
	return setting_checked(envp, env, opts, key, n, 0, 0, 0);
}

static int is_none(const char *s, size_t n)
{
	return n == 4 && s_strncmp(s, "none", 4) == 0;
}

/* A period: empty (the default) or a duration. */
static int period_ok(const char *s, size_t n, uint64_t period)
{
	(void)period;
	return !n || parse_duration(s, n);
}

/* A budget or window: empty (the default), none, or a share of the period. */
static int share_ok(const char *s, size_t n, uint64_t period)
{
	return !n || is_none(s, n) || parse_budget(s, n, period);
}

/* No usable QoS sample: the configured default budget, and no metric
 * or threshold for the period's QoS row. */
static void qos_fallback(struct stint_global *g)
{
	g->budget_ns = g->qos_default_ns;
	g->qos_value = g->qos_threshold = QOS_NAN;
}

/*
 * Decide the budget (called once, by the module that creates the state).
 * A bad STINT_BUDGET, STINT_PERIOD or STINT_WINDOW is reported and the
 * rewrite's own value holds (setting_checked). A bad value of the
 * module's own is reported once and leaves the program running without a
 * budget (always recording), which is what the rewrite would have done
 * without --budget.
 */
static void budget_setup(struct stint_global *g, char **envp, const char *opts)
{
	size_t bn = 0, pn = 0;
	const char *p = setting_checked(envp, "STINT_PERIOD", opts, "period", &pn, period_ok, 0,
					"bad period (STINT_PERIOD), want e.g. 100ms; using the rewrite's (--period)");
	uint64_t period = p && pn ? parse_duration(p, pn) : 100000000ULL;
	const char *b = setting_checked(envp, "STINT_BUDGET", opts, "budget", &bn, share_ok, period,
					"bad budget (STINT_BUDGET), want e.g. 10% or 5ms; using the rewrite's (--budget), if any");
	const char *q = env_get(envp, STINT_QOS_ENV);
	int qos = q && q[0];
	int none = !b || bn == 0 || is_none(b, bn);
	if (none && !qos)
		return;
	if (!period) {
		say_line("bad period (--period), want e.g. 100ms; running without a budget");
		return;
	}
	/* With a QoS page and no budget given, the default is 0: nothing is
	 * recorded until the analyzer has published a fresh sample. */
	uint64_t budget = none ? 0 : parse_budget(b, bn, period);
	if (!none && !budget) {
		say_line("bad budget (--budget), want e.g. 10% or 5ms; running without a budget");
		if (!qos)
			return;
	}
	if (qos) {
		size_t ql = s_strlen(q);
		if (ql >= sizeof g->qos_path) {
			say_line("STINT_QOS path too long; running without the QoS controller");
			qos = 0;
		} else {
			s_memcpy(g->qos_path, q, ql + 1);
			g->qos_on = 1;
			g->qos_default_ns = budget > period ? period : budget;
			qos_fallback(g);
			budget = g->qos_default_ns;
		}
	}
	if (!qos && budget >= period)
		return; /* always on */
	g->budget_ns = budget;
	g->period_ns = period;
	g->tsc_hz = 3000000000ULL; /* until the period thread calibrates */
	g->budget_tsc = ns_to_tsc(g, budget);
	g->charge_cap_tsc = ns_to_tsc(g, CHARGE_CAP_NS);
	g->sw_stall_tsc = ns_to_tsc(g, SW_STALL_NS);
	g->budget_on = 1;
	const char *stall = env_get(envp, STINT_TEST_CHARGE_STALL_ENV);
	if (stall && s_strncmp(stall, "note:", 5) == 0) {
		uint64_t ns = parse_duration(stall + 5, s_strlen(stall + 5));
		g->test_charge_stall_ns = ns ? ns | TEST_STALL_AT_NOTE : 0;
	} else if (stall && stall[0])
		g->test_charge_stall_ns = parse_duration(stall, s_strlen(stall));
	const char *rstall = env_get(envp, STINT_TEST_READEE_STALL_ENV);
	if (rstall && rstall[0])
		g->test_readee_stall_ns = parse_duration(rstall, s_strlen(rstall));
	const char *sstall = env_get(envp, STINT_TEST_SWITCH_STALL_ENV);
	if (sstall && sstall[0])
		g->test_switch_stall_ns = parse_duration(sstall, s_strlen(sstall));
	const char *bstall = env_get(envp, STINT_TEST_BATCH_STALL_ENV);
	if (bstall && bstall[0])
		g->test_batch_stall_ns = parse_duration(bstall, s_strlen(bstall));
	/* The off-switch (switch.c) is on unless STINT_SWITCH=0 (for
	 * measuring what it saves). */
	g->sw_on = !env_is_zero(env_get(envp, "STINT_SWITCH"));
	/* Cold sites (switch.c, sw_cold_load) start off unless STINT_COLD=0. */
	g->sw_cold = !env_is_zero(env_get(envp, "STINT_COLD"));
	/* Quiet periods thin the windows out (sw_quiet_skip) unless
	 * STINT_QUIET=0. */
	g->sw_quiet_on = !env_is_zero(env_get(envp, "STINT_QUIET"));
	/* Calls' returns still to see and new code's own sites (rets.c)
	 * unless STINT_RETS=0; STINT_RETS=calls keeps the first. */
	const char *rets = env_get(envp, "STINT_RETS");
	g->rets_on = env_is_zero(rets) ? RETS_OFF : rets && !s_strncmp(rets, "calls", 6) ? RETS_CALLS : RETS_ALL;
	/* Self mode (switch.c) unless STINT_SWITCH_SELF=0. */
	g->sw_self_ok = !env_is_zero(env_get(envp, "STINT_SWITCH_SELF"));
	size_t wn = 0;
	const char *w = setting_checked(envp, "STINT_WINDOW", opts, "window", &wn, share_ok, period,
					"bad window (STINT_WINDOW), want e.g. 10% or 5ms; using the rewrite's (--window)");
	if (w && wn && !is_none(w, wn)) {
		uint64_t win = parse_budget(w, wn, period);
		if (win)
			g->sw_window_ns = win;
		else
			say_line("bad window (--window), want e.g. 10% or 5ms; using the budget");
	} else if (w && wn) {
		g->sw_window_ns = period; /* none: listed sites stay on while the budget lasts */
	}
}

/* Open or close the gate of every rewritten module. While the gate is
 * closed, gate word 1 (the off-switch's sites) reads STINT_GATE_SWITCH:
 * a site that runs then switches itself off (switch.c). */
static void gates_set(struct stint_global *g, uint64_t v)
{
	uint32_t n = modules_n(g);
	for (uint32_t i = 0; i < n; i++) {
		struct gmodule *gm = &g->modules[i];
		if (!__atomic_load_n(&gm->ready, __ATOMIC_ACQUIRE) || !gm->gate)
			continue;
		if (gm->smod && (((const struct stint_module *)gm->smod)->flags & STINT_MF_CONTEXT))
			continue; /* context modules keep tracking (contexts.c) */
		__atomic_store_n((uint64_t *)gm->gate, v, __ATOMIC_RELEASE);
		__atomic_store_n((uint64_t *)(gm->gate + STINT_GATE_WORD1), v == STINT_GATE_OPEN ? STINT_GATE_OPEN : sw_closed_word(g, gm),
				 __ATOMIC_RELEASE);
	}
}

#define SYS_futex 202
#define S_FUTEX_WAKE_PRIVATE 129         /* FUTEX_WAKE | FUTEX_PRIVATE_FLAG */
#define S_FUTEX_WAIT_BITSET_PRIVATE 137  /* FUTEX_WAIT_BITSET | FUTEX_PRIVATE_FLAG: absolute CLOCK_MONOTONIC */

/* Ask the period thread for work (SW_REQ_*, switch.c) and wake it. */
static void sw_request(struct stint_global *g, uint32_t what)
{
	if (!g->sw_on || !g->period_thread)
		return;
	if (!(__atomic_fetch_or(&g->sw_req, what, __ATOMIC_ACQ_REL) & what))
		sys_call3(SYS_futex, (long)&g->sw_req, S_FUTEX_WAKE_PRIVATE, 1);
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
 * recording (SW_MISS_MAX, switch.c) is switched off for the period.
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
	int over = __atomic_load_n(&g->sw_window_over, __ATOMIC_ACQUIRE);
	int open = !(p->flags & STINT_PF_DIRECT);
	int rearmed = __atomic_load_n(&g->sw_rearmed, __ATOMIC_ACQUIRE);
	int saturated = open && sw_missed(g, m, p, recorded);
	if (sw_call(g, m, p, saturated || (over && !(open && rearmed == SW_REARM_ON)), 0))
		__atomic_fetch_add(&g->sw_offs, 1, __ATOMIC_RELAXED);
	if (!over || !recorded)
		return;
	uint32_t n;
	const uint32_t *own = !open && g->rets_on == RETS_ALL ? own_sites(m, p, &n) : 0;
	if (own)
		ret_switch_on(g, m, own, n);
	uint32_t z = 0;
	if (!rearmed &&
	    __atomic_compare_exchange_n(&g->sw_rearmed, &z, 1, 0, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED))
		sw_request(g, SW_REQ_REARM);
}

/*
 * What a probe call that took d ticks is charged: what the TSC measured,
 * except that a call that did not grow the trace file (grew = 0) is
 * charged at most g->charge_cap_tsc: such a call does a hash lookup, a
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
	if (!grew && d > g->charge_cap_tsc) {
		__atomic_fetch_add(&g->capped, 1, __ATOMIC_RELAXED);
		return g->charge_cap_tsc;
	}
	return d;
}

/*
 * A switchable site called while the gate is closed: record what it saw
 * and switch it off now (switch.c). It calls once, to be switched off,
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
	uint64_t len0 = __atomic_load_n(&g->file_len, __ATOMIC_RELAXED);
	uint64_t t0 = rdtsc();
	/* charged at the period's end, perhaps to the next: at most half a
	 * budget (none when the budget is zero: QoS wants the program left
	 * alone) */
	uint64_t owed = __atomic_load_n(&g->late_tsc, __ATOMIC_RELAXED) + __atomic_load_n(&g->sw_lazy_tsc, __ATOMIC_RELAXED);
	int r = !g->region_mode && owed < __atomic_load_n(&g->budget_tsc, __ATOMIC_RELAXED) / 2 ? record_probe(g, m, p, v, rs) : 0;
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
	uint64_t rec = call_charge(g, t1 - t0, __atomic_load_n(&g->file_len, __ATOMIC_RELAXED) != len0), d = t2 - t1;
	if (d > g->charge_cap_tsc)
		d = g->charge_cap_tsc; /* longer: the thread was descheduled (a store or two and a list entry) */
	d += g->call_overhead_tsc;
	if (!r)
		__atomic_fetch_add(&g->suppressed, 1, __ATOMIC_RELAXED);
	__atomic_fetch_add(&g->late_tsc, rec, __ATOMIC_RELAXED);
	__atomic_fetch_add(&g->sw_tsc, d, __ATOMIC_RELAXED);
	__atomic_fetch_add(&g->sw_lazy_tsc, d, __ATOMIC_RELAXED);
	if (off)
		__atomic_fetch_add(&g->sw_offs, 1, __ATOMIC_RELAXED);
}

/* What a batch besides its sites costs (at least what was measured at
 * start: the cap and three membarriers). */
static uint64_t sw_fixed(struct stint_global *g)
{
	uint64_t fixed = g->charge_cap_tsc + 3 * g->sw_sync_tsc;
	return g->sw_fixed_tsc > fixed ? g->sw_fixed_tsc : fixed;
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
		g->sw_site_tsc = (7 * g->sw_site_tsc + d / n) / 8;
		return;
	}
	uint64_t est = g->sw_fixed_tsc, cap = 2 * sw_fixed(g);
	if (d > cap)
		d = cap;
	g->sw_fixed_tsc = d > est ? d : (7 * est + d) / 8;
}

/*
 * What a batch switching n sites is kept in reserve for: a quarter more
 * than the average per site, and the fixed part. (Until session 18 the
 * per-site part was a high mark, which follows a rise at once and a fall
 * slowly: one slow batch on this VM doubled it for many periods, and a
 * logged run, with its ~6,000 half-covered sites on, closed its first
 * gate at about 1 ms of a 10 ms budget. sqlite3 pairs sharing a fresh
 * log, 10 interleaved: after two runs 95.3-99.0% (median 98.4%) against
 * 90.4-97.7% (96.2%); a period over budget in 5 of the 10 first runs,
 * 31-1,498 us, against 1 (8.3 ms) with the high mark, none in the
 * second runs.)
 */
static uint64_t sw_reserve(struct stint_global *g, uint64_t n)
{
	return n * g->sw_site_tsc * 5 / 4 + sw_fixed(g);
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
 * no next one: before this reserve (session 33) the region logs, which
 * spend every period's budget, ended each run 0.1-0.5 ms over. Nothing
 * while none was ever listed (sw_all_off runs no batch).
 */
static uint64_t sw_off_reserve(struct stint_global *g)
{
	if (!g->sw_on || !__atomic_load_n(&g->sw_listed, __ATOMIC_RELAXED))
		return 0;
	uint64_t budget = __atomic_load_n(&g->budget_tsc, __ATOMIC_RELAXED);
	uint64_t stall = budget / 64, lazy = g->sw_lazy_hi * 5 / 4;
	stall = g->sw_stall_tsc < stall ? g->sw_stall_tsc : stall;
	lazy = lazy < budget / 8 ? lazy : budget / 8;
	if (!g->sw_is_on)
		return lazy; /* sites the file left on, or that switched on for a call, still switch off */
	return sw_reserve(g, __atomic_load_n(&g->sw_listed_on, __ATOMIC_RELAXED)) + stall + lazy;
}

/* Set gate word 1 of every module that has switchable sites. */
static void gates_word1(struct stint_global *g, uint64_t v)
{
	uint32_t n = modules_n(g);
	for (uint32_t i = 0; i < n; i++) {
		struct gmodule *gm = &g->modules[i];
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
	if (UNLIKELY(g->test_batch_stall_ns) && n < 16 && !(flags & SWB_PEND_ONLY) && g->period_idx >= 3) {
		/* the thread's own time, which is what the batch is charged */
		test_stall(S_CLOCK_THREAD_CPUTIME_ID, g->test_batch_stall_ns);
		g->test_batch_stall_ns = 0;
	}
	uint64_t d = rdtsc() - t0;
	/* The time the period thread ran, not the time it waited for a CPU:
	 * descheduled in the middle of a batch (this VM does that for
	 * milliseconds) it costs the program nothing, as a probe call's
	 * thread does not (CHARGE_CAP_NS). */
	uint64_t c = ns_to_tsc(g, now_ns(S_CLOCK_THREAD_CPUTIME_ID) - c0);
	if (c < d)
		d = c;
	__atomic_fetch_add(&g->sw_tsc, d, __ATOMIC_RELAXED);
	/* Sites waiting in SW_PEND got there by running after the budget
	 * was spent or the window ended, as the sites of sw_closed_call do,
	 * and a window's end (or a rearm's) comes when the budget has
	 * decided nothing: their cost is charged at the period's end, as the
	 * closed calls' is (period_roll), so that it does not close this
	 * period's gate early (the first run of new code is what the budget
	 * is for); what does not fit is the next periods' debt. */
	if (flags & (SWB_PEND_ONLY | SWB_KEEP_FRESH | SWB_DEBT)) {
		__atomic_fetch_add(&g->sw_lazy_tsc, d, __ATOMIC_RELAXED);
		charge = 0;
	}
	if (charge) {
		__atomic_fetch_add(&g->sw_charged_tsc, d, __ATOMIC_RELAXED);
		__atomic_fetch_add(&g->used_tsc, d, __ATOMIC_RELAXED);
	}
	__atomic_fetch_add(on ? &g->sw_ons : &g->sw_offs, n, __ATOMIC_RELAXED);
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
		flags = g->sw_off_paid ? SWB_DEBT : 0;
		g->sw_off_paid = 1;
		if (!__atomic_load_n(&g->sw_listed, __ATOMIC_RELAXED)) {
			g->sw_is_on = 0; /* none was ever listed: nothing to switch */
			return;
		}
	}
	sw_timed(g, 0, flags, 1);
	/* At a window's end fresh sites stay on, and one whose logged
	 * outcome goes straight through its arm never calls to switch
	 * itself off: the next spent or zero budget must still see them. */
	if (!window)
		g->sw_is_on = 0;
}

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

/* The period thread: switch the open-ended listed sites back on (the
 * rearm, see sw_after_record), charged to the budget as it runs. */
static void sw_rearm(struct stint_global *g)
{
	/* not when switching the open-ended sites on and off again would
	 * take the budget past its end (charged as it runs, it would be an
	 * overshoot) */
	uint64_t cost = 2 * sw_reserve(g, __atomic_load_n(&g->sw_listed_open, __ATOMIC_RELAXED));
	if (__atomic_load_n(&g->used_tsc, __ATOMIC_RELAXED) + cost + g->charge_cap_tsc > __atomic_load_n(&g->budget_tsc, __ATOMIC_RELAXED)) {
		__atomic_store_n(&g->sw_rearmed, SW_REARM_DONE, __ATOMIC_RELEASE);
		return;
	}
	if (sw_timed(g, 1, SWB_OPEN_ONLY, 1))
		g->sw_is_on = 1;
	uint64_t win = g->sw_window_ns ? g->sw_window_ns : g->budget_ns;
	g->sw_rearm_end = now_ns(S_CLOCK_MONOTONIC) + (win < SW_REARM_NS ? win : SW_REARM_NS);
}

/* The period thread: the rearm's time is over; the sites go off as at
 * the window's end, and new code may ask for another. */
static void sw_rearm_over(struct stint_global *g)
{
	g->sw_rearm_end = 0;
	__atomic_store_n(&g->sw_rearmed, SW_REARM_NONE, __ATOMIC_RELEASE);
	if (g->sw_is_on && !GATE_CLOSED(g))
		sw_all_off(g, 1);
}

static void sleep_until(uint64_t mono_ns);

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
	g->close_used_tsc = used;
	g->close_reserve_tsc = reserve;
	/* last: the roll takes how first and trusts the rest only with it */
	__atomic_store_n(&g->close_how, how, __ATOMIC_RELEASE);
}

/*
 * Charge a probe call that started at t0 to the period's budget
 * (call_charge); close the gates when it is spent. recorded: whether the
 * call wrote an event; grew: whether it extended the trace file.
 */
static void budget_charge(struct stint_global *g, uint64_t t0, int recorded, int grew)
{
	uint64_t t1 = rdtsc();
	uint64_t d = call_charge(g, t1 - t0, grew) + g->call_overhead_tsc;
	/* keep what switching the listed sites off will cost (sw_reserve:
	 * a margin on the average per site, a guess until the first batch
	 * is measured, and what a batch costs besides) */
	uint64_t reserve = sw_off_reserve(g), budget = __atomic_load_n(&g->budget_tsc, __ATOMIC_RELAXED);
	/* The gate word before the charge is added: the period it names is
	 * the one this charge may close. A charge about to spend the budget
	 * says when it ended first, so that a period roll that takes it in
	 * before it closes the gate (its thread descheduled in between) can
	 * still tell when the period was spent. */
	uint32_t gw = __atomic_load_n(&g->gate_closed, __ATOMIC_ACQUIRE);
	if (__atomic_load_n(&g->used_tsc, __ATOMIC_RELAXED) + d + reserve >= budget)
		__atomic_store_n(&g->spend_tsc, t1, __ATOMIC_RELAXED);
	uint64_t used = __atomic_add_fetch(&g->used_tsc, d, __ATOMIC_ACQ_REL);
	if (!recorded)
		__atomic_fetch_add(&g->suppressed, 1, __ATOMIC_RELAXED);
	if (used + reserve < budget || (gw & 1u))
		return;
	if (UNLIKELY(g->test_charge_stall_ns) && !(g->test_charge_stall_ns & TEST_STALL_AT_NOTE)) {
		uint64_t ns = __atomic_exchange_n(&g->test_charge_stall_ns, 0, __ATOMIC_ACQ_REL);
		if (ns)
			sleep_until(now_ns(S_CLOCK_MONOTONIC) + ns); /* once a run */
	}
	/* fails if the period rolled meanwhile: the roll took this charge
	 * (period_roll), and the next period is not this charge's to close
	 * (a charge added after the roll is seen by the next call) */
	if (__atomic_compare_exchange_n(&g->gate_closed, &gw, gw | 1u, 0, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED)) {
		if (UNLIKELY(g->test_charge_stall_ns & TEST_STALL_AT_NOTE) && __atomic_load_n(&g->period_idx, __ATOMIC_RELAXED) > 0) {
			uint64_t ns = __atomic_exchange_n(&g->test_charge_stall_ns, 0, __ATOMIC_ACQ_REL) & ~TEST_STALL_AT_NOTE;
			if (ns)
				sleep_until(now_ns(S_CLOCK_MONOTONIC) + ns); /* once a run */
		}
		/* A roll since the compare-and-swap (this thread descheduled
		 * here) took the period as closed, with no note of how (its row
		 * says unknown), and opened the next one's gates: those are not
		 * this charge's to close. Between this check and gates_set the
		 * window is a few instructions. */
		if ((__atomic_load_n(&g->gate_closed, __ATOMIC_ACQUIRE) ^ gw) >> 1)
			return;
		g->closed_at_tsc = t1;
		close_note(g, STINT_CLOSE_CHARGE, used, reserve);
		gates_set(g, STINT_GATE_CLOSED);
		sw_request(g, SW_REQ_OFF);
	}
}

/* Record rows of the runtime itself (tid 0, no module). */
static void emit_record(uint8_t kind, uint64_t time, uint64_t src, uint64_t dst, uint64_t value)
{
	struct row rw;
	rw.kind = kind;
	rw.src_module = DST_MODULE_NONE;
	rw.dst_module = DST_MODULE_NONE;
	rw.src = src;
	rw.dst = dst;
	rw.value = value;
	rw.time = time;
	emit(&rw);
}

static void log_save(struct stint_global *g, int exiting);

/*
 * The QoS controller (QDIME, Equation 1). At every period boundary the
 * period thread reads the analyzer's latest sample v from the QoS page
 * (stint_abi.h) and sets the next period's budget
 *
 *     b = 0                    if v is on the wrong side of T
 *     b = (v - T) / D * P      otherwise, at most P,
 *
 * with D = v + T (the paper's conservative choice), M - T or v, as the
 * analyzer asks; for a lower-is-better metric v - T becomes T - v (and v
 * becomes T in the third form). Without a fresh sample the budget is the
 * configured default (STINT_BUDGET), never more. The runtime has no
 * floating point (-mgeneral-regs-only), so the doubles are decoded by
 * hand and brought to a common binary exponent: Equation 1 is a ratio,
 * so the common scale cancels and 53-bit integers are exact enough.
 */

/* A finite, non-negative double as m * 2^e (m < 2^53); 0 if not such a value. */
static int dbl_decode(uint64_t bits, uint64_t *m, int *e)
{
	if (bits >> 63)
		return bits == (1ULL << 63) ? (*m = 0, *e = 0, 1) : 0; /* -0.0 is 0 */
	int ex = (int)((bits >> 52) & 0x7ff);
	uint64_t fr = bits & ((1ULL << 52) - 1);
	if (ex == 0x7ff)
		return 0; /* inf, NaN */
	if (ex == 0) {
		*m = fr;
		*e = -1074;
	} else {
		*m = fr | (1ULL << 52);
		*e = ex - 1075;
	}
	return 1;
}

/* Bring n doubles to integers at the largest of their exponents. 0 if
 * one of them is not a finite, non-negative value. */
static int dbl_align(const uint64_t *bits, uint64_t *out, int n)
{
	uint64_t m[3];
	int e[3], emax = -2000;
	for (int i = 0; i < n; i++) {
		if (!dbl_decode(bits[i], &m[i], &e[i]))
			return 0;
		if (m[i] && e[i] > emax)
			emax = e[i];
	}
	for (int i = 0; i < n; i++) {
		int sh = emax - e[i];
		out[i] = !m[i] || sh >= 64 ? 0 : m[i] >> sh;
	}
	return 1;
}

/* Equation 1 for a page snapshot; returns the budget in ns, or ~0 when
 * the sample cannot be used. */
static uint64_t qos_equation(const struct stint_qos_page *s, uint64_t period)
{
	uint64_t in[3] = {s->value, s->threshold, s->max}, x[3];
	int span = s->tuning == STINT_QOS_TUNE_SPAN;
	if (!dbl_align(in, x, span ? 3 : 2))
		return ~0ULL;
	uint64_t v = x[0], t = x[1], mx = x[2];
	int lower = s->flags & STINT_QOS_LOWER_IS_BETTER;
	if (lower ? v >= t : v <= t)
		return 0;
	uint64_t gain = lower ? t - v : v - t, den = v + t;
	if (span && (lower ? mx < t : mx > t))
		den = lower ? t - mx : mx - t;
	else if (s->tuning == STINT_QOS_TUNE_VALUE)
		den = lower ? t : v;
	if (!den)
		return period;
	uint64_t b = mul_div(gain, period, den);
	return b > period ? period : b;
}

/* Map the page once it exists; a page that is not one is said once and
 * left alone for the rest of the run. */
static void qos_map(struct stint_global *g)
{
	if (g->qos_page || g->qos_bad)
		return;
	long fd = open_ro(g->qos_path);
	if (sys_failed(fd))
		return; /* not there yet (qos watch may start later): retry next period */
	/* A file shorter than the page would fault on access: check first. */
	struct s_stat st;
	long a = -1;
	int stat_ok = !sys_failed(sys_call2(SYS_fstat, fd, (long)&st));
	if (stat_ok && st.size == 0) {
		sys_call1(SYS_close, fd); /* just created: retry next period */
		return;
	}
	if (stat_ok && st.size >= STINT_QOS_PAGE_SIZE)
		a = sys_mmap(0, STINT_QOS_PAGE_SIZE, S_PROT_READ, S_MAP_SHARED, (int)fd, 0);
	sys_call1(SYS_close, fd);
	const struct stint_qos_page *pg = (const void *)a;
	if (!sys_failed(a) && pg->magic == 0) {
		sys_call2(SYS_munmap, a, STINT_QOS_PAGE_SIZE); /* still being created: retry */
		return;
	}
	if (sys_failed(a) || pg->magic != STINT_QOS_MAGIC || pg->version != STINT_QOS_VERSION) {
		if (!sys_failed(a))
			sys_call2(SYS_munmap, a, STINT_QOS_PAGE_SIZE);
		g->qos_bad = 1;
		say_line("STINT_QOS does not name a QoS page of this version; using the default budget");
		return;
	}
	g->qos_page = (uint64_t)a;
}

/* Decide the next period's budget (at now_mono) from the page. */
static void qos_next(struct stint_global *g, uint64_t now_mono)
{
	qos_map(g);
	qos_fallback(g);
	const struct stint_qos_page *pg = (const void *)g->qos_page;
	if (!pg)
		return;
	struct stint_qos_page s;
	for (int tries = 0;; tries++) {
		uint64_t q0 = __atomic_load_n(&pg->seq, __ATOMIC_ACQUIRE);
		s_memcpy(&s, (const void *)pg, sizeof s);
		__atomic_thread_fence(__ATOMIC_ACQUIRE);
		if (!(q0 & 1) && __atomic_load_n(&pg->seq, __ATOMIC_RELAXED) == q0)
			break;
		if (tries == 100)
			return; /* the writer is stuck mid-sample: default */
	}
	g->qos_threshold = s.threshold;
	uint64_t age_max = 2 * s.interval_ns + g->period_ns;
	if (s.state != STINT_QOS_RUNNING || !s.sample_mono_ns || s.sample_mono_ns > now_mono + 1000000 ||
	    now_mono - s.sample_mono_ns > age_max)
		return; /* no fresh sample: default */
	uint64_t b = qos_equation(&s, g->period_ns);
	if (b == ~0ULL)
		return;
	g->qos_value = s.value;
	g->budget_ns = b;
}

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

static int sw_quiet_skip(struct stint_global *g)
{
	if (!g->sw_quiet_on || !g->sw_quiet) {
		g->sw_skipped = 0;
		return 0;
	}
	if (g->sw_skipped + 1 < (1u << g->sw_quiet)) {
		g->sw_skipped++;
		return 1;
	}
	g->sw_skipped = 0;
	return 0;
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
	g->sw_charged_tsc = 0;
	g->sw_off_paid = 0;
	/* until a window opens below: a period without one (skipped, spent
	 * at its start, too costly to switch) is no sign of quiet */
	g->sw_no_window = 1;
	uint64_t budget = __atomic_load_n(&g->budget_tsc, __ATOMIC_RELAXED);
	int spent = !g->budget_ns;
	uint64_t used0 = 0, reserve0 = 0;
	if (g->sw_debt_tsc && !last) {
		/* what earlier periods' switching and recording after their
		 * gates closed left over their budgets (period_roll) */
		uint64_t debt = g->sw_debt_tsc, reserve = sw_off_reserve(g), pay = debt;
		uint64_t room = __atomic_load_n(&g->used_tsc, __ATOMIC_RELAXED) + reserve;
		room = budget > room ? budget - room : 0;
		/* A debt larger than what the period can pay (keeping what
		 * switching off the sites now on would cost) is paid up to that
		 * and the rest carried to the next period: a period never starts
		 * over its budget, so a burst of switching (the period thread
		 * descheduled in mid-batch, a window's end with thousands of
		 * sites on) closes the next periods' gates instead of showing as
		 * one period's overshoot. Every ns is still charged. A zero
		 * budget (QoS) pays it at once: nothing would ever pay it. */
		if (g->budget_ns && debt > room)
			pay = room;
		g->sw_debt_tsc = debt - pay;
		uint64_t used = __atomic_add_fetch(&g->used_tsc, pay, __ATOMIC_RELAXED);
		/* A debt that leaves no budget spends the period at its start, as
		 * a zero budget does: the gate stays closed, nothing is switched
		 * on, and what is on is switched off as when a probe spends it. */
		spent = spent || used + reserve >= budget;
		used0 = used;
		reserve0 = reserve;
	}
	if (spent) {
		g->closed_at_tsc = now_tsc;
		close_note(g, STINT_CLOSE_START, used0, reserve0);
		__atomic_fetch_or(&g->gate_closed, 1u, __ATOMIC_ACQ_REL);
		gates_set(g, STINT_GATE_CLOSED);
		if (g->sw_on && g->sw_is_on && !last)
			sw_all_off(g, 0);
		return;
	}
	__atomic_store_n(&g->sw_rearmed, SW_REARM_NONE, __ATOMIC_RELEASE);
	g->sw_rearm_end = 0;
	if (g->sw_on && !last && __atomic_load_n(&g->sw_window_over, __ATOMIC_ACQUIRE)) {
		__atomic_store_n(&g->sw_window_over, 0, __ATOMIC_RELEASE);
		if (!was_closed)
			gates_word1(g, STINT_GATE_OPEN);
	}
	if (was_closed) {
		__atomic_fetch_and(&g->gate_closed, ~1u, __ATOMIC_ACQ_REL);
		gates_set(g, STINT_GATE_OPEN);
	}
	if (!g->sw_on || last)
		return;
	if (sw_quiet_skip(g)) {
		sw_period_upkeep(g);
		return;
	}
	/* what the last switch-on took (at first every listed site); when it
	 * is too much, halve the guess each period, so that a later period,
	 * when more sites have recorded all they had to, tries again */
	uint64_t guess = g->sw_last_on ? g->sw_last_on : __atomic_load_n(&g->sw_listed, __ATOMIC_RELAXED);
	if (2 * guess * g->sw_site_tsc > budget / 2) {
		g->sw_last_on = guess / 2 ? guess / 2 : 1;
		return;
	}
	/* nor when the debt leaves too little to switch them on and off */
	uint64_t used = __atomic_load_n(&g->used_tsc, __ATOMIC_RELAXED), fixed = 2 * sw_fixed(g);
	if (used + 2 * guess * g->sw_site_tsc + fixed > budget)
		return;
	/* The estimate can be far off (the thread descheduled in mid-batch,
	 * membarriers waiting on busy cores): the batch stops at half of
	 * what the period has left, so that switching its sites off again
	 * fits too (TestSwitchOnWithinBudget); the sites it did not reach
	 * stay off this period. */
	uint64_t left = budget > used + fixed ? budget - used - fixed : 0;
	g->sw_stop_tsc = rdtsc() + left / 2;
	g->sw_last_on = sw_timed(g, 1, 0, 1);
	g->sw_no_window = 0;
	g->sw_stop_tsc = 0;
	if (!g->sw_last_on)
		g->sw_last_on = 1;
	g->sw_is_on = 1;
}

/* When the ending period's budget was spent, for a gate that no charge
 * closed in time: the end of the last charge that spent it (spend_tsc),
 * if that lies within the period, else now_tsc. */
static uint64_t spent_at(struct stint_global *g, uint64_t now_tsc)
{
	uint64_t at = __atomic_load_n(&g->spend_tsc, __ATOMIC_RELAXED);
	return at >= g->period_tsc0 && at <= now_tsc ? at : now_tsc;
}

/* End the current period at (now_tsc, now_mono) and start the next
 * (last: the program is leaving; nothing is switched on). */
static void period_roll(struct stint_global *g, uint64_t now_tsc, uint64_t now_mono, int last)
{
	/* Recalibrate over the whole run so far. */
	if (now_mono > g->cal_mono + 5000000 && now_tsc > g->cal_tsc) {
		uint64_t hz = mul_div(now_tsc - g->cal_tsc, 1000000000ULL, now_mono - g->cal_mono);
		if (hz > 10000000ULL)
			g->tsc_hz = hz;
	}
	/* A new period number first: from here no charge closes the period
	 * that ends (budget_charge's compare-and-swap fails), so bit 0 read
	 * here is final for it. */
	uint64_t closed = __atomic_fetch_add(&g->gate_closed, 2u, __ATOMIC_ACQ_REL) & 1u;
	uint64_t budget_tsc = __atomic_load_n(&g->budget_tsc, __ATOMIC_RELAXED);
	uint64_t used = __atomic_exchange_n(&g->used_tsc, 0, __ATOMIC_ACQ_REL);
	uint64_t reserve = sw_off_reserve(g);
	if (!closed && g->budget_ns && used + reserve >= budget_tsc) {
		/* spent by a charge that had not closed the gate yet, and now
		 * never will: the period ended spent when that charge did */
		g->closed_at_tsc = spent_at(g, now_tsc);
		close_note(g, STINT_CLOSE_ROLL, used, reserve);
		closed = 1;
	}
	/* How this period's gate closed, taken so that no later period can
	 * read it as its own. 0 with the gate closed: the charge that closed
	 * it won its compare-and-swap but has not noted it yet (its thread
	 * descheduled in between), so the note and closed_at_tsc may still
	 * be an earlier period's: the row says "unknown" and the enabled time
	 * ends where that charge spent the budget. */
	uint32_t how = closed ? __atomic_exchange_n(&g->close_how, STINT_CLOSE_UNKNOWN, __ATOMIC_ACQUIRE) : STINT_CLOSE_UNKNOWN;
	if (closed && how == STINT_CLOSE_UNKNOWN) {
		g->closed_at_tsc = spent_at(g, now_tsc);
	}
	uint64_t sw = __atomic_exchange_n(&g->sw_tsc, 0, __ATOMIC_ACQ_REL);
	uint64_t ons = __atomic_exchange_n(&g->sw_ons, 0, __ATOMIC_ACQ_REL);
	uint64_t offs = __atomic_exchange_n(&g->sw_offs, 0, __ATOMIC_ACQ_REL);
	uint64_t lazy = __atomic_exchange_n(&g->sw_lazy_tsc, 0, __ATOMIC_ACQ_REL);
	/* switching not charged as it ran, except the sites' own (below) */
	used += sw > g->sw_charged_tsc + lazy ? sw - g->sw_charged_tsc - lazy : 0;
	/* What came after the gate closed or the window ended (sites that
	 * switched or recorded on their way off, batches of waiting sites):
	 * this period's as far as its budget has room (sw_off_reserve keeps
	 * room for the switching), the rest the next periods' debt (added
	 * after a carry). A zero budget (QoS) pays it at once. */
	uint64_t own = lazy + __atomic_exchange_n(&g->late_tsc, 0, __ATOMIC_ACQ_REL), pay = own;
	if (g->budget_ns && used + own > budget_tsc)
		pay = budget_tsc > used ? budget_tsc - used : 0;
	used += pay;
	g->sw_debt_tsc += own - pay;
	if (closed && !last) {
		uint64_t hi = g->sw_lazy_hi - g->sw_lazy_hi / 16;
		g->sw_lazy_hi = lazy > hi ? lazy : hi;
	}
	if (last) {
		/* no next period to pay it: the last one is charged its own */
		used += g->sw_debt_tsc;
		g->sw_debt_tsc = 0;
	}
	uint64_t suppressed = __atomic_exchange_n(&g->suppressed, 0, __ATOMIC_ACQ_REL);
	uint64_t events = __atomic_load_n(&g->events, __ATOMIC_RELAXED);
	uint64_t refused = __atomic_exchange_n(&g->refused, 0, __ATOMIC_ACQ_REL);
	uint64_t recorded = events - g->period_events0 - refused; /* refusal rows are not events */
	uint64_t enabled_tsc = (closed ? g->closed_at_tsc : now_tsc) - g->period_tsc0;
	if (recorded)
		g->sw_quiet = 0;
	else if (!g->sw_no_window && g->sw_quiet < SW_QUIET_MAX)
		g->sw_quiet++;
	uint64_t granted = g->budget_ns;
	uint64_t rows = 2; /* the rows emitted here, which count as events */
	emit_record(STINT_K_PERIOD, g->period_mono0, g->period_idx, granted, tsc_to_ns(g, used));
	emit_record(STINT_K_PERIOD_STATS, g->period_mono0, recorded, suppressed,
		    (int64_t)enabled_tsc > 0 ? tsc_to_ns(g, enabled_tsc) : 0);
	if (g->qos_on) {
		emit_record(STINT_K_PERIOD_QOS, g->period_mono0, g->qos_value, g->qos_threshold, granted);
		qos_next(g, now_mono);
		rows++;
	}
	if (g->sw_on) {
		emit_record(STINT_K_PERIOD_SWITCH, g->period_mono0, ons, offs, tsc_to_ns(g, sw));
		rows++;
	}
	if (closed) {
		int noted = how != STINT_CLOSE_UNKNOWN;
		emit_record(STINT_K_PERIOD_CLOSE, g->period_mono0, how, noted ? tsc_to_ns(g, g->close_reserve_tsc) : 0,
			    noted ? tsc_to_ns(g, g->close_used_tsc) : 0);
		rows++;
	}
	g->period_idx++;
	g->period_tsc0 = now_tsc;
	g->period_mono0 = now_mono;
	/* the count read above and the rows just emitted, not a new read:
	 * an event written while the records were emitted (the thread
	 * descheduled there) would count in neither period
	 * (TestBudgetAccounting saw 3 so in a slow CI run) */
	g->period_events0 = events + rows;
	__atomic_store_n(&g->budget_tsc, ns_to_tsc(g, g->budget_ns), __ATOMIC_RELAXED);
	budget_gates_start(g, closed, now_tsc, last);
}

/* The median of the n timings t (sorted in place: an insertion sort, n
 * is small), the upper one of the middle two when n is even. */
static uint64_t median_of(uint64_t *t, int n)
{
	for (int i = 1; i < n; i++)
		for (int j = i; j > 0 && t[j - 1] > t[j]; j--) {
			uint64_t x = t[j];
			t[j] = t[j - 1];
			t[j - 1] = x;
		}
	return t[n / 2];
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

static void sleep_until(uint64_t mono_ns)
{
	struct s_timespec ts = {(long)(mono_ns / 1000000000ULL), (long)(mono_ns % 1000000000ULL)};
	while (sys_call4(SYS_clock_nanosleep, S_CLOCK_MONOTONIC, S_TIMER_ABSTIME, (long)&ts, 0) == -4)
		;
}

/*
 * The window. Listed sites (switch.c) are switched on at a period's start
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
	__atomic_store_n(&g->sw_window_over, 1, __ATOMIC_RELEASE);
	gates_word1(g, STINT_GATE_SWITCH);
	if (g->sw_is_on)
		sw_all_off(g, 1);
}

/* Wait until mono_ns, bounded by a futex wait on g->sw_req; returns 1 if
 * woken by a request (or the wait is impossible), 0 at the time. */
static int wait_req(struct stint_global *g, uint64_t mono_ns)
{
	struct s_timespec ts = {(long)(mono_ns / 1000000000ULL), (long)(mono_ns % 1000000000ULL)};
	for (;;) {
		if (__atomic_load_n(&g->sw_req, __ATOMIC_ACQUIRE))
			return 1;
		long r = sys_call6(SYS_futex, (long)&g->sw_req, S_FUTEX_WAIT_BITSET_PRIVATE, 0, (long)&ts, 0, -1);
		if (r == -110 /* ETIMEDOUT */ || now_ns(S_CLOCK_MONOTONIC) >= mono_ns)
			return 0;
		if (r == -38 /* ENOSYS */) {
			sleep_until(mono_ns);
			return 0;
		}
	}
}

/* The shortest time between two batches of SW_PEND sites. */
#define SW_PEND_GAP_NS 1000000ULL

/*
 * Wait until mono_ns (the period's end): close the window when it ends
 * and switch the listed sites off whenever a probe closes the gate
 * meanwhile (sw_request wakes us through g->sw_req).
 */
static void wait_period(struct stint_global *g, uint64_t mono_ns)
{
	if (!g->sw_on) {
		sleep_until(mono_ns);
		return;
	}
	uint64_t win = g->sw_window_ns ? g->sw_window_ns : g->budget_ns;
	uint64_t win_end = g->period_mono0 + win;
	for (;;) {
		int over = __atomic_load_n(&g->sw_window_over, __ATOMIC_ACQUIRE) || win_end >= mono_ns;
		uint64_t rearm_end = g->sw_rearm_end && g->sw_rearm_end < mono_ns ? g->sw_rearm_end : 0;
		int req = wait_req(g, !over ? win_end : rearm_end ? rearm_end : mono_ns);
		if (!req && over && rearm_end) {
			if (lock_bounded(&g->period_lock)) {
				if (!__atomic_load_n(&g->run_ended, __ATOMIC_ACQUIRE))
					sw_rearm_over(g);
				unlock(&g->period_lock);
			}
			continue;
		}
		if (!req && over)
			return;
		if (!lock_bounded(&g->period_lock))
			continue;
		uint32_t what = __atomic_exchange_n(&g->sw_req, 0, __ATOMIC_ACQ_REL);
		int closed = GATE_CLOSED(g);
		if (what == SW_REQ_SYNC) {
			/* Sites reach SW_PEND one by one as they first run after the
			 * gate closed, thousands in a row in a large program: gather
			 * them for SW_PEND_GAP_NS (they call in meanwhile, cheaply)
			 * rather than run a batch per site. */
			uint64_t now = now_ns(S_CLOCK_MONOTONIC);
			if (now < g->sw_pend_mono + SW_PEND_GAP_NS && now + SW_PEND_GAP_NS < mono_ns) {
				__atomic_fetch_or(&g->sw_req, what, __ATOMIC_ACQ_REL);
				unlock(&g->period_lock);
				sleep_until(g->sw_pend_mono + SW_PEND_GAP_NS);
				continue;
			}
		}
		if (!__atomic_load_n(&g->run_ended, __ATOMIC_ACQUIRE)) {
			if (what & SW_REQ_SYNC) {
				sw_timed(g, 0, SWB_PEND_ONLY, 0); /* switch.c's SW_PEND sites */
				g->sw_pend_mono = now_ns(S_CLOCK_MONOTONIC);
			}
			if (!req && !closed)
				window_close(g);
			else if (!req)
				__atomic_store_n(&g->sw_window_over, 1, __ATOMIC_RELEASE);
			else if (closed && g->sw_is_on)
				sw_all_off(g, 0);
			else if (!closed && (what & SW_REQ_REARM) && __atomic_load_n(&g->sw_window_over, __ATOMIC_ACQUIRE))
				sw_rearm(g);
		}
		unlock(&g->period_lock);
	}
}

/* The period thread. */
static void period_main(void)
{
	struct stint_global *g = G();
	g->call_overhead_tsc = measure_call_overhead();
	/* calibrate the TSC over 10 ms */
	uint64_t t0 = rdtsc(), m0 = now_ns(S_CLOCK_MONOTONIC);
	sleep_until(m0 + 10000000ULL);
	uint64_t t1 = rdtsc(), m1 = now_ns(S_CLOCK_MONOTONIC);
	if (m1 > m0 && t1 > t0)
		g->tsc_hz = mul_div(t1 - t0, 1000000000ULL, m1 - m0);
	__atomic_store_n(&g->budget_tsc, ns_to_tsc(g, g->budget_ns), __ATOMIC_RELAXED);
	g->charge_cap_tsc = charge_cap_measure(g);
	g->sw_stall_tsc = ns_to_tsc(g, SW_STALL_NS);
	if (g->sync_core) {
		/* what one membarrier(SYNC_CORE) costs here (IPIs: much more on
		 * a VM than on bare metal), for the switch-off reserve */
		uint64_t best = ~0ULL;
		for (int i = 0; i < 4; i++) {
			uint64_t a = rdtsc();
			sync_core();
			uint64_t d = rdtsc() - a;
			best = d < best ? d : best;
		}
		g->sw_sync_tsc = best;
	}
	uint64_t last_save = m1;
	for (;;) {
		uint64_t next = g->period_mono0 + (g->period_ns ? g->period_ns : 1000000000ULL);
		wait_period(g, next);
		if (!lock_bounded(&g->period_lock))
			continue;
		if (__atomic_load_n(&g->run_ended, __ATOMIC_ACQUIRE)) {
			unlock(&g->period_lock);
			continue; /* the program is leaving: the exit path wrote the last period */
		}
		uint64_t nt = rdtsc(), nm = now_ns(S_CLOCK_MONOTONIC);
		if (g->budget_on)
			period_roll(g, nt, nm, 0);
		else
			g->period_mono0 = nm;
		unlock(&g->period_lock);
		if (g->log_on && nm - last_save >= 1000000000ULL) {
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
	int locked = lock_bounded(&g->period_lock); /* else a period thread is stuck: write the end anyway */
	if (__atomic_load_n(&g->run_ended, __ATOMIC_ACQUIRE) || !__atomic_load_n(&g->recording, __ATOMIC_ACQUIRE)) {
		if (locked)
			unlock(&g->period_lock);
		return;
	}
	uint64_t nt = rdtsc(), nm = now_ns(S_CLOCK_MONOTONIC);
	if (locked && g->budget_on && g->period_thread)
		period_roll(g, nt, nm, 1);
	emit_record(STINT_K_RUN_END, nm, STINT_RUN_END_UNKNOWN, 0, nm > g->mono_start_ns ? nm - g->mono_start_ns : 0);
	__atomic_store_n(&g->run_ended, 1, __ATOMIC_RELEASE);
	if (locked)
		unlock(&g->period_lock);
}

/*
 * Start period 0 (at set-up and in a forked child) and, with spawn, the
 * period thread (periods_spawn).
 */
static void periods_start(struct stint_global *g, int spawn)
{
	if (!g->budget_on && !g->log_on)
		return;
	g->period_idx = 0;
	g->period_tsc0 = rdtsc();
	g->period_mono0 = now_ns(S_CLOCK_MONOTONIC);
	g->cal_tsc = g->period_tsc0;
	g->cal_mono = g->period_mono0;
	g->period_events0 = __atomic_load_n(&g->events, __ATOMIC_RELAXED);
	__atomic_store_n(&g->used_tsc, 0, __ATOMIC_RELAXED);
	__atomic_store_n(&g->suppressed, 0, __ATOMIC_RELAXED);
	__atomic_store_n(&g->gate_closed, 0, __ATOMIC_RELAXED);
	if (g->qos_on) {
		/* a forked child starts over from the default, like its parent did */
		qos_fallback(g);
		__atomic_store_n(&g->budget_tsc, ns_to_tsc(g, g->budget_ns), __ATOMIC_RELAXED);
	}
	__atomic_store_n(&g->sw_tsc, 0, __ATOMIC_RELAXED);
	__atomic_store_n(&g->sw_ons, 0, __ATOMIC_RELAXED);
	__atomic_store_n(&g->sw_offs, 0, __ATOMIC_RELAXED);
	__atomic_store_n(&g->sw_req, 0, __ATOMIC_RELAXED);
	__atomic_store_n(&g->sw_lazy_tsc, 0, __ATOMIC_RELAXED);
	__atomic_store_n(&g->late_tsc, 0, __ATOMIC_RELAXED);
	g->sw_debt_tsc = 0;
	g->sw_quiet = 0;
	g->sw_skipped = 0;
	g->sw_no_window = 0;
	if (!g->sw_site_tsc)
		g->sw_site_tsc = ns_to_tsc(g, 300); /* until a batch is measured */
	g->sw_is_on = 1; /* as the rewriter left them, or as the parent had them: switch on to be sure */
	if (g->budget_on)
		budget_gates_start(g, 0, g->period_tsc0, 0);
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
	if (!g->budget_on && !g->log_on)
		return;
	long st = sys_mmap(0, TIMER_STACK, S_PROT_READ | S_PROT_WRITE, S_MAP_PRIVATE | S_MAP_ANONYMOUS, -1, 0);
	if (sys_failed(st)) {
		say_line("cannot map the period thread's stack; running without a budget");
		g->budget_on = 0;
		g->log_on = 0;
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
		g->budget_on = 0; /* no periods: record without a budget rather than stop for good */
		g->period_thread = 0;
		return;
	}
	g->period_thread = 1;
}
