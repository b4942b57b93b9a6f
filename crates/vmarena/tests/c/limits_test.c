/* The C ABI's semantics wherever the process runs: under RLIMIT_AS, strict overcommit and
 * valgrind (the test that drives this program sets those up).
 *
 *   limits_test semantics   page granularity, writes to every page, the guard page faulting
 *                           where the kernel enforces guards (a child touches it), -EINVAL on a
 *                           double free and a foreign pointer, 64 areas live at once
 *   limits_test big N SIZE  N live areas of SIZE GiB each (SIZE MiB written as 256m), first and
 *                           last byte written, each refused an interior free; prints
 *                           "big ok" or "big ENOMEM at K" (errno ENOMEM) and "extensions E"
 *                           (the default space's further reservations) and exits 0 either way;
 *                           then frees them, raises a low-memory event (vmarena_pressure) and
 *                           prints "commit_drop_kib D", the fall of the system's Committed_AS
 *
 * Prints "N passed, N failed" and exits non-zero on any failure. */
#define _GNU_SOURCE
#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>
#include "vmarena.h"
#include "check.h"

/* 1 when touching `p` kills a child with SIGSEGV, 0 when the child writes it and exits. */
static int faults(volatile char *p) {
    pid_t pid = fork();
    if (pid == 0) {
        p[0] = 1;
        _exit(0);
    }
    int st = 0;
    waitpid(pid, &st, 0);
    return WIFSIGNALED(st) && WTERMSIG(st) == SIGSEGV;
}

/* The kernel enforces guard markers (MADV_GUARD_INSTALL, Linux 6.13). */
static int kernel_has_guards(long page) {
    void *m = mmap(NULL, (size_t)page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) return 0;
    int ok = madvise(m, (size_t)page, 102) == 0;
    munmap(m, (size_t)page);
    return ok;
}

static int semantics(void) {
    long page = sysconf(_SC_PAGESIZE);
    char *p = vmarena_vmalloc(10000);
    CHECK(p != NULL);
    if (!p) return checks_done();
    CHECK(((uintptr_t)p % (uintptr_t)page) == 0);
    CHECK(vmarena_size(p) == (size_t)(3 * page));
    memset(p, 0x5a, 3 * page);
    /* The page after the area is its guard: it faults where the kernel enforces guards. */
    if (kernel_has_guards(page)) CHECK(faults(p + 3 * page));
    CHECK(vmarena_vfree(p) == 0);
    CHECK(vmarena_vfree(p) == -EINVAL);
    int local;
    CHECK(vmarena_vfree(&local) == -EINVAL);
    char *z = vmarena_vzalloc(5 * page);
    CHECK(z != NULL);
    int zero = 1;
    for (long i = 0; z && i < 5 * page; i++) zero &= z[i] == 0;
    CHECK(zero);
    CHECK(vmarena_vfree(z) == 0);
    char *many[64];
    for (int i = 0; i < 64; i++) {
        many[i] = vmarena_vmalloc((size_t)(i + 1) * 64 * 1024);
        CHECK(many[i] != NULL);
        if (many[i]) many[i][(size_t)(i + 1) * 64 * 1024 - 1] = (char)i;
    }
    for (int i = 0; i < 64; i++)
        if (many[i]) {
            CHECK(many[i][(size_t)(i + 1) * 64 * 1024 - 1] == (char)i);
            CHECK(vmarena_vfree(many[i]) == 0);
        }
    errno = 0;
    CHECK(vmarena_vmalloc(0) == NULL && errno == EINVAL);
    return checks_done();
}

/* The system's committed memory (/proc/meminfo's Committed_AS), in KiB; -1 if unreadable. */
static long committed_kib(void) {
    FILE *f = fopen("/proc/meminfo", "r");
    char line[256];
    long v = -1;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "Committed_AS: %ld kB", &v) == 1) break;
    if (f) fclose(f);
    return v;
}

static int big(int n, size_t bytes) {
    char **p = calloc((size_t)n, sizeof *p);
    if (!p) return 1;
    int k;
    for (k = 0; k < n; k++) {
        errno = 0;
        p[k] = vmarena_vmalloc(bytes);
        if (!p[k]) {
            CHECK(errno == ENOMEM);
            printf("big ENOMEM at %d\n", k);
            break;
        }
        p[k][0] = (char)k;
        p[k][bytes - 1] = (char)k;
        CHECK(vmarena_size(p[k]) >= bytes);
        CHECK(vmarena_vfree(p[k] + 4096) == -EINVAL); /* interior: refused, nothing changed */
    }
    if (k == n) printf("big ok\n");
    /* How many further reservations the default space made to hold them. */
    static char json[16384];
    vmarena_stats_json(json, sizeof json);
    const char *ext = strstr(json, "\"extensions\":");
    printf("extensions %ld\n", ext ? atol(ext + strlen("\"extensions\":")) : -1L);
    long before = committed_kib();
    for (int i = 0; i < k; i++) {
        CHECK(p[i][0] == (char)i && p[i][bytes - 1] == (char)i);
        CHECK(vmarena_vfree(p[i]) == 0);
        CHECK(vmarena_vfree(p[i]) == -EINVAL); /* double free */
        CHECK(vmarena_size(p[i]) == 0);
    }
    vmarena_pressure();
    printf("commit_drop_kib %ld\n", before - committed_kib());
    free(p);
    return checks_done();
}

int main(int argc, char **argv) {
    if (argc >= 2 && strcmp(argv[1], "semantics") == 0) return semantics();
    if (argc >= 4 && strcmp(argv[1], "big") == 0) {
        /* SIZE in GiB, or in MiB with an "m" after it. */
        char *unit = NULL;
        size_t size = (size_t)strtoul(argv[3], &unit, 10);
        return big(atoi(argv[2]), unit && *unit == 'm' ? size << 20 : size << 30);
    }
    fprintf(stderr, "usage: limits_test semantics | big N SIZE (GiB, or MiB as 256m)\n");
    return 2;
}
