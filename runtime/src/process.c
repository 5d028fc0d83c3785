/*
 * process.c - the process the runtime lives in: the vDSO's
 * clock_gettime, the auxiliary vector, the environment,
 * /proc/self/maps, the module table (every module an event names), the
 * thread id of an event, anonymous memory.
 */
#include "stint.h"

/* The ELF structures the vDSO lookup reads. */
struct elf64_ehdr {
	uint8_t ident[16];
	uint16_t type, machine;
	uint32_t version;
	uint64_t entry, phoff, shoff;
	uint32_t flags;
	uint16_t ehsize, phentsize, phnum, shentsize, shnum, shstrndx;
};
struct elf64_phdr {
	uint32_t type, flags;
	uint64_t offset, vaddr, paddr, filesz, memsz, align;
};
struct elf64_shdr {
	uint32_t name, type;
	uint64_t flags, addr, offset, size;
	uint32_t link, info;
	uint64_t addralign, entsize;
};
struct elf64_sym {
	uint32_t name;
	uint8_t info, other;
	uint16_t shndx;
	uint64_t value, size;
};

/*
 * The kernel maps the whole vDSO image, section headers included, so the
 * dynamic symbol table is found through them.
 */
/* Whether eh starts a 64-bit ELF file. */
static int elf64_ident_ok(const struct elf64_ehdr *eh)
{
	return eh->ident[0] == 0x7f && eh->ident[1] == 'E' && eh->ident[2] == 'L' && eh->ident[3] == 'F' && eh->ident[4] == 2;
}

static uint64_t vdso_lookup(uint64_t ehdr_addr, const char *name)
{
	const struct elf64_ehdr *eh = (const void *)ehdr_addr;
	if (!eh || !elf64_ident_ok(eh))
		return 0;
	uint64_t load = 0;
	int found = 0;
	const struct elf64_phdr *ph = (const void *)(ehdr_addr + eh->phoff);
	for (int i = 0; i < eh->phnum; i++) {
		if (ph[i].type == 1 /* PT_LOAD */) {
			load = ehdr_addr + ph[i].offset - ph[i].vaddr;
			found = 1;
			break;
		}
	}
	if (!found || eh->shentsize != sizeof(struct elf64_shdr))
		return 0;
	const struct elf64_shdr *sh = (const void *)(ehdr_addr + eh->shoff);
	for (int i = 0; i < eh->shnum; i++) {
		if (sh[i].type != 11 /* SHT_DYNSYM */ || sh[i].link >= eh->shnum)
			continue;
		const struct elf64_sym *sym = (const void *)(ehdr_addr + sh[i].offset);
		const char *str = (const char *)(ehdr_addr + sh[sh[i].link].offset);
		uint64_t n = sh[i].size / sizeof(struct elf64_sym);
		size_t nl = s_strlen(name) + 1;
		for (uint64_t j = 0; j < n; j++) {
			if (sym[j].shndx == 0 || !sym[j].value)
				continue;
			if (s_strncmp(str + sym[j].name, name, nl) == 0)
				return load + sym[j].value;
		}
	}
	return 0;
}

static long open_ro(const char *path)
{
	return sys_call4(SYS_openat, S_AT_FDCWD, (long)path, S_O_RDONLY | S_O_CLOEXEC, 0);
}

/* Read a whole small file into buf (NUL-terminated); returns bytes or -errno. */
static long read_small(const char *path, char *buf, size_t cap)
{
	long fd = open_ro(path);
	if (sys_failed(fd))
		return fd;
	size_t n = 0;
	while (n + 1 < cap) {
		long r = sys_call3(SYS_read, fd, (long)(buf + n), (long)(cap - 1 - n));
		if (r <= 0)
			break;
		n += (size_t)r;
	}
	buf[n] = 0;
	sys_call1(SYS_close, fd);
	return (long)n;
}

/* The decimal number at s, up to 19 digits; *end: the first byte after
 * them (s when there are none). */
static uint64_t parse_dec(const char *s, const char **end)
{
	uint64_t v = 0;
	int digits = 0;
	for (; *s >= '0' && *s <= '9' && digits < 19; s++, digits++)
		v = v * 10 + (uint64_t)(*s - '0');
	*end = s;
	return v;
}

/* A decimal number at s (up to the first non-digit); ~0 for none, or "max". */
static uint64_t dec_or_max(const char *s)
{
	const char *e;
	uint64_t v = parse_dec(s, &e);
	return e != s ? v : ~0ULL;
}

/* The value of the file dir + name (a memory cgroup's), or ~0. */
static uint64_t cg_value(const char *dir, size_t dl, const char *name)
{
	char path[512], buf[32];
	size_t nl = s_strlen(name);
	if (dl + nl + 1 > sizeof path)
		return ~0ULL;
	s_memcpy(path, dir, dl);
	s_memcpy(path + dl, name, nl + 1);
	return read_small(path, buf, sizeof buf) > 0 ? dec_or_max(buf) : ~0ULL;
}

/*
 * Bytes this process may still add to its memory cgroup before the
 * limit (cgroup v2's memory.max less memory.current, or v1's
 * memory.limit_in_bytes less memory.usage_in_bytes), ~0 when there is
 * none or it cannot tell. The copies and populates at start take
 * anonymous memory a tight limit may not hold: sqlite3 'select 1' with a
 * rewritten libsqlite3 copies 14 MB, and in a 16 MiB cgroup the kernel
 * killed it where the original ran. In a cgroup namespace the process's
 * path reads "/" and its own cgroup is the mount's root.
 */
static uint64_t mem_room(void)
{
	char cg[1024], dir[400];
	long n = read_small("/proc/self/cgroup", cg, sizeof cg);
	for (long i = 0; i < n;) {
		long e = i;
		while (e < n && cg[e] != '\n')
			e++;
		cg[e] = 0;
		const char *line = cg + i, *c1 = 0, *c2 = 0; /* "id:controllers:path" */
		for (const char *p = line; *p && !c2; p++) {
			if (*p == ':' && c1)
				c2 = p;
			else if (*p == ':')
				c1 = p;
		}
		i = e + 1;
		if (!c1 || !c2)
			continue;
		int v2 = c1 == line + 1 && line[0] == '0' && c2 == c1 + 1;
		int v1 = 0;
		for (const char *p = c1 + 1; p + 6 <= c2 && !v1; p++)
			v1 = !s_strncmp(p, "memory", 6) && (p[-1] == ':' || p[-1] == ',') && (p[6] == ':' || p[6] == ',');
		if (!v1 && !v2)
			continue;
		const char *root = v2 ? "/sys/fs/cgroup" : "/sys/fs/cgroup/memory", *rel = c2 + 1;
		size_t rl = s_strlen(root), pl = s_strlen(rel);
		if (rl + pl + 2 > sizeof dir)
			return ~0ULL;
		s_memcpy(dir, root, rl);
		s_memcpy(dir + rl, rel, pl);
		size_t dl = rl + pl;
		if (dir[dl - 1] != '/')
			dir[dl++] = '/';
		uint64_t lim = cg_value(dir, dl, v2 ? "memory.max" : "memory.limit_in_bytes");
		uint64_t use = cg_value(dir, dl, v2 ? "memory.current" : "memory.usage_in_bytes");
		if (lim == ~0ULL || use == ~0ULL || lim >= ((uint64_t)1 << 60))
			return ~0ULL; /* unlimited (v1 says so with a huge number), or unreadable */
		return lim > use ? lim - use : 0;
	}
	return ~0ULL;
}

/*
 * From /proc/self/stat: this process's state (field 3, its leader's),
 * its thread count (field 20) and, with code, its leader's exit status
 * as wait reports it (field 52, Linux 3.5). A leader that left with
 * SYS_exit stays listed, a zombie, until the group's last thread
 * leaves. 0, or -1.
 */
static int proc_stat_threads(char *state, uint64_t *threads, uint64_t *code)
{
	char buf[1024];
	long n = read_small("/proc/self/stat", buf, sizeof buf);
	long i = n - 1;
	while (i > 0 && buf[i] != ')')
		i--; /* the command name may hold spaces and parentheses */
	if (n <= 0 || i <= 0 || i + 2 >= n)
		return -1;
	*state = buf[i + 2];
	uint64_t v[2] = {0, 0};
	int field = 2, got[2] = {0, 0}, last = code ? 52 : 20;
	for (long j = i + 1; j < n && buf[j] != '\n' && field <= last; j++) {
		if (buf[j] == ' ') {
			field++;
		} else if (field == 20 || field == 52) {
			int k = field == 52;
			const char *e;
			v[k] = parse_dec(buf + j, &e);
			if (e == buf + j || (*e && *e != ' ' && *e != '\n'))
				return -1;
			got[k] = 1;
			j = e - buf - 1; /* the loop's j++ lands on what ended it */
		}
	}
	*threads = v[0];
	if (code)
		*code = v[1];
	return got[0] && (!code || got[1]) ? 0 : -1;
}

#define LEFT_CHECK_NS 50000000ULL /* leave_if_program_left reads /proc at most every 50 ms */

/*
 * A runtime thread's check at each wake, at most every LEFT_CHECK_NS
 * (*last_check: the caller's clock). When the program's threads have
 * all left, the last with SYS_exit (exit_group would have ended ours
 * too), the leader is a zombie and the other threads are the runtime's
 * (the period thread, the sampler's reader), which block every signal
 * and would keep the process alive for ever, SIGTERM pending. Then the
 * run ends here and this thread leaves with the leader's exit status:
 * newer kernels (6.18 here) report the group's last thread's status as
 * the process's, older ones the leader's, so this is right on both.
 */
static void leave_if_program_left(struct stint_global *g, uint64_t *last_check)
{
	uint64_t now = now_ns(S_CLOCK_MONOTONIC);
	if (now < *last_check + LEFT_CHECK_NS)
		return;
	*last_check = now;
	uint64_t ours = (__atomic_load_n(&g->per.period_thread, __ATOMIC_ACQUIRE) ? 1 : 0) +
			(__atomic_load_n(&g->smp.reader_up, __ATOMIC_ACQUIRE) ? 1 : 0);
	char st = 0;
	uint64_t n = 0, code = 0;
	if (proc_stat_threads(&st, &n, &code) || st != 'Z' || n > 1 + ours)
		return;
	run_left(g);
	for (;;)
		sys_call1(SYS_exit, (long)((code >> 8) & 0xff));
}

static uint64_t auxv_find(const uint64_t *auxv, uint64_t type)
{
	for (; auxv && auxv[0] != S_AT_NULL; auxv += 2)
		if (auxv[0] == type)
			return auxv[1];
	return 0;
}

static uint64_t proc_auxv(uint64_t type)
{
	uint64_t buf[128];
	long n = read_small("/proc/self/auxv", (char *)buf, sizeof buf);
	if (n <= 0)
		return 0;
	buf[(size_t)n / 8 < 127 ? (size_t)n / 8 : 126] = 0;
	buf[127] = 0;
	return auxv_find(buf, type);
}

static const char *env_get(char **envp, const char *name)
{
	size_t n = s_strlen(name);
	for (; envp && *envp; envp++)
		if (s_strncmp(*envp, name, n) == 0 && (*envp)[n] == '=')
			return *envp + n + 1;
	return 0;
}

/* Whether an environment value is exactly "0": how the STINT_SWITCH,
 * STINT_COLD, STINT_QUIET, STINT_RETS and STINT_SWITCH_SELF switches
 * turn a feature off (budget_setup). */
static int env_is_zero(const char *v)
{
	return v && v[0] == '0' && !v[1];
}

static const char *base_name(const char *p)
{
	const char *b = p;
	for (; *p; p++)
		if (*p == '/')
			b = p + 1;
	return b;
}

static uint64_t parse_hex(const char **s)
{
	uint64_t v = 0;
	for (;; (*s)++) {
		char c = **s;
		if (c >= '0' && c <= '9')
			v = v * 16 + (uint64_t)(c - '0');
		else if (c >= 'a' && c <= 'f')
			v = v * 16 + (uint64_t)(c - 'a' + 10);
		else
			return v;
	}
}

/* Parses "lo-hi perms off dev inode   path" in place (line NUL-terminated). */
static int parse_maps_line(char *line, struct maps_line *m)
{
	const char *s = line;
	m->lo = parse_hex(&s);
	if (*s++ != '-')
		return 0;
	m->hi = parse_hex(&s);
	for (int field = 0; field < 1; field++) {
		while (*s == ' ')
			s++;
		while (*s && *s != ' ')
			s++;
	}
	while (*s == ' ')
		s++;
	m->off = parse_hex(&s);
	for (int field = 0; field < 2; field++) {
		while (*s == ' ')
			s++;
		while (*s && *s != ' ')
			s++;
	}
	while (*s == ' ')
		s++;
	m->path = s;
	return 1;
}

/*
 * Calls fn for every line of /proc/self/maps until it returns nonzero.
 * Uses the shared scratch buffer: the caller holds scratch_lock.
 */
static int maps_scan(maps_fn fn, void *arg) { return maps_scan_buf(G()->proc.scratch, SCRATCH_SIZE, fn, arg); }

/* maps_scan through buf (cap bytes), for callers without the global state. */
static int maps_scan_buf(char *buf, size_t cap, maps_fn fn, void *arg)
{
	long fd = open_ro("/proc/self/maps");
	if (sys_failed(fd))
		return 0;
	size_t have = 0;
	int done = 0;
	while (!done) {
		long r = sys_call3(SYS_read, fd, (long)(buf + have), (long)(cap - 1 - have));
		if (r <= 0)
			break;
		have += (size_t)r;
		size_t start = 0;
		for (size_t i = 0; i < have; i++) {
			if (buf[i] != '\n')
				continue;
			buf[i] = 0;
			struct maps_line m;
			if (parse_maps_line(buf + start, &m) && fn(&m, arg)) {
				done = 1;
				break;
			}
			start = i + 1;
		}
		if (done)
			break;
		if (start == 0 && have == cap - 1)
			have = 0; /* an absurdly long line: skip it */
		else {
			s_memcpy(buf, buf + start, have - start);
			have -= start;
		}
	}
	sys_call1(SYS_close, fd);
	return done;
}

static int find_path_cb(struct maps_line *m, void *arg)
{
	struct find_path_arg *a = arg;
	if (m->path[0] != '/' || m->lo - m->off != a->base)
		return 0;
	size_t n = s_strlen(m->path);
	if (n >= a->cap)
		n = a->cap - 1;
	s_memcpy(a->out, m->path, n);
	a->out[n] = 0;
	return 1;
}

static uint32_t add_module(struct stint_global *g, uint64_t base, uint64_t size, const char *path,
			   const uint8_t *bid, uint32_t bid_len, int rewritten)
{
	uint32_t i = __atomic_fetch_add(&g->proc.nmodules, 1, __ATOMIC_ACQ_REL);
	if (i >= MAX_MODULES || i >= DST_MODULE_NONE)
		return DST_MODULE_NONE;
	struct gmodule *m = &g->proc.modules[i];
	m->base = base;
	m->size = size;
	m->rewritten = (uint32_t)rewritten;
	if (bid_len > 32)
		bid_len = 32;
	m->build_id_len = bid_len;
	s_memcpy(m->build_id, bid, bid_len);
	size_t n = path ? s_strlen(path) : 0;
	if (n >= sizeof m->path)
		n = sizeof m->path - 1;
	s_memcpy(m->path, path, n);
	m->path[n] = 0;
	__atomic_store_n(&m->ready, 1, __ATOMIC_RELEASE);
	write_module(g, i);
	return i;
}

/* Entries of the module table in use now. */
static uint32_t modules_n(struct stint_global *g)
{
	uint32_t n = __atomic_load_n(&g->proc.nmodules, __ATOMIC_ACQUIRE);
	return n > MAX_MODULES ? MAX_MODULES : n;
}

static uint32_t module_of(struct stint_global *g, uint64_t a)
{
	uint32_t n = modules_n(g);
	for (uint32_t i = 0; i < n; i++) {
		struct gmodule *m = &g->proc.modules[i];
		if (__atomic_load_n(&m->ready, __ATOMIC_ACQUIRE) && a - m->base < m->size)
			return i;
	}
	return DST_MODULE_NONE;
}

static int lookup_cb(struct maps_line *m, void *arg)
{
	struct lookup_arg *l = arg;
	if (l->found == 1) {
		/* extend over the file's further mappings */
		if (s_strncmp(m->path, l->path, sizeof l->path) == 0) {
			l->hi = m->hi;
			return 0;
		}
		return 1;
	}
	if (m->path[0] == '/' && m->off == 0) {
		size_t n = s_strlen(m->path);
		if (n < sizeof l->cur_path) {
			s_memcpy(l->cur_path, m->path, n + 1);
			l->cur_base = m->lo;
		}
	}
	if (l->a < m->lo || l->a >= m->hi)
		return 0;
	if (m->path[0] == '/' && s_strncmp(m->path, l->cur_path, sizeof l->cur_path) == 0) {
		l->found = 1;
		s_memcpy(l->path, l->cur_path, sizeof l->path);
		l->base = l->cur_base;
		l->hi = m->hi;
		return 0;
	}
	l->found = 2;
	l->lo = m->lo;
	l->hi = m->hi;
	return 1;
}

/* PROCMAP_QUERY (Linux 6.11): an ioctl on /proc/self/maps that answers
 * for one mapping (uapi linux/fs.h, struct procmap_query). */
struct s_procmap_query {
	uint64_t size, query_flags, query_addr;
	uint64_t vma_start, vma_end, vma_flags, vma_page_size, vma_offset, inode;
	uint32_t dev_major, dev_minor, vma_name_size, build_id_size;
	uint64_t vma_name_addr, build_id_addr;
};
#define SYS_ioctl 16
#define S_PROCMAP_QUERY 0xc0686611UL /* _IOWR('f', 17, struct procmap_query) */
#define S_PROCMAP_COVERING_OR_NEXT 0x10
#define PROCMAP_WALK_MAX 64

/* The mapping holding addr (or the next one above, with next) into *ln,
 * its name into name (cap bytes, "" for none); 0 or -errno. */
static long procmap_at(long fd, uint64_t addr, int next, struct maps_line *ln, char *name, uint32_t cap)
{
	static const struct s_procmap_query zero;
	struct s_procmap_query q = zero;
	q.size = sizeof q;
	q.query_flags = next ? S_PROCMAP_COVERING_OR_NEXT : 0;
	q.query_addr = addr;
	q.vma_name_addr = (uint64_t)name;
	q.vma_name_size = cap;
	name[0] = 0; /* what a mapping without a name keeps: the kernel writes none */
	long r = sys_call3(SYS_ioctl, fd, (long)S_PROCMAP_QUERY, (long)&q);
	if (sys_failed(r))
		return r;
	ln->lo = q.vma_start;
	ln->hi = q.vma_end;
	ln->off = q.vma_offset;
	ln->path = name;
	return 0;
}

/*
 * lookup_cb's answer for l->a without reading all of /proc/self/maps:
 * behind a few hundred stub chunks that is hundreds of lines the kernel
 * prints for each unknown destination (three in a `select 1` of a
 * rewritten libsqlite3, 7% of its samples). A file's module starts at
 * its mapping of offset 0, where lookup_cb's walk would find it: the
 * mapping at a less its offset. lookup_cb then walks the mappings from
 * there, as many queries as the module has mappings. 1 when answered,
 * 0 to scan instead (no PROCMAP_QUERY, or a module laid out otherwise).
 * The caller holds scratch_lock (the names go through the scratch).
 */
static int lookup_query(struct stint_global *g, struct lookup_arg *l)
{
	if (g->test.no_procmap == 1)
		return 0;
	long fd = open_ro("/proc/self/maps");
	if (sys_failed(fd))
		return 0;
	char *name = g->proc.scratch;
	struct maps_line ln;
	int done = 0;
	long r = procmap_at(fd, l->a, 0, &ln, name, SCRATCH_SIZE);
	if (r == -S_ENOENT) {
		done = 1; /* nothing mapped there: no line holds it */
	} else if (!sys_failed(r) && name[0] != '/') {
		lookup_cb(&ln, l);
		done = 1;
	} else if (!sys_failed(r) && ln.off <= ln.lo) {
		uint64_t at = ln.lo - ln.off;
		if (!sys_failed(procmap_at(fd, at, 0, &ln, name, SCRATCH_SIZE)) && ln.off == 0 && ln.lo == at) {
			for (int k = 0; k < PROCMAP_WALK_MAX; k++) {
				if (lookup_cb(&ln, l) || ln.hi <= at) {
					done = 1;
					break;
				}
				at = ln.hi;
				r = procmap_at(fd, at, 1, &ln, name, SCRATCH_SIZE);
				done = r == -S_ENOENT; /* the last mapping: the scan would end too */
				if (sys_failed(r))
					break;
			}
		}
	}
	sys_call1(SYS_close, fd);
	if (!done && g->test.no_procmap == 2) {
		l->found = 0; /* the test's: the query alone, unanswered */
		return 1;
	}
	return done;
}

/* Map a destination outside every known module to a module id (or NONE). */
static uint32_t module_of_unknown(struct stint_global *g, uint64_t a)
{
	uint32_t na = __atomic_load_n(&g->proc.nanon, __ATOMIC_ACQUIRE);
	if (na > MAX_ANON)
		na = MAX_ANON;
	for (uint32_t i = 0; i < na; i++)
		if (a >= g->proc.anon[i].lo && a < g->proc.anon[i].hi)
			return DST_MODULE_NONE;
	if (na >= MAX_ANON)
		return DST_MODULE_NONE; /* stop scanning: bounded work */
	if (!lock_bounded(&g->scratch_lock))
		return DST_MODULE_NONE;
	uint32_t id = module_of(g, a); /* someone may have added it meanwhile */
	int known_anon = 0;
	na = __atomic_load_n(&g->proc.nanon, __ATOMIC_ACQUIRE);
	for (uint32_t i = 0; id == DST_MODULE_NONE && i < na && i < MAX_ANON; i++)
		if (a >= g->proc.anon[i].lo && a < g->proc.anon[i].hi)
			known_anon = 1;
	if (id == DST_MODULE_NONE && !known_anon) {
		static const struct lookup_arg zero;
		struct lookup_arg l = zero;
		l.a = a;
		if (!lookup_query(g, &l)) {
			l = zero; /* a walk given up may have begun an answer */
			l.a = a;
			maps_scan(lookup_cb, &l);
		}
		if (l.found == 1) {
			id = add_module(g, l.base, l.hi - l.base, l.path, 0, 0, 0);
		} else {
			uint64_t lo = a & ~(uint64_t)4095, hi = lo + 4096;
			if (l.found == 2) {
				lo = l.lo;
				hi = l.hi;
			}
			uint32_t k = __atomic_load_n(&g->proc.nanon, __ATOMIC_ACQUIRE);
			if (k < MAX_ANON) {
				g->proc.anon[k].lo = lo;
				g->proc.anon[k].hi = hi;
				__atomic_store_n(&g->proc.nanon, k + 1, __ATOMIC_RELEASE);
			}
		}
	}
	unlock(&g->scratch_lock);
	return id;
}

static uint64_t fs_base(void)
{
	uint64_t fs;
	__asm__ volatile("rdfsbase %0" : "=r"(fs));
	return fs;
}

/* The first use of a thread-pointer mode: whether glibc's tid field at
 * thread pointer fs is this thread's id, read with process_vm_readv,
 * which fails instead of faulting. Decides the mode (ok, else
 * TID_SYSCALL) and returns the id. */
static uint32_t tid_check(struct stint_global *g, uint64_t fs, uint32_t ok)
{
	int32_t t = 0, real = (int32_t)sys_call0(SYS_gettid);
	struct { uint64_t base, len; } local = {(uint64_t)&t, sizeof t}, remote = {fs + GLIBC_TID_OFF, sizeof t};
	long n = sys_call6(SYS_process_vm_readv, sys_call0(SYS_getpid), (long)&local, 1, (long)&remote, 1, 0);
	__atomic_store_n(&g->proc.tid_mode, n == (long)sizeof t && t == real ? ok : TID_SYSCALL, __ATOMIC_RELAXED);
	return (uint32_t)real;
}

static uint32_t current_tid(struct stint_global *g)
{
	uint32_t mode = __atomic_load_n(&g->proc.tid_mode, __ATOMIC_RELAXED);
	if (mode == TID_GLIBC) {
		uint64_t fs = fs_base();
		if (fs) {
			int32_t t = *(volatile int32_t *)(fs + GLIBC_TID_OFF);
			if (t > 0)
				return (uint32_t)t;
		}
	} else if (mode == TID_PROBE) {
		uint64_t fs = fs_base();
		if (fs)
			return tid_check(g, fs, TID_GLIBC);
	} else if (mode == TID_SEG) {
		int32_t t;
		__asm__ volatile("movl %%fs:%c1, %0" : "=r"(t) : "i"(GLIBC_TID_OFF));
		if (t > 0)
			return (uint32_t)t;
	} else if (mode == TID_SEG_PROBE) {
		/*
		 * Without FSGSBASE (a VM whose kernel does not offer it) the
		 * thread pointer cannot be read cheaply, but a load relative
		 * to %fs reads the same word; a system call costs about 1 us
		 * here, and emit asks for the thread id at every event. The
		 * load faults where %fs is 0, which in a dynamically linked
		 * process only a thread made by a raw clone with a zero TLS
		 * pointer has (and that thread cannot use libc either): so
		 * this mode is only for dynamically linked programs (static
		 * ones run our probes before their TLS exists), and is taken
		 * once the word proved to be the thread id here.
		 */
		uint64_t fs = 0;
		if (!sys_failed(sys_call2(SYS_arch_prctl, S_ARCH_GET_FS, (long)&fs)) && fs)
			return tid_check(g, fs, TID_SEG);
	}
	return (uint32_t)sys_call0(SYS_gettid);
}

/*
 * Anonymous read-write memory of len bytes. With huge, from 512 KB up, it
 * is 2 MiB aligned and asked to be huge, so that it is faulted in a huge
 * page at a time. On this VM each 4 KiB page costs about 11 us to fault
 * in (the hypervisor's shadow tables), but a fresh huge page can cost it
 * as much as all its small ones: only for memory written all over (the
 * off-switch's lists where sites are listed by the thousand). The log's
 * set this way (557 KB, filled whole at start) took a 'select 1' from
 * 16.2 to 17.4 ms of task-clock (medians of 41 interleaved rounds; means
 * 18.9 and 20.6), and stayed in small pages. Returns the address, or
 * -errno.
 */
static long anon_huge(uint64_t len, int huge)
{
	len = (len + 4095) & ~(uint64_t)4095;
	if (!huge || len < HUGE_PAGE / 4)
		return sys_mmap(0, len, S_PROT_READ | S_PROT_WRITE, S_MAP_PRIVATE | S_MAP_ANONYMOUS | S_MAP_NORESERVE, -1, 0);
	uint64_t hl = (len + HUGE_PAGE - 1) & ~(HUGE_PAGE - 1);
	long t = sys_mmap(0, hl + HUGE_PAGE, S_PROT_READ | S_PROT_WRITE, S_MAP_PRIVATE | S_MAP_ANONYMOUS | S_MAP_NORESERVE, -1, 0);
	if (sys_failed(t))
		return t;
	uint64_t at = ((uint64_t)t + HUGE_PAGE - 1) & ~(HUGE_PAGE - 1);
	if (at > (uint64_t)t)
		sys_call2(SYS_munmap, t, (long)(at - (uint64_t)t));
	sys_call2(SYS_munmap, (long)(at + hl), (long)((uint64_t)t + HUGE_PAGE - at));
	sys_call3(SYS_madvise, (long)at, (long)hl, S_MADV_HUGEPAGE);
	return (long)at;
}

/* MADV_POPULATE_WRITE of the pages holding [lo, hi): 0, or -errno. */
static long populate_write(uint64_t lo, uint64_t hi)
{
	lo &= ~(uint64_t)4095;
	hi = (hi + 4095) & ~(uint64_t)4095;
	if (hi <= lo)
		return 0;
	long r = sys_call3(SYS_madvise, (long)lo, (long)(hi - lo), S_MADV_POPULATE_WRITE);
	return sys_failed(r) ? r : 0;
}

/*
 * The link count of this process's /proc/<pid>/task (2 + its threads)
 * into *st, by an fstat of a descriptor kept open, else by a stat of the
 * path. A sqlite3 run asks about 900 times, and the path's walk through
 * /proc was most of the cost (perf: about 4 ms a run in the kernel's
 * lookups on this VM). The descriptor is checked each time: the program
 * may close it, or give its number to another file (its identity then
 * differs). A forked child inherits its parent's, opened for another
 * pid: fork_child_reopen closes it, and until that has run the child
 * stats the path.
 */
static long task_stat_path(struct s_stat *st)
{
	return sys_call4(SYS_newfstatat, S_AT_FDCWD, (long)"/proc/self/task", (long)st, 0);
}

/* Whether fd1 (1 + a descriptor) is still the one task_stat opened:
 * open, on the same file (*st: its fstat). */
static int task_fd_ours(const struct stint_global *g, int32_t fd1, struct s_stat *st)
{
	return fd1 > 0 && !sys_failed(sys_call2(SYS_fstat, fd1 - 1, (long)st)) && st->dev == g->proc.task_dev && st->ino == g->proc.task_ino;
}

static long task_stat(struct stint_global *g, struct s_stat *st)
{
	int alive = __atomic_load_n(&W()->alive, __ATOMIC_ACQUIRE) == 1;
	int32_t fd1 = __atomic_load_n(&g->proc.task_fd1, __ATOMIC_ACQUIRE);
	if (fd1 > 0) {
		if (!alive) /* a child before fork_child_reopen: its parent's */
			return task_stat_path(st);
		if (task_fd_ours(g, fd1, st))
			return 0;
		/* the program closed it or gave its number to another file: not
		 * ours to close */
		__atomic_compare_exchange_n(&g->proc.task_fd1, &fd1, 0, 0, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED);
	}
	if (!alive || !lock_bounded(&g->scratch_lock))
		return task_stat_path(st);
	long r = 0;
	if (__atomic_load_n(&g->proc.task_fd1, __ATOMIC_ACQUIRE) == 0) {
		long fd = open_high("/proc/self/task", S_O_RDONLY | S_O_DIRECTORY | S_O_CLOEXEC, 0);
		r = sys_failed(fd) ? fd : sys_call2(SYS_fstat, fd, (long)st);
		if (!sys_failed(r)) {
			g->proc.task_dev = st->dev;
			g->proc.task_ino = st->ino;
			__atomic_store_n(&g->proc.task_fd1, (int32_t)fd + 1, __ATOMIC_RELEASE);
		} else if (!sys_failed(fd)) {
			sys_call1(SYS_close, fd);
		}
	} else {
		r = task_stat_path(st);
	}
	unlock(&g->scratch_lock);
	return r;
}
