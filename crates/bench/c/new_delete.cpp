/* What the shim's C++ pass-through costs: a loop of new[] (16-76 bytes), new, delete and
 * delete[] of small blocks, one of 64 arrays kept alive at a time. Under callgrind the
 * difference between 200,000 and 100,000 loops is the loop's instructions, start-up cancelled
 * (docs/bench-log/design-notes.md, section 14, `cpp_operators`):
 *
 *   g++ -O2 -o /tmp/new_delete crates/bench/c/new_delete.cpp
 *   for n in 100000 200000; do valgrind --tool=callgrind /tmp/new_delete $n; done
 *   for n in 100000 200000; do LD_PRELOAD=target/release/libvmarena_preload.so \
 *       VMARENA_SPACE_BYTES=4G valgrind --tool=callgrind /tmp/new_delete $n; done
 *
 * with a peer's library after the shim in LD_PRELOAD for the other compositions.
 */
#include <cstdio>
#include <cstdlib>
#include <new>

int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 1000000;
    void *keep[64] = {0};
    unsigned long sum = 0;
    for (long i = 0; i < n; i++) {
        int *p = new int[4 + (i & 15)];
        p[0] = (int)i;
        sum += p[0];
        int **q = new int *;
        *q = p;
        delete q;
        unsigned k = i & 63;
        delete[] static_cast<int *>(keep[k]);
        keep[k] = p;
    }
    for (auto p : keep) delete[] static_cast<int *>(p);
    printf("%lu\n", sum);
    return 0;
}
