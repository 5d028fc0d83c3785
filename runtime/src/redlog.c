/*
 * redlog.c - the redundancy log (DIME* section 3), exact policy: every
 * site outcome once, across runs. The file format
 * is specified in formats/redlog/doc.go; package redlog is the reference
 * reader and writer.
 *
 * At start the log is read whole (a private read-only mapping) and every
 * entry goes into one hash set keyed by (source module build-id, src,
 * kind, destination module build-id, dst), hashed so keys do not depend
 * on load addresses. When a module registers, each of its direct probes
 * whose outcome is in the set is retired as if it had just recorded (arm
 * retargeted, site restored once all its outcomes are in): code covered
 * by earlier runs costs nothing from the first instruction. Indirect,
 * ret and syscall outcomes are checked on their first occurrence in this
 * run (log_seen), after the in-run hash set has said it is new.
 *
 * New outcomes are noted in a pending array and appended to the file as
 * blocks, under flock, every second by the period thread and at exit
 * (DT_FINI). Appending never rewrites what is there, so concurrent runs
 * keep each other's entries; SIGKILL loses at most the unsaved second.
 * A damaged log is reported on stderr with its offset and is never
 * truncated or rewritten; a file that is not a stint log (or has another
 * policy) is reported and left alone, and the run goes on without a log.
 *
 * The region policies (hash, bst, merger) are the paper's, kept for the
 * paper's comparison: regions.c.
 */
#include "stint.h"

#define SYS_flock 73

#define LOG_MAGIC_HDR "STINTLOG"
#define LOG_VERSION 1
#define LOG_BLOCK_MAGIC 0x4b4c4253u
#define LOG_HDR 32
#define LOG_BLK_HDR 48
#define LOG_ENTRY 32
#define LOG_PENDING_MAX ((uint64_t)1 << 20)
#define REG_MAX ((uint64_t)1 << 20) /* regions of a region-policy log (regions.c) */
#define SYS_pread64 17
#define S_LOCK_SH 1
#define S_LOCK_EX 2
#define S_LOCK_NB 4
#define S_LOCK_UN 8
#define LOG_LOAD_WAIT_NS 100000000ULL /* how long a start waits for a save elsewhere */

#define POLICY_EXACT 1
#define POLICY_HASH 2
#define POLICY_BST 3
#define POLICY_MERGER 4


struct log_pend {
	uint64_t src, dst;
	uint16_t src_mod, dst_mod;
	uint8_t kind;
	uint8_t pad[3];
};

static const char *log_policy_name(uint32_t p)
{
	switch (p) {
	case POLICY_EXACT: return "exact";
	case POLICY_HASH: return "hash";
	case POLICY_BST: return "bst";
	case POLICY_MERGER: return "merger";
	}
	return "";
}

static uint64_t fnv64(const uint8_t *b, size_t n)
{
	uint64_t h = 0xcbf29ce484222325ULL;
	for (size_t i = 0; i < n; i++) {
		h ^= b[i];
		h *= 0x100000001b3ULL;
	}
	return h;
}

/*
 * CRC-32 (IEEE, reflected: Go's hash/crc32.IEEE), eight bytes a step
 * ("slicing by 8"). The log is checked whole at start and again at each
 * save (390 KB after one sqlite3 run); a byte a step, with its table
 * rebuilt for every block, was 5% of a logged start-up. The tables are
 * built once per process; two threads building them at once write the
 * same values.
 */
static const uint32_t (*crc_tables(struct stint_global *g))[256]
{
	if (!__atomic_load_n(&g->log.crc_ready, __ATOMIC_ACQUIRE)) {
		for (uint32_t i = 0; i < 256; i++) {
			uint32_t c = i;
			for (int k = 0; k < 8; k++)
				c = (c & 1) ? 0xedb88320u ^ (c >> 1) : c >> 1;
			g->log.crc_tab[0][i] = c;
		}
		for (uint32_t i = 0; i < 256; i++)
			for (int k = 1; k < 8; k++)
				g->log.crc_tab[k][i] = (g->log.crc_tab[k - 1][i] >> 8) ^ g->log.crc_tab[0][g->log.crc_tab[k - 1][i] & 0xff];
		__atomic_store_n(&g->log.crc_ready, 1, __ATOMIC_RELEASE);
	}
	return (const uint32_t(*)[256])g->log.crc_tab;
}

static uint32_t crc32_ieee(struct stint_global *g, const uint8_t *b, size_t n)
{
	const uint32_t(*t)[256] = crc_tables(g);
	uint32_t c = 0xffffffffu;
	for (; n >= 8; b += 8, n -= 8) {
		uint32_t lo, hi;
		__builtin_memcpy(&lo, b, 4); /* one load each (s_memcpy is a byte loop) */
		__builtin_memcpy(&hi, b + 4, 4);
		lo ^= c;
		c = t[7][lo & 0xff] ^ t[6][(lo >> 8) & 0xff] ^ t[5][(lo >> 16) & 0xff] ^ t[4][lo >> 24] ^
		    t[3][hi & 0xff] ^ t[2][(hi >> 8) & 0xff] ^ t[1][(hi >> 16) & 0xff] ^ t[0][hi >> 24];
	}
	for (; n; b++, n--)
		c = t[0][(c ^ *b) & 0xff] ^ (c >> 8);
	return c ^ 0xffffffffu;
}

static inline void logkey(uint64_t srcbid, uint64_t src, uint32_t kind, uint64_t dstbid, uint64_t dst, uint64_t *k0, uint64_t *k1)
{
	*k0 = mix(srcbid ^ ((uint64_t)kind * 0x9e3779b97f4a7c15ULL), src) | 1;
	*k1 = mix(dstbid, dst);
}

/*
 * The set has a filter beside it: a bit per (slots * 8), set from each
 * key's k0. log_load_module asks about every direct probe of a module
 * (82k on libsqlite3, one in six of them logged after a run), and each
 * question that goes to the set is a cache and TLB miss in a table of
 * half a MB or more: 14% of a logged start-up. The filter (a sixteenth
 * of the set) answers most of the noes from the cache; it says yes
 * falsely at most one time in sixteen (the set is at most half full).
 */
static inline uint64_t logset_bit(const struct stint_global *g, uint64_t k0)
{
	return (k0 >> 20) & (g->log.set_slots * 8 - 1);
}

static int logset_has(const struct stint_global *g, uint64_t k0, uint64_t k1)
{
	const uint64_t *t = (const uint64_t *)g->log.set;
	if (!t)
		return 0;
	uint64_t bit = logset_bit(g, k0);
	if (!((((const uint8_t *)g->log.set_filter)[bit >> 3] >> (bit & 7)) & 1))
		return 0;
	uint64_t mask = g->log.set_slots - 1, h = mix(k0, k1);
	for (uint64_t i = 0; i <= mask; i++) {
		const uint64_t *e = &t[2 * ((h + i) & mask)];
		if (e[0] == 0)
			return 0;
		if (e[0] == k0 && e[1] == k1)
			return 1;
	}
	return 0;
}

/* Put (k0, k1) in the set; 1 if it was not there. */
static int logset_put(struct stint_global *g, uint64_t k0, uint64_t k1)
{
	uint64_t *t = (uint64_t *)g->log.set;
	uint64_t mask = g->log.set_slots - 1, h = mix(k0, k1);
	for (uint64_t i = 0; i <= mask; i++) {
		uint64_t *e = &t[2 * ((h + i) & mask)];
		if (e[0] == 0) {
			e[0] = k0;
			e[1] = k1;
			g->log.set_n++;
			uint64_t bit = logset_bit(g, k0);
			((uint8_t *)g->log.set_filter)[bit >> 3] |= (uint8_t)(1u << (bit & 7));
			return 1;
		}
		if (e[0] == k0 && e[1] == k1)
			return 0;
	}
	return 0;
}

/*
 * The digest of a source module's entries: how many distinct ones the log
 * read at start has, and the sum of mix(k0, k1) over them. A rewrite with
 * --skip-covered stores the same two numbers of the log it read, and the
 * list of probes whose outcome that log has (STINT_MF_LOGGED): when they
 * match, log_load_module retires the listed probes and looks no further.
 * log_digest returns the module's slot, added if new, or 0 when the table
 * is full; logdig_find the slot, or 0 if there is none.
 */
static uint64_t *logdig_find(struct stint_global *g, uint64_t bid)
{
	for (uint32_t i = 0; i < g->log.dig_n; i++)
		if (g->log.dig[i][0] == bid)
			return g->log.dig[i];
	return 0;
}

static uint64_t *log_digest(struct stint_global *g, uint64_t bid)
{
	uint64_t *found = logdig_find(g, bid);
	if (found)
		return found;
	if (g->log.dig_n == LOGDIG_MAX) {
		g->log.dig_full = 1;
		return 0;
	}
	uint64_t *d = g->log.dig[g->log.dig_n++];
	d[0] = bid;
	d[1] = d[2] = d[3] = 0;
	return d;
}

static void say_log(struct stint_global *g, const char *what, uint64_t off)
{
	char line[900];
	struct sbuf b = {line, 0, sizeof line - 1};
	sb_puts(&b, "stint: redundancy log ");
	sb_puts(&b, g->log.path);
	sb_puts(&b, ": ");
	sb_puts(&b, what);
	if (off != ~0ULL) {
		sb_puts(&b, " at offset ");
		sb_putu(&b, off);
	}
	size_t n = b.len < b.cap ? b.len : b.cap;
	line[n++] = '\n';
	say_write(line, n);
}

/* Length of the good block at off of file p (size n), or 0: magic,
 * bounds, CRC, build-id length 1..32 and its zero padding all check. */
static uint64_t log_good_block(struct stint_global *g, const uint8_t *p, uint64_t n, uint64_t off)
{
	if (off + LOG_BLK_HDR > n || (off & 7))
		return 0;
	const uint32_t *h = (const uint32_t *)(p + off);
	if (h[0] != LOG_BLOCK_MAGIC || h[3] == 0 || h[3] > 32)
		return 0;
	uint64_t len = LOG_BLK_HDR + (uint64_t)h[1] * LOG_ENTRY;
	if (len > n - off)
		return 0;
	for (uint32_t i = h[3]; i < 32; i++)
		if (p[off + 16 + i])
			return 0;
	if (crc32_ieee(g, p + off + 12, len - 12) != h[2])
		return 0;
	return len;
}

/* Are the n bytes at b what a writer killed while appending leaves: all
 * zero, or the beginning of a block shorter than the block? */
static int log_torn_prefix(const uint8_t *b, uint64_t n)
{
	int zero = 1;
	for (uint64_t i = 0; i < n && zero; i++)
		zero = b[i] == 0;
	if (zero)
		return 1;
	const uint8_t magic[4] = {0x53, 0x42, 0x4c, 0x4b};
	for (uint64_t i = 0; i < n && i < 4; i++)
		if (b[i] != magic[i])
			return 0;
	if (n < LOG_BLK_HDR)
		return 1;
	uint32_t count = *(const uint32_t *)(b + 4);
	return n < LOG_BLK_HDR + (uint64_t)count * LOG_ENTRY;
}

/* Note that the file's blocks up to end are good, the last at last,
 * starting with the 16 bytes head. */
static void log_know(struct stint_global *g, uint64_t end, uint64_t last, const uint8_t *head)
{
	s_memcpy(g->log.known_head, head, 16);
	g->log.known_last = last;
	g->log.known_end = end;
}

/* Where a scan of the log p (size bytes) may start: after the prefix
 * known good (log_know), if the file still holds it (blocks are only
 * appended, and its last block's CRC is among the bytes compared), else
 * after the header. */
static uint64_t log_known(const struct stint_global *g, const uint8_t *p, uint64_t size)
{
	uint64_t end = g->log.known_end, last = g->log.known_last;
	if (!end || end > size || last < LOG_HDR || last + LOG_BLK_HDR > end)
		return LOG_HDR;
	const uint64_t *h = (const uint64_t *)(p + last);
	return h[0] == g->log.known_head[0] && h[1] == g->log.known_head[1] ? end : LOG_HDR;
}

/*
 * Walk the blocks of a log from offset from (LOG_HDR, or the end of a
 * prefix known good: log_known) (formats/redlog/doc.go: "Concurrency and
 * damage"): each good block goes to each (if given); damage and a torn
 * append are reported when report is set. Returns where the next block
 * goes; *cut is set when the file must be truncated there (a torn
 * append is overwritten).
 */
static uint64_t log_scan(struct stint_global *g, const uint8_t *p, uint64_t from, uint64_t size, int report,
			 void (*each)(struct stint_global *, const uint8_t *), int *cut)
{
	uint64_t off = from;
	*cut = 0;
	while (off < size) {
		uint64_t bl = log_good_block(g, p, size, off);
		if (bl) {
			if (each)
				each(g, p + off);
			off += bl;
			continue;
		}
		uint64_t next = (off + 8) & ~(uint64_t)7;
		while (next < size && !log_good_block(g, p, size, next))
			next += 8;
		if (next < size) {
			if (report)
				say_log(g, "damaged block (kept in the file, skipped)", off);
			off = next;
			continue;
		}
		/* no good block follows */
		if (log_torn_prefix(p + off, size - off)) {
			if (report == 1)
				say_log(g, "torn append at the end (a writer was killed); ignored", off);
			*cut = 1;
			return off;
		}
		if (report)
			say_log(g, "damaged block (kept in the file, skipped)", off);
		for (uint64_t t = (off + 8) & ~(uint64_t)7; t < size; t += 8)
			if (log_torn_prefix(p + t, size - t)) {
				*cut = 1;
				return t;
			}
		return (size + 7) & ~(uint64_t)7;
	}
	return off;
}

/* Write the header of the block at h, whose count entries follow it, for
 * module gm; returns the block's length. */
static uint64_t log_seal_block(struct stint_global *g, uint8_t *h, uint32_t count, const struct gmodule *gm)
{
	uint32_t hdr[4] = {LOG_BLOCK_MAGIC, count, 0, gm->build_id_len};
	s_memset(h + 16, 0, 32);
	s_memcpy(h + 16, gm->build_id, gm->build_id_len);
	s_memcpy(h, hdr, 16);
	uint64_t bl = LOG_BLK_HDR + (uint64_t)count * LOG_ENTRY;
	hdr[2] = crc32_ieee(g, h + 12, bl - 12);
	s_memcpy(h + 8, &hdr[2], 4);
	return bl;
}

static void log_load_block(struct stint_global *g, const uint8_t *b)
{
	const uint32_t *h = (const uint32_t *)b;
	uint64_t srcbid = fnv64(b + 16, h[3]);
	uint64_t *dig = log_digest(g, srcbid);
	const uint8_t *e = b + LOG_BLK_HDR;
	for (uint32_t i = 0; i < h[1]; i++, e += LOG_ENTRY) {
		uint64_t k0, k1;
		uint32_t kind = *(const uint32_t *)(e + 24);
		logkey(srcbid, *(const uint64_t *)e, kind, *(const uint64_t *)(e + 16), *(const uint64_t *)(e + 8), &k0, &k1);
		if (logset_put(g, k0, k1) && dig) {
			dig[1]++;
			dig[2] += mix(k0, k1);
			dig[3] += kind != STINT_K_RET && kind != STINT_K_IND_JMP && kind != STINT_K_IND_CALL && kind != STINT_K_SYSCALL;
		}
	}
}

/*
 * Read the log named by the options or STINT_LOG (called once, by the
 * module that creates the state, m, before any probe runs). When m's
 * rewrite read this file (STINT_MF_LOGGED with log_end: its length and
 * last block, still there), only what was appended since is read: what
 * m's probes would look up of the rest is in m's seen table, and a
 * module that has no such table reads the rest when it loads
 * (log_complete).
 */
static void log_setup(struct stint_global *g, char **envp, const char *opts, const struct stint_module *m)
{
	size_t ln = 0, pn = 0;
	const char *l = setting(envp, "STINT_LOG", opts, "log", &ln);
	const char *pol = setting(envp, "STINT_LOG_POLICY", opts, "policy", &pn);
	if (!l || !ln)
		return;
	if (ln >= sizeof g->log.path) {
		say_line("redundancy log path too long; running without a log");
		return;
	}
	s_memcpy(g->log.path, l, ln);
	g->log.path[ln] = 0;
	test_log_setup(g, envp);
	uint32_t policy = POLICY_EXACT;
	if (pol && pn) {
		policy = 0;
		for (uint32_t i = POLICY_EXACT; i <= POLICY_MERGER; i++)
			if (s_strlen(log_policy_name(i)) == pn && s_strncmp(log_policy_name(i), pol, pn) == 0)
				policy = i;
		if (!policy) {
			say_log(g, "unknown policy (want exact, hash, bst or merger); running without a log", ~0ULL);
			return;
		}
	}
	g->log.policy = policy;
	long pend = sys_mmap(0, LOG_PENDING_MAX * sizeof(struct log_pend), S_PROT_READ | S_PROT_WRITE,
			     S_MAP_PRIVATE | S_MAP_ANONYMOUS | S_MAP_NORESERVE, -1, 0);
	if (sys_failed(pend)) {
		say_log(g, "cannot map memory; running without a log", ~0ULL);
		return;
	}
	g->log.pending = (uint64_t)pend;

	long fd = sys_call4(SYS_openat, S_AT_FDCWD, (long)g->log.path, S_O_RDONLY | S_O_CLOEXEC, 0);
	uint64_t size = 0;
	const uint8_t *p = 0;
	int shared = 0;
	if (!sys_failed(fd)) {
		shared = log_lock_shared(fd);
		struct s_stat st;
		if (!sys_failed(sys_call2(SYS_fstat, fd, (long)&st)) && st.size > 0) {
			size = (uint64_t)st.size;
			long mp = sys_mmap(0, size, S_PROT_READ, S_MAP_PRIVATE, (int)fd, 0);
			p = sys_failed(mp) ? 0 : (const uint8_t *)mp;
		}
		if (size && !p) {
			sys_call1(SYS_close, fd);
			say_log(g, "cannot read; running without a log", ~0ULL);
			return;
		}
	}
	uint64_t from = LOG_HDR;
	if (p && (m->flags & STINT_MF_LOGGED) && m->log_end && g->test.log_load != 2) {
		log_know(g, m->log_end, m->log_last, m->log_last_head);
		from = log_known(g, p, size);
		if (from == LOG_HDR)
			g->log.known_end = 0; /* another file than m's rewrite read */
	}
	log_read(g, p, from, size, shared);
	if (!sys_failed(fd))
		sys_call1(SYS_close, fd); /* and the shared lock with it, once the mapping is gone */
}

/*
 * Read what a lazy start left unread (log_setup): the entries before
 * lazy_end, for a module whose rewrite read another log, or none, and
 * so has no seen table of this one. The set then holds every entry, as
 * after a whole read. A file that no longer starts as it did is read
 * whole. (Probes of other modules may be looking up the set meanwhile:
 * an entry they miss while it is being put is recorded again, once.)
 */
static void log_complete(struct stint_global *g)
{
	uint64_t end = g->log.lazy_end;
	g->log.lazy_end = 0;
	long fd = sys_call4(SYS_openat, S_AT_FDCWD, (long)g->log.path, S_O_RDONLY | S_O_CLOEXEC, 0);
	if (sys_failed(fd))
		return;
	struct s_stat st;
	if (!sys_failed(sys_call2(SYS_fstat, fd, (long)&st)) && (uint64_t)st.size > LOG_HDR) {
		uint64_t size = (uint64_t)st.size;
		long mp = sys_mmap(0, size, S_PROT_READ, S_MAP_PRIVATE, (int)fd, 0);
		if (!sys_failed(mp)) {
			const uint8_t *p = (const uint8_t *)mp;
			int cut;
			if (log_known(g, p, size) < end)
				end = size; /* not the file it was: all of it */
			log_scan(g, p, LOG_HDR, end, 0, log_load_block, &cut);
			sys_call2(SYS_munmap, mp, (long)size);
		}
	}
	sys_call1(SYS_close, fd);
}

/* Whether module m's seen table (a lazy start's stand-in for the log's
 * first lazy_end bytes) has the key (k0, k1). */
static int log_seen_table(const struct stint_global *g, const struct stint_module *m, uint64_t k0, uint64_t k1)
{
	if (!m->nseen || m->module_id >= MAX_MODULES || !g->proc.modules[m->module_id].log_lazy)
		return 0;
	const uint64_t *t = (const uint64_t *)(m->base + m->seen_vaddr);
	uint32_t lo = 0, hi = m->nseen;
	while (lo < hi) {
		uint32_t mid = lo + (hi - lo) / 2;
		const uint64_t *e = t + 2 * (uint64_t)mid;
		if (e[0] < k0 || (e[0] == k0 && e[1] < k1))
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo < m->nseen && t[2 * (uint64_t)lo] == k0 && t[2 * (uint64_t)lo + 1] == k1;
}

/* Whether the log has (k0, k1), an outcome of module m. */
static int log_has(const struct stint_global *g, const struct stint_module *m, uint64_t k0, uint64_t k1)
{
	return logset_has(g, k0, k1) || log_seen_table(g, m, k0, k1);
}

/* Whether the log may hold anything (read, or left unread by a lazy start). */
static int log_nonempty(const struct stint_global *g)
{
	return g->log.set_n || g->log.lazy_end;
}

/*
 * A shared flock on the log, so that no save appends or truncates while
 * it is read: a block half written by a save in another process would
 * look torn, and a truncated tail would fault the mapping. Waits for a
 * save at most LOG_LOAD_WAIT_NS (a process stopped in one keeps its
 * lock), then reads without it.
 */
static int log_lock_shared(long fd)
{
	uint64_t end = now_ns(S_CLOCK_MONOTONIC) + LOG_LOAD_WAIT_NS;
	for (;;) {
		if (!sys_failed(sys_call2(SYS_flock, fd, S_LOCK_SH | S_LOCK_NB)))
			return 1;
		uint64_t now = now_ns(S_CLOCK_MONOTONIC);
		if (now > end)
			return 0;
		sleep_until(now + 1000000);
	}
}

/*
 * Reads the log's contents p (size bytes, 0 when there is no log yet)
 * into the set (or the regions), then unmaps it. shared: read under the
 * shared lock, so a torn append at the end is a writer that was killed,
 * and is said; without the lock it may be a save still running, and is
 * skipped quietly.
 */
static void log_read(struct stint_global *g, const uint8_t *p, uint64_t from, uint64_t size, int shared)
{
	uint32_t policy = g->log.policy;
	if (p && (size < LOG_HDR || s_strncmp((const char *)p, LOG_MAGIC_HDR, 8) != 0 || *(const uint32_t *)(p + 8) != LOG_VERSION)) {
		say_log(g, "not a stint redundancy log (or an unknown version); left alone, running without a log", ~0ULL);
		sys_call2(SYS_munmap, (long)p, (long)size);
		return;
	}
	if (p && *(const uint32_t *)(p + 12) != policy) {
		say_log(g, "was written with another policy; left alone, running without a log", ~0ULL);
		sys_call2(SYS_munmap, (long)p, (long)size);
		return;
	}
	int ok;
	if (policy != POLICY_EXACT) {
		ok = regions_setup(g, p, size) == 0;
		g->reg.mode = ok;
		g->log.known_end = 0;
	} else {
		/* one scan: the set is sized from the file (an entry takes 32
		 * bytes of it), so that the blocks are read and checked once */
		uint64_t slots = 1024;
		while (slots < 2 * (size / LOG_ENTRY) + 1024)
			slots <<= 1;
		/* the set (16 bytes a slot) and its filter (a byte a slot);
		 * nearly every page of both gets written while the log is
		 * read, so they are made at once (one madvise, against an
		 * 11 us page fault each on this VM) */
		long ls = sys_mmap(0, slots * 17, S_PROT_READ | S_PROT_WRITE, S_MAP_PRIVATE | S_MAP_ANONYMOUS | S_MAP_NORESERVE, -1, 0);
		ok = !sys_failed(ls);
		if (ok) {
			/* (sized for the whole file: log_complete may read the rest) */
			if (p && from == LOG_HDR)
				populate_write((uint64_t)ls, (uint64_t)ls + slots * 17);
			g->log.set = (uint64_t)ls;
			g->log.set_filter = (uint64_t)ls + slots * 16;
			g->log.set_slots = slots;
			g->log.set_n = 0;
			g->log.lazy_end = from > LOG_HDR ? from : 0;
			int cut;
			if (p)
				log_scan(g, p, from, size, shared ? 1 : 2, log_load_block, &cut);
		}
	}
	if (p)
		sys_call2(SYS_munmap, (long)p, (long)size);
	if (!ok) {
		say_log(g, "cannot map memory; running without a log", ~0ULL);
		return;
	}
	g->log.on = 1;
}

/* Whether module m's rewrite read the log whose unread prefix a lazy
 * start left (log_setup): its seen table and list stand for it. */
static int log_lazy_for(const struct stint_global *g, const struct stint_module *m)
{
	const uint64_t *h = g->log.known_head;
	uint64_t head[2];
	s_memcpy(head, m->log_last_head, 16);
	return g->log.lazy_end && (m->flags & STINT_MF_LOGGED) && m->log_end == g->log.lazy_end &&
	       m->log_last == g->log.known_last && head[0] == h[0] && head[1] == h[1];
}

/* Retire the direct probes of m (those of list, np of them, or all) whose
 * outcome is in the log (trusted: the rewriter's list of a lazy start,
 * whose entries went unread). Returns 1 if a patch had every probe
 * retired. */
static int log_retire(struct stint_global *g, struct stint_module *m, uint64_t base, uint64_t bid, const uint32_t *list,
		      uint32_t np, int trusted)
{
	struct stint_probe *pr = (struct stint_probe *)(base + m->probes_vaddr);
	struct stint_patch *pts = (struct stint_patch *)(base + m->patches_vaddr);
	int done = 0;
	for (uint32_t j = 0; j < np; j++) {
		uint32_t i = list ? list[j] : j;
		if (i >= m->nprobes)
			continue;
		struct stint_probe *p = &pr[i];
		if (!(p->flags & STINT_PF_DIRECT) || (p->flags & STINT_PF_DELEG) || p->state == 1)
			continue; /* (a STINT_PF_DELEG probe's outcome is its edge probe's) */
		uint64_t k0, k1;
		logkey(bid, p->src, p->kind, bid, p->dst, &k0, &k1);
		if (!trusted && !logset_has(g, k0, k1))
			continue;
		uint32_t n;
		if (g->per.budget_on && g->sw.on && ret_pending(g, m, base, p, &n)) {
			/* its return is still to see: keep it (rets.c) */
			p->state = PROBE_RETWATCH;
			continue;
		}
		p->state = 1;
		patch_done(m, base, p->patch, p, 1);
		if (p->patch < m->npatches && pts[p->patch].remaining == 0)
			done = 1;
	}
	return done;
}

/*
 * Retire the direct probes of module m whose outcomes are in the log
 * (its initialisation: nothing of it runs yet, so patches are restored
 * with plain stores, patch_done's alone).
 */
static void log_load_module(struct stint_global *g, struct stint_module *m, uint64_t base, uint32_t chunks_lost)
{
	if (!log_nonempty(g) || !m->build_id_len)
		return;
	uint64_t bid = fnv64(m->build_id, m->build_id_len > 32 ? 32 : m->build_id_len);
	struct stint_probe *pr = (struct stint_probe *)(base + m->probes_vaddr);
	struct stint_patch *pts = (struct stint_patch *)(base + m->patches_vaddr);
	int lazy = log_lazy_for(g, m);
	if (g->log.lazy_end && !lazy)
		log_complete(g); /* a module with no seen table of this log */
	if (lazy && m->module_id < MAX_MODULES)
		g->proc.modules[m->module_id].log_lazy = 1;
	/* The rewriter's list when the log holds what the rewriter read for
	 * this module (no entry more, none less), or more only after it (a
	 * lazy start): looking up each of 82k probes of libsqlite3 took
	 * 2.3-3.3 ms of every start, for the few hundred a --skip-covered
	 * rewrite still has logged. */
	const uint32_t *list = 0;
	uint32_t np = m->nprobes, done = 0; /* done: a patch had every probe retired */
	const uint64_t *d = logdig_find(g, bid);
	if ((m->flags & STINT_MF_LOGGED) && g->test.log_load != 2) {
		uint64_t cnt = d ? d[1] : 0, sum = d ? d[2] : 0;
		if (lazy || ((d || !g->log.dig_full) && cnt == m->log_count && sum == m->log_sum)) {
			list = (const uint32_t *)(base + m->logged_vaddr);
			np = m->nlogged;
		}
	}
	/* a lazy start read only the appended entries: looked up in full
	 * when some are direct outcomes of this module */
	int tail = lazy && (d ? d[3] != 0 : g->log.dig_full);
	if (g->test.log_load) {
		char line[128];
		struct sbuf b = {line, 0, sizeof line - 1};
		sb_puts(&b, list ? (lazy ? "stint: test: log load: lazy list " : "stint: test: log load: list ") : "stint: test: log load: scan ");
		sb_putu(&b, np);
		if (tail) {
			sb_puts(&b, ", scan ");
			sb_putu(&b, m->nprobes);
		}
		sb_putc(&b, '\n');
		say_write(line, b.len);
	}
	done = log_retire(g, m, base, bid, list, np, lazy && list);
	if (tail) {
		done |= log_retire(g, m, base, bid, 0, m->nprobes, 0);
		list = 0;
		np = m->nprobes;
	}
	/* Then, with every logged outcome counted: a switchable site with an
	 * outcome left keeps its patch. It is listed for the off-switch here
	 * (the off-switch) as fresh: windows leave it on (its other outcome is what
	 * this run is for), a spent or zero budget switches it off. Its
	 * logged arm keeps calling the runtime for a while (sw_watched): a
	 * site the program keeps running becomes an ordinary listed site.
	 * Any other logged arm goes straight through. */
	for (uint32_t j = 0; j < np; j++) {
		uint32_t i = list ? list[j] : j;
		if (i >= m->nprobes)
			continue;
		struct stint_probe *p = &pr[i];
		if (!(p->flags & STINT_PF_DIRECT) || p->state != 1)
			continue;
		const struct stint_patch *pt = p->patch < m->npatches ? &pts[p->patch] : 0;
		if (g->sw.on && pt && pt->remaining && (pt->flags & STINT_PATCH_SWITCH)) {
			p->state = PROBE_WATCHED;
			sw_call(g, m, p, 0, 1);
		} else if (!pt || pt->remaining || !(pt->flags & STINT_PATCH_RESTORABLE)) {
			/* (a restored site never reaches its trampoline again:
			 * writing its arm would only copy a trampoline page, a
			 * page fault and a TLB flush each, hundreds at load) */
			retarget(base, p);
		}
	}
	/* A readee serves nobody once each of its readers holds its original
	 * bytes, and in the file every reader is patched: only a reader
	 * restored here or by a chunk that could not be mapped frees one
	 * (a cold reader does not). Without either the walk over every
	 * patch frees nothing: 1.7 ms of a retiring libsqlite3's start. */
	if (done || chunks_lost)
		log_restore_readees(g, m, base);
}

static uint64_t module_bid(struct stint_global *g, uint16_t id)
{
	if (id == DST_MODULE_NONE || id >= MAX_MODULES)
		return 0;
	struct gmodule *gm = &g->proc.modules[id];
	return gm->build_id_len ? fnv64(gm->build_id, gm->build_id_len) : 0;
}

/* Was this (indirect, ret or syscall) outcome recorded by an earlier run? */
static int log_seen(struct stint_global *g, struct stint_module *m, struct stint_probe *p, uint64_t dst, uint16_t dst_mod)
{
	if (!g->log.on || !log_nonempty(g))
		return 0;
	uint64_t k0, k1;
	logkey(module_bid(g, (uint16_t)m->module_id), p->src, p->kind,
	       (p->flags & STINT_PF_VALUE) ? 0 : module_bid(g, dst_mod), dst, &k0, &k1);
	return log_has(g, m, k0, k1);
}

/* Note a new outcome for the next save. */
static void log_note(struct stint_global *g, struct stint_module *m, struct stint_probe *p, uint64_t dst, uint16_t dst_mod)
{
	if (!g->log.on)
		return;
	uint64_t i = __atomic_fetch_add(&g->log.npend, 1, __ATOMIC_ACQ_REL);
	if (i >= LOG_PENDING_MAX)
		return;
	struct log_pend *e = (struct log_pend *)g->log.pending + i;
	e->src = p->src;
	e->dst = dst;
	e->src_mod = (uint16_t)m->module_id;
	e->dst_mod = (p->flags & STINT_PF_VALUE) ? DST_MODULE_NONE : dst_mod;
	e->kind = p->kind;
	__atomic_store_n(&e->pad[0], 1, __ATOMIC_RELEASE); /* complete */
}

/* How long the exit path waits for a save under way. */
#define LOG_EXIT_WAIT_NS 2000000000ULL

/*
 * Take the log's lock on the way out (DT_FINI). The period thread may be
 * saving: it dies with the process, so giving up here (as a periodic save
 * does) lost every entry since the last save that completed; a sqlite3
 * run of 1.1 s left no log at all. So wait for it, boundedly: a signal
 * handler of this very thread may have interrupted a save of its own.
 */
static int log_lock_exit(struct stint_global *g)
{
	uint64_t end = now_ns(S_CLOCK_MONOTONIC) + LOG_EXIT_WAIT_NS;
	for (uint32_t spin = 0;; spin++) {
		if (try_lock(&g->log.lock))
			return 1;
		if (spin >= 64 && now_ns(S_CLOCK_MONOTONIC) > end)
			return 0;
		relax(spin);
	}
}

/*
 * Append the outcomes noted since the last save, one block per source
 * module, under flock. Called by the period thread, where a save already
 * running elsewhere makes this one return (the next one will carry the
 * entries), and at exit (exiting), where it waits for that save.
 */
static void log_save(struct stint_global *g, int exiting)
{
	if (!g->log.on || !(exiting ? log_lock_exit(g) : try_lock(&g->log.lock)))
		return;
	if (!exiting && g->test.save_hold[0])
		test_save_hold(g);
	uint64_t cap, len = 0, last = ~0ULL; /* last: the offset in buf of its last block (exact policy) */
	uint8_t *buf;
	long bufm;
	uint64_t from = 0, to = 0;
	if (g->reg.mode) {
		cap = ((uint64_t)REG_MAX * LOG_ENTRY + (uint64_t)MAX_MODULES * LOG_BLK_HDR + 4095) & ~(uint64_t)4095;
		bufm = sys_mmap(0, cap, S_PROT_READ | S_PROT_WRITE, S_MAP_PRIVATE | S_MAP_ANONYMOUS | S_MAP_NORESERVE, -1, 0);
		if (sys_failed(bufm)) {
			unlock(&g->log.lock);
			return;
		}
		buf = (uint8_t *)bufm;
		len = regions_blocks(g, buf, cap);
		if (!len) {
			sys_call2(SYS_munmap, bufm, (long)cap);
			unlock(&g->log.lock);
			return;
		}
		goto write;
	}
	from = g->log.saved;
	to = __atomic_load_n(&g->log.npend, __ATOMIC_ACQUIRE);
	if (to > LOG_PENDING_MAX)
		to = LOG_PENDING_MAX;
	struct log_pend *pe = (struct log_pend *)g->log.pending;
	/* stop at the first entry still being written */
	for (uint64_t i = from; i < to; i++)
		if (!__atomic_load_n(&pe[i].pad[0], __ATOMIC_ACQUIRE)) {
			to = i;
			break;
		}
	if (to == from) {
		unlock(&g->log.lock);
		return;
	}
	cap = (to - from) * LOG_ENTRY + (uint64_t)MAX_MODULES * LOG_BLK_HDR;
	cap = (cap + 4095) & ~(uint64_t)4095;
	bufm = sys_mmap(0, cap, S_PROT_READ | S_PROT_WRITE, S_MAP_PRIVATE | S_MAP_ANONYMOUS, -1, 0);
	if (sys_failed(bufm)) {
		unlock(&g->log.lock);
		return;
	}
	buf = (uint8_t *)bufm;
	/* one block per source module, in module order */
	uint32_t nm = __atomic_load_n(&g->proc.nmodules, __ATOMIC_ACQUIRE);
	if (nm > MAX_MODULES)
		nm = MAX_MODULES;
	for (uint32_t mod = 0; mod < nm; mod++) {
		struct gmodule *gm = &g->proc.modules[mod];
		if (!gm->build_id_len)
			continue;
		uint8_t *h = buf + len;
		uint32_t count = 0;
		uint8_t *e = h + LOG_BLK_HDR;
		for (uint64_t i = from; i < to; i++) {
			if (pe[i].src_mod != mod)
				continue;
			put64(e, pe[i].src);
			put64(e + 8, pe[i].dst);
			put64(e + 16, module_bid(g, pe[i].dst_mod));
			uint32_t kind = pe[i].kind, zero = 0;
			s_memcpy(e + 24, &kind, 4);
			s_memcpy(e + 28, &zero, 4);
			e += LOG_ENTRY;
			count++;
		}
		if (count) {
			last = len;
			len += log_seal_block(g, h, count, gm);
		}
	}
write:;
	long fd = sys_call4(SYS_openat, S_AT_FDCWD, (long)g->log.path, S_O_RDWR | S_O_CREAT | S_O_CLOEXEC, 0644);
	if (sys_failed(fd)) {
		if (!g->log.warned++)
			say_log(g, "cannot open for writing; new entries are not saved", ~0ULL);
		goto out;
	}
	sys_call2(SYS_flock, fd, S_LOCK_EX);
	struct s_stat st;
	uint64_t size = 0;
	if (!sys_failed(sys_call2(SYS_fstat, fd, (long)&st)))
		size = (uint64_t)st.size;
	uint64_t at = LOG_HDR;
	int cut = 0;
	uint8_t hdr[LOG_HDR];
	s_memset(hdr, 0, sizeof hdr);
	s_memcpy(hdr, LOG_MAGIC_HDR, 8);
	uint32_t ver = LOG_VERSION, pol = g->log.policy;
	s_memcpy(hdr + 8, &ver, 4);
	s_memcpy(hdr + 12, &pol, 4);
	if (size < LOG_HDR) {
		/* empty, or a creator died while writing the header */
		uint8_t hb[LOG_HDR];
		if (size && (sys_call4(SYS_pread64, fd, (long)hb, (long)size, 0) != (long)size || s_strncmp((char *)hb, (char *)hdr, size) != 0)) {
			say_log(g, "too short to be a log; left alone, new entries are not saved", ~0ULL);
			goto unlock;
		}
		sys_call4(SYS_pwrite64, fd, (long)hdr, LOG_HDR, 0);
		size = LOG_HDR;
	} else {
		long mp = sys_mmap(0, size, S_PROT_READ, S_MAP_PRIVATE, (int)fd, 0);
		if (sys_failed(mp)) {
			say_log(g, "cannot read; new entries are not saved", ~0ULL);
			goto unlock;
		}
		const uint8_t *fp = (const uint8_t *)mp;
		if (s_strncmp((const char *)fp, LOG_MAGIC_HDR, 8) != 0 || *(const uint32_t *)(fp + 8) != LOG_VERSION ||
		    *(const uint32_t *)(fp + 12) != g->log.policy) {
			sys_call2(SYS_munmap, mp, (long)size);
			say_log(g, "changed under us into something else; left alone, new entries are not saved", ~0ULL);
			goto unlock;
		}
		at = log_scan(g, fp, log_known(g, fp, size), size, 0, 0, &cut);
		sys_call2(SYS_munmap, mp, (long)size);
	}
	{
		if (at + len > fsize_limit()) {
			if (!__atomic_exchange_n(&g->log.fsize_said, 1, __ATOMIC_RELAXED))
				say_log(g, "would grow past the file size limit (ulimit -f); new entries are not saved", ~0ULL);
			goto unlock;
		}
		/* after damage: pad with zeros up to the 8-byte aligned end */
		if (!cut && at > size) {
			const uint8_t z[8] = {0};
			sys_call4(SYS_pwrite64, fd, (long)z, (long)(at - size), (long)size);
		}
		int done = pwrite_all(fd, buf, len, at) == 0;
		if (done && cut && at + len < size)
			sys_call2(SYS_ftruncate, fd, (long)(at + len)); /* drop the rest of a torn append */
		if (done && !g->reg.mode)
			g->log.saved = to;
		/* the next save scans from after these blocks; while a lazy
		 * start's prefix stands (lazy_end), known stays it: a module
		 * loading later is matched against it (log_lazy_for) */
		if (done && !cut && last != ~0ULL && !g->log.lazy_end)
			log_know(g, at + len, at + last, buf + last);
	}
unlock:
	sys_call2(SYS_flock, fd, S_LOCK_UN);
	sys_call1(SYS_close, fd);
out:
	sys_call2(SYS_munmap, (long)buf, (long)cap);
	unlock(&g->log.lock);
}
