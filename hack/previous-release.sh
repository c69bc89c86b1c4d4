#!/usr/bin/env bash
# The previous release of bosun, for the test that upgrades from it
# (crates/bosun/tests/install.rs): the commit named in hack/previous-release, its
# source (git archive), its chart and CRDs, and its bosun image, built from that
# source with that source's own hack/docker-build.sh. Cached, keyed by commit, in
# ~/.cache/bosun/previous/<commit>: a warm machine only checks the image is there.
#
# The binary is built with the release profile's optimisation and LTO turned down
# (CARGO_PROFILE_RELEASE_*): the test checks what the old release does, not how fast,
# and a full release build of a second tree would cost minutes on every cold machine.
#
# Usage: previous-release.sh      prints "<commit> <image> <source dir>" on stdout
set -euo pipefail

here=$(dirname "$(realpath "${BASH_SOURCE[0]}")")
repo=$(dirname "$here")
log() { echo "previous-release.sh: $*" >&2; }

ref=$(grep -v '^#' "$here/previous-release" | head -n 1)
if ! git -C "$repo" cat-file -e "$ref^{commit}" 2>/dev/null; then
  # A shallow clone: the commit is in its origin.
  log "fetching $ref from origin"
  git -C "$repo" fetch -q origin "$ref" >&2
fi
commit=$(git -C "$repo" rev-parse --verify "$ref^{commit}")
dir=${BOSUN_CACHE_DIR:-$HOME/.cache/bosun}/previous/$commit
img=localhost/bosun:prev-${commit:0:12}
runner_img=localhost/bosun-runner:prev-${commit:0:12}

if [ ! -f "$dir/src/Cargo.toml" ]; then
  log "extracting $commit into $dir/src"
  rm -rf "$dir/src.tmp" && mkdir -p "$dir/src.tmp"
  git -C "$repo" archive "$commit" | tar -x -C "$dir/src.tmp"
  mv "$dir/src.tmp" "$dir/src"
fi

built() { podman image exists "$img" 2>/dev/null; }
if ! built; then
  started=$(date +%s)
  log "building $img from $commit (once per machine)"
  (
    cd "$dir/src"
    export CARGO_PROFILE_RELEASE_LTO=off CARGO_PROFILE_RELEASE_OPT_LEVEL=1 \
      CARGO_PROFILE_RELEASE_CODEGEN_UNITS=16 CARGO_PROFILE_RELEASE_DEBUG=0
    unset CARGO_TARGET_DIR
    hack/docker-build.sh build "$img" "$runner_img" >&2
    # The image holds the binary: the build's gigabytes would only take disk.
    rm -rf target
  )
  log "built $img in $(($(date +%s) - started)) s"
fi
echo "$commit $img $dir/src"
