#!/usr/bin/env bash
# Paired rounds of one workload of the user's-path program (crates/lab/src/c/user_path.c),
# for experiments on the library: each round runs the C ABI program on the libvmarena.so.0 of
# folder A, then on the one of folder B, then the plain-malloc program under PEER, back to back,
# each in a fresh process. Prints the medians of ns per operation and the paired ratios (the
# median over the rounds of the ratio within a round): B/A, A/PEER and B/PEER.
#
#   scripts/pair-libs.sh WORKLOAD THREADS LOOPS ROUNDS DIR_A DIR_B [PEER]
#
# WORKLOAD: fix_size, full_fit, random_size, long_busy or mid_size; DIR_A, DIR_B: folders with a
# libvmarena.so.0 (a cargo target/release, or an edited build's; the lab's rseq model built as
# libvmarena.so.0 runs too); PEER: glibc, or the file name of a library under
# /usr/lib/x86_64-linux-gnu to preload (default libjemalloc.so.2).
set -euo pipefail
[ $# -ge 6 ] || { sed -n '2,13p' "$0"; exit 2; }
w=$1 threads=$2 loops=$3 rounds=$4 a=$(realpath "$5") b=$(realpath "$6") peer=${7:-libjemalloc.so.2}
root=$(cd "$(dirname "$0")/.." && pwd)
for d in "$a" "$b"; do
    [ -e "$d/libvmarena.so.0" ] || { echo "pair-libs: no libvmarena.so.0 in $d" >&2; exit 2; }
done
preload=()
if [ "$peer" != glibc ]; then
    lib=/usr/lib/x86_64-linux-gnu/$peer
    [ -e "$lib" ] || { echo "pair-libs: no $lib" >&2; exit 2; }
    preload=(env "LD_PRELOAD=$lib")
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cc -O2 -I"$root/include" -DVMARENA_ABI -o "$tmp/up_v" "$root/crates/lab/src/c/user_path.c" \
    -L"$a" -l:libvmarena.so.0 -lpthread
cc -O2 -o "$tmp/up_m" "$root/crates/lab/src/c/user_path.c" -lpthread
ns() { awk '/^ns_per_op/ { print $2 }'; }
for _ in $(seq "$rounds"); do
    x=$(LD_LIBRARY_PATH=$a "$tmp/up_v" "$w" "$threads" "$loops" | ns)
    y=$(LD_LIBRARY_PATH=$b "$tmp/up_v" "$w" "$threads" "$loops" | ns)
    z=$("${preload[@]}" "$tmp/up_m" "$w" "$threads" "$loops" | ns)
    echo "$x $y $z"
done >"$tmp/rounds"
median() { sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
col() { awk '{ a = $1; b = $2; p = $3; print '"$1"' }' "$tmp/rounds" | median; }
printf '%s, %s thread(s), %s rounds: median ns A %.2f B %.2f %s %.2f | paired B/A %.3f A/%s %.3f B/%s %.3f\n' \
    "$w" "$threads" "$rounds" "$(col a)" "$(col b)" "$peer" "$(col p)" "$(col 'b / a')" \
    "$peer" "$(col 'a / p')" "$peer" "$(col 'b / p')"
