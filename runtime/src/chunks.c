/*
 * chunks.c - maps a module's trampoline chunks (ABI 2).
 *
 * The module carries a list of stubs (offset in the stub area, 5 bytes of
 * code) instead of the chunks' bytes, and since ABI 7 the area itself in
 * its file. We map every chunk from the file's area at the chunk's
 * address, or, without it, build the area once in a memfd and map from
 * that, so chunks that overlap in the area share physical pages. A chunk that cannot be mapped
 * costs only its sites: the patches that depend on it get their original
 * bytes back and the program runs them unprobed.
 */
#include "stint.h"

#define SYS_memfd_create 319
#define S_MFD_CLOEXEC 1U
#define STUB_RUN_PAGES 64 /* pages written to the memfd per pwrite */

/* Index of the first stub with off >= lo (stubs are sorted by off). */
static uint32_t stubs_from(const struct stint_stub *st, uint32_t n, uint64_t lo)
{
	_Static_assert(__builtin_offsetof(struct stint_stub, off) == 0, "the key first");
	return first_key_at_least(st, n, sizeof *st, lo);
}

/*
 * Write the stubs into dst, which shows the stub area's bytes [lo, lo+len).
 * Only the pages that hold stubs are touched (filled with int3 first): the
 * area may span gigabytes of which a few pages hold stubs, and untouched
 * pages of a memfd or an anonymous mapping cost no memory.
 */
static void stubs_fill(uint8_t *dst, uint64_t lo, uint64_t len, const struct stint_stub *st, uint32_t n)
{
	uint64_t filled = 0; /* pages [0, filled) of dst are done */
	for (uint32_t i = stubs_from(st, n, lo); i < n && st[i].off < lo + len; i++) {
		uint64_t rel = st[i].off - lo;
		if (rel + 5 > len)
			break;
		for (uint64_t pg = rel >> 12; pg <= (rel + 4) >> 12; pg++)
			if (pg >= filled) {
				/* int3, eight bytes at a time (pages are aligned) */
				uint64_t *w = (uint64_t *)(void *)(dst + (pg << 12));
				for (int k = 0; k < 512; k++)
					w[k] = 0xccccccccccccccccULL;
				filled = pg + 1;
			}
		s_memcpy(dst + rel, st[i].code, 5);
	}
}

/*
 * Write the stubs into the memfd (area bytes) with pwrite, a run of
 * consecutive stub pages at a time, through buf (STUB_RUN_PAGES pages):
 * no page faults, unlike writing through a mapping. 0 or -errno.
 */
static long stubs_pwrite(long fd, uint64_t area, const struct stint_stub *st, uint32_t n, uint8_t *buf)
{
	uint64_t run = 0, npg = 0; /* buf holds area pages [run, run+npg) */
	for (uint32_t i = 0; i < n; i++) {
		if (st[i].off + 5 > area)
			break;
		uint64_t p0 = st[i].off >> 12, p1 = (st[i].off + 4) >> 12;
		if (npg && (p0 > run + npg || p1 >= run + STUB_RUN_PAGES)) {
			long r = pwrite_all(fd, buf, npg << 12, run << 12);
			if (r)
				return r;
			npg = 0;
		}
		if (!npg)
			run = p0;
		for (; run + npg <= p1; npg++) {
			uint64_t *w = (uint64_t *)(void *)(buf + (npg << 12));
			for (int k = 0; k < 512; k++)
				w[k] = 0xccccccccccccccccULL;
		}
		s_memcpy(buf + (st[i].off - (run << 12)), st[i].code, 5);
	}
	return npg ? pwrite_all(fd, buf, npg << 12, run << 12) : 0;
}

#define CHUNK_CHECKS 8 /* stubs compared per chunk (chunk_there) */

/*
 * Whether [at, at + c->size) holds chunk c already: a library that was
 * dlclosed and is opened again at the same address finds the chunks its
 * first load mapped outside the loader's reservation still there (the
 * loader unmaps only its own span), and mapping them again fails with
 * EEXIST. CHUNK_CHECKS of the chunk's stubs, spread over it (its first
 * and last among them), are compared in one process_vm_readv, which
 * fails where nothing readable is mapped instead of faulting. Comparing
 * every stub cost a dlopen of libsqlite3 180 ms (a thousand stubs in
 * each of 434 chunks); another mapping that matched eight stubs' jumps
 * at their exact offsets, and not the rest, is not a thing that happens.
 */
static int chunk_there(uint64_t at, const struct stint_chunk *c, const struct stint_stub *st, uint32_t nst)
{
	struct {
		uint64_t base, len;
	} local[CHUNK_CHECKS], remote[CHUNK_CHECKS];
	uint8_t got[CHUNK_CHECKS][5];
	uint32_t lo = stubs_from(st, nst, c->src_off), hi = stubs_from(st, nst, c->src_off + c->size);
	while (hi > lo && st[hi - 1].off + 5 > c->src_off + c->size)
		hi--;
	if (hi <= lo)
		return 0;
	uint32_t n = hi - lo < CHUNK_CHECKS ? hi - lo : CHUNK_CHECKS, pick[CHUNK_CHECKS];
	for (uint32_t k = 0; k < n; k++) {
		pick[k] = n == 1 ? lo : lo + (uint32_t)((uint64_t)(hi - 1 - lo) * k / (n - 1));
		local[k].base = (uint64_t)got[k];
		local[k].len = remote[k].len = 5;
		remote[k].base = at + (st[pick[k]].off - c->src_off);
	}
	if (sys_call6(SYS_process_vm_readv, sys_call0(SYS_getpid), (long)local, n, (long)remote, n, 0) != (long)n * 5)
		return 0;
	for (uint32_t k = 0; k < n; k++)
		for (int b = 0; b < 5; b++)
			if (got[k][b] != st[pick[k]].code[b])
				return 0;
	return 1;
}

/* The decimal number v holds (up to a newline), at most 10 digits, or -1. */
static long decimal(const char *v)
{
	const char *e;
	uint64_t n = v ? parse_dec(v, &e) : 0;
	if (!v || e == v || (*e && *e != '\n') || e - v > 10)
		return -1;
	return (long)n;
}

/* STINT_TEST_FAIL_CHUNK=N (a test hook, see stint_abi.h): N, or -1. */
static long chunk_fail_hook(char **envp)
{
	return decimal(env_get(envp, STINT_TEST_FAIL_CHUNK_ENV));
}

static int count_line(struct maps_line *m, void *arg)
{
	(void)m;
	++*(uint64_t *)arg;
	return 0;
}

/*
 * How many of a module's n chunks it may map without crowding the
 * program out of vm.max_map_count (past it the kernel refuses every new
 * mapping, the program's too, and each chunk is one): all of them while
 * they are under a quarter of the limit, else at most half of what the
 * process has left (its mappings counted in /proc/self/maps). The limit
 * is /proc/sys/vm/max_map_count's, or STINT_TEST_MAX_MAP_COUNT's.
 */
static uint32_t chunks_allowed(uint32_t n, char **envp)
{
	char buf[4096];
	long max = decimal(env_get(envp, STINT_TEST_MAX_MAP_COUNT_ENV));
	if (max < 0 && read_small("/proc/sys/vm/max_map_count", buf, 32) > 0)
		max = decimal(buf);
	if (max < 0 || (uint64_t)n * 4 < (uint64_t)max)
		return n;
	uint64_t used = 0;
	if (!maps_scan_buf(buf, sizeof buf, count_line, &used) && !used)
		return n; /* cannot tell */
	uint64_t room = (uint64_t)max > used ? ((uint64_t)max - used) / 2 : 0;
	return room < n ? (uint32_t)room : n;
}

/*
 * Write back the original bytes of the patches chunk c depends on. Returns
 * the number of sites (patches with probes) this unprobed that were still
 * patched.
 */
static uint64_t chunk_restore(struct stint_module *m, uint64_t base, const struct stint_chunk *c, int writable)
{
	const struct stint_patch *pt = (const void *)(base + m->patches_vaddr);
	const uint32_t *deps = (const void *)(base + m->deps_vaddr);
	uint64_t sites = 0;
	if (c->deps_off > m->ndeps || c->ndeps > m->ndeps - c->deps_off)
		return 0;
	for (uint32_t k = 0; k < c->ndeps; k++) {
		uint32_t d = deps[c->deps_off + k];
		if (d >= m->npatches || pt[d].len == 0 || pt[d].len > 16)
			continue;
		uint8_t *at = (uint8_t *)(base + pt[d].addr);
		int same = 1;
		for (uint32_t j = 0; j < pt[d].len; j++)
			if (at[j] != pt[d].orig[j])
				same = 0;
		if (same)
			continue; /* restored already (another chunk's deps) */
		if (pt[d].nprobes)
			sites++;
		if (writable)
			s_memcpy(at, pt[d].orig, pt[d].len);
	}
	return sites;
}

#define SYS_pread64 17

/*
 * Open the module's own file for its stub area (ABI 7): the rewriter
 * stored the area there behind a header (struct stint_stub_file), so the
 * chunks map the page cache's copy, shared by every run, and nothing is
 * written at start. The file is found as /proc/self/exe for an executable
 * and as the file mapped at the load base for a shared object; it is used
 * only if its header carries the module's tag (a file rewritten again, or
 * stripped, is not). Returns the fd, or -1: then the area is built in a
 * memfd as before.
 */
static long stubs_file_open(const struct stint_module *m, uint64_t base, char **envp, char *path, size_t cap)
{
	const char *no = env_get(envp, STINT_TEST_NO_STUB_FILE_ENV), *nomem = env_get(envp, STINT_TEST_NO_MEMFD_ENV);
	if ((no && no[0] == '1') || (nomem && nomem[0] == '1') || !m->stub_file_off || (m->stub_file_off & 4095) || !m->stub_file_tag)
		return -1;
	const char *open_path = "/proc/self/exe";
	if (!(m->flags & STINT_MF_EXEC)) {
		/* path is also the caller's: the module's registration needs it
		 * too, and scanning again after the chunks are mapped reads
		 * hundreds of lines more */
		char buf[4096];
		struct find_path_arg a = {base, path, cap};
		path[0] = 0;
		if (!maps_scan_buf(buf, sizeof buf, find_path_cb, &a) || !path[0])
			return -1;
		open_path = path;
	}
	long fd = open_ro(open_path);
	if (sys_failed(fd))
		return -1;
	struct stint_stub_file h;
	long r = sys_call4(SYS_pread64, fd, (long)&h, sizeof h, (long)m->stub_file_off);
	if (r != (long)sizeof h || h.magic != STINT_STUB_FILE_MAGIC || h.tag != m->stub_file_tag ||
	    h.area_size != m->stub_area_size || h.nstubs != m->nstubs) {
		sys_call1(SYS_close, fd);
		return -1;
	}
	return fd;
}

#define SYS_mremap 25
#define S_MREMAP_MAYMOVE 1
#define S_MREMAP_FIXED 2

/* Shrink [*lo, *hi) to its larger part beside [xlo, xhi) when they overlap. */
static void range_clip(uint64_t *lo, uint64_t *hi, uint64_t xlo, uint64_t xhi)
{
	if (xhi <= *lo || xlo >= *hi)
		return;
	if (xlo > *lo && xlo - *lo >= (*hi > xhi ? *hi - xhi : 0))
		*hi = xlo;
	else
		*lo = xhi > *hi ? *hi : xhi;
}

extern const uint8_t stint_blob_start[] __attribute__((visibility("hidden"))); /* entry.S: the blob's header */

/*
 * Replace the whole 2 MiB pages of [lo, hi) (the load segment ph of a
 * module loaded at base, whose file is fd) with anonymous memory asked to
 * be huge, holding the same bytes (read from the file), with protection
 * prot. Anything failing leaves the file's mapping as it is.
 */
static void seg_huge(const struct elf64_phdr *ph, uint64_t base, uint64_t lo, uint64_t hi, long fd, int prot)
{
	lo = (lo + HUGE_PAGE - 1) & ~(HUGE_PAGE - 1);
	hi &= ~(HUGE_PAGE - 1);
	if (hi <= lo)
		return;
	uint64_t len = hi - lo, foff = ph->offset + (lo - base - ph->vaddr);
	long t = sys_mmap(0, len + HUGE_PAGE, prot, S_MAP_PRIVATE | S_MAP_ANONYMOUS | S_MAP_NORESERVE, -1, 0);
	if (sys_failed(t))
		return;
	uint64_t at = ((uint64_t)t + HUGE_PAGE - 1) & ~(HUGE_PAGE - 1);
	sys_call3(SYS_madvise, (long)at, (long)len, S_MADV_HUGEPAGE);
	uint64_t done = 0;
	while (done < len) {
		long r = sys_call4(SYS_pread64, fd, (long)(at + done), (long)(len - done), (long)(foff + done));
		if (sys_failed(r) || r == 0)
			break;
		done += (uint64_t)r;
	}
	long r = done == len ? sys_call6(SYS_mremap, (long)at, (long)len, (long)len, S_MREMAP_MAYMOVE | S_MREMAP_FIXED, (long)lo, 0) : -1;
	if (sys_failed(r)) {
		sys_call2(SYS_munmap, t, (long)(len + HUGE_PAGE));
		return;
	}
	if (at > (uint64_t)t)
		sys_call2(SYS_munmap, t, (long)(at - (uint64_t)t));
	sys_call2(SYS_munmap, (long)(at + len), (long)((uint64_t)t + HUGE_PAGE - at));
}

/*
 * Back the probe and patch tables and the trampolines with huge pages
 * where they cover whole 2 MiB pages. On this VM (shadow paging) the
 * first touch of each 4 KiB page costs the thread about 5.5 us even after
 * MADV_POPULATE_WRITE made it (the hypervisor fills its own table then):
 * a logged start-up touches every page of the tables (libsqlite3: 1,800
 * of them, about 10 ms), a run many of the trampolines'. A 2 MiB page is
 * filled once. The bytes are read from the module's file (fd) into an
 * anonymous region asked to be huge, which then replaces them (mremap);
 * reading them through the mapping would touch each page, the cost this
 * saves. Nothing has written them yet: the module header (written
 * first), the gate page, the dynamic section (which the rewriter moves
 * there, and ld.so may write) and the runtime's own code are left out,
 * and no relocation lands in the rewriter's segments. The trampolines
 * only when they could be made writable (writable), as the file's
 * mapping was.
 */
static void tables_huge(const struct stint_module *m, uint64_t base, long fd, int writable)
{
	struct elf64_ehdr eh;
	struct elf64_phdr ph[32];
	if (sys_call4(SYS_pread64, fd, (long)&eh, sizeof eh, 0) != (long)sizeof eh || !elf64_ident_ok(&eh) || eh.phentsize != sizeof ph[0] ||
	    eh.phnum == 0 || eh.phnum > 32)
		return;
	long want = (long)(eh.phnum * sizeof ph[0]);
	if (sys_call4(SYS_pread64, fd, (long)ph, want, (long)eh.phoff) != want)
		return;
	for (int i = 0; i < eh.phnum; i++) {
		if (ph[i].type != 1 /* PT_LOAD */ || (ph[i].offset & 4095) != (ph[i].vaddr & 4095))
			continue;
		int tables = (ph[i].flags & 2 /* PF_W */) && ph[i].vaddr <= m->probes_vaddr && m->probes_vaddr < ph[i].vaddr + ph[i].filesz;
		int tramps = writable && m->tramp_hi > m->tramp_lo && ph[i].vaddr <= m->tramp_lo && m->tramp_hi <= ph[i].vaddr + ph[i].filesz;
		if (!tables && !tramps)
			continue;
		uint64_t lo = base + ph[i].vaddr, hi = lo + ph[i].filesz;
		if (tramps) {
			lo = base + m->tramp_lo;
			hi = base + m->tramp_hi;
		}
		range_clip(&lo, &hi, base + m->self_vaddr, base + m->self_vaddr + sizeof *m);
		range_clip(&lo, &hi, (uint64_t)stint_blob_start,
			   (uint64_t)stint_blob_start + ((const struct stint_blob_header *)(const void *)stint_blob_start)->size);
		if (m->gate_vaddr)
			range_clip(&lo, &hi, base + m->gate_vaddr, base + m->gate_vaddr + 4096);
		for (int k = 0; k < eh.phnum; k++)
			if (ph[k].type == 2 /* PT_DYNAMIC */)
				range_clip(&lo, &hi, base + ph[k].vaddr, base + ph[k].vaddr + ph[k].memsz);
		seg_huge(&ph[i], base, lo, hi, fd, tables ? S_PROT_READ | S_PROT_WRITE : S_PROT_READ | S_PROT_WRITE | S_PROT_EXEC);
	}
}

/* The stub area built in a memfd from the stub list; -errno if that fails
 * (then each chunk becomes an anonymous copy). */
static long stubs_memfd(const struct stint_stub *st, uint32_t nst, uint64_t area, char **envp)
{
	const char *nomemfd = env_get(envp, STINT_TEST_NO_MEMFD_ENV);
	long fd = nomemfd && nomemfd[0] == '1' ? -38 /* ENOSYS */
					       : sys_call2(SYS_memfd_create, (long)"stint-stubs", S_MFD_CLOEXEC);
	if (sys_failed(fd))
		return fd;
	long r = area > fsize_limit() ? -27 /* EFBIG, not SIGXFSZ: a memfd counts against ulimit -f too */
				       : sys_call2(SYS_ftruncate, fd, (long)area);
	long buf = sys_failed(r) ? r : sys_mmap(0, STUB_RUN_PAGES << 12, S_PROT_READ | S_PROT_WRITE,
					       S_MAP_PRIVATE | S_MAP_ANONYMOUS, -1, 0);
	if (!sys_failed(buf)) {
		r = stubs_pwrite(fd, area, st, nst, (uint8_t *)buf);
		sys_call2(SYS_munmap, buf, STUB_RUN_PAGES << 12);
	} else {
		r = buf;
	}
	if (sys_failed(r)) {
		sys_call1(SYS_close, fd);
		return r;
	}
	return fd;
}

/*
 * Map every chunk of m. Never fails: a chunk that cannot be mapped has its
 * dependent patches restored (text must be writable: writable != 0), and
 * one line on stderr says what was lost. Returns how many were lost.
 */
static uint32_t chunks_map(struct stint_module *m, uint64_t base, char **envp, int writable, char *path, size_t cap, int roomy)
{
	if (m->nchunks == 0)
		return 0;
	const struct stint_chunk *ch = (const void *)(base + m->chunks_vaddr);
	const struct stint_stub *st = (const void *)(base + m->stubs_vaddr);
	uint32_t nst = m->nstubs;
	uint64_t area = m->stub_area_size;
	long fail = chunk_fail_hook(envp);

	/* The area from the module's file (private: the page cache's pages),
	 * else built in a memfd (shared: one copy for all chunks), else each
	 * chunk anonymous and filled. */
	long fd = stubs_file_open(m, base, envp, path, cap);
	long foff = 0, share = S_MAP_SHARED;
	if (fd >= 0) {
		/* the copy cost a call chain of libsqlite3 2 ms at start
		 * (select 1, 21 pairs) for no gain in its runs (0.99-1.00) */
		const char *huge = env_get(envp, "STINT_HUGE");
		if ((!huge || huge[0] != '0') && TABLES_WRITTEN(m) && roomy)
			tables_huge(m, base, fd, writable);
		foff = (long)m->stub_file_off + 4096;
		share = S_MAP_PRIVATE;
	} else {
		fd = stubs_memfd(st, nst, area, envp);
	}

	uint32_t lost = 0, allowed = chunks_allowed(m->nchunks, envp);
	uint64_t sites = 0;
	long err = 0;
	for (uint32_t i = 0; i < m->nchunks; i++) {
		const struct stint_chunk *c = &ch[i];
		uint64_t at = base + c->vaddr;
		int fixed = (c->flags & STINT_CHUNK_RESERVED) ? S_MAP_FIXED : S_MAP_FIXED_NOREPLACE;
		long r;
		if ((long)i == fail)
			r = -S_EEXIST;
		else if (i >= allowed)
			r = -12; /* ENOMEM, as the kernel says past vm.max_map_count */
		else if (c->src_off > area || c->size > area - c->src_off)
			r = -22; /* EINVAL: a malformed table */
		else if (fd >= 0)
			r = sys_mmap(at, c->size, S_PROT_READ | S_PROT_EXEC, share | fixed, (int)fd, foff + (long)c->src_off);
		else
			r = sys_mmap(at, c->size, S_PROT_READ | S_PROT_WRITE, S_MAP_PRIVATE | S_MAP_ANONYMOUS | fixed, -1, 0);
		if (sys_failed(r) && foff && r != -S_EEXIST && r != -22) {
			/* the file cannot be mapped executable here (a noexec
			 * mount, a file system without mmap): the memfd, then */
			sys_call1(SYS_close, fd);
			foff = 0;
			share = S_MAP_SHARED;
			fd = stubs_memfd(st, nst, area, envp);
			i--;
			continue;
		}
		if (!sys_failed(r) && (uint64_t)r != at) {
			/* an old kernel ignoring MAP_FIXED_NOREPLACE */
			sys_call2(SYS_munmap, r, (long)c->size);
			r = -S_EEXIST;
		}
		if (r == -S_EEXIST && !(c->flags & STINT_CHUNK_RESERVED) && (long)i != fail && chunk_there(at, c, st, nst))
			continue; /* mapped by an earlier load of this library (dlclose keeps it) */
		if (sys_failed(r)) {
			if (!err)
				err = -r;
			lost++;
			sites += chunk_restore(m, base, c, writable);
			continue;
		}
		if (fd < 0) {
			stubs_fill((uint8_t *)at, c->src_off, c->size, st, nst);
			sys_call3(SYS_mprotect, (long)at, (long)c->size, S_PROT_READ | S_PROT_EXEC);
		}
	}
	if (fd >= 0)
		sys_call1(SYS_close, fd);
	if (lost) {
		char line[256];
		struct sbuf b = {line, 0, sizeof line - 1};
		sb_puts(&b, "stint: ");
		sb_putu(&b, lost);
		sb_puts(&b, " of ");
		sb_putu(&b, m->nchunks);
		sb_puts(&b, " trampoline chunks could not be mapped (");
		sb_puts(&b, errno_name(err));
		if (allowed < m->nchunks)
			sb_puts(&b, ": vm.max_map_count leaves too little room");
		sb_puts(&b, "); ");
		sb_putu(&b, sites);
		sb_puts(&b, " sites left unprobed\n");
		size_t n = b.len < b.cap ? b.len : b.cap;
		say_write(line, n);
	}
	return lost;
}
