/*
 * dlagain: dlopens libsqlite3 (whatever LD_LIBRARY_PATH finds), opens a
 * database in memory, runs a query and dlcloses it, N times, for
 * TestDlopenAgain.
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

typedef int (*open_fn)(const char *, void **);
typedef int (*exec_fn)(void *, const char *, int (*)(void *, int, char **, char **), void *, char **);
typedef int (*close_fn)(void *);

static int row(void *arg, int n, char **v, char **names)
{
	(void)names;
	if (n == 1 && v[0])
		*(long *)arg += atol(v[0]);
	return 0;
}

int main(int argc, char **argv)
{
	int n = argc > 1 ? atoi(argv[1]) : 50;
	long sum = 0;
	for (int i = 0; i < n; i++) {
		void *h = dlopen("libsqlite3.so.0", RTLD_NOW);
		if (!h) {
			printf("dlopen %d: %s\n", i, dlerror());
			return 1;
		}
		open_fn op = (open_fn)dlsym(h, "sqlite3_open");
		exec_fn ex = (exec_fn)dlsym(h, "sqlite3_exec");
		close_fn cl = (close_fn)dlsym(h, "sqlite3_close");
		void *db = 0;
		if (!op || !ex || !cl || op(":memory:", &db) != 0)
			return 2;
		char q[128];
		snprintf(q, sizeof q, "with recursive c(x) as (select 1 union all select x + 1 from c where x < %d) select sum(x) from c", i + 10);
		ex(db, q, row, &sum, 0);
		cl(db);
		dlclose(h);
	}
	printf("%d rounds, sum %ld\n", n, sum);
	return 0;
}
