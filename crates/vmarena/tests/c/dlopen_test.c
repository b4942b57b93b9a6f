/* libvmarena.so loaded at run time (dlopen), as a plugin host or a language runtime would load
 * it, after the program has started threads: the library's static TLS block must fit, and its
 * fast paths must serve every thread, including threads that existed before the load.
 *
 * Usage: dlopen_test PATH_TO_LIBVMARENA_SO
 * Prints "dlopen ok: N allocations, 0 mismatches" and exits 0, or says what failed. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef void *(*alloc_fn)(size_t);
typedef int (*free_fn)(void *);

static alloc_fn vm_alloc;
static free_fn vm_free;
static pthread_barrier_t loaded;
static long allocations[3], mismatches[3];

#define LIVE 64
#define ROUNDS 4000

static void *worker(void *arg) {
    long id = (long)arg;
    void *live[LIVE] = {0};
    size_t sizes[LIVE] = {0};
    uint64_t r = 0x9e3779b97f4a7c15ull * (uint64_t)(id + 1);
    if (id > 0) pthread_barrier_wait(&loaded); /* started before the library was loaded */
    for (int round = 0; round < ROUNDS; round++) {
        r ^= r << 13; r ^= r >> 7; r ^= r << 17;
        int i = (int)(r % LIVE);
        if (live[i]) {
            unsigned char want = (unsigned char)(id * 31 + i);
            for (size_t k = 0; k < sizes[i]; k += 512)
                if (((unsigned char *)live[i])[k] != want) mismatches[id]++;
            if (vm_free(live[i]) != 0) mismatches[id]++;
            live[i] = NULL;
        } else {
            sizes[i] = 1 + (size_t)(r >> 20) % (5 * 4096);
            live[i] = vm_alloc(sizes[i]);
            if (!live[i]) { fprintf(stderr, "thread %ld: allocation failed\n", id); exit(1); }
            memset(live[i], (unsigned char)(id * 31 + i), sizes[i]);
            allocations[id]++;
        }
    }
    for (int i = 0; i < LIVE; i++)
        if (live[i] && vm_free(live[i]) != 0) mismatches[id]++;
    return NULL;
}

int main(int argc, char **argv) {
    if (argc < 2) { fprintf(stderr, "usage: dlopen_test LIB\n"); return 2; }
    pthread_t t[2];
    pthread_barrier_init(&loaded, NULL, 3);
    for (long i = 1; i <= 2; i++) pthread_create(&t[i - 1], NULL, worker, (void *)i);
    void *h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (!h) { fprintf(stderr, "dlopen failed: %s\n", dlerror()); return 1; }
    vm_alloc = (alloc_fn)dlsym(h, "vmarena_vmalloc");
    vm_free = (free_fn)dlsym(h, "vmarena_vfree");
    if (!vm_alloc || !vm_free) { fprintf(stderr, "dlsym failed\n"); return 1; }
    pthread_barrier_wait(&loaded);
    worker((void *)0);
    for (int i = 0; i < 2; i++) pthread_join(t[i], NULL);
    long n = allocations[0] + allocations[1] + allocations[2];
    long bad = mismatches[0] + mismatches[1] + mismatches[2];
    /* A double free must still be refused through the library loaded this way. */
    void *p = vm_alloc(4096);
    if (!p || vm_free(p) != 0 || vm_free(p) == 0) bad++;
    printf("dlopen ok: %ld allocations, %ld mismatches\n", n, bad);
    return bad == 0 ? 0 : 1;
}
