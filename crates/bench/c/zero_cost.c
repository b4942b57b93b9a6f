/* What clearing the five pages of fix_align_alloc_test costs on this machine: memset of 20 KiB
 * of resident memory, the part of each loop that every contender pays (BENCHMARKS.md, fix_align).
 *
 *   cc -O2 -o /tmp/zero_cost crates/bench/c/zero_cost.c && /tmp/zero_cost
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define BYTES (5 * 4096)
#define LOOPS 200000

int main(void) {
    char *p = aligned_alloc(8 * 4096, BYTES);
    if (!p) {
        perror("aligned_alloc");
        return 1;
    }
    memset(p, 1, BYTES); /* resident before the clock starts */
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    for (int i = 0; i < LOOPS; i++) {
        memset(p, 0, BYTES);
        /* Keep the compiler from merging or dropping the stores. */
        __asm__ volatile("" : : "r"(p) : "memory");
    }
    clock_gettime(CLOCK_MONOTONIC, &b);
    double ns = (b.tv_sec - a.tv_sec) * 1e9 + (b.tv_nsec - a.tv_nsec);
    printf("memset of %d bytes: %.1f ns\n", BYTES, ns / LOOPS);
    free(p);
    return 0;
}
