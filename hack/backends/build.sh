#!/usr/bin/env bash
# Builds one of the pinned storage and MongoDB servers that hack/backends.sh
# runs, or a tool the packaging tests run (promtool, helm), from the
# registries (Go module proxy, npm), into a cache outside the checkout, and
# prints the directory holding its executables. actionlint, which make lint runs
# on .github/workflows, and mc, the hand-made pipeline make bench-backup compares
# bosun with, are built the same way.
#
# Usage: build.sh minio | fake-gcs-server | azurite | ferretdb | mongo-tools | promtool | helm | helm4 | kapply | actionlint | mc
#
# Each has a wrapper here (hack/backends/<name>/) pinning the upstream version:
# go.mod/go.sum for Go modules, package.json/package-lock.json for npm. The
# cache key is the version plus a hash of those files, so every clone on this
# machine reuses one build and a bump builds into a fresh directory:
#   ${BOSUN_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/bosun}/backends/<name>-<version>_<hash>/
# A finished build is published by an atomic rename (an interrupted build never
# looks complete), and builds of one name are serialised by a lock in the cache,
# so concurrent callers build once and the others wait and reuse it.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cache_root=${BOSUN_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/bosun}
name=${1:-}
log() { echo "backends/build.sh: $*" >&2; }
die() { log "$*"; exit 1; }

# The version a Go wrapper requires of its upstream module.
go_version_of() {  # wrapper module
  awk -v m="$2" '($1 == "require" && $2 == m) || $1 == m { print ($1 == "require" ? $3 : $2); exit }' "$here/$1/go.mod"
}

case $name in
  minio)
    version=$(go_version_of minio github.com/minio/minio)
    files=(minio/go.mod minio/go.sum)
    bins=(minio)
    ;;
  fake-gcs-server)
    version=$(go_version_of fake-gcs-server github.com/fsouza/fake-gcs-server)
    files=(fake-gcs-server/go.mod fake-gcs-server/go.sum fake-gcs-server/xml-api.patch)
    bins=(fake-gcs-server)
    ;;
  ferretdb)
    version=$(go_version_of ferretdb github.com/FerretDB/FerretDB)
    files=(ferretdb/go.mod ferretdb/go.sum)
    bins=(ferretdb)
    ;;
  mongo-tools)
    version=$(go_version_of mongo-tools github.com/mongodb/mongo-tools)
    files=(mongo-tools/go.mod mongo-tools/go.sum)
    bins=(mongodump mongorestore mongoimport mongoexport)
    ;;
  azurite)
    version=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["dependencies"]["azurite"])' "$here/azurite/package.json")
    files=(azurite/package.json azurite/package-lock.json)
    bins=(azurite-blob)
    ;;
  promtool)
    version=$(go_version_of promtool github.com/prometheus/prometheus)
    files=(promtool/go.mod promtool/go.sum)
    bins=(promtool)
    ;;
  helm)
    version=$(go_version_of helm helm.sh/helm/v3)
    files=(helm/go.mod helm/go.sum)
    bins=(helm)
    ;;
  helm4)
    version=$(go_version_of helm4 helm.sh/helm/v4)
    files=(helm4/go.mod helm4/go.sum)
    bins=(helm4)
    ;;
  kapply)
    version=$(go_version_of kapply sigs.k8s.io/cli-utils)
    files=(kapply/go.mod kapply/go.sum)
    bins=(kapply)
    ;;
  actionlint)
    version=$(go_version_of actionlint github.com/rhysd/actionlint)
    files=(actionlint/go.mod actionlint/go.sum)
    bins=(actionlint)
    ;;
  mc)
    version=$(go_version_of mc github.com/minio/mc)
    files=(mc/go.mod mc/go.sum)
    bins=(mc)
    ;;
  *) echo "usage: $0 minio|fake-gcs-server|azurite|ferretdb|mongo-tools|promtool|helm|helm4|kapply|actionlint|mc" >&2; exit 2 ;;
esac
[ -n "$version" ] || die "no pinned version found for $name in $here/$name"

key=$(cd "$here" && cat "${files[@]}" | sha256sum | cut -c1-12)
dest="$cache_root/backends/$name-${version}_$key"

complete() {
  local b
  for b in "${bins[@]}"; do [ -x "$dest/bin/$b" ] || return 1; done
}

if complete; then
  echo "$dest/bin"
  exit 0
fi

mkdir -p "$cache_root/backends"
exec 8>>"$cache_root/backends/.$name.lock"
flock 8
if complete; then   # built by someone else while we waited
  echo "$dest/bin"
  exit 0
fi

work=$(mktemp -d "$cache_root/backends/.build-$name.XXXXXX")
trap 'chmod -R u+w "$work" 2>/dev/null; rm -rf "$work"' EXIT
mkdir -p "$work/bin"
start=$(date +%s)

go_env() {
  command -v go >/dev/null || die "go is not installed (needed to build $name)"
  export CGO_ENABLED=0 GOFLAGS=-mod=mod GOTOOLCHAIN=local
}

build_minio() {
  go_env
  # MinIO's release builds stamp the release into these (buildscripts/gen-ldflags.go);
  # without them it calls itself DEVELOPMENT.GOGET. Derived from the pseudo-version.
  local ts=${version#v0.0.0-} commit
  commit=${ts#*-}; ts=${ts%%-*}
  local iso="${ts:0:4}-${ts:4:2}-${ts:6:2}T${ts:8:2}:${ts:10:2}:${ts:12:2}Z"
  local p=github.com/minio/minio/cmd
  log "building minio $version"
  (cd "$here/minio" && go build -trimpath -o "$work/bin/minio" \
    -ldflags "-s -w -X $p.Version=$iso -X $p.CopyrightYear=${ts:0:4} -X $p.ReleaseTag=RELEASE.${iso//:/-} -X $p.CommitID=$commit -X $p.ShortCommitID=$commit" \
    github.com/minio/minio)
}

# Copies a module's source (its own go.mod/go.sum: the same dependency
# versions) out of the module cache into $work/src, writable, to build from.
module_source() {  # wrapper module-path
  local src
  src=$(cd "$here/$1" && go mod download -json "$2" |
    python3 -c 'import json, sys; d = json.load(sys.stdin); print(d.get("Dir") or sys.exit("go mod download: " + d.get("Error", "no directory")))')
  cp -r "$src" "$work/src"
  chmod -R u+w "$work/src"
}

# Upstream fake-gcs-server answers the XML API's object PUT and multipart
# upload (POST ?uploads) with "invalid uploadType"; the Rust object_store crate
# writes through exactly those. xml-api.patch adds them (a new file and one
# line of routing); see the patch for what it implements.
build_fake-gcs-server() {
  go_env
  module_source fake-gcs-server github.com/fsouza/fake-gcs-server
  # git apply as a plain patch tool (the copy is no repository; the ceiling
  # keeps git from finding one above the cache).
  (cd "$work/src" && GIT_CEILING_DIRECTORIES=$(dirname "$work") git apply "$here/fake-gcs-server/xml-api.patch")
  log "building fake-gcs-server $version (with xml-api.patch)"
  (cd "$work/src" && go build -buildvcs=false -trimpath -ldflags "-s -w" -o "$work/bin/fake-gcs-server" .)
  rm -rf "$work/src"
}

# FerretDB embeds build/version/version.txt, which its release process
# generates and the module zip lacks; a build of its main package panics at
# start without it. The Go toolchain refuses overlays into the module cache,
# so build from a copy of the module's source (its own go.mod/go.sum, the same
# dependency versions) with the file added.
build_ferretdb() {
  go_env
  module_source ferretdb github.com/FerretDB/FerretDB
  echo "$version" >"$work/src/build/version/version.txt"
  log "building ferretdb $version"
  (cd "$work/src" && go build -buildvcs=false -trimpath -ldflags "-s -w" -o "$work/bin/ferretdb" ./cmd/ferretdb)
  rm -rf "$work/src"
}

# Each command's package is <tool>/main, so one `go build` each.
build_mongo-tools() {
  go_env
  local t
  for t in "${bins[@]}"; do
    log "building $t (mongo-tools $version)"
    (cd "$here/mongo-tools" && go build -trimpath -ldflags "-s -w" -o "$work/bin/$t" \
      "github.com/mongodb/mongo-tools/$t/main")
  done
}

# promtool, built from the Prometheus module's own source and go.sum (the
# versions upstream released with).
build_promtool() {
  go_env
  module_source promtool github.com/prometheus/prometheus
  log "building promtool (prometheus $version)"
  # The module ships a go.work for its own development: build as the module alone.
  (cd "$work/src" && GOWORK=off go build -buildvcs=false -trimpath -ldflags "-s -w" -o "$work/bin/promtool" ./cmd/promtool)
  rm -rf "$work/src"
}

# Helm from its module's own source: build_helm_from WRAPPER MODULE BINARY.
build_helm_from() {
  go_env
  module_source "$1" "$2"
  log "building $3 (helm $version)"
  (cd "$work/src" && GOWORK=off go build -buildvcs=false -trimpath \
    -ldflags "-s -w -X $2/internal/version.version=$version" -o "$work/bin/$3" ./cmd/helm)
  rm -rf "$work/src"
}

build_helm() { build_helm_from helm helm.sh/helm/v3 helm; }

# Helm 4, named helm4 beside Helm 3: its --wait is kstatus's judgement (the tests of
# bosun's Reconciling/Stalled conditions).
build_helm4() { build_helm_from helm4 helm.sh/helm/v4 helm4; }

# kapply, cli-utils' own command line for kstatus (kapply status prints each change of
# a resource's status as the library computes it: the tests of every kind's
# Reconciling/Stalled conditions), from its module's own source and go.sum.
build_kapply() {
  go_env
  module_source kapply sigs.k8s.io/cli-utils
  log "building kapply (cli-utils $version)"
  (cd "$work/src" && GOWORK=off go build -buildvcs=false -trimpath -ldflags "-s -w" -o "$work/bin/kapply" ./cmd)
  rm -rf "$work/src"
}

# actionlint from its module's own source and go.sum, its version stamped where its
# release builds put it (actionlint -version).
build_actionlint() {
  go_env
  module_source actionlint github.com/rhysd/actionlint
  log "building actionlint $version"
  (cd "$work/src" && GOWORK=off go build -buildvcs=false -trimpath \
    -ldflags "-s -w -X github.com/rhysd/actionlint.version=${version#v}" -o "$work/bin/actionlint" ./cmd/actionlint)
  rm -rf "$work/src"
}

# The MinIO Client from its module's own source and go.sum: `mc pipe` streams stdin
# into a bucket (the peer of make bench-backup).
build_mc() {
  go_env
  module_source mc github.com/minio/mc
  log "building mc $version"
  (cd "$work/src" && GOWORK=off go build -buildvcs=false -trimpath -ldflags "-s -w" -o "$work/bin/mc" .)
  rm -rf "$work/src"
}

build_azurite() {
  command -v npm >/dev/null || die "npm is not installed (needed to install azurite)"
  log "installing azurite $version (npm ci)"
  cp "$here/azurite/package.json" "$here/azurite/package-lock.json" "$work/"
  # No install scripts: azurite needs no native modules.
  (cd "$work" && npm ci --omit=dev --ignore-scripts --no-audit --no-fund --loglevel=error >&2)
  local b
  for b in azurite azurite-blob; do ln -s "../node_modules/.bin/$b" "$work/bin/$b"; done
}

"build_$name"

echo "$(( $(date +%s) - start ))" >"$work/build-seconds"
rm -rf "$dest"
mv "$work" "$dest"
trap - EXIT
log "built $name in $(cat "$dest/build-seconds")s into $dest"
echo "$dest/bin"
