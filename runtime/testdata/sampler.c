/*
 * sampler.c - drives the runtime's samplers (src/sample.c) on synthetic
 * streams, for sampler_test.go's known-answer tests (TestSampler).
 *
 * Built hosted with the runtime as one unit:
 *   gcc -I../include -I../src sampler.c ../src/entry.S
 * Commands (one per run; each prints numbers, one per line):
 *   res K N R SEED B     R reservoirs of K over a stream of N events: how
 *                        often an event of each of B equal buckets of the
 *                        stream ended up in a reservoir
 *   rate PPM N SEED B    rate sampling: samples per bucket, then the total
 *   every EV N           every-EV sampling: the indices taken
 *   parse INPUT...       each sampling method's number (255: refused)
 *                        and parameter
 *   sizes PPM SEED N...  a reservoir stratum over intervals of N events
 *                        each: per interval, its size (0: its first
 *                        interval, each event at PPM) and the samples it
 *                        held at the interval's end
 */
#include "../src/stint.c"

static uint64_t dec(const char *s)
{
	uint64_t v = 0;
	while (*s >= '0' && *s <= '9')
		v = v * 10 + (uint64_t)(*s++ - '0');
	return v;
}

static void put(uint64_t v)
{
	char buf[32];
	struct sbuf b = {buf, 0, sizeof buf - 1};
	sb_putu(&b, v);
	sb_putc(&b, '\n');
	sys_call3(SYS_write, 1, (long)buf, (long)b.len);
}

static struct stint_sample S;

static void setup(int method, uint64_t param, const char *seed)
{
	S.method = (uint32_t)method;
	S.param = param;
	S.thresh = param >= 1000000 ? ~0ULL : mul_div(param, 1ULL << 63, 1000000) << 1;
	smp_seed(&S, fnv64((const uint8_t *)seed, s_strlen(seed)));
	S.fns = (uint64_t)sys_mmap(0, SMP_FUNCS * (sizeof(struct smp_fn) + sizeof(uint32_t)), S_PROT_READ | S_PROT_WRITE,
				   S_MAP_PRIVATE | S_MAP_ANONYMOUS | S_MAP_NORESERVE, -1, 0);
	S.live = S.fns + SMP_FUNCS * sizeof(struct smp_fn);
	long a = sys_mmap(0, 2 * (size_t)SMP_ARENA * sizeof(struct smp_slot), S_PROT_READ | S_PROT_WRITE,
			  S_MAP_PRIVATE | S_MAP_ANONYMOUS | S_MAP_NORESERVE, -1, 0);
	S.arena[0] = (uint64_t)a;
	S.arena[1] = (uint64_t)a + (uint64_t)SMP_ARENA * sizeof(struct smp_slot);
	S.cap = SMP_ARENA;
	smp_pow2_init(&S);
}

/* An event with index i: its slot, if taken, gets i as its source. */
static void take(struct smp_slot *sl, uint64_t i)
{
	if (!sl)
		return;
	sl->src = i;
	sl->kind = STINT_K_CALL;
}

static int cmd_res(char **av)
{
	uint64_t k = dec(av[0]), n = dec(av[1]), reps = dec(av[2]), nb = dec(av[4]);
	setup(STINT_SAMPLE_RESERVOIR, 200000, av[3]);
	static uint64_t hits[4096];
	struct smp_fn f = {.key = 1};
	for (uint64_t r = 0; r < reps; r++) {
		S.used[0] = 0;
		smp_half_init(&S, &f.h[0], (uint32_t)k);
		for (uint64_t i = 0; i < n; i++)
			take(smp_reservoir(&S, &f), i);
		struct smp_slot *sl = (struct smp_slot *)S.arena[0] + (f.h[0].base - 1);
		for (uint64_t j = 0; j < k; j++)
			hits[sl[j].src * nb / n]++;
	}
	for (uint64_t b = 0; b < nb; b++)
		put(hits[b]);
	return 0;
}

static int cmd_rate(char **av)
{
	uint64_t n = dec(av[1]), nb = dec(av[3]), total = 0;
	setup(STINT_SAMPLE_RATE, dec(av[0]), av[2]);
	static uint64_t hits[4096];
	for (uint64_t i = 0; i < n; i++) {
		struct smp_slot *sl = smp_stream(&S);
		if (sl) {
			hits[i * nb / n]++;
			total++;
			S.used[0] = 0; /* the test needs no slots kept */
		}
	}
	for (uint64_t b = 0; b < nb; b++)
		put(hits[b]);
	put(total);
	return 0;
}

static int cmd_every(char **av)
{
	uint64_t n = dec(av[1]);
	setup(STINT_SAMPLE_EVERY, dec(av[0]), "every");
	for (uint64_t i = 0; i < n; i++)
		if (smp_stream(&S))
			put(i);
	return 0;
}

/* One stratum (a call's callee) through intervals: the reader's
 * prepare and flip as sample.c's smp_flip does them, without the trace. */
static int cmd_sizes(int ac, char **av)
{
	setup(STINT_SAMPLE_RESERVOIR, dec(av[0]), av[1]);
	struct row rw = {.kind = STINT_K_CALL, .src_module = 0, .dst_module = 0, .src = 0x10, .dst = 0x40};
	for (int j = 2; j < ac; j++) {
		uint32_t h = (uint32_t)(S.epoch & 1);
		uint64_t n = dec(av[j]), held = 0;
		for (uint64_t i = 0; i < n; i++)
			take(smp_pick(&S, &rw, 0), i);
		struct smp_fn *f = smp_find(&S, smp_key(&S, &rw), smp_stripe_of());
		struct smp_half *hf = &f->h[h];
		if (hf->fresh) {
			held = hf->taken;
		} else if (hf->base) {
			struct smp_slot *sl = (struct smp_slot *)S.arena[h] + (hf->base - 1);
			for (uint32_t i = 0; i < hf->k; i++)
				held += sl[i].kind != 0;
			s_memset(sl, 0, hf->k * sizeof *sl);
		}
		put(hf->fresh ? 0 : hf->k);
		put(held);
		smp_prepare(&S, h);
		S.epoch++;
	}
	return 0;
}

/* Each input's method (255: refused) and parameter. */
static int cmd_parse(int ac, char **av)
{
	for (int i = 0; i < ac; i++) {
		uint64_t p = 0;
		int m = sample_parse(av[i], s_strlen(av[i]), &p);
		put(m < 0 ? 255 : (uint64_t)m);
		put(m < 0 ? 0 : p);
	}
	return 0;
}

int main(int argc, char **argv)
{
	if (argc < 2)
		return 2;
	const char *c = argv[1];
	if (!s_strncmp(c, "res", 4) && argc == 7)
		return cmd_res(argv + 2);
	if (!s_strncmp(c, "rate", 5) && argc == 6)
		return cmd_rate(argv + 2);
	if (!s_strncmp(c, "every", 6) && argc == 4)
		return cmd_every(argv + 2);
	if (!s_strncmp(c, "parse", 6))
		return cmd_parse(argc - 2, argv + 2);
	if (!s_strncmp(c, "sizes", 6) && argc >= 4)
		return cmd_sizes(argc - 2, argv + 2);
	return 2;
}
