#!/bin/bash
# Peak RSS (KiB, /usr/bin/time) of user_path under two builds' libraries and the peers, and the
# give-back program's resident set 1 s after freeing 2 GiB, rounds interleaved; medians printed.
# Usage: scripts/peak-rss.sh OLD_LIB_DIR NEW_LIB_DIR ROUNDS   (from the repository root; setup.sh first)
set -euo pipefail
old=$1; new=$2; runs=$3
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
for d in "$old" "$new"; do [ -e "$d/libvmarena.so.0" ] || ln -s libvmarena.so "$d/libvmarena.so.0"; done
gcc -O2 -Iinclude -DVMARENA_ABI -o $tmp/up crates/lab/src/c/user_path.c -L$new -lvmarena -lpthread
gcc -O2 -o $tmp/upp crates/lab/src/c/user_path.c -lpthread
gcc -O2 -o $tmp/gb crates/lab/src/c/give_back.c
for i in $(seq "$runs"); do
 for side in old new; do d=${!side}
  for w in "fix_size 1 100000" "random_size 2 10000" "mid_size 2 10000"; do
   echo "$side abi $w $(LD_LIBRARY_PATH=$d /usr/bin/time -f %M $tmp/up $w 2>&1 >/dev/null | tail -1)"
   echo "$side shim $w $(LD_PRELOAD=$d/libvmarena_preload.so /usr/bin/time -f %M $tmp/upp $w 2>&1 >/dev/null | tail -1)"
  done
  echo "$side give_back_1s $(LD_PRELOAD=$d/libvmarena_preload.so $tmp/gb 2048 | sed 's/.*at_1s_kib \([0-9]*\).*/\1/')"
 done
 for w in "fix_size 1 100000" "random_size 2 10000" "mid_size 2 10000"; do
   echo "glibc plain $w $(/usr/bin/time -f %M $tmp/upp $w 2>&1 >/dev/null | tail -1)"
   echo "mimalloc plain $w $(LD_PRELOAD=/usr/lib/x86_64-linux-gnu/libmimalloc.so.2 /usr/bin/time -f %M $tmp/upp $w 2>&1 >/dev/null | tail -1)"
   echo "jemalloc plain $w $(LD_PRELOAD=/usr/lib/x86_64-linux-gnu/libjemalloc.so.2 /usr/bin/time -f %M $tmp/upp $w 2>&1 >/dev/null | tail -1)"
 done
 echo "glibc give_back_1s $($tmp/gb 2048 | sed 's/.*at_1s_kib \([0-9]*\).*/\1/')"
done > "$tmp/out"
python3 - "$tmp/out" <<'PY'
import collections, statistics, sys
d = collections.defaultdict(list)
for line in open(sys.argv[1]):
    p = line.split()
    if p and p[-1].isdigit():
        d[" ".join(p[:-1])].append(int(p[-1]))
for k in sorted(d):
    print(f"{k:40s} {statistics.median(d[k]):8.0f}  {d[k]}")
PY
