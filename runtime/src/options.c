/*
 * options.c - the settings: the module's option string (written by the
 * rewriter) and the STINT_* environment variables that override it; the
 * duration and budget grammar, which is rewrite.ParseDuration's and
 * ParseBudget's (testdata/durations.tsv holds the vectors all of them
 * are checked against); the budget's set-up.
 */
#include "stint.h"

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
	if (ip > 3600ULL * 1000000000ULL / mul)
		return 0; /* past an hour (and ip * mul could wrap) */
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
	if (p && pn && period)
		g->per.period_ns = period; /* block counts' period, without a budget too (counts.c) */
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
		if (ql >= sizeof g->qos.path) {
			say_line("STINT_QOS path too long; running without the QoS controller");
			qos = 0;
		} else {
			s_memcpy(g->qos.path, q, ql + 1);
			g->qos.on = 1;
			g->qos.default_ns = budget > period ? period : budget;
			qos_fallback(g);
			budget = g->qos.default_ns;
		}
	}
	if (!qos && budget >= period)
		return; /* always on */
	g->per.budget_ns = budget;
	g->per.period_ns = period;
	g->per.tsc_hz = 3000000000ULL; /* until the period thread calibrates */
	g->per.budget_tsc = ns_to_tsc(g, budget);
	g->per.charge_cap_tsc = ns_to_tsc(g, CHARGE_CAP_NS);
	g->sw.stall_tsc = ns_to_tsc(g, SW_STALL_NS);
	g->per.budget_on = 1;
	test_setup(g, envp);
	/* The off-switch is on unless STINT_SWITCH=0 (for
	 * measuring what it saves). */
	g->sw.on = !env_is_zero(env_get(envp, "STINT_SWITCH"));
	/* Cold sites (sw_cold_load) start off unless STINT_COLD=0. */
	g->sw.cold = !env_is_zero(env_get(envp, "STINT_COLD"));
	/* Quiet periods thin the windows out (sw_quiet_skip) unless
	 * STINT_QUIET=0. */
	g->sw.quiet_on = !env_is_zero(env_get(envp, "STINT_QUIET"));
	/* Calls' returns still to see and new code's own sites (rets.c)
	 * unless STINT_RETS=0; STINT_RETS=calls keeps the first. */
	const char *rets = env_get(envp, "STINT_RETS");
	g->sw.rets_on = env_is_zero(rets) ? RETS_OFF : rets && !s_strncmp(rets, "calls", 6) ? RETS_CALLS : RETS_ALL;
	/* Self mode (the off-switch) unless STINT_SWITCH_SELF=0. */
	g->sw.self_ok = !env_is_zero(env_get(envp, "STINT_SWITCH_SELF"));
	size_t wn = 0;
	const char *w = setting_checked(envp, "STINT_WINDOW", opts, "window", &wn, share_ok, period,
					"bad window (STINT_WINDOW), want e.g. 10% or 5ms; using the rewrite's (--window)");
	if (w && wn && !is_none(w, wn)) {
		uint64_t win = parse_budget(w, wn, period);
		if (win)
			g->sw.window_ns = win;
		else
			say_line("bad window (--window), want e.g. 10% or 5ms; using the budget");
	} else if (w && wn) {
		g->sw.window_ns = period; /* none: listed sites stay on while the budget lasts */
	}
}
