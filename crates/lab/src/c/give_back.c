/* The give-back shape (`vmarena programs`, program give-back): how soon memory a program freed
 * leaves its resident set.
 *
 * The program allocates TOTAL_MIB MiB with malloc in blocks of 256 KiB to 4 MiB (sizes from a
 * fixed sequence), writes every page, frees every block, and sleeps. It prints one line:
 *   free_ms F held_kib H after_kib A at_100ms_kib B at_1s_kib C at_3s_kib D checksum S
 * where H is the resident set before the frees, A right after them, and B, C, D the resident
 * set 0.1 s, 1 s and 3 s after the last free returned (from /proc/self/statm).
 *
 * Usage: give_back TOTAL_MIB */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static long rss_kib(void) {
    FILE *f = fopen("/proc/self/statm", "r");
    long size = 0, resident = 0;
    if (!f) return -1;
    if (fscanf(f, "%ld %ld", &size, &resident) != 2) resident = -1;
    fclose(f);
    return resident < 0 ? -1 : resident * 4;
}

static double ms_since(const struct timespec *t0) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (t.tv_sec - t0->tv_sec) * 1e3 + (t.tv_nsec - t0->tv_nsec) / 1e6;
}

/* Sleep until `ms` milliseconds after `t0`. */
static void sleep_until(const struct timespec *t0, long ms) {
    struct timespec t = *t0;
    t.tv_sec += ms / 1000;
    t.tv_nsec += (ms % 1000) * 1000000L;
    if (t.tv_nsec >= 1000000000L) {
        t.tv_sec++;
        t.tv_nsec -= 1000000000L;
    }
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &t, NULL) != 0) {
    }
}

int main(int argc, char **argv) {
    long total_mib = argc > 1 ? atol(argv[1]) : 0;
    if (total_mib < 1 || total_mib > (1L << 20)) {
        fprintf(stderr, "usage: give_back TOTAL_MIB (1 to 1048576)\n");
        return 2;
    }
    size_t total = (size_t)total_mib << 20, held = 0, n = 0, cap = 1024;
    char **blocks = malloc(cap * sizeof *blocks);
    uint64_t x = 0x9E3779B97F4A7C15ull, sum = 0;
    while (blocks && held < total) {
        x ^= x << 13; x ^= x >> 7; x ^= x << 17;
        size_t size = (256u << 10) + (size_t)(x % ((4u << 20) - (256u << 10)));
        if (n == cap) {
            char **more = realloc(blocks, 2 * cap * sizeof *blocks);
            if (!more) break;
            blocks = more;
            cap *= 2;
        }
        char *p = malloc(size);
        if (!p) {
            fprintf(stderr, "give_back: malloc(%zu) failed\n", size);
            return 1;
        }
        for (size_t i = 0; i < size; i += 4096) p[i] = (char)(i >> 12);
        p[size - 1] = (char)n;
        sum += (unsigned char)p[size - 1] + size;
        blocks[n++] = p;
        held += size;
    }
    if (!blocks) return 1;
    long held_kib = rss_kib();
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (size_t i = 0; i < n; i++) free(blocks[i]);
    double free_ms = ms_since(&t0);
    long after_kib = rss_kib();
    struct timespec t1;
    clock_gettime(CLOCK_MONOTONIC, &t1);
    sleep_until(&t1, 100);
    long at_100ms = rss_kib();
    sleep_until(&t1, 1000);
    long at_1s = rss_kib();
    sleep_until(&t1, 3000);
    long at_3s = rss_kib();
    free(blocks);
    printf("free_ms %.3f held_kib %ld after_kib %ld at_100ms_kib %ld at_1s_kib %ld at_3s_kib %ld checksum %llu\n",
           free_ms, held_kib, after_kib, at_100ms, at_1s, at_3s, (unsigned long long)sum);
    return 0;
}
