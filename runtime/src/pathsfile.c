/*
 * pathsfile.c - the paths file of a compact complete trace
 * (formats/paths.go): <trace>.paths, an Arrow IPC stream in a shared
 * mapping, one chunk per record batch. Each thread has one chunk in the
 * file, written whole when the thread starts (its header, its fixed
 * fields, zero data: PAD packets), its continuation marker last, so the
 * file is a valid stream at every instant: a thread's packets are in the
 * file as soon as they are appended, and a process that is killed loses
 * only the outcome bits still gathering in its threads' accumulators (at
 * most 63 each). A full chunk is copied out behind the stream's end with
 * pwrite and cleared for the thread's next (paths_chunk_roll): the
 * thread appends to the same pages all its life.
 */
#include "stint.h"

#define STINT_PATHS_HINT (STINT_GLOBAL_ADDR + ((uintptr_t)3 << 40)) /* paths file mapping */

static uint64_t paths_chunk_size(void)
{
	return pad8(STINT_PATHS_BATCH_LEN + STINT_PATHS_BODY_DATA + PATHS_CHUNK_DATA);
}

/* Open and map the paths file beside the trace file and write its
 * schema. Called with g->paths.lock held. Returns 0 or -errno. */
static long paths_file_open(struct stint_global *g)
{
	struct sbuf b = {g->paths.path, 0, sizeof g->paths.path - 1};
	sb_puts(&b, g->trace.path);
	sb_puts(&b, ".paths");
	if (b.len > b.cap)
		return -36; /* ENAMETOOLONG */
	g->paths.path[b.len] = 0;
	long fd = open_high(g->paths.path, S_O_RDWR | S_O_CREAT | S_O_TRUNC | S_O_CLOEXEC, 0644);
	if (sys_failed(fd))
		return fd;
	struct s_stat st;
	if (sys_failed(sys_call2(SYS_fstat, fd, (long)&st))) {
		sys_call1(SYS_close, fd);
		return -9;
	}
	if (!g->trace.reserve)
		g->trace.reserve = file_reserve();
	long m = sys_mmap(STINT_PATHS_HINT, g->trace.reserve, S_PROT_READ | S_PROT_WRITE, S_MAP_SHARED | S_MAP_NORESERVE, (int)fd, 0);
	if (sys_failed(m)) {
		sys_call1(SYS_close, fd);
		return m;
	}
	g->paths.fd = (int32_t)fd;
	g->paths.fd_dev = st.dev;
	g->paths.fd_ino = st.ino;
	g->paths.map = (uint64_t)m;
	g->paths.file_len = 0;
	uint64_t end = pad8(STINT_PATHS_SCHEMA_LEN);
	long r = paths_extend(g, end + 8 * paths_chunk_size());
	if (!r)
		r = paths_alloc(g, 0, end);
	if (r)
		return r;
	s_memcpy((void *)m, stint_paths_schema, STINT_PATHS_SCHEMA_LEN);
	const char *tn = base_name(g->trace.path);
	size_t n = s_strlen(tn);
	if (n > STINT_PATHS_TRACE_CAP)
		n = 0;
	s_memcpy((char *)m + STINT_PATHS_TRACE_OFF, tn, n);
	g->paths.next_pos = end;
	return 0;
}

/* Extend the paths file to cover [0, end); 0 or -errno. */
static long paths_extend(struct stint_global *g, uint64_t end)
{
	return file_extend(&g->paths.fd, g->paths.fd_dev, g->paths.fd_ino, g->paths.path, &g->paths.file_len, end, 16 * paths_chunk_size(),
			   g->paths.map, g->trace.reserve, 0);
}

/*
 * Allocate [lo, hi) of the paths file, hi rounded up to its page (within
 * the file's length), before the mapping writes there: the file stays
 * sparse (a thread's chunk is 256 KiB, most threads write far less), but
 * a write through the mapping to a hole the file system cannot fill (a
 * full disk) is a SIGBUS, which would kill the program, where fallocate
 * says ENOSPC. pwrite needs none. 0, or -errno; a file system without
 * fallocate is written as before (0).
 */
static long paths_alloc(struct stint_global *g, uint64_t lo, uint64_t hi)
{
	hi = (hi + 4095) & ~(uint64_t)4095;
	if (hi > g->paths.file_len)
		hi = g->paths.file_len;
	if (hi <= lo)
		return 0;
	if (!fd_ours_again(&g->paths.fd, g->paths.fd_dev, g->paths.fd_ino, g->paths.path))
		return -9; /* EBADF */
	long r = sys_call4(SYS_fallocate, g->paths.fd, 0, (long)lo, (long)(hi - lo));
	return r == -95 /* EOPNOTSUPP */ || r == -38 /* ENOSYS */ ? 0 : r;
}

/*
 * With g->paths.lock held: claim len bytes at the stream's end, the file
 * grown to hold them and their first alloc bytes allocated (what the
 * caller writes through the mapping). Their offset, or 0 (no file,
 * closed, or it cannot grow: said once, and recording stops; nothing is
 * claimed, so the stream has no hole).
 */
static uint64_t paths_reserve(struct stint_global *g, uint64_t len, uint64_t alloc)
{
	if (!g->paths.map || g->paths.closed)
		return 0;
	long r = paths_extend(g, g->paths.next_pos + len);
	if (!r)
		r = paths_alloc(g, g->paths.next_pos, g->paths.next_pos + alloc);
	if (r) {
		if (!g->paths.failed)
			set_untraced_once(g, r == -28 ? "allocate paths file" : "extend paths file", g->paths.path, -r);
		g->paths.failed = 1;
		return 0;
	}
	uint64_t pos = g->paths.next_pos;
	g->paths.next_pos += len;
	return pos;
}

/* The record batch header of a chunk at c, len bytes in all, with n
 * bytes of data: all but its continuation marker, which goes last. */
static void paths_header(uint8_t *c, uint64_t len, uint64_t n)
{
	s_memcpy(c + 4, stint_paths_batch + 4, STINT_PATHS_BATCH_LEN - 4);
	put64(c + STINT_PATHS_BATCH_OFF_BODYLEN, len - STINT_PATHS_BATCH_LEN);
	put64(c + STINT_PATHS_BATCH_OFF_DATALEN, n);
}

/*
 * Hand out a new chunk for thread tid, number seq: its file offset, or 0
 * when there is no paths file (recording stops for the thread). The
 * chunk is complete in the file before its marker is set.
 */
static uint64_t paths_chunk_new(struct stint_global *g, uint32_t tid, uint32_t seq, uint64_t first_ns)
{
	if (!lock_bounded(&g->paths.lock))
		return 0;
	if (!g->paths.map && !g->paths.failed) {
		long r = paths_file_open(g);
		if (r) {
			g->paths.failed = 1;
			set_untraced_once(g, "open paths file", g->paths.path, -r);
		}
	}
	uint64_t pos = paths_reserve(g, paths_chunk_size(), STINT_PATHS_BATCH_LEN + STINT_PATHS_BODY_DATA);
	unlock(&g->paths.lock);
	if (!pos)
		return 0;
	uint8_t *c = (uint8_t *)g->paths.map + pos;
	paths_header(c, paths_chunk_size(), PATHS_CHUNK_DATA);
	uint8_t *body = c + STINT_PATHS_BATCH_LEN;
	*(uint32_t *)(body + STINT_PATHS_BODY_TID) = tid;
	*(uint32_t *)(body + STINT_PATHS_BODY_SEQ) = seq;
	put64(body + STINT_PATHS_BODY_FIRST, first_ns);
	put64(body + STINT_PATHS_BODY_PENDING, 1); /* no outcome bits yet */
	*(uint32_t *)(body + STINT_PATHS_BODY_OFFS + 4) = (uint32_t)PATHS_CHUNK_DATA;
	__atomic_store_n((uint32_t *)c, 0xffffffffu, __ATOMIC_RELEASE);
	__atomic_fetch_add(&g->paths.chunks, 1, __ATOMIC_RELAXED);
	return pos;
}

/*
 * Claim len bytes behind the stream's end for a copy of a chunk of n
 * bytes of packets: a header whose body is still zero (tid 0: readers
 * skip it until the copy lands). Its offset, or 0 (recording stops).
 */
static uint64_t paths_claim(struct stint_global *g, uint64_t len, uint64_t n)
{
	if (!lock_bounded(&g->paths.lock))
		return 0;
	uint64_t at = paths_reserve(g, len, STINT_PATHS_BATCH_LEN); /* the body comes by pwrite */
	unlock(&g->paths.lock);
	if (!at)
		return 0;
	uint8_t *a = (uint8_t *)g->paths.map + at;
	paths_header(a, len, n);
	__atomic_store_n((uint32_t *)a, 0xffffffffu, __ATOMIC_RELEASE);
	return at;
}

/*
 * Copy the thread's chunk (the one at pos, number seq, n bytes of packets,
 * ended at now) behind the stream's end with two pwrites, and make the
 * chunk at pos number seq+1, empty: a thread appends to one place in the
 * file all its life, so its pages fault once, not once per 4 KiB of trace
 * (about 3.5 us each on this VM: 11 ms of a 13 MB call chain of sqlite3).
 * Into the claimed space (paths_claim) the copy's data lands, then its
 * header and fixed fields: a copy with a tid is whole. Until then the
 * chunk at pos still holds it all; then its length goes to 0 before its
 * data is cleared. A killed process may so leave two copies of one
 * chunk: readers keep the one with more data (formats/paths.go). The
 * pending bits stay where they are, for the next chunk. 0, or -errno
 * (the caller stops recording the thread; the chunk at pos keeps what it
 * has).
 */
static long paths_chunk_roll(struct stint_global *g, uint64_t pos, uint32_t seq, uint64_t n, uint64_t now)
{
	uint8_t *c = (uint8_t *)g->paths.map + pos, *body = c + STINT_PATHS_BATCH_LEN;
	uint64_t blen = pad8(STINT_PATHS_BODY_DATA + n);
	put64(body + STINT_PATHS_BODY_LAST, now);
	uint64_t at = paths_claim(g, STINT_PATHS_BATCH_LEN + blen, n);
	if (!at)
		return -28; /* ENOSPC, or the file's limits: said once */
	if (UNLIKELY(g->test.roll_kill))
		test_roll_kill(g, 1);

	uint8_t h[STINT_PATHS_BATCH_LEN + STINT_PATHS_BODY_DATA];
	s_memcpy(h, c, sizeof h);
	paths_header(h, STINT_PATHS_BATCH_LEN + blen, n);
	put64(h + STINT_PATHS_BATCH_LEN + STINT_PATHS_BODY_PENDING, 1);
	*(uint32_t *)(h + STINT_PATHS_BATCH_LEN + STINT_PATHS_BODY_OFFS + 4) = (uint32_t)n;
	long r = fd_ours_again(&g->paths.fd, g->paths.fd_dev, g->paths.fd_ino, g->paths.path) ? 0 : -9; /* EBADF: closed, gone */
	if (!r)
		r = pwrite_all(g->paths.fd, body + STINT_PATHS_BODY_DATA, n, at + sizeof h);
	if (UNLIKELY(g->test.roll_kill) && !r)
		test_roll_kill(g, 2);
	if (!r)
		r = pwrite_all(g->paths.fd, h, sizeof h, at);
	if (r) {
		set_untraced_once(g, "write paths file", g->paths.path, -r);
		return r;
	}
	__atomic_fetch_add(&g->paths.bytes, n, __ATOMIC_RELAXED);
	if (UNLIKELY(g->test.roll_kill))
		test_roll_kill(g, 3);

	uint32_t *offs = (uint32_t *)(body + STINT_PATHS_BODY_OFFS + 4);
	__atomic_store_n(offs, 0, __ATOMIC_RELEASE); /* this copy is now the lesser */
	__atomic_store_n((uint64_t *)(c + STINT_PATHS_BATCH_OFF_DATALEN), 0, __ATOMIC_RELEASE);
	s_zero(body + STINT_PATHS_BODY_DATA, n / 2);
	if (UNLIKELY(g->test.roll_kill))
		test_roll_kill(g, 4);
	s_zero(body + STINT_PATHS_BODY_DATA + n / 2, n - n / 2);
	*(uint32_t *)(body + STINT_PATHS_BODY_SEQ) = seq + 1;
	put64(body + STINT_PATHS_BODY_FIRST, now);
	put64(body + STINT_PATHS_BODY_LAST, 0);
	__atomic_store_n((uint64_t *)(c + STINT_PATHS_BATCH_OFF_DATALEN), PATHS_CHUNK_DATA, __ATOMIC_RELEASE);
	__atomic_store_n(offs, (uint32_t)PATHS_CHUNK_DATA, __ATOMIC_RELEASE);
	return 0;
}

/*
 * Allocate more of thread t's chunk in the file: twice what it has, up
 * to the whole, and let it append there. 1, or 0 (said once: the disk is
 * full; the caller stops recording the thread, its chunk whole as it is).
 */
static int paths_grow(struct stint_global *g, struct paths_thread *t)
{
	uint64_t data = t->chunk + STINT_PATHS_BATCH_LEN + STINT_PATHS_BODY_DATA;
	uint64_t want = t->alloc * 2 > PATHS_ALLOC_FIRST ? t->alloc * 2 : PATHS_ALLOC_FIRST;
	want = ((data + want + 4095) & ~(uint64_t)4095) - data; /* what paths_alloc allocates */
	if (want > PATHS_CHUNK_DATA)
		want = PATHS_CHUNK_DATA;
	long r = paths_alloc(g, data + t->alloc, data + want);
	if (r) {
		set_untraced_once(g, "allocate paths file", g->paths.path, -r);
		return 0;
	}
	t->alloc = want;
	t->end = (uint8_t *)g->paths.map + data + want;
	return 1;
}

/* The 8-byte body field at off of the chunk at pos. */
static uint64_t *paths_chunk_field(struct stint_global *g, uint64_t pos, uint32_t off)
{
	return (uint64_t *)((uint8_t *)g->paths.map + pos + STINT_PATHS_BATCH_LEN + off);
}

/* Data of the chunk at pos. */
static uint8_t *paths_chunk_data(struct stint_global *g, uint64_t pos)
{
	return (uint8_t *)g->paths.map + pos + STINT_PATHS_BATCH_LEN + STINT_PATHS_BODY_DATA;
}

/*
 * At a clean exit: stamp every thread's chunk with the time and write the
 * end-of-stream marker after the last chunk. The chunks keep their whole
 * capacity and their pending bits: the program's own finalizers (DT_FINI,
 * which runs after this) keep appending, and a reader sees what they
 * add. No chunk is handed out after this.
 */
static void paths_close(struct stint_global *g)
{
	if (!g->paths.on || !g->paths.map || g->paths.closed)
		return;
	uint32_t n = __atomic_load_n(&g->paths.nthreads, __ATOMIC_ACQUIRE);
	struct paths_thread *ts = (struct paths_thread *)g->paths.threads;
	uint64_t now = now_ns(S_CLOCK_MONOTONIC);
	for (uint32_t i = 0; i < n && i < PATHS_THREADS && ts; i++)
		if (ts[i].chunk && ts[i].pid == (uint32_t)g->pid)
			put64((uint8_t *)paths_chunk_field(g, ts[i].chunk, STINT_PATHS_BODY_LAST), now);
	if (!lock_bounded(&g->paths.lock))
		return;
	g->paths.closed = 1;
	uint64_t end = g->paths.next_pos;
	if (!paths_extend(g, end + 8) && !paths_alloc(g, end, end + 8)) {
		put64((uint8_t *)g->paths.map + end, 0xffffffffULL);
		sys_call2(SYS_ftruncate, g->paths.fd, (long)(end + 8));
	} else if (g->paths.fd >= 0) {
		sys_call2(SYS_ftruncate, g->paths.fd, (long)end); /* no marker: readers take the stream as cut there */
	}
	unlock(&g->paths.lock);
}

/* In a forked child: the parent's file is not ours to write (the mapping
 * is shared with it). Drop it; the child's first chunk opens its own
 * beside the child's trace. */
static void paths_fork(struct stint_global *g)
{
	if (!g->paths.on)
		return;
	struct paths_thread *ts = (struct paths_thread *)g->paths.threads;
	uint32_t n = g->paths.nthreads;
	for (uint32_t i = 0; ts && i < n && i < PATHS_THREADS; i++)
		ts[i].chunk = 0; /* the parent's: this process appends to none of them */
	if (g->paths.map)
		sys_call2(SYS_munmap, (long)g->paths.map, (long)g->trace.reserve);
	if (g->paths.fd >= 0)
		sys_call1(SYS_close, g->paths.fd);
	g->paths.map = 0;
	g->paths.fd = -1;
	g->paths.failed = 0;
	g->paths.closed = 0;
	g->paths.lock = 0;
	g->paths.file_len = 0;
	g->paths.next_pos = 0;
}
