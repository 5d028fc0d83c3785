/*
 * grammar.c - prints what the runtime's option parser makes of durations
 * and budgets, for runtime_test.go's TestGrammarVectors, which checks it
 * against testdata/durations.tsv (as rewrite and qos check theirs).
 *
 * Built hosted with the runtime as one unit:
 *   gcc -I../include -I../src grammar.c
 * Arguments are "d:INPUT" (a duration) or "b:PERIOD_NS:INPUT" (a budget);
 * it prints one line per argument: the value in ns, 0 for a refusal.
 */
#include "../src/stint.c"

static uint64_t dec(const char *s)
{
	uint64_t v = 0;
	while (*s >= '0' && *s <= '9')
		v = v * 10 + (uint64_t)(*s++ - '0');
	return v;
}

int main(int argc, char **argv)
{
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		uint64_t v = 0;
		if (a[0] == 'd' && a[1] == ':') {
			v = parse_duration(a + 2, s_strlen(a + 2));
		} else if (a[0] == 'b' && a[1] == ':') {
			const char *in = a + 2;
			while (*in && *in != ':')
				in++;
			uint64_t period = dec(a + 2);
			if (*in == ':')
				in++;
			v = parse_budget(in, s_strlen(in), period);
		}
		char buf[32];
		struct sbuf b = {buf, 0, sizeof buf - 1};
		sb_putu(&b, v);
		sb_putc(&b, '\n');
		sys_call3(SYS_write, 1, (long)buf, (long)b.len);
	}
	return 0;
}
