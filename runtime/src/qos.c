/*
 * qos.c - the QoS controller (QDIME, Equation 1). At every period boundary the
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
#include "stint.h"

#define QOS_NAN 0x7ff8000000000000ULL /* a QoS row's metric when there was none */

/* No usable QoS sample: the configured default budget, and no metric
 * or threshold for the period's QoS row. */
static void qos_fallback(struct stint_global *g)
{
	g->per.budget_ns = g->qos.default_ns;
	g->qos.value = g->qos.threshold = QOS_NAN;
}

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
	if (g->qos.page || g->qos.bad)
		return;
	long fd = open_ro(g->qos.path);
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
		g->qos.bad = 1;
		say_line("STINT_QOS does not name a QoS page of this version; using the default budget");
		return;
	}
	g->qos.page = (uint64_t)a;
}

/* Decide the next period's budget (at now_mono) from the page. */
static void qos_next(struct stint_global *g, uint64_t now_mono)
{
	qos_map(g);
	qos_fallback(g);
	const struct stint_qos_page *pg = (const void *)g->qos.page;
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
	g->qos.threshold = s.threshold;
	uint64_t age_max = 2 * s.interval_ns + g->per.period_ns;
	if (s.state != STINT_QOS_RUNNING || !s.sample_mono_ns || s.sample_mono_ns > now_mono + 1000000 ||
	    now_mono - s.sample_mono_ns > age_max)
		return; /* no fresh sample: default */
	uint64_t b = qos_equation(&s, g->per.period_ns);
	if (b == ~0ULL)
		return;
	g->qos.value = s.value;
	g->per.budget_ns = b;
}
