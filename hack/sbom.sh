#!/usr/bin/env bash
# The binary's SBOM (`make sbom`; `make lint` makes and checks it): CycloneDX 1.5 JSON
# of every crate the bosun binary is built from, for every target platform, made by
# cargo-cyclonedx from Cargo.lock; then checked against CycloneDX's JSON schema
# (cyclonedx-python-lib's strict validator) and against `cargo metadata`: each crate
# of Cargo.lock that bosun depends on (normal and build dependencies) is listed.
#
# Usage: sbom.sh [OUT_DIR]     (default target/sbom; writes OUT_DIR/bosun.cdx.json)
#
# The images' SBOMs need the images in a registry: the release workflow makes them
# with syft (.github/workflows/ci.yaml, job release).
#
# The tools are built or installed once into ~/.cache/bosun/tools, keyed by version.
set -euo pipefail

here=$(dirname "$(realpath "${BASH_SOURCE[0]}")")
repo=$(dirname "$here")
out=${1:-$repo/target/sbom}
CARGO_CYCLONEDX_VERSION=0.5.9
CYCLONEDX_LIB_VERSION=11.12.0
tools=${BOSUN_CACHE:-$HOME/.cache/bosun}/tools

log() { echo "sbom.sh: $*" >&2; }

cargo_cyclonedx=$tools/cargo-cyclonedx-$CARGO_CYCLONEDX_VERSION/bin/cargo-cyclonedx
if [ ! -x "$cargo_cyclonedx" ]; then
  log "building cargo-cyclonedx $CARGO_CYCLONEDX_VERSION (once, about a minute)"
  cargo install -q cargo-cyclonedx --version "$CARGO_CYCLONEDX_VERSION" --locked \
    --root "$tools/cargo-cyclonedx-$CARGO_CYCLONEDX_VERSION"
fi
venv=$tools/cyclonedx-python-lib-$CYCLONEDX_LIB_VERSION
if [ ! -x "$venv/bin/python" ]; then
  log "installing cyclonedx-python-lib $CYCLONEDX_LIB_VERSION from PyPI (once)"
  python3 -m venv "$venv.partial"
  "$venv.partial/bin/pip" install -q --disable-pip-version-check \
    "cyclonedx-python-lib[json-validation]==$CYCLONEDX_LIB_VERSION"
  mv "$venv.partial" "$venv"
fi

mkdir -p "$out"
cd "$repo"
# cargo-cyclonedx writes NAME_bin.cdx.json beside each package's Cargo.toml, for every
# binary of the workspace: bosun's is kept, the others removed.
SOURCE_DATE_EPOCH=$(git log -1 --format=%ct 2>/dev/null || date +%s) \
  "$cargo_cyclonedx" cyclonedx --manifest-path crates/bosun/Cargo.toml --describe binaries \
  --spec-version 1.5 --format json --target all -q
mv crates/bosun/bosun_bin.cdx.json "$out/bosun.cdx.json"
rm -f crates/*/*_bin.cdx.json
cargo metadata -q --format-version 1 --locked >"$out/metadata.json"
"$venv/bin/python" "$here/sbom-check.py" "$out/bosun.cdx.json" "$out/metadata.json" Cargo.lock
