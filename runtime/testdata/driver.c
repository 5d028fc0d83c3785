/*
 * driver.c - exercises the runtime without the rewriter.
 *
 * Built by runtime_test.go as
 *   gcc -O1 -pthread -I../include -I../src driver.c ../src/stint.c ../src/entry.S
 * (hosted: libc and pthreads are allowed here, and only here).
 *
 * It builds two fake modules in RWX memory, each a struct stint_module
 * with probes, patches and (module B) a chunk over a small "code" buffer:
 *   A: STINT_MF_EVERY, one value (syscall) probe and one direct probe;
 *   B: default mode, direct probes with arms and patches, indirect probes.
 * Then 8 threads record through stint_record (and a SIGUSR1 handler
 * interrupts them to record too), the process forks a child
 * that records some more, and the process ends as argv[1] says:
 *   return  stint_fini, 10 more events, stint_fini again, exit normally
 *   _exit   _exit(0) without fini
 *   kill    print "ready" and wait to be SIGKILLed
 *   regs    only check that stint_probe_entry preserves registers and flags
 *   hit     only check the hit table (hit.h) in front of stint_probe_entry
 *   restore only check stint_restore_atomic on an RWX buffer
 *   untraced expect the runtime to be off (bad $STINT_OUT or STINT_DISABLE=1)
 *   closefd close the trace's fd, reuse the number: the runtime must not touch it
 *   blob F  load the built blob F twice at random addresses, as a shared
 *           object (DT_INIT, probes, DT_FINI) and as an executable (e_entry
 *           on a fake initial stack), and call it through its header
 * It prints key=value lines that the Go test reads, and "FAIL ..." lines
 * for checks it makes itself.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include "stint_abi.h"
#include "hit.h"

void stint_module_init(struct stint_module *m, char **envp, const uint64_t *auxv);
uint64_t stint_init_shared(const uint8_t *blob, long argc, char **argv, char **envp);
uint64_t stint_fini(const uint8_t *blob);
void stint_record(const struct stint_probe *p, uint64_t v);
void stint_counters(uint64_t out[3]);
int stint_restore_atomic(uint64_t addr, const uint8_t *orig, uint32_t len);

#define NTHREADS 8
#define NITER 5000

#define MOD_OFF 0x10000
#define PROBES_OFF 0x11000
#define PATCHES_OFF 0x13000
#define CHUNKS_OFF 0x14000
#define BLOB_OFF 0x18000
#define IMAGE_END 0x20000
#define TRAMP_LO 0x2000
#define TRAMP_HI 0x3000
#define CHUNK_SRC 0x3000
#define STUBS_OFF 0x15000
#define DEPS_OFF 0x16000
#define CHUNK_VADDR 0x40000000ULL

#define NDIRECT 12
#define NINDIRECT 4

static int failures;
#define CHECK(cond, ...)                                \
	do {                                            \
		if (!(cond)) {                          \
			printf("FAIL %s:%d: ", __FILE__, __LINE__); \
			printf(__VA_ARGS__);            \
			printf("\n");                   \
			failures++;                     \
		}                                       \
	} while (0)

static uint8_t *ra, *rb;      /* module regions */
static uint8_t *anon;         /* an anonymous mapping: indirect destinations */
static struct stint_probe *pa, *pb;
static uint64_t ind_dst[3];

static uint8_t *region(void)
{
	void *p = mmap(0, IMAGE_END, PROT_READ | PROT_WRITE | PROT_EXEC, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED) {
		perror("mmap");
		exit(2);
	}
	memset(p, 0xcc, IMAGE_END);
	return p;
}

static struct stint_module *mod_at(uint8_t *r, uint32_t flags, uint32_t nprobes)
{
	struct stint_module *m = (void *)(r + MOD_OFF);
	memset(m, 0, sizeof *m);
	m->magic = STINT_MODULE_MAGIC;
	m->abi_version = STINT_ABI_VERSION;
	m->flags = flags;
	m->tool = STINT_TOOL_BRANCH;
	m->nprobes = nprobes;
	m->self_vaddr = MOD_OFF;
	m->image_end = IMAGE_END;
	m->probes_vaddr = PROBES_OFF;
	m->patches_vaddr = PATCHES_OFF;
	m->chunks_vaddr = CHUNKS_OFF;
	m->text_lo = 0;
	m->text_hi = 0x1000;
	m->tramp_lo = TRAMP_LO;
	m->tramp_hi = TRAMP_HI;
	m->build_id_len = 20;
	for (int i = 0; i < 20; i++)
		m->build_id[i] = (uint8_t)(i + (flags & STINT_MF_EVERY ? 0xa0 : 0xb0));
	snprintf(m->options, sizeof m->options, "tool=branch every=%d", flags & STINT_MF_EVERY ? 1 : 0);
	return m;
}

static void probe_init(struct stint_probe *p, uint8_t *r, uint64_t src, uint64_t dst, uint8_t kind, uint8_t flags)
{
	memset(p, 0, sizeof *p);
	p->src = src;
	p->dst = dst;
	p->kind = kind;
	p->flags = flags;
	p->patch = STINT_NO_PATCH;
	p->module_back = (uint32_t)((uint8_t *)p - (r + MOD_OFF));
}

/* patches of module B: {addr, len, restorable, expect restored} */
static const struct {
	uint64_t addr;
	uint8_t len, flags;
	int restored;
} patches[] = {
	{0x100, 5, STINT_PATCH_RESTORABLE, 1}, /* one aligned 8-byte word */
	{0x206, 6, STINT_PATCH_RESTORABLE, 1}, /* needs the 16-byte word */
	{0x30e, 4, STINT_PATCH_RESTORABLE | STINT_PATCH_AT_START, 1}, /* crosses a 16-byte boundary: restored with membarrier (restore_sync) */
	{0x31f, 4, STINT_PATCH_RESTORABLE | STINT_PATCH_AT_START, 0}, /* crosses a 16-byte boundary from the last byte of a word: no atomic 2-byte "jmp ." */
	{0x400, 5, 0, 0},                      /* not restorable */
	{0x500, 2, STINT_PATCH_RESTORABLE, 1},
};
#define NPATCHES (sizeof patches / sizeof patches[0])

static void setup(void)
{
	ra = region();
	rb = region();
	anon = mmap(0, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	/* module A: every occurrence */
	mod_at(ra, STINT_MF_EVERY | STINT_MF_EXEC, 2);
	pa = (void *)(ra + PROBES_OFF);
	probe_init(&pa[0], ra, 0x10, 0, STINT_K_SYSCALL, STINT_PF_VALUE);
	probe_init(&pa[1], ra, 0x20, 0x30, STINT_K_CALL, STINT_PF_DIRECT);

	/* module B: default mode */
	struct stint_module *mb = mod_at(rb, STINT_MF_SHARED, NDIRECT + NINDIRECT);
	pb = (void *)(rb + PROBES_OFF);
	struct stint_patch *pt = (void *)(rb + PATCHES_OFF);
	mb->npatches = NPATCHES;
	for (unsigned i = 0; i < NPATCHES; i++) {
		memset(&pt[i], 0, sizeof pt[i]);
		pt[i].addr = patches[i].addr;
		pt[i].len = patches[i].len;
		pt[i].flags = patches[i].flags;
		pt[i].nprobes = 2;
		pt[i].remaining = 2;
		for (int j = 0; j < patches[i].len; j++) {
			pt[i].orig[j] = (uint8_t)(0x40 + i * 16 + j); /* the "original" */
			rb[patches[i].addr + j] = (uint8_t)(j == 0 ? 0xe9 : 0x11 * j); /* the "patch" */
		}
	}
	for (int i = 0; i < NDIRECT; i++) {
		struct stint_probe *p = &pb[i];
		probe_init(p, rb, 0x100 + 0x100 * (uint64_t)(i / 2), 0x800 + 8 * (uint64_t)i,
			   i % 2 ? STINT_K_JCC_NOT_TAKEN : STINT_K_JCC_TAKEN, STINT_PF_DIRECT);
		p->patch = (uint32_t)(i / 2);
		p->arm = TRAMP_LO + 0x40 * (uint64_t)i + 2;
		p->arm_to = TRAMP_LO + 0x800 + 0x10 * (uint64_t)i;
		*(int32_t *)(rb + p->arm) = 0x01020304;
	}
	/* probe 9's arm crosses a cache line: must not be retargeted */
	pb[9].arm = TRAMP_LO + 0x40 * 9 + 62;
	*(int32_t *)(rb + pb[9].arm) = 0x01020304;
	for (int i = 0; i < NINDIRECT; i++)
		probe_init(&pb[NDIRECT + i], rb, 0x900 + 0x10 * (uint64_t)i, 0, STINT_K_IND_CALL, 0);
	ind_dst[0] = (uint64_t)(rb + 0x777);    /* inside module B */
	ind_dst[1] = (uint64_t)(void *)&fwrite; /* inside libc: a non-rewritten module */
	ind_dst[2] = (uint64_t)(anon + 0x10);   /* anonymous memory */

	struct stint_chunk *ch = (void *)(rb + CHUNKS_OFF);
	memset(ch, 0, sizeof *ch);
	ch->vaddr = CHUNK_VADDR;
	ch->size = 4096;
	mb->nchunks = 1;
#if STINT_ABI_VERSION >= 2
	/* one chunk mapped from a stub area holding one stub at 0x10; if it
	 * cannot be mapped, every patch depends on it */
	struct stint_stub *st = (void *)(rb + STUBS_OFF);
	memset(st, 0, sizeof *st);
	st->off = 0x10;
	memcpy(st->code, "\xe9\x01\x02\x03\x04", 5);
	mb->stubs_vaddr = STUBS_OFF;
	mb->nstubs = 1;
	mb->stub_area_size = 8192;
	uint32_t *deps = (void *)(rb + DEPS_OFF);
	for (unsigned i = 0; i < NPATCHES; i++)
		deps[i] = i;
	mb->deps_vaddr = DEPS_OFF;
	mb->ndeps = NPATCHES;
	ch->src_off = 0;
	ch->ndeps = NPATCHES;
	ch->deps_off = 0;
#else
	/* one chunk copied from CHUNK_SRC to CHUNK_VADDR */
	ch->src_vaddr = CHUNK_SRC;
	for (int i = 0; i < 4096; i++)
		rb[CHUNK_SRC + i] = (uint8_t)(i * 7);
#endif

	/* B is entered through the blob's DT_INIT path: a fake blob header */
	struct stint_blob_header *h = (void *)(rb + BLOB_OFF);
	memset(h, 0, sizeof *h);
	h->magic = STINT_BLOB_MAGIC;
	h->abi_version = STINT_ABI_VERSION;
	h->module_rel = (int64_t)MOD_OFF - BLOB_OFF;
	mb->orig_fini = 0;
	mb->orig_entry = 0;

	printf("region_a=%llu\nregion_b=%llu\nanon=%llu\nlibc_dst=%llu\n", (unsigned long long)(uintptr_t)ra,
	       (unsigned long long)(uintptr_t)rb, (unsigned long long)(uintptr_t)anon,
	       (unsigned long long)ind_dst[1]);
}

static unsigned long handler_calls;
static int workers_done, stop_signals;
static pthread_t workers[NTHREADS];

static void *worker(void *arg)
{
	uint64_t t = (uint64_t)(uintptr_t)arg;
	for (uint64_t i = 0; i < NITER; i++) {
		stint_record(&pa[0], t << 32 | i);
		if (i < 3)
			for (int j = 0; j < NDIRECT; j++)
				stint_record(&pb[j], 0);
		if (i % 7 == 0)
			for (int j = 0; j < NINDIRECT; j++)
				stint_record(&pb[NDIRECT + j], ind_dst[(i / 7 + t + (uint64_t)j) % 3]);
	}
	__atomic_fetch_add(&workers_done, 1, __ATOMIC_SEQ_CST);
	return 0;
}


static void on_signal(int sig)
{
	(void)sig;
	stint_record(&pa[1], 0);
	__atomic_fetch_add(&handler_calls, 1, __ATOMIC_SEQ_CST);
}

/* Interrupts the workers with SIGUSR1 for as long as they run. */
static void *signaller(void *arg)
{
	(void)arg;
	while (!__atomic_load_n(&stop_signals, __ATOMIC_SEQ_CST))
		for (int t = 0; t < NTHREADS; t++) {
			pthread_kill(workers[t], SIGUSR1);
			usleep(20);
		}
	return 0;
}

static void check_patching(void)
{
	for (int i = 0; i < NDIRECT; i++) {
		int32_t want = (int32_t)(pb[i].arm_to - (pb[i].arm + 4));
		int32_t have = *(int32_t *)(rb + pb[i].arm);
		if (i == 9)
			CHECK(have == 0x01020304, "probe %d: arm across a line was retargeted", i);
		else
			CHECK(have == want, "probe %d: arm is %#x, want %#x", i, have, want);
	}
	struct stint_patch *pt = (void *)(rb + PATCHES_OFF);
	for (unsigned i = 0; i < NPATCHES; i++) {
		CHECK(pt[i].remaining == 0, "patch %u: remaining %u", i, pt[i].remaining);
		int same = memcmp(rb + patches[i].addr, pt[i].orig, patches[i].len) == 0;
		CHECK(same == patches[i].restored, "patch %u: restored=%d, want %d", i, same, patches[i].restored);
		/* the bytes around a patch stay as they were */
		CHECK(rb[patches[i].addr - 1] == 0xcc && rb[patches[i].addr + patches[i].len] == 0xcc,
		      "patch %u: neighbouring bytes changed", i);
	}
	for (int i = 0; i < 4096; i++) {
#if STINT_ABI_VERSION >= 2
		uint8_t want = i >= 0x10 && i < 0x15 ? (uint8_t)"\xe9\x01\x02\x03\x04"[i - 0x10] : 0xcc;
#else
		uint8_t want = (uint8_t)(i * 7);
#endif
		if (((uint8_t *)(uintptr_t)((uint64_t)(uintptr_t)rb + CHUNK_VADDR))[i] != want) {
			CHECK(0, "chunk byte %d differs", i);
			break;
		}
	}
}

/* Calls stint_probe_entry like a thunk and stores the registers after it. */
uint64_t regs_after[8];
void regcheck(struct stint_probe *p);
__asm__(".section .note.GNU-stack,\"\",@progbits\n.text\n"
	".globl regcheck\n"
	"regcheck:\n"
	"  push %rbx\n  push %rbp\n  push %r12\n"
	"  mov %rdi, %r12\n"
	"  movabs $0x1111111111111111, %rax\n"
	"  movabs $0x2222222222222222, %rcx\n"
	"  movabs $0x3333333333333333, %rdx\n"
	"  movabs $0x8888888888888888, %r8\n"
	"  movabs $0x9999999999999999, %r9\n"
	"  movabs $0xaaaaaaaaaaaaaaaa, %r10\n"
	"  movabs $0xbbbbbbbbbbbbbbbb, %r11\n"
	"  lea -128(%rsp), %rsp\n"
	"  push %rdi\n  push %rsi\n"
	"  mov %r12, %rdi\n"
	"  mov $0x5a5a, %esi\n"
	"  sub $8, %rsp\n" /* misalign: the runtime must realign */
	"  stc\n  std\n"
	"  call stint_probe_entry\n"
	"  pushfq\n"
	"  cld\n"
	"  add $16, %rsp\n" /* skip the saved flags below, reread them after */
	"  lea regs_after(%rip), %rbx\n"
	"  mov %rax, 0(%rbx)\n  mov %rcx, 8(%rbx)\n  mov %rdx, 16(%rbx)\n  mov %r8, 24(%rbx)\n"
	"  mov %r9, 32(%rbx)\n  mov %r10, 40(%rbx)\n  mov %r11, 48(%rbx)\n"
	"  mov -16(%rsp), %rax\n  mov %rax, 56(%rbx)\n"
	"  pop %rsi\n  pop %rdi\n"
	"  lea 128(%rsp), %rsp\n"
	"  pop %r12\n  pop %rbp\n  pop %rbx\n"
	"  ret\n");

static void check_regs_of(struct stint_probe *p)
{
	regcheck(p);
	static const uint64_t want[7] = {0x1111111111111111ULL, 0x2222222222222222ULL, 0x3333333333333333ULL,
					 0x8888888888888888ULL, 0x9999999999999999ULL, 0xaaaaaaaaaaaaaaaaULL,
					 0xbbbbbbbbbbbbbbbbULL};
	static const char *names[7] = {"rax", "rcx", "rdx", "r8", "r9", "r10", "r11"};
	for (int i = 0; i < 7; i++)
		CHECK(regs_after[i] == want[i], "%s changed: %#llx", names[i], (unsigned long long)regs_after[i]);
	CHECK(regs_after[7] & 1, "CF cleared");
	CHECK(regs_after[7] & 0x400, "DF cleared");
}

static void check_regs(void) { check_regs_of(&pa[0]); }

void stint_probe_entry(void);
void call_probe(struct stint_probe *p, uint64_t v, void *fn);

/*
 * The hit table: a pair module B recorded, and pushed out of the probe's
 * four-entry inline cache since, comes back from stint_probe_entry before
 * the C code, which would have moved it to the cache's front; a slot
 * whose check word is wrong is a miss (and the C code writes the slot
 * again); registers and flags are as they were after a hit.
 */
static void push_out(struct stint_probe *p, uint64_t from)
{
	for (uint64_t k = 1; k <= 4; k++)
		call_probe(p, from + 16 * k, (void *)stint_probe_entry);
}

static void check_hit(void)
{
	struct stint_module *mb = (void *)(rb + MOD_OFF);
	struct stint_probe *p = &pb[NDIRECT];
	uint64_t v1 = ind_dst[0];
	CHECK(mb->hit == 1, "module B does not answer from the hit table");
	call_probe(p, v1, (void *)stint_probe_entry);
	push_out(p, v1);
	uint64_t front = p->cache;
	CHECK(front == v1 + 64, "inline cache front %#llx after five records", (unsigned long long)front);
	uint64_t *e = (uint64_t *)(uintptr_t)(HIT_ADDR + ((uint64_t)(uintptr_t)p + v1) % HIT_SLOTS * 24);
	CHECK(e[0] == (uint64_t)(uintptr_t)p && e[1] == v1 && e[2] == e[0] + v1, "slot of (p, v1) not written");
	call_probe(p, v1, (void *)stint_probe_entry);
	CHECK(p->cache == front, "a recorded pair reached the C code");
	e[2]++;
	call_probe(p, v1, (void *)stint_probe_entry);
	CHECK(p->cache == v1, "a slot with a wrong check word answered");
	CHECK(e[2] == e[0] + v1, "the C code did not write the slot again");
	regcheck(p); /* records (p, 0x5a5a) */
	push_out(p, v1 + 1024);
	check_regs_of(p); /* a hit */
	CHECK(p->cache == v1 + 1024 + 64, "the second 0x5a5a reached the C code");
}

/* ---- "blob": the built blob itself, loaded at a random address ---- */

/* call_probe(p, v, fn): what a trampoline's thunk does around the call. */
void call_probe(struct stint_probe *p, uint64_t v, void *fn);
/* run_exec(entry, sp): jump to entry with %rsp = sp and %rdx = 0x1234, as
 * the kernel or ld.so would; exec_target returns from run_exec. */
void run_exec(void *entry, uint64_t *sp);
void exec_target(void);
uint64_t exec_saved_rsp, exec_seen_rsp, exec_seen_rdx;
__asm__(".text\n"
	"call_probe:\n"
	"  lea -128(%rsp), %rsp\n  push %rdi\n  push %rsi\n"
	"  call *%rdx\n"
	"  pop %rsi\n  pop %rdi\n  lea 128(%rsp), %rsp\n"
	"  ret\n"
	"run_exec:\n"
	"  push %rbx\n  push %rbp\n  push %r12\n  push %r13\n  push %r14\n  push %r15\n"
	"  mov %rsp, exec_saved_rsp(%rip)\n"
	"  mov %rsi, %rsp\n"
	"  mov $0x1234, %edx\n"
	"  jmp *%rdi\n"
	"exec_target:\n"
	"  mov %rsp, exec_seen_rsp(%rip)\n"
	"  mov %rdx, exec_seen_rdx(%rip)\n"
	"  mov exec_saved_rsp(%rip), %rsp\n"
	"  pop %r15\n  pop %r14\n  pop %r13\n  pop %r12\n  pop %rbp\n  pop %rbx\n"
	"  ret\n");

static int init_args_ok, fini_called;
static int orig_argc;
static char **orig_argv, **orig_envp;

static void orig_init(int argc, char **argv, char **envp)
{
	init_args_ok = argc == orig_argc && argv == orig_argv && envp == orig_envp;
}

static void orig_fini(void) { fini_called++; }

#define BLOB_AT 0x40000

/* A region with a copy of the blob at BLOB_AT and its module at MOD_OFF. */
static uint8_t *blob_module(const uint8_t *blob, size_t n, uint32_t flags, struct stint_blob_header **hp)
{
	uint8_t *r = mmap(0, 0x100000, PROT_READ | PROT_WRITE | PROT_EXEC, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	memset(r, 0xcc, 0x100000);
	struct stint_module *m = mod_at(r, flags, 2);
	m->image_end = 0x100000;
	m->text_lo = 0x1000;
	m->text_hi = 0x2000;
	m->tramp_lo = BLOB_AT;
	m->tramp_hi = BLOB_AT + n;
	memcpy(r + BLOB_AT, blob, n);
	struct stint_blob_header *h = (void *)(r + BLOB_AT);
	h->module_rel = (int64_t)MOD_OFF - BLOB_AT;
	struct stint_probe *p = (void *)(r + PROBES_OFF);
	probe_init(&p[0], r, 0x1010, 0, STINT_K_SYSCALL, STINT_PF_VALUE);
	probe_init(&p[1], r, 0x1020, 0x1100, STINT_K_CALL, STINT_PF_DIRECT);
	p[1].arm = 0x1802;
	p[1].arm_to = 0x1900;
	*hp = h;
	return r;
}

static int blob_mode(const char *path, int argc, char **argv, char **envp)
{
	FILE *f = fopen(path, "rb");
	if (!f) {
		perror(path);
		return 2;
	}
	static uint8_t blob[1 << 20];
	size_t n = fread(blob, 1, sizeof blob, f);
	fclose(f);

	/* a shared object: DT_INIT, probes, DT_FINI */
	struct stint_blob_header *h;
	uint8_t *r = blob_module(blob, n, STINT_MF_SHARED, &h);
	struct stint_module *m = (void *)(r + MOD_OFF);
	m->orig_entry = (uint64_t)(uintptr_t)&orig_init - (uint64_t)(uintptr_t)r;
	m->orig_fini = (uint64_t)(uintptr_t)&orig_fini - (uint64_t)(uintptr_t)r;
	orig_argc = argc;
	orig_argv = argv;
	orig_envp = envp;
	((void (*)(int, char **, char **))(r + BLOB_AT + h->entry_init))(argc, argv, envp);
	CHECK(init_args_ok, "DT_INIT stub did not pass the original arguments on");
	CHECK(m->base == (uint64_t)(uintptr_t)r, "module base %#llx", (unsigned long long)m->base);
	struct stint_probe *p = (void *)(r + PROBES_OFF);
	void *probe = r + BLOB_AT + h->probe;
	for (uint64_t i = 0; i < NITER; i++)
		call_probe(&p[0], 0xbULL << 32 | i, probe);
	call_probe(&p[1], 0, probe);
	call_probe(&p[1], 0, probe);
	CHECK(*(int32_t *)(r + 0x1802) == 0x1900 - 0x1806, "arm not retargeted: %#x", *(int32_t *)(r + 0x1802));

	/* an executable: e_entry with a fake initial stack */
	struct stint_blob_header *he;
	uint8_t *re = blob_module(blob, n, STINT_MF_EXEC, &he);
	struct stint_module *me = (void *)(re + MOD_OFF);
	me->orig_entry = (uint64_t)(uintptr_t)&exec_target - (uint64_t)(uintptr_t)re;
	static uint64_t stack[1 << 15] __attribute__((aligned(16)));
	uint64_t *sp = &stack[(1 << 15) - 64];
	int k = 0;
	sp[k++] = 1;
	sp[k++] = (uint64_t)(uintptr_t)"fake";
	sp[k++] = 0;
	for (char **e = envp; *e; e++)
		if (strncmp(*e, "STINT_", 6) == 0 && k < 40)
			sp[k++] = (uint64_t)(uintptr_t)*e;
	sp[k++] = 0;
	sp[k++] = 31; /* AT_EXECFN */
	sp[k++] = (uint64_t)(uintptr_t)"/fake/exe";
	sp[k++] = 0;
	sp[k++] = 0;
	run_exec(re + BLOB_AT + he->entry_exec, sp);
	CHECK(exec_seen_rsp == (uint64_t)(uintptr_t)sp, "e_entry stub changed %%rsp");
	CHECK(exec_seen_rdx == 0x1234, "e_entry stub changed %%rdx to %#llx", (unsigned long long)exec_seen_rdx);
	CHECK(me->runtime_state & 1, "executable module not active");
	struct stint_probe *pe = (void *)(re + PROBES_OFF);
	call_probe(&pe[1], 0, re + BLOB_AT + he->probe);

	((uint64_t(*)(void))(r + BLOB_AT + h->entry_fini))();
	CHECK(fini_called == 1, "original DT_FINI called %d times", fini_called);
	printf("pid=%d\nregion_b=%llu\nregion_e=%llu\nfailures=%d\n", (int)getpid(), (unsigned long long)(uintptr_t)r,
	       (unsigned long long)(uintptr_t)re, failures);
	return failures != 0;
}

int main(int argc, char **argv, char **envp)
{
	const char *mode = argc > 1 ? argv[1] : "return";
	setvbuf(stdout, 0, _IOLBF, 0);
	if (strcmp(mode, "blob") == 0 && argc > 2)
		return blob_mode(argv[2], argc, argv, envp);
	setup();
	if (getenv("DRIVER_CHUNK_CLASH")) {
		/* something already lives where module B's chunk must go */
		void *at = (void *)(uintptr_t)((uint64_t)(uintptr_t)rb + CHUNK_VADDR);
		if (mmap(at, 4096, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0) != at)
			CHECK(0, "cannot map the clashing page");
	}
	stint_module_init((struct stint_module *)(ra + MOD_OFF), envp, 0);
	stint_init_shared(rb + BLOB_OFF, argc, argv, envp);
	/* the modes that only check the probe entry, then end the run */
	void (*check)(void) = strcmp(mode, "regs") == 0 ? check_regs : strcmp(mode, "hit") == 0 ? check_hit : 0;
	if (check) {
		check();
		printf("pid=%d\n", (int)getpid());
		stint_fini(rb + BLOB_OFF);
		printf("failures=%d\n", failures);
		return failures != 0;
	}
	if (strcmp(mode, "restore") == 0) {
		/* stint_restore_atomic on a real RWX buffer, word by word */
		uint8_t *buf = mmap(0, 4096, PROT_READ | PROT_WRITE | PROT_EXEC, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		for (unsigned at = 0; at < 64; at++)
			for (unsigned len = 1; len <= 16; len++) {
				uint8_t orig[16];
				memset(buf, 0xcc, 128);
				for (unsigned j = 0; j < len; j++)
					orig[j] = (uint8_t)(j + 1);
				int ok = stint_restore_atomic((uint64_t)(uintptr_t)(buf + at), orig, len);
				int fits = (at & ~7u) + 8 >= at + len || (at & ~15u) + 16 >= at + len;
				CHECK(ok == fits, "at=%u len=%u: ok=%d want %d", at, len, ok, fits);
				for (unsigned j = 0; j < 128; j++) {
					uint8_t want = (ok && j >= at && j < at + len) ? orig[j - at] : 0xcc;
					if (buf[j] != want) {
						CHECK(0, "at=%u len=%u: byte %u is %#x want %#x", at, len, j, buf[j], want);
						break;
					}
				}
			}
		printf("failures=%d\n", failures);
		return failures != 0;
	}

	if (strcmp(mode, "untraced") == 0) {
		/* setup failed or STINT_DISABLE=1: every patch holds its original bytes again */
		struct stint_patch *pt = (void *)(rb + PATCHES_OFF);
		for (unsigned i = 0; i < NPATCHES; i++)
			CHECK(memcmp(rb + patches[i].addr, pt[i].orig, patches[i].len) == 0, "patch %u not restored", i);
		for (uint64_t i = 0; i < 100; i++)
			stint_record(&pa[0], i);
		stint_record(&pb[0], 0);
#if STINT_ABI_VERSION >= 2
		/* ABI 2: a lost chunk only unprobes its sites; the module traces on */
		if (!getenv("DRIVER_CHUNK_CLASH"))
#endif
			CHECK(pb[0].state == 0, "an untraced module recorded");
		stint_fini(rb + BLOB_OFF);
		printf("failures=%d\n", failures);
		return failures != 0;
	}

	if (strcmp(mode, "closefd") == 0) {
		/* the program closes every fd, ours too (at the top of the
		 * table: open_high), and puts a file of its own at the number */
		int tfd = -1;
		char link[4096], name[300];
		DIR *d = opendir("/proc/self/fd");
		for (struct dirent *e; d && tfd < 0 && (e = readdir(d));) {
			snprintf(name, sizeof name, "/proc/self/fd/%s", e->d_name);
			ssize_t n = readlink(name, link, sizeof link - 1);
			if (n > 6 && memcmp(link + n - 6, ".arrow", 6) == 0)
				tfd = atoi(e->d_name);
		}
		if (d)
			closedir(d);
		CHECK(tfd >= 3, "trace fd not found");
		close(tfd);
		const char *mine = getenv("DRIVER_OWN_FILE");
		int own = open(mine, O_WRONLY | O_CREAT | O_TRUNC, 0644);
		CHECK(own >= 0 && dup2(own, tfd) == tfd, "own file not put at fd %d", tfd);
		if (own != tfd)
			close(own);
		CHECK(write(tfd, "hello", 5) == 5, "write own file");
		for (uint64_t i = 0; i < 8 * 4096; i++)
			stint_record(&pa[0], i);
		close(tfd);
		printf("failures=%d\n", failures);
		return failures != 0;
	}

	/* Signal handlers record too, interrupting the runtime mid-event. */
	struct sigaction sa;
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = on_signal;
	sa.sa_flags = SA_RESTART;
	sigaction(SIGUSR1, &sa, 0);

	for (uintptr_t t = 0; t < NTHREADS; t++)
		pthread_create(&workers[t], 0, worker, (void *)(t + 1));
	pthread_t sig;
	pthread_create(&sig, 0, signaller, 0);
	/* fork while the other threads are busy inside the runtime */
	fflush(stdout);
	pid_t busy_child = fork();
	if (busy_child == 0) {
		for (uint64_t i = 0; i < 100; i++)
			stint_record(&pa[0], 0xeULL << 32 | i);
		stint_record(&pb[NDIRECT + 1], (uint64_t)(uintptr_t)(void *)&fputs);
		stint_fini(rb + BLOB_OFF);
		_exit(0);
	}
	while (__atomic_load_n(&workers_done, __ATOMIC_SEQ_CST) < NTHREADS)
		usleep(1000);
	__atomic_store_n(&stop_signals, 1, __ATOMIC_SEQ_CST);
	pthread_join(sig, 0);
	for (int t = 0; t < NTHREADS; t++)
		pthread_join(workers[t], 0);
	signal(SIGUSR1, SIG_IGN);
	int bst;
	waitpid(busy_child, &bst, 0);
	printf("busy_child=%d\nbusy_child_status=%d\nfputs=%llu\n", (int)busy_child, bst,
	       (unsigned long long)(uintptr_t)(void *)&fputs);
	printf("handler_calls=%lu\n", (unsigned long)__atomic_load_n(&handler_calls, __ATOMIC_SEQ_CST));
	check_patching();

	if (strcmp(mode, "kill") != 0) {
		fflush(stdout);
		pid_t c = fork();
		if (c == 0) {
			for (uint64_t i = 0; i < 100; i++)
				stint_record(&pa[0], 0xcULL << 32 | i);
			stint_record(&pb[0], 0);                       /* recorded by the parent: nothing */
			stint_record(&pb[NDIRECT], (uint64_t)(rb + 0x999)); /* new pair: recorded */
			stint_fini(rb + BLOB_OFF);
			_exit(0);
		}
		int st;
		waitpid(c, &st, 0);
		printf("child=%d\nchild_status=%d\n", (int)c, st);
	}
	uint64_t cnt[3];
	stint_counters(cnt);
	printf("pid=%d\nevents=%llu\ndropped=%llu\nhash_full=%llu\nfailures=%d\n", (int)getpid(),
	       (unsigned long long)cnt[0], (unsigned long long)cnt[1], (unsigned long long)cnt[2], failures);
	fflush(stdout);
	if (strcmp(mode, "_exit") == 0)
		_exit(0);
	if (strcmp(mode, "kill") == 0) {
		printf("ready\n");
		fflush(stdout);
		for (;;)
			pause();
	}
	stint_fini(rb + BLOB_OFF);
	/* Events after a flush (later finalisers) reopen the stream. */
	for (uint64_t i = 0; i < 10; i++)
		stint_record(&pa[0], 0xdULL << 32 | i);
	stint_fini(rb + BLOB_OFF);
	return failures != 0;
}
