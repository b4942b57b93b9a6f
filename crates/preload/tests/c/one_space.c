/* A program linked against libvmarena.so that also allocates through malloc.
 *
 * Under the shim the C ABI's symbols resolve to the shim's copies (a preloaded library comes
 * first in the lookup), so both kinds of allocation share the shim's default space: the C
 * ABI's vmarena_size knows a block that malloc handed out, and the shim's malloc_usable_size
 * knows an area from vmarena_vmalloc. The shim carries libvmarena.so's SONAME, so the loader
 * takes it for the library the program needs and maps no second copy (whose load-time set-up
 * would run for nothing). Without the shim, malloc's block is glibc's and the C ABI must not
 * claim it.
 *
 *   one_space shared      (run under the shim)
 *   one_space separate    (run without it)
 *
 * Prints "ok one_space" and exits 0 when the expectation of the mode holds. */
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vmarena.h"

#define FAIL(...) do { fprintf(stderr, "FAIL: " __VA_ARGS__); fputc('\n', stderr); return 1; } while (0)

/* How many of this process's mappings are of a file whose name is `name` ("libvmarena.so"
 * does not match "libvmarena_preload.so"), or -1 when /proc/self/maps cannot be read. */
static int mappings_of(const char *name) {
    FILE *f = fopen("/proc/self/maps", "re");
    if (!f) return -1;
    char line[4096];
    int n = 0;
    size_t len = strlen(name);
    while (fgets(line, sizeof line, f)) {
        char *slash = strrchr(line, '/');
        if (slash && !strncmp(slash + 1, name, len) && (slash[1 + len] == '\n' || slash[1 + len] == '.'))
            n++;
    }
    fclose(f);
    return n;
}

int main(int argc, char **argv) {
    if (argc != 2 || (strcmp(argv[1], "shared") && strcmp(argv[1], "separate")))
        FAIL("usage: one_space shared|separate");
    int shared = !strcmp(argv[1], "shared");
    size_t n = 1 << 20;

    int lib = mappings_of("libvmarena.so"), shim = mappings_of("libvmarena_preload.so");
    if (lib < 0) FAIL("cannot read /proc/self/maps");
    if (shared && (shim == 0 || lib != 0))
        FAIL("under the shim: %d mappings of the shim, %d of libvmarena.so (want some, none)", shim, lib);
    if (!shared && (lib == 0 || shim != 0))
        FAIL("without the shim: %d mappings of libvmarena.so, %d of the shim (want some, none)", lib, shim);

    void *p = vmarena_vmalloc(n);
    if (!p) FAIL("vmarena_vmalloc(%zu) failed", n);
    memset(p, 0x5a, n);
    void *q = malloc(n);
    if (!q) FAIL("malloc(%zu) failed", n);
    memset(q, 0xa5, n);

    size_t q_in_abi = vmarena_size(q);
    if (shared) {
        if (q_in_abi != malloc_usable_size(q) || q_in_abi < n)
            FAIL("the C ABI sees malloc's block as %zu bytes, malloc_usable_size as %zu",
                 q_in_abi, malloc_usable_size(q));
        if (malloc_usable_size(p) != vmarena_size(p))
            FAIL("malloc_usable_size sees vmarena_vmalloc's area as %zu bytes, the C ABI as %zu",
                 malloc_usable_size(p), vmarena_size(p));
    } else if (q_in_abi != 0) {
        FAIL("the C ABI claims glibc's block (%zu bytes)", q_in_abi);
    }
    for (size_t i = 0; i < n; i += 4096)
        if (((unsigned char *)p)[i] != 0x5a || ((unsigned char *)q)[i] != 0xa5)
            FAIL("the two blocks overlap at offset %zu", i);
    vmarena_vfree(p);
    free(q);
    printf("ok one_space\n");
    return 0;
}
