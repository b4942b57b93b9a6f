/*
 * What one guard marker costs: MADV_GUARD_INSTALL on the last page of each of 32768 slots,
 * one madvise per slot (batch 1) or one process_madvise per BATCH slots. Prints nanoseconds
 * per guard for three repetitions.
 *
 *   cc -O2 -o /tmp/guard-install-cost scripts/guard-install-cost.c
 *   /tmp/guard-install-cost BATCH SLOT_PAGES      e.g. 1 2, 16 2, 64 2, 1 101, 64 101
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#define GUARD_INSTALL 102
#define SLOTS 32768

static double seconds(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec * 1e-9;
}

int main(int argc, char **argv)
{
	if (argc != 3) {
		fprintf(stderr, "usage: %s BATCH SLOT_PAGES\n", argv[0]);
		return 2;
	}
	int batch = atoi(argv[1]), slot = atoi(argv[2]);
	long page = sysconf(_SC_PAGESIZE);
	if (batch < 1 || batch > 1024 || SLOTS % batch || slot < 1) {
		fprintf(stderr, "BATCH must divide %d and be at most 1024; SLOT_PAGES at least 1\n", SLOTS);
		return 2;
	}
	int pidfd = syscall(SYS_pidfd_open, getpid(), 0);
	struct iovec v[1024];
	for (int rep = 0; rep < 3; rep++) {
		size_t len = (size_t)SLOTS * slot * page;
		char *base = mmap(NULL, len, PROT_READ | PROT_WRITE,
				  MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
		if (base == MAP_FAILED) {
			perror("mmap");
			return 1;
		}
		double t0 = seconds();
		for (int i = 0; i < SLOTS; i += batch) {
			for (int j = 0; j < batch; j++) {
				v[j].iov_base = base + ((size_t)(i + j) * slot + slot - 1) * page;
				v[j].iov_len = page;
			}
			long r = batch == 1 ? madvise(v[0].iov_base, page, GUARD_INSTALL)
					    : syscall(SYS_process_madvise, pidfd, v, batch, GUARD_INSTALL, 0);
			if (r < 0) {
				perror(batch == 1 ? "madvise" : "process_madvise");
				return 1;
			}
		}
		printf("batch %d, slots of %d pages: %.1f ns per guard\n", batch, slot,
		       (seconds() - t0) / SLOTS * 1e9);
		munmap(base, len);
	}
	return 0;
}
