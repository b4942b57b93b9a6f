#!/usr/bin/env bash
# Run one command ROUNDS times against two builds of libvmarena.so, alternating: the command's
# program links libvmarena.so by its run path, and LD_LIBRARY_PATH puts DIR_A's, then DIR_B's,
# first. Each output line is printed after the folder's label, so the two sides can be sorted
# and compared (the program's own figures, e.g. user_path's ns_per_op and cpu_ns lines).
#
#   scripts/alternate-libs.sh DIR_A DIR_B ROUNDS COMMAND [ARGS...]
#
# e.g. with crates/lab/src/c/user_path.c built as ./up (BENCHMARKS.md, "Where the time goes"):
#   scripts/alternate-libs.sh /tmp/old-target/release target/release 6 ./up long_busy 8 50000
set -euo pipefail
[ $# -ge 4 ] || { sed -n 2,10p "$0" >&2; exit 2; }
a=$1 b=$2 rounds=$3
shift 3
for _ in $(seq 1 "$rounds"); do
  LD_LIBRARY_PATH=$a "$@" | sed "s|^|$a |"
  LD_LIBRARY_PATH=$b "$@" | sed "s|^|$b |"
done
