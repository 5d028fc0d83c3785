/*
 * manythreads: starts N threads one after another (each joined before the
 * next), each running a short loop, for TestCompactThreadLimitSaid.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

static volatile unsigned sink;

static void *work(void *a)
{
	(void)a;
	unsigned s = 0;
	for (int i = 0; i < 100; i++)
		if ((i * 7) & 4)
			s += (unsigned)i;
	sink += s;
	return 0;
}

int main(int argc, char **argv)
{
	int n = argc > 1 ? atoi(argv[1]) : 5000;
	for (int i = 0; i < n; i++) {
		pthread_t t;
		if (pthread_create(&t, 0, work, 0) != 0)
			return 1;
		pthread_join(t, 0);
	}
	printf("%d threads\n", n);
	return 0;
}
