/* Runs a program and reports what it used (`vmarena programs`): a small process between the
 * lab and the program. A child's peak RSS as wait4 reports it is at least the resident set of
 * the process it was forked (or spawned) from, as that process stood when the child called
 * exec, and the lab may hold hundreds of MiB then; forked from this program it starts at a
 * few hundred KiB.
 *
 * Usage: rusage_run REPORT_FILE PROGRAM [ARGS...]
 * Writes "maxrss_kib M minflt F utime_s U stime_s S status X" to REPORT_FILE and exits with
 * the program's status (125 when it could not be started). */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: rusage_run REPORT_FILE PROGRAM [ARGS...]\n");
        return 125;
    }
    pid_t pid = fork();
    if (pid < 0) {
        perror("rusage_run: fork");
        return 125;
    }
    if (pid == 0) {
        execvp(argv[2], argv + 2);
        perror("rusage_run: exec");
        _exit(125);
    }
    int status = 0;
    struct rusage ru;
    if (wait4(pid, &status, 0, &ru) != pid) {
        perror("rusage_run: wait4");
        return 125;
    }
    FILE *f = fopen(argv[1], "w");
    if (!f) {
        perror("rusage_run: report file");
        return 125;
    }
    fprintf(f, "maxrss_kib %ld minflt %ld utime_s %.6f stime_s %.6f status %d\n", ru.ru_maxrss, ru.ru_minflt,
            ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6, ru.ru_stime.tv_sec + ru.ru_stime.tv_usec / 1e6,
            status);
    fclose(f);
    if (WIFEXITED(status)) return WEXITSTATUS(status);
    return 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
}
