/* The statistics from C: vmarena_stats, vmarena_stats_json and vmarena_vmallocinfo, their
 * refusals and their truncation, before and after the default space exists. Run by
 * tests/c_stats.rs, once with VMARENA_STATS=1 (the exit line). `stats_test FILE` then closes
 * stderr and puts FILE at descriptor 2, where the exit line must not go. */
#include <errno.h>
#include <fcntl.h>
#include <unistd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vmarena.h"
#include "check.h"

static char *json(void) {
    size_t need = vmarena_stats_json(NULL, 0);
    char *buf = malloc(need + 1);
    CHECK(buf && vmarena_stats_json(buf, need + 1) == need && strlen(buf) == need);
    return buf;
}

int main(int argc, char **argv) {
    /* Before the default space exists: zeros, a JSON that says so, no areas. */
    struct vmarena_stats s;
    memset(&s, 0xff, sizeof s);
    s.size = sizeof s;
    CHECK(vmarena_stats(&s) == 0 && s.size == sizeof s && s.live_areas == 0);
    char *j = json();
    CHECK(strstr(j, "\"space\":null") && strstr(j, "\"live_areas\":0"));
    free(j);
    char info[64];
    CHECK(vmarena_vmallocinfo(info, sizeof info) == 0 && info[0] == 0);
    struct vmarena_lock_stats l;
    memset(&l, 0xff, sizeof l);
    l.size = sizeof l;
    CHECK(vmarena_lock_stats(&l) == 0 && l.size == sizeof l && l.node.acquisitions == 0 && l.free.wait_ns == 0);

    void *p[3];
    for (int i = 0; i < 3; i++) {
        p[i] = vmarena_vmalloc(4096 * (size_t)(i + 1));
        CHECK(p[i] != NULL);
    }
    memset(&s, 0, sizeof s);
    s.size = sizeof s;
    CHECK(vmarena_stats(&s) == 0 && s.size == sizeof s);
    CHECK(s.live_areas == 3 && s.live_pages == (1 + 2 + 3) + 3 /* a guard page each */);

    /* A program that knows fewer fields gets those only. */
    memset(&s, 0xab, sizeof s);
    s.size = 16;
    CHECK(vmarena_stats(&s) == 0 && s.size == 16 && s.live_areas == 3);
    CHECK(s.live_pages == 0xababababababababULL);

    /* The lock figures: the node locks were taken (Nodes has no global or busy lock). */
    memset(&l, 0xff, sizeof l);
    l.size = sizeof l;
    CHECK(vmarena_lock_stats(&l) == 0 && l.node.acquisitions > 0 && l.global.acquisitions == 0 &&
          l.busy.acquisitions == 0);
    memset(&l, 0x33, sizeof l);
    l.size = 16;
    CHECK(vmarena_lock_stats(&l) == 0 && l.size == 16 && l.global.acquisitions == 0 &&
          l.global.contended == 0x3333333333333333ULL);
    CHECK(vmarena_lock_stats(NULL) == -EINVAL && errno == EINVAL);
    l.size = 4;
    CHECK(vmarena_lock_stats(&l) == -EINVAL);

    /* Refusals change nothing. */
    errno = 0;
    CHECK(vmarena_stats(NULL) == -EINVAL && errno == EINVAL);
    memset(&s, 0x5a, sizeof s);
    s.size = 4;
    errno = 0;
    CHECK(vmarena_stats(&s) == -EINVAL && errno == EINVAL && s.size == 4 && s.live_areas == 0x5a5a5a5a5a5a5a5aULL);

    /* The JSON: whole, and cut to a small buffer with its NUL. */
    j = json();
    CHECK(strstr(j, "\"space\":\"vmalloc\"") && strstr(j, "\"live_areas\":3,") && strstr(j, "\"locks\":{"));
    char small[10];
    memset(small, 'x', sizeof small);
    /* (Reading the figures takes each lock, so the counts, and the text's length, move between
     * two calls.) */
    CHECK(vmarena_stats_json(small, sizeof small) > 9 && strlen(small) == 9 && !strncmp(small, j, 9));
    free(j);

    /* vmallocinfo: one line per live area, named as the C ABI's. */
    size_t need = vmarena_vmallocinfo(NULL, 0);
    char *text = malloc(need + 1);
    CHECK(text && vmarena_vmallocinfo(text, need + 1) == need);
    int lines = 0;
    for (char *l = text; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL)
        lines += !strncmp(l, "0x", 2) && strstr(l, "vmarena_c_abi") && strchr(l, '\n') &&
                 strstr(l, "vmarena_c_abi") < strchr(l, '\n');
    CHECK(lines == 3);
    free(text);

    for (int i = 0; i < 3; i++)
        CHECK(vmarena_vfree(p[i]) == 0);
    if (failed)
        return 1;
    fprintf(stderr, "ok stats\n");
    if (argc > 1) {
        close(2);
        int fd = open(argv[1], O_CREAT | O_WRONLY | O_TRUNC, 0600);
        if (fd != 2 || write(fd, "program data\n", 13) != 13)
            return 1;
    }
    return 0;
}
