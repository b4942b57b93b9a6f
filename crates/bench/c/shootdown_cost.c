/* What a TLB shootdown costs here, and what it does to the calls that send one
 * (docs/bench-log/shim-programs.md, "TLB shootdowns"). A change to a present page-table entry must be flushed
 * from every other CPU that runs the same address space, by an interrupt; a CPU that runs
 * another process, or none, is not interrupted. Three calls, each timed with a second thread
 * of this process spinning on the other CPU and without it:
 *
 *   - touch one page, then MADV_DONTNEED it (the release of a resident page);
 *   - touch one page, then MADV_GUARD_INSTALL on it (a guard marker over a resident page,
 *     as a split of a resident freed area installs one);
 *   - mremap(MREMAP_FIXED | MREMAP_DONTUNMAP) of 128 resident pages (a move), the second thread
 *     faulting pages in and releasing them instead of spinning.
 *
 * The TLB row of /proc/interrupts is read around each; it counts for the whole machine, so run
 * this on a quiet one.
 *
 *   cc -O2 -pthread -o /tmp/shootdown_cost crates/bench/c/shootdown_cost.c && /tmp/shootdown_cost
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#ifndef MREMAP_DONTUNMAP
#define MREMAP_DONTUNMAP 4
#endif
#define GUARD_INSTALL 102
#define GUARD_REMOVE 103
#define PAGE 4096L
#define CALLS 20000
#define MOVES 2000
#define MOVE_PAGES 128L
#define SPAN (1L << 30)

static volatile int stop;

static double now_us(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e6 + t.tv_nsec * 1e-3;
}

/* Sum of the per-CPU counts on the TLB row of /proc/interrupts, -1 if there is none. */
static long tlb_interrupts(void) {
    FILE *f = fopen("/proc/interrupts", "r");
    char line[4096];
    long sum = -1;
    while (f && fgets(line, sizeof line, f)) {
        char *p = line;
        while (*p == ' ')
            p++;
        if (strncmp(p, "TLB:", 4))
            continue;
        p += 4;
        sum = 0;
        for (;;) {
            char *end;
            long v = strtol(p, &end, 10);
            if (end == p)
                break;
            sum += v;
            p = end;
        }
    }
    if (f)
        fclose(f);
    return sum;
}

static void *spinner(void *arg) {
    (void)arg;
    volatile long x = 0;
    while (!stop)
        x++;
    return 0;
}

/* Faults in pages of its own range and releases them, as the other thread of a program does. */
static void *faulter(void *arg) {
    char *r = arg;
    while (!stop) {
        for (long i = 0; i < 4096 && !stop; i++)
            r[i * PAGE] = 1;
        madvise(r, 4096 * PAGE, MADV_DONTNEED);
    }
    return 0;
}

enum what { RELEASE, GUARD, MOVE };

/* Time per call of `what`, with `other` running on a second thread (or alone when null). */
static void run(enum what what, void *(*other)(void *), const char *label) {
    char *base = mmap(0, 2 * SPAN, PROT_READ | PROT_WRITE,
                      MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (base == MAP_FAILED) {
        perror("mmap");
        exit(1);
    }
    pthread_t t;
    stop = 0;
    if (other)
        pthread_create(&t, 0, other, base + SPAN);
    usleep(2000);
    long tlb0 = tlb_interrupts();
    double total = 0;
    int n = what == MOVE ? MOVES : CALLS;
    for (int i = 0; i < n; i++) {
        if (what == MOVE) {
            char *from = base + (i % 64) * 2 * MOVE_PAGES * PAGE;
            char *to = base + SPAN / 2 + (i % 64) * 2 * MOVE_PAGES * PAGE;
            for (long p = 0; p < MOVE_PAGES; p++)
                from[p * PAGE] = 1;
            double t0 = now_us();
            if (mremap(from, MOVE_PAGES * PAGE, MOVE_PAGES * PAGE,
                       MREMAP_MAYMOVE | MREMAP_FIXED | MREMAP_DONTUNMAP, to) == MAP_FAILED) {
                perror("mremap");
                exit(1);
            }
            total += now_us() - t0;
            madvise(to, MOVE_PAGES * PAGE, MADV_DONTNEED);
        } else {
            base[0] = 1;
            double t0 = now_us();
            if (madvise(base, PAGE, what == RELEASE ? MADV_DONTNEED : GUARD_INSTALL)) {
                perror("madvise");
                exit(1);
            }
            total += now_us() - t0;
            if (what == GUARD)
                madvise(base, PAGE, GUARD_REMOVE);
        }
    }
    long tlb1 = tlb_interrupts();
    stop = 1;
    if (other)
        pthread_join(t, 0);
    munmap(base, 2 * SPAN);
    printf("%-44s %8.2f us a call, %6.2f TLB interrupts a call\n", label, total / n,
           tlb0 < 0 ? -1.0 : (double)(tlb1 - tlb0) / n);
}

int main(void) {
    run(RELEASE, 0, "release a resident page, alone");
    run(RELEASE, spinner, "release a resident page, other thread runs");
    run(GUARD, 0, "guard over a resident page, alone");
    run(GUARD, spinner, "guard over a resident page, other thread runs");
    run(MOVE, 0, "move 128 resident pages, alone");
    run(MOVE, faulter, "move 128 resident pages, other thread faults");
    return 0;
}
