/* Spaces of one's own from C: every vmarena_space_* function and its refusals (nothing changes
 * on a refusal), options from a smaller struct, destruction refused while an area is live, and
 * the default space's handle. Run by tests/c_spaces.rs. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "vmarena.h"
#include "check.h"

static uint64_t live(vmarena_space *s) {
    struct vmarena_stats st = { .size = sizeof st };
    CHECK(vmarena_space_stats(s, &st) == 0 && st.size == sizeof st);
    return st.live_areas;
}

int main(void) {
    /* Every default. */
    vmarena_space *a = vmarena_space_create(NULL, NULL);
    CHECK(a != NULL);
    char *p = vmarena_space_vmalloc(a, 10000);
    CHECK(p && vmarena_space_size(a, p) == 12288 && vmarena_space_contains(a, p) == 1);
    memset(p, 0x5c, 10000);
    char *z = vmarena_space_vzalloc(a, 4096);
    CHECK(z && z[0] == 0 && z[4095] == 0);
    char *al = vmarena_space_vmalloc_aligned(a, 4096, 1 << 16);
    CHECK(al && ((uintptr_t)al & 0xffff) == 0);
    p = vmarena_space_vrealloc(a, p, 40000);
    CHECK(p && p[9999] == 0x5c && vmarena_space_size(a, p) >= 40000);
    CHECK(live(a) == 3);

    /* A second space with options, from a caller that knows only the first two fields. */
    struct vmarena_space_options o;
    memset(&o, 0, sizeof o);
    o.size = 16;
    o.space_bytes = 1ull << 30;
    o.strategy = 99; /* beyond the caller's size: not read */
    vmarena_space *b = vmarena_space_create("io", &o);
    CHECK(b != NULL);
    memset(&o, 0, sizeof o);
    o.size = sizeof o;
    o.space_bytes = 1ull << 30;
    o.strategy = VMARENA_STRATEGY_SPLIT;
    o.lazy_max_pages = 64;
    o.flags = VMARENA_SPACE_NO_HUGE_PAGES;
    vmarena_space *c = vmarena_space_create("split", &o);
    CHECK(c != NULL);
    char *q = vmarena_space_vmalloc(c, 8192);
    CHECK(q && vmarena_space_contains(c, q) == 1 && vmarena_space_contains(a, q) == 0);
    struct vmarena_lock_stats ls = { .size = sizeof ls };
    CHECK(vmarena_space_lock_stats(c, &ls) == 0 && ls.free.acquisitions > 0 && ls.busy.acquisitions > 0 &&
          ls.node.acquisitions == 0 && ls.global.acquisitions == 0);
    CHECK(vmarena_space_lock_stats(NULL, &ls) == -EINVAL && vmarena_space_lock_stats(c, NULL) == -EINVAL);

    /* Areas belong to their space: another space refuses them, and so does the default one. */
    CHECK(vmarena_space_vfree(a, q) == -EINVAL && vmarena_space_size(a, q) == 0);
    CHECK(vmarena_vfree(q) == -EINVAL);
    CHECK(vmarena_space_vfree(c, q + 4096) == -EINVAL);
    CHECK(vmarena_space_size(c, q) == 8192);

    /* Bad handles and options. */
    errno = 0;
    CHECK(vmarena_space_vmalloc(NULL, 4096) == NULL && errno == EINVAL);
    char junk[64] = {0};
    errno = 0;
    CHECK(vmarena_space_vmalloc((vmarena_space *)junk, 4096) == NULL && errno == EINVAL);
    CHECK(vmarena_space_vfree(NULL, q) == -EINVAL && vmarena_space_size(NULL, q) == 0);
    CHECK(vmarena_space_contains(NULL, q) == -EINVAL && vmarena_space_purge(NULL) == -EINVAL);
    CHECK(vmarena_space_shrink(NULL) == -EINVAL);
    struct vmarena_stats st = { .size = sizeof st };
    CHECK(vmarena_space_stats(NULL, &st) == -EINVAL && vmarena_space_stats(a, NULL) == -EINVAL);
    CHECK(vmarena_space_vmalloc(a, 0) == NULL && errno == EINVAL);
    CHECK(vmarena_space_vmalloc_aligned(a, 4096, 3) == NULL && errno == EINVAL);
    memset(&o, 0, sizeof o);
    o.size = sizeof o;
    o.strategy = 7;
    errno = 0;
    CHECK(vmarena_space_create("bad", &o) == NULL && errno == EINVAL);
    o.strategy = 0;
    o.flags = 64;
    CHECK(vmarena_space_create("bad", &o) == NULL && errno == EINVAL);
    o.flags = VMARENA_SPACE_NO_GUARDS;
    o.guard_pages = 2;
    CHECK(vmarena_space_create("bad", &o) == NULL && errno == EINVAL);
    o.size = 4;
    CHECK(vmarena_space_create("bad", &o) == NULL && errno == EINVAL);
    CHECK(vmarena_space_create("", NULL) == NULL && errno == EINVAL);

    /* Purges and the shrinker. */
    CHECK(vmarena_space_vfree(a, z) == 0 && vmarena_space_vfree(a, al) == 0);
    CHECK(vmarena_space_purge(a) == 0 && vmarena_space_shrink(a) >= 0);
    CHECK(live(a) == 1);

    /* Destruction: refused while an area is live, and nothing changes. */
    CHECK(vmarena_space_destroy(a) == -EBUSY && errno == EBUSY);
    CHECK(vmarena_space_size(a, p) >= 40000 && p[0] == 0x5c);
    CHECK(vmarena_space_vfree(a, p) == 0 && vmarena_space_destroy(a) == 0);
    CHECK(vmarena_space_vfree(c, q) == 0 && vmarena_space_destroy(c) == 0);
    CHECK(vmarena_space_destroy(b) == 0 && vmarena_space_destroy(NULL) == 0);

    /* The default space's handle: its areas are the C ABI's, and destroying the handle leaves
     * the space. */
    vmarena_space *d = vmarena_space_default();
    CHECK(d != NULL);
    char *r = vmarena_space_vmalloc(d, 4096);
    CHECK(r && vmarena_size(r) == 4096 && live(d) == 1);
    CHECK(vmarena_space_destroy(d) == 0);
    CHECK(vmarena_vfree(r) == 0);
    char *s = vmarena_vmalloc(4096);
    CHECK(s && vmarena_vfree(s) == 0);

    if (failed)
        return 1;
    fprintf(stderr, "ok spaces\n");
    return 0;
}
