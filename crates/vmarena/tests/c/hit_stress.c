/* The C ABI's hit paths under threads (tier 3): four threads allocate areas of 1 to 7 pages (the
 * per-CPU stacks' sizes), 20 pages (thread magazines) and 300 pages (the nodes), stamp the
 * first and last word of every page with their owner and a serial number, check the stamps
 * before each free, hand every seventh area to the next thread to free, and free bursts of
 * 100 one-page areas in a row, more than a CPU's stack holds, so frees also take the path
 * where the stack is full. An area handed to two owners, or reused while still owned, breaks a
 * stamp. (Second frees are checked single-threaded, in abi_test.c: here another thread may
 * take a freed area from the CPU's stack at once, and a second free would free its area.)
 * Prints "N passed, N failed"; exits non-zero on any failure. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include "vmarena.h"

#define THREADS 4
#define ITERS 60000
#define LIVE 24
#define PAGE 4096u

struct area {
    uint64_t *p;
    size_t pages;
    uint64_t stamp;
};

struct mailbox {
    pthread_mutex_t lock;
    struct area items[4096];
    int n;
};

static struct mailbox boxes[THREADS];
static _Atomic long failures, handed, bursts;

static void stamp(struct area *a) {
    for (size_t i = 0; i < a->pages; i++) {
        a->p[i * PAGE / 8] = a->stamp;
        a->p[(i + 1) * PAGE / 8 - 1] = ~a->stamp;
    }
}

static int intact(const struct area *a) {
    for (size_t i = 0; i < a->pages; i++)
        if (a->p[i * PAGE / 8] != a->stamp || a->p[(i + 1) * PAGE / 8 - 1] != ~a->stamp) return 0;
    return 1;
}

static void release(struct area *a) {
    if (!intact(a)) {
        fprintf(stderr, "stamp %#llx broken at %p\n", (unsigned long long)a->stamp, (void *)a->p);
        failures++;
    }
    if (vmarena_vfree(a->p) != 0) failures++;
}

static void drain_box(int me) {
    struct mailbox *b = &boxes[me];
    pthread_mutex_lock(&b->lock);
    for (int i = 0; i < b->n; i++) release(&b->items[i]);
    b->n = 0;
    pthread_mutex_unlock(&b->lock);
}

static void *worker(void *arg) {
    int me = (int)(intptr_t)arg;
    uint64_t rng = 0x9e3779b97f4a7c15ull ^ (uint64_t)(me + 1), serial = 0;
    struct area live[LIVE];
    int n = 0;
    for (int it = 0; it < ITERS; it++) {
        rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
        size_t pages = rng % 64 == 0 ? 300 : rng % 16 == 1 ? 20 : 1 + rng % 7;
        struct area a = {vmarena_vmalloc(pages * PAGE), pages, ((uint64_t)me << 56) | ++serial};
        if (!a.p) {
            failures++;
            continue;
        }
        stamp(&a);
        if (n == LIVE) {
            int k = (int)((rng >> 20) % LIVE);
            struct area old = live[k];
            live[k] = a;
            if (serial % 7 == 0) {
                struct mailbox *b = &boxes[(me + 1) % THREADS];
                pthread_mutex_lock(&b->lock);
                if (b->n < 4096) {
                    b->items[b->n++] = old;
                    handed++;
                    old.p = NULL;
                }
                pthread_mutex_unlock(&b->lock);
            }
            if (old.p) release(&old);
        } else {
            live[n++] = a;
        }
        if (it % 5000 == 4999) {
            struct area burst[100];
            for (int i = 0; i < 100; i++) {
                burst[i] = (struct area){vmarena_vmalloc(PAGE), 1, ((uint64_t)me << 56) | ++serial};
                if (!burst[i].p) {
                    failures++;
                    burst[i].pages = 0;
                } else {
                    stamp(&burst[i]);
                }
            }
            for (int i = 0; i < 100; i++)
                if (burst[i].pages) release(&burst[i]);
            bursts++;
        }
        drain_box(me);
    }
    for (int i = 0; i < n; i++) release(&live[i]);
    return NULL;
}

int main(void) {
    pthread_t t[THREADS];
    for (int i = 0; i < THREADS; i++) pthread_mutex_init(&boxes[i].lock, NULL);
    for (int i = 0; i < THREADS; i++) pthread_create(&t[i], NULL, worker, (void *)(intptr_t)i);
    for (int i = 0; i < THREADS; i++) pthread_join(t[i], NULL);
    for (int i = 0; i < THREADS; i++) drain_box(i);
    int passed = 0, failed = 0;
    if (failures == 0) passed++; else failed++;
    if (bursts == THREADS * (ITERS / 5000)) passed++; else failed++;
    if (handed > 1000) passed++; else failed++;
    printf("%ld broken, %ld bursts, %ld handed over\n", (long)failures, (long)bursts, (long)handed);
    printf("%d passed, %d failed\n", passed, failed);
    return failed != 0;
}
