/* A program of vmarena's C ABI for the debugging tools: built plainly (run under valgrind),
 * with -fsanitize=thread and with -fsanitize=address by crates/vmarena/tests/debug_tools.rs.
 *
 *   tools_test correct   four threads allocate areas, stamp them, hand them to each other
 *                        through mutex-protected queues, check and free them; reused areas
 *                        are written before they are read. No tool may report anything.
 *   tools_test uaf       reads an area after vmarena_vfree
 *   tools_test leak      loses the only pointer to a live area
 *   tools_test overrun   writes the first byte past an area's usable size (its guard page)
 *   tools_test uninit    branches on a byte of a reused area that was never written since
 *   tools_test race      two threads write one area with nothing ordering them
 *   tools_test malloc_uaf  reads a 256 KiB malloc block after free (under the shim, a vmarena
 *                        area)
 *
 * Each planted bug is the program's own; the tool must report it. */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vmarena.h"

#define THREADS 4
#define ROUNDS 400
#define QUEUE 64

static void die(const char *what) {
    fprintf(stderr, "tools_test: %s\n", what);
    exit(2);
}

/* One queue per thread: areas handed to that thread by the others. */
struct queue {
    pthread_mutex_t lock;
    void *areas[QUEUE];
    size_t bytes[QUEUE];
    int len;
};
static struct queue queues[THREADS];

static void stamp(unsigned char *p, size_t n, unsigned tag) {
    for (size_t i = 0; i < n; i += 512)
        p[i] = (unsigned char)(tag + i / 512);
}

static void check(const unsigned char *p, size_t n, unsigned tag) {
    for (size_t i = 0; i < n; i += 512)
        if (p[i] != (unsigned char)(tag + i / 512))
            die("a stamp changed");
}

static void *worker(void *arg) {
    unsigned me = (unsigned)(uintptr_t)arg;
    unsigned seed = me * 2654435761u + 1;
    for (int r = 0; r < ROUNDS; r++) {
        seed = seed * 1103515245u + 12345u;
        size_t n = 4096u * (1 + seed % 24) - (seed % 97);
        unsigned char *p = (seed & 8) ? vmarena_vzalloc(n) : vmarena_vmalloc(n);
        if (!p)
            die("allocation failed");
        /* Written before read: a reused area's old bytes are undefined for the program. */
        memset(p, 0, 16);
        unsigned tag = (unsigned)(uintptr_t)p >> 12;
        stamp(p, n, tag);
        if (r % 7 == 3) {
            /* A resize keeps the stamps of the bytes it keeps. */
            unsigned char *q = vmarena_vrealloc(p, n * 2);
            if (!q)
                die("resize failed");
            check(q, n, tag);
            memset(q, 1, n * 2);
            memset(q, 0, 16);
            stamp(q, n, (unsigned)(uintptr_t)q >> 12);
            p = q;
            tag = (unsigned)(uintptr_t)q >> 12;
        }
        struct queue *to = &queues[(me + 1 + seed % (THREADS - 1)) % THREADS];
        pthread_mutex_lock(&to->lock);
        if (to->len < QUEUE) {
            to->areas[to->len] = p;
            to->bytes[to->len] = n;
            to->len++;
            p = NULL;
        }
        pthread_mutex_unlock(&to->lock);
        if (p) {
            check(p, n, tag);
            if (vmarena_vfree(p) != 0)
                die("free refused");
        }
        struct queue *mine = &queues[me];
        pthread_mutex_lock(&mine->lock);
        while (mine->len > 0) {
            mine->len--;
            unsigned char *a = mine->areas[mine->len];
            size_t an = mine->bytes[mine->len];
            pthread_mutex_unlock(&mine->lock);
            check(a, an, (unsigned)(uintptr_t)a >> 12);
            if (vmarena_vfree(a) != 0)
                die("free refused");
            pthread_mutex_lock(&mine->lock);
        }
        pthread_mutex_unlock(&mine->lock);
    }
    return NULL;
}

static int correct(void) {
    pthread_t t[THREADS];
    for (int i = 0; i < THREADS; i++)
        pthread_mutex_init(&queues[i].lock, NULL);
    for (int i = 0; i < THREADS; i++)
        if (pthread_create(&t[i], NULL, worker, (void *)(uintptr_t)i) != 0)
            die("pthread_create");
    for (int i = 0; i < THREADS; i++)
        pthread_join(t[i], NULL);
    for (int i = 0; i < THREADS; i++)
        while (queues[i].len > 0) {
            queues[i].len--;
            if (vmarena_vfree(queues[i].areas[queues[i].len]) != 0)
                die("free refused");
        }
    vmarena_purge();
    printf("ok correct\n");
    return 0;
}

static volatile unsigned char sink;

static int uaf(void) {
    unsigned char *p = vmarena_vmalloc(3 * 4096);
    if (!p)
        die("allocation failed");
    memset(p, 7, 3 * 4096);
    vmarena_vfree(p);
    sink = p[4096]; /* the planted read after free */
    printf("read %d after free\n", sink);
    return 0;
}

/* Allocates an area, writes it and drops the only pointer to it. */
__attribute__((noinline)) static void lose_one(size_t n) {
    unsigned char *p = vmarena_vmalloc(n);
    if (!p)
        die("allocation failed");
    memset(p, 1, n);
}

/* Overwrites the stack below the caller's frame, where copies of lost pointers may linger. */
__attribute__((noinline)) static void scrub_stack(void) {
    volatile unsigned char junk[1 << 16];
    for (size_t i = 0; i < sizeof junk; i++)
        junk[i] = 0;
}

static int leak(void) {
    for (int i = 0; i < 4; i++)
        lose_one((size_t)(5 + i) * 4096); /* the planted leaks */
    scrub_stack();
    printf("leaked\n");
    return 0;
}

static int overrun(void) {
    size_t n = 2 * 4096;
    unsigned char *p = vmarena_vmalloc(n);
    if (!p || vmarena_size(p) != n)
        die("allocation failed");
    p[n] = 1; /* the planted overrun into the guard page */
    printf("wrote past the end\n");
    vmarena_vfree(p);
    return 0;
}

static int uninit(void) {
    /* Stay on one CPU: a free goes to that CPU's node, and an allocation on another CPU's node
     * would be handed a never-used area, which reads as zero and is defined. */
    int cpu = sched_getcpu();
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(cpu < 0 ? 0 : cpu, &one);
    if (sched_setaffinity(0, sizeof one, &one) != 0)
        die("sched_setaffinity failed");
    size_t n = 4 * 4096;
    unsigned char *p = vmarena_vmalloc(n);
    if (!p)
        die("allocation failed");
    memset(p, 9, n);
    vmarena_vfree(p);
    /* The same size again: a reused area, whose bytes the program never wrote since. */
    unsigned char *q = vmarena_vmalloc(n);
    if (!q)
        die("allocation failed");
    if (q[100] == 9) /* the planted read of never-written bytes */
        printf("old bytes seen\n");
    printf("reused %s\n", q == p ? "the same area" : "another area");
    vmarena_vfree(q);
    return 0;
}

static unsigned char *shared;
static pthread_barrier_t start;

static void *racer(void *arg) {
    (void)arg;
    /* The barrier orders main's allocation before this thread's start of writing, and nothing
     * orders the writes of the two threads after it. (A thread spinning on an atomic flag
     * instead can make ThreadSanitizer reset its history and miss the race.) */
    pthread_barrier_wait(&start);
    unsigned char *p = shared;
    for (int i = 0; i < 1000; i++)
        p[64] = (unsigned char)i; /* the planted race: nothing orders these writes and main's */
    return NULL;
}

static int race(void) {
    pthread_t t;
    pthread_barrier_init(&start, NULL, 2);
    if (pthread_create(&t, NULL, racer, NULL) != 0)
        die("pthread_create");
    unsigned char *p = vmarena_vmalloc(4096);
    if (!p)
        die("allocation failed");
    shared = p;
    pthread_barrier_wait(&start);
    for (int i = 0; i < 1000; i++)
        p[64] = (unsigned char)(i + 1);
    pthread_join(t, NULL);
    printf("raced at %p\n", (void *)p);
    vmarena_vfree(p);
    return 0;
}

static int malloc_uaf(void) {
    unsigned char *p = malloc(256 << 10);
    if (!p)
        die("allocation failed");
    memset(p, 3, 256 << 10);
    unsigned char *volatile stale = p; /* (the compiler would refuse the read below otherwise) */
    free(p);
    sink = stale[4096]; /* the planted read after free */
    printf("read %d after free\n", sink);
    return 0;
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "correct";
    if (!strcmp(mode, "correct"))
        return correct();
    if (!strcmp(mode, "uaf"))
        return uaf();
    if (!strcmp(mode, "leak"))
        return leak();
    if (!strcmp(mode, "overrun"))
        return overrun();
    if (!strcmp(mode, "uninit"))
        return uninit();
    if (!strcmp(mode, "race"))
        return race();
    if (!strcmp(mode, "malloc_uaf"))
        return malloc_uaf();
    die("unknown mode");
    return 2;
}
