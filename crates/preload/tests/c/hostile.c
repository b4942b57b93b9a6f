/* vmarena inside a process that treats its libraries the way real programs do: it forks at any
 * moment, closes and reuses descriptors, blocks signals, frees with the wrong call, trusts the
 * size functions and asks for absurd sizes. Linked against libvmarena.so; run with and without
 * the preload shim. One case per run: `hostile CASE [N]`; prints "ok CASE" and exits 0 when
 * every check held, else names the failed check and exits 1. */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <malloc.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include "vmarena.h"

static int failed;
/* Reports on stderr, which the closed-stdio cases keep open. */
#define CHECK(cond)                                                        \
    do {                                                                   \
        if (!(cond)) {                                                     \
            failed++;                                                      \
            fprintf(stderr, "FAILED line %d: %s\n", __LINE__, #cond);      \
        }                                                                  \
    } while (0)

static volatile int stop;

/* --- fork while other threads are inside vmarena --------------------------------------------- */

static void *churn(void *arg) {
    (void)arg;
    unsigned seed = (unsigned)(uintptr_t)pthread_self();
    void *held[16] = {0};
    while (!stop) {
        unsigned i = rand_r(&seed) % 16;
        if (held[i]) {
            /* Some areas go back through a grace period, retired inside a read-side section. */
            if (rand_r(&seed) % 4 == 0) {
                vmarena_read_lock();
                vmarena_kvfree_rcu(held[i]);
                vmarena_read_unlock();
            } else {
                vmarena_vfree(held[i]);
            }
            held[i] = NULL;
        } else {
            held[i] = vmarena_vmalloc(4096u * (1 + rand_r(&seed) % 64));
            if (held[i]) memset(held[i], 1, 4096);
        }
        if (rand_r(&seed) % 256 == 0) vmarena_purge();
        /* Now and then a burst of one-page areas freed in a row: full thread-cache stacks
         * spill into the depot, whose mutexes a fork may find held. */
        if (rand_r(&seed) % 64 == 0) {
            void *burst[160];
            int got = 0;
            for (; got < 160; got++) {
                if (!(burst[got] = vmarena_vmalloc(4096))) break;
                memset(burst[got], 2, 64);
            }
            for (int k = 0; k < got; k++) vmarena_vfree(burst[k]);
        }
    }
    for (int i = 0; i < 16; i++) vmarena_vfree(held[i]);
    return NULL;
}

/* The child allocates, writes and frees, with an alarm as its watchdog: a child that hangs on
 * a lock its parent's other threads held dies of SIGALRM, and the parent counts it. */
static int child_work(void) {
    alarm(20);
    for (int i = 0; i < 8; i++) {
        char *p = vmarena_vmalloc(4096u << (i % 6));
        if (!p) return 2;
        memset(p, 0x77, 4096);
        if (vmarena_vfree(p) != 0) return 3;
    }
    /* One-page areas in a row: misses refill from the depot the parent's threads filled,
     * then full stacks spill into it. */
    void *burst[200];
    for (int i = 0; i < 200; i++) {
        if (!(burst[i] = vmarena_vmalloc(4096))) return 6;
        memset(burst[i], 0x55, 64);
    }
    for (int i = 0; i < 200; i++)
        if (vmarena_vfree(burst[i]) != 0) return 7;
    char *q = vmarena_vmalloc(4096);
    if (!q || vmarena_read_lock() != 0 || vmarena_kvfree_rcu(q) != 0 || vmarena_read_unlock() != 0) return 4;
    if (vmarena_synchronize() != 0 || vmarena_size(q) != 0) return 5;
    vmarena_purge();
    return 0;
}

static int wait_child(pid_t pid) {
    int st = 0;
    if (waitpid(pid, &st, 0) != pid) return 0;
    if (WIFSIGNALED(st)) fprintf(stderr, "child killed by signal %d\n", WTERMSIG(st));
    else if (WEXITSTATUS(st) != 0) fprintf(stderr, "child exited %d\n", WEXITSTATUS(st));
    return WIFEXITED(st) && WEXITSTATUS(st) == 0;
}

static void fork_during_allocation(int forks) {
    pthread_t t[3];
    for (int i = 0; i < 3; i++) pthread_create(&t[i], NULL, churn, NULL);
    int good = 0;
    for (int i = 0; i < forks; i++) {
        pid_t pid = fork();
        if (pid == 0) _exit(child_work());
        good += pid > 0 && wait_child(pid);
    }
    stop = 1;
    for (int i = 0; i < 3; i++) pthread_join(t[i], NULL);
    fprintf(stderr, "%d of %d children exited 0\n", good, forks);
    CHECK(good == forks);
    /* With thread caches (a host that refuses membarrier has none), the bursts went through
     * the depot: the forks found its mutexes in use. */
    struct vmarena_stats st = {.size = sizeof st};
    CHECK(vmarena_stats(&st) == 0);
    if (st.cache_hits > 0) CHECK(st.depot_puts > 0 && st.depot_takes > 0);
}

/* Fork while other threads map frames with vm_map_ram (vmap blocks, the frame map) and unmap
 * them, some left lingering for vm_unmap_aliases: the child maps, writes, unmaps and removes
 * the aliases itself. */
static vmarena_frames *frames_pool;

static void *map_churn(void *arg) {
    (void)arg;
    unsigned seed = (unsigned)(uintptr_t)pthread_self();
    uint32_t f[4];
    for (int i = 0; i < 4; i++) f[i] = (uint32_t)vmarena_frames_alloc(frames_pool, 0);
    while (!stop) {
        size_t n = 1 + rand_r(&seed) % 4;
        char *p = vmarena_vm_map_ram(frames_pool, f, n);
        if (p) {
            p[0] = 1;
            vmarena_vm_unmap_ram(p, n);
        }
        if (rand_r(&seed) % 64 == 0) vmarena_vm_unmap_aliases();
    }
    for (int i = 0; i < 4; i++) vmarena_frames_free(frames_pool, f[i], 0);
    return NULL;
}

static int child_maps(void) {
    alarm(20);
    int64_t fr = vmarena_frames_alloc(frames_pool, 0);
    if (fr < 0) return 2;
    uint32_t f = (uint32_t)fr;
    for (int i = 0; i < 8; i++) {
        char *p = vmarena_vm_map_ram(frames_pool, &f, 1);
        if (!p) return 3;
        p[0] = (char)i;
        if (vmarena_vm_unmap_ram(p, 1) != 0) return 4;
    }
    if (vmarena_vm_unmap_aliases() < 0) return 5;
    return vmarena_frames_free(frames_pool, f, 0) == 0 ? 0 : 6;
}

static void fork_during_mapping(int forks) {
    frames_pool = vmarena_frames_create(16u << 20);
    CHECK(frames_pool != NULL);
    if (!frames_pool) return;
    pthread_t t[3];
    for (int i = 0; i < 3; i++) pthread_create(&t[i], NULL, map_churn, NULL);
    int good = 0;
    for (int i = 0; i < forks; i++) {
        pid_t pid = fork();
        if (pid == 0) _exit(child_maps());
        good += pid > 0 && wait_child(pid);
    }
    stop = 1;
    for (int i = 0; i < 3; i++) pthread_join(t[i], NULL);
    fprintf(stderr, "%d of %d children exited 0\n", good, forks);
    CHECK(good == forks);
}

/* One process per round: a thread makes the first vmarena call (the default space is being
 * built) while the main thread forks. */
static void *first_call(void *arg) {
    (void)arg;
    void *p = vmarena_vmalloc(65536);
    vmarena_vfree(p);
    return NULL;
}

static void fork_during_first_use(int rounds) {
    int good = 0;
    for (int r = 0; r < rounds; r++) {
        pid_t round = fork();
        if (round == 0) {
            /* A fresh process image is not needed: the default space does not exist yet in a
             * child of a parent that never called vmarena. */
            alarm(30);
            pthread_t t;
            pthread_create(&t, NULL, first_call, NULL);
            /* Spread the fork over the first call's duration. */
            struct timespec d = {0, (long)(r % 50) * 20000};
            nanosleep(&d, NULL);
            pid_t pid = fork();
            if (pid == 0) _exit(child_work());
            int ok = pid > 0 && wait_child(pid);
            pthread_join(t, NULL);
            _exit(ok ? 0 : 1);
        }
        good += round > 0 && wait_child(round);
    }
    fprintf(stderr, "%d of %d rounds exited 0\n", good, rounds);
    CHECK(good == rounds);
}

/* --- ownership across the APIs --------------------------------------------------------------- */

static void ownership(void) {
    vmarena_fixed *pool = vmarena_fixed_create(4096, 4);
    CHECK(pool != NULL);
    char *slot = vmarena_fixed_get(pool);
    CHECK(slot != NULL);
    memset(slot, 0x3c, 4096);
    CHECK(vmarena_vfree(slot) == -EINVAL);
    CHECK(vmarena_vrealloc(slot, 8192) == NULL);
    CHECK(vmarena_vunmap(slot) == -EINVAL);
    /* Nothing changed: the slot is still the pool's, its memory still the holder's. */
    char *other = vmarena_vmalloc(4096);
    CHECK(other != slot);
    memset(other, 0x11, 4096);
    CHECK(slot[0] == 0x3c && slot[4095] == 0x3c);
    CHECK(vmarena_fixed_put(pool, slot) == 0);
    CHECK(vmarena_fixed_put(pool, other) == -EINVAL);
    CHECK(vmarena_vfree(other) == 0);
    CHECK(vmarena_fixed_destroy(pool) == 0);

    /* Frames mapped by vmap: only vunmap releases them. */
    vmarena_frames *frames = vmarena_frames_create(1 << 20);
    CHECK(frames != NULL);
    uint32_t f[2];
    CHECK(vmarena_frames_alloc_bulk(frames, 2, f) == 2);
    char *m = vmarena_vmap(frames, f, 2);
    CHECK(m != NULL);
    CHECK(vmarena_vfree(m) == -EINVAL);
    CHECK(vmarena_vrealloc(m, 1 << 20) == NULL);
    CHECK(vmarena_vunmap(m) == 0);
    char *v = vmarena_vmalloc(8192);
    CHECK(vmarena_vunmap(v) == -EINVAL);
    CHECK(vmarena_vm_unmap_ram(v, 2) == -EINVAL);
    CHECK(vmarena_vfree(v) == 0);
    for (int i = 0; i < 2; i++) CHECK(vmarena_frames_free(frames, f[i], 0) == 0);
    CHECK(vmarena_frames_destroy(frames) == 0);
}

/* --- what the size functions promise survives a resize ---------------------------------------- */

static void resize(void) {
    size_t mib = 1 << 20;
    unsigned char *p = vmarena_vmalloc(mib);
    CHECK(p != NULL);
    unsigned char *q = vmarena_vrealloc(p, 10);
    CHECK(q == p);
    size_t promised = vmarena_size(q);
    CHECK(promised >= 10);
    for (size_t i = 0; i < promised; i++) q[i] = (unsigned char)(i * 7 + 1);
    unsigned char *r = vmarena_vrealloc(q, 2 * mib);
    CHECK(r != NULL);
    size_t bad = 0;
    for (size_t i = 0; r && i < promised; i++) bad += r[i] != (unsigned char)(i * 7 + 1);
    CHECK(bad == 0);
    vmarena_vfree(r);

    /* The same through malloc_usable_size and realloc (served by vmarena under the shim, by
     * the C library otherwise: the promise holds for both). */
    unsigned char *m = malloc(mib);
    CHECK(m != NULL);
    unsigned char *n = realloc(m, 100);
    size_t usable = malloc_usable_size(n);
    for (size_t i = 0; i < usable; i++) n[i] = (unsigned char)(i * 5 + 3);
    unsigned char *o = realloc(n, 3 * mib);
    CHECK(o != NULL);
    bad = 0;
    for (size_t i = 0; o && i < usable; i++) bad += o[i] != (unsigned char)(i * 5 + 3);
    CHECK(bad == 0);
    free(o);
}

/* --- signals meant for the program ------------------------------------------------------------ */

static int check_helpers(void);

static void signals(void) {
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGUSR1);
    /* vmarena starts its helper threads from this thread while its signals are open: they
     * must not inherit that mask. */
    void *big = malloc(64 << 20);
    void *v = vmarena_vmalloc(64 << 20);
    CHECK(big && v);
    memset(v, 1, 1 << 20);
    vmarena_vfree(v);
    free(big);
    vmarena_purge();
    CHECK(pthread_sigmask(SIG_BLOCK, &set, NULL) == 0);
    /* Process-directed signals: the kernel may deliver them to any thread that does not
     * block them. Every one must reach sigtimedwait here. */
    int got = 0;
    for (int i = 0; i < 50; i++) {
        kill(getpid(), i % 2 ? SIGTERM : SIGUSR1);
        struct timespec to = {5, 0};
        int s = sigtimedwait(&set, NULL, &to);
        got += s == SIGTERM || s == SIGUSR1;
    }
    CHECK(got == 50);
    /* vmarena's helper threads block every signal (SigBlk of /proc/self/task/TID/status). A
     * new thread takes its name when it first runs, which on a loaded machine can be a while
     * after it was started: look again until one is named, for up to ten seconds. */
    int helpers = 0;
    for (int look = 0; look < 1000 && helpers == 0; look++) {
        if (look) usleep(10000);
        helpers = check_helpers();
    }
    CHECK(helpers >= 1);
}

/* The threads named vmarena*, after checking that each blocks every signal it can. */
static int check_helpers(void) {
    DIR *d = opendir("/proc/self/task");
    CHECK(d != NULL);
    int helpers = 0;
    struct dirent *e;
    while (d && (e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        char path[300], comm[64] = "", line[256];
        snprintf(path, sizeof path, "/proc/self/task/%s/comm", e->d_name);
        FILE *f = fopen(path, "r");
        if (!f) continue;
        if (!fgets(comm, sizeof comm, f)) comm[0] = 0;
        fclose(f);
        if (strncmp(comm, "vmarena", 7) != 0) continue;
        helpers++;
        snprintf(path, sizeof path, "/proc/self/task/%s/status", e->d_name);
        f = fopen(path, "r");
        unsigned long long blocked = 0;
        while (f && fgets(line, sizeof line, f))
            if (!strncmp(line, "SigBlk:", 7)) blocked = strtoull(line + 7, NULL, 16);
        if (f) fclose(f);
        /* SIGTERM and SIGUSR1 among them, and every signal the kernel lets a thread block. */
        if ((blocked & 0xfffffffe7ffbfeffULL) != 0xfffffffe7ffbfeffULL)
            fprintf(stderr, "helper %s blocks only %llx\n", comm, blocked);
        CHECK((blocked & 0xfffffffe7ffbfeffULL) == 0xfffffffe7ffbfeffULL);
    }
    if (d) closedir(d);
    return helpers;
}

/* --- descriptors ------------------------------------------------------------------------------ */

/* Identity of descriptor `fd` (or 0 when closed). */
static uint64_t ino_of(int fd) {
    struct stat st;
    return fstat(fd, &st) == 0 ? (uint64_t)st.st_ino : 0;
}

/* Started with stdin and stdout closed: vmarena's descriptors must not take 0 and 1, and what
 * the program writes to a file it opens there must land in that file. */
static void closed_stdio(void) {
    void *p = vmarena_vmalloc(1 << 20);
    CHECK(p != NULL);
    memset(p, 1, 1 << 20);
    vmarena_vfree(p);
    vmarena_purge();
    void *q = malloc(8 << 20);
    free(q);
    vmarena_fixed *pool = vmarena_fixed_create(65536, 2); /* starts the low-memory monitor */
    CHECK(pool != NULL);
    vmarena_frames *frames = vmarena_frames_create(1 << 20);
    CHECK(frames != NULL);
    CHECK(vmarena_frames_fd(frames) > 2);
    for (int fd = 0; fd <= 1; fd++) {
        char buf[64];
        snprintf(buf, sizeof buf, "/proc/self/fd/%d", fd);
        char target[256] = "";
        ssize_t n = readlink(buf, target, sizeof target - 1);
        if (n > 0) {
            target[n] = 0;
            fprintf(stderr, "fd %d is %s\n", fd, target);
        }
        CHECK(n < 0);
    }
    vmarena_frames_destroy(frames);
    vmarena_fixed_destroy(pool);
}

/* The program closes every descriptor above 2 (closefrom), opens files of its own, and goes on
 * allocating and purging: vmarena must not touch the program's files. */
static void closefrom_case(const char *dir) {
    void *a[64];
    for (int i = 0; i < 64; i++) {
        a[i] = vmarena_vmalloc(4096u * (1 + i % 32));
        memset(a[i], 2, 4096);
    }
    for (int i = 0; i < 64; i += 2) vmarena_vfree(a[i]);
    vmarena_purge();
    vmarena_fixed *pool = vmarena_fixed_create(65536, 2);
    CHECK(pool != NULL);
    vmarena_frames *frames = vmarena_frames_create(1 << 20);
    int frames_fd = vmarena_frames_fd(frames);
    CHECK(frames_fd > 2);

    for (int fd = 3; fd < 4096; fd++) close(fd);
    /* Files of the program's own at every low number and at the numbers vmarena used. */
    int mine[64];
    uint64_t ino[64];
    char name[512];
    for (int i = 0; i < 64; i++) {
        snprintf(name, sizeof name, "%s/file-%d", dir, i);
        mine[i] = open(name, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
        ino[i] = ino_of(mine[i]);
    }
    int at_frames = -1;
    if (frames_fd >= 3 + 64) {
        snprintf(name, sizeof name, "%s/file-frames", dir);
        int t = open(name, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
        at_frames = dup2(t, frames_fd);
        close(t);
    }
    /* vmarena goes on: allocations, frees, purges (page moves), pressure, frames. */
    for (int i = 1; i < 64; i += 2) vmarena_vfree(a[i]);
    for (int round = 0; round < 200; round++) {
        void *p = vmarena_vmalloc(4096u * (1 + round % 64));
        CHECK(p != NULL);
        if (p) memset(p, 3, 4096);
        vmarena_vfree(p);
        void *m = malloc((size_t)(1 + round % 8) << 20);
        free(m);
    }
    vmarena_purge();
    vmarena_pressure();
    uint32_t f[2];
    size_t got = vmarena_frames_alloc_bulk(frames, 2, f);
    void *mapped = got == 2 ? vmarena_vmap(frames, f, 2) : NULL;
    /* The pool's descriptor is gone: mapping its frames is refused with a clear error (or,
     * where the program put a file at its number, must not map the program's file). */
    CHECK(mapped == NULL);
    for (size_t i = 0; i < got; i++) vmarena_frames_free(frames, f[i], 0);
    /* The program's files are untouched: same identity, nothing written, still open. */
    for (int i = 0; i < 64; i++) {
        CHECK(ino_of(mine[i]) == ino[i]);
        struct stat st;
        CHECK(fstat(mine[i], &st) == 0 && st.st_size == 0);
    }
    if (at_frames >= 0) {
        struct stat st;
        CHECK(fstat(at_frames, &st) == 0 && st.st_size == 0);
    }
    vmarena_frames_destroy(frames);
    vmarena_fixed_destroy(pool);
    /* Destroying the pool must not have closed the program's file at its old number. */
    if (at_frames >= 0) CHECK(fcntl(at_frames, F_GETFD) >= 0);
    for (int i = 0; i < 64; i++) CHECK(fcntl(mine[i], F_GETFD) >= 0);
}

/* --- absurd sizes ------------------------------------------------------------------------------ */

static void absurd_sizes(void) {
    errno = 0;
    /* 8 TiB of frames: a size the header allows (2^31 frames), whose per-frame bookkeeping
     * (128 GiB of descriptors) cannot be allocated. */
    vmarena_frames *f = vmarena_frames_create((size_t)1 << 43);
    CHECK(f == NULL && errno == ENOMEM);
    errno = 0;
    f = vmarena_frames_create(SIZE_MAX);
    CHECK(f == NULL && errno != 0);
    errno = 0;
    vmarena_fixed *pool = vmarena_fixed_create(4096, SIZE_MAX / 2);
    CHECK(pool == NULL && errno != 0);
    errno = 0;
    CHECK(vmarena_vmalloc(SIZE_MAX) == NULL && errno == ENOMEM);
    uint32_t one = 0;
    vmarena_frames *ok = vmarena_frames_create(1 << 20);
    CHECK(ok != NULL);
    errno = 0;
    /* A count no array can have (more than PTRDIFF_MAX bytes): refused before it is read. */
    CHECK(vmarena_vmap(ok, &one, SIZE_MAX / 2) == NULL && errno == EINVAL);
    vmarena_frames_destroy(ok);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: hostile CASE [N|DIR]\n");
        return 2;
    }
    const char *c = argv[1];
    int n = argc > 2 ? atoi(argv[2]) : 0;
    if (!strcmp(c, "fork_alloc")) fork_during_allocation(n ? n : 100);
    else if (!strcmp(c, "fork_first_use")) fork_during_first_use(n ? n : 100);
    else if (!strcmp(c, "fork_maps")) fork_during_mapping(n ? n : 100);
    else if (!strcmp(c, "ownership")) ownership();
    else if (!strcmp(c, "resize")) resize();
    else if (!strcmp(c, "signals")) signals();
    else if (!strcmp(c, "closed_stdio")) closed_stdio();
    else if (!strcmp(c, "closefrom")) closefrom_case(argc > 2 ? argv[2] : "/tmp");
    else if (!strcmp(c, "absurd_sizes")) absurd_sizes();
    else {
        fprintf(stderr, "unknown case %s\n", c);
        return 2;
    }
    if (failed) return 1;
    fprintf(stderr, "ok %s\n", c);
    return 0;
}
