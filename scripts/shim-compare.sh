#!/usr/bin/env bash
# One of the shim's benchmark programs under several settings, in interleaved runs: per
# setting the median and range of the work time, the median CPU time during the work (user and
# system over all threads, from the program), the median task clock of the whole process (perf
# stat, start and exit included), the median peak RSS and the median minor faults.
# A setting is "name|VAR=value ..." (the environment of that run; LD_PRELOAD among it).
# Build first: cargo build --release. Needs perf (linux-perf).
#
#   scripts/shim-compare.sh RUNS PROGRAM [PROGRAM ARGS ...] -- SETTING ...
#
#   scripts/shim-compare.sh 9 vmarena-xthread --min-kib 64 --ops 50000 -- \
#       "mimalloc|LD_PRELOAD=/usr/lib/x86_64-linux-gnu/libmimalloc.so.2" \
#       "vmarena|LD_PRELOAD=$PWD/target/release/libvmarena_preload.so" \
#       "no headroom|LD_PRELOAD=$PWD/target/release/libvmarena_preload.so VMARENA_LAZY_HEADROOM=0"
set -euo pipefail
cd "$(dirname "$0")/.."
usage() { sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
[ $# -ge 4 ] || usage
. scripts/runs.sh
runs=$1
shift
program_and_settings "$@"
command -v perf >/dev/null || { echo "perf is needed (apt-get install linux-perf)" >&2; exit 1; }
out=$(mktemp)
trap 'rm -f "$out"' EXIT
for ((r = 1; r <= runs; r++)); do
  for s in "${settings[@]}"; do
    # The setting's words are environment assignments, split on spaces.
    # shellcheck disable=SC2086
    line=$({ perf stat -x, -e task-clock env ${s#*|} "$bin" --idle-ms 0 "${args[@]}"; } 2>&1)
    cpu=$(awk -F, '/task-clock/ { print $1 / 1000 }' <<<"$line")
    work=$(field work_s <<<"$line")
    [ -n "$work" ] || { echo "setting '${s%%|*}' printed no result: $line" >&2; exit 1; }
    echo "${s%%|*}|$work $(field peak_rss_kib <<<"$line") $(field minor_faults <<<"$line") $cpu $(field work_cpu_s <<<"$line")" >>"$out"
  done
  echo "run $r of $runs done" >&2
done
printf '| setting | work s, median (range) | work CPU s | task clock s | peak RSS MiB | minor faults |\n|---|---|---|---|---|---|\n'
for s in "${settings[@]}"; do
  name=${s%%|*}
  read -r work lo hi <<<"$(spread "$out" "$name" 1)"
  printf '| %s | %.3f (%.3f-%.3f) | %.3f | %.3f | %.0f | %.0f |\n' "$name" "$work" "$lo" "$hi" \
    "$(values "$out" "$name" 5 | median)" "$(values "$out" "$name" 4 | median)" "$(values "$out" "$name" 2 | median | awk '{ print $1 / 1024 }')" \
    "$(values "$out" "$name" 3 | median)"
done
