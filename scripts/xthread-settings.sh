#!/usr/bin/env bash
# xthread under vmarena's shim with settings that trade memory for time, and the peers, in
# alternated runs (BENCHMARKS.md, "Where xthread's time goes"). Per setting: the median and
# range of the work time, the median and highest peak RSS, the median minor faults and the
# median TLB shootdowns during a run (machine-wide, from /proc/interrupts: run it on a quiet
# machine). Build first: cargo build --release.
#
#   scripts/xthread-settings.sh [RUNS]      (default 8)
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-8}
bin=target/release/vmarena-xthread
shim=$PWD/target/release/libvmarena_preload.so
lib=/usr/lib/x86_64-linux-gnu
[ -x "$bin" ] && [ -e "$shim" ] || { echo "build first: cargo build --release" >&2; exit 1; }
settings=(
  "glibc|"
  "jemalloc|LD_PRELOAD=$lib/libjemalloc.so.2"
  "mimalloc|LD_PRELOAD=$lib/libmimalloc.so.2"
  "vmarena|LD_PRELOAD=$shim"
  "vmarena, no moves|LD_PRELOAD=$shim VMARENA_PAGE_MOVES=0"
  "vmarena, no moves, no splits|LD_PRELOAD=$shim VMARENA_PAGE_MOVES=0 VMARENA_LAZY_SPLIT=0"
  "vmarena, purge keeps 100%|LD_PRELOAD=$shim VMARENA_PURGE_KEEP_PERCENT=100"
  "vmarena, lazy_max 128 MiB|LD_PRELOAD=$shim VMARENA_LAZY_MAX_PAGES=32768"
  "vmarena, no purge|LD_PRELOAD=$shim VMARENA_LAZY_MAX_PAGES=1000000 VMARENA_PAGE_MOVES=0"
)
# The TLB row's sum, 0 where the kernel has none (then the column reads 0).
tlb() { awk '/^ *TLB:/ { for (i = 2; i <= NF; i++) if ($i ~ /^[0-9]+$/) s += $i } END { print s + 0 }' /proc/interrupts; }
. scripts/runs.sh
out=$(mktemp)
trap 'rm -f "$out"' EXIT
for ((r = 1; r <= runs; r++)); do
  for s in "${settings[@]}"; do
    name=${s%%|*}
    before=$(tlb)
    line=$(env ${s#*|} "$bin" --idle-ms 0)
    after=$(tlb)
    echo "$name|$(field work_s <<<"$line") $(field peak_rss_kib <<<"$line") $(field minor_faults <<<"$line") $((after - before))" >>"$out"
  done
  echo "run $r of $runs done" >&2
done
printf '| setting | time s, median (range) | peak RSS MiB, median (highest) | minor faults | TLB shootdowns |\n|---|---|---|---|---|\n'
for s in "${settings[@]}"; do
  name=${s%%|*}
  read -r work lo hi <<<"$(spread "$out" "$name" 1)"
  read -r peak _ peak_hi <<<"$(spread "$out" "$name" 2)"
  printf '| %s | %.3f (%.3f-%.3f) | %.0f (%.0f) | %.0f | %.0f |\n' "$name" "$work" "$lo" "$hi" \
    "$(awk '{ print $1 / 1024 }' <<<"$peak")" "$(awk '{ print $1 / 1024 }' <<<"$peak_hi")" \
    "$(values "$out" "$name" 3 | median)" "$(values "$out" "$name" 4 | median)"
done
