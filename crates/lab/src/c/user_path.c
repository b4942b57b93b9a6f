/* The vmalloc path as a program calls it (`vmarena user-path`): the kernel's test_vmalloc
 * shapes, run by threads the program creates, every page of every block written.
 *
 * Built twice: with -DVMARENA_ABI (linked against libvmarena.so; vmarena_vmalloc and
 * vmarena_vfree on the default space) and without (malloc and free, or with "aligned"
 * posix_memalign to a page, served by glibc or the allocator preloaded).
 *
 * Usage: user_path WORKLOAD THREADS LOOPS [aligned] [bare] [live]
 *   aligned: posix_memalign to a page instead of malloc (the peers)
 *   bare:    no page written, so the timing is the allocator's calls alone
 *   live:    count the bytes the threads hold (blocks allocated and not yet freed, long_busy's
 *            live blocks included) in one shared counter, and print "live_peak_kib X", its
 *            highest value, last: an atomic add on a shared line in every call, so the times
 *            of such a run are not the path's; its peak RSS is read against its live peak.
 *            With many threads on few CPUs that peak comes in bursts (threads stopped while
 *            they hold a block, in a page fault waiting for the mmap lock, say), and differs
 *            between allocators and between runs.
 *   fix_size     3 pages: alloc, write, free
 *   full_fit     1 page: alloc a, alloc b, free a, alloc c, free c, free b
 *   random_size  1 to 100 pages: alloc, write, free
 *   long_busy    15,000 live 1-page blocks per thread first (untimed), then 1-page alloc+free
 *   mid_size     17, 32, 64, 128, 192 and 256 pages in turn: alloc, write, free (exact sizes
 *                of the kernel's pool range, each asked for again every six loops)
 * Before the threads start, main allocates, writes and frees one page and prints
 * "first_call_ns X", the time of that pair: a start-up the allocator pays once per process
 * (vmarena builds its default space at its first call; a peer starts at its first malloc,
 * which the C library or the loader often makes before main), kept out of the timed loops for
 * every contender.
 * Prints "ns_per_op X" (wall time from the common start to the last thread's end, divided by
 * LOOPS x THREADS), then "cpu_ns loop X final_frees Y": the threads' CPU time in their loops
 * per operation, and in long_busy's frees of the live blocks at the end per block (0 for the
 * other workloads). USER_PATH_BUSY sets long_busy's live blocks per thread (15,000);
 * USER_PATH_PERF_CTL names a `perf record --control fifo:` file, sent "enable" at the start
 * line so that a profile covers the timed part only. USER_PATH_RESIDENT names a library (part
 * of its path, "libvmarena"): at the end the program prints "resident_kib X text_kib Y", the
 * pages of that library's mappings present in its page tables (from /proc/self/pagemap) and
 * those of its executable mapping alone (`vmarena layout`). */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#ifdef VMARENA_ABI
#include "vmarena.h"
#endif

#define PAGE 4096u

static int aligned, bare;
static const char *workload;
static long loops;
static int busy_blocks = 15000;
static pthread_barrier_t start_line, ready_line;
static _Atomic long cpu_loop_ns, cpu_final_ns;
/* With "live": the bytes the threads hold now, and the most they held at once. */
static int count_live;
static _Atomic long live_bytes, live_peak;

static long thread_cpu_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return t.tv_sec * 1000000000L + t.tv_nsec;
}

static void *alloc(size_t n) {
#ifdef VMARENA_ABI
    void *p = vmarena_vmalloc(n);
#else
    void *p = NULL;
    if (aligned) {
        if (posix_memalign(&p, PAGE, n) != 0) p = NULL;
    } else {
        p = malloc(n);
    }
#endif
    if (!p) { fprintf(stderr, "allocation of %zu bytes failed\n", n); exit(1); }
    if (!bare)
        for (size_t i = 0; i < n; i += PAGE) ((volatile char *)p)[i] = 1;
    return p;
}

static void release(void *p) {
#ifdef VMARENA_ABI
    if (vmarena_vfree(p) != 0) { fprintf(stderr, "vfree failed\n"); exit(1); }
#else
    free(p);
#endif
}

static void hold(long delta) {
    if (!count_live) return;
    long now = atomic_fetch_add_explicit(&live_bytes, delta, memory_order_relaxed) + delta;
    long peak = atomic_load_explicit(&live_peak, memory_order_relaxed);
    while (now > peak && !atomic_compare_exchange_weak_explicit(&live_peak, &peak, now, memory_order_relaxed,
                                                                memory_order_relaxed)) {
    }
}

/* A block of `n` bytes, counted as held while it lives. */
static void *take(size_t n) {
    void *p = alloc(n);
    hold((long)n);
    return p;
}

static void give(void *p, size_t n) {
    hold(-(long)n);
    release(p);
}

static void *worker(void *arg) {
    uint64_t r = 88172645463325252ull + (uintptr_t)arg;
    void **busy = NULL;
    if (strcmp(workload, "long_busy") == 0) {
        busy = malloc((size_t)busy_blocks * sizeof *busy);
        for (int i = 0; i < busy_blocks; i++) busy[i] = take(PAGE);
    }
    pthread_barrier_wait(&ready_line);
    pthread_barrier_wait(&start_line);
    long c0 = thread_cpu_ns();
    for (long i = 0; i < loops; i++) {
        if (workload[0] == 'f' && workload[1] == 'i') { /* fix_size */
            give(take(3 * PAGE), 3 * PAGE);
        } else if (workload[0] == 'f') { /* full_fit */
            void *a = take(PAGE), *b = take(PAGE);
            give(a, PAGE);
            void *c = take(PAGE);
            give(c, PAGE);
            give(b, PAGE);
        } else if (workload[0] == 'm') { /* mid_size */
            static const size_t mid[6] = {17, 32, 64, 128, 192, 256};
            give(take(mid[i % 6] * PAGE), mid[i % 6] * PAGE);
        } else if (workload[0] == 'r') { /* random_size */
            r ^= r << 13; r ^= r >> 7; r ^= r << 17;
            size_t n = (1 + r % 100) * PAGE;
            give(take(n), n);
        } else { /* long_busy */
            give(take(PAGE), PAGE);
        }
    }
    long c1 = thread_cpu_ns();
    cpu_loop_ns += c1 - c0;
    if (busy) {
        for (int i = 0; i < busy_blocks; i++) give(busy[i], PAGE);
        cpu_final_ns += thread_cpu_ns() - c1;
        free(busy);
    }
    return NULL;
}

/* The KiB of the mappings of `lib` (part of a path) present in this process's page tables:
 * all of them, and the executable ones in *text_kib. -1 when /proc cannot be read. */
static long resident_kib(const char *lib, long *text_kib) {
    FILE *maps = fopen("/proc/self/maps", "r");
    FILE *pm = fopen("/proc/self/pagemap", "rb");
    long total = -1;
    *text_kib = -1;
    if (maps && pm) {
        char line[4096];
        total = 0;
        *text_kib = 0;
        while (fgets(line, sizeof line, maps)) {
            unsigned long lo, hi;
            char perms[8];
            if (!strstr(line, lib) || sscanf(line, "%lx-%lx %7s", &lo, &hi, perms) != 3) continue;
            for (unsigned long a = lo; a < hi; a += PAGE) {
                uint64_t e = 0;
                if (fseek(pm, (long)(a / PAGE * 8), SEEK_SET) != 0 || fread(&e, 8, 1, pm) != 1) continue;
                if (e >> 63) {
                    total += PAGE / 1024;
                    if (perms[2] == 'x') *text_kib += PAGE / 1024;
                }
            }
        }
    }
    if (maps) fclose(maps);
    if (pm) fclose(pm);
    return total;
}

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: user_path fix_size|full_fit|random_size|long_busy|mid_size THREADS LOOPS [aligned] [bare] [live]\n");
        return 2;
    }
    workload = argv[1];
    if (getenv("USER_PATH_BUSY")) busy_blocks = atoi(getenv("USER_PATH_BUSY"));
    int threads = atoi(argv[2]);
    loops = atol(argv[3]);
    for (int i = 4; i < argc; i++) {
        if (strcmp(argv[i], "aligned") == 0) {
            aligned = 1;
        } else if (strcmp(argv[i], "bare") == 0) {
            bare = 1;
        } else if (strcmp(argv[i], "live") == 0) {
            count_live = 1;
        } else {
            fprintf(stderr, "user_path: unknown word '%s' (aligned, bare, live)\n", argv[i]);
            return 2;
        }
    }
    if (threads < 1 || loops < 1 || busy_blocks < 1 || (strcmp(workload, "fix_size") && strcmp(workload, "full_fit") &&
                                      strcmp(workload, "random_size") && strcmp(workload, "long_busy") &&
                                      strcmp(workload, "mid_size"))) {
        fprintf(stderr, "user_path: bad workload, thread count or loop count\n");
        return 2;
    }
    struct timespec f0, f1;
    clock_gettime(CLOCK_MONOTONIC, &f0);
    release(alloc(PAGE));
    clock_gettime(CLOCK_MONOTONIC, &f1);
    printf("first_call_ns %.0f\n", (f1.tv_sec - f0.tv_sec) * 1e9 + (double)(f1.tv_nsec - f0.tv_nsec));
    pthread_t *t = calloc((size_t)threads, sizeof *t);
    if (!t) { fprintf(stderr, "user_path: no memory for %d threads\n", threads); return 1; }
    pthread_barrier_init(&ready_line, NULL, (unsigned)threads + 1);
    pthread_barrier_init(&start_line, NULL, (unsigned)threads + 1);
    for (int i = 0; i < threads; i++) pthread_create(&t[i], NULL, worker, (void *)(uintptr_t)i);
    pthread_barrier_wait(&ready_line);
    const char *ctl = getenv("USER_PATH_PERF_CTL");
    if (ctl) {
        FILE *f = fopen(ctl, "w");
        if (f) {
            fputs("enable\n", f);
            fclose(f);
        }
    }
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    pthread_barrier_wait(&start_line);
    for (int i = 0; i < threads; i++) pthread_join(t[i], NULL);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double ns = (t1.tv_sec - t0.tv_sec) * 1e9 + (t1.tv_nsec - t0.tv_nsec);
    printf("ns_per_op %.2f\n", ns / ((double)loops * threads));
    printf("cpu_ns loop %.1f final_frees %.1f\n", cpu_loop_ns / ((double)loops * threads),
           strcmp(workload, "long_busy") ? 0.0 : cpu_final_ns / ((double)busy_blocks * threads));
    if (count_live) printf("live_peak_kib %ld\n", live_peak / 1024);
    const char *lib = getenv("USER_PATH_RESIDENT");
    if (lib) {
        long text = 0, all = resident_kib(lib, &text);
        printf("resident_kib %ld text_kib %ld\n", all, text);
    }
    return 0;
}
