#!/usr/bin/env bash
# Where a program's threads go to sleep: RUNS runs under `perf record -e sched:sched_switch -g`,
# each switch named by the first two frames of its call chain that are not the scheduler's,
# a syscall's entry or the futex machinery (for a lock: the lock function, e.g.
# __lll_lock_wait_private for glibc's arena lock), counted over all runs, most first. Only the
# program's own threads (its command name) count. Needs perf (linux-perf) and root or
# kernel.perf_event_paranoid <= 1 for the tracepoint.
#
#   scripts/sleeps.sh RUNS COMMAND [ARGS ...]
#   scripts/sleeps.sh 4 env LD_PRELOAD=$PWD/target/release/libvmarena_preload.so \
#       target/release/vmarena-xthread --idle-ms 0
set -euo pipefail
[ $# -ge 2 ] || { sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
command -v perf >/dev/null || { echo "perf is needed (apt-get install linux-perf)" >&2; exit 1; }
runs=$1
shift
# The program's command name: the last word that is not an option or an assignment.
comm=$(for a in "$@"; do case $a in -*|*=*) ;; *) echo "$a" ;; esac; done | grep -v '^env$' | head -1)
comm=$(basename "$comm" | cut -c1-15)
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
for ((r = 1; r <= runs; r++)); do
  perf record -q -e sched:sched_switch -g -o "$dir/$r.data" -- "$@" >/dev/null 2>&1
  perf script -i "$dir/$r.data" --comm "$comm" 2>/dev/null >>"$dir/all.txt"
done
awk '/sched:sched_switch/ {
  chain = ""; n = 0
  while ((getline line) > 0 && line != "") {
    split(line, a, " "); f = a[2]; sub(/\+0x[0-9a-f]*/, "", f)
    if (f ~ /schedule|rwsem_down|_slowpath|do_syscall_64|entry_SYSCALL|^0x|unknown|futex_do_wait|__futex_wait|^futex_wait$|do_futex|__x64_sys_futex/) continue
    if (n < 2) { chain = chain (n ? " < " : "") f; n++ }
  }
  print (chain == "" ? "(no user frame)" : chain)
}' "$dir/all.txt" | sort | uniq -c | sort -rn
