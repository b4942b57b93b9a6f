/* What one guard page costs on this kernel: MADV_GUARD_INSTALL per range with one madvise each,
 * batched with process_madvise, and over one contiguous range (BENCHMARKS.md, full_fit).
 *
 *   cc -O2 -o /tmp/guard_cost crates/bench/c/guard_cost.c && /tmp/guard_cost
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#define GUARD_INSTALL 102
#define RANGES 32768L

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

/* One fresh reservation, every other page a guard (page 2i+1), `batch` ranges per call. */
static int run(long page, int batch) {
    char *base = mmap(0, (2 * RANGES + 1) * page, PROT_READ | PROT_WRITE,
                      MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (base == MAP_FAILED)
        return perror("mmap"), 1;
    int pidfd = (int)syscall(SYS_pidfd_open, getpid(), 0);
    static struct iovec iov[1024];
    double t0 = now_s();
    for (long i = 0; i < RANGES;) {
        if (batch == 1) {
            if (madvise(base + (2 * i + 1) * page, page, GUARD_INSTALL))
                return perror("madvise"), 1;
            i++;
            continue;
        }
        int k = 0;
        for (; k < batch && i < RANGES; k++, i++) {
            iov[k].iov_base = base + (2 * i + 1) * page;
            iov[k].iov_len = page;
        }
        if (syscall(SYS_process_madvise, pidfd, iov, k, GUARD_INSTALL, 0) < 0)
            return perror("process_madvise"), 1;
    }
    printf("%4d range(s) per call: %6.1f ns per guard\n", batch, (now_s() - t0) * 1e9 / RANGES);
    close(pidfd);
    munmap(base, (2 * RANGES + 1) * page);
    return 0;
}

int main(void) {
    long page = sysconf(_SC_PAGESIZE);
    int batches[] = {1, 8, 64, 1024};
    for (int b = 0; b < 4; b++)
        if (run(page, batches[b]))
            return 1;
    char *c = mmap(0, RANGES * page, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    double t0 = now_s();
    if (madvise(c, RANGES * page, GUARD_INSTALL))
        return perror("madvise"), 1;
    printf("one contiguous range of %ld pages: %.1f ns per page\n", RANGES, (now_s() - t0) * 1e9 / RANGES);
    return 0;
}
