#!/usr/bin/env bash
# Make sure this machine has what building and testing bosun needs, installing
# what is missing from Debian's packages. Toolchains (Go, Rust with rustfmt and
# clippy) must already be there: they come with the machine image.
set -euo pipefail

missing_pkgs=()
need() { # need COMMAND DEBIAN-PACKAGE
  command -v "$1" >/dev/null 2>&1 || missing_pkgs+=("$2")
}
need openssl openssl
need python3 python3
need pgrep procps
need make make
need kubectl kubectl
need git git
need curl curl

if ((${#missing_pkgs[@]})); then
  echo "prerequisites: installing ${missing_pkgs[*]}" >&2
  if [ "$(id -u)" = 0 ]; then sudo=""; else sudo="sudo"; fi
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing_pkgs[@]}" >/dev/null
fi

fail=0
for tool in go cargo rustc; do
  command -v "$tool" >/dev/null 2>&1 || { echo "prerequisites: $tool is not installed (needed: Go >= 1.24, Rust >= 1.89)" >&2; fail=1; }
done
cargo fmt --version >/dev/null 2>&1 || { echo "prerequisites: rustfmt is missing (rustup component add rustfmt)" >&2; fail=1; }
cargo clippy --version >/dev/null 2>&1 || { echo "prerequisites: clippy is missing (rustup component add clippy)" >&2; fail=1; }
exit "$fail"
