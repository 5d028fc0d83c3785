/*
 * touch_pages.so: an LD_PRELOAD constructor that, before the program
 * starts, reads one byte of STINT_TOUCH_PAGES pages drawn at random
 * (so in a small span some repeat) from an anonymous mapping of
 * STINT_TOUCH_SPAN_MB MiB (each first read maps the zero page). It
 * changes nothing the program sees; `bench --only pages` times a program with and
 * without it to measure what scattered first touches cost on this
 * machine, the cost a rewritten binary's stub pages pay (docs/HISTORY.md,
 * "Where a run's time goes"). With STINT_TOUCH_REPORT=FILE it appends the
 * touches' own time in nanoseconds (CLOCK_MONOTONIC) to FILE, one line
 * per run, so that what they cost while they ran and what they cost the
 * program afterwards can be told apart.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <time.h>

static long env_long(const char *name, long def)
{
	const char *v = getenv(name);
	return v && *v ? atol(v) : def;
}

__attribute__((constructor)) static void touch_pages(void)
{
	long n = env_long("STINT_TOUCH_PAGES", 0);
	long span_mb = env_long("STINT_TOUCH_SPAN_MB", 700);
	if (n <= 0 || span_mb <= 0)
		return;
	size_t span = (size_t)span_mb << 20;
	long pages = (long)(span / 4096);
	volatile char *p = mmap(0, span, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (p == MAP_FAILED)
		return;
	uint64_t x = 88172645463325252ULL; /* xorshift64: the same pages every run */
	char sum = 0;
	struct timespec t0, t1;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (long i = 0; i < n; i++) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		sum += p[(long)(x % (uint64_t)pages) * 4096];
	}
	(void)sum;
	clock_gettime(CLOCK_MONOTONIC, &t1);
	const char *report = getenv("STINT_TOUCH_REPORT");
	FILE *f = report && *report ? fopen(report, "a") : NULL;
	if (f) {
		fprintf(f, "%lld\n", (long long)(t1.tv_sec - t0.tv_sec) * 1000000000LL + (t1.tv_nsec - t0.tv_nsec));
		fclose(f);
	}
}
