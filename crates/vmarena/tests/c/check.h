/* The check of the single-threaded C test programs: a false condition prints its line, its text
 * and errno at the time, and counts one failure; a true one counts a pass. A program ends with
 * `return checks_done();`, which prints "N passed, N failed" and is non-zero on any failure.
 * (rcu_test.c counts from several threads and keeps an atomic counter of its own.) */
#ifndef VMARENA_TEST_CHECK_H
#define VMARENA_TEST_CHECK_H

#include <errno.h>
#include <stdio.h>

static int passed, failed;

#define CHECK(cond)                                                                           \
    do {                                                                                      \
        if (cond) {                                                                           \
            passed++;                                                                         \
        } else {                                                                              \
            failed++;                                                                         \
            fprintf(stderr, "FAILED line %d: %s (errno %d)\n", __LINE__, #cond, errno);       \
        }                                                                                     \
    } while (0)

static inline int checks_done(void) {
    printf("%d passed, %d failed\n", passed, failed);
    return failed != 0;
}

#endif
