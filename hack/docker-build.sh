#!/usr/bin/env bash
# Builds bosun's two images from the Dockerfile (`make docker-build`), and loads
# them into the local cluster's real nodes (`make docker-load`).
#
# Usage: docker-build.sh build IMG RUNNER_IMG
#        docker-build.sh push IMG...
#        docker-build.sh load IMG... --address SOCKET [--address SOCKET]...
#        docker-build.sh load IMG... --cluster DIR   (every real node of the local cluster in DIR)
#
# The container tool is $CONTAINER_TOOL when set, else docker if its engine
# answers, else podman, else buildah (Debian packages all three; a docker client
# without an engine does not count).
#
# DOCKER_BUILD_MODE:
#   local     (default) no registry is pulled from: the bases are
#             hack/images.sh's bosun-distroless and bosun-runner-base (made from
#             Debian packages, loaded into the tool), and the binary is the host's
#             `cargo build --release` (BINARY=prebuilt).
#   registry  the Dockerfile's own defaults: distroless and Debian bases pulled
#             from their registries, the binary compiled in the build.
#
# podman and buildah run the build's RUN steps with chroot isolation unless
# BUILDAH_ISOLATION says otherwise: this machine's sandbox lets no OCI runtime
# set the rlimits and cgroups a container gets.
#
# Prints each image's name, id and size on stdout; progress on stderr.
set -euo pipefail

here=$(dirname "$(realpath "${BASH_SOURCE[0]}")")
repo=$(dirname "$here")
mode=${DOCKER_BUILD_MODE:-local}

log() { echo "docker-build.sh: $*" >&2; }
die() { log "$*"; exit 1; }

tool() {
  if [ -n "${CONTAINER_TOOL:-}" ]; then echo "$CONTAINER_TOOL"; return; fi
  if command -v docker >/dev/null && docker info >/dev/null 2>&1; then echo docker; return; fi
  local t
  for t in podman buildah; do
    if command -v "$t" >/dev/null; then echo "$t"; return; fi
  done
  die "no container tool: install docker (with its engine running), podman or buildah (hack/prerequisites.sh installs podman)"
}

# The size of an image in bytes, as the tool reports it.
image_size() { # TOOL IMAGE
  case $1 in
    docker | podman) "$1" image inspect --format '{{.Size}}' "$2" ;;
    buildah) buildah inspect --type image --format '{{.ImageSize}}' "$2" 2>/dev/null || echo "?" ;;
  esac
}

# Loads an OCI archive of hack/images.sh into the tool's store.
load_archive() { # TOOL ARCHIVE
  case $1 in
    docker | podman) "$1" load -q -i "$2" >/dev/null ;;
    buildah) buildah pull -q "oci-archive:$2" >/dev/null ;;
  esac
}

cmd_build() {
  local img=${1:?usage: docker-build.sh build IMG RUNNER_IMG} runner_img=${2:?usage: docker-build.sh build IMG RUNNER_IMG}
  local t args=() cache
  t=$(tool)
  export BUILDAH_ISOLATION=${BUILDAH_ISOLATION:-chroot}
  case $mode in
    local)
      cache=$("$here/images.sh" build)
      local name archive
      for name in bosun-distroless bosun-runner-base; do
        # shellcheck disable=SC2012 # names are ours: <name>-<12 hex>.tar
        archive=$(ls -t "$cache/$name"-????????????.tar | head -n 1)
        log "loading $(basename "$archive") into $t"
        load_archive "$t" "$archive"
      done
      log "cargo build --release -p bosun, linked statically (hack/static-bosun.sh)"
      local binary
      binary=$("$here/static-bosun.sh" --release)
      mkdir -p "$repo/target/image"
      objcopy --strip-debug "$binary" "$repo/target/image/bosun"
      args=(--build-arg BINARY=prebuilt
        --build-arg BASE_IMAGE=localhost/bosun-distroless:bookworm
        --build-arg RUNNER_BASE_IMAGE=localhost/bosun-runner-base:trixie)
      ;;
    # Spelled out although it is the Dockerfile's default: buildah before 1.29 (Debian
    # 12's podman 4.3) follows `FROM ${BINARY}` to a stage only when the argument is
    # given, and otherwise skips the stage and looks for an image of that name.
    registry) args=(--build-arg BINARY=compile) ;;
    *) die "DOCKER_BUILD_MODE is '$mode'; it must be local or registry" ;;
  esac
  local build=("$t" build)
  [ "$t" != buildah ] || build=(buildah bud)
  log "$t: $img (target bosun)"
  "${build[@]}" "${args[@]}" --target bosun -t "$img" -f "$repo/Dockerfile" "$repo" >&2
  log "$t: $runner_img (target runner)"
  "${build[@]}" "${args[@]}" --target runner -t "$runner_img" -f "$repo/Dockerfile" "$repo" >&2
  local i
  for i in "$img" "$runner_img"; do
    printf '%-40s %s bytes\n' "$i" "$(image_size "$t" "$i")"
  done
}

# Saves each image from the tool once and imports it into containerds' CRI
# namespace (the real nodes': they pull from no registry).
cmd_load() {
  local addresses=() imgs=() t tmp i address sock
  while (($#)); do
    case $1 in
      --address) addresses+=("${2:?--address needs a value}"); shift 2 ;;
      --cluster)
        for sock in "${2:?--cluster needs a value}"/node*/containerd.sock; do
          [ ! -S "$sock" ] || addresses+=("$sock")
        done
        ((${#addresses[@]})) || die "the local cluster in $2 has no real node (no $2/node*/containerd.sock): bosun's pods could not run anywhere"
        shift 2 ;;
      *) imgs+=("$1"); shift ;;
    esac
  done
  ((${#addresses[@]})) && ((${#imgs[@]})) || die "usage: docker-build.sh load IMG... --address SOCKET | --cluster DIR"
  for address in "${addresses[@]}"; do
    [ -S "$address" ] || die "no containerd at $address: is the local cluster up (make cluster)?"
  done
  t=$(tool)
  tmp=$(mktemp -d)
  # shellcheck disable=SC2064 # expand $tmp now
  trap "rm -rf '$tmp'" EXIT
  for i in "${imgs[@]}"; do
    case $t in
      docker) docker save -o "$tmp/image.tar" "$i" ;;
      podman) podman save -q --format docker-archive -o "$tmp/image.tar" "$i" ;;
      buildah) buildah push -q "$i" "docker-archive:$tmp/image.tar:$i" ;;
    esac
    # A docker archive carries the image's name (an OCI one only its tag).
    for address in "${addresses[@]}"; do
      ctr -a "$address" -n k8s.io images import "$tmp/image.tar" >/dev/null ||
        die "importing $i into $address failed"
      log "$i imported into $address"
    done
    rm -f "$tmp/image.tar"
  done
}

cmd_push() {
  (($#)) || die "usage: docker-build.sh push IMG..."
  local t i
  t=$(tool)
  for i in "$@"; do "$t" push "$i" >&2; done
}

case ${1:-} in
  build) shift; cmd_build "$@" ;;
  push) shift; cmd_push "$@" ;;
  load) shift; cmd_load "$@" ;;
  *) echo "usage: docker-build.sh build IMG RUNNER_IMG | push IMG... | load IMG... --address SOCKET | --cluster DIR" >&2; exit 2 ;;
esac
