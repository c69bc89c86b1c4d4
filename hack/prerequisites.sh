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
# hack/images.sh: root file systems from Debian packages, kubelet's pause.c
# built statically, and the import into containerd.
need mmdebstrap mmdebstrap
need gcc gcc
[ -e /usr/include/stdio.h ] || missing_pkgs+=(libc6-dev)  # static libc for pause and the static bosun
need ctr containerd
need flock util-linux
# make docker-build (hack/docker-build.sh): podman, when no docker engine answers.
if ! { command -v docker >/dev/null 2>&1 && docker info >/dev/null 2>&1; }; then
  need podman podman
fi
# The real node (hack/controlplane/node.sh): runtime, CNI plugins, packet filters.
need containerd containerd
need runc runc
[ -x /usr/lib/cni/bridge ] || missing_pkgs+=(containernetworking-plugins)
need nft nftables
need iptables iptables
need conntrack conntrack
need ip iproute2
# The backup runner and its tests (hack/backends.sh): the databases and their clients.
[ -x /usr/lib/postgresql/15/bin/initdb ] || missing_pkgs+=(postgresql-15)
need pg_dump postgresql-client-15
[ -x /usr/sbin/mariadbd ] || missing_pkgs+=(mariadb-server)
need mysqldump mariadb-client
need npm npm
# make lint: the shell programs in hack/ and the ones bosun puts into pods.
need shellcheck shellcheck
# make lint (hack/sbom.sh): the SBOM's schema check runs in a Python venv (3.11+).
python3 -c 'import ensurepip, venv' >/dev/null 2>&1 || missing_pkgs+=(python3-venv)

if ((${#missing_pkgs[@]})); then
  echo "prerequisites: installing ${missing_pkgs[*]}" >&2
  if [ "$(id -u)" = 0 ]; then sudo=""; else sudo="sudo"; fi
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing_pkgs[@]}" >/dev/null
fi

fail=0
for tool in go cargo rustc; do
  command -v "$tool" >/dev/null 2>&1 || { echo "prerequisites: $tool is not installed (needed: Go >= 1.24, Rust >= 1.89)" >&2; fail=1; }
done
cargo fmt --version >/dev/null 2>&1 || { echo "prerequisites: rustfmt is missing (rustup component add rustfmt)" >&2; fail=1; }
cargo clippy --version >/dev/null 2>&1 || { echo "prerequisites: clippy is missing (rustup component add clippy)" >&2; fail=1; }
exit "$fail"
