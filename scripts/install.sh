#!/usr/bin/env bash
# Install vmarena into a prefix, or remove it again.
#
#   scripts/install.sh [--prefix DIR] [--destdir DIR] [--from DIR] [--uninstall]
#
# --prefix   where the files go (default /usr/local); written into vmarena.pc
# --destdir  a staging root for packagers: files go to DESTDIR/PREFIX, the .pc still says PREFIX
# --from     a folder with already built libvmarena.so, libvmarena.a, libvmarena_preload.so
#            (and optionally the vmarena lab binary); default: `cargo build --release` first
#            and take target/release
# --uninstall  remove the files this script installs (same --prefix and --destdir)
#
# Installed:
#   lib/libvmarena.so.X.Y.Z, lib/libvmarena.so.X -> it, lib/libvmarena.so -> libvmarena.so.X
#   lib/libvmarena.a, lib/libvmarena_preload.so, include/vmarena.h, lib/pkgconfig/vmarena.pc,
#   bin/vmarena (when built)
# Libraries and the binary are installed without debug information (`strip --strip-debug`);
# the build folder keeps its own, with symbols, for benchmarks and debugging.
#
# A script rather than cargo-c: cargo-c is a crate to build and install first (a long compile
# of its own on every fresh machine), and what it would do here is this much.
set -euo pipefail
cd "$(dirname "$0")/.."

prefix=/usr/local
destdir=""
from=""
uninstall=0
while [ $# -gt 0 ]; do
  case "$1" in
    --prefix) prefix="$2"; shift 2;;
    --destdir) destdir="$2"; shift 2;;
    --from) from="$2"; shift 2;;
    --uninstall) uninstall=1; shift;;
    -h|--help) sed -n '2,22p' "$0"; exit 0;;
    *) echo "install.sh: unknown argument '$1' (--help lists them)" >&2; exit 2;;
  esac
done
case "$prefix" in
  /*) ;;
  *) echo "install.sh: --prefix must be an absolute path" >&2; exit 2;;
esac

version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)
major=${version%%.*}
root="${destdir}${prefix}"
lib="$root/lib"
files=(
  "$lib/libvmarena.so.$version" "$lib/libvmarena.so.$major" "$lib/libvmarena.so"
  "$lib/libvmarena.a" "$lib/libvmarena_preload.so" "$root/include/vmarena.h"
  "$lib/pkgconfig/vmarena.pc" "$root/bin/vmarena"
)

if [ "$uninstall" = 1 ]; then
  for f in "${files[@]}"; do
    rm -f "$f"
  done
  echo "removed vmarena $version from $root"
  exit 0
fi

if [ -z "$from" ]; then
  cargo build --release
  from=target/release
fi
for f in libvmarena.so libvmarena.a libvmarena_preload.so; do
  [ -e "$from/$f" ] || { echo "install.sh: $from/$f not found (build first, or leave --from out)" >&2; exit 1; }
done

install -d "$lib" "$lib/pkgconfig" "$root/include"
# A copy without debug information, put in place under its final name.
put() { # put SRC DEST MODE
  install -m "$3" "$1" "$2.tmp"
  strip --strip-debug "$2.tmp"
  mv -f "$2.tmp" "$2"
}
put "$from/libvmarena.so" "$lib/libvmarena.so.$version" 755
ln -sf "libvmarena.so.$version" "$lib/libvmarena.so.$major"
ln -sf "libvmarena.so.$major" "$lib/libvmarena.so"
put "$from/libvmarena.a" "$lib/libvmarena.a" 644
put "$from/libvmarena_preload.so" "$lib/libvmarena_preload.so" 755
install -m 644 include/vmarena.h "$root/include/vmarena.h"
if [ -e "$from/vmarena" ]; then
  install -d "$root/bin"
  put "$from/vmarena" "$root/bin/vmarena" 755
fi
cat > "$lib/pkgconfig/vmarena.pc" <<PC
prefix=$prefix
libdir=\${prefix}/lib
includedir=\${prefix}/include

Name: vmarena
Description: The Linux vmalloc design (per-CPU vmap nodes, size pools, lazy purge) for user space
Version: $version
Libs: -L\${libdir} -lvmarena
Libs.private: -lgcc_s -lutil -lrt -lpthread -lm -ldl
Cflags: -I\${includedir}
PC
echo "installed vmarena $version into $root"
for f in "$lib/libvmarena.so.$version" "$lib/libvmarena.a" "$lib/libvmarena_preload.so"; do
  printf '  %-40s %s bytes\n' "${f#"$root"/}" "$(stat -c %s "$f")"
done
