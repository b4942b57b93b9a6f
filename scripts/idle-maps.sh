#!/usr/bin/env bash
# What a shim benchmark program keeps resident once its work is over, mapping by mapping: per
# setting, the RSS of each mapped file (all of its mappings together) and of the anonymous
# memory ([heap], [stack], [anonymous]), read from /proc/PID/smaps after the program has used
# no CPU for one second of its idle period (its own idle figure is taken after one second
# too). One run per setting, in the order given; the last rows are the whole process and its
# anonymous part (a private file mapping's written pages are anonymous and count under the
# file above). Figures in KiB.
# A setting is "name|VAR=value ..." (the environment of that run; LD_PRELOAD among it).
# Build first: cargo build --release.
#
#   scripts/idle-maps.sh PROGRAM [PROGRAM ARGS ...] -- SETTING ...
#
#   scripts/idle-maps.sh vmarena-malloc-large --iterations 200 -- "glibc|" \
#       "vmarena|LD_PRELOAD=$PWD/target/release/libvmarena_preload.so"
set -euo pipefail
cd "$(dirname "$0")/.."
usage() { sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
. scripts/runs.sh
program_and_settings "$@"
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT

# User plus system clock ticks of process $1 so far.
ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }

names=()
for s in "${settings[@]}"; do
  name=${s%%|*}
  names+=("$name")
  # The setting's words are environment assignments, split on spaces.
  # shellcheck disable=SC2086
  env ${s#*|} "$bin" "${args[@]}" --idle-ms 4000 >"$dir/$name.out" 2>&1 &
  pid=$!
  # Wait until the program has used no CPU for ten polls of 0.1 s: one second into its idle
  # period (its work uses CPU all the time).
  last=-1 quiet=0
  while [ $quiet -lt 10 ]; do
    sleep 0.1
    now=$(ticks $pid) || { echo "setting '$name': the program ended before its idle period" >&2; exit 1; }
    if [ "$now" = "$last" ]; then quiet=$((quiet + 1)); else quiet=0 last=$now; fi
  done
  awk -v n="$name" '
    # A file by its name alone, so that two builds of one library share a row.
    /^[0-9a-f]+-[0-9a-f]+ / { file = (NF >= 6) ? $6 : "[anonymous]"; sub(/.*\//, "", file) }
    /^Rss:/ { rss[file] += $2; total += $2 }
    /^Anonymous:/ { anon += $2 }
    END {
      for (f in rss) if (rss[f] > 0) print n "|" f "|" rss[f]
      print n "|whole process|" total
      print n "|whole process, anonymous|" anon
    }
  ' "/proc/$pid/smaps" >>"$dir/rows"
  wait $pid || { echo "setting '$name' failed: $(cat "$dir/$name.out")" >&2; exit 1; }
  echo "$name: $(tail -1 "$dir/$name.out")" >&2
done

# One row per mapping, one column per setting, the largest mappings first.
{
  printf '| mapping |'; printf ' %s |' "${names[@]}"; echo
  printf '|---|'; printf -- '---|%.0s' "${names[@]}"; echo
  awk -F'|' '$2 !~ /^whole process/ { sum[$2] += $3 } END { for (f in sum) print sum[f] "|" f }' \
    "$dir/rows" | sort -t'|' -k1,1 -rn | cut -d'|' -f2 >"$dir/files"
  printf 'whole process\nwhole process, anonymous\n' >>"$dir/files"
  while IFS= read -r f; do
    printf '| %s |' "$f"
    for n in "${names[@]}"; do
      printf ' %s |' "$(awk -F'|' -v n="$n" -v f="$f" '$1 == n && $2 == f { v = $3 } END { print v + 0 }' "$dir/rows")"
    done
    echo
  done <"$dir/files"
}
