/* A buffer that grows with realloc, as sqlite's sorter (doubling) and many parsers grow
 * theirs: from 1 MiB to MAX MiB, by PERCENT (200: doubling) each time, each new part written
 * one byte a page, the whole checked at the end. Prints
 * the wall time of the growth and the peak RSS (getrusage), so that a run under each
 * allocator (plain, or with LD_PRELOAD) shows whether the old and the new block were resident
 * at once and whether the time grows with the bytes copied.
 *
 *   cc -O2 -o /tmp/realloc_growth crates/bench/c/realloc_growth.c
 *   /tmp/realloc_growth 512 [PERCENT]
 *   LD_PRELOAD=target/release/libvmarena_preload.so /tmp/realloc_growth 512 [PERCENT]
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

int main(int argc, char **argv) {
    size_t max = (size_t)(argc > 1 ? atol(argv[1]) : 512) << 20;
    size_t percent = (size_t)(argc > 2 ? atol(argv[2]) : 200);
    if (percent <= 100) return 2;
    size_t size = 1 << 20;
    unsigned char *p = malloc(size);
    if (!p) return 1;
    memset(p, 1, size);
    double t0 = now();
    while (size < max) {
        size_t next = (size * percent / 100 + 4095) & ~(size_t)4095;
        if (next > max) next = max;
        unsigned char *q = realloc(p, next);
        if (!q) {
            fprintf(stderr, "realloc of %zu bytes failed\n", next);
            return 1;
        }
        p = q;
        /* The new part, one byte a page, as a buffer being filled would touch it. */
        for (size_t off = size; off < next; off += 4096) p[off] = (unsigned char)(off >> 12);
        size = next;
    }
    double t1 = now();
    for (size_t off = 0; off < size; off += 4096) {
        unsigned char want = off < (1 << 20) ? 1 : (unsigned char)(off >> 12);
        if (p[off] != want) {
            fprintf(stderr, "byte at %zu is %u, not %u\n", off, p[off], want);
            return 1;
        }
    }
    free(p);
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    printf("growth_ms %.2f peak_rss_mib %.1f final_mib %zu\n", (t1 - t0) * 1e3, ru.ru_maxrss / 1024.0,
           size >> 20);
    return 0;
}
