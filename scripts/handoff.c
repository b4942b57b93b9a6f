/* Two threads, pinned to CPUs 0 and 1, hand one-page areas to each other: each allocates an
 * area with vmarena_vmalloc, writes its first byte, passes it to the other through a ring,
 * and frees the areas the other passed to it. Areas carved on one CPU are freed and reused on
 * the other, so the state words of neighbouring areas are written from both CPUs: the case
 * where words sharing a cache line would pass the line back and forth.
 *
 * With LOCAL_PAIRS, each thread also allocates, writes and frees a one-page area that many
 * times between its handoffs: areas it reuses on its own CPU beside ones the other writes.
 *
 * Prints "ns_per_handoff X" (wall time over the areas handed, both ways).
 * Build: cc -O2 -Iinclude scripts/handoff.c -Ltarget/release -lvmarena -lpthread -o handoff
 * Usage: ./handoff [AREAS_PER_THREAD [LOCAL_PAIRS]] */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include "vmarena.h"

#define RING 64
struct ring {
    _Atomic unsigned long head, tail; /* written by the producer, the consumer */
    char pad[48];
    void *slot[RING];
};
static struct ring rings[2];
static long per_thread = 2000000;
static int local_pairs = 0;

static void *worker(void *arg) {
    int me = (int)(long)arg;
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(me, &set);
    pthread_setaffinity_np(pthread_self(), sizeof set, &set);
    struct ring *out = &rings[1 - me], *in = &rings[me];
    long sent = 0, freed = 0;
    while (sent < per_thread || freed < per_thread) {
        unsigned long t = atomic_load_explicit(&in->tail, memory_order_relaxed);
        while (t != atomic_load_explicit(&in->head, memory_order_acquire)) {
            char *p = in->slot[t % RING];
            if (p[0] != (char)(1 + (1 - me))) { fprintf(stderr, "handoff: area lost its byte\n"); exit(1); }
            if (vmarena_vfree(p) != 0) { fprintf(stderr, "handoff: vfree failed\n"); exit(1); }
            t++;
            freed++;
        }
        atomic_store_explicit(&in->tail, t, memory_order_release);
        for (int k = 0; k < local_pairs; k++) {
            char *q = vmarena_vmalloc(4096);
            if (!q) { fprintf(stderr, "handoff: vmalloc failed\n"); exit(1); }
            q[0] = 1;
            vmarena_vfree(q);
        }
        unsigned long h = atomic_load_explicit(&out->head, memory_order_relaxed);
        if (sent < per_thread && h - atomic_load_explicit(&out->tail, memory_order_acquire) < RING) {
            char *p = vmarena_vmalloc(4096);
            if (!p) { fprintf(stderr, "handoff: vmalloc failed\n"); exit(1); }
            p[0] = (char)(1 + me);
            out->slot[h % RING] = p;
            atomic_store_explicit(&out->head, h + 1, memory_order_release);
            sent++;
        }
    }
    return NULL;
}

int main(int argc, char **argv) {
    if (argc > 1) per_thread = atol(argv[1]);
    if (argc > 2) local_pairs = atoi(argv[2]);
    vmarena_vfree(vmarena_vmalloc(4096));
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    pthread_t t[2];
    for (long i = 0; i < 2; i++) pthread_create(&t[i], NULL, worker, (void *)i);
    for (int i = 0; i < 2; i++) pthread_join(t[i], NULL);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double ns = (t1.tv_sec - t0.tv_sec) * 1e9 + (t1.tv_nsec - t0.tv_nsec);
    printf("ns_per_handoff %.2f\n", ns / (2.0 * per_thread));
    return 0;
}
