/* Rounds of a bulk allocation and a bulk free of one-page blocks on one thread: each round
 * allocates N blocks (writing a byte of each) and then frees them in the same order, and the
 * program prints, per round with PER_ROUND set and over all rounds, the ns per allocation and
 * per free. The first round carves fresh memory; the later ones reuse what the frees kept.
 *
 *   cc -O2 -Iinclude -DVMARENA_ABI -o bulk_v scripts/bulk-rounds.c -Ltarget/release \
 *      -Wl,-rpath,$PWD/target/release -lvmarena
 *   cc -O2 -o bulk_m scripts/bulk-rounds.c      # malloc/free, for a preloaded peer
 *   PER_ROUND=1 ./bulk_v 15000 8
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#ifdef VMARENA_ABI
#include "vmarena.h"
#define ALLOC(n) vmarena_vmalloc(n)
#define FREE(p) vmarena_vfree(p)
#else
#define ALLOC(n) malloc(n)
#define FREE(p) free(p)
#endif

static long now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1000000000L + t.tv_nsec;
}

int main(int argc, char **argv) {
    if (argc < 3 || atoi(argv[1]) < 1 || atoi(argv[2]) < 1) {
        fprintf(stderr, "usage: bulk-rounds BLOCKS ROUNDS\n");
        return 2;
    }
    int n = atoi(argv[1]), rounds = atoi(argv[2]);
    void **b = malloc((size_t)n * sizeof *b);
    long alloc_ns = 0, free_ns = 0;
    for (int k = 0; k < rounds; k++) {
        long t0 = now_ns();
        for (int i = 0; i < n; i++) {
            if (!(b[i] = ALLOC(4096))) {
                fprintf(stderr, "allocation failed\n");
                return 1;
            }
            ((volatile char *)b[i])[0] = 1;
        }
        long t1 = now_ns();
        for (int i = 0; i < n; i++) FREE(b[i]);
        long t2 = now_ns();
        alloc_ns += t1 - t0;
        free_ns += t2 - t1;
        if (getenv("PER_ROUND"))
            printf("round %d alloc %.1f free %.1f\n", k, (t1 - t0) / (double)n, (t2 - t1) / (double)n);
    }
    printf("alloc %.1f free %.1f ns\n", alloc_ns / (double)n / rounds, free_ns / (double)n / rounds);
    free(b);
    return 0;
}
