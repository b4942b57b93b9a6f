/* Integer arenas from C: every vmarena_vmem_* function and its refusals (nothing changes on a
 * refusal), a JIT code range with nocross, a device heap that imports from a parent and gives
 * its spans back, statistics from a smaller struct, and destruction refused while allocations
 * are live. Run by tests/c_vmem.rs. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "vmarena.h"
#include "check.h"

static struct vmarena_vmem_stats stats(vmarena_vmem *vm) {
    struct vmarena_vmem_stats st;
    memset(&st, 0, sizeof st);
    st.size = sizeof st;
    CHECK(vmarena_vmem_stats(vm, &st) == 0 && st.size == sizeof st);
    return st;
}

int main(void) {
    /* An id space from 0, lowest fit under one lock (the per-CPU nodes would hand each CPU its
     * own zone first): the lowest id, 0, is a valid answer. */
    struct vmarena_vmem_options o;
    memset(&o, 0, sizeof o);
    o.size = sizeof o;
    o.fit = VMARENA_VMEM_LOWEST_FIT;
    o.strategy = VMARENA_STRATEGY_GLOBAL;
    vmarena_vmem *ids = vmarena_vmem_create("ids", 0, 1000, &o, NULL);
    CHECK(ids != NULL);
    uint64_t id = 77;
    CHECK(vmarena_vmem_alloc(ids, 1, &id) == 0 && id == 0);
    CHECK(vmarena_vmem_size(ids, 0) == 1);

    /* A JIT code range: 16-byte quantum, functions aligned to 64 that never cross 2 MiB, in
     * instant fit (the default). */
    o.fit = VMARENA_VMEM_INSTANT_FIT;
    o.strategy = VMARENA_STRATEGY_NODES;
    o.quantum = 16;
    vmarena_vmem *jit = vmarena_vmem_create("jit", 0x40000000, 64 << 20, &o, NULL);
    CHECK(jit != NULL);
    uint64_t f[2000];
    for (int i = 0; i < 2000; i++) {
        uint64_t size = 100 + (uint64_t)(i * 7919) % 4000;
        CHECK(vmarena_vmem_xalloc(jit, size, 64, 0, 2 << 20, 0, 0, &f[i]) == 0);
        CHECK(f[i] % 64 == 0 && f[i] >> 21 == (f[i] + size - 1) >> 21);
        CHECK(f[i] >= 0x40000000 && f[i] + size <= 0x40000000 + (64 << 20));
    }
    /* Phase and a window. */
    uint64_t p;
    CHECK(vmarena_vmem_xalloc(jit, 32, 256, 48, 0, 0x41000000, 0x41001000, &p) == 0);
    CHECK(p % 256 == 48 && p >= 0x41000000 && p + 32 <= 0x41001000);
    CHECK(stats(jit).live == 2001);

    /* Refusals: nothing written, nothing changed. */
    uint64_t untouched = 12345;
    errno = 0;
    CHECK(vmarena_vmem_alloc(jit, 0, &untouched) == -EINVAL && errno == EINVAL && untouched == 12345);
    CHECK(vmarena_vmem_xalloc(jit, 64, 48, 0, 0, 0, 0, &untouched) == -EINVAL);
    CHECK(vmarena_vmem_xalloc(jit, 64, 64, 64, 0, 0, 0, &untouched) == -EINVAL);
    CHECK(vmarena_vmem_xalloc(jit, 4096, 0, 0, 2048, 0, 0, &untouched) == -EINVAL);
    CHECK(vmarena_vmem_alloc(jit, 16, NULL) == -EINVAL);
    errno = 0;
    CHECK(vmarena_vmem_alloc(jit, 128 << 20, &untouched) == -ENOMEM && errno == ENOMEM);
    CHECK(untouched == 12345);
    CHECK(vmarena_vmem_free(jit, f[0] + 16) == -EINVAL);
    CHECK(vmarena_vmem_free(jit, 3) == -EINVAL);
    CHECK(vmarena_vmem_add(jit, 0x40000000 + (32 << 20), 4096) == -EEXIST);
    CHECK(vmarena_vmem_add(jit, 0x90000001, 4096) == -EINVAL);
    CHECK(vmarena_vmem_add(NULL, 0, 4096) == -EINVAL);
    CHECK(vmarena_vmem_alloc((vmarena_vmem *)&o, 16, &untouched) == -EINVAL);
    CHECK(vmarena_vmem_size(jit, f[0] + 16) == 0 && vmarena_vmem_size(NULL, f[0]) == 0);
    CHECK(stats(jit).live == 2001);
    o.fit = 7;
    CHECK(vmarena_vmem_create("bad", 0, 4096, &o, NULL) == NULL && errno == EINVAL);
    o.fit = VMARENA_VMEM_INSTANT_FIT;
    o.quantum = 24;
    CHECK(vmarena_vmem_create("bad", 0, 4096, &o, NULL) == NULL && errno == EINVAL);
    o.quantum = 16;
    CHECK(vmarena_vmem_create("", 0, 4096, &o, NULL) == NULL && errno == EINVAL);
    CHECK(vmarena_vmem_create("bad", 8, 4096, &o, NULL) == NULL && errno == EINVAL);
    CHECK(vmarena_vmem_create("bad", 0, 4096, &o, (vmarena_vmem *)&o) == NULL && errno == EINVAL);

    /* A second span, and statistics from a caller that knows only three fields. */
    CHECK(vmarena_vmem_add(jit, 0x80000000, 1 << 20) == 0);
    struct vmarena_vmem_stats small;
    memset(&small, 0xff, sizeof small);
    small.size = 24;
    CHECK(vmarena_vmem_stats(jit, &small) == 0 && small.size == 24 && small.spans == 2);
    CHECK(small.imported_spans == 0 && small.total == 0xffffffffffffffffull);

    CHECK(vmarena_vmem_destroy(jit) == -EBUSY && errno == EBUSY);
    for (int i = 0; i < 2000; i++)
        CHECK(vmarena_vmem_free(jit, f[i]) == 0);
    CHECK(vmarena_vmem_free(jit, f[7]) == -EINVAL); /* double free */
    CHECK(vmarena_vmem_free(jit, p) == 0);
    CHECK(vmarena_vmem_shrink(jit) == 0);
    struct vmarena_vmem_stats st = stats(jit);
    CHECK(st.live == 0 && st.allocated == 0 && st.free_ranges == 2 && st.largest_free == 64 << 20);
    CHECK(vmarena_vmem_destroy(jit) == 0);

    /* Best fit: of holes of 256, 128 and 512 bytes and the untouched rest, a request of 100
     * takes the 128-byte hole. */
    o.fit = VMARENA_VMEM_BEST_FIT;
    o.stripes = 1;
    vmarena_vmem *best = vmarena_vmem_create("best", 0x10000, 1 << 20, &o, NULL);
    CHECK(best != NULL);
    uint64_t blk[6], holes[3] = {256, 128, 512}, got, got2;
    for (int i = 0; i < 6; i++)
        CHECK(vmarena_vmem_alloc(best, i % 2 ? 64 : holes[i / 2], &blk[i]) == 0);
    for (int i = 0; i < 6; i += 2)
        CHECK(vmarena_vmem_free(best, blk[i]) == 0);
    CHECK(vmarena_vmem_alloc(best, 100, &got) == 0 && got == blk[2]);
    CHECK(vmarena_vmem_alloc(best, 200, &got2) == 0 && got2 == blk[0]);
    CHECK(stats(best).free_ranges == 4); /* 16 and 48 left of the holes, 512, the rest */
    CHECK(vmarena_vmem_destroy(best) == -EBUSY);
    CHECK(vmarena_vmem_free(best, got) == 0 && vmarena_vmem_free(best, got2) == 0);
    for (int i = 1; i < 6; i += 2)
        CHECK(vmarena_vmem_free(best, blk[i]) == 0);
    CHECK(stats(best).free_ranges == 1 && vmarena_vmem_destroy(best) == 0);
    o.stripes = 0;
    o.fit = VMARENA_VMEM_INSTANT_FIT;

    /* A device heap: a parent of 4 KiB pages, a child of 256-byte blocks importing 1 MiB. */
    o.quantum = 4096;
    vmarena_vmem *pages = vmarena_vmem_create("pages", 1ull << 40, 64 << 20, &o, NULL);
    CHECK(pages != NULL);
    o.quantum = 256;
    o.import_quantum = 1 << 20;
    o.fit = VMARENA_VMEM_LOWEST_FIT;
    vmarena_vmem *heap = vmarena_vmem_create("heap", 0, 0, &o, pages);
    CHECK(heap != NULL && stats(heap).spans == 0);
    uint64_t a, b, c;
    CHECK(vmarena_vmem_alloc(heap, 1000, &a) == 0 && vmarena_vmem_size(heap, a) == 1024);
    CHECK(vmarena_vmem_xalloc(heap, 3 << 20, 1 << 16, 0, 0, 0, 0, &b) == 0 && b % (1 << 16) == 0);
    CHECK(vmarena_vmem_alloc(heap, 300, &c) == 0);
    st = stats(heap);
    CHECK(st.spans == 2 && st.imported_spans == 2 && st.imports == 2);
    CHECK(stats(pages).live == 2);
    CHECK(vmarena_vmem_destroy(pages) == -EBUSY);
    CHECK(vmarena_vmem_free(heap, a) == 0 && vmarena_vmem_free(heap, b) == 0 && vmarena_vmem_free(heap, c) == 0);
    st = stats(heap);
    CHECK(st.spans == 0 && st.returns == 2 && stats(pages).live == 0);
    CHECK(vmarena_vmem_destroy(heap) == 0);
    CHECK(vmarena_vmem_destroy(pages) == 0);
    CHECK(vmarena_vmem_destroy(NULL) == 0);
    CHECK(vmarena_vmem_free(ids, 0) == 0 && vmarena_vmem_destroy(ids) == 0);

    if (failed)
        return checks_done();
    fprintf(stderr, "ok vmem\n");
    return checks_done();
}
