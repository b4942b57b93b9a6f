/* What the first touch of anonymous memory costs per 2 MiB, in 4 KiB faults and in one huge
 * page fault (MADV_HUGEPAGE), and what a second pass over the same memory costs. Three rounds
 * of each: on a virtual machine whose balloon takes back free 2 MiB blocks, the first huge
 * round may land on memory the host must fault in again, the later ones on the blocks the
 * previous round just unmapped (docs/bench-log/shim-programs.md, "A lazy list without B-trees").
 *
 *   cc -O2 -o /tmp/huge_fault_cost crates/bench/c/huge_fault_cost.c && /tmp/huge_fault_cost
 */
#include <stdint.h>
#include <stdio.h>
#include <sys/mman.h>
#include <time.h>

#define HUGE (2UL << 20)
#define BYTES (256UL << 20)

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

/* Write one byte per 4 KiB page; returns microseconds per 2 MiB. */
static double touch_us_per_2mib(volatile char *p, char v) {
    double t0 = now_s();
    for (size_t i = 0; i < BYTES; i += 4096)
        p[i] = v;
    return (now_s() - t0) * 1e6 / (BYTES / HUGE);
}

int main(void) {
    for (int huge = 0; huge < 2; huge++) {
        for (int round = 1; round <= 3; round++) {
            char *raw = mmap(NULL, BYTES + HUGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
            if (raw == MAP_FAILED) {
                perror("mmap");
                return 1;
            }
            char *p = (char *)(((uintptr_t)raw + HUGE - 1) & ~(uintptr_t)(HUGE - 1));
            if (madvise(p, BYTES, huge ? MADV_HUGEPAGE : MADV_NOHUGEPAGE) != 0) {
                perror("madvise");
                return 1;
            }
            double first = touch_us_per_2mib(p, 1);
            double second = touch_us_per_2mib(p, 2);
            printf("%s pages, round %d: first touch %.1f us per 2 MiB, second %.2f us\n",
                   huge ? "huge" : "4 KiB", round, first, second);
            munmap(raw, BYTES + HUGE);
        }
    }
    return 0;
}
