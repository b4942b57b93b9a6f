/* Deferred frees from C (crates/vmarena/tests/c_rcu.rs): the refusals, then readers and writers.
 *
 * Writers replace the areas of a shared table of slots: a new area with a pattern derived from
 * its sequence number (stored at offset 16, past the 16 bytes the embedded form overwrites), an
 * atomic exchange, and the old area retired with vmarena_kvfree_rcu or its embedded form, in
 * turn. Readers, inside read-side sections, load a slot and check the whole pattern of the area
 * they found. An area freed before its readers left would be reused by a writer's next
 * allocation (the thread caches hand freed areas straight back) and fail the check, or fault.
 *
 * Usage: rcu_test SECONDS. Prints "reads N checks N retired N" and "ok"; exits 1 on a failure. */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "vmarena.h"

#define SLOTS 16
static _Atomic(unsigned char *) slot[SLOTS];
static atomic_int failures, stop;
static atomic_ulong reads, retired, seqgen;

#define CHECK(c) do { if (!(c)) { fprintf(stderr, "FAILED line %d: %s\n", __LINE__, #c); atomic_fetch_add(&failures, 1); } } while (0)

static size_t size_of_seq(uint64_t seq) { return 4096 * (1 + seq % 4) - 100; }
static unsigned char pat(uint64_t seq, size_t i) { return (unsigned char)(seq * 131 + i / 8); }

static unsigned char *make(uint64_t seq) {
    size_t n = size_of_seq(seq);
    unsigned char *p = vmarena_vmalloc(n);
    if (!p) { perror("vmalloc"); exit(2); }
    memcpy(p + 16, &seq, 8);
    for (size_t i = 24; i < n; i++) p[i] = pat(seq, i);
    return p;
}

static int intact(const unsigned char *p) {
    uint64_t seq;
    memcpy(&seq, p + 16, 8);
    size_t n = size_of_seq(seq);
    for (size_t i = 24; i < n; i += 7) if (p[i] != pat(seq, i)) return 0;
    return p[n - 1] == pat(seq, n - 1);
}

static void *reader(void *a) {
    (void)a;
    unsigned r = 12345;
    while (!atomic_load(&stop)) {
        CHECK(vmarena_read_lock() == 0);
        for (int k = 0; k < 8; k++) {
            r = r * 1103515245 + 12345;
            unsigned char *p = atomic_load(&slot[(r >> 8) % SLOTS]);
            if (!intact(p)) { CHECK(!"a reader saw an area changed under it"); break; }
            atomic_fetch_add(&reads, 1);
        }
        CHECK(vmarena_read_unlock() == 0);
    }
    return NULL;
}

static void *writer(void *a) {
    uintptr_t id = (uintptr_t)a;
    unsigned r = 777 + (unsigned)id;
    int embedded = 0;
    while (!atomic_load(&stop)) {
        r = r * 1103515245 + 12345;
        unsigned char *fresh = make(atomic_fetch_add(&seqgen, 1));
        unsigned char *old = atomic_exchange(&slot[(r >> 8) % SLOTS], fresh);
        int rc = embedded ? vmarena_kvfree_rcu_embedded(old) : vmarena_kvfree_rcu(old);
        CHECK(rc == 0);
        embedded = !embedded;
        atomic_fetch_add(&retired, 1);
    }
    return NULL;
}

static void refusals(void) {
    int local;
    CHECK(vmarena_kvfree_rcu(NULL) == 0);
    CHECK(vmarena_kvfree_rcu(&local) == -EINVAL && errno == EINVAL);
    unsigned char *p = vmarena_vmalloc(3 * 4096);
    CHECK(p != NULL);
    CHECK(vmarena_kvfree_rcu(p + 4096) == -EINVAL);           /* interior */
    CHECK(vmarena_read_unlock() == -EINVAL);                 /* no section */
    CHECK(vmarena_read_lock() == 0);
    CHECK(vmarena_read_lock() == 0);                          /* nested */
    CHECK(vmarena_synchronize() == -EDEADLK);
    p[0] = 7;
    CHECK(vmarena_kvfree_rcu(p) == 0);
    CHECK(vmarena_kvfree_rcu(p) == -EINVAL);                  /* retired twice */
    CHECK(vmarena_kvfree_rcu_embedded(p) == -EINVAL);
    CHECK(vmarena_vfree(p) == -EINVAL);                       /* vfree of a retired area */
    CHECK(vmarena_vrealloc(p, 4096) == NULL && errno == EINVAL);
    CHECK(vmarena_size(p) == 3 * 4096 && p[0] == 7);          /* still there: we are reading */
    CHECK(vmarena_read_unlock() == 0);
    CHECK(vmarena_synchronize() == -EDEADLK);                 /* still one level deep */
    CHECK(vmarena_read_unlock() == 0);
    CHECK(vmarena_synchronize() == 0);
    CHECK(vmarena_size(p) == 0);                              /* freed after the grace period */
    CHECK(vmarena_read_unlock() == -EINVAL);
    vmarena_fixed *pool = vmarena_fixed_create(4096, 1);
    void *s = vmarena_fixed_get(pool);
    CHECK(vmarena_kvfree_rcu(s) == -EINVAL);                  /* a fixed slot is not vfree's */
    CHECK(vmarena_fixed_put(pool, s) == 0 && vmarena_fixed_destroy(pool) == 0);
    unsigned char *q = vmarena_vmalloc(4096);
    CHECK(vmarena_kvfree_rcu_embedded(q) == 0);
    CHECK(vmarena_synchronize() == 0 && vmarena_size(q) == 0);
}

int main(int argc, char **argv) {
    double seconds = argc > 1 ? atof(argv[1]) : 2;
    refusals();
    for (int i = 0; i < SLOTS; i++) atomic_store(&slot[i], make(atomic_fetch_add(&seqgen, 1)));
    pthread_t r[2], w[2];
    for (int i = 0; i < 2; i++) pthread_create(&r[i], NULL, reader, NULL);
    for (uintptr_t i = 0; i < 2; i++) pthread_create(&w[i], NULL, writer, (void *)i);
    usleep((useconds_t)(seconds * 1e6));
    atomic_store(&stop, 1);
    for (int i = 0; i < 2; i++) { pthread_join(r[i], NULL); pthread_join(w[i], NULL); }
    for (int i = 0; i < SLOTS; i++) CHECK(vmarena_kvfree_rcu(atomic_load(&slot[i])) == 0);
    CHECK(vmarena_synchronize() == 0);
    for (int i = 0; i < SLOTS; i++) CHECK(vmarena_size(atomic_load(&slot[i])) == 0);
    printf("reads %lu retired %lu\n", atomic_load(&reads), atomic_load(&retired));
    if (atomic_load(&failures)) return 1;
    printf("ok\n");
    return 0;
}
