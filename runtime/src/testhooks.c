/*
 * testhooks.c - the test hooks (STINT_TEST_* in stint_abi.h): stalls at
 * chosen points, so that tests can see races the runtime handles, and
 * reports of how the log was loaded. A run without them pays one
 * predictable branch on g->test.on where a stall could be; the hooks
 * themselves are out of line.
 */
#include "stint.h"

/* The stall hooks (with a budget: budget_setup). */
static void test_setup(struct stint_global *g, char **envp)
{
	const char *stall = env_get(envp, STINT_TEST_CHARGE_STALL_ENV);
	if (stall && s_strncmp(stall, "note:", 5) == 0) {
		uint64_t ns = parse_duration(stall + 5, s_strlen(stall + 5));
		g->test.charge_stall_ns = ns ? ns | TEST_STALL_AT_NOTE : 0;
	} else if (stall && stall[0])
		g->test.charge_stall_ns = parse_duration(stall, s_strlen(stall));
	const char *rstall = env_get(envp, STINT_TEST_READEE_STALL_ENV);
	if (rstall && rstall[0])
		g->test.readee_stall_ns = parse_duration(rstall, s_strlen(rstall));
	const char *sstall = env_get(envp, STINT_TEST_SWITCH_STALL_ENV);
	if (sstall && sstall[0])
		g->test.switch_stall_ns = parse_duration(sstall, s_strlen(sstall));
	const char *bstall = env_get(envp, STINT_TEST_BATCH_STALL_ENV);
	if (bstall && bstall[0])
		g->test.batch_stall_ns = parse_duration(bstall, s_strlen(bstall));
	g->test.on = (g->test.charge_stall_ns | g->test.readee_stall_ns | g->test.switch_stall_ns |
		      g->test.batch_stall_ns) != 0;
}

/* The log hooks (with a log: log_setup). */
static void test_log_setup(struct stint_global *g, char **envp)
{
	const char *llt = env_get(envp, STINT_TEST_LOG_LOAD_ENV);
	if (llt && (llt[0] == '1' || llt[0] == '2'))
		g->test.log_load = (uint32_t)(llt[0] - '0');
	const char *hold = env_get(envp, STINT_TEST_SAVE_HOLD_ENV);
	if (hold && hold[0] && s_strlen(hold) < sizeof g->test.save_hold)
		s_memcpy(g->test.save_hold, hold, s_strlen(hold) + 1);
}

/* The compact trace's hook (when a module records one: module init). */
static void test_paths_setup(struct stint_global *g, char **envp)
{
	const char *rk = env_get(envp, STINT_TEST_ROLL_KILL_ENV);
	if (rk && rk[0] >= '1' && rk[0] <= '4' && !rk[1])
		g->test.roll_kill = (uint32_t)(rk[0] - '0');
}

/* The module lookup's hook (at the state's creation). */
static void test_procmap_setup(struct stint_global *g, char **envp)
{
	const char *np = env_get(envp, STINT_TEST_NO_PROCMAP_ENV);
	if (np && (np[0] == '1' || np[0] == '2') && !np[1])
		g->test.no_procmap = (uint32_t)(np[0] - '0');
}

/* Spin ns on clock (0: not at all). */
__attribute__((cold, noinline)) static void test_stall(int clock, uint64_t ns)
{
	uint64_t until = now_ns(clock) + ns;
	while (now_ns(clock) < until)
		__asm__ volatile("pause");
}

/*
 * STINT_TEST_CHARGE_STALL: the first charge that spends a period's
 * budget sleeps before it closes the gate (at_note 0); with "note:" the
 * first one to close a gate after period 0 sleeps between closing it and
 * noting how it closed (at_note 1). Once a run.
 */
__attribute__((cold, noinline)) static void test_charge_stall(struct stint_global *g, int at_note)
{
	uint64_t v = __atomic_load_n(&g->test.charge_stall_ns, __ATOMIC_RELAXED);
	if (!v || !(v & TEST_STALL_AT_NOTE) != !at_note)
		return;
	if (at_note && __atomic_load_n(&g->per.period_idx, __ATOMIC_RELAXED) == 0)
		return;
	uint64_t ns = __atomic_exchange_n(&g->test.charge_stall_ns, 0, __ATOMIC_ACQ_REL) & ~TEST_STALL_AT_NOTE;
	if (ns)
		sleep_until(now_ns(S_CLOCK_MONOTONIC) + ns);
}

/* STINT_TEST_BATCH_STALL: a small batch spins, once, on the period
 * thread's own time, which is what the batch is charged (sw_timed). */
__attribute__((cold, noinline)) static void test_batch_stall(struct stint_global *g)
{
	if (!g->test.batch_stall_ns)
		return;
	test_stall(S_CLOCK_THREAD_CPUTIME_ID, g->test.batch_stall_ns);
	g->test.batch_stall_ns = 0;
}

/* STINT_TEST_SAVE_HOLD (stint_abi.h): say a save has begun, then hold it. */
__attribute__((cold, noinline)) static void test_save_hold(struct stint_global *g)
{
	long fd = sys_call4(SYS_openat, S_AT_FDCWD, (long)g->test.save_hold, S_O_RDWR | S_O_CREAT | S_O_CLOEXEC, 0644);
	if (!sys_failed(fd))
		sys_call1(SYS_close, fd);
	sleep_until(now_ns(S_CLOCK_MONOTONIC) + 300000000ULL);
}

/* STINT_TEST_ROLL_KILL: SIGKILL this process at step K of the first
 * chunk copied out (paths_chunk_roll). */
__attribute__((cold, noinline)) static void test_roll_kill(struct stint_global *g, uint32_t step)
{
	if (step == __atomic_load_n(&g->test.roll_kill, __ATOMIC_RELAXED))
		sys_call2(SYS_kill, sys_call0(SYS_getpid), 9 /* SIGKILL */);
}
