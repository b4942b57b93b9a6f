/* What a fresh page costs on this machine, against giving an area resident pages it did not
 * fault (docs/bench-log/shim-programs.md, "Unmodified programs"): first-touch faults, MADV_POPULATE_WRITE over
 * the same range, and mremap(MREMAP_FIXED | MREMAP_DONTUNMAP) of resident pages from a freed
 * range into a new one, with the mappings such moves leave behind.
 *
 *   cc -O2 -o /tmp/page_cost crates/bench/c/page_cost.c && /tmp/page_cost
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif
#ifndef MREMAP_DONTUNMAP
#define MREMAP_DONTUNMAP 4
#endif

#define PAGE 4096L
#define ROUNDS 200
#define SPAN (1L << 34)

static double now_us(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e6 + t.tv_nsec * 1e-3;
}

static int mappings(void) {
    FILE *f = fopen("/proc/self/maps", "r");
    char line[512];
    int n = 0;
    while (f && fgets(line, sizeof line, f))
        n++;
    if (f)
        fclose(f);
    return n;
}

static void touch(char *p, long bytes) {
    for (long o = 0; o < bytes; o += PAGE)
        p[o] = 1;
}

/* ROUNDS areas of `pages` pages each, at distinct offsets of one fresh reservation. */
static int run(long pages) {
    long bytes = pages * PAGE;
    char *r = mmap(0, SPAN, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                   -1, 0);
    if (r == MAP_FAILED)
        return perror("mmap"), 1;
    int maps_before = mappings();
    double fault = 0, populate = 0, move = 0;
    for (int i = 0; i < ROUNDS; i++) {
        /* Three ranges per round, a page apart so that no two are adjacent. */
        char *a = r + (long)i * 3 * (bytes + PAGE);
        char *b = a + bytes + PAGE;
        char *c = b + bytes + PAGE;
        double t0 = now_us();
        touch(a, bytes);
        double t1 = now_us();
        if (madvise(b, bytes, MADV_POPULATE_WRITE))
            return perror("MADV_POPULATE_WRITE"), 1;
        double t2 = now_us();
        /* a's resident pages become c's; a stays mapped, empty. */
        if (mremap(a, bytes, bytes, MREMAP_MAYMOVE | MREMAP_FIXED | MREMAP_DONTUNMAP, c) == MAP_FAILED)
            return perror("mremap"), 1;
        double t3 = now_us();
        fault += t1 - t0;
        populate += t2 - t1;
        move += t3 - t2;
        if (c[0] != 1 || a[0] != 0)
            return fprintf(stderr, "the move lost or kept a page\n"), 1;
    }
    int maps_after = mappings();
    printf("%5ld pages: first touch %7.1f us (%.2f a page), populate %7.1f us (%.2f), "
           "move %6.1f us (%.3f); mappings +%d for %d moves\n",
           pages, fault / ROUNDS, fault / ROUNDS / pages, populate / ROUNDS,
           populate / ROUNDS / pages, move / ROUNDS, move / ROUNDS / pages,
           maps_after - maps_before, ROUNDS);
    munmap(r, SPAN);
    return 0;
}

int main(void) {
    long sizes[] = {16, 256, 1024};
    for (unsigned i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
        if (run(sizes[i]))
            return 1;
    return 0;
}
