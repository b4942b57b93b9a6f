/* Bursts of large frees from many threads, to see how far the purges fall behind: each thread
 * allocates 32 blocks of 16 to 1,015 pages (one byte written per page), frees them all, and
 * starts again. Run under the shim with its statistics on; the space's lazy_over_limit_peak is
 * the most lazy pages beyond the purge threshold that a free saw. Prints "live_peak_bytes N":
 * the most bytes the program's blocks held at once, which depends on how the threads were
 * scheduled, so that a peak RSS can be set against it.
 *
 *   cc -O2 -o lazy_burst crates/lab/src/c/lazy_burst.c -lpthread
 *   VMARENA_PRELOAD_STATS=1 LD_PRELOAD=target/release/libvmarena_preload.so ./lazy_burst THREADS ROUNDS
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#define BLOCKS 32
#define PAGE 4096

static int rounds;
static _Atomic long live_bytes, live_peak_bytes;

/* Count `n` bytes more held, and raise the peak. */
static void hold(long n) {
    long now = atomic_fetch_add(&live_bytes, n) + n;
    long peak = atomic_load(&live_peak_bytes);
    while (now > peak && !atomic_compare_exchange_weak(&live_peak_bytes, &peak, now)) {
    }
}

static void *worker(void *arg) {
    uint32_t s = (uint32_t)(uintptr_t)arg * 7919u + 1u;
    char *held[BLOCKS];
    size_t bytes[BLOCKS];
    for (int r = 0; r < rounds; r++) {
        for (int k = 0; k < BLOCKS; k++) {
            s = s * 1103515245u + 12345u;
            size_t n = (size_t)(16 + (s >> 12) % 1000) * PAGE;
            held[k] = malloc(n);
            if (!held[k]) {
                perror("malloc");
                exit(1);
            }
            for (size_t j = 0; j < n; j += PAGE) held[k][j] = 1;
            bytes[k] = n;
            hold((long)n);
        }
        for (int k = 0; k < BLOCKS; k++) {
            hold(-(long)bytes[k]);
            free(held[k]);
        }
    }
    return NULL;
}

int main(int argc, char **argv) {
    int threads = argc > 2 ? atoi(argv[1]) : 0;
    rounds = argc > 2 ? atoi(argv[2]) : 0;
    if (threads < 1 || threads > 1024 || rounds < 1) {
        fprintf(stderr, "usage: lazy_burst THREADS (1-1024) ROUNDS\n");
        return 2;
    }
    pthread_t *t = calloc((size_t)threads, sizeof *t);
    if (!t) return 1;
    for (int i = 0; i < threads; i++)
        if (pthread_create(&t[i], NULL, worker, (void *)(uintptr_t)i) != 0) {
            perror("pthread_create");
            return 1;
        }
    for (int i = 0; i < threads; i++) pthread_join(t[i], NULL);
    free(t);
    printf("live_peak_bytes %ld\n", atomic_load(&live_peak_bytes));
    return 0;
}
