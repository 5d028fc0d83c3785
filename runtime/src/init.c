/*
 * init.c - joining the process: creating or joining the process-wide
 * state, initialising a module (chunks, gate page, registration, the
 * log), and the entry points the blob's stubs call.
 */
#include "stint.h"

/*
 * Create or join the process-wide state. Returns it, or 0 (after saying
 * so once) when recording is impossible.
 */
static struct stint_global *global_get(int *created, const char **what, long *err)
{
	*created = 0;
	struct stint_global *g = G();
	size_t total = sizeof(struct stint_global) + HASH_SLOTS * 16;
	total = (total + 4095) & ~(size_t)4095;
	if (total > STINT_GLOBAL_SIZE - HIT_BYTES) {
		*what = "global state size";
		*err = 22;
		return 0;
	}
	long r = sys_mmap(STINT_GLOBAL_ADDR, STINT_GLOBAL_SIZE + STINT_WIPE_SIZE, S_PROT_READ | S_PROT_WRITE,
			  S_MAP_PRIVATE | S_MAP_ANONYMOUS | S_MAP_FIXED_NOREPLACE | S_MAP_NORESERVE, -1, 0);
	if (r == -S_EEXIST) {
		/* already there: join if it is ours */
		if (g->magic != STINT_GLOBAL_MAGIC || g->abi_version != STINT_ABI_VERSION || g->size != total) {
			/* another build's runtime (a module rewritten by another
			 * stint) made it: rewrite every module with one stint */
			*what = g->magic == STINT_GLOBAL_MAGIC ? "process state made by another stint version (rewrite all modules with one)"
							       : "process state at fixed address is not stint's";
			*err = S_EEXIST;
			return 0;
		}
		return g;
	}
	if (sys_failed(r)) {
		*what = "map process state";
		*err = -r;
		return 0;
	}
	if ((uintptr_t)r != STINT_GLOBAL_ADDR) {
		/* an old kernel ignoring MAP_FIXED_NOREPLACE */
		sys_call2(SYS_munmap, r, (long)(STINT_GLOBAL_SIZE + STINT_WIPE_SIZE));
		*what = "map process state";
		*err = S_EEXIST;
		return 0;
	}
	r = sys_call3(SYS_madvise, (long)STINT_WIPE_ADDR, STINT_WIPE_SIZE, S_MADV_WIPEONFORK);
	if (sys_failed(r)) {
		/* leave the mapping (magic unset) so later modules fail the same way */
		*what = "madvise(MADV_WIPEONFORK)";
		*err = -r;
		return 0;
	}
	g->abi_version = STINT_ABI_VERSION;
	g->size = (uint32_t)total;
	g->pid = (int32_t)sys_call0(SYS_getpid);
	g->trace.fd = -1;
	uint64_t off = 0;
	for (int c = 0; c < STINT_ARROW_NCOLS; c++) {
		g->trace.col_off[c] = off;
		off += pad8((uint64_t)ROWS_PER_BATCH * stint_arrow_col_width[c]);
	}
	g->trace.slot_size = STINT_ARROW_BATCH_LEN + off;
	stacks_init(g);
	g->proc.sync_core = !sys_failed(sys_call3(SYS_membarrier, MEMBARRIER_REGISTER_SYNC_CORE, 0, 0));
	W()->alive = 1;
	__atomic_store_n(&g->magic, STINT_GLOBAL_MAGIC, __ATOMIC_RELEASE);
	*created = 1;
	return g;
}

/*
 * Let the hit table (hit.h) answer m's probes where a call that records
 * nothing has no effect: default mode, without a budget (whose periods
 * charge such calls and list their sites for the off-switch) or a region
 * log. The table is asked to be one huge page: its slots are touched
 * all over, and a 4 KiB page costs a fault each on this VM.
 */
static void hit_enable(struct stint_global *g, struct stint_module *m, int patching)
{
	if (!patching || (m->flags & (STINT_MF_EVERY | STINT_MF_CONTEXT | STINT_MF_COUNTS | STINT_MF_PATHS)) ||
	    g->per.budget_on || g->reg.mode)
		return;
	if (!__atomic_exchange_n(&g->hit_advised, 1, __ATOMIC_ACQ_REL))
		sys_call3(SYS_madvise, (long)HIT_ADDR, HIT_BYTES, S_MADV_HUGEPAGE);
	__atomic_store_n(&m->hit, 1, __ATOMIC_RELEASE);
}

/*
 * Whether this run is untraced: STINT_DISABLE=1 (the original code at
 * full speed), or a set-user-ID, set-group-ID or capability-raised run
 * (AT_SECURE), whose environment is the invoking user's: STINT_OUT,
 * STINT_LOG or the working directory would have the raised program
 * create and write files where that user says (ld.so ignores
 * LD_PRELOAD there for the same reason); an executable says so.
 */
static int untraced_run(const struct stint_module *m, char **envp, const uint64_t *auxv)
{
	const char *dis = env_get(envp, "STINT_DISABLE");
	if (dis && dis[0] == '1')
		return 1;
	if (!(auxv ? auxv_find(auxv, S_AT_SECURE) : proc_auxv(S_AT_SECURE)))
		return 0;
	if (m->flags & STINT_MF_EXEC)
		say_line("a set-user-ID or set-group-ID run (AT_SECURE): not traced");
	return 1;
}

/*
 * Initialise one module. envp may be 0 (then /proc/self/environ is not
 * consulted: a module without envp joins or creates the state with
 * defaults); auxv may be 0 (then /proc/self/auxv is read).
 */
STINT_API void stint_module_init(struct stint_module *m, char **envp, const uint64_t *auxv)
{
	if (m->magic != STINT_MODULE_MAGIC || m->abi_version != STINT_ABI_VERSION)
		return;
	if (m->runtime_state & RS_ACTIVE)
		return; /* DT_INIT twice */
	uint64_t base = (uint64_t)m - m->self_vaddr;
	m->base = base;

	/* Code patching first: chunks must exist before any patched site runs. */
	int patching = page_rwx(base + m->text_lo, base + m->text_hi) == 0 &&
		       page_rwx(base + m->tramp_lo, base + m->tramp_hi) == 0;
	/* Untraced (untraced_run): the original code back at once, before
	 * the chunks, the huge copies and the populate, which no trampoline
	 * would use (`select 1` with a rewritten libsqlite3: 16 CPU ms with
	 * them, 7 without). A module whose code cannot be written keeps its
	 * patches and needs its chunks, below. */
	int untraced = untraced_run(m, envp, auxv);
	if (untraced && patching) {
		restore_all(m, base);
		return;
	}
	/* A chunk that cannot be mapped gets its patches restored, never
	 * aborts. A shared object's path, found on the way, is kept for its
	 * registration below. */
	char path[512];
	path[0] = 0;
	/* The huge copies and the populate make the pages the runtime will
	 * write anonymous at once: only where the memory cgroup leaves twice
	 * their size (else each page is copied when first written), and not
	 * in a retiring rewrite, where the sites earlier runs covered are
	 * unpatched and little is written (`select 1` with one: 12.8-15 CPU
	 * ms without the copies, 17-18 with). */
	uint64_t room = mem_room(), start = (uint64_t)m->nprobes * sizeof(struct stint_probe) +
					     (uint64_t)m->npatches * sizeof(struct stint_patch) + (m->tramp_hi - m->tramp_lo) +
					     (m->text_hi - m->text_lo);
	int roomy = (room == ~0ULL || room / 2 >= start) && !(m->flags & STINT_MF_RETIRED);
	uint32_t chunks_lost = chunks_map(m, base, envp, patching, path, sizeof path, roomy);
	/* The gate page: anonymous and wiped on fork (stint_abi.h). If this
	 * fails the file's zero page stays: the gate works, but a child
	 * forked while it is closed records nothing until its next period. */
	uint64_t gate = m->gate_vaddr ? base + m->gate_vaddr : 0;
	if (gate && !sys_failed(sys_mmap(gate, 4096, S_PROT_READ | S_PROT_WRITE, S_MAP_PRIVATE | S_MAP_ANONYMOUS | S_MAP_FIXED, -1, 0)))
		sys_call3(SYS_madvise, (long)gate, 4096, S_MADV_WIPEONFORK);

	if (untraced)
		return; /* its patches stay: the trampolines run, the runtime records nothing */

	int created, spawn = 0;
	const char *what = "";
	long err = 0;
	struct stint_global *g = global_get(&created, &what, &err);
	if (!g) {
		say_untraced(what, 0, err);
		if (patching)
			restore_all(m, base);
		return;
	}
	/* Serialise module registration against a concurrent first record of a forked child. */
	/* A forked child must not register into its parent's file. */
	if (!created && __atomic_load_n(&W()->alive, __ATOMIC_ACQUIRE) != 1)
		fork_child_reopen(g);
	if (!lock_bounded(&g->init_lock))
		return;
	if (!g->proc.vdso_gettime) {
		uint64_t vd = auxv ? auxv_find(auxv, S_AT_SYSINFO_EHDR) : proc_auxv(S_AT_SYSINFO_EHDR);
		if (vd) {
			uint64_t f = vdso_lookup(vd, "__vdso_clock_gettime");
			if (!f)
				f = vdso_lookup(vd, "clock_gettime");
			g->proc.vdso_gettime = f;
		}
	}
	if (g->proc.tid_mode == TID_UNKNOWN) {
		uint64_t hw2 = auxv ? auxv_find(auxv, S_AT_HWCAP2) : proc_auxv(S_AT_HWCAP2);
		g->proc.tid_mode = (hw2 & S_HWCAP2_FSGSBASE) ? TID_PROBE : (m->flags & STINT_MF_STATIC) ? TID_SYSCALL : TID_SEG_PROBE;
		g->paths.gs_mode = (hw2 & S_HWCAP2_FSGSBASE) ? PATHS_GS_INSN : PATHS_GS_PRCTL;
	}
	if ((m->flags & STINT_MF_PATHS) && g->paths.gs_mode != PATHS_GS_INSN) {
		/* the trampolines' inline appends use rdfsbase and rdgsbase */
		unlock(&g->init_lock);
		say_line("this kernel or CPU lacks FSGSBASE (Linux 5.9 and later have it): a compact trace needs it; running untraced");
		if (patching)
			restore_all(m, base);
		return;
	}
	if ((m->flags & (STINT_MF_PATHS | STINT_MF_STATIC)) == STINT_MF_PATHS && !paths_gs_ready(g)) {
		unlock(&g->init_lock);
		say_line("a compact trace's library was loaded once the program had threads: running it untraced");
		if (patching)
			restore_all(m, base);
		return;
	}
	if (m->flags & STINT_MF_PATHS) {
		if (!g->paths.on) {
			g->paths.fd = -1;
			test_paths_setup(g, envp);
		}
		g->paths.on = 1;
		paths_forget_out(g);
	}
	const char *execfn = auxv ? (const char *)auxv_find(auxv, S_AT_EXECFN) : 0;
	if (created) {
		long n = sys_call3(SYS_readlink, (long)"/proc/self/exe", (long)g->proc.exe_path, sizeof g->proc.exe_path - 1);
		if (n > 0)
			g->proc.exe_path[n] = 0;
		else if (execfn) {
			size_t l = s_strlen(execfn);
			if (l >= sizeof g->proc.exe_path)
				l = sizeof g->proc.exe_path - 1;
			s_memcpy(g->proc.exe_path, execfn, l);
			g->proc.exe_path[l] = 0;
		}
		const char *out = env_get(envp, "STINT_OUT");
		if (!out || !out[0])
			out = "./traces";
		/* Absolute, so that a child that changed directory writes beside its parent. */
		size_t l = 0;
		if (out[0] != '/') {
			long n = sys_call2(SYS_getcwd, (long)g->proc.out_dir, sizeof g->proc.out_dir - 2);
			if (n > 1 && !sys_failed(n)) {
				l = s_strlen(g->proc.out_dir);
				if (g->proc.out_dir[l - 1] != '/')
					g->proc.out_dir[l++] = '/';
			}
			if (out[0] == '.' && out[1] == '/')
				out += 2;
		}
		size_t ol = s_strlen(out);
		if (l + ol >= sizeof g->proc.out_dir - 1)
			ol = sizeof g->proc.out_dir - 2 - l;
		s_memcpy(g->proc.out_dir + l, out, ol);
		l += ol;
		while (l > 1 && g->proc.out_dir[l - 1] == '/')
			l--;
		g->proc.out_dir[l] = 0;
		g->tool = m->tool;
		test_procmap_setup(g, envp);
		s_memcpy(g->options, m->options, sizeof m->options < sizeof g->options ? sizeof m->options : sizeof g->options);
		g->options[sizeof g->options - 1] = 0;
		budget_setup(g, envp, g->options);
		g->per.counts_on = (m->flags & STINT_MF_COUNTS) != 0;
		if (!(m->flags & STINT_MF_EVERY))
			log_setup(g, envp, g->options, m);
		else if (!(m->flags & (STINT_MF_PATHS | STINT_MF_CONTEXT)))
			sample_setup(g, envp, g->options, m->flags);
		if (m->flags & STINT_MF_EXEC) {
			g->proc.exe_build_id_len = m->build_id_len > 32 ? 32 : m->build_id_len;
			s_memcpy(g->proc.exe_build_id, m->build_id, g->proc.exe_build_id_len);
			g->proc.exe_registered = 1;
		}
		long r = trace_open(g, &what);
		if (r) {
			g->failed = 1;
			unlock(&g->init_lock);
			set_untraced_once(g, what, g->trace.path[0] && what[0] == 'o' ? g->trace.path : g->proc.out_dir, -r);
			if (patching)
				restore_all(m, base); /* untraced: run the original code at full speed */
			return;
		}
		__atomic_store_n(&g->recording, 1, __ATOMIC_RELEASE);
		periods_start(g, 0);
		spawn = 1; /* the period thread: once this module is set up */
	} else if (g->failed) {
		unlock(&g->init_lock);
		if (patching)
			restore_all(m, base);
		return;
	} else if ((m->flags & STINT_MF_EXEC) && !g->proc.exe_registered) {
		g->proc.exe_build_id_len = m->build_id_len > 32 ? 32 : m->build_id_len;
		s_memcpy(g->proc.exe_build_id, m->build_id, g->proc.exe_build_id_len);
		g->proc.exe_registered = 1;
		write_run(g);
	}
	unlock(&g->init_lock);

	/* Register: the module's path is the file mapped at its base. */
	if ((m->flags & STINT_MF_EXEC) && g->proc.exe_path[0]) {
		s_memcpy(path, g->proc.exe_path, sizeof path);
	} else if (!path[0] && lock_bounded(&g->scratch_lock)) {
		struct find_path_arg a = {base, path, sizeof path};
		maps_scan(find_path_cb, &a);
		unlock(&g->scratch_lock);
	}
	uint64_t size = m->image_end; /* link vaddrs start near 0 for PIE and shared objects */
	uint32_t id = add_module(g, base, size, path, m->build_id, m->build_id_len, 1);
	if (id == DST_MODULE_NONE) {
		if (patching && m->ntraps)
			trap_restore(m, base); /* no handler finds an unlisted module */
		if (spawn) {
			periods_spawn(g);
			sample_spawn(g);
		}
		return;
	}
	m->module_id = id;
	g->proc.modules[id].bidhash = m->build_id_len ? fnv64(m->build_id, m->build_id_len > 32 ? 32 : m->build_id_len) : 0;
	__atomic_store_n(&g->proc.modules[id].smod, (uint64_t)m, __ATOMIC_RELEASE);
	trap_install(g, m, base, patching, envp);
	if (patching && TABLES_WRITTEN(m) && roomy)
		tables_populate(m, base);
	if (g->sw.on && patching && !(m->flags & (STINT_MF_EVERY | STINT_MF_CONTEXT))) {
		__atomic_store_n(&g->proc.modules[id].sw, sw_module_new(m, base), __ATOMIC_RELEASE);
		sw_cold_load(g, m, base);
	}
	__atomic_store_n(&g->proc.modules[id].gate, gate, __ATOMIC_RELEASE);
	if (gate && !(m->flags & STINT_MF_CONTEXT) && GATE_CLOSED(g)) {
		__atomic_store_n((uint64_t *)gate, STINT_GATE_CLOSED, __ATOMIC_RELEASE);
		__atomic_store_n((uint64_t *)(gate + STINT_GATE_WORD1), sw_closed_word(g, &g->proc.modules[id]), __ATOMIC_RELEASE);
	}
	if (g->log.on && !g->reg.mode && patching && !(m->flags & STINT_MF_EVERY))
		log_load_module(g, m, base, chunks_lost);
	hit_enable(g, m, patching);
	sample_module(m);
	__atomic_store_n(&m->runtime_state, RS_ACTIVE | (patching && !(m->flags & STINT_MF_EVERY) ? RS_PATCHING : 0),
			 __ATOMIC_RELEASE);
	if (spawn) {
		periods_spawn(g);
		sample_spawn(g);
	}
}

static struct stint_module *module_of_blob(const uint8_t *blob)
{
	const struct stint_blob_header *h = (const void *)blob;
	return (struct stint_module *)(blob + h->module_rel);
}

STINT_API uint64_t stint_init_exec(const uint8_t *blob, uint64_t *sp)
{
	struct stint_module *m = module_of_blob(blob);
	long argc = (long)sp[0];
	char **argv = (char **)(sp + 1);
	char **envp = argv + argc + 1;
	char **e = envp;
	while (*e)
		e++;
	const uint64_t *auxv = (const uint64_t *)(e + 1);
	stint_module_init(m, envp, auxv);
	uint64_t base = (uint64_t)m - m->self_vaddr;
	return m->orig_entry ? base + m->orig_entry : 0;
}

STINT_API uint64_t stint_init_shared(const uint8_t *blob, long argc, char **argv, char **envp)
{
	(void)argc;
	(void)argv;
	struct stint_module *m = module_of_blob(blob);
	stint_module_init(m, envp, 0);
	uint64_t base = (uint64_t)m - m->self_vaddr;
	return m->orig_entry ? base + m->orig_entry : 0;
}

/*
 * End the run: its last rows and end marker, the paths file's end, the
 * log's last save, the partial batch. At the executable's finalizer, or
 * from a runtime thread once the program left without exit_group
 * (leave_if_program_left). Each step happens once, so two threads may
 * both call.
 */
static void run_left(struct stint_global *g)
{
	run_end(g);
	paths_close(g);
	log_save(g, 1);
	flush(g);
}

/*
 * The probe of .fini's one site (stint_module.fini_probe), recorded as if
 * it fired: the original DT_FINI runs after this finaliser, when the run
 * has ended and the log is saved. The rewriter found .fini straight-line
 * to its ret, so a ret goes to ret, where the finaliser returns; a block
 * probe's outcome is its own address.
 */
static void fini_record(struct stint_module *m, uint64_t ret)
{
	uint32_t k = m->fini_probe;
	if (!k || k > m->nprobes)
		return;
	struct stint_probe *p = (struct stint_probe *)(m->base + m->probes_vaddr) + (k - 1);
	stint_record(p, (p->flags & STINT_PF_DIRECT) ? m->base + p->dst : ret, 0);
}

/*
 * A module's finalizer (DT_FINI), called with its caller's return
 * address (ret). The run ends (its last counts and
 * samples, the paths file's end marker) at the executable's, the first
 * to run at exit, or, when the executable was not rewritten, at the
 * first rewritten library's: finalizers that run later still record
 * into what is open. (A library unloaded mid-run, with no rewritten
 * executable, ends the run too.)
 */
STINT_API uint64_t stint_fini(const uint8_t *blob, uint64_t ret)
{
	struct stint_module *m = module_of_blob(blob);
	if (__atomic_load_n(&m->runtime_state, __ATOMIC_ACQUIRE) & RS_ACTIVE) {
		slots_drop(G(), m->base, m->base + m->image_end); /* its pages go after this */
		fini_record(m, ret);
		if ((m->flags & STINT_MF_EXEC) || !__atomic_load_n(&G()->proc.exe_registered, __ATOMIC_ACQUIRE)) {
			run_left(G());
		} else {
			log_save(G(), 1);
			flush(G());
		}
	}
	uint64_t base = (uint64_t)m - m->self_vaddr;
	return m->orig_fini ? base + m->orig_fini : 0;
}

/* Counters, for tests: events written, events dropped, hash-set overflows. */
STINT_API void stint_counters(uint64_t out[3])
{
	struct stint_global *g = G();
	out[0] = g->trace.events;
	out[1] = g->trace.dropped;
	out[2] = g->hs.full;
}
