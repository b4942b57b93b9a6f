#!/usr/bin/env bash
# Installs what vmarena needs on a fresh Debian machine with the Rust toolchain: C and C++
# compilers (for the C ABI and shim tests and the peers' allocators), strace (for the lab's
# --syscalls), valgrind and the C compiler's AddressSanitizer and ThreadSanitizer runtimes (the
# debugging-tool tests run the C ABI under each),
# xz and python3 (real programs run under the shim in its tests), zstd, sqlite3 and numpy (the
# programs `vmarena programs` runs), Debian's jemalloc, mimalloc and tcmalloc shared libraries
# (preloaded by `vmarena preload`, `user-path` and `programs`) and the rustfmt/clippy
# components. Safe to run again.
set -euo pipefail
need=()
command -v cc >/dev/null 2>&1 || need+=(gcc libc6-dev)
command -v c++ >/dev/null 2>&1 || need+=(g++)
command -v make >/dev/null 2>&1 || need+=(make)
command -v strace >/dev/null 2>&1 || need+=(strace)
command -v valgrind >/dev/null 2>&1 || need+=(valgrind)
# The sanitizer runtimes come with gcc on Debian; a compiler that lacks them gets them here.
for s in address:libasan8 thread:libtsan2; do
  probe=$(mktemp -d)
  echo 'int main(void) { return 0; }' > "$probe/p.c"
  if command -v cc >/dev/null 2>&1 && ! cc -fsanitize="${s%%:*}" -o "$probe/p" "$probe/p.c" >/dev/null 2>&1; then
    need+=("${s##*:}")
  fi
  rm -rf "$probe"
done
command -v xz >/dev/null 2>&1 || need+=(xz-utils)
command -v python3 >/dev/null 2>&1 || need+=(python3)
command -v zstd >/dev/null 2>&1 || need+=(zstd)
command -v sqlite3 >/dev/null 2>&1 || need+=(sqlite3)
python3 -c 'import numpy' >/dev/null 2>&1 || /usr/bin/python3 -c 'import numpy' >/dev/null 2>&1 \
  || need+=(python3-numpy)
[ -e /usr/lib/x86_64-linux-gnu/libjemalloc.so.2 ] || need+=(libjemalloc2)
[ -e /usr/lib/x86_64-linux-gnu/libmimalloc.so.2 ] || need+=(libmimalloc2.0)
[ -e /usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4 ] || need+=(libtcmalloc-minimal4)
if [ ${#need[@]} -gt 0 ]; then
  if command -v apt-get >/dev/null 2>&1; then
    SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
    $SUDO apt-get update -qq && $SUDO apt-get install -y -qq "${need[@]}" >/dev/null
  else
    echo "setup: missing ${need[*]} and no apt-get to install them" >&2
    exit 1
  fi
fi
if command -v rustup >/dev/null 2>&1; then
  rustup component add rustfmt clippy >/dev/null 2>&1 || true
fi
