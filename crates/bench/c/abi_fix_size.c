/* test_vmalloc's fix_size through the C ABI, for instruction counts: N loops of
 * vmarena_vmalloc(4096), one write, vmarena_vfree. Run it under callgrind at two loop counts;
 * the difference over the difference in loops is the instructions per loop, without the
 * start-up.
 *
 *   cc -O2 -o abi_fix_size crates/bench/c/abi_fix_size.c -Iinclude -Ltarget/release -lvmarena
 *   LD_LIBRARY_PATH=target/release valgrind --tool=callgrind ./abi_fix_size 100000 */
#include <stdio.h>
#include <stdlib.h>
#include "vmarena.h"

int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 100000;
    for (long i = 0; i < n; i++) {
        char *p = vmarena_vmalloc(4096);
        if (!p) {
            fprintf(stderr, "vmarena_vmalloc failed at loop %ld\n", i);
            return 1;
        }
        p[0] = 1;
        vmarena_vfree(p);
    }
    return 0;
}
