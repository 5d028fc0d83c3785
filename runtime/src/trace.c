/*
 * trace.c - the trace writer: an Arrow IPC stream in a shared mapping of
 * the trace file (struct stint_trace says how rows are reserved, written
 * and published), reopened by a forked child, sealed at exit.
 */
#include "stint.h"

#define STINT_TRACE_HINT    (STINT_GLOBAL_ADDR + ((uintptr_t)1 << 40)) /* trace file mappings */
#define RES_CLOSED     0x80000000u   /* reservation count of a closed slot */

static inline uint64_t pad8(uint64_t v) { return (v + 7) & ~(uint64_t)7; }

/* An unaligned 8-byte store: one mov (s_memcpy's byte loop became a
 * rep movsb, 25 of them in each row's publish). */
typedef uint64_t u64_unaligned __attribute__((aligned(1), may_alias));
static void put64(uint8_t *p, uint64_t v) { *(u64_unaligned *)p = v; }

/* Whether trace.fd is still the trace file (fd_refers_to). */
static int fd_is_ours(struct stint_global *g) { return fd_refers_to(g->trace.fd, g->trace.fd_dev, g->trace.fd_ino); }

static void set_untraced_once(struct stint_global *g, const char *what, const char *arg, long err)
{
	if (g && __atomic_exchange_n(&g->warned, 1, __ATOMIC_ACQ_REL))
		return;
	say_untraced(what, arg, err);
}

/* Extends the file to cover [0, end); returns 0 or -errno. */
static long ensure_len(struct stint_global *g, uint64_t end)
{
	return file_extend(&g->trace.fd, g->trace.fd_dev, g->trace.fd_ino, g->trace.path, &g->trace.file_len, end, 4 * g->trace.slot_size,
			   g->trace.map, g->trace.reserve, 1);
}

static const char *tool_name(uint32_t t)
{
	/* a switch, not a table: a table of pointers would need relocations */
	switch (t) {
	case STINT_TOOL_BRANCH: return "branch";
	case STINT_TOOL_CALL: return "call";
	case STINT_TOOL_SYSCALL: return "syscall";
	case STINT_TOOL_BLOCK: return "block";
	default: return "";
	}
}

/* Fill the stint.run metadata value in place. */
static void write_run(struct stint_global *g)
{
	if (!g->trace.map)
		return;
	/* Written straight into the file (no 4 KiB buffer on a signal stack). */
	char *v = (char *)g->trace.map + STINT_ARROW_META_RUN_OFF;
	struct sbuf b = {v, 0, STINT_ARROW_META_RUN_CAP};
	sb_puts(&b, "{\"binary\":");
	sb_putjs(&b, g->proc.exe_path);
	sb_puts(&b, ",\"build_id\":\"");
	sb_puthex(&b, g->proc.exe_build_id, g->proc.exe_build_id_len);
	sb_puts(&b, "\",\"tool\":");
	sb_putjs(&b, tool_name(g->tool));
	sb_puts(&b, ",\"options\":");
	sb_putjs(&b, g->options);
	sb_puts(&b, ",\"pid\":");
	sb_putu(&b, (uint64_t)g->pid);
	sb_puts(&b, ",\"ppid\":");
	sb_putu(&b, (uint64_t)sys_call0(SYS_getppid));
	sb_puts(&b, ",\"start_ns\":");
	sb_putu(&b, g->proc.start_ns);
	sb_puts(&b, ",\"mono_start_ns\":");
	sb_putu(&b, g->proc.mono_start_ns);
	if (g->per.budget_on) {
		sb_puts(&b, ",\"budget_ns\":");
		sb_putu(&b, g->per.budget_ns);
		sb_puts(&b, ",\"period_ns\":");
		sb_putu(&b, g->per.period_ns);
	}
	if (g->qos.on) {
		sb_puts(&b, ",\"qos\":");
		sb_putjs(&b, g->qos.path);
	}
	if (g->log.on) {
		sb_puts(&b, ",\"log\":");
		sb_putjs(&b, g->log.path);
		sb_puts(&b, ",\"log_policy\":");
		sb_putjs(&b, log_policy_name(g->log.policy));
	}
	sb_putc(&b, '}');
	if (b.len > b.cap)
		b.len = 0; /* does not fit: leave it blank rather than cut the JSON */
	s_memset(v + b.len, ' ', STINT_ARROW_META_RUN_CAP - b.len);
}

/* Append module i to stint.modules as one JSON line. */
static void write_module(struct stint_global *g, uint32_t i)
{
	if (!g->trace.map)
		return;
	struct gmodule *m = &g->proc.modules[i];
	char tmp[1024];
	struct sbuf b = {tmp, 0, sizeof tmp};
	sb_puts(&b, "{\"id\":");
	sb_putu(&b, i);
	sb_puts(&b, ",\"path\":");
	sb_putjs(&b, m->path);
	sb_puts(&b, ",\"build_id\":\"");
	sb_puthex(&b, m->build_id, m->build_id_len);
	sb_puts(&b, "\",\"base\":");
	sb_putu(&b, m->base);
	sb_puts(&b, ",\"size\":");
	sb_putu(&b, m->size);
	sb_puts(&b, ",\"rewritten\":");
	sb_puts(&b, m->rewritten ? "true" : "false");
	sb_puts(&b, "}\n");
	if (b.len > b.cap)
		return;
	uint64_t at = __atomic_fetch_add(&g->trace.modules_used, b.len, __ATOMIC_RELAXED);
	if (at + b.len > STINT_ARROW_META_MODULES_CAP)
		return;
	s_memcpy((char *)g->trace.map + STINT_ARROW_META_MODULES_OFF + at, tmp, b.len);
}

/*
 * Create and map a new trace file and write the schema. Called with
 * init_lock held, by the first module to initialise and by a forked
 * child. Returns 0 or -errno with *what set.
 */
static long trace_open(struct stint_global *g, const char **what)
{
	/* mkdir -p out_dir */
	char dir[512];
	size_t dl = s_strlen(g->proc.out_dir);
	s_memcpy(dir, g->proc.out_dir, dl + 1);
	for (size_t i = 1; i <= dl; i++) {
		if (dir[i] != '/' && dir[i] != 0)
			continue;
		char c = dir[i];
		dir[i] = 0;
		long r = sys_call2(SYS_mkdir, (long)dir, 0755);
		dir[i] = c;
		if (sys_failed(r) && r != -S_EEXIST && c == 0) {
			*what = "create trace directory";
			return r;
		}
	}
	g->proc.start_ns = now_ns(S_CLOCK_REALTIME);
	g->proc.mono_start_ns = now_ns(S_CLOCK_MONOTONIC);
	long fd = -1;
	for (uint32_t attempt = 0; attempt < 1000; attempt++) {
		struct sbuf b = {g->trace.path, 0, sizeof g->trace.path - 1};
		sb_puts(&b, g->proc.out_dir);
		sb_putc(&b, '/');
		sb_puts(&b, base_name(g->proc.exe_path[0] ? g->proc.exe_path : "stint"));
		sb_putc(&b, '.');
		sb_putu(&b, (uint64_t)g->pid);
		sb_putc(&b, '.');
		sb_putu(&b, g->proc.mono_start_ns);
		if (attempt) {
			sb_putc(&b, '.');
			sb_putu(&b, attempt);
		}
		sb_puts(&b, ".arrow");
		if (b.len > b.cap) {
			*what = "trace file name";
			return -36;
		}
		g->trace.path[b.len] = 0;
		fd = open_high(g->trace.path, S_O_RDWR | S_O_CREAT | S_O_EXCL | S_O_CLOEXEC, 0644);
		if (fd != -S_EEXIST)
			break;
	}
	if (sys_failed(fd)) {
		*what = "open trace file";
		return fd;
	}
	g->trace.fd = (int32_t)fd;
	struct s_stat st;
	long sr = sys_call2(SYS_fstat, fd, (long)&st);
	if (sys_failed(sr)) {
		sys_call1(SYS_close, fd);
		g->trace.fd = -1;
		*what = "stat trace file";
		return sr;
	}
	g->trace.fd_dev = st.dev;
	g->trace.fd_ino = st.ino;
	/* A hint far from where the loader puts modules: placed top-down,
	 * the 64 GiB reservation lands right below the libraries, where a
	 * rewritten library loaded later (or initialised after the
	 * executable's DT_PREINIT_ARRAY hook) must map its stub chunks. The
	 * kernel takes the hint when it is free and searches as usual when
	 * not. */
	g->trace.reserve = file_reserve();
	long m = sys_mmap(STINT_TRACE_HINT, g->trace.reserve, S_PROT_READ | S_PROT_WRITE, S_MAP_SHARED | S_MAP_NORESERVE, (int)fd, 0);
	if (sys_failed(m)) {
		sys_call1(SYS_close, fd);
		*what = "map trace file";
		return m;
	}
	g->trace.map = (uint64_t)m;
	g->trace.file_len = 0;
	uint64_t schema_end = pad8(STINT_ARROW_SCHEMA_LEN);
	long r = ensure_len(g, schema_end + g->trace.slot_size);
	if (r) {
		sys_call2(SYS_munmap, m, (long)g->trace.reserve);
		sys_call1(SYS_close, fd);
		g->trace.map = 0;
		*what = "extend trace file";
		return r;
	}
	s_memcpy((void *)m, stint_arrow_schema, STINT_ARROW_SCHEMA_LEN);
	write_run(g);
	g->trace.modules_used = 0;
	for (uint32_t i = 0; i < g->proc.nmodules && i < MAX_MODULES; i++)
		if (__atomic_load_n(&g->proc.modules[i].ready, __ATOMIC_ACQUIRE))
			write_module(g, i);
	for (int i = 0; i < RING; i++) {
		g->trace.ring[i].tagcount = 0;
		g->trace.ring[i].pos = 0;
	}
	g->trace.next_pos = schema_end;
	/* Slot 0 is never used: the first writer sees a full slot and opens slot 1. */
	__atomic_store_n(&g->trace.cur, (uint64_t)ROWS_PER_BATCH, __ATOMIC_RELEASE);
	return 0;
}

/*
 * Publish slot s at file offset pos: make the batch in the file describe
 * every row of the longest run of complete rows from row 0 (a row is
 * complete once its kind, written last, is nonzero). The first publish
 * writes the metadata and then the continuation marker; later ones grow
 * the lengths in place (buffer lengths, then node lengths, then the row
 * count), so a process that dies, _exits or execs leaves every committed
 * row readable, not just the full batches. One publisher at a time per
 * slot (a try-lock); a row committed while the lock is held is picked up
 * by the holder's re-check, so nobody waits. The holder loops for as long
 * as its re-check finds a new complete row: every round publishes at
 * least one more, so a slot takes at most ROWS_PER_BATCH rounds. (A
 * holder that gave up sooner would leave the last rows of a full slot
 * unpublished: nobody writes to a full slot again, and flush()
 * publishes only the current one.)
 */
static void publish(struct stint_global *g, struct slot_ring *ring, uint32_t s, uint64_t pos)
{
	uint8_t *slot = (uint8_t *)g->trace.map + pos;
	const uint8_t *kinds = slot + STINT_ARROW_BATCH_LEN + g->trace.col_off[STINT_COL_KIND];
	const uint64_t tag = (uint64_t)s << 32;
	for (uint32_t round = 0; round <= ROWS_PER_BATCH; round++) {
		uint64_t lk = tag;
		if (!__atomic_compare_exchange_n(&ring->pub_lock, &lk, tag | 1, 0, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED))
			return; /* someone else is publishing (or the slot moved on) */
		uint64_t pv = __atomic_load_n(&ring->pub, __ATOMIC_ACQUIRE);
		uint32_t n = (uint32_t)pv, m = n;
		if ((pv >> 32) == s) {
			while (m < ROWS_PER_BATCH && __atomic_load_n(&kinds[m], __ATOMIC_ACQUIRE))
				m++;
		}
		if (m > n) {
			if (n == 0) {
				s_memcpy(slot + 4, stint_arrow_batch + 4, STINT_ARROW_BATCH_LEN - 4);
				put64(slot + STINT_ARROW_BATCH_OFF_BODYLEN, g->trace.slot_size - STINT_ARROW_BATCH_LEN);
				for (int c = 0; c < STINT_ARROW_NCOLS; c++) {
					/* no validity buffers: offset 0, length 0 (as in the template) */
					put64(slot + stint_arrow_batch_off_buf_off[2 * c], 0);
					put64(slot + stint_arrow_batch_off_buf_len[2 * c], 0);
					put64(slot + stint_arrow_batch_off_buf_off[2 * c + 1], g->trace.col_off[c]);
				}
			}
			for (int c = 0; c < STINT_ARROW_NCOLS; c++)
				put64(slot + stint_arrow_batch_off_buf_len[2 * c + 1], (uint64_t)m * stint_arrow_col_width[c]);
			for (int c = 0; c < STINT_ARROW_NCOLS; c++)
				put64(slot + stint_arrow_batch_off_node_len[c], m);
			put64(slot + STINT_ARROW_BATCH_OFF_ROWS, m);
			if (n == 0)
				__atomic_store_n((uint32_t *)slot, 0xffffffffu, __ATOMIC_RELEASE);
			uint64_t want = pv;
			__atomic_compare_exchange_n(&ring->pub, &want, tag | m, 0, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED);
		}
		lk = tag | 1;
		__atomic_compare_exchange_n(&ring->pub_lock, &lk, tag, 0, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED);
		if ((pv >> 32) != s || m >= ROWS_PER_BATCH || !__atomic_load_n(&kinds[m], __ATOMIC_ACQUIRE))
			return;
	}
}

/*
 * Open the slot after s. Only the writer whose reservation returned
 * exactly the capacity gets here for a given s. Returns 0 on success, 1
 * if the slot's ring entry still belongs to an unsealed slot (a writer
 * stalled for RING batches: the caller hands the opening back and drops
 * its event), -1 if the file cannot grow (recording stops).
 */
static int open_next(struct stint_global *g, uint32_t s, int take_row)
{
	uint32_t n = s + 1;
	struct slot_ring *ring = &g->trace.ring[n % RING];
	uint64_t old = __atomic_load_n(&ring->tagcount, __ATOMIC_ACQUIRE);
	if ((old >> 32) != 0 && (uint32_t)old < ROWS_PER_BATCH) {
		__atomic_store_n(&g->trace.cur, ((uint64_t)s << 32) | ROWS_PER_BATCH, __ATOMIC_RELEASE);
		return 1;
	}
	uint64_t pos = g->trace.next_pos;
	long r = ensure_len(g, pos + g->trace.slot_size);
	if (r) {
		__atomic_store_n(&g->recording, 0, __ATOMIC_RELEASE);
		set_untraced_once(g, "extend trace file", g->trace.path, -r);
		return -1;
	}
	put64((uint8_t *)g->trace.map + pos, 0);
	ring->pos = pos;
	__atomic_store_n(&ring->pub, (uint64_t)n << 32, __ATOMIC_RELEASE);
	__atomic_store_n(&ring->pub_lock, (uint64_t)n << 32, __ATOMIC_RELEASE);
	__atomic_store_n(&ring->tagcount, (uint64_t)n << 32, __ATOMIC_RELEASE);
	g->trace.next_pos = pos + g->trace.slot_size;
	__atomic_store_n(&g->trace.cur, ((uint64_t)n << 32) | (take_row ? 1u : 0u), __ATOMIC_RELEASE);
	return 0;
}

static void col_put(struct stint_global *g, uint8_t *body, int c, uint32_t i, uint64_t v)
{
	uint8_t *p = body + g->trace.col_off[c] + (uint64_t)i * stint_arrow_col_width[c];
	switch (stint_arrow_col_width[c]) {
	case 1: *p = (uint8_t)v; break;
	case 2: *(uint16_t *)p = (uint16_t)v; break;
	case 4: *(uint32_t *)p = (uint32_t)v; break;
	default: *(uint64_t *)p = v; break;
	}
}

static void emit(const struct row *rw)
{
	struct stint_global *g = G();
	if (UNLIKELY(__atomic_load_n(&W()->alive, __ATOMIC_ACQUIRE) != 1)) {
		fork_child_reopen(g);
		if (__atomic_load_n(&W()->alive, __ATOMIC_ACQUIRE) != 1)
			return; /* being reopened by the code this handler interrupted */
	}
	if (UNLIKELY(!__atomic_load_n(&g->recording, __ATOMIC_ACQUIRE)))
		return;
	int record = rw->kind >= STINT_K_PERIOD && rw->kind < STINT_REFUSED_BASE; /* the runtime's own rows */
	int sampled = rw->kind >= STINT_SAMPLED_BASE; /* written by the sampler's reader for a thread */
	uint32_t tid = sampled ? rw->tid : record ? 0 : current_tid(g);
	uint64_t t = record || sampled ? rw->time : now_ns(S_CLOCK_MONOTONIC);
	for (uint32_t spin = 0;; spin++) {
		if (spin >= SPIN_LIMIT || !__atomic_load_n(&g->recording, __ATOMIC_ACQUIRE)) {
			__atomic_fetch_add(&g->trace.dropped, 1, __ATOMIC_RELAXED);
			return;
		}
		uint64_t c = __atomic_fetch_add(&g->trace.cur, 1, __ATOMIC_ACQ_REL);
		uint32_t s = (uint32_t)(c >> 32), i = (uint32_t)c;
		if (i == ROWS_PER_BATCH) {
			/* No signal handler may run on this thread while it opens the
			 * slot: it would wait for us, and every other thread with it. */
			uint64_t all = ~0ULL, old_mask = 0;
			long masked = sys_call4(SYS_rt_sigprocmask, S_SIG_SETMASK, (long)&all, (long)&old_mask, 8);
			int o = open_next(g, s, 1);
			if (!sys_failed(masked))
				sys_call4(SYS_rt_sigprocmask, S_SIG_SETMASK, (long)&old_mask, 0, 8);
			if (o > 0) {
				relax(spin);
				continue;
			}
			if (o < 0) {
				__atomic_fetch_add(&g->trace.dropped, 1, __ATOMIC_RELAXED);
				return;
			}
			s++;
			i = 0;
		} else if (i > ROWS_PER_BATCH) {
			/* someone is opening the next slot: wait with plain loads */
			for (; spin < SPIN_LIMIT; spin++) {
				uint64_t c2 = __atomic_load_n(&g->trace.cur, __ATOMIC_ACQUIRE);
				if ((uint32_t)(c2 >> 32) != s || (uint32_t)c2 <= ROWS_PER_BATCH)
					break;
				relax(spin);
			}
			continue;
		}
		struct slot_ring *ring = &g->trace.ring[s % RING];
		uint64_t tc = __atomic_load_n(&ring->tagcount, __ATOMIC_ACQUIRE);
		if ((uint32_t)(tc >> 32) != s) {
			/* the slot was closed by a flush that gave up waiting for us */
			__atomic_fetch_add(&g->trace.dropped, 1, __ATOMIC_RELAXED);
			return;
		}
		uint64_t pos = ring->pos;
		uint8_t *body = (uint8_t *)g->trace.map + pos + STINT_ARROW_BATCH_LEN;
		col_put(g, body, STINT_COL_TID, i, tid);
		col_put(g, body, STINT_COL_TIME, i, t);
		col_put(g, body, STINT_COL_SRC_MODULE, i, rw->src_module);
		col_put(g, body, STINT_COL_SRC, i, rw->src);
		col_put(g, body, STINT_COL_DST_MODULE, i, rw->dst_module);
		col_put(g, body, STINT_COL_DST, i, rw->dst);
		col_put(g, body, STINT_COL_VALUE, i, rw->value);
		/* the kind last: a nonzero kind marks the row complete */
		__atomic_store_n(body + g->trace.col_off[STINT_COL_KIND] + i, rw->kind ? rw->kind : 0xff, __ATOMIC_RELEASE);
		/* commit: count the row, unless the ring entry moved on meanwhile */
		while (!__atomic_compare_exchange_n(&ring->tagcount, &tc, tc + 1, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
			if ((uint32_t)(tc >> 32) != s) {
				__atomic_fetch_add(&g->trace.dropped, 1, __ATOMIC_RELAXED);
				return;
			}
		}
		__atomic_fetch_add(&g->trace.events, 1, __ATOMIC_RELAXED);
		publish(g, ring, s, pos);
		return;
	}
}

/*
 * Seal the partial batch and cut the file to its used length, leaving the
 * stream open for events that come later (other modules' finalisers):
 * the next writer opens a new slot where the file now ends.
 */
static void flush(struct stint_global *g)
{
	if (__atomic_load_n(&W()->alive, __ATOMIC_ACQUIRE) != 1 || !g->trace.map)
		return;
	if (!lock_bounded(&g->init_lock))
		return;
	for (uint32_t spin = 0; spin < SPIN_LIMIT; spin++) {
		uint64_t c = __atomic_load_n(&g->trace.cur, __ATOMIC_ACQUIRE);
		uint32_t s = (uint32_t)(c >> 32), k = (uint32_t)c;
		if (k >= ROWS_PER_BATCH) {
			if (k == ROWS_PER_BATCH || k >= RES_CLOSED) {
				/* full (or closed) and nobody opening: close it for good */
				uint64_t closed = ((uint64_t)s << 32) | RES_CLOSED;
				if (!__atomic_compare_exchange_n(&g->trace.cur, &c, closed, 0, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED))
					continue;
				/* wait for the full slot's last commits */
				struct slot_ring *ring = &g->trace.ring[s % RING];
				for (uint32_t w = 0; s && w < SPIN_LIMIT; w++) {
					uint64_t tc = __atomic_load_n(&ring->tagcount, __ATOMIC_ACQUIRE);
					if ((uint32_t)(tc >> 32) != s || (uint32_t)tc >= ROWS_PER_BATCH)
						break;
					relax(w);
				}
				if (s)
					publish(g, ring, s, ring->pos);
				break;
			}
			relax(spin); /* someone is opening the next slot */
			continue;
		}
		uint64_t closed = ((uint64_t)s << 32) | RES_CLOSED;
		if (!__atomic_compare_exchange_n(&g->trace.cur, &c, closed, 0, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED))
			continue;
		struct slot_ring *ring = &g->trace.ring[s % RING];
		if (k == 0) {
			if (s)
				g->trace.next_pos = ring->pos; /* reuse the empty slot */
		} else {
			for (uint32_t w = 0; w < SPIN_LIMIT; w++) {
				uint64_t tc = __atomic_load_n(&ring->tagcount, __ATOMIC_ACQUIRE);
				if ((uint32_t)tc >= k)
					break;
				relax(w);
			}
			publish(g, ring, s, ring->pos);
		}
		/* Done with this slot: a late writer's commit fails, and the ring
		 * entry may be reused. (Tag s+RING never equals s.) */
		if (s)
			__atomic_store_n(&ring->tagcount, ((uint64_t)(s + RING) << 32) | ROWS_PER_BATCH, __ATOMIC_RELEASE);
		break;
	}
	/* End-of-stream marker, then cut the file after it (grown first when
	 * the last batch ends it exactly). */
	uint64_t end = g->trace.next_pos;
	uint8_t *e = (uint8_t *)g->trace.map + end;
	if (end + 8 > g->trace.file_len)
		ensure_len(g, end + 8);
	if (end + 8 <= g->trace.file_len) {
		put64(e, 0xffffffffULL);
		if (fd_ours_again(&g->trace.fd, g->trace.fd_dev, g->trace.fd_ino, g->trace.path))
			sys_call2(SYS_ftruncate, g->trace.fd, (long)(end + 8));
		g->trace.file_len = end + 8;
	}
	/* Let later events reopen: the next reservation is the capacity. */
	uint64_t c = __atomic_load_n(&g->trace.cur, __ATOMIC_ACQUIRE);
	__atomic_store_n(&g->trace.cur, (c & 0xffffffff00000000ULL) | ROWS_PER_BATCH, __ATOMIC_RELEASE);
	unlock(&g->init_lock);
}

/*
 * A forked child: drop the parent's file mapping and start its own file.
 * The wipe-on-fork page reads 0 in a new child; claiming it (0 -> 2) makes
 * this thread the only one to reopen (a signal handler that interrupts
 * the reopen sees 2 and drops its event), 1 means done.
 */
static void fork_child_reopen(struct stint_global *g)
{
	uint32_t z = 0;
	if (!__atomic_compare_exchange_n(&W()->alive, &z, 2, 0, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED))
		return;
	/* Only the forking thread exists here, and it was not inside the
	 * runtime when it forked: locks held then belong to threads that are
	 * gone. */
	__atomic_store_n(&g->init_lock, 0, __ATOMIC_RELEASE);
	__atomic_store_n(&g->scratch_lock, 0, __ATOMIC_RELEASE);
	__atomic_store_n(&g->per.period_lock, 0, __ATOMIC_RELEASE);
	/* the parent's period thread may have been saving the log (the
	 * child's exit would wait for that save, which never ends), writing
	 * its region log or its sync sites */
	__atomic_store_n(&g->log.lock, 0, __ATOMIC_RELEASE);
	__atomic_store_n(&g->reg.lock, 0, __ATOMIC_RELEASE);
	__atomic_store_n(&g->sw.self_lock, 0, __ATOMIC_RELEASE);
	/* a check of the retired slot sites (slots_poll) cut short */
	__atomic_store_n(&g->slots.lock, 0, __ATOMIC_RELEASE);
	__atomic_store_n(&g->per.run_ended, 0, __ATOMIC_RELEASE);
	ctx_reset(g);
	paths_fork(g);
	g->per.period_thread = 0;
	/* the parent's /proc/<pid>/task (task_stat): this child's
	 * thread count is not there */
	int32_t t1 = g->proc.task_fd1;
	if (t1 > 0) {
		struct s_stat st;
		if (task_fd_ours(g, t1, &st))
			sys_call1(SYS_close, t1 - 1);
		__atomic_store_n(&g->proc.task_fd1, 0, __ATOMIC_RELEASE);
	}
	int was = (int)__atomic_load_n(&g->recording, __ATOMIC_ACQUIRE);
	__atomic_store_n(&g->recording, 0, __ATOMIC_RELEASE);
	if (g->trace.map)
		sys_call2(SYS_munmap, (long)g->trace.map, (long)g->trace.reserve);
	if (g->trace.fd >= 0 && fd_is_ours(g))
		sys_call1(SYS_close, g->trace.fd);
	g->trace.map = 0;
	g->trace.fd = -1;
	g->pid = (int32_t)sys_call0(SYS_getpid);
	/* the child's own registration for membarrier(SYNC_CORE), which the
	 * off-switch's readees and sync sites rely on (the off-switch) */
	if (g->proc.sync_core)
		g->proc.sync_core = !sys_failed(sys_call3(SYS_membarrier, MEMBARRIER_REGISTER_SYNC_CORE, 0, 0));
	if (was) {
		const char *what = "";
		long r = trace_open(g, &what);
		if (r)
			say_untraced(what, g->trace.path[0] ? g->trace.path : g->proc.out_dir, -r);
		else
			__atomic_store_n(&g->recording, 1, __ATOMIC_RELEASE);
	}
	__atomic_store_n(&W()->alive, 1, __ATOMIC_RELEASE);
	sample_fork(g);
	if (was) {
		periods_start(g, 1); /* the parent's period thread did not come along */
		sample_spawn(g);
		gates_set(g, STINT_GATE_OPEN);
	}
}

/* Record rows of the runtime itself (tid 0, no module). */
static void emit_record(uint8_t kind, uint64_t time, uint64_t src, uint64_t dst, uint64_t value)
{
	struct row rw;
	rw.kind = kind;
	rw.src_module = DST_MODULE_NONE;
	rw.dst_module = DST_MODULE_NONE;
	rw.src = src;
	rw.dst = dst;
	rw.value = value;
	rw.time = time;
	emit(&rw);
}
