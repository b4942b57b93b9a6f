#!/usr/bin/env bash
# The user path of two builds of libvmarena.so, interleaved: the same lab binary runs
# `vmarena user-path --contenders vmarena` once against each library folder in turn, ROUNDS
# times, and prints each (workload, threads) median and the median of the per-round ratios.
#
#   scripts/ab-user-path.sh OLD_LIB_DIR NEW_LIB_DIR [ROUNDS] [LOOPS] [THREADS] [WORKLOADS]
#
# THREADS and WORKLOADS are user-path's lists (default 1,2 and all five).
#
# Build the old library in a worktree, e.g.
#   git worktree add /tmp/old COMMIT && (cd /tmp/old && CARGO_TARGET_DIR=/tmp/old-target cargo build --release -p vmarena)
#   cargo build --release && scripts/ab-user-path.sh /tmp/old-target/release target/release 21
set -euo pipefail
old=$1 new=$2 rounds=${3:-21} loops=${4:-1000000} threads=${5:-1,2}
workloads=${6:-fix_size,full_fit,random_size,long_busy,mid_size}
lab="$(dirname "$0")/../target/release/vmarena"
out=$(mktemp -d)
for i in $(seq 1 "$rounds"); do
  for side in old new; do
    dir=$old; [ "$side" = new ] && dir=$new
    "$lab" user-path --contenders vmarena --loops "$loops" --threads "$threads" --workloads "$workloads" --runs 1 --lib-dir "$dir" > "$out/$side-$i.txt" 2>/dev/null
  done
  echo "round $i of $rounds" >&2
done
python3 - "$out" "$rounds" <<'PY'
import re, statistics, sys
out, n = sys.argv[1], int(sys.argv[2])
def parse(f):
    d = {}
    for l in open(f):
        m = re.match(r"\| (\w+) \| (\d+) \| ([\d.]+) \|$", l.strip())
        if m:
            d[(m[1], int(m[2]))] = float(m[3])
    return d
old = [parse(f"{out}/old-{i}.txt") for i in range(1, n + 1)]
new = [parse(f"{out}/new-{i}.txt") for i in range(1, n + 1)]
print("| workload | threads | old | new | new / old, round by round: median (range) |")
print("|---|---|---|---|---|")
for k in old[0]:
    o = [r[k] for r in old]; w = [r[k] for r in new]
    q = [b / a for a, b in zip(o, w)]
    print(f"| {k[0]} | {k[1]} | {statistics.median(o):.1f} | {statistics.median(w):.1f} | "
          f"{statistics.median(q):.2f}x ({min(q):.2f}-{max(q):.2f}) |")
PY
rm -r "$out"
