/* Exercises every function of the fixed C ABI, bad input included. Prints one line per check
 * and "N passed, N failed" at the end; exits non-zero on any failure. */
#define _GNU_SOURCE
#include <errno.h>
#include <linux/membarrier.h>
#include <stdint.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <stdio.h>
#include <string.h>
#include "vmarena.h"
#include "check.h"


int main(void) {
    /* The library registered the process for membarrier when it was loaded, before any call
     * (a registration on the first call would make a threaded program's first request wait
     * for an RCU grace period): a private expedited barrier already succeeds. */
    long cmds = syscall(SYS_membarrier, MEMBARRIER_CMD_QUERY, 0, 0);
    /* Where a barrier fails, the registration itself must be refused (an older kernel, a
     * seccomp filter), not merely left undone. */
    if (cmds >= 0 && (cmds & MEMBARRIER_CMD_PRIVATE_EXPEDITED))
        CHECK(syscall(SYS_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED, 0, 0) == 0 ||
              syscall(SYS_membarrier, MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED, 0, 0) != 0);
    /* And for the rseq fence the per-CPU stacks' drains use (their construction, on the
     * default space's first call, would otherwise register and wait). */
    if (cmds >= 0 && (cmds & MEMBARRIER_CMD_PRIVATE_EXPEDITED_RSEQ))
        CHECK(syscall(SYS_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED_RSEQ, 0, 0) == 0 ||
              syscall(SYS_membarrier, MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED_RSEQ, 0, 0) != 0);
    /* It also grew the descriptor table to where it keeps its descriptors (half the soft limit,
     * 3 to 512), which in a threaded process waits for an RCU grace period. */
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0) {
        long floor = (long)(rl.rlim_cur / 2);
        floor = floor < 3 ? 3 : floor > 512 ? 512 : floor;
        long fdsize = 0;
        char line[256];
        FILE *st = fopen("/proc/self/status", "r");
        while (st && fgets(line, sizeof line, st))
            if (sscanf(line, "FDSize: %ld", &fdsize) == 1) break;
        if (st) fclose(st);
        CHECK(fdsize > floor);
    }

    /* vmalloc: page granular, writable. */
    char *p = vmarena_vmalloc(10000);
    CHECK(p != NULL);
    CHECK(((uintptr_t)p & 4095) == 0);
    CHECK(vmarena_size(p) == 12288);
    memset(p, 0x5a, 12288);

    /* vzalloc: zero filled, also after reuse of dirty memory. */
    CHECK(vmarena_vfree(p) == 0);
    char *z = vmarena_vzalloc(12288);
    CHECK(z != NULL);
    int all_zero = 1;
    for (int i = 0; i < 12288; i++) all_zero &= z[i] == 0;
    CHECK(all_zero);

    /* vmalloc_aligned. */
    void *a = vmarena_vmalloc_aligned(4096, 1 << 21);
    CHECK(a != NULL && ((uintptr_t)a & ((1 << 21) - 1)) == 0);

    /* vmalloc_huge: whole huge pages, aligned to one, from one huge page up; base pages below;
     * an impossible size refused. */
    char *h = vmarena_vmalloc_huge(3 << 20);
    CHECK(h != NULL && ((uintptr_t)h & ((1 << 21) - 1)) == 0 && vmarena_size(h) == 4 << 20);
    if (h) h[(4 << 20) - 1] = 1;
    char *hs = vmarena_vmalloc_huge(5000);
    CHECK(hs != NULL && vmarena_size(hs) == 8192);
    CHECK(vmarena_vmalloc_huge(SIZE_MAX - 100) == NULL && errno == ENOMEM);
    CHECK(vmarena_vfree(h) == 0 && vmarena_vfree(hs) == 0);

    /* vrealloc: NULL allocates; growth keeps contents; shrink in place. */
    char *r = vmarena_vrealloc(NULL, 100);
    CHECK(r != NULL);
    for (int i = 0; i < 100; i++) r[i] = (char)i;
    char *r2 = vmarena_vrealloc(r, 1 << 20);
    CHECK(r2 != NULL);
    int same = 1;
    for (int i = 0; i < 100; i++) same &= r2[i] == (char)i;
    CHECK(same);
    CHECK(vmarena_size(r2) == 1 << 20);
    CHECK(vmarena_vrealloc(r2, 10) == r2);

    /* Bad input: NULL with errno, nothing changes. */
    errno = 0;
    CHECK(vmarena_vmalloc(0) == NULL && errno == EINVAL);
    errno = 0;
    CHECK(vmarena_vzalloc(0) == NULL && errno == EINVAL);
    errno = 0;
    CHECK(vmarena_vmalloc(SIZE_MAX) == NULL && errno == ENOMEM);
    errno = 0;
    CHECK(vmarena_vmalloc(SIZE_MAX - 4095) == NULL && errno == ENOMEM);
    errno = 0;
    CHECK(vmarena_vmalloc_aligned(4096, 3) == NULL && errno == EINVAL);
    errno = 0;
    CHECK(vmarena_vmalloc_aligned(4096, 0) == NULL && errno == EINVAL);
    errno = 0;
    CHECK(vmarena_vrealloc(r2 + 4096, 10) == NULL && errno == EINVAL);
    errno = 0;
    CHECK(vmarena_vrealloc(r2, 0) == NULL && errno == EINVAL);
    CHECK(vmarena_size(r2) == 1 << 20); /* unchanged by the refused calls */

    /* A run of frees longer than a CPU's stack of its size holds (the rest go to the thread's
     * magazine and the nodes): each second free refused, nothing handed out twice after. */
    {
        enum { RUN = 200 };
        static char *run[RUN];
        int ok = 1, refused = 1, distinct = 1;
        for (int i = 0; i < RUN; i++) {
            run[i] = vmarena_vmalloc(4096);
            ok &= run[i] != NULL;
            if (run[i]) run[i][0] = (char)i;
        }
        CHECK(ok);
        for (int i = 0; i < RUN && ok; i++) ok &= vmarena_vfree(run[i]) == 0;
        CHECK(ok);
        for (int i = 0; i < RUN; i++) refused &= vmarena_vfree(run[i]) == -EINVAL;
        CHECK(refused);
        for (int i = 0; i < RUN; i++) run[i] = vmarena_vmalloc(4096);
        for (int i = 0; i < RUN; i++)
            for (int j = 0; j < i; j++) distinct &= run[i] != run[j];
        CHECK(distinct);
        for (int i = 0; i < RUN; i++) CHECK(run[i] && vmarena_vfree(run[i]) == 0);
    }

    /* vfree: interior, foreign, double free refused with -EINVAL; NULL is a no-op. */
    int local = 0;
    CHECK(vmarena_vfree(z + 4096) == -EINVAL);
    CHECK(vmarena_vfree(z + 1) == -EINVAL);
    CHECK(vmarena_vfree(&local) == -EINVAL);
    CHECK(vmarena_vfree(NULL) == 0);
    CHECK(vmarena_vfree(z) == 0);
    CHECK(vmarena_vfree(z) == -EINVAL);
    CHECK(vmarena_size(z) == 0);
    CHECK(vmarena_size(&local) == 0);
    CHECK(vmarena_size(NULL) == 0);
    CHECK(vmarena_vfree(a) == 0);
    CHECK(vmarena_vfree(r2) == 0);

    /* purge. */
    CHECK(vmarena_purge() == 0);
    char *again = vmarena_vmalloc(4096);
    CHECK(again != NULL);
    again[0] = 1;
    CHECK(vmarena_vfree(again) == 0);

    /* Fixed pools. */
    errno = 0;
    CHECK(vmarena_fixed_create(0, 4) == NULL && errno == EINVAL);
    vmarena_fixed *fp = vmarena_fixed_create(10000, 2);
    CHECK(fp != NULL);
    CHECK(vmarena_fixed_slot_size(fp) == 12288);
    char *s1 = vmarena_fixed_get(fp);
    char *s2 = vmarena_fixed_try_get(fp);
    CHECK(s1 != NULL && s2 != NULL && s1 != s2);
    memset(s1, 0x11, 12288);
    memset(s2, 0x22, 12288);
    errno = 0;
    CHECK(vmarena_fixed_try_get(fp) == NULL && errno == EAGAIN);
    errno = 0;
    CHECK(vmarena_fixed_get_timeout(fp, 1000000) == NULL && errno == ETIMEDOUT);
    CHECK(vmarena_fixed_destroy(fp) == -EBUSY);
    CHECK(vmarena_fixed_put(fp, s1 + 4096) == -EINVAL);
    CHECK(vmarena_fixed_put(fp, &local) == -EINVAL);
    CHECK(vmarena_fixed_put(fp, s1) == 0);
    CHECK(vmarena_fixed_put(fp, s1) == -EINVAL);
    CHECK(s2[0] == 0x22 && s2[12287] == 0x22);
    struct vmarena_fixed_stats st;
    CHECK(vmarena_fixed_stats(fp, &st) == 0);
    CHECK(st.slots == 2 && st.held == 1 && st.timeouts == 1 && st.cache_hits + st.list_pops + st.steals == 2);
    CHECK(vmarena_fixed_stats(fp, NULL) == -EINVAL);
    CHECK(vmarena_fixed_stats(NULL, &st) == -EINVAL);
    errno = 0;
    CHECK(vmarena_fixed_get(NULL) == NULL && errno == EINVAL);
    CHECK(vmarena_fixed_put(fp, s2) == 0);


    /* Frame pools, vmap and vm_map_ram: the same frames seen at two addresses. */
    CHECK(vmarena_frames_create(100) == NULL && errno == EINVAL);
    vmarena_frames *fr = vmarena_frames_create(16 << 20);
    CHECK(fr != NULL);
    CHECK(vmarena_frames_fd(fr) >= 0);
    CHECK(vmarena_frames_alloc(fr, 11) == -EINVAL && errno == EINVAL);
    int64_t blk = vmarena_frames_alloc(fr, 2);
    CHECK(blk >= 0 && blk % 4 == 0);
    uint32_t fs[8];
    CHECK(vmarena_frames_alloc_bulk(fr, 4, fs) == 4);
    for (int i = 0; i < 4; i++) fs[4 + i] = (uint32_t)blk + i;
    char *va = vmarena_vmap(fr, fs, 8);
    CHECK(va != NULL);
    char *vr = vmarena_vm_map_ram(fr, fs, 8);
    CHECK(vr != NULL && vr != va);
    memset(va, 0x3c, 8 * 4096);
    CHECK(vr[0] == 0x3c && vr[8 * 4096 - 1] == 0x3c);
    CHECK(vmarena_vmalloc_to_frame(va + 4096 * 5 + 9) == blk + 1);
    CHECK(vmarena_vmalloc_to_frame(p) == -EINVAL && errno == EINVAL);
    CHECK(vmarena_vmap(fr, fs, 0) == NULL && errno == EINVAL);
    CHECK(vmarena_vmap(NULL, fs, 8) == NULL && errno == EINVAL);
    CHECK(vmarena_vfree(va) == -EINVAL && errno == EINVAL);
    CHECK(vmarena_vm_unmap_ram(vr, 7) == -EINVAL);
    CHECK(vmarena_vunmap(vr) == -EINVAL);
    CHECK(vmarena_vm_unmap_ram(vr, 8) == 0);
    CHECK(vmarena_vmalloc_to_frame(vr) == -EINVAL);
    CHECK(vmarena_vm_unmap_aliases() >= 1);
    CHECK(vmarena_vm_unmap_aliases() == 0);
    CHECK(vmarena_vunmap(va) == 0);
    CHECK(vmarena_vunmap(va) == -EINVAL);
    CHECK(vmarena_frames_free(fr, (uint32_t)blk + 1, 0) == -EINVAL);
    CHECK(vmarena_frames_destroy(fr) == -EBUSY && errno == EBUSY);
    CHECK(vmarena_frames_free(fr, (uint32_t)blk, 2) == 0);
    CHECK(vmarena_frames_free(fr, (uint32_t)blk, 2) == -EINVAL);
    for (int i = 0; i < 4; i++) CHECK(vmarena_frames_free(fr, fs[i], 0) == 0);
    struct vmarena_frame_stats fst;
    CHECK(vmarena_frames_stats(fr, &fst) == 0);
    CHECK(fst.frames == 4096 && fst.user_frames == 0 && fst.bad_frees == 2);
    CHECK(vmarena_frames_stats(fr, NULL) == -EINVAL);
    CHECK(vmarena_frames_destroy(fr) == 0);
    CHECK(vmarena_frames_destroy(NULL) == 0);

    /* Pressure: the two free slots (24 KiB, resident) are released. */
    CHECK(vmarena_pressure() >= 2 * 12288);
    CHECK(vmarena_fixed_stats(fp, &st) == 0 && st.releases == 2);
    CHECK(vmarena_fixed_destroy(fp) == 0);
    CHECK(vmarena_fixed_destroy(NULL) == 0);

    /* Per-CPU objects: a copy per CPU at one stride, zero when new, each CPU's copy its own;
     * bad input and a second free refused. */
    {
        unsigned cpus = vmarena_percpu_cpus();
        CHECK(cpus >= 1);
        enum { N = 300 };
        void *h[N];
        for (int i = 0; i < N; i++) {
            size_t size = 1 + (size_t)(i * 37) % 1024, align = (size_t)1 << (1 + i % 11);
            h[i] = vmarena_percpu_alloc(size, align);
            CHECK(h[i] != NULL && ((uintptr_t)h[i] & (align - 1)) == 0);
            for (unsigned c = 0; c < cpus; c++) {
                unsigned char *q = vmarena_percpu_ptr(h[i], c);
                CHECK(q[0] == 0 && q[size - 1] == 0);
                memset(q, (int)(i + c * 7) & 0xff, size);
            }
        }
        int intact = 1;
        for (int i = 0; i < N; i++) {
            size_t size = 1 + (size_t)(i * 37) % 1024;
            for (unsigned c = 0; c < cpus; c++) {
                unsigned char *q = vmarena_percpu_ptr(h[i], c);
                for (size_t k = 0; k < size; k++) intact &= q[k] == ((i + c * 7) & 0xff);
            }
        }
        CHECK(intact);
        CHECK(vmarena_percpu_ptr(h[0], cpus) == NULL);
        size_t stride = vmarena_percpu_stride();
        CHECK(stride > 0);
        for (unsigned c = 0; c < cpus; c++) CHECK((char *)vmarena_percpu_ptr(h[7], c) == (char *)h[7] + c * stride);
        errno = 0;
        CHECK(vmarena_percpu_alloc(0, 8) == NULL && errno == EINVAL);
        CHECK(vmarena_percpu_alloc(8, 3) == NULL && errno == EINVAL);
        CHECK(vmarena_percpu_free((char *)h[0] + 1) == -EINVAL); /* inside an object */
        for (int i = 0; i < N; i++) CHECK(vmarena_percpu_free(h[i]) == 0);
        CHECK(vmarena_percpu_free(h[0]) == -EINVAL);
        CHECK(vmarena_percpu_free(NULL) == 0);
    }

    return checks_done();
}
