/* A per-CPU counter on vmarena's per-CPU objects (`vmarena percpu-counter`), against one
 * shared atomic counter.
 *
 * Usage: percpu_counter MODE THREADS INCREMENTS
 *   shared  one counter, atomic fetch-and-add from every thread (one cache line for all)
 *   rseq    a vmarena_percpu_alloc'd counter: each increment adds to the copy of the CPU the
 *           thread runs on inside a restartable sequence (rseq), a plain add that the kernel
 *           restarts if the thread is preempted or migrated before it commits: no atomic
 *           instruction, no shared line
 *   atomic  the same per-CPU counter, incremented with an atomic add on the copy of the CPU
 *           read from rseq's cpu_id (or sched_getcpu), its address computed inline from the
 *           pool's stride: correct where rseq critical sections are not available, at the cost
 *           of a locked instruction on a mostly private line
 * The reader sums the copies of every CPU; the program checks the sum is THREADS x
 * INCREMENTS, exactly, and prints "ns_per_increment X" (wall time / (threads x increments)).
 * Exits 3 when rseq is not registered for the rseq mode (glibc registers it from 2.35). */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/rseq.h>
#include <time.h>
#include "rseq_seq.h"
#include "vmarena.h"

static const char *mode;
static long increments;
static pthread_barrier_t start_line;
static _Atomic long shared_counter;
static void *counter;          /* the per-CPU counter's handle (CPU 0's copy) */
static uintptr_t stride;       /* bytes between two CPUs' copies */

/* Add v to this CPU's copy inside a restartable sequence; 0 when committed, -1 when the kernel
 * aborted it (preemption, migration, signal): the caller retries. The commit is the single
 * add to memory; everything before it may run again. */
static inline int rseq_add(long v) {
#if defined(__x86_64__)
    struct rseq *rs = rseq_area();
    __asm__ __volatile__ goto(
        RSEQ_SEQ_BEGIN
        RSEQ_THIS_CPU_RAX
        "addq %[v], (%%rax)\n\t"         /* the commit */
        RSEQ_SEQ_END
        :
        : [cpu_id] "m"(rs->cpu_id), [rseq_cs] "m"(rs->rseq_cs), [stride] "r"(stride),
          [base] "r"((uintptr_t)counter), [v] "r"(v)
        : "memory", "cc", "rax"
        : aborted);
    return 0;
aborted:
    return -1;
#else
    (void)v;
    return -2;
#endif
}

static inline unsigned current_cpu(void) {
    if (__rseq_size > 0) {
        int c = (int)((volatile struct rseq *)rseq_area())->cpu_id;
        if (c >= 0) return (unsigned)c;
    }
    int c = sched_getcpu();
    return c < 0 ? 0 : (unsigned)c;
}

static void *worker(void *arg) {
    (void)arg;
    pthread_barrier_wait(&start_line);
    if (mode[0] == 's') {
        for (long i = 0; i < increments; i++) atomic_fetch_add_explicit(&shared_counter, 1, memory_order_relaxed);
    } else if (mode[0] == 'r') {
        for (long i = 0; i < increments; i++)
            while (rseq_add(1) != 0) {
            }
    } else {
        for (long i = 0; i < increments; i++) {
            _Atomic long *mine = (_Atomic long *)((char *)counter + current_cpu() * stride);
            atomic_fetch_add_explicit(mine, 1, memory_order_relaxed);
        }
    }
    return NULL;
}

static long read_counter(void) {
    if (mode[0] == 's') return atomic_load(&shared_counter);
    long sum = 0;
    for (unsigned c = 0; c < vmarena_percpu_cpus(); c++) sum += atomic_load((_Atomic long *)vmarena_percpu_ptr(counter, c));
    return sum;
}

int main(int argc, char **argv) {
    if (argc < 4 || (strcmp(argv[1], "shared") && strcmp(argv[1], "rseq") && strcmp(argv[1], "atomic"))) {
        fprintf(stderr, "usage: percpu_counter shared|rseq|atomic THREADS INCREMENTS\n");
        return 2;
    }
    mode = argv[1];
    int threads = atoi(argv[2]);
    increments = atol(argv[3]);
    if (threads < 1 || increments < 1) return 2;
#if defined(__x86_64__)
    int have_rseq = __rseq_size > 0;
#else
    int have_rseq = 0;
#endif
    if (mode[0] == 'r' && !have_rseq) {
        fprintf(stderr, "percpu_counter: rseq is not registered or not supported here\n");
        return 3;
    }
    counter = vmarena_percpu_alloc(sizeof(long), 64);
    if (!counter) { perror("vmarena_percpu_alloc"); return 1; }
    stride = vmarena_percpu_stride();
    pthread_t *t = calloc((size_t)threads, sizeof *t);
    pthread_barrier_init(&start_line, NULL, (unsigned)threads + 1);
    for (int i = 0; i < threads; i++) pthread_create(&t[i], NULL, worker, NULL);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    pthread_barrier_wait(&start_line);
    for (int i = 0; i < threads; i++) pthread_join(t[i], NULL);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    long want = (long)threads * increments, got = read_counter();
    if (got != want) {
        fprintf(stderr, "percpu_counter %s: the counter reads %ld, %ld increments were made\n", mode, got, want);
        return 1;
    }
    double ns = (t1.tv_sec - t0.tv_sec) * 1e9 + (t1.tv_nsec - t0.tv_nsec);
    printf("ns_per_increment %.3f\n", ns / (double)want);
    vmarena_percpu_free(counter);
    return 0;
}
