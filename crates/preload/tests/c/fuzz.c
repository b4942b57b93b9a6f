/* A random sequence of calls to vmarena's C ABI, valid and invalid, checked against a shadow
 * model; under the shim (argument "shim") the malloc family is mixed in. Driven by
 * crates/preload/tests/fuzz.rs for a few seconds and by `vmarena fuzz` for as long as asked.
 *
 * Usage: fuzz SECONDS THREADS SEED [shim]
 *
 * Each thread owns a model of what it holds: areas (vmalloc, vzalloc, aligned, vrealloc),
 * blocks (malloc family, under the shim), slots of two fixed pools of its own, frames of a
 * frame pool of its own and their vmap / vm_map_ram mappings. Every object carries a pattern
 * derived from its tag and offset, checked before it is resized, handed over or released. The
 * calls the model says must fail (size 0, sizes that overflow, bad alignments, interior,
 * foreign and stale pointers, the wrong release function, the wrong pool or order or count, a
 * pool destroyed while held, a second deferred free or a vfree of an area waiting for one) must fail with the documented error, and the object they named
 * must still be live with its pattern. Areas also travel between threads through a mailbox, so
 * that frees come from threads that did not allocate. Stale pointers (freed twice) are tried
 * only with one thread: with two, the other thread may have been given the address again.
 *
 * Prints one line per operation ("op NAME calls N bad M") and a summary
 * ("fuzz seed=S threads=T shim=0|1 seconds=X calls=N bad=M checks=K mismatches=0"); exits 1 on
 * any mismatch, after printing the first ones with the seed. */
#define _GNU_SOURCE
#include <errno.h>
#include <malloc.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "vmarena.h"

#define PAGE 4096u
#define MAX_OBJ 96
#define STRIDE 509

enum op {
    OP_VMALLOC, OP_VZALLOC, OP_ALIGNED, OP_VREALLOC, OP_VFREE, OP_SIZE, OP_BAD_SIZE, OP_BAD_FREE,
    OP_SLOT_GET, OP_SLOT_PUT, OP_BAD_PUT, OP_POOL_DESTROY, OP_FRAMES, OP_VMAP, OP_MAP_RAM,
    OP_UNMAP, OP_BAD_FRAMES, OP_HANDOFF, OP_PURGE, OP_MALLOC, OP_CALLOC, OP_REALLOC, OP_MEMALIGN,
    OP_FREE, OP_BAD_MALLOC, OP_RCU, OP_HUGE, NOPS
};
static const char *op_name[NOPS] = {
    "vmalloc", "vzalloc", "vmalloc_aligned", "vrealloc", "vfree", "size", "bad_size", "bad_free",
    "fixed_get", "fixed_put", "bad_put", "fixed_destroy", "frames", "vmap", "vm_map_ram",
    "unmap", "bad_frames", "handoff", "purge", "malloc", "calloc", "realloc", "memalign",
    "free", "bad_malloc", "kvfree_rcu", "vmalloc_huge",
};

enum kind { K_AREA, K_BLOCK, K_SLOT, K_VMAP, K_MAPRAM };

struct obj {
    unsigned char *p;
    size_t bytes;  /* bytes carrying the pattern */
    size_t usable; /* what the size function reports */
    uint32_t tag;
    int kind;
    int pool;          /* K_SLOT: which pool */
    uint32_t *frames;  /* K_VMAP, K_MAPRAM: the frames mapped, in order */
    size_t nframes;
};

struct counters { uint64_t calls[NOPS], bad[NOPS], checks, mismatches; };

static int nthreads, shim;
static uint64_t seed;
static double seconds;
static pthread_mutex_t report_lock = PTHREAD_MUTEX_INITIALIZER;
static uint64_t mismatches_printed;

/* The mailbox: areas handed from one thread to another (pattern and tag travel with them). */
static pthread_mutex_t box_lock = PTHREAD_MUTEX_INITIALIZER;
static struct obj box[64];
static int box_n;

struct thread {
    int id;
    uint64_t rng;
    struct obj o[MAX_OBJ];
    int n;
    vmarena_fixed *pool[2];
    size_t pool_slots[2], pool_held[2];
    vmarena_frames *frames;
    uint32_t next_tag;
    unsigned char *stale[16]; /* freed area starts (one thread only) */
    int nstale;
    struct counters c;
};

static uint64_t rnd(struct thread *t) {
    t->rng ^= t->rng >> 12;
    t->rng ^= t->rng << 25;
    t->rng ^= t->rng >> 27;
    return t->rng * 2685821657736338717ull;
}
static uint64_t below(struct thread *t, uint64_t n) { return n ? rnd(t) % n : 0; }
/* 1 byte to 2^max_log bytes, log-uniform. */
static size_t log_size(struct thread *t, int max_log) {
    int b = (int)below(t, (uint64_t)max_log + 1);
    size_t lo = (size_t)1 << b;
    return lo + below(t, lo);
}

#define MISMATCH(t, ...) mismatch(t, __LINE__, __VA_ARGS__)
static void mismatch(struct thread *t, int line, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
#include <stdarg.h>
static void mismatch(struct thread *t, int line, const char *fmt, ...) {
    t->c.mismatches++;
    pthread_mutex_lock(&report_lock);
    if (mismatches_printed++ < 20) {
        va_list ap;
        va_start(ap, fmt);
        fprintf(stderr, "MISMATCH (seed %llu, thread %d, fuzz.c:%d): ", (unsigned long long)seed, t->id, line);
        vfprintf(stderr, fmt, ap);
        fputc('\n', stderr);
        va_end(ap);
    }
    pthread_mutex_unlock(&report_lock);
}
#define EXPECT(t, cond, ...) do { (t)->c.checks++; if (!(cond)) MISMATCH(t, __VA_ARGS__); } while (0)

static unsigned char pat(uint32_t tag, size_t off) { return (unsigned char)(tag * 131u ^ (uint32_t)(off / STRIDE) * 29u ^ 0x5a); }
static void stamp(unsigned char *p, size_t from, size_t to, uint32_t tag) {
    for (size_t i = from - from % STRIDE + (from % STRIDE ? STRIDE : 0); i < to; i += STRIDE) p[i] = pat(tag, i);
    if (to > from) p[to - 1] = (unsigned char)tag;
}
/* Checks bytes [0, to) of an object whose pattern covered [0, covered). */
static int intact(const unsigned char *p, size_t to, size_t covered, uint32_t tag) {
    size_t end = to < covered ? to : covered;
    for (size_t i = 0; i < end; i += STRIDE)
        if (i != covered - 1 && p[i] != pat(tag, i)) return 0;
    if (to >= covered && covered && p[covered - 1] != (unsigned char)tag) return 0;
    return 1;
}

static size_t round_pages(size_t n) { return (n + PAGE - 1) / PAGE * PAGE; }

/* The default space hands a lazily freed area out whole when it is at most half again the
 * request larger, or at most 256 pages and at most twice the request larger (README.md: the
 * default space's lazy_slack_percent 50 and lazy_slack_pages 256; the engine counts the guard
 * page in both): the usable size of an area for a request of `size` bytes lies within. */
static int usable_ok(size_t usable, size_t size) {
    size_t want = round_pages(size), extra = usable - want;
    return usable >= want && (extra <= (want + PAGE) / 2 || (extra <= 256 * PAGE && extra <= 2 * (want + PAGE)));
}

static void forget_stale(struct thread *t, const unsigned char *p);
static void add(struct thread *t, struct obj o) {
    forget_stale(t, o.p);
    o.tag = o.tag ? o.tag : (uint32_t)(t->id << 24 | ++t->next_tag);
    stamp(o.p, 0, o.bytes, o.tag);
    t->o[t->n++] = o;
}
static struct obj take(struct thread *t, int i) {
    struct obj o = t->o[i];
    t->o[i] = t->o[--t->n];
    return o;
}
/* Index of a random object of kind k (or any kind for -1), -1 if none. */
static int pick(struct thread *t, int k) {
    if (!t->n) return -1;
    int start = (int)below(t, (uint64_t)t->n);
    for (int j = 0; j < t->n; j++) {
        int i = (start + j) % t->n;
        if (k < 0 || t->o[i].kind == k) return i;
    }
    return -1;
}
static int live_area_at(struct thread *t, const unsigned char *p) {
    for (int i = 0; i < t->n; i++)
        if (t->o[i].p == p) return 1;
    return 0;
}
static void forget_stale(struct thread *t, const unsigned char *p) {
    for (int i = 0; i < t->nstale; i++)
        if (t->stale[i] == p) t->stale[i] = t->stale[--t->nstale], i--;
}
static void remember_stale(struct thread *t, unsigned char *p) {
    if (nthreads != 1) return;
    if (t->nstale < 16) t->stale[t->nstale++] = p;
    else t->stale[below(t, 16)] = p;
}

/* An object must still be live with its pattern after a call that had to fail. */
static void still_there(struct thread *t, const struct obj *o, const char *after) {
    if (o->kind == K_AREA) EXPECT(t, vmarena_size(o->p) == o->usable, "after %s: size of %p is %zu, not %zu", after, (void *)o->p, vmarena_size(o->p), o->usable);
    EXPECT(t, intact(o->p, o->bytes, o->bytes, o->tag), "after %s: pattern of %p lost", after, (void *)o->p);
}

static void new_area(struct thread *t, enum op op, unsigned char *p, size_t size) {
    t->c.calls[op]++;
    EXPECT(t, p != NULL, "%s(%zu) failed: errno %d", op_name[op], size, errno);
    if (!p) return;
    EXPECT(t, ((uintptr_t)p & (PAGE - 1)) == 0, "%s(%zu) = %p: not page aligned", op_name[op], size, (void *)p);
    size_t usable = vmarena_size(p);
    EXPECT(t, usable_ok(usable, size), "%s(%zu): size %zu", op_name[op], size, usable);
    for (int i = 0; i < t->n; i++) {
        const struct obj *o = &t->o[i];
        EXPECT(t, p + size <= o->p || p >= o->p + o->bytes, "%s(%zu) = %p overlaps %p (%zu bytes)", op_name[op], size, (void *)p, (void *)o->p, o->bytes);
    }
    if (op == OP_VZALLOC)
        for (size_t i = 0; i < size; i += STRIDE) { if (p[i]) { MISMATCH(t, "vzalloc(%zu): byte %zu is %d", size, i, p[i]); break; } }
    add(t, (struct obj){ .p = p, .bytes = size, .usable = usable, .kind = K_AREA });
}

static size_t area_size(struct thread *t) {
    switch (below(t, 4)) {
    case 0: return 1 + below(t, 3 * PAGE);              /* small */
    case 1: return (17 + below(t, 240)) * PAGE;          /* the kernel's pool range */
    case 2: return log_size(t, 21);                      /* 1 B to 4 MiB */
    default: return PAGE * (1 + below(t, 16));
    }
}

static void op_alloc(struct thread *t) {
    if (t->n >= MAX_OBJ) return;
    size_t size = area_size(t);
    switch (below(t, 4)) {
    case 3: { /* vmalloc_huge: from 2 MiB up, whole huge pages aligned to one */
        size_t huge = 2u << 20;
        if (below(t, 2)) size = huge + below(t, 2 * huge);
        unsigned char *p = vmarena_vmalloc_huge(size);
        size_t want = size >= huge ? (size + huge - 1) / huge * huge : size;
        EXPECT(t, !p || size < huge || ((uintptr_t)p % huge) == 0, "vmalloc_huge(%zu) = %p: not aligned", size, (void *)p);
        new_area(t, OP_HUGE, p, want);
        break;
    }
    case 0: new_area(t, OP_VMALLOC, vmarena_vmalloc(size), size); break;
    case 1: new_area(t, OP_VZALLOC, vmarena_vzalloc(size), size); break;
    default: {
        size_t align = (size_t)1 << below(t, 22);
        unsigned char *p = vmarena_vmalloc_aligned(size, align);
        new_area(t, OP_ALIGNED, p, size);
        EXPECT(t, !p || ((uintptr_t)p % align) == 0, "vmalloc_aligned(%zu, %zu) = %p", size, align, (void *)p);
    }
    }
}

static void op_vrealloc(struct thread *t) {
    t->c.calls[OP_VREALLOC]++;
    int i = pick(t, K_AREA);
    if (i < 0) return;
    struct obj o = t->o[i];
    size_t size = area_size(t);
    EXPECT(t, intact(o.p, o.bytes, o.bytes, o.tag), "before vrealloc: pattern of %p lost", (void *)o.p);
    unsigned char *q = vmarena_vrealloc(o.p, size);
    EXPECT(t, q != NULL, "vrealloc(%p, %zu) failed: errno %d", (void *)o.p, size, errno);
    if (!q) return;
    size_t usable = vmarena_size(q);
    EXPECT(t, usable >= round_pages(size), "vrealloc(%p, %zu): size %zu", (void *)o.p, size, usable);
    if (q != o.p) EXPECT(t, usable_ok(usable, size), "vrealloc(%p, %zu) moved: size %zu", (void *)o.p, size, usable);
    /* Every byte the size function reported is kept, up to the new size. */
    size_t keep = o.usable < usable ? o.usable : usable;
    EXPECT(t, intact(q, keep, o.bytes, o.tag), "vrealloc(%p, %zu) -> %p lost contents", (void *)o.p, size, (void *)q);
    if (q != o.p) remember_stale(t, o.p);
    take(t, i);
    /* the pattern now covers the new size */
    add(t, (struct obj){ .p = q, .bytes = size, .usable = usable, .kind = K_AREA });
}

static void release(struct thread *t, struct obj o) {
    switch (o.kind) {
    case K_AREA: {
        t->c.calls[OP_VFREE]++;
        int r = vmarena_vfree(o.p);
        EXPECT(t, r == 0, "vfree(%p) = %d", (void *)o.p, r);
        if (nthreads == 1) EXPECT(t, vmarena_size(o.p) == 0, "size(%p) after vfree = %zu", (void *)o.p, vmarena_size(o.p));
        remember_stale(t, o.p);
        break;
    }
    case K_BLOCK: t->c.calls[OP_FREE]++; free(o.p); break;
    case K_SLOT: {
        t->c.calls[OP_SLOT_PUT]++;
        int r = vmarena_fixed_put(t->pool[o.pool], o.p);
        EXPECT(t, r == 0, "fixed_put(%p) = %d", (void *)o.p, r);
        t->pool_held[o.pool]--;
        break;
    }
    case K_VMAP: case K_MAPRAM: {
        t->c.calls[OP_UNMAP]++;
        int r = o.kind == K_VMAP ? vmarena_vunmap(o.p) : vmarena_vm_unmap_ram(o.p, o.nframes);
        EXPECT(t, r == 0, "unmap(%p, %zu) = %d", (void *)o.p, o.nframes, r);
        for (size_t f = 0; f < o.nframes; f++) {
            int rf = vmarena_frames_free(t->frames, o.frames[f], 0);
            EXPECT(t, rf == 0, "frames_free(%u) = %d", o.frames[f], rf);
        }
        free(o.frames);
        break;
    }
    }
}

static void op_free(struct thread *t) {
    int i = pick(t, -1);
    if (i < 0) return;
    struct obj *o = &t->o[i];
    EXPECT(t, intact(o->p, o->bytes, o->bytes, o->tag), "before release: pattern of %p (kind %d) lost", (void *)o->p, o->kind);
    release(t, take(t, i));
}

static int static_word;

/* Calls that must fail, and leave everything as it was. */
static void op_bad(struct thread *t) {
    int i = pick(t, K_AREA);
    errno = 0;
    switch (below(t, 10)) {
    case 0: t->c.bad[OP_BAD_SIZE]++; t->c.calls[OP_BAD_SIZE]++;
        EXPECT(t, !vmarena_vmalloc(0) && errno == EINVAL, "vmalloc(0): errno %d", errno); break;
    case 1: { t->c.bad[OP_BAD_SIZE]++; t->c.calls[OP_BAD_SIZE]++;
        size_t huge = SIZE_MAX - below(t, 2 * PAGE);
        EXPECT(t, !vmarena_vzalloc(huge) && errno == ENOMEM, "vzalloc(%zu): errno %d", huge, errno); break; }
    case 2: { t->c.bad[OP_BAD_SIZE]++; t->c.calls[OP_BAD_SIZE]++;
        size_t align = 3 + 2 * below(t, 1000);
        EXPECT(t, !vmarena_vmalloc_aligned(PAGE, align) && errno == EINVAL, "vmalloc_aligned(4096, %zu): errno %d", align, errno); break; }
    case 3: t->c.bad[OP_BAD_SIZE]++; t->c.calls[OP_BAD_SIZE]++;
        if (i >= 0) {
            struct obj *o = &t->o[i];
            size_t size = below(t, 2) ? 0 : SIZE_MAX - below(t, PAGE);
            EXPECT(t, !vmarena_vrealloc(o->p, size) && (errno == EINVAL || errno == ENOMEM), "vrealloc(%p, %zu) did not fail: errno %d", (void *)o->p, size, errno);
            still_there(t, o, "a failed vrealloc");
        }
        break;
    case 4: case 5: { /* interior and foreign pointers */
        t->c.bad[OP_BAD_FREE]++; t->c.calls[OP_BAD_FREE]++;
        int local;
        unsigned char *bad;
        switch (below(t, 4)) {
        case 0: bad = i >= 0 ? t->o[i].p + 1 + below(t, t->o[i].usable - 1) : (unsigned char *)&local; break;
        case 1: bad = (unsigned char *)&local; break;
        case 2: bad = (unsigned char *)&static_word; break;
        default: bad = (unsigned char *)(uintptr_t)(0x10000 + PAGE * below(t, 1000)); break;
        }
        int r = below(t, 2) ? vmarena_vfree(bad) : (int)(vmarena_vrealloc(bad, PAGE) == NULL ? -EINVAL : 0);
        EXPECT(t, r == -EINVAL, "release of %p not refused: %d", (void *)bad, r);
        EXPECT(t, vmarena_size(bad) == 0, "size(%p) of a bad pointer = %zu", (void *)bad, vmarena_size(bad));
        if (i >= 0) still_there(t, &t->o[i], "a bad release");
        break;
    }
    case 6: /* stale: freed before, not given to this thread again (one thread only) */
        if (t->nstale) {
            unsigned char *s = t->stale[below(t, (uint64_t)t->nstale)];
            if (live_area_at(t, s)) break;
            t->c.bad[OP_BAD_FREE]++; t->c.calls[OP_BAD_FREE]++;
            int r = vmarena_vfree(s);
            /* (the address may start a fixed pool's slot or a mapping since: vfree refuses
               those too, and vmarena_size reports them) */
            EXPECT(t, r == -EINVAL, "double vfree(%p) = %d", (void *)s, r);
        }
        break;
    case 7: { /* the wrong release function: vfree of a slot or a mapping, vunmap of an area */
        int j = pick(t, below(t, 2) ? K_SLOT : K_VMAP);
        t->c.bad[OP_BAD_FREE]++; t->c.calls[OP_BAD_FREE]++;
        if (j >= 0) {
            int r = vmarena_vfree(t->o[j].p);
            EXPECT(t, r == -EINVAL, "vfree of kind %d at %p = %d", t->o[j].kind, (void *)t->o[j].p, r);
            void *q = vmarena_vrealloc(t->o[j].p, PAGE);
            EXPECT(t, q == NULL && errno == EINVAL, "vrealloc of kind %d at %p = %p", t->o[j].kind, (void *)t->o[j].p, q);
            still_there(t, &t->o[j], "vfree of the wrong kind");
        } else if (i >= 0) {
            int r = vmarena_vunmap(t->o[i].p);
            EXPECT(t, r == -EINVAL, "vunmap of an area at %p = %d", (void *)t->o[i].p, r);
            r = vmarena_vm_unmap_ram(t->o[i].p, 1);
            EXPECT(t, r == -EINVAL, "vm_unmap_ram of an area at %p = %d", (void *)t->o[i].p, r);
            still_there(t, &t->o[i], "vunmap of an area");
        }
        break;
    }
    case 8: { /* fixed pools: the other pool, a second put, an interior put */
        int j = pick(t, K_SLOT);
        if (j < 0) break;
        t->c.bad[OP_BAD_PUT]++; t->c.calls[OP_BAD_PUT]++;
        struct obj *o = &t->o[j];
        int r = vmarena_fixed_put(t->pool[!o->pool], o->p);
        EXPECT(t, r == -EINVAL, "put of %p to the other pool = %d", (void *)o->p, r);
        r = vmarena_fixed_put(t->pool[o->pool], o->p + 1 + below(t, o->bytes - 1));
        EXPECT(t, r == -EINVAL, "interior put = %d", r);
        r = vmarena_fixed_put(NULL, o->p);
        EXPECT(t, r == -EINVAL, "put to NULL = %d", r);
        if (t->pool_held[o->pool]) {
            r = vmarena_fixed_destroy(t->pool[o->pool]);
            EXPECT(t, r == -EBUSY, "destroy of a held pool = %d", r);
        }
        still_there(t, o, "a bad put");
        break;
    }
    default: { /* frames: bad order, wrong order, tail, double free; unmap with the wrong count */
        t->c.bad[OP_BAD_FRAMES]++; t->c.calls[OP_BAD_FRAMES]++;
        int64_t f = vmarena_frames_alloc(t->frames, 11 + (unsigned)below(t, 20));
        EXPECT(t, f == -EINVAL, "frames_alloc(order > 10) = %lld", (long long)f);
        f = vmarena_frames_alloc(t->frames, 2);
        if (f >= 0) {
            int r = vmarena_frames_free(t->frames, (uint32_t)f, 1);
            EXPECT(t, r == -EINVAL, "free with the wrong order = %d", r);
            r = vmarena_frames_free(t->frames, (uint32_t)f + 1, 2);
            EXPECT(t, r == -EINVAL, "free of a tail frame = %d", r);
            r = vmarena_frames_free(t->frames, (uint32_t)f, 2);
            EXPECT(t, r == 0, "free = %d", r);
            r = vmarena_frames_free(t->frames, (uint32_t)f, 2);
            EXPECT(t, r == -EINVAL, "double free of frames = %d", r);
        }
        int j = pick(t, K_MAPRAM);
        if (j >= 0) {
            int r = vmarena_vm_unmap_ram(t->o[j].p, t->o[j].nframes + 1);
            EXPECT(t, r == -EINVAL, "vm_unmap_ram with the wrong count = %d", r);
            r = vmarena_vunmap(t->o[j].p);
            EXPECT(t, r == -EINVAL, "vunmap of a vm_map_ram mapping of %zu frames = %d", t->o[j].nframes, r);
            if (r == 0) { /* gone after all: give its frames back */
                struct obj o = take(t, j);
                for (size_t k = 0; k < o.nframes; k++) vmarena_frames_free(t->frames, o.frames[k], 0);
                free(o.frames);
                break;
            }
            still_there(t, &t->o[j], "a bad unmap");
        }
        break;
    }
    }
}

static void op_slot(struct thread *t) {
    int k = (int)below(t, 2);
    t->c.calls[OP_SLOT_GET]++;
    if (t->n >= MAX_OBJ) return;
    errno = 0;
    unsigned char *p = vmarena_fixed_try_get(t->pool[k]);
    if (t->pool_held[k] == t->pool_slots[k]) {
        EXPECT(t, p == NULL && errno == EAGAIN, "try_get of a pool with every slot held = %p, errno %d", (void *)p, errno);
        return;
    }
    EXPECT(t, p != NULL, "try_get with %zu of %zu held: errno %d", t->pool_held[k], t->pool_slots[k], errno);
    if (!p) return;
    t->pool_held[k]++;
    size_t bytes = vmarena_fixed_slot_size(t->pool[k]);
    add(t, (struct obj){ .p = p, .bytes = bytes, .usable = bytes, .kind = K_SLOT, .pool = k });
}

static void op_destroy_pool(struct thread *t) {
    int k = (int)below(t, 2);
    t->c.calls[OP_POOL_DESTROY]++;
    if (t->pool_held[k]) return;
    int r = vmarena_fixed_destroy(t->pool[k]);
    EXPECT(t, r == 0, "destroy of an idle pool = %d", r);
    t->pool_slots[k] = 1 + below(t, 16);
    t->pool[k] = vmarena_fixed_create(1 + below(t, 5 * PAGE), t->pool_slots[k]);
    EXPECT(t, t->pool[k] != NULL, "fixed_create: errno %d", errno);
    if (!t->pool[k]) exit(1);
}

static void op_map(struct thread *t) {
    if (t->n >= MAX_OBJ) return;
    int ram = (int)below(t, 2);
    size_t n = 1 + below(t, ram && below(t, 4) ? 100 : 16);
    t->c.calls[OP_FRAMES]++;
    uint32_t *fr = malloc(n * sizeof *fr);
    if (!fr) return;
    size_t got = vmarena_frames_alloc_bulk(t->frames, n, fr);
    if (got < n) { /* the pool ran dry: give back */
        for (size_t i = 0; i < got; i++) vmarena_frames_free(t->frames, fr[i], 0);
        free(fr);
        return;
    }
    t->c.calls[ram ? OP_MAP_RAM : OP_VMAP]++;
    unsigned char *p = ram ? vmarena_vm_map_ram(t->frames, fr, n) : vmarena_vmap(t->frames, fr, n);
    EXPECT(t, p != NULL, "%s(%zu frames): errno %d", ram ? "vm_map_ram" : "vmap", n, errno);
    if (!p) {
        for (size_t i = 0; i < n; i++) vmarena_frames_free(t->frames, fr[i], 0);
        free(fr);
        return;
    }
    size_t probe = below(t, n);
    int64_t f = vmarena_vmalloc_to_frame(p + probe * PAGE + below(t, PAGE));
    EXPECT(t, f == fr[probe], "vmalloc_to_frame(page %zu) = %lld, not %u", probe, (long long)f, fr[probe]);
    add(t, (struct obj){ .p = p, .bytes = n * PAGE, .usable = n * PAGE, .kind = ram ? K_MAPRAM : K_VMAP, .frames = fr, .nframes = n });
}

/* Retire an area (vmarena_kvfree_rcu or its embedded form), sometimes inside a read-side
 * section, where it must stay readable; a second retirement, a vfree and a vrealloc of the
 * retired area must be refused. Sometimes wait for the grace period. */
static void op_rcu(struct thread *t) {
    int i = pick(t, K_AREA);
    if (i < 0) return;
    struct obj o = t->o[i];
    EXPECT(t, intact(o.p, o.bytes, o.bytes, o.tag), "before kvfree_rcu: pattern of %p lost", (void *)o.p);
    int inside = (int)below(t, 2), embedded = (int)below(t, 2);
    if (inside) EXPECT(t, vmarena_read_lock() == 0, "read_lock");
    t->c.calls[OP_RCU]++;
    int rc = embedded ? vmarena_kvfree_rcu_embedded(o.p) : vmarena_kvfree_rcu(o.p);
    EXPECT(t, rc == 0, "kvfree_rcu(%p, embedded %d) = %d", (void *)o.p, embedded, rc);
    /* Outside a section, with other threads running, the area can be reclaimed as soon as it is
     * retired and handed to another thread at the same address; a second release would then be
     * that thread's valid call. The refusals are checked only where nothing can reuse it. */
    if (inside || nthreads == 1) {
        t->c.bad[OP_RCU] += 3;
        rc = vmarena_kvfree_rcu(o.p);
        EXPECT(t, rc == -EINVAL, "second kvfree_rcu(%p) = %d", (void *)o.p, rc);
        rc = vmarena_vfree(o.p);
        EXPECT(t, rc == -EINVAL, "vfree of a retired area %p = %d", (void *)o.p, rc);
        errno = 0;
        EXPECT(t, vmarena_vrealloc(o.p, PAGE) == NULL && errno == EINVAL, "vrealloc of a retired area %p", (void *)o.p);
    }
    if (inside) {
        /* Not freed while this section lasts (the embedded form used its first 16 bytes). */
        EXPECT(t, vmarena_size(o.p) == o.usable, "retired %p freed inside a section", (void *)o.p);
        if (!embedded) EXPECT(t, intact(o.p, o.bytes, o.bytes, o.tag), "retired %p changed inside a section", (void *)o.p);
        EXPECT(t, vmarena_synchronize() == -EDEADLK, "synchronize inside a section");
        EXPECT(t, vmarena_read_unlock() == 0, "read_unlock");
    }
    take(t, i);
    if (below(t, 8) == 0) {
        EXPECT(t, vmarena_synchronize() == 0, "synchronize");
        if (nthreads == 1) EXPECT(t, vmarena_size(o.p) == 0, "retired %p not freed by synchronize", (void *)o.p);
    }
    remember_stale(t, o.p);
}

/* Hand an area to the mailbox, or adopt one from it. */
static void op_handoff(struct thread *t) {
    t->c.calls[OP_HANDOFF]++;
    pthread_mutex_lock(&box_lock);
    if (below(t, 2) && box_n > 0 && t->n < MAX_OBJ) {
        struct obj o = box[--box_n];
        pthread_mutex_unlock(&box_lock);
        EXPECT(t, intact(o.p, o.bytes, o.bytes, o.tag), "adopted %p lost its pattern", (void *)o.p);
        if (o.kind == K_AREA) EXPECT(t, vmarena_size(o.p) == o.usable, "adopted %p: size %zu, not %zu", (void *)o.p, vmarena_size(o.p), o.usable);
        forget_stale(t, o.p);
        t->o[t->n++] = o;
        return;
    }
    int i = pick(t, below(t, 2) || !shim ? K_AREA : K_BLOCK);
    if (i >= 0 && box_n < 64) {
        box[box_n++] = take(t, i);
        pthread_mutex_unlock(&box_lock);
        return;
    }
    pthread_mutex_unlock(&box_lock);
}

/* The malloc family, under the shim: sizes on both sides of its threshold. */
static void op_malloc(struct thread *t) {
    if (t->n >= MAX_OBJ) return;
    size_t size = 1 + log_size(t, 22);
    unsigned char *p = NULL;
    enum op op;
    switch (below(t, 3)) {
    case 0: op = OP_MALLOC; p = malloc(size); break;
    case 1: {
        op = OP_CALLOC;
        size_t nmemb = 1 + below(t, 4);
        p = calloc(nmemb, size);
        size *= nmemb;
        break;
    }
    default: {
        op = OP_MEMALIGN;
        size_t align = sizeof(void *) << below(t, 10);
        void *q = NULL;
        int r = posix_memalign(&q, align, size);
        EXPECT(t, r == 0 && ((uintptr_t)q % align) == 0, "posix_memalign(%zu, %zu) = %d, %p", align, size, r, q);
        p = q;
    }
    }
    t->c.calls[op]++;
    EXPECT(t, p != NULL, "%s(%zu) failed", op_name[op], size);
    if (!p) return;
    if (op == OP_CALLOC)
        for (size_t i = 0; i < size; i += STRIDE) { if (p[i]) { MISMATCH(t, "calloc: byte %zu is %d", i, p[i]); break; } }
    size_t usable = malloc_usable_size(p);
    EXPECT(t, usable >= size, "malloc_usable_size = %zu < %zu", usable, size);
    add(t, (struct obj){ .p = p, .bytes = size, .usable = usable, .kind = K_BLOCK });
}

static void op_realloc(struct thread *t) {
    t->c.calls[OP_REALLOC]++;
    int i = pick(t, K_BLOCK);
    if (i < 0) return;
    struct obj o = t->o[i];
    size_t size = 1 + log_size(t, 22);
    uintptr_t old = (uintptr_t)o.p;
    unsigned char *q = realloc(o.p, size);
    EXPECT(t, q != NULL, "realloc(%#lx, %zu) failed", (unsigned long)old, size);
    if (!q) return;
    EXPECT(t, intact(q, size, o.bytes, o.tag), "realloc(%#lx, %zu) lost contents", (unsigned long)old, size);
    take(t, i);
    add(t, (struct obj){ .p = q, .bytes = size, .usable = malloc_usable_size(q), .kind = K_BLOCK });
}

static void op_bad_malloc(struct thread *t) {
    t->c.calls[OP_BAD_MALLOC]++;
    t->c.bad[OP_BAD_MALLOC]++;
    errno = 0;
    switch (below(t, 4)) {
    case 0: EXPECT(t, !malloc(SIZE_MAX - below(t, PAGE)) && errno == ENOMEM, "malloc(huge): errno %d", errno); break;
    case 1: EXPECT(t, !calloc(SIZE_MAX / 2 + below(t, 100), 2 + below(t, 7)) && errno == ENOMEM, "calloc overflow: errno %d", errno); break;
    case 2: { /* not a power of two, or smaller than a pointer */
        static const size_t bad_align[] = {0, 1, 2, 4, 3, 12, 24, 40, 48, 4097, 65535};
        size_t a = bad_align[below(t, sizeof bad_align / sizeof bad_align[0])];
        void *q = (void *)1;
        int r = posix_memalign(&q, a, 100 + below(t, 1 << 20));
        EXPECT(t, r == EINVAL && q == (void *)1, "posix_memalign(%zu) = %d", a, r);
        break;
    }
    default: {
        int i = pick(t, K_BLOCK);
        if (i < 0) break;
        struct obj *o = &t->o[i];
        EXPECT(t, !realloc(o->p, SIZE_MAX - below(t, PAGE)), "realloc(huge) did not fail");
        still_there(t, o, "a failed realloc");
        if (vmarena_size(o->p) == 0) {
            int r = vmarena_vfree(o->p);
            EXPECT(t, r == -EINVAL, "vfree of the next allocator's block = %d", r);
        }
    }
    }
}

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void *run(void *arg) {
    struct thread *t = arg;
    t->rng = seed * 0x9e3779b97f4a7c15ull + (uint64_t)t->id * 0x632be59bd9b4e019ull + 1;
    for (int k = 0; k < 2; k++) {
        t->pool_slots[k] = 1 + below(t, 16);
        t->pool[k] = vmarena_fixed_create(1 + below(t, 5 * PAGE), t->pool_slots[k]);
        if (!t->pool[k]) { perror("vmarena_fixed_create"); exit(2); }
    }
    t->frames = vmarena_frames_create(16u << 20);
    if (!t->frames) { perror("vmarena_frames_create"); exit(2); }
    double end = now() + seconds;
    for (uint64_t step = 0;; step++) {
        if ((step & 255) == 0 && now() >= end) break;
        uint64_t r = below(t, 100);
        if (r < 20) op_alloc(t);
        else if (r < 32) op_vrealloc(t);
        else if (r < 52) op_free(t);
        else if (r < 64) op_bad(t);
        else if (r < 70) op_slot(t);
        else if (r < 72) op_destroy_pool(t);
        else if (r < 78) op_map(t);
        else if (r < 82) op_handoff(t);
        else if (r < 83) { t->c.calls[OP_PURGE]++; vmarena_purge(); }
        else if (r < 86) {
            t->c.calls[OP_SIZE]++;
            int i = pick(t, K_AREA);
            if (i >= 0) EXPECT(t, vmarena_size(t->o[i].p) == t->o[i].usable, "size(%p) = %zu, not %zu", (void *)t->o[i].p, vmarena_size(t->o[i].p), t->o[i].usable);
        } else if (r < 88) op_rcu(t);
        else if (!shim) op_alloc(t);
        else if (r < 93) op_malloc(t);
        else if (r < 96) op_realloc(t);
        else op_bad_malloc(t);
    }
    /* Everything back: what this thread holds, then (thread 0, after the others) the mailbox. */
    while (t->n) op_free(t);
    return NULL;
}

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: fuzz SECONDS THREADS SEED [shim]\n");
        return 2;
    }
    seconds = atof(argv[1]);
    nthreads = atoi(argv[2]);
    seed = strtoull(argv[3], NULL, 0);
    shim = argc > 4 && strcmp(argv[4], "shim") == 0;
    if (nthreads < 1 || nthreads > 64 || seconds <= 0) {
        fprintf(stderr, "fuzz: THREADS must be 1..64 and SECONDS positive\n");
        return 2;
    }
    struct thread *t = calloc((size_t)nthreads, sizeof *t);
    pthread_t *tid = calloc((size_t)nthreads, sizeof *tid);
    if (!t || !tid) return 2;
    for (int i = 0; i < nthreads; i++) {
        t[i].id = i;
        if (pthread_create(&tid[i], NULL, run, &t[i]) != 0) { perror("pthread_create"); return 2; }
    }
    for (int i = 0; i < nthreads; i++) pthread_join(tid[i], NULL);
    /* The mailbox's last areas: checked and freed by thread 0's model. */
    while (box_n) {
        struct obj o = box[--box_n];
        t[0].o[t[0].n++] = o;
        op_free(&t[0]);
    }
    struct counters sum = {0};
    for (int i = 0; i < nthreads; i++) {
        for (int k = 0; k < 2; k++) {
            int r = vmarena_fixed_destroy(t[i].pool[k]);
            EXPECT(&t[i], r == 0, "final destroy = %d", r);
        }
        struct vmarena_frame_stats fs;
        EXPECT(&t[i], vmarena_frames_stats(t[i].frames, &fs) == 0, "frames_stats");
        int r = vmarena_frames_destroy(t[i].frames);
        EXPECT(&t[i], r == 0, "final frames destroy = %d (frames still held: lost)", r);
        for (int k = 0; k < NOPS; k++) { sum.calls[k] += t[i].c.calls[k]; sum.bad[k] += t[i].c.bad[k]; }
        sum.checks += t[i].c.checks;
        sum.mismatches += t[i].c.mismatches;
    }
    uint64_t calls = 0, bad = 0;
    for (int k = 0; k < NOPS; k++) {
        if (!sum.calls[k]) continue;
        printf("op %s calls %llu bad %llu\n", op_name[k], (unsigned long long)sum.calls[k], (unsigned long long)sum.bad[k]);
        calls += sum.calls[k];
        bad += sum.bad[k];
    }
    printf("fuzz seed=%llu threads=%d shim=%d seconds=%g calls=%llu bad=%llu checks=%llu mismatches=%llu\n",
           (unsigned long long)seed, nthreads, shim, seconds, (unsigned long long)calls, (unsigned long long)bad,
           (unsigned long long)sum.checks, (unsigned long long)sum.mismatches);
    return sum.mismatches ? 1 : 0;
}
