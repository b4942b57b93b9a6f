#!/usr/bin/env bash
# Installs what vmarena needs on a fresh Debian machine with the Rust toolchain: a C compiler
# (for the C ABI test) and the rustfmt/clippy components. Safe to run again.
set -euo pipefail
if ! command -v cc >/dev/null 2>&1; then
  if command -v apt-get >/dev/null 2>&1; then
    SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
    $SUDO apt-get update -qq && $SUDO apt-get install -y -qq gcc libc6-dev >/dev/null
  else
    echo "setup: no C compiler (cc) and no apt-get; install gcc or clang" >&2
    exit 1
  fi
fi
if command -v rustup >/dev/null 2>&1; then
  rustup component add rustfmt clippy >/dev/null 2>&1 || true
fi
