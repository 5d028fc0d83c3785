/*
 * lib.c - what libc would give the runtime, which has none: memory and
 * string functions, a bounded string builder, one-line messages to fd 2,
 * the clocks and the TSC, try-locks and bounded spin waits.
 */
#include "stint.h"

#define S_TIMER_ABSTIME 1
#define SYS_clock_nanosleep 230

#ifdef STINT_BLOB
/* gcc may emit calls to these for structure copies. */
void *memcpy(void *d, const void *s, size_t n)
{
	unsigned char *dp = d;
	const unsigned char *sp = s;
	while (n--)
		*dp++ = *sp++;
	return d;
}

void *memset(void *d, int c, size_t n)
{
	unsigned char *dp = d;
	while (n--)
		*dp++ = (unsigned char)c;
	return d;
}
#endif

static void s_memcpy(void *d, const void *s, size_t n)
{
	unsigned char *dp = d;
	const unsigned char *sp = s;
	while (n--)
		*dp++ = *sp++;
}

static void s_memset(void *d, int c, size_t n)
{
	unsigned char *dp = d;
	while (n--)
		*dp++ = (unsigned char)c;
}

/* Zero n bytes at d with rep stosb: fast for the large spans it is for. */
static void s_zero(void *d, size_t n)
{
	__asm__ volatile("rep stosb" : "+D"(d), "+c"(n) : "a"(0) : "memory");
}

static size_t s_strlen(const char *s)
{
	size_t n = 0;
	while (s[n])
		n++;
	return n;
}

static int s_strncmp(const char *a, const char *b, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		if (a[i] != b[i])
			return (unsigned char)a[i] - (unsigned char)b[i];
		if (!a[i])
			return 0;
	}
	return 0;
}

static void sb_putc(struct sbuf *b, char c)
{
	if (b->len < b->cap)
		b->p[b->len] = c;
	b->len++;
}

static void sb_puts(struct sbuf *b, const char *s)
{
	while (*s)
		sb_putc(b, *s++);
}

static void sb_putu(struct sbuf *b, uint64_t v)
{
	char t[24];
	int n = 0;
	do {
		t[n++] = (char)('0' + v % 10);
		v /= 10;
	} while (v);
	while (n)
		sb_putc(b, t[--n]);
}

static void sb_puthex(struct sbuf *b, const uint8_t *p, size_t n)
{
	static const char hx[] = "0123456789abcdef";
	for (size_t i = 0; i < n; i++) {
		sb_putc(b, hx[p[i] >> 4]);
		sb_putc(b, hx[p[i] & 15]);
	}
}

/* JSON string contents: escape quotes, backslashes and control bytes. */
static void sb_putjs(struct sbuf *b, const char *s)
{
	static const char hx[] = "0123456789abcdef";
	sb_putc(b, '"');
	for (; *s; s++) {
		unsigned char c = (unsigned char)*s;
		if (c == '"' || c == '\\') {
			sb_putc(b, '\\');
			sb_putc(b, (char)c);
		} else if (c < 0x20) {
			sb_puts(b, "\\u00");
			sb_putc(b, hx[c >> 4]);
			sb_putc(b, hx[c & 15]);
		} else {
			sb_putc(b, (char)c);
		}
	}
	sb_putc(b, '"');
}

static const char *errno_name(long e)
{
	switch (e) {
	case 1: return "EPERM";
	case 2: return "ENOENT";
	case 5: return "EIO";
	case 9: return "EBADF";
	case 12: return "ENOMEM";
	case 13: return "EACCES";
	case 14: return "EFAULT";
	case 16: return "EBUSY";
	case 17: return "EEXIST";
	case 20: return "ENOTDIR";
	case 21: return "EISDIR";
	case 22: return "EINVAL";
	case 23: return "ENFILE";
	case 24: return "EMFILE";
	case 27: return "EFBIG";
	case 28: return "ENOSPC";
	case 30: return "EROFS";
	case 36: return "ENAMETOOLONG";
	case 122: return "EDQUOT";
	default: return "error";
	}
}

/*
 * RLIMIT_FSIZE's soft limit, read each time (the program may change it);
 * ~0 when there is none. A write or ftruncate past it makes the kernel
 * raise SIGXFSZ, which kills by default: the runtime never goes past it.
 */
static uint64_t fsize_limit(void)
{
	struct {
		uint64_t cur, max;
	} rl;
	if (sys_failed(sys_call4(SYS_prlimit64, 0, 1 /* RLIMIT_FSIZE */, 0, (long)&rl)))
		return ~(uint64_t)0;
	return rl.cur;
}

/*
 * Whether fd still refers to our file dev/ino. The program may close our
 * descriptor and reuse the number for a file of its own (daemons close
 * every fd): never ftruncate or close an fd that no longer refers to it.
 */
static int fd_refers_to(int32_t fd, uint64_t dev, uint64_t ino)
{
	struct s_stat st;
	if (fd < 0 || sys_failed(sys_call2(SYS_fstat, fd, (long)&st)))
		return 0;
	return st.dev == dev && st.ino == ino;
}

/* pwrite all of buf (n bytes) at off; 0 or -errno. */
static long pwrite_all(long fd, const uint8_t *buf, uint64_t n, uint64_t off)
{
	while (n) {
		long r = sys_call4(SYS_pwrite64, fd, (long)buf, (long)n, (long)off);
		if (sys_failed(r))
			return r;
		if (r == 0)
			return -5; /* EIO */
		buf += r;
		n -= (uint64_t)r;
		off += (uint64_t)r;
	}
	return 0;
}

#define SYS_fcntl 72
#define S_F_DUPFD_CLOEXEC 1030

/*
 * openat, then the descriptor moved to the top of the table (the highest
 * free number under RLIMIT_NOFILE, of the top 16): the runtime's long-lived
 * descriptors (the trace, the paths file, /proc/self/task) then leave
 * the low numbers to the program, whose opens get the numbers they get
 * natively (3 for the first, not 4), and a program started with stdout
 * closed does not write into the trace through fd 1. Where no high
 * number is free the descriptor stays where it is, unless that is 0, 1
 * or 2: EMFILE then. The fd, or -errno.
 */
static long open_high(const char *path, long flags, long mode)
{
	long fd = sys_call4(SYS_openat, S_AT_FDCWD, (long)path, flags, mode);
	struct {
		uint64_t cur, max;
	} rl;
	if (sys_failed(fd))
		return fd;
	if (sys_failed(sys_call4(SYS_prlimit64, 0, 7 /* RLIMIT_NOFILE */, 0, (long)&rl)))
		rl.cur = 0;
	uint64_t top = rl.cur < ((uint64_t)1 << 20) ? rl.cur : (uint64_t)1 << 20; /* fs.nr_open's default */
	/* the lowest free number from at - 1 up: the top one, else lower */
	for (uint64_t at = top; at > (uint64_t)fd + 1 && at + 16 > top; at--) {
		long hi = sys_call3(SYS_fcntl, fd, S_F_DUPFD_CLOEXEC, (long)(at - 1));
		if (!sys_failed(hi)) {
			sys_call1(SYS_close, fd);
			return hi;
		}
	}
	if (fd < 3) {
		sys_call1(SYS_close, fd);
		return -24; /* EMFILE */
	}
	return fd;
}

/*
 * How much address space a trace file's mapping takes (its size limit):
 * FILE_RESERVE, or under an address space limit (ulimit -v, which
 * counts mappings, used or not) an eighth of it, from 16 MiB, in whole
 * MiB. Past the limit the mapping would fail and the run go untraced.
 */
static uint64_t file_reserve(void)
{
	struct {
		uint64_t cur, max;
	} rl;
	if (sys_failed(sys_call4(SYS_prlimit64, 0, 9 /* RLIMIT_AS */, 0, (long)&rl)) || rl.cur / 8 >= FILE_RESERVE)
		return FILE_RESERVE;
	uint64_t r = (rl.cur / 8) & ~(((uint64_t)1 << 20) - 1);
	return r < ((uint64_t)16 << 20) ? (uint64_t)16 << 20 : r;
}

/*
 * Whether *fd still refers to our file (dev, ino) at path, opened again
 * when the program closed it or gave its number to a file of its own:
 * daemons close every descriptor they did not open, often right at
 * start, and the mapping outlives the descriptor (only growing the file
 * needs one). 1, or 0 when the file cannot be reached (deleted, renamed,
 * no descriptor free). The number the program took is never closed.
 */
static int fd_ours_again(int32_t *fd, uint64_t dev, uint64_t ino, const char *path)
{
	int32_t cur = __atomic_load_n(fd, __ATOMIC_ACQUIRE);
	if (fd_refers_to(cur, dev, ino))
		return 1;
	long nfd = open_high(path, S_O_RDWR | S_O_CLOEXEC, 0);
	if (sys_failed(nfd))
		return 0;
	if (!fd_refers_to((int32_t)nfd, dev, ino)) {
		sys_call1(SYS_close, nfd); /* another file under that name now */
		return 0;
	}
	if (!__atomic_compare_exchange_n(fd, &cur, (int32_t)nfd, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
		sys_call1(SYS_close, nfd); /* another thread opened it again first */
		return fd_refers_to(__atomic_load_n(fd, __ATOMIC_ACQUIRE), dev, ino);
	}
	return 1;
}

/*
 * Readahead for a trace file's shared mapping (map, reserve bytes), as
 * the file grows from was to now bytes (file_extend). A store to a page not yet in the
 * page cache faults it in, and the kernel's readahead then zero-fills a
 * window of large folios past it (holes and fallocated blocks read as
 * zeros), which the truncation at the run's end drops again: a short
 * run pays for both (`select 1` with a call chain of libsqlite3: 13.0-13.7
 * CPU ms, 7.4-9.0 without). So a new file reads one page per fault, and
 * goes back to readahead past READAHEAD_PAST, where a row trace writes
 * enough for its batches to pay (an 82 MB one 2-3% faster).
 */
#define READAHEAD_PAST (16ULL << 20)
static void file_readahead(uint64_t map, uint64_t reserve, uint64_t was, uint64_t now)
{
	if (!map || now <= was)
		return;
	if (was == 0 && now < READAHEAD_PAST)
		sys_call3(SYS_madvise, (long)map, (long)reserve, S_MADV_RANDOM);
	else if (was < READAHEAD_PAST && now >= READAHEAD_PAST)
		sys_call3(SYS_madvise, (long)map, (long)reserve, S_MADV_NORMAL);
}

/*
 * Extends our file *fd (dev, ino, at path), *len bytes long, to cover
 * [0, end) with step bytes to spare, within reserve (its mapping at map,
 * whose readahead follows the length: file_readahead) and the file size
 * limit: EFBIG when end is past either, without the SIGXFSZ an
 * ftruncate past the limit raises. With alloc the new bytes are
 * allocated (fallocate), not left a hole: the runtime writes the trace
 * through a shared mapping, and a page of a hole that the file system has
 * no room for raises SIGBUS at the store; ENOSPC comes back here instead,
 * and the run goes untraced (a file system without fallocate gets
 * ftruncate). The paths file stays sparse: a short thread's chunk holds
 * a few hundred bytes of its 256 KiB, and allocating them took a 5,000
 * thread compact trace from 19 MB to 1.1 GB of disk; a full disk can
 * still SIGBUS its stores. 0 or -errno.
 */
static long file_extend(int32_t *fd, uint64_t dev, uint64_t ino, const char *path, uint64_t *len, uint64_t end, uint64_t step,
			uint64_t map, uint64_t reserve, int alloc)
{
	if (end <= *len)
		return 0;
	uint64_t most = fsize_limit() < reserve ? fsize_limit() : reserve;
	if (end > most)
		return -27; /* EFBIG */
	uint64_t want = end + step;
	if (want > most)
		want = most;
	if (!fd_ours_again(fd, dev, ino, path))
		return -9; /* EBADF */
	long r = alloc ? sys_call4(SYS_fallocate, *fd, 0, (long)*len, (long)(want - *len)) : -95;
	if (r == -95 /* EOPNOTSUPP */ || r == -38 /* ENOSYS */)
		r = sys_call2(SYS_ftruncate, *fd, (long)want);
	if (sys_failed(r))
		return r;
	file_readahead(map, reserve, *len, want);
	*len = want;
	return 0;
}

/* Writes a line of ours to fd 2, unless fd 2 is a regular file the line
 * would grow past the file size limit (SIGXFSZ). */
static void say_write(const char *line, size_t n)
{
	struct s_stat st;
	if (!sys_failed(sys_call2(SYS_fstat, 2, (long)&st)) && (st.mode & 0170000) == 0100000 /* S_IFREG */ &&
	    (uint64_t)st.size + n > fsize_limit())
		return;
	sys_call3(SYS_write, 2, (long)line, (long)n);
}

/* One line on stderr: "stint: <msg>". */
static void say_line(const char *msg)
{
	char line[512];
	struct sbuf b = {line, 0, sizeof line - 1};
	sb_puts(&b, "stint: ");
	sb_puts(&b, msg);
	size_t n = b.len < b.cap ? b.len : b.cap;
	line[n++] = '\n';
	say_write(line, n);
}

/* The one line a failed setup prints: "stint: <what>: <errno>; running untraced". */
static void say_untraced(const char *what, const char *arg, long err)
{
	char line[512];
	struct sbuf b = {line, 0, sizeof line - 1};
	sb_puts(&b, "stint: ");
	sb_puts(&b, what);
	if (arg) {
		sb_putc(&b, ' ');
		sb_puts(&b, arg);
	}
	sb_puts(&b, ": ");
	sb_puts(&b, errno_name(err));
	sb_puts(&b, "; running untraced\n");
	size_t n = b.len < b.cap ? b.len : b.cap;
	if (b.len > b.cap)
		line[n - 1] = '\n';
	say_write(line, n);
}

static inline void cpu_pause(void) { __asm__ volatile("pause" ::: "memory"); }

/*
 * One round of a bounded wait: pause at first, then yield the CPU, since
 * the thread we wait for may be preempted on an oversubscribed machine.
 */
static inline void relax(uint32_t round)
{
	if (round < 64)
		cpu_pause();
	else
		sys_call0(SYS_sched_yield);
}

static uint64_t now_ns(int clock)
{
	struct s_timespec ts = {0, 0};
	uint64_t f = G()->proc.vdso_gettime;
	if (f && ((long (*)(long, struct s_timespec *))f)(clock, &ts) == 0)
		return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
	sys_call2(SYS_clock_gettime, clock, (long)&ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

static int try_lock(uint32_t *l)
{
	uint32_t z = 0;
	return __atomic_compare_exchange_n(l, &z, 1, 0, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED);
}

static void unlock(uint32_t *l) { __atomic_store_n(l, 0, __ATOMIC_RELEASE); }

/*
 * Wait, boundedly, for a lock another thread holds briefly. If a signal
 * handler interrupted the holder on this very thread, the wait runs out
 * and the caller does without.
 */
static int lock_bounded(uint32_t *l)
{
	for (uint32_t spin = 0; spin < SPIN_LIMIT; spin++) {
		if (!__atomic_load_n(l, __ATOMIC_RELAXED) && try_lock(l))
			return 1;
		relax(spin);
	}
	return 0;
}

static inline uint64_t rdtsc(void)
{
	uint32_t lo, hi;
	__asm__ volatile("rdtsc" : "=a"(lo), "=d"(hi));
	return ((uint64_t)hi << 32) | lo;
}

/* a * b / c with a 128-bit intermediate (no libgcc: mul and div by hand);
 * saturates when the quotient does not fit. */
static inline uint64_t mul_div(uint64_t a, uint64_t b, uint64_t c)
{
	if (!c)
		return 0;
	uint64_t lo, hi, q, r;
	__asm__("mulq %3" : "=a"(lo), "=d"(hi) : "a"(a), "rm"(b) : "cc");
	if (hi >= c)
		return ~0ULL;
	__asm__("divq %4" : "=a"(q), "=d"(r) : "a"(lo), "d"(hi), "rm"(c) : "cc");
	(void)r;
	return q;
}

/* Index of the first of the n entries of table (each stride bytes,
 * sorted by the uint64_t each starts with) whose key is >= key; n if
 * none: the stub list by offset, the trap table by site. */
static uint32_t first_key_at_least(const void *table, uint32_t n, size_t stride, uint64_t key)
{
	uint32_t a = 0, b = n;
	while (a < b) {
		uint32_t mid = a + (b - a) / 2;
		if (*(const uint64_t *)((const char *)table + (size_t)mid * stride) < key)
			a = mid + 1;
		else
			b = mid;
	}
	return a;
}

/* The median of the n timings t (sorted in place: an insertion sort, n
 * is small), the upper one of the middle two when n is even. */
static uint64_t median_of(uint64_t *t, int n)
{
	for (int i = 1; i < n; i++)
		for (int j = i; j > 0 && t[j - 1] > t[j]; j--) {
			uint64_t x = t[j];
			t[j] = t[j - 1];
			t[j - 1] = x;
		}
	return t[n / 2];
}

static void sleep_until(uint64_t mono_ns)
{
	struct s_timespec ts = {(long)(mono_ns / 1000000000ULL), (long)(mono_ns % 1000000000ULL)};
	while (sys_call4(SYS_clock_nanosleep, S_CLOCK_MONOTONIC, S_TIMER_ABSTIME, (long)&ts, 0) == -4)
		;
}

/* Wait until mono_ns, or until the futex word *w is nonzero (its setter
 * wakes it); returns 1 if it is, 0 at the time (and where futexes are
 * missing, after sleeping until then). */
static int wait_word(uint32_t *w, uint64_t mono_ns)
{
	struct s_timespec ts = {(long)(mono_ns / 1000000000ULL), (long)(mono_ns % 1000000000ULL)};
	for (;;) {
		if (__atomic_load_n(w, __ATOMIC_ACQUIRE))
			return 1;
		long r = sys_call6(SYS_futex, (long)w, S_FUTEX_WAIT_BITSET_PRIVATE, 0, (long)&ts, 0, -1);
		if (r == -110 /* ETIMEDOUT */ || now_ns(S_CLOCK_MONOTONIC) >= mono_ns)
			return 0;
		if (r == -38 /* ENOSYS */) {
			sleep_until(mono_ns);
			return 0;
		}
	}
}
