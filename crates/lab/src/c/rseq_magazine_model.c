/* A model of per-CPU magazines, for `vmarena user-path --contenders rseq-model`: not vmarena,
 * and not for use by programs. It sizes what a per-CPU cache front end could give the C ABI's
 * hit paths (docs/bench-log/design-notes.md, section 16), keeping the promise that costs most:
 *
 *  - each CPU has a stack of freed areas per size (1 to 8 pages, a guard page's worth of
 *    address space after each), pushed and popped inside restartable sequences (rseq): the
 *    kernel restarts a sequence that was preempted, migrated or signalled before its one
 *    committing store, so the stacks need no lock, no locked instruction and no handshake;
 *  - each area has a state word on a cache line of its own (live or cached, and its size), and
 *    a free claims it live -> cached with a compare-and-swap, as vmarena's free does, so a
 *    second free of an area, racing or not, gets -EINVAL;
 *  - each sequence also reads what a budget and a drain would make it read: the stack's cap
 *    (a push at the cap goes to the slow path) and a stopped flag (a drainer would set it, then
 *    fence the CPU with membarrier's rseq command, before emptying the stack); the model never
 *    changes either;
 *  - a miss carves fresh address space with one atomic add; a full stack keeps the area out of
 *    the model (the shapes it runs never fill one);
 *  - there is no budget accounting, no drain, no purge and no release of memory: what it
 *    measures is the hit paths alone.
 *
 * It defines vmarena_vmalloc and vmarena_vfree, so that user_path.c built with -DVMARENA_ABI
 * runs on it. x86-64 only; it needs the rseq area glibc registers for every thread (2.35 on). */
#define _GNU_SOURCE
#include <errno.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>
#include "rseq_seq.h"

#define MAX_CPUS 256
#define SIZES 8
#define STACK_SLOTS 64
#define PAGE 4096
#define LIVE 1ull
#define CACHED 2ull
#define WORD_STRIDE 8 /* words one cache line apart: two CPUs' areas never share a line */

/* One CPU's stack of one size, on lines of its own: the length, the cap, the stopped flag, then
 * the slots (page indices). The sequences below use these offsets: 0, 8, 16, 24. */
struct stack {
    uint64_t len;
    uint64_t cap;
    uint64_t stopped;
    uint64_t slot[STACK_SLOTS];
} __attribute__((aligned(64)));

struct cpu_stacks {
    struct stack size[SIZES];
};

static struct cpu_stacks *cpus;
static const uintptr_t cpu_stride = sizeof(struct cpu_stacks);
static char *base;
static _Atomic uint64_t *words;
static _Atomic uint64_t next_page;
static const uint64_t space_pages = 1ull << 22; /* 16 GiB of address space */

__attribute__((constructor)) static void model_init(void) {
#if defined(__x86_64__)
    base = mmap(NULL, space_pages * PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    words = mmap(NULL, space_pages * WORD_STRIDE * 8, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    cpus = mmap(NULL, sizeof(struct cpu_stacks) * MAX_CPUS, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (base != MAP_FAILED && words != MAP_FAILED && cpus != MAP_FAILED && __rseq_size > 0 &&
        sysconf(_SC_NPROCESSORS_CONF) <= MAX_CPUS) {
        for (int c = 0; c < MAX_CPUS; c++)
            for (int z = 0; z < SIZES; z++) cpus[c].size[z].cap = STACK_SLOTS;
        return;
    }
#endif
    fprintf(stderr, "rseq_magazine_model: needs x86-64, rseq registered by glibc, at most 256 CPUs and 16 GiB of "
                    "address space\n");
    exit(3);
}

static inline _Atomic uint64_t *word_of(uint64_t page) { return &words[page * WORD_STRIDE]; }

/* Pop the top of this CPU's stack at byte offset `size_off` into *out: 0, 1 when the stack is
 * empty or stopped, -1 when the kernel aborted the sequence (the caller runs it again). The
 * store of the shortened length is the commit; the store to *out (this thread's stack) before
 * it is redone by a rerun. */
static inline int stack_pop(uintptr_t size_off, uint64_t *out) {
    struct rseq *rs = rseq_area();
    __asm__ __volatile__ goto(
        RSEQ_SEQ_BEGIN
        RSEQ_THIS_CPU_RAX
        "cmpq $0, 16(%%rax)\n\t"          /* stopped: the slow path */
        "jne %l[empty]\n\t"
        "movq (%%rax), %%rdx\n\t"
        "testq %%rdx, %%rdx\n\t"
        "jz %l[empty]\n\t"
        "movq 16(%%rax, %%rdx, 8), %%rcx\n\t" /* slot[len - 1] sits 16 + 8 * len bytes in */
        "movq %%rcx, (%[out])\n\t"
        "decq %%rdx\n\t"
        "movq %%rdx, (%%rax)\n\t"          /* the commit */
        RSEQ_SEQ_END
        :
        : [cpu_id] "m"(rs->cpu_id), [rseq_cs] "m"(rs->rseq_cs), [stride] "r"(cpu_stride),
          [base] "r"((uintptr_t)cpus + size_off), [out] "r"(out)
        : "memory", "cc", "rax", "rcx", "rdx"
        : aborted, empty);
    return 0;
empty:
    return 1;
aborted:
    return -1;
}

/* Push `page` on this CPU's stack at byte offset `size_off`: 0, 1 when the stack is at its cap
 * or stopped, -1 when the kernel aborted the sequence. The store of the longer length is the
 * commit. */
static inline int stack_push(uintptr_t size_off, uint64_t page) {
    struct rseq *rs = rseq_area();
    __asm__ __volatile__ goto(
        RSEQ_SEQ_BEGIN
        RSEQ_THIS_CPU_RAX
        "cmpq $0, 16(%%rax)\n\t"          /* stopped: the slow path */
        "jne %l[full]\n\t"
        "movq (%%rax), %%rdx\n\t"
        "cmpq 8(%%rax), %%rdx\n\t"         /* at the cap */
        "jae %l[full]\n\t"
        "movq %[page], 24(%%rax, %%rdx, 8)\n\t"
        "incq %%rdx\n\t"
        "movq %%rdx, (%%rax)\n\t"          /* the commit */
        RSEQ_SEQ_END
        :
        : [cpu_id] "m"(rs->cpu_id), [rseq_cs] "m"(rs->rseq_cs), [stride] "r"(cpu_stride),
          [base] "r"((uintptr_t)cpus + size_off), [page] "r"(page)
        : "memory", "cc", "rax", "rdx"
        : aborted, full);
    return 0;
full:
    return 1;
aborted:
    return -1;
}

void *vmarena_vmalloc(size_t size) {
    if (size == 0 || size > SIZES * PAGE) return NULL;
    uint64_t pages = (size + PAGE - 1) / PAGE;
    uintptr_t size_off = (pages - 1) * sizeof(struct stack);
    uint64_t page;
    for (;;) {
        int r = stack_pop(size_off, &page);
        if (r == 0) break;
        if (r == 1) {
            page = atomic_fetch_add_explicit(&next_page, pages + 1, memory_order_relaxed);
            if (page + pages + 1 > space_pages) return NULL;
            break;
        }
    }
    atomic_store_explicit(word_of(page), LIVE | (pages << 2), memory_order_release);
    return base + page * PAGE;
}

int vmarena_vfree(void *p) {
    if (p == NULL) return 0;
    uintptr_t off = (uintptr_t)((char *)p - base);
    if (off >= space_pages * PAGE || (off & (PAGE - 1))) return -EINVAL;
    uint64_t page = off / PAGE;
    uint64_t w = atomic_load_explicit(word_of(page), memory_order_acquire);
    if ((w & 3) != LIVE) return -EINVAL;
    if (!atomic_compare_exchange_strong_explicit(word_of(page), &w, (w & ~3ull) | CACHED, memory_order_acq_rel,
                                                 memory_order_acquire))
        return -EINVAL;
    uintptr_t size_off = ((w >> 2) - 1) * sizeof(struct stack);
    while (stack_push(size_off, page) < 0) {
    }
    return 0;
}
