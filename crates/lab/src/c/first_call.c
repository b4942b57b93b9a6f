/* The latency of the first allocation made by a thread of a process that already has threads,
 * as a server's first request sees it (`vmarena first-call`).
 *
 * Built twice: with -DVMARENA_ABI (linked against libvmarena.so; the call is vmarena_vmalloc)
 * and without (the call is malloc, served by glibc or by whatever allocator is preloaded, the
 * shim among them). main starts an idle thread, waits 20 ms, then starts a worker that times its
 * first call of SIZE bytes (and, for reference, its second), writing one byte per page of each
 * block. Prints "first_ms X second_ms Y first_faults N", N the minor page faults the worker
 * thread took during its first call (its own figure: RUSAGE_THREAD). */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>
#ifdef VMARENA_ABI
#include "vmarena.h"
#define ALLOC(n) vmarena_vmalloc(n)
#define FREE(p) vmarena_vfree(p)
#else
#define ALLOC(n) malloc(n)
#define FREE(p) free(p)
#endif

static size_t size;
static volatile int stop;
static double first_ms, second_ms;
static long first_faults;

static double now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

static void *idle(void *a) {
    (void)a;
    while (!stop) usleep(1000);
    return NULL;
}

static long thread_faults(void) {
    struct rusage r;
    return getrusage(RUSAGE_THREAD, &r) == 0 ? r.ru_minflt : -1;
}

/* The time of one allocation and its writes, in ms; their faults in *faults. */
static double timed(long *faults) {
    long f0 = thread_faults();
    double t0 = now_ms();
    volatile char *p = ALLOC(size);
    if (!p) { perror("allocation"); exit(1); }
    for (size_t i = 0; i < size; i += 4096) p[i] = 1;
    double t = now_ms() - t0;
    *faults = thread_faults() - f0;
    FREE((void *)p);
    return t;
}

static void *worker(void *a) {
    (void)a;
    long second_faults;
    first_ms = timed(&first_faults);
    second_ms = timed(&second_faults);
    return NULL;
}

int main(int argc, char **argv) {
    size = argc > 1 ? strtoull(argv[1], NULL, 0) : 4096;
    if (size == 0) { fprintf(stderr, "usage: first_call SIZE (bytes, > 0)\n"); return 2; }
    pthread_t i, w;
    if (pthread_create(&i, NULL, idle, NULL) != 0) return 2;
    usleep(20000);
    if (pthread_create(&w, NULL, worker, NULL) != 0) return 2;
    pthread_join(w, NULL);
    stop = 1;
    pthread_join(i, NULL);
    printf("first_ms %.4f second_ms %.4f first_faults %ld\n", first_ms, second_ms, first_faults);
    return 0;
}
