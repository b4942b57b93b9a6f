/* Moving 256 resident pages into an empty range: mremap(MREMAP_DONTUNMAP), which step Move uses
 * and which takes the mmap lock for writing and splits the mapping, against UFFDIO_MOVE
 * (Linux 6.8+), which takes per-mapping locks and splits nothing but needs the destination
 * registered with a userfaultfd (here in write-protect mode, which delivers no fault events).
 * With an argument, a second thread faults and releases pages all along, and its progress is
 * reported for each kind of move (BENCHMARKS.md, "The headroom in the default space and
 * glibc's thresholds").
 *
 *   cc -O2 -pthread -o /tmp/uffd_move_cost crates/bench/c/uffd_move_cost.c
 *   /tmp/uffd_move_cost; /tmp/uffd_move_cost busy
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/userfaultfd.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#ifndef UFFD_FEATURE_MOVE /* older headers: the ABI of Linux 6.8 */
#define UFFD_FEATURE_MOVE (1ULL << 16)
struct uffdio_move {
    uint64_t dst, src, len, mode;
    int64_t move;
};
#define UFFDIO_MOVE_MODE_ALLOW_SRC_HOLES (1ULL << 1)
#define UFFDIO_MOVE _IOWR(UFFDIO, 0x05, struct uffdio_move)
#endif
#ifndef UFFD_USER_MODE_ONLY
#define UFFD_USER_MODE_ONLY 1
#endif

#define PAGE 4096UL
#define PAGES 256
#define ROUNDS 400

static char *other;
static const size_t other_bytes = 256UL << 20;
static atomic_int stop;
static atomic_long touched;

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

/* The other thread: write a byte per page, release everything at the end of the range. */
static void *busy(void *arg) {
    (void)arg;
    size_t i = 0;
    while (!stop) {
        other[i] = 1;
        atomic_fetch_add_explicit(&touched, 1, memory_order_relaxed);
        i = (i + PAGE) % other_bytes;
        if (i == 0) madvise(other, other_bytes, MADV_DONTNEED);
    }
    return NULL;
}

int main(int argc, char **argv) {
    int with_busy = argc > 1;
    size_t bytes = 4UL << 30;
    char *base = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (base == MAP_FAILED) { perror("mmap"); return 1; }
    other = base + (3UL << 30);
    int uffd = (int)syscall(SYS_userfaultfd, O_CLOEXEC | UFFD_USER_MODE_ONLY);
    struct uffdio_api api = {.api = UFFD_API, .features = UFFD_FEATURE_MOVE};
    if (uffd < 0 || ioctl(uffd, UFFDIO_API, &api) != 0 || !(api.features & UFFD_FEATURE_MOVE)) {
        fprintf(stderr, "no UFFDIO_MOVE here: %s\n", strerror(errno));
        return 1;
    }
    struct uffdio_register reg = {.range = {(uintptr_t)base, 2UL << 30}, .mode = UFFDIO_REGISTER_MODE_WP};
    if (ioctl(uffd, UFFDIO_REGISTER, &reg) != 0) { perror("UFFDIO_REGISTER"); return 1; }
    for (int kind = 0; kind < 2; kind++) {
        char *src = base + (64UL << 20) + kind * (1UL << 30), *dst = src + (512UL << 20);
        pthread_t th;
        stop = 0;
        if (with_busy) pthread_create(&th, NULL, busy, NULL);
        long t0 = atomic_load(&touched);
        double w0 = now_s(), in_call = 0;
        for (int r = 0; r < ROUNDS; r++) {
            char *s = src + r * (PAGES + 1) * PAGE, *d = dst + r * (PAGES + 1) * PAGE;
            for (size_t i = 0; i < PAGES; i++) s[i * PAGE] = (char)r;
            double c0 = now_s();
            if (kind == 0) {
                if (mremap(s, PAGES * PAGE, PAGES * PAGE, MREMAP_MAYMOVE | MREMAP_FIXED | MREMAP_DONTUNMAP, d) == MAP_FAILED) {
                    perror("mremap");
                    return 1;
                }
            } else {
                struct uffdio_move mv = {.dst = (uintptr_t)d, .src = (uintptr_t)s, .len = PAGES * PAGE,
                                         .mode = UFFDIO_MOVE_MODE_ALLOW_SRC_HOLES};
                if (ioctl(uffd, UFFDIO_MOVE, &mv) != 0) { perror("UFFDIO_MOVE"); return 1; }
            }
            in_call += now_s() - c0;
            for (size_t i = 0; i < PAGES; i++)
                if (d[i * PAGE] != (char)r) { fprintf(stderr, "round %d: moved page lost its contents\n", r); return 1; }
        }
        double wall = now_s() - w0;
        long pages = atomic_load(&touched) - t0;
        stop = 1;
        if (with_busy) pthread_join(th, NULL);
        printf("%-11s %.1f us per %d-page move", kind ? "UFFDIO_MOVE" : "mremap", in_call * 1e6 / ROUNDS, PAGES);
        if (with_busy) printf(", the other thread %.2f M pages/s", pages / wall / 1e6);
        printf("\n");
    }
    return 0;
}
