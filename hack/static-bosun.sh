#!/usr/bin/env bash
# Builds the bosun that goes into images and pods: linked statically against glibc,
# so that it runs in every image `bosun install` copies it into, whatever that
# image's C library (PostgreSQL 13's image is Debian bullseye's, glibc 2.31; a build
# on this host needs 2.34 or later). Its own target directory
# (target/<host triple>/): the host's dynamic build, which the tests and `make run`
# run, is left as it is.
#
# Usage: hack/static-bosun.sh [--release]   builds (nothing when fresh) and prints
#                                           the binary's path
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo"
triple=$(rustc -vV | sed -n 's/^host: //p')
profile=debug
flags=()
if [ "${1:-}" = --release ]; then
  profile=release
  flags=(--release --locked)
fi
# With --target, RUSTFLAGS reach only the target's crates: build scripts and proc
# macros stay dynamic, as they must.
RUSTFLAGS="-C target-feature=+crt-static" cargo build "${flags[@]}" -p bosun --bin bosun --target "$triple" >&2
echo "$repo/target/$triple/$profile/bosun"
