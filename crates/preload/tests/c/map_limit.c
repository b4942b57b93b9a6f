/* Two threads keep up to 2,500 live areas each, of 4 KiB to 16 MiB (log-uniform), replacing a
 * random one at every step, and write the first and last byte of each. Every 250 steps the
 * first thread counts the process's mappings. Prints "maps_base N" (before the first area),
 * "maps_peak N" and "ok map_limit". Page moves split the reservation into more mappings; the
 * test that drives this program checks that they stay within the budget vmarena reads from
 * vm.max_map_count. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "vmarena.h"

#define LIVE 2500
#define STEPS 20000

static long count_maps(void) {
    FILE *f = fopen("/proc/self/maps", "r");
    if (!f) return -1;
    long n = 0;
    int c;
    while ((c = fgetc(f)) != EOF)
        if (c == '\n') n++;
    fclose(f);
    return n;
}

static long peak;
static pthread_mutex_t peak_lock = PTHREAD_MUTEX_INITIALIZER;

static uint64_t next(uint64_t *s) {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

static void *worker(void *arg) {
    uintptr_t id = (uintptr_t)arg;
    uint64_t seed = 0x9e3779b97f4a7c15ull * (id + 1);
    char **p = calloc(LIVE, sizeof *p);
    size_t *len = calloc(LIVE, sizeof *len);
    if (!p || !len) abort();
    for (int step = 0; step < STEPS; step++) {
        int i = (int)(next(&seed) % LIVE);
        if (p[i]) {
            if (p[i][0] != (char)(id + 1) || p[i][len[i] - 1] != (char)(i & 0x7f)) {
                fprintf(stderr, "FAILED: area %d of thread %lu lost its bytes\n", i, (unsigned long)id);
                exit(1);
            }
            if (vmarena_vfree(p[i]) != 0) {
                fprintf(stderr, "FAILED: vfree refused a live area\n");
                exit(1);
            }
        }
        int shift = 12 + (int)(next(&seed) % 13); /* 4 KiB .. 16 MiB */
        len[i] = ((size_t)1 << shift) + (next(&seed) % ((size_t)1 << shift));
        if (len[i] > (16u << 20)) len[i] = 16u << 20;
        p[i] = vmarena_vmalloc(len[i]);
        if (!p[i]) {
            fprintf(stderr, "FAILED: vmalloc(%zu) returned NULL\n", len[i]);
            exit(1);
        }
        p[i][0] = (char)(id + 1);
        p[i][len[i] - 1] = (char)(i & 0x7f);
        if (id == 0 && step % 250 == 0) {
            long m = count_maps();
            pthread_mutex_lock(&peak_lock);
            if (m > peak) peak = m;
            pthread_mutex_unlock(&peak_lock);
        }
    }
    for (int i = 0; i < LIVE; i++)
        if (p[i]) vmarena_vfree(p[i]);
    free(p);
    free(len);
    return NULL;
}

int main(void) {
    printf("maps_base %ld\n", count_maps());
    pthread_t t[2];
    for (uintptr_t i = 0; i < 2; i++)
        if (pthread_create(&t[i], NULL, worker, (void *)i) != 0) {
            fprintf(stderr, "FAILED: pthread_create\n");
            return 1;
        }
    for (int i = 0; i < 2; i++) pthread_join(t[i], NULL);
    long m = count_maps();
    if (m > peak) peak = m;
    printf("maps_peak %ld\nok map_limit\n", peak);
    return 0;
}
