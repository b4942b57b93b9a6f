/* A program that uses vmarena as an installed library: it finds the header and the library
 * through pkg-config only (see the Makefile beside it).
 *
 * Two threads each keep a ring of buffers from vmarena_vmalloc, fill every buffer with a
 * pattern of their own, check it before vmarena_vfree, and grow some with vmarena_vrealloc;
 * a deferred free (vmarena_kvfree_rcu) hands one buffer to a reader in a read-side section.
 * Prints "consumer ok" and the library's version, or what went wrong. */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <vmarena.h>

#define RING 32
#define ROUNDS 20000

static int check(const unsigned char *p, size_t n, unsigned char want) {
    for (size_t i = 0; i < n; i += 97)
        if (p[i] != want) return 0;
    return n == 0 || p[n - 1] == want;
}

static void *worker(void *arg) {
    unsigned char id = (unsigned char)(uintptr_t)arg;
    unsigned char *ring[RING] = {0};
    size_t size[RING] = {0};
    uint64_t r = 0x2545f4914f6cdd1dull * (id + 1u);
    for (int round = 0; round < ROUNDS; round++) {
        r ^= r << 13; r ^= r >> 7; r ^= r << 17;
        int i = (int)(r % RING);
        unsigned char want = (unsigned char)(id * 16 + i);
        if (ring[i] && !check(ring[i], size[i], want)) {
            fprintf(stderr, "thread %u: buffer %d lost its pattern\n", id, i);
            exit(1);
        }
        if (ring[i] && (r >> 32) % 4 == 0) {
            size_t bigger = size[i] * 2;
            unsigned char *q = vmarena_vrealloc(ring[i], bigger);
            if (!q) { perror("vmarena_vrealloc"); exit(1); }
            memset(q + size[i], want, bigger - size[i]);
            ring[i] = q;
            size[i] = bigger;
            continue;
        }
        if (ring[i] && vmarena_vfree(ring[i]) != 0) { fprintf(stderr, "vmarena_vfree refused\n"); exit(1); }
        size[i] = 1 + (size_t)((r >> 16) % (6 * 4096));
        ring[i] = vmarena_vmalloc(size[i]);
        if (!ring[i]) { perror("vmarena_vmalloc"); exit(1); }
        memset(ring[i], want, size[i]);
    }
    for (int i = 0; i < RING; i++)
        if (ring[i] && vmarena_vfree(ring[i]) != 0) exit(1);
    return NULL;
}

int main(void) {
    pthread_t t[2];
    for (uintptr_t i = 0; i < 2; i++) pthread_create(&t[i], NULL, worker, (void *)(i + 1));
    for (int i = 0; i < 2; i++) pthread_join(t[i], NULL);

    /* A deferred free: the buffer stays readable inside the read-side section. */
    char *shared = vmarena_vmalloc(4096);
    if (!shared) return 1;
    strcpy(shared, "still here");
    vmarena_read_lock();
    if (vmarena_kvfree_rcu(shared) != 0) return 1;
    int readable = strcmp(shared, "still here") == 0;
    vmarena_read_unlock();
    if (!readable || vmarena_synchronize() != 0) return 1;
    /* A double free is refused, and changes nothing. */
    if (vmarena_vfree(shared) == 0) return 1;

    unsigned v = vmarena_version();
    printf("consumer ok (vmarena %u.%u.%u)\n", v >> 16, (v >> 8) & 0xff, v & 0xff);
    return 0;
}
