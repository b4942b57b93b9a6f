/* libvmarena.so (or the shim) loaded with dlopen, used from two threads that then exit, and
 * closed with dlclose before vmarena's helper threads (the purge worker, the pressure monitor)
 * have run at all: the program must go on and exit normally.
 *
 * The helpers are held back where the process may use real-time scheduling (root or
 * RLIMIT_RTPRIO): every thread on one CPU, the main thread SCHED_FIFO at priority 10 and the
 * two users at 5. The main thread waits for each user in turn; a user runs while the main
 * thread waits, and the helpers it creates inherit its policy and priority, so they queue
 * behind it; when the second user exits, the main thread (higher) runs at once, closes the
 * library, and only when it then sleeps do the helpers run. Where that is not permitted it
 * runs unscheduled and says so.
 *
 * Usage: dlclose_test PATH_TO_LIBRARY
 * Prints "late helpers: yes|no" and "dlclose ok" and exits 0. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef void *(*alloc_fn)(size_t);
typedef int (*free_fn)(void *);
static alloc_fn vm_alloc;
static free_fn vm_free;

static void use(int rounds, unsigned char tag) {
    for (int i = 0; i < rounds; i++) {
        size_t n = (size_t)(1 + i % 64) << 14;
        unsigned char *p = vm_alloc(n);
        if (!p) { fprintf(stderr, "allocation failed\n"); exit(1); }
        memset(p, tag, n);
        if (p[n - 1] != tag || vm_free(p) != 0) { fprintf(stderr, "bad area\n"); exit(1); }
    }
}

static void *user(void *arg) {
    use(300, (unsigned char)(0x3c + (long)arg));
    return NULL;
}

int main(int argc, char **argv) {
    if (argc < 2) { fprintf(stderr, "usage: dlclose_test LIB\n"); return 2; }
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(sched_getcpu(), &one);
    struct sched_param low = { .sched_priority = 10 };
    int late = sched_setaffinity(0, sizeof one, &one) == 0 &&
               pthread_setschedparam(pthread_self(), SCHED_FIFO, &low) == 0;
    void *h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (!h) { fprintf(stderr, "dlopen failed: %s\n", dlerror()); return 1; }
    vm_alloc = (alloc_fn)dlsym(h, "vmarena_vmalloc");
    vm_free = (free_fn)dlsym(h, "vmarena_vfree");
    if (!vm_alloc || !vm_free) { fprintf(stderr, "dlsym failed\n"); return 1; }
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    if (late) {
        /* Below the main thread: runs only while it waits. */
        struct sched_param user = { .sched_priority = 5 };
        pthread_attr_setinheritsched(&attr, PTHREAD_EXPLICIT_SCHED);
        pthread_attr_setschedpolicy(&attr, SCHED_FIFO);
        pthread_attr_setschedparam(&attr, &user);
    }
    pthread_t t[2];
    for (int i = 0; i < 2; i++)
        if (pthread_create(&t[i], &attr, user, (void *)(long)i) != 0) {
            fprintf(stderr, "pthread_create failed\n");
            return 1;
        }
    for (int i = 0; i < 2; i++) pthread_join(t[i], NULL);
    if (dlclose(h) != 0) { fprintf(stderr, "dlclose failed: %s\n", dlerror()); return 1; }
    /* Now the helpers run (in the library's code, if it is still mapped). */
    struct timespec pause = { 0, 200 * 1000 * 1000 };
    nanosleep(&pause, NULL);
    printf("late helpers: %s\ndlclose ok\n", late ? "yes" : "no");
    return 0;
}
