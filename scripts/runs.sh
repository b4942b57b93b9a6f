# Helpers for the scripts that run the shim's benchmark programs under several settings;
# sourced, not run. Rows are "name|v1 v2 ..." lines in a file, one per run.

# The value of a numeric field of a benchmark program's JSON line (stdin).
field() { sed -n "s/.*\"$1\":\([0-9.]*\).*/\1/p"; }

# The median of the numbers on stdin, one per line.
median() { sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

# Column $3 of the rows of setting $2 in file $1: the values, one per line.
values() { awk -F'|' -v n="$2" '$1 == n { print $2 }' "$1" | cut -d' ' -f"$3"; }

# Median, lowest and highest of column $3 of setting $2 in file $1: "median lowest highest".
spread() { local v; v=$(values "$1" "$2" "$3"); echo "$(median <<<"$v") $(sort -g <<<"$v" | head -1) $(sort -g <<<"$v" | tail -1)"; }

# Split "PROGRAM [PROGRAM ARGS ...] -- SETTING ..." (what is left after a script's own
# arguments): sets bin (target/release/PROGRAM, which must be built), args and settings
# (arrays). Calls the script's usage function when the words are not in that shape.
program_and_settings() {
  [ $# -ge 3 ] || usage
  bin=target/release/$1
  shift
  args=()
  while [ $# -gt 0 ] && [ "$1" != "--" ]; do args+=("$1"); shift; done
  [ "${1:-}" = "--" ] || usage
  shift
  [ $# -ge 1 ] || usage
  settings=("$@")
  [ -x "$bin" ] || { echo "no $bin: cargo build --release" >&2; exit 1; }
}
