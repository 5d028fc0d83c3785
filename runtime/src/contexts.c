/*
 * contexts.c - the context-preserving mode (rewrite --tool call
 * --context, STINT_MF_CONTEXT).
 *
 * A budget or the once-per-outcome rule cuts call sequences, so a call
 * tree rebuilt from call and ret events has gaps. Here the runtime sees
 * every call and return of a context module (the module is in --every
 * mode and its gate is never closed) and keeps a shadow stack per
 * thread; each distinct calling context - (parent context, call site,
 * callee) - gets an id and is written once, as a KindContext row with
 * its parent's id. The rows are a tree by construction: a context is
 * never written before its parent (an ancestor not yet written, because
 * it was first seen while the budget was spent, is written first).
 *
 * Frames are popped by stack pointer, not by matching return addresses:
 * a frame remembers the program's %rsp at its call, and any later call or
 * return at or above that address means the callee is gone. That one
 * rule covers returns, tail calls (the tail callee's ret pops its
 * caller's frame), longjmp and C++ exceptions (the next event is higher
 * up the stack), and calls made from code we do not see (a return to
 * an unprobed caller pops what lies below it). A signal handler runs
 * below the interrupted frame and so appears as its child, which is
 * what the stack says.
 *
 * What it costs: every call and ret goes through the runtime (a hash
 * lookup of the context, a push or pops). That tracking is not charged
 * to the budget, which limits only the writing of new contexts: turning
 * the tracking off would make every later context wrong. Measured in
 * benchmarks/ (cct).
 *
 * A forked child starts a new trace: its contexts restart from empty
 * tables (ids are per trace file).
 */
#include "stint.h"

#define CTX_SLOTS   (1u << 20) /* distinct contexts per process */
#define CTX_PROBES  64
#define CTX_THREADS 4096       /* thread slots (by tid, never freed) */
#define CTX_DEPTH   4096       /* frames per thread */

struct ctx_slot {
	uint64_t tag;     /* hash | 1 once the slot is filled (written last) */
	uint64_t src, dst;
	uint32_t parent;
	uint16_t src_module, dst_module;
	uint32_t id;
	uint32_t written; /* its KindContext row is in the trace */
};

struct ctx_frame {
	uint64_t sp;      /* the program's %rsp at the call */
	uint32_t ctx;
	uint32_t pad;
};

struct ctx_thread {
	uint32_t tid;     /* 0 = free */
	uint32_t busy;    /* inside ctx_record (a signal handler's probes skip) */
	uint32_t depth;
	uint32_t pad;
	uint64_t frames;  /* struct ctx_frame[CTX_DEPTH], mapped on first use */
};

struct ctx_state {
	uint32_t lock, nids;
	uint64_t full, deep, busy_skips;
	uint32_t by_id[CTX_SLOTS];        /* id -> slot index + 1 */
	struct ctx_thread threads[CTX_THREADS];
	struct ctx_slot slots[CTX_SLOTS];
};

/* How far above stint_probe_entry's %rsp the program's %rsp was: every
 * probe call steps over the red zone (128) and pushes %rdi and %rsi (16)
 * before its call (8). A ret probe's inline cache check does the same
 * first but undoes it (cacheRestore) before its call, so the offset is
 * the same (rewrite/tramp.go: thunk, callOnly, retCacheCheck). */
#define CTX_SP_OFF (8 + 16 + 128)

static struct ctx_state *ctx_get(struct stint_global *g)
{
	struct ctx_state *c = (struct ctx_state *)__atomic_load_n(&g->ctx.state, __ATOMIC_ACQUIRE);
	if (c)
		return c;
	if (!lock_bounded(&g->ctx.lock))
		return 0;
	c = (struct ctx_state *)g->ctx.state;
	if (!c) {
		long a = sys_mmap(0, sizeof(struct ctx_state), S_PROT_READ | S_PROT_WRITE,
				  S_MAP_PRIVATE | S_MAP_ANONYMOUS | S_MAP_NORESERVE, -1, 0);
		if (sys_failed(a)) {
			if (!g->ctx.warned) {
				g->ctx.warned = 1;
				say_line("cannot map the context tables; calling contexts are not recorded");
			}
		} else {
			c = (struct ctx_state *)a;
			__atomic_store_n(&g->ctx.state, (uint64_t)a, __ATOMIC_RELEASE);
		}
	}
	unlock(&g->ctx.lock);
	return c;
}

static struct ctx_thread *ctx_thread(struct ctx_state *c, uint32_t tid)
{
	uint64_t h = mix(tid, 0x9e3779b97f4a7c15ULL);
	for (uint32_t i = 0; i < CTX_THREADS; i++) {
		struct ctx_thread *t = &c->threads[(h + i) & (CTX_THREADS - 1)];
		uint32_t v = __atomic_load_n(&t->tid, __ATOMIC_ACQUIRE);
		if (v == tid)
			return t->frames ? t : 0;
		if (v == 0) {
			uint32_t z = 0;
			if (!__atomic_compare_exchange_n(&t->tid, &z, tid, 0, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED)) {
				if (z == tid)
					return t->frames ? t : 0;
				continue;
			}
			long a = sys_mmap(0, CTX_DEPTH * sizeof(struct ctx_frame), S_PROT_READ | S_PROT_WRITE,
					  S_MAP_PRIVATE | S_MAP_ANONYMOUS | S_MAP_NORESERVE, -1, 0);
			if (!sys_failed(a))
				__atomic_store_n(&t->frames, (uint64_t)a, __ATOMIC_RELEASE);
			return t->frames ? t : 0;
		}
	}
	return 0;
}

/* Look context (parent, site, callee) up by its hash h; *free_ix gets
 * the first empty slot on its probe sequence (or -1). */
static struct ctx_slot *ctx_find(struct ctx_state *c, uint64_t h, uint32_t parent, uint16_t sm, uint64_t src,
				 uint16_t dm, uint64_t dst, int64_t *free_ix)
{
	*free_ix = -1;
	for (uint32_t i = 0; i < CTX_PROBES; i++) {
		uint32_t ix = (uint32_t)((h + i) & (CTX_SLOTS - 1));
		struct ctx_slot *s = &c->slots[ix];
		uint64_t tag = __atomic_load_n(&s->tag, __ATOMIC_ACQUIRE);
		if (tag == 0) {
			*free_ix = ix;
			return 0; /* slots fill in probe order: it is not further on */
		}
		if (tag == h && s->src == src && s->dst == dst && s->parent == parent && s->src_module == sm &&
		    s->dst_module == dm)
			return s;
	}
	return 0;
}

/* The slot of context (parent, site, callee), made if new; 0 when the
 * table is full. Lookups take no lock; inserts take c->lock. */
static struct ctx_slot *ctx_intern(struct ctx_state *c, uint32_t parent, uint16_t sm, uint64_t src,
				   uint16_t dm, uint64_t dst)
{
	uint64_t h = mix(src ^ ((uint64_t)sm << 48) ^ ((uint64_t)parent << 16), dst ^ ((uint64_t)dm << 48)) | 1;
	int64_t fi;
	struct ctx_slot *s = ctx_find(c, h, parent, sm, src, dm, dst, &fi);
	if (s)
		return s;
	if (!lock_bounded(&c->lock))
		return 0;
	s = ctx_find(c, h, parent, sm, src, dm, dst, &fi);
	if (!s && fi >= 0 && c->nids + 1 < CTX_SLOTS) {
		s = &c->slots[fi];
		s->src = src;
		s->dst = dst;
		s->parent = parent;
		s->src_module = sm;
		s->dst_module = dm;
		s->id = ++c->nids;
		s->written = 0;
		c->by_id[s->id] = (uint32_t)fi + 1;
		__atomic_store_n(&s->tag, h, __ATOMIC_RELEASE);
	} else if (!s) {
		__atomic_fetch_add(&c->full, 1, __ATOMIC_RELAXED);
	}
	unlock(&c->lock);
	return s;
}

static void ctx_emit(struct ctx_slot *s)
{
	struct row rw;
	rw.kind = STINT_K_CONTEXT;
	rw.src_module = s->src_module;
	rw.src = s->src;
	rw.dst_module = s->dst_module;
	rw.dst = s->dst;
	rw.value = (uint64_t)s->parent << 32 | s->id;
	emit(&rw);
}

/* Write s's row, after those of its ancestors not yet written; returns
 * the number of rows written. */
static int ctx_write(struct ctx_state *c, struct ctx_slot *s)
{
	struct ctx_slot *chain[64];
	int n = 0;
	for (struct ctx_slot *x = s; x && n < 64; n++) {
		if (__atomic_load_n(&x->written, __ATOMIC_ACQUIRE))
			break;
		chain[n] = x;
		uint32_t ix = x->parent < CTX_SLOTS ? c->by_id[x->parent] : 0;
		x = ix ? &c->slots[ix - 1] : 0;
	}
	int w = 0;
	while (n-- > 0) {
		uint32_t z = 0;
		if (__atomic_compare_exchange_n(&chain[n]->written, &z, 1, 0, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED)) {
			ctx_emit(chain[n]);
			w++;
		}
	}
	return w;
}

/*
 * A call or return of a context module, seen with stint_probe_entry's
 * %rsp at entry_sp. may_write: the budget allows writing new contexts.
 * Returns the number of rows written.
 */
static int ctx_record(struct stint_global *g, struct stint_module *m, struct stint_probe *p, uint64_t v,
		      uint64_t entry_sp, int may_write)
{
	struct ctx_state *c = ctx_get(g);
	if (!c)
		return 0;
	struct ctx_thread *t = ctx_thread(c, current_tid(g));
	if (!t)
		return 0;
	if (__atomic_exchange_n(&t->busy, 1, __ATOMIC_ACQUIRE)) {
		__atomic_fetch_add(&c->busy_skips, 1, __ATOMIC_RELAXED);
		return 0; /* a signal handler interrupted this thread's update */
	}
	struct ctx_frame *f = (struct ctx_frame *)t->frames;
	uint32_t d = t->depth;
	int wrote = 0;
	if (p->kind == STINT_K_RET) {
		/* the returning call pushed its return address at sp: its
		 * frame remembers sp + 8 */
		uint64_t sp = entry_sp + CTX_SP_OFF + 8;
		while (d && f[d - 1].sp <= sp)
			d--;
	} else {
		uint64_t sp = entry_sp + CTX_SP_OFF;
		while (d && f[d - 1].sp <= sp)
			d--;
		struct row rw;
		if (p->flags & STINT_PF_DIRECT) {
			rw.dst_module = (uint16_t)m->module_id;
			rw.dst = p->dst;
		} else {
			row_set_dst(g, &rw, p, v);
		}
		uint32_t parent = d ? f[d - 1].ctx : 0;
		struct ctx_slot *s = ctx_intern(c, parent, (uint16_t)m->module_id, p->src, rw.dst_module, rw.dst);
		if (s && may_write && !__atomic_load_n(&s->written, __ATOMIC_ACQUIRE))
			wrote = ctx_write(c, s);
		if (d < CTX_DEPTH) {
			f[d].sp = sp;
			f[d].ctx = s ? s->id : 0;
			d++;
		} else {
			__atomic_fetch_add(&c->deep, 1, __ATOMIC_RELAXED);
		}
	}
	t->depth = d;
	__atomic_store_n(&t->busy, 0, __ATOMIC_RELEASE);
	return wrote;
}

/* In a forked child: new trace, new ids. */
static void ctx_reset(struct stint_global *g)
{
	struct ctx_state *c = (struct ctx_state *)g->ctx.state;
	if (!c)
		return;
	g->ctx.state = 0;
	g->ctx.lock = 0;
	sys_call2(SYS_munmap, (long)c, (long)sizeof(struct ctx_state)); /* the threads' frames leak: a few pages */
}
