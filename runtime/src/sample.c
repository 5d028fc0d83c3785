/*
 * sample.c - sampled recording (rewrite --sample; the reservoir thesis):
 * each event of an every-occurrence module goes to a sampler instead of
 * the trace. rate:P% takes each event with probability P, every:N every
 * Nth, reservoir:P% keeps a reservoir per stratum (a call's callee, or
 * the site) and interval, sized at P% of the stratum's events in the
 * interval before and never under STINT_SAMPLE_MIN, filled by Vitter's
 * and Li's Algorithm L: a skipped event costs a fetch-add and a compare.
 *
 * The samples wait in the interval's half of a double buffer; a reader
 * thread of the runtime's own (signals blocked, like the period thread)
 * flips the halves at each interval's end and writes the old one out:
 * per stratum, its samples (STINT_SAMPLED_BASE + kind) and one
 * STINT_K_SAMPLE_SET row with how many events they stand for. The
 * program's threads never write a sample to the trace. The reader waits
 * SMP_GRACE_NS after a flip for probes still on the old half; a probe
 * descheduled longer than that may put its sample in a half already
 * written out (it is lost, or shows up two intervals later).
 *
 * No float arithmetic (the runtime is built -mgeneral-regs-only): W and
 * the logarithms are fixed point, log2 in Q32.32, W in Q0.64.
 */
#include "stint.h"

#define LN2_Q64 0xb17217f7d1cf79abULL /* ln 2, Q0.64 */

/*
 * The stripe of the calling thread: threads count and draw in stripes of
 * their own, picked by the stack they run on (a private stack, each
 * STACKS_SIZE bytes, or the program's), so that two threads' probes do
 * not fight over one cache line (a shared count and draw cost the rate
 * sampler 28% of its time on 2 threads).
 */
static inline uint32_t smp_stripe_of(void)
{
	uint64_t sp;
	__asm__("mov %%rsp, %0" : "=r"(sp));
	return (uint32_t)((sp / STACKS_SIZE) % SMP_STRIPES);
}

/* A uniform draw, never 0 (a Weyl sequence through splitmix64's mixer,
 * one per stripe). */
static uint64_t smp_rand(struct stint_sample *s)
{
	uint64_t z = __atomic_add_fetch(&s->stripe[smp_stripe_of()].rng, 0x9e3779b97f4a7c15ULL, __ATOMIC_RELAXED);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	z ^= z >> 31;
	return z ? z : 1;
}

/* log2(x / 2^64) in Q32.32 (<= 0) for x > 0: the integer part from the
 * leading zeros, each fraction bit by squaring the mantissa. */
static int64_t smp_log2(uint64_t x)
{
	int z = __builtin_clzll(x);
	uint64_t y = x << z; /* the mantissa in [1, 2), Q1.63 */
	uint64_t frac = 0;
	for (int i = 31; i >= 0; i--) {
		unsigned __int128 sq = (unsigned __int128)y * y; /* Q2.126 */
		if ((uint64_t)(sq >> 127)) {
			frac |= 1ULL << i;
			y = (uint64_t)(sq >> 64);
		} else {
			y = (uint64_t)(sq >> 63);
		}
	}
	return (int64_t)(-1 - z) * (1LL << 32) + (int64_t)frac;
}

/* The square root of v, rounded down (shifts and compares: no division). */
static uint64_t smp_isqrt(unsigned __int128 v)
{
	uint64_t r = 0;
	for (int b = 63; b >= 0; b--) {
		uint64_t t = r | (1ULL << b);
		if ((unsigned __int128)t * t <= v)
			r = t;
	}
	return r;
}

static uint64_t smp_exp2(const struct stint_sample *s, int64_t lw);

/* pow2[i] = 2^-(2^-(i+1)) in Q0.64: each the square root of the one
 * before; then the tables of the fast log2 and exp2, from the exact
 * ones. */
static void smp_pow2_init(struct stint_sample *s)
{
	uint64_t v = 1ULL << 63; /* 1/2 */
	for (int i = 0; i < 32; i++) {
		v = smp_isqrt((unsigned __int128)v << 64);
		s->pow2[i] = v;
	}
	for (uint64_t i = 0; i <= SMP_TAB; i++) {
		/* log2(1 + i/T) = log2((T + i) / 2T) + 1; log2(2) = 1 */
		uint64_t x = i < SMP_TAB ? mul_div(SMP_TAB + i, 1ULL << 63, SMP_TAB) : 0;
		s->log2tab[i] = i < SMP_TAB ? (uint64_t)(smp_log2(x) + (1LL << 32)) : 1ULL << 32;
		s->exp2tab[i] = smp_exp2(s, -(int64_t)((i << 32) / SMP_TAB));
	}
}

/* smp_log2 from the table, interpolated (within 2^-22 of it): the
 * exact one squares 32 times, and Algorithm L takes two logs a sample. */
static int64_t smp_log2_fast(const struct stint_sample *s, uint64_t x)
{
	int z = __builtin_clzll(x);
	uint64_t y = x << z;
	uint32_t i = (uint32_t)(y >> 53) & (SMP_TAB - 1), w = (uint32_t)(y >> 21);
	uint64_t a = s->log2tab[i], b = s->log2tab[i + 1];
	return (int64_t)(-1 - z) * (1LL << 32) + (int64_t)(a + (((b - a) * w) >> 32));
}

/* smp_exp2 from the table, interpolated. */
static uint64_t smp_exp2_fast(const struct stint_sample *s, int64_t lw)
{
	if (lw >= 0)
		return ~0ULL;
	uint64_t a = (uint64_t)-lw, ai = a >> 32;
	if (ai >= 64)
		return 0;
	uint32_t af = (uint32_t)a, i = af >> 22, w = af & ((1u << 22) - 1);
	uint64_t hi = s->exp2tab[i], lo = s->exp2tab[i + 1];
	uint64_t v = hi - (uint64_t)(((unsigned __int128)(hi - lo) * w) >> 22);
	return v >> ai;
}

/* 2^lw in Q0.64 for lw <= 0 (Q32.32); 0 when it is below 2^-64. */
static uint64_t smp_exp2(const struct stint_sample *s, int64_t lw)
{
	if (lw >= 0)
		return ~0ULL;
	uint64_t a = (uint64_t)-lw, ai = a >> 32;
	uint32_t af = (uint32_t)a;
	if (ai >= 64)
		return 0;
	uint64_t v = ~0ULL;
	for (int i = 0; i < 32; i++)
		if (af & (1u << (31 - i)))
			v = (uint64_t)(((unsigned __int128)v * s->pow2[i]) >> 64);
	return v >> ai;
}

static inline uint64_t mul64(uint64_t a, uint64_t b) { return (uint64_t)(((unsigned __int128)a * b) >> 64); }

/*
 * Algorithm L's skip for W = 2^lw: floor(ln U / ln(1 - W)). For W under
 * 2^-8, ln(1 - W) comes from its series (W + W^2/2 + W^3/3, exact to
 * W^4/4), which keeps its relative precision where a Q32.32 log2 of
 * 1 - W would round to a few units.
 */
static uint64_t smp_skip(struct stint_sample *s, int64_t lw)
{
	uint64_t w = smp_exp2_fast(s, lw);
	if (!w)
		return SMP_SKIP_MAX;
	int64_t lu = smp_log2_fast(s, smp_rand(s)); /* <= 0 */
	uint64_t skip;
	if (w < (1ULL << 56)) {
		uint64_t w2 = mul64(w, w), d = w + w2 / 2 + mul64(w2, w) / 3; /* -ln(1 - W), Q0.64 */
		uint64_t lnu = mul64((uint64_t)-lu, LN2_Q64);                     /* -ln U, Q32.32 */
		skip = mul_div(lnu, 1ULL << 32, d);
	} else {
		int64_t l1 = smp_log2_fast(s, 0 - w); /* log2(1 - W) < 0: W < 1 here */
		skip = l1 ? (uint64_t)(lu / l1) : SMP_SKIP_MAX;
	}
	return skip < SMP_SKIP_MAX ? skip : SMP_SKIP_MAX;
}

/* A half of a stratum, for a reservoir of k: W and the first index to
 * take once the reservoir is full (the first k fill it). */
static void smp_half_init(struct stint_sample *s, struct smp_half *hf, uint32_t k)
{
	__atomic_store_n(&hf->n, 0, __ATOMIC_RELAXED);
	__atomic_store_n(&hf->base, 0, __ATOMIC_RELAXED);
	__atomic_store_n(&hf->taken, 0, __ATOMIC_RELAXED);
	hf->fresh = 0;
	hf->k = k;
	hf->lw = smp_log2_fast(s, smp_rand(s)) / (int64_t)k;
	__atomic_store_n(&hf->next, k + smp_skip(s, hf->lw), __ATOMIC_RELEASE);
}

/*
 * The stratum of key for the threads of stripe st, set up on first
 * sight (and listed for the reader); 0 when the table is full. Each
 * stripe keeps reservoirs of its own, so that threads do not fight over
 * a function's count; the trace's sample-set rows of one stratum and
 * interval add up (each stripe's reservoir is P% of its own events).
 */
static struct smp_fn *smp_find(struct stint_sample *s, uint64_t key, uint32_t st)
{
	struct smp_fn *t = (struct smp_fn *)s->fns;
	uint64_t h = ((key ^ ((uint64_t)st << 58)) * 0x9e3779b97f4a7c15ULL) >> 40;
	for (uint32_t i = 0; i < 64; i++) {
		uint32_t at = (uint32_t)(h + i) & (SMP_FUNCS - 1);
		struct smp_fn *f = &t[at];
		uint64_t k = __atomic_load_n(&f->key, __ATOMIC_ACQUIRE);
		if (k == 0) {
			if (__atomic_compare_exchange_n(&f->key, &k, SMP_CLAIM, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
				f->stripe = st;
				smp_half_init(s, &f->h[0], STINT_SAMPLE_MIN);
				smp_half_init(s, &f->h[1], STINT_SAMPLE_MIN);
				f->h[__atomic_load_n(&s->epoch, __ATOMIC_ACQUIRE) & 1].fresh = 1;
				__atomic_store_n(&f->key, key, __ATOMIC_RELEASE);
				uint32_t n = __atomic_fetch_add(&s->nlive, 1, __ATOMIC_ACQ_REL);
				__atomic_store_n((uint32_t *)s->live + n, at + 1, __ATOMIC_RELEASE);
				return f;
			}
		}
		for (uint32_t spin = 0; k == SMP_CLAIM && spin < 1024; spin++) {
			cpu_pause(); /* being set up (a few hundred cycles) */
			k = __atomic_load_n(&f->key, __ATOMIC_ACQUIRE);
		}
		if (k == key && f->stripe == st)
			return f;
		if (k == SMP_CLAIM)
			return 0;
	}
	return 0;
}

/* The reader's walk over the strata in use: calls fn on each. */
static void smp_each(struct stint_sample *s, void (*fn)(struct stint_sample *, struct smp_fn *, uint64_t, uint32_t), uint32_t a)
{
	struct smp_fn *t = (struct smp_fn *)s->fns;
	const uint32_t *live = (const uint32_t *)s->live;
	uint32_t n = __atomic_load_n(&s->nlive, __ATOMIC_ACQUIRE);
	for (uint32_t i = 0; i < n && i < SMP_FUNCS; i++) {
		uint32_t at = __atomic_load_n(&live[i], __ATOMIC_ACQUIRE);
		if (!at)
			continue; /* being listed */
		uint64_t key = __atomic_load_n(&t[at - 1].key, __ATOMIC_ACQUIRE);
		if (key && key != SMP_CLAIM)
			fn(s, &t[at - 1], key, a);
	}
}

/* Half h is full: the reader is asked to end the interval now rather
 * than at its time, so that what comes next goes to the other half (the
 * sqlite3 workload's rate:100% lost 42% of its samples to full halves
 * with 1 s intervals). Asked once per interval; a half that is no longer
 * current asks nothing. */
static void smp_full(struct stint_sample *s, uint32_t h)
{
	if ((uint32_t)(__atomic_load_n(&s->epoch, __ATOMIC_ACQUIRE) & 1) != h || !__atomic_load_n(&s->reader_up, __ATOMIC_ACQUIRE))
		return;
	/* read first: every sample dropped while the half is full comes here */
	if (!__atomic_load_n(&s->flip_req, __ATOMIC_RELAXED) && !__atomic_exchange_n(&s->flip_req, 1, __ATOMIC_ACQ_REL))
		sys_call3(SYS_futex, (long)&s->flip_req, S_FUTEX_WAKE_PRIVATE, 1);
}

/* The slot for index i of half h of a stratum, its slots taken from the
 * arena by the first event that needs one (whichever its index: a
 * countdown's first call in an interval may come with a count from the
 * one before); 0 when there is none (counted). Two threads that take
 * slots at once keep the first's; the other's are left unused. */
static struct smp_slot *smp_slot_of(struct stint_sample *s, uint32_t h, struct smp_half *hf, uint32_t k, uint64_t i)
{
	uint32_t b = __atomic_load_n(&hf->base, __ATOMIC_ACQUIRE);
	if (!b) {
		uint64_t at = __atomic_fetch_add(&s->used[h], k, __ATOMIC_RELAXED);
		uint32_t nb = at + k <= s->cap / 2 ? (uint32_t)at + 1 : SMP_NOROOM;
		if (__atomic_compare_exchange_n(&hf->base, &b, nb, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
			b = nb;
	}
	if (b == SMP_NOROOM || i >= k) {
		__atomic_fetch_add(&s->dropped, 1, __ATOMIC_RELAXED);
		if (b == SMP_NOROOM)
			smp_full(s, h);
		return 0;
	}
	return (struct smp_slot *)s->arena[h] + (b - 1) + i;
}

/*
 * A stratum in its first interval has no count to size a reservoir
 * from: it takes each event at P% (its first always), into the upper
 * half of the arena, so that a short run or a function new in an
 * interval has its P% and not just the minimum.
 */
static struct smp_slot *smp_fresh(struct stint_sample *s, uint32_t h, struct smp_half *hf, uint64_t i)
{
	if (i != 0 && s->thresh != ~0ULL && smp_rand(s) >= s->thresh)
		return 0;
	return smp_upper(s, h, hf);
}

/* A slot in the upper half of half h's arena, for a sample of hf
 * outside its reservoir (counted in hf->taken); 0 when they are gone.
 * The calling thread's stripe takes its slots from a block of
 * SMP_UP_BLOCK it claimed: one count for every sample, shared by all
 * threads, cost a sampled MariaDB an eighth of its time. Slots of a
 * block left unused stay empty (the reader skips them). */
static struct smp_slot *smp_upper(struct stint_sample *s, uint32_t h, struct smp_half *hf)
{
	uint64_t *up = &s->stripe[smp_stripe_of()].up[h], at;
	for (;;) {
		uint64_t cur = __atomic_load_n(up, __ATOMIC_RELAXED);
		if (cur && (cur - 1) % SMP_UP_BLOCK) {
			if (!__atomic_compare_exchange_n(up, &cur, cur + 1, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED))
				continue;
			at = cur - 1;
			break;
		}
		at = __atomic_fetch_add(&s->upper[h], SMP_UP_BLOCK, __ATOMIC_RELAXED);
		if (at < s->cap / 2)
			__atomic_compare_exchange_n(up, &cur, at + 2, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED);
		break;
	}
	if (at >= s->cap / 2) {
		__atomic_fetch_add(&s->dropped, 1, __ATOMIC_RELAXED);
		smp_full(s, h);
		return 0;
	}
	__atomic_fetch_add(&hf->taken, 1, __ATOMIC_RELAXED);
	return (struct smp_slot *)s->arena[h] + SMP_ARENA / 2 + at;
}

/*
 * Reservoir sampling of one event of stratum f: the event's index i in
 * the interval decides. The first k fill the reservoir; after that only
 * the index next is taken (into a random slot), by the one thread whose
 * fetch-add gave it that index; it computes the next while next reads
 * SMP_BUSY. An event whose index passed next while that was computed
 * takes the place of the one skipped over (a thread descheduled there).
 */
static struct smp_slot *smp_reservoir(struct stint_sample *s, struct smp_fn *f)
{
	uint32_t h = (uint32_t)(__atomic_load_n(&s->epoch, __ATOMIC_ACQUIRE) & 1);
	struct smp_half *hf = &f->h[h];
	uint64_t i = __atomic_fetch_add(&hf->n, 1, __ATOMIC_RELAXED);
	if (UNLIKELY(hf->fresh))
		return smp_fresh(s, h, hf, i);
	uint32_t k = hf->k;
	if (i < k)
		return smp_slot_of(s, h, hf, k, i);
	uint64_t nx = __atomic_load_n(&hf->next, __ATOMIC_ACQUIRE);
	if (LIKELY(i < nx))
		return 0;
	if (!__atomic_compare_exchange_n(&hf->next, &nx, SMP_BUSY, 0, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED))
		return 0;
	struct smp_slot *sl = smp_slot_of(s, h, hf, k, smp_rand(s) % k);
	hf->lw += smp_log2_fast(s, smp_rand(s)) / (int64_t)k;
	__atomic_store_n(&hf->next, i + 1 + smp_skip(s, hf->lw), __ATOMIC_RELEASE);
	return sl;
}

/* rate and every: one stream; a taken event gets the half's next slot. */
static struct smp_slot *smp_stream(struct stint_sample *s)
{
	uint32_t h = (uint32_t)(__atomic_load_n(&s->epoch, __ATOMIC_ACQUIRE) & 1);
	uint64_t i = __atomic_fetch_add(&s->stripe[smp_stripe_of()].seen[h], 1, __ATOMIC_RELAXED);
	if (s->method == STINT_SAMPLE_EVERY ? i % s->param != 0 : s->thresh != ~0ULL && smp_rand(s) >= s->thresh)
		return 0;
	uint64_t at = __atomic_fetch_add(&s->used[h], 1, __ATOMIC_RELAXED);
	if (at >= s->cap) {
		__atomic_fetch_add(&s->dropped, 1, __ATOMIC_RELAXED);
		smp_full(s, h);
		return 0;
	}
	return (struct smp_slot *)s->arena[h] + at;
}

/*
 * A countdown's call (STINT_MF_COUNTDOWN): its call site's trampoline
 * decrements the probe's countdown word cd (cw[1], the probe's cache2,
 * atomically) and skips the runtime while it stays at 0 or above; this
 * call took it below 0. The call that resets the pair cw (cw[0], the
 * probe's cache: the skip cd was last reset to) with one 16-byte
 * compare-and-swap from what it read to (next skip, next skip) counts
 * every call since the last reset (cw[0] minus cd now: this call and
 * any other that went below 0 meanwhile) and takes this one; a call
 * that finds cd at 0 or above again was counted by another's reset.
 * (A skip kept apart from cd went stale when its writer was preempted,
 * and calls were counted twice: 0.17% on a loaded machine.) The next
 * skip: rate's and a fresh stratum's geometric one (probability P),
 * every's N - 1, a reservoir's Algorithm L step (0 while it fills).
 * Strata are sites, or functions for entry probes (STINT_PF_ENTRY); one
 * per probe, for all threads.
 */
static struct smp_slot *smp_countdown(struct stint_sample *s, struct smp_fn *f, uint64_t *cw)
{
	uint32_t h = (uint32_t)(__atomic_load_n(&s->epoch, __ATOMIC_ACQUIRE) & 1);
	struct smp_half *hf = &f->h[h];
	for (;;) {
		uint64_t set = __atomic_load_n(&cw[0], __ATOMIC_ACQUIRE);
		int64_t old = (int64_t)__atomic_load_n(&cw[1], __ATOMIC_ACQUIRE);
		if (old >= 0)
			return 0; /* counted by another call's reset */
		uint64_t n0 = __atomic_load_n(&hf->n, __ATOMIC_RELAXED);
		uint64_t i = n0 + set - (uint64_t)(old + 1); /* this call's index: the last counted */
		int64_t lw = hf->lw;
		uint64_t skip;
		if (s->method == STINT_SAMPLE_EVERY)
			skip = s->param - 1;
		else if (s->method == STINT_SAMPLE_RATE || hf->fresh)
			skip = s->thresh == ~0ULL ? 0 : smp_skip(s, s->lw_rate);
		else if (i + 1 < hf->k)
			skip = 0;
		else if (i + 1 == hf->k)
			skip = __atomic_load_n(&hf->next, __ATOMIC_RELAXED) - hf->k;
		else
			skip = smp_skip(s, lw += smp_log2_fast(s, smp_rand(s)) / (int64_t)hf->k);
		if (!cas16(cw, set, (uint64_t)old, skip, skip))
			continue; /* another call reset it, or one more went below 0 */
		__atomic_fetch_add(&hf->n, set - (uint64_t)old, __ATOMIC_RELAXED);
		if (s->method == STINT_SAMPLE_EVERY || s->method == STINT_SAMPLE_RATE || hf->fresh)
			return smp_upper(s, h, hf);
		if (i < hf->k)
			return smp_slot_of(s, h, hf, hf->k, i);
		hf->lw = lw;
		return smp_slot_of(s, h, hf, hf->k, smp_rand(s) % hf->k);
	}
}

/* At a flip (reader): the calls the countdowns skipped since their last
 * reset belong to the interval on half a; count them there and reset
 * the pairs to (0, 0), so that each interval's first call comes to the
 * runtime. */
static void smp_settle(struct stint_sample *s, struct smp_fn *f, uint64_t key, uint32_t a)
{
	(void)s, (void)key;
	uint64_t *cw = (uint64_t *)f->cd;
	if (!cw)
		return;
	for (;;) {
		uint64_t set = __atomic_load_n(&cw[0], __ATOMIC_ACQUIRE), cd = __atomic_load_n(&cw[1], __ATOMIC_ACQUIRE);
		if (!cas16(cw, set, cd, 0, 0))
			continue;
		if ((int64_t)set > (int64_t)cd)
			__atomic_fetch_add(&f->h[a].n, set - cd, __ATOMIC_RELAXED);
		return;
	}
}

/* A stratum's key: (module + 1) << 48 | address (no module: 0 << 48). */
static inline uint64_t smp_loc_key(uint16_t mod, uint64_t a)
{
	return (uint64_t)(uint16_t)(mod + 1) << 48 | (a & 0xffffffffffffULL);
}

/* The stratum of an event: the callee of a call when sampling per
 * function, else its site; (module + 1) << 48 | address. */
static uint64_t smp_key(const struct stint_sample *s, const struct row *rw)
{
	int callee = s->method == STINT_SAMPLE_RESERVOIR && (rw->kind == STINT_K_CALL || rw->kind == STINT_K_IND_CALL);
	return callee ? smp_loc_key(rw->dst_module, rw->dst) : smp_loc_key(rw->src_module, rw->src);
}

/* Stratum (key, stripe st): the one cache remembers (0: no cache),
 * when it still is that one, else the table's, which cache then
 * remembers; an event whose stratum the full table has no room for is
 * counted unstratified (0). */
static struct smp_fn *smp_find_cached(struct stint_sample *s, uint64_t key, uint32_t st, uint64_t *cache)
{
	struct smp_fn *f = cache ? (struct smp_fn *)__atomic_load_n(cache, __ATOMIC_RELAXED) : 0;
	if (f && __atomic_load_n(&f->key, __ATOMIC_ACQUIRE) == key && f->stripe == st)
		return f;
	f = smp_find(s, key, st);
	if (!f)
		__atomic_fetch_add(&s->unstratified, 1, __ATOMIC_RELAXED);
	else if (cache)
		__atomic_store_n(cache, (uint64_t)f, __ATOMIC_RELAXED);
	return f;
}

/*
 * Where the sampler puts event rw, 0 when it is not taken. cache (0:
 * none) is a word of the event's probe that remembers the stratum it
 * last went to, checked before use: a table lookup per event, a cache
 * miss each in a program with thousands of functions, cost the
 * reservoir more than its sampling (MariaDB: 0.071 of native against
 * rate's 0.181).
 */
static struct smp_slot *smp_pick(struct stint_sample *s, const struct row *rw, uint64_t *cache)
{
	if (s->method == STINT_SAMPLE_RATE || s->method == STINT_SAMPLE_EVERY)
		return smp_stream(s);
	struct smp_fn *f = smp_find_cached(s, smp_key(s, rw), smp_stripe_of(), cache);
	return f ? smp_reservoir(s, f) : 0;
}

/* A countdown's call for stratum f (0: none) with countdown pair cw
 * (16-byte aligned), which f keeps for the reader's settling. */
static struct smp_slot *smp_count_in(struct stint_sample *s, struct smp_fn *f, uint64_t *cw)
{
	if (!f)
		return 0;
	if (!__atomic_load_n(&f->cd, __ATOMIC_RELAXED))
		__atomic_store_n(&f->cd, (uint64_t)cw, __ATOMIC_RELEASE);
	return smp_countdown(s, f, cw);
}

/* The calling thread's stripe (STINT_MF_STRIPES), as the entry
 * probes' trampolines compute it from the thread pointer. */
static inline uint32_t smp_thread_stripe(void)
{
	uint64_t tp;
	__asm__("mov %%fs:0, %0" : "=r"(tp));
	return (uint32_t)((tp >> STINT_STRIPE_SHIFT) % STINT_STRIPES);
}

/*
 * An entry probe of a module whose countdowns are per stripe of threads
 * (STINT_MF_STRIPES): the countdown pair is the probe's slot in the
 * calling thread's stripe, and the stratum the function in that stripe
 * (the sample-set rows of a function's stripes add up offline), which
 * the slot's third word remembers. Nothing is shared with a thread of
 * another stripe.
 */
static struct smp_slot *smp_pick_stripe(struct stint_sample *s, const struct stint_module *m, struct stint_probe *p,
					const struct row *rw)
{
	uint64_t base = __atomic_load_n(&m->cd_base, __ATOMIC_ACQUIRE);
	if (!base)
		return 0;
	uint32_t st = smp_thread_stripe();
	uint64_t idx = (uint64_t)(p - (struct stint_probe *)(m->base + m->probes_vaddr));
	uint64_t *slot = (uint64_t *)(base + ((uint64_t)st * m->nprobes + idx) * STINT_STRIPE_SLOT);
	return smp_count_in(s, smp_find_cached(s, smp_loc_key(rw->dst_module, rw->dst), 1 + st, &slot[2]), slot);
}

/* The countdown's stratum: probe p's site, or for an entry probe
 * (STINT_PF_ENTRY) its function, which its arm_to remembers (an entry
 * probe has no arm). p's cache and cache2 are the countdown pair
 * (16-byte aligned: probes are 64 bytes from a page). */
static struct smp_slot *smp_pick_countdown(struct stint_sample *s, struct stint_probe *p, const struct row *rw)
{
	if (p->flags & STINT_PF_ENTRY)
		return smp_count_in(s, smp_find_cached(s, smp_loc_key(rw->dst_module, rw->dst), 0, &p->arm_to), &p->cache);
	return smp_count_in(s, smp_find_cached(s, smp_loc_key(rw->src_module, rw->src), 0, 0), &p->cache);
}

/* An event of probe p of an every-occurrence module while sampling
 * (record_probe). p's cache words, which every-occurrence probes leave
 * unused, remember its strata: cache for even stripes, cache2 for odd;
 * in a module whose call sites count down, cache2 is the countdown. */
static void sample_event(struct stint_global *g, struct stint_probe *p, const struct row *rw)
{
	if (UNLIKELY(__atomic_load_n(&W()->alive, __ATOMIC_ACQUIRE) != 1))
		fork_child_reopen(g); /* a forked child: its own trace, intervals and reader first */
	const struct stint_module *m = (const struct stint_module *)((const uint8_t *)p - p->module_back);
	int cd = (m->flags & STINT_MF_COUNTDOWN) != 0;
	struct smp_slot *sl;
	if (cd && g->smp.countdown)
		sl = (m->flags & STINT_MF_STRIPES) && (p->flags & STINT_PF_ENTRY) ? smp_pick_stripe(&g->smp, m, p, rw)
										    : smp_pick_countdown(&g->smp, p, rw);
	else
		sl = smp_pick(&g->smp, rw, !cd && (smp_stripe_of() & 1) ? &p->cache2 : &p->cache);
	if (!sl)
		return;
	sl->src = rw->src;
	sl->dst = rw->kind == STINT_K_SYSCALL ? rw->value : rw->dst;
	sl->src_module = rw->src_module;
	sl->dst_module = rw->dst_module;
	sl->tid = current_tid(g);
	__atomic_store_n(&sl->kind, rw->kind, __ATOMIC_RELEASE);
}

/* The next half for the interval after the one on half a: each stratum
 * seen gets a reservoir of P% of its events on a (at least the minimum);
 * rate and every start their count over. */
/* A stratum's next half: P% of its events on half a, at least the minimum. */
static void smp_size(struct stint_sample *s, struct smp_fn *f, uint64_t key, uint32_t a)
{
	(void)key;
	uint64_t n = __atomic_load_n(&f->h[a].n, __ATOMIC_RELAXED);
	uint64_t k = (n * s->param + 999999) / 1000000;
	k = k < STINT_SAMPLE_MIN ? STINT_SAMPLE_MIN : k > s->cap / 128 ? s->cap / 128 : k;
	smp_half_init(s, &f->h[a ^ 1], (uint32_t)k);
}

static void smp_prepare(struct stint_sample *s, uint32_t a)
{
	uint32_t b = a ^ 1;
	__atomic_store_n(&s->used[b], 0, __ATOMIC_RELAXED);
	__atomic_store_n(&s->upper[b], 0, __ATOMIC_RELAXED);
	for (uint32_t i = 0; i < SMP_STRIPES; i++) {
		__atomic_store_n(&s->stripe[i].seen[b], 0, __ATOMIC_RELAXED);
		__atomic_store_n(&s->stripe[i].up[b], 0, __ATOMIC_RELAXED);
	}
	if (s->method == STINT_SAMPLE_RESERVOIR || s->method == STINT_SAMPLE_RES_SITE || s->countdown)
		smp_each(s, smp_size, a);
}

/* One sample of the half being written out, which was an event of kind
 * kind in the interval that ended at end. */
static void smp_emit(const struct smp_slot *sl, uint8_t kind, uint64_t end)
{
	struct row rw;
	rw.kind = (uint8_t)(STINT_SAMPLED_BASE + kind);
	rw.src_module = sl->src_module;
	rw.src = sl->src;
	rw.dst_module = sl->dst_module;
	rw.dst = kind == STINT_K_SYSCALL ? 0 : sl->dst;
	rw.value = kind == STINT_K_SYSCALL ? sl->dst : 0;
	rw.time = end;
	rw.tid = sl->tid;
	emit(&rw);
}

/* Write out n slots from sl, emptying them; returns how many held a sample. */
static uint64_t smp_emit_slots(struct smp_slot *sl, uint64_t n, uint64_t end)
{
	uint64_t w = 0;
	for (uint64_t j = 0; j < n; j++) {
		uint8_t kind = __atomic_load_n(&sl[j].kind, __ATOMIC_ACQUIRE);
		if (!kind)
			continue;
		smp_emit(&sl[j], kind, end);
		__atomic_store_n(&sl[j].kind, 0, __ATOMIC_RELAXED);
		w++;
	}
	return w;
}

static void smp_set_row(uint64_t key, uint64_t n, uint64_t taken, uint64_t end)
{
	struct row rw;
	rw.kind = STINT_K_SAMPLE_SET;
	rw.src_module = (uint16_t)((key >> 48) - 1);
	rw.src = key & 0xffffffffffffULL;
	rw.dst_module = DST_MODULE_NONE;
	rw.dst = n;
	rw.value = taken;
	rw.time = end;
	emit(&rw);
}

/* A stratum's samples on half a and its sample-set row. */
static void smp_drain_one(struct stint_sample *s, struct smp_fn *f, uint64_t key, uint32_t a)
{
	struct smp_half *hf = &f->h[a];
	uint64_t n = __atomic_load_n(&hf->n, __ATOMIC_RELAXED);
	if (!n)
		return;
	struct smp_slot *arena = (struct smp_slot *)s->arena[a];
	uint32_t b = __atomic_load_n(&hf->base, __ATOMIC_ACQUIRE);
	uint64_t w = __atomic_load_n(&hf->taken, __ATOMIC_RELAXED);
	if (b && b != SMP_NOROOM)
		w += smp_emit_slots(arena + (b - 1), n < hf->k ? n : hf->k, s->pend_end);
	smp_set_row(key, n, w, s->pend_end);
}

/* Write out the flipped half (s->pending), which ended at s->pend_end. */
static void smp_drain(struct stint_sample *s)
{
	uint32_t a = s->pending - 1;
	uint64_t end = s->pend_end;
	s->pending = 0; /* s->pend_end stays until the next flip: smp_drain_one's time */
	struct smp_slot *arena = (struct smp_slot *)s->arena[a];
	if ((s->method == STINT_SAMPLE_RATE || s->method == STINT_SAMPLE_EVERY) && !s->countdown) {
		uint64_t used = __atomic_load_n(&s->used[a], __ATOMIC_RELAXED), seen = 0;
		for (uint32_t i = 0; i < SMP_STRIPES; i++)
			seen += __atomic_load_n(&s->stripe[i].seen[a], __ATOMIC_RELAXED);
		uint64_t w = smp_emit_slots(arena, used < s->cap ? used : s->cap, end);
		smp_set_row(smp_loc_key(DST_MODULE_NONE, 0), seen, w, end);
		return;
	}
	uint64_t upper = __atomic_load_n(&s->upper[a], __ATOMIC_RELAXED);
	smp_emit_slots(arena + SMP_ARENA / 2, upper < s->cap / 2 ? upper : s->cap / 2, end); /* fresh strata's */
	smp_each(s, smp_drain_one, a);
}

/* End the current interval at end: the next half is prepared and made
 * current; the old one waits to be written out (s->pending). Under
 * s->lock. */
static void smp_flip(struct stint_sample *s, uint64_t end)
{
	if (s->pending)
		smp_drain(s); /* the last flip's half, not yet written out */
	uint32_t a = (uint32_t)(s->epoch & 1);
	smp_prepare(s, a);
	s->pending = a + 1;
	s->pend_end = end;
	s->mono0 = end;
	__atomic_store_n(&s->epoch, s->epoch + 1, __ATOMIC_RELEASE);
	if (s->countdown)
		smp_each(s, smp_settle, a);
}

/* The reader's wait for the interval's end: its time, or sooner when a
 * half filled (smp_full). Returns when the interval ends. */
static uint64_t smp_wait(struct stint_sample *s)
{
	uint64_t until = s->mono0 + s->interval_ns;
	if (!wait_word(&s->flip_req, until))
		return until;
	uint64_t now = now_ns(S_CLOCK_MONOTONIC);
	return now < until ? now : until;
}

/* The reader thread: flips at each interval's end (or when a half is
 * full), then writes the old half out once the probes still on it are
 * done. */
static void sample_main(void)
{
	struct stint_global *g = G();
	struct stint_sample *s = &g->smp;
	uint64_t left_check = 0;
	for (;;) {
		uint64_t end = smp_wait(s);
		leave_if_program_left(g, &left_check);
		uint64_t c0 = now_ns(S_CLOCK_THREAD_CPUTIME_ID);
		if (lock_bounded(&s->lock)) {
			if (!s->ended)
				smp_flip(s, end);
			__atomic_store_n(&s->flip_req, 0, __ATOMIC_RELEASE);
			unlock(&s->lock);
		}
		uint64_t c1 = now_ns(S_CLOCK_THREAD_CPUTIME_ID);
		sleep_until(now_ns(S_CLOCK_MONOTONIC) + SMP_GRACE_NS);
		uint64_t c2 = now_ns(S_CLOCK_THREAD_CPUTIME_ID);
		if (lock_bounded(&s->lock)) {
			if (!s->ended && s->pending)
				smp_drain(s);
			unlock(&s->lock);
		}
		__atomic_fetch_add(&s->busy_ns, (c1 - c0) + (now_ns(S_CLOCK_THREAD_CPUTIME_ID) - c2), __ATOMIC_RELAXED);
	}
}

#define SMP_STACK ((size_t)64 << 10)

/* Each stripe's draws from seed, a sequence of its own. */
static void smp_seed(struct stint_sample *s, uint64_t seed)
{
	for (uint32_t i = 0; i < SMP_STRIPES; i++)
		s->stripe[i].rng = seed + i * 0x632be59bd9b4e019ULL;
}

/* A sampling method: all (0: no sampler), rate:P%, every:N or
 * reservoir:P% (P in (0, 100], up to 4 decimals). Returns the method and
 * its parameter in *param (ppm, or N); -1 when s is none of them. */
static int sample_parse(const char *v, size_t n, uint64_t *param)
{
	*param = 0;
	if (n == 3 && !s_strncmp(v, "all", 3))
		return 0;
	if (n > 6 && !s_strncmp(v, "every:", 6)) {
		uint64_t x = 0;
		for (size_t i = 6; i < n; i++) {
			if (v[i] < '0' || v[i] > '9' || x > 1000000000000ULL)
				return -1;
			x = x * 10 + (uint64_t)(v[i] - '0');
		}
		*param = x;
		return x && x <= 1000000000000ULL ? STINT_SAMPLE_EVERY : -1;
	}
	int m = n > 5 && !s_strncmp(v, "rate:", 5) ? STINT_SAMPLE_RATE : n > 10 && !s_strncmp(v, "reservoir:", 10) ? STINT_SAMPLE_RESERVOIR : -1;
	size_t at = m == STINT_SAMPLE_RATE ? 5 : 10;
	if (m < 0 || v[n - 1] != '%')
		return -1;
	*param = parse_budget(v + at, n - at, 1000000); /* a share of 1e6: ppm */
	return *param ? m : -1;
}

static int sample_ok(const char *v, size_t n, uint64_t unused)
{
	uint64_t p;
	(void)unused;
	return sample_parse(v, n, &p) >= 0;
}

static int interval_ok(const char *v, size_t n, uint64_t unused)
{
	(void)unused;
	return parse_duration(v, n) >= 1000000ULL; /* 1 ms at least: the reader's grace is 2 */
}

/*
 * Decide the sampling (by the module that creates the state, with
 * STINT_MF_EVERY) and map the sampler's tables, before any probe can
 * reach it. A bad STINT_SAMPLE, STINT_SAMPLE_PER or STINT_INTERVAL is
 * reported and the rewrite's own value holds.
 */
static void sample_setup(struct stint_global *g, char **envp, const char *opts, uint32_t mflags)
{
	struct stint_sample *s = &g->smp;
	size_t n = 0, pn = 0, in = 0;
	const char *v = setting_checked(envp, "STINT_SAMPLE", opts, "sample", &n, sample_ok, 0,
					"bad sampling method (STINT_SAMPLE), want all, rate:P%, every:N or reservoir:P%; using the rewrite's (--sample)");
	uint64_t param = 0;
	int m = v && n ? sample_parse(v, n, &param) : 0;
	if (m <= 0)
		return;
	const char *per = setting(envp, "STINT_SAMPLE_PER", opts, "sample_per", &pn);
	if (m == STINT_SAMPLE_RESERVOIR && per && pn == 4 && !s_strncmp(per, "site", 4))
		m = STINT_SAMPLE_RES_SITE;
	const char *iv = setting_checked(envp, "STINT_INTERVAL", opts, "interval", &in, interval_ok, 0,
					 "bad interval (STINT_INTERVAL), want e.g. 1s (1ms at least); using the rewrite's (--interval)");
	s->interval_ns = iv && in && interval_ok(iv, in, 0) ? parse_duration(iv, in) : 1000000000ULL;
	long f = sys_mmap(0, SMP_FUNCS * (sizeof(struct smp_fn) + sizeof(uint32_t)), S_PROT_READ | S_PROT_WRITE,
			  S_MAP_PRIVATE | S_MAP_ANONYMOUS | S_MAP_NORESERVE, -1, 0);
	long a = sys_mmap(0, 2 * (size_t)SMP_ARENA * sizeof(struct smp_slot), S_PROT_READ | S_PROT_WRITE,
			  S_MAP_PRIVATE | S_MAP_ANONYMOUS | S_MAP_NORESERVE, -1, 0);
	if (sys_failed(f) || sys_failed(a)) {
		say_line("cannot map the sampler's tables; recording every event");
		return;
	}
	s->fns = (uint64_t)f;
	s->live = (uint64_t)f + SMP_FUNCS * sizeof(struct smp_fn);
	s->arena[0] = (uint64_t)a;
	s->arena[1] = (uint64_t)a + (uint64_t)SMP_ARENA * sizeof(struct smp_slot);
	const char *cap = env_get(envp, STINT_TEST_SAMPLE_SLOTS_ENV);
	const char *end;
	uint64_t c = cap ? parse_dec(cap, &end) : 0;
	s->cap = c >= 1024 && c < SMP_ARENA ? c : SMP_ARENA;
	s->param = param;
	s->thresh = param >= 1000000 ? ~0ULL : mul_div(param, 1ULL << 63, 1000000) << 1;
	const char *seed = env_get(envp, STINT_TEST_SAMPLE_SEED_ENV);
	smp_seed(s, seed && seed[0] ? fnv64((const uint8_t *)seed, s_strlen(seed)) : rdtsc());
	smp_pow2_init(s);
	s->lw_rate = s->thresh == ~0ULL ? 0 : smp_log2(s->thresh);
	s->entries = (mflags & STINT_MF_COUNTDOWN) && (mflags & STINT_MF_ENTRIES);
	s->countdown = (mflags & STINT_MF_COUNTDOWN) && (m != STINT_SAMPLE_RESERVOIR || s->entries);
	s->mono0 = now_ns(S_CLOCK_MONOTONIC);
	__atomic_store_n(&s->method, (uint32_t)m, __ATOMIC_RELEASE);
}

/* Start the reader thread (signals blocked in it), once the trace is
 * open: its first row says how the run samples. */
static void sample_spawn(struct stint_global *g)
{
	struct stint_sample *s = &g->smp;
	if (!s->method || s->thread)
		return;
	s->thread = 1;
	s->start_ns = now_ns(S_CLOCK_MONOTONIC);
	emit_record(STINT_K_SAMPLE_RUN, s->mono0, s->method | (s->entries ? STINT_SAMPLE_ENTRIES : s->countdown ? STINT_SAMPLE_SITES : 0), s->param, s->interval_ns);
	long st = sys_mmap(0, SMP_STACK, S_PROT_READ | S_PROT_WRITE, S_MAP_PRIVATE | S_MAP_ANONYMOUS, -1, 0);
	uint64_t all = ~0ULL, old = 0;
	long masked = sys_failed(st) ? -1 : sys_call4(SYS_rt_sigprocmask, S_SIG_SETMASK, (long)&all, (long)&old, 8);
	long r = sys_failed(st) ? st : stint_spawn((uint64_t)st + SMP_STACK, sample_main);
	if (!sys_failed(masked))
		sys_call4(SYS_rt_sigprocmask, S_SIG_SETMASK, (long)&old, 0, 8);
	if (sys_failed(r)) {
		if (!sys_failed(st))
			sys_call2(SYS_munmap, st, (long)SMP_STACK);
		/* the samples still come out, all at the run's end */
		say_line("cannot start the sampler's reader thread; samples are written at exit");
		return;
	}
	__atomic_store_n(&s->reader_up, 1, __ATOMIC_RELEASE);
}

/*
 * The run's end (run_end): the last, partial interval is written out by
 * the exiting thread, then a row with the reader's working time. A
 * process killed by SIGKILL loses its last interval's samples.
 */
static void sample_end(struct stint_global *g)
{
	struct stint_sample *s = &g->smp;
	if (!s->method)
		return;
	/* the reader may be writing a half out: wait for it (up to a
	 * second), or its rows would come after the trace's seal */
	int locked = lock_bounded(&s->lock);
	for (int i = 0; !locked && i < 500; i++) {
		sleep_until(now_ns(S_CLOCK_MONOTONIC) + 2000000ULL);
		locked = lock_bounded(&s->lock);
	}
	if (!s->ended) {
		uint64_t now = now_ns(S_CLOCK_MONOTONIC);
		smp_flip(s, now);
		smp_drain(s);
		s->ended = 1;
		uint64_t lost = __atomic_load_n(&s->dropped, __ATOMIC_RELAXED) + __atomic_load_n(&s->unstratified, __ATOMIC_RELAXED);
		emit_record(STINT_K_SAMPLE_READER, now, __atomic_load_n(&s->busy_ns, __ATOMIC_RELAXED),
			    now > s->start_ns ? now - s->start_ns : 0, lost);
	}
	if (locked)
		unlock(&s->lock);
}

/* A stratum as a forked child starts: nothing counted, taken or set,
 * its countdown (the parent's) at 0. */
static void smp_forget(struct stint_sample *s, struct smp_fn *f, uint64_t key, uint32_t a)
{
	(void)s, (void)key, (void)a;
	for (int h = 0; h < 2; h++) {
		f->h[h].n = f->h[h].taken = 0;
		f->h[h].base = 0;
	}
	if (f->cd)
		((uint64_t *)f->cd)[0] = ((uint64_t *)f->cd)[1] = 0;
}

/* A module whose entry probes count down per stripe of threads
 * (STINT_MF_STRIPES): map their slots, touched only where threads run
 * (until then its trampolines count nothing). */
static void sample_module(struct stint_module *m)
{
	if (!(m->flags & STINT_MF_STRIPES) || __atomic_load_n(&m->cd_base, __ATOMIC_ACQUIRE))
		return;
	size_t n = (size_t)STINT_STRIPES * m->nprobes * STINT_STRIPE_SLOT;
	long a = n ? sys_mmap(0, n, S_PROT_READ | S_PROT_WRITE, S_MAP_PRIVATE | S_MAP_ANONYMOUS | S_MAP_NORESERVE, -1, 0) : -1;
	if (sys_failed(a)) {
		say_line("cannot map the entry probes' countdowns: calls into this module are not sampled");
		return;
	}
	__atomic_store_n(&m->cd_base, (uint64_t)a, __ATOMIC_RELEASE);
}

/* A forked child (fork_child_reopen): its own intervals from now, and
 * its own reader (sample_spawn); the parent's samples stay the parent's. */
static void sample_fork(struct stint_global *g)
{
	struct stint_sample *s = &g->smp;
	if (!s->method)
		return;
	smp_each(s, smp_forget, 0);
	for (uint32_t i = 0; i < SMP_STRIPES; i++)
		s->stripe[i].seen[0] = s->stripe[i].seen[1] = s->stripe[i].up[0] = s->stripe[i].up[1] = 0;
	s->used[0] = s->used[1] = s->upper[0] = s->upper[1] = 0;
	s->lock = 0;
	s->thread = 0;
	s->reader_up = 0;
	s->pending = 0;
	s->ended = 0;
	s->busy_ns = s->dropped = s->unstratified = 0;
	s->flip_req = 0;
	s->mono0 = now_ns(S_CLOCK_MONOTONIC);
}
