/* The preload shim from C: run under LD_PRELOAD=libvmarena_preload.so (crates/preload/tests/shim.rs).
 *
 * Usage: shim_test <case>, cases: routing, threshold, fork, threads, dlopen, early,
 * glibc_thresholds, glibc_trim, membarrier, introspection, foreign_free, double_free. Prints "ok <case>" and exits 0 when every check passed. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <malloc.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/membarrier.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

static int failures;
#define CHECK(c) do { if (!(c)) { fprintf(stderr, "FAIL %s:%d: %s\n", __FILE__, __LINE__, #c); failures++; } } while (0)

typedef size_t (*size_fn)(const void *);
static size_fn vm_size; /* vmarena_size, exported by the shim: > 0 only for live vmarena areas */

static int is_vm(const void *p) { return vm_size && vm_size(p) > 0; }

static void fill(unsigned char *p, size_t n, unsigned owner) {
    for (size_t i = 0; i < n; i++) p[i] = (unsigned char)(owner ^ (i * 31));
}
static int verify(const unsigned char *p, size_t n, unsigned owner) {
    for (size_t i = 0; i < n; i++) if (p[i] != (unsigned char)(owner ^ (i * 31))) return 0;
    return 1;
}

/* Early start: runs before main, before anything else in this program allocated. */
static void *early_block;
static size_t early_usable;
__attribute__((constructor(101))) static void early(void) {
    early_block = malloc(3 << 20);
    if (early_block) { memset(early_block, 0x5a, 3 << 20); early_usable = malloc_usable_size(early_block); }
}

static void routing(size_t thr) {
    /* malloc: by size */
    void *s = malloc(thr - 1), *l = malloc(thr);
    CHECK(s && l);
    CHECK(!is_vm(s));
    CHECK(is_vm(l));
    CHECK(((uintptr_t)l & 4095) == 0);
    CHECK(malloc_usable_size(l) >= thr && malloc_usable_size(l) % 4096 == 0);
    CHECK(malloc_usable_size(s) >= thr - 1);
    fill(l, thr, 1);
    free(s);
    free(NULL);

    /* size classes: 17 pages are served as 20 (four classes per doubling), and a freed area
       serves the next request of its class */
    if (thr <= 17 * 4096) {
        void *c1 = malloc(17 * 4096);
        CHECK(c1 && is_vm(c1) && malloc_usable_size(c1) == 20 * 4096);
        fill(c1, 20 * 4096, 3);
        free(c1);
        void *c2 = malloc(19 * 4096 + 5);
        CHECK(c2 == c1 && malloc_usable_size(c2) == 20 * 4096);
        free(c2);
    }

    /* realloc: in vmarena, out of it, into it, NULL and 0 */
    l = realloc(l, 5 * thr);
    CHECK(l && is_vm(l) && verify(l, thr, 1));
    fill(l, 5 * thr, 2);
    void *m = realloc(l, 100);
    CHECK(m && !is_vm(m) && verify(m, 100, 2));
    void *g = realloc(m, 3 * thr);
    CHECK(g && is_vm(g) && verify(g, 100, 2));
    errno = 0;
    CHECK(realloc(g, 0) == NULL);
    void *r = realloc(NULL, 2 * thr);
    CHECK(r && is_vm(r));
    free(r);

    /* calloc: zeroed, large and small; overflow refused */
    for (int round = 0; round < 3; round++) {
        unsigned char *c = calloc(thr / 8, 8);
        CHECK(c && is_vm(c));
        size_t nz = 0;
        for (size_t i = 0; i < thr; i++) nz += c[i] != 0;
        CHECK(nz == 0);
        memset(c, 0xff, thr); /* dirty it: the next round may reuse the area */
        free(c);
    }
    unsigned char *cs = calloc(10, 10);
    CHECK(cs && !is_vm(cs) && cs[99] == 0);
    free(cs);
    errno = 0;
    volatile size_t huge = SIZE_MAX / 2; /* volatile: the compiler must not see the overflow */
    CHECK(calloc(huge, 4) == NULL && errno == ENOMEM);

    /* the aligned family */
    void *pm = NULL;
    CHECK(posix_memalign(&pm, 1 << 16, thr) == 0 && pm && is_vm(pm) && ((uintptr_t)pm & 0xffff) == 0);
    free(pm);
    CHECK(posix_memalign(&pm, 64, 100) == 0 && pm && !is_vm(pm) && ((uintptr_t)pm & 63) == 0);
    free(pm);
    CHECK(posix_memalign(&pm, 24, thr) == EINVAL);
    CHECK(posix_memalign(&pm, 2, thr) == EINVAL);
    void *aa = aligned_alloc(1 << 21, 2 * thr);
    CHECK(aa && is_vm(aa) && ((uintptr_t)aa & ((1 << 21) - 1)) == 0);
    free(aa);
    void *ma = memalign(8192, thr);
    CHECK(ma && is_vm(ma) && ((uintptr_t)ma & 8191) == 0);
    free(ma);
    void *va = valloc(thr);
    CHECK(va && is_vm(va) && ((uintptr_t)va & 4095) == 0);
    free(va);
    void *vs = valloc(100);
    CHECK(vs && !is_vm(vs) && ((uintptr_t)vs & 4095) == 0);
    free(vs);
    void *pv = pvalloc(thr - 100); /* rounded up to whole pages: at or above the threshold */
    CHECK(pv && is_vm(pv) && malloc_usable_size(pv) >= thr - 100);
    free(pv);

    /* the early block: served by vmarena before main ran */
    CHECK(early_block && is_vm(early_block) && early_usable >= (3 << 20));
    CHECK(((unsigned char *)early_block)[(3 << 20) - 1] == 0x5a);
    free(early_block);
}

struct job { unsigned id; size_t thr; int ok; };

static void *worker(void *arg) {
    struct job *j = arg;
    j->ok = 1;
    void *keep[6] = {0};
    size_t len[6] = {0};
    unsigned seed = j->id * 2654435761u;
    for (unsigned i = 0; i < 300; i++) {
        unsigned k = i % 6;
        if (keep[k]) {
            if (!verify(keep[k], len[k], j->id * 16 + k)) j->ok = 0;
            free(keep[k]);
        }
        seed = seed * 1103515245u + 12345u;
        len[k] = j->thr / 2 + (seed >> 8) % (8 * j->thr);
        keep[k] = (seed & 1) ? malloc(len[k]) : calloc(1, len[k]);
        if (!keep[k]) { j->ok = 0; return NULL; }
        fill(keep[k], len[k], j->id * 16 + k);
        if (i % 7 == 0) {
            size_t nl = len[k] * 2 + 1;
            void *q = realloc(keep[k], nl);
            if (!q || !verify(q, len[k], j->id * 16 + k)) j->ok = 0;
            keep[k] = q;
            fill(q, nl, j->id * 16 + k);
            len[k] = nl;
        }
    }
    for (unsigned k = 0; k < 6; k++) {
        if (keep[k] && !verify(keep[k], len[k], j->id * 16 + k)) j->ok = 0;
        free(keep[k]);
    }
    return NULL;
}

static void threads(size_t thr) {
    /* Threads that allocate, check their patterns and exit, several generations. */
    for (int gen = 0; gen < 5; gen++) {
        pthread_t t[8];
        struct job j[8];
        for (unsigned i = 0; i < 8; i++) {
            j[i] = (struct job){ .id = gen * 8 + i, .thr = thr };
            CHECK(pthread_create(&t[i], NULL, worker, &j[i]) == 0);
        }
        for (unsigned i = 0; i < 8; i++) { pthread_join(t[i], NULL); CHECK(j[i].ok); }
    }
}

static volatile int stop;
static void *churn(void *arg) {
    size_t thr = *(size_t *)arg;
    while (!stop) { void *p = malloc(thr * 3); if (p) { memset(p, 1, 4096); free(p); } }
    return NULL;
}

static void fork_case(size_t thr) {
    /* A parent block survives in the child; the child allocates and frees; meanwhile two
     * threads of the parent churn large blocks, so locks are taken at the moment of fork. */
    unsigned char *parent_block = malloc(4 * thr);
    CHECK(parent_block && is_vm(parent_block));
    fill(parent_block, 4 * thr, 77);
    pthread_t t[2];
    for (int i = 0; i < 2; i++) pthread_create(&t[i], NULL, churn, &thr);
    for (int round = 0; round < 40; round++) {
        pid_t pid = fork();
        if (pid == 0) {
            alarm(20); /* a child stuck on a lock held by a thread it does not have dies here */
            int ok = verify(parent_block, 4 * thr, 77);
            for (int i = 0; i < 50; i++) {
                unsigned char *p = malloc(thr + i * 4096);
                if (!p || !is_vm(p)) ok = 0;
                else { fill(p, thr, i); ok &= verify(p, thr, i); free(p); }
            }
            free(parent_block);
            _exit(ok ? 0 : 3);
        }
        int st = 0;
        CHECK(pid > 0 && waitpid(pid, &st, 0) == pid);
        if (!(WIFEXITED(st) && WEXITSTATUS(st) == 0)) {
            fprintf(stderr, "child %d: status %#x (signal %d)\n", round, st, WIFSIGNALED(st) ? WTERMSIG(st) : 0);
            failures++;
            break;
        }
    }
    stop = 1;
    for (int i = 0; i < 2; i++) pthread_join(t[i], NULL);
    CHECK(verify(parent_block, 4 * thr, 77));
    free(parent_block);
}

static void dlopen_case(size_t thr, const char *lib) {
    /* A library loaded later allocates through the same routing; blocks cross between it and
     * the program in both directions. */
    void *h = dlopen(lib, RTLD_NOW);
    CHECK(h != NULL);
    if (!h) { fprintf(stderr, "%s\n", dlerror()); return; }
    void *(*lib_alloc)(size_t) = (void *(*)(size_t))dlsym(h, "lib_alloc");
    void (*lib_free)(void *) = (void (*)(void *))dlsym(h, "lib_free");
    CHECK(lib_alloc && lib_free);
    unsigned char *a = lib_alloc(2 * thr), *b = lib_alloc(64);
    CHECK(a && is_vm(a) && b && !is_vm(b));
    fill(a, 2 * thr, 9);
    free(a);
    free(b);
    unsigned char *c = malloc(2 * thr);
    CHECK(c && is_vm(c));
    lib_free(c);
    dlclose(h);
}

/* glibc's main heap after 2 MiB of blocks below the shim's threshold were allocated and freed
 * again, newest first: the size of its top chunk (mallinfo2's keepcost), which glibc trims
 * down to its pad whenever it passes the trim threshold. */
static size_t top_after_small_churn(void) {
    enum { N = 64, SZ = 32 << 10 };
    void *b[N];
    for (int i = 0; i < N; i++) {
        b[i] = malloc(SZ);
        CHECK(b[i] && !is_vm(b[i]));
        if (b[i]) memset(b[i], 1, SZ);
    }
    for (int i = N - 1; i >= 0; i--) free(b[i]);
    return mallinfo2().keepcost;
}

/* A 4 MiB block freed through the shim moves glibc's trim threshold to 8 MiB, as glibc's own
 * free of a mapped 4 MiB block would, within the cap of eight shim thresholds: run with a
 * shim threshold of 512 KiB (cap 4 MiB), the next 2 MiB freed at the top of glibc's heap stay
 * there. mode "follows": that; "kept": glibc keeps trimming below 1 MiB (the shim's option
 * off, a threshold set in the environment, or the cap of 512 KiB at the default threshold);
 * "mallopt": the program sets its own trim threshold first, which glibc's own adjustment
 * respects, and so must the shim. */
static void glibc_thresholds_case(size_t thr, const char *mode) {
    int follows = !strcmp(mode, "follows");
    CHECK(follows || !strcmp(mode, "kept") || !strcmp(mode, "mallopt"));
    if (follows) CHECK(thr >= (512 << 10));
    /* The blocks of the churn must stay with glibc. */
    CHECK(thr > (32 << 10));
    if (!strcmp(mode, "mallopt")) CHECK(mallopt(M_TRIM_THRESHOLD, 128 << 10) == 1);
    size_t before = top_after_small_churn();
    char *big = malloc(4 << 20);
    CHECK(big && is_vm(big));
    if (big) memset(big, 1, 4 << 20);
    free(big);
    size_t after = top_after_small_churn();
    printf("%s: top of glibc's heap after the churn: %zu bytes before the large free, %zu after\n", mode, before, after);
    CHECK(before < (1 << 20));
    if (follows) CHECK(after >= (2 << 20) - (64 << 10));
    else CHECK(after < (1 << 20));
}

static long rss_anon_kib(void) {
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long kib = -1;
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, "RssAnon:", 8)) kib = strtol(line + 8, NULL, 10);
    if (f) fclose(f);
    return kib;
}

/* glibc's free memory inside its heap goes back after the default space's idle purge:
 * 12 MiB of small blocks freed below a block still in use (so glibc cannot trim its top),
 * then a large free for the purge worker to find, then an idle period of three decay
 * intervals. Mode "on": the memory goes (malloc_trim after the purge); "off" (the option
 * off): it stays. */
static void glibc_trim_case(size_t thr, const char *mode) {
    int on = !strcmp(mode, "on");
    CHECK(on || !strcmp(mode, "off"));
    CHECK(thr > (32 << 10));
    enum { N = 384, SMALL = 32 << 10 };
    static char *small[N];
    for (int i = 0; i < N; i++) {
        small[i] = malloc(SMALL);
        CHECK(small[i] && !is_vm(small[i]));
        if (small[i]) memset(small[i], i, SMALL);
    }
    char *last = malloc(SMALL); /* above the others: keeps glibc's top in use */
    CHECK(last && !is_vm(last));
    char *big = malloc(1 << 20);
    CHECK(big && is_vm(big));
    if (big) memset(big, 1, 1 << 20);
    for (int i = 0; i < N; i++) free(small[i]);
    free(big);
    long before = rss_anon_kib();
    usleep(1500 * 1000);
    long after = rss_anon_kib();
    printf("%s: anonymous RSS %ld KiB after the frees, %ld KiB after the idle period\n", mode, before, after);
    CHECK(before > (N * SMALL >> 10) - 1024);
    if (on) CHECK(after < before - (N * SMALL >> 10) + 2048);
    else CHECK(after > before - 2048);
    free(last);
}

/* Run with a threshold above every request of this program, so that no vmarena area exists:
 * the process is registered for private expedited barriers all the same, from the first
 * malloc (while it had one thread), and an unregistered process would get EPERM here. */
static void membarrier_case(void) {
    CHECK(syscall(SYS_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED, 0, 0) == 0);
    void *p = malloc(3 << 20);
    CHECK(p && !is_vm(p));
    free(p);
}

/* vmarena's cached bytes as malloc_info reports them (its element's `cached`), or -1. */
static long vmarena_cached_bytes(void) {
    char *xml = NULL;
    size_t len = 0;
    long cached = -1;
    FILE *f = open_memstream(&xml, &len);
    if (!f) return -1;
    int ok = malloc_info(0, f) == 0;
    fclose(f);
    const char *e = ok && xml ? strstr(xml, "<vmarena ") : NULL;
    const char *c = e ? strstr(e, "cached=\"") : NULL;
    if (c) cached = strtol(c + 8, NULL, 10);
    free(xml);
    return cached;
}

/* mallinfo2, mallinfo, malloc_info and malloc_stats count vmarena's blocks; malloc_trim gives
 * its cached memory back. */
static void introspection_case(void) {
    struct mallinfo2 before = mallinfo2();
    char *big = malloc(1 << 20);
    CHECK(big && is_vm(big));
    if (big) memset(big, 7, 1 << 20);
    struct mallinfo2 live = mallinfo2();
    CHECK(live.hblks >= before.hblks + 1);
    CHECK(live.hblkhd >= before.hblkhd + (1 << 20));
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
    struct mallinfo old_style = mallinfo(); /* deprecated in glibc, still called by programs */
#pragma GCC diagnostic pop
    CHECK(old_style.hblkhd >= (1 << 20));
    char *xml = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&xml, &len);
    CHECK(f && malloc_info(0, f) == 0);
    if (f) fclose(f);
    CHECK(xml && strstr(xml, "<vmarena areas=\"") != NULL);
    CHECK(xml && strstr(xml, "<vmarena") < strstr(xml, "</malloc>"));
    CHECK(xml && strstr(xml, "</malloc>") == strrchr(xml, '<'));
    free(xml);
    CHECK(malloc_info(1, stdout) == -1 && errno == EINVAL);
    malloc_stats();
    free(big);
    struct mallinfo2 freed = mallinfo2();
    CHECK(freed.hblkhd + (1 << 20) <= live.hblkhd);
    CHECK(freed.fordblks >= (1 << 20)); /* the freed area stays resident, cached */
    long cached = vmarena_cached_bytes();
    CHECK(cached >= (1 << 20));
    CHECK(malloc_trim(0) == 1);
    /* vmarena's part of fordblks, not the total: glibc's part moves meanwhile (the purge
     * worker, started by the first freed area, allocates from glibc as this runs): 64-330 KB
     * before the trim and 150-415 KB after it in forty runs beside two busy CPUs, where
     * vmarena's went from 1,052,672 bytes to 0 every time. */
    long trimmed = vmarena_cached_bytes();
    CHECK(trimmed >= 0 && trimmed + (1 << 20) <= cached);
}

int main(int argc, char **argv) {
    if (argc < 2) { fprintf(stderr, "usage: shim_test <case> [lib]\n"); return 2; }
    vm_size = (size_fn)dlsym(RTLD_DEFAULT, "vmarena_size");
    if (!vm_size) { fprintf(stderr, "FAIL: vmarena_size not found: is the shim preloaded?\n"); return 1; }
    const char *t = getenv("VMARENA_PRELOAD_THRESHOLD");
    size_t thr = t ? strtoull(t, NULL, 0) : 65536;
    const char *c = argv[1];
    if (!strcmp(c, "routing") || !strcmp(c, "threshold")) routing(thr);
    else if (!strcmp(c, "threads")) threads(thr);
    else if (!strcmp(c, "fork")) fork_case(thr);
    else if (!strcmp(c, "dlopen")) dlopen_case(thr, argc > 2 ? argv[2] : "");
    else if (!strcmp(c, "membarrier")) membarrier_case();
    else if (!strcmp(c, "introspection")) introspection_case();
    else if (!strcmp(c, "glibc_trim")) glibc_trim_case(thr, argc > 2 ? argv[2] : "");
    else if (!strcmp(c, "glibc_thresholds")) glibc_thresholds_case(thr, argc > 2 ? argv[2] : "");
    else if (!strcmp(c, "foreign_free")) {
        /* Not vmarena's: the next allocator decides (glibc aborts on an invalid pointer). */
        static char not_heap[64];
        char *volatile q = not_heap + 16; /* volatile: keep the compiler from seeing it */
        free(q);
        printf("foreign free returned\n");
        return 0;
    } else if (!strcmp(c, "double_free")) {
        char *volatile p = malloc(thr); /* volatile: the calls must happen */
        p[0] = 1;
        free(p);
        free(p);
        printf("double free returned\n");
        return 0;
    } else { fprintf(stderr, "unknown case %s\n", c); return 2; }
    if (failures) { fprintf(stderr, "%d checks failed\n", failures); return 1; }
    printf("ok %s\n", c);
    return 0;
}
