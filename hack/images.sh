#!/usr/bin/env bash
# Builds the container images the local cluster's real node runs, from Debian
# packages only (no registry is pulled from), and imports them into a
# containerd.
#
# Usage: images.sh build                     build what is not cached; prints the cache directory
#        images.sh import --address SOCKET   build if needed, then import into that
#                                            containerd's k8s.io (CRI) namespace
#        images.sh list                      the image names
#        images.sh runner --address SOCKET BINARY
#                                            bosun-runner-base plus BINARY (stripped
#                                            of debug info) as /usr/local/bin/bosun:
#                                            localhost/bosun-runner:dev, imported into
#                                            that containerd (what Backup and Restore
#                                            runs use on the local cluster)
#
# The images (names are stable: tests and the README use them):
#   localhost/pause:k8s-<KUBE_VERSION>     kubelet's pause.c, built statically
#   localhost/bosun-base:bookworm          minimal Debian: essential packages,
#                                          ca-certificates, tzdata, netbase
#   localhost/postgres:15                  postgresql-15 + the official postgres
#                                          image's interface (hack/images/postgres)
#   localhost/postgres:13, :17             the same of postgresql-13 from bullseye and
#                                          postgresql-17 from trixie (each suite carries
#                                          one major): every major a database may be
#                                          upgraded from or to runs for real
#   localhost/mariadb:10.11                mariadb-server + the official mariadb
#                                          image's interface (hack/images/mariadb)
#   localhost/redis:7                      redis-server, as the official redis
#                                          image (hack/images/redis)
#   localhost/nginx:bookworm               Debian's nginx serving its welcome page on
#                                          ports 80 and 8080, as any uid (hack/images/
#                                          nginx); also tagged with every image name
#                                          config/samples uses (nginx:1.25, the stacks'
#                                          web and api images...: `aliases` below), so
#                                          the tutorials' pods really run and answer
#   localhost/bosun-runner-base:trixie     pg_dump 17, mariadb-dump, zstd, from trixie:
#                                          the newest clients dump and base-back-up
#                                          every older server (pg_dump 15 refuses 17)
#   localhost/pgbouncer:trixie             pgbouncer 1.24 and psql 17 from trixie, for
#                                          PostgreSQL's pooler (spec.pooler): user
#                                          postgres (999, the default User), no
#                                          entrypoint (the pod's command writes the
#                                          configuration and starts /usr/sbin/pgbouncer,
#                                          on PATH); no /etc/pgbouncer/pgbouncer.ini
#                                          or userlist.txt
#   localhost/bosun-toolbox:bookworm       bosun-base + curl, dig, ip, ping, nc, ps
#                                          (for probing from inside a pod)
#   localhost/bosun-distroless:bookworm    no shell, no package manager: glibc,
#                                          libgcc, CA certificates, tzdata,
#                                          netbase and a nonroot user (65532), as
#                                          gcr.io/distroless/cc; the base of the
#                                          bosun image (the Dockerfile's BASE_IMAGE)
# All but pause, bosun-distroless and the images of other suites than bookworm
# (postgres:13, postgres:17, bosun-runner-base, pgbouncer) are layered: bosun-base's layer, for the database images
# and the runner a shared layer with perl (see `hidden`), then their own. A
# containerd stores and unpacks a shared layer once, and unpacking (creating
# files) is what importing mostly costs.
#
# How: mmdebstrap writes each root file system as a tarball (its hooks, which
# call back into this script, add the users with the official images' uids,
# the entrypoints and the configuration tweaks), and hack/images/oci.py turns it
# into an OCI image archive: the full tree for bosun-base, the difference to
# the image below for the others. Layers are uncompressed: `ctr images import`
# then only copies and unpacks, which is quicker than decompressing.
#
# Cache: ${BOSUN_CACHE_DIR:-${XDG_CACHE_HOME:-~/.cache}/bosun}/images/<name>-<key>.tar,
# where <key> hashes the image's recipe: this script, the files under
# hack/images/ the image uses, its name, and its base's key. A warm run does
# nothing; a changed recipe rebuilds only the images it concerns (the three
# newest archives of an image are kept). Finished archives appear by atomic
# rename, and a lock keeps concurrent runs from building the same thing twice.
# The Debian packages are whatever the mirror has when an image is built.
#
# import skips images the containerd already has at the same digest. On this
# machine (2 cores, ext4) a full import into a fresh containerd takes 16-30 s,
# nearly all of it containerd unpacking ~600 MB in ~13,500 files; a second
# import of the same images takes half a second.
#
# Environment: BOSUN_IMAGES_JOBS (parallel builds, default 3), BOSUN_DEBIAN_MIRROR,
# BOSUN_DEBIAN_SECURITY_MIRROR.
#
# Progress goes to stderr; stdout carries only the result (the cache directory,
# the import lines, the names).
set -euo pipefail

self=$(realpath "${BASH_SOURCE[0]}")
here=$(dirname "$self")
# shellcheck source-path=SCRIPTDIR source=controlplane/versions.env
. "$here/controlplane/versions.env"

cache=${BOSUN_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/bosun}/images
jobs=${BOSUN_IMAGES_JOBS:-3}
mirror=${BOSUN_DEBIAN_MIRROR:-http://deb.debian.org/debian}
security_mirror=${BOSUN_DEBIAN_SECURITY_MIRROR:-http://deb.debian.org/debian-security}
# The apt sources of a Debian suite.
sources() { # SUITE
  printf '%s\n' "deb $mirror $1 main" "deb $mirror $1-updates main" "deb $security_mirror $1-security main"
}

log() { echo "images.sh: $*" >&2; }
die() { log "$*"; exit 1; }
now() { echo "${EPOCHREALTIME/[,.]/}"; }  # microseconds, no subprocess
elapsed() { local us=$(( $(now) - $1 )); printf '%d.%01d' $((us / 1000000)) $((us % 1000000 / 100000)); }

# --- the images ------------------------------------------------------------------

# In build order: an image after the one it is layered on.
images=(bosun-base bosun-perl pause postgres postgres-13 postgres-17 mariadb redis nginx bosun-runner-base pgbouncer bosun-toolbox bosun-distroless)
declare -A ref=(
  [pause]=localhost/pause:k8s-$KUBE_VERSION
  [bosun-base]=localhost/bosun-base:bookworm
  [bosun-perl]=localhost/bosun-perl:bookworm
  [postgres]=localhost/postgres:15
  [postgres-13]=localhost/postgres:13
  [postgres-17]=localhost/postgres:17
  [mariadb]=localhost/mariadb:10.11
  [redis]=localhost/redis:7
  [nginx]=localhost/nginx:bookworm
  [bosun-runner-base]=localhost/bosun-runner-base:trixie
  [pgbouncer]=localhost/pgbouncer:trixie
  [bosun-toolbox]=localhost/bosun-toolbox:bookworm
  [bosun-distroless]=localhost/bosun-distroless:bookworm
)
# Not imported, not listed: only a layer the images on it share. All three
# database images need perl (postgresql-common, mariadb-server's scripts,
# pg_wrapper behind psql/pg_dump): 2000 files a containerd then unpacks once.
declare -A hidden=([bosun-perl]=1)
# The image each one is layered on.
declare -A base=(
  [bosun-perl]=bosun-base
  [postgres]=bosun-perl [mariadb]=bosun-perl
  [redis]=bosun-base [nginx]=bosun-base [bosun-toolbox]=bosun-base
)
# More names an image is tagged with at import: the images config/samples and the
# README's tour name (no registry is reached: the real node pulls nothing). One web
# server stands for them all; it listens on 80 and 8080, the ports the samples give.
# (crates/testing's samples test checks that every image of config/samples is here.)
declare -A aliases=(
  [nginx]="docker.io/library/nginx:1.21 docker.io/library/nginx:1.25 docker.io/library/nginx:1.27
    docker.io/nginxinc/nginx-unprivileged:1.27 ghcr.io/example/web:1.0 ghcr.io/example/api:1.0
    registry.company.com/ecommerce-frontend:v2.1.0 registry.company.com/ecommerce-backend:v2.1.0"
)
# Debian packages beyond bosun-base's. Each image is bootstrapped in full (with
# bosun-base's packages too) and then diffed against its base, so an image's
# packages must pull in its base's (perl, here, comes as a dependency).
base_packages=ca-certificates,tzdata,netbase
# shellcheck disable=SC2054 # comma-separated for mmdebstrap --include
declare -A packages=(
  [bosun-base]=""
  [bosun-perl]=perl
  # locales: postgresql-15 depends on it anyway; en_US.UTF-8 is generated
  # because the official image's databases use it. libnss-wrapper: initdb
  # under a uid without a passwd entry (runAsUser).
  [postgres]=postgresql-15,locales,libnss-wrapper,xz-utils,zstd
  [postgres-13]=postgresql-13,locales,libnss-wrapper,xz-utils,zstd
  [postgres-17]=postgresql-17,locales,libnss-wrapper,xz-utils,zstd
  [mariadb]=mariadb-server,mariadb-client,xz-utils,zstd
  [redis]=redis-server
  [nginx]=nginx
  [bosun-runner-base]=postgresql-client-17,mariadb-client,zstd
  [pgbouncer]=pgbouncer,postgresql-client-17
  [bosun-toolbox]=curl,bind9-dnsutils,iproute2,iputils-ping,netcat-openbsd,procps
  # Extracted only (see rootfs_debian): exactly these, no dependencies, no
  # maintainer scripts; the customize hook does what theirs would have done.
  [bosun-distroless]=base-files,libc6,libgcc-s1
)
# The Debian suite of an image (bookworm unless named here): the one that carries
# its PostgreSQL major. An image of another suite is a full tree (no base).
declare -A suite_of=([postgres-13]=bullseye [postgres-17]=trixie [bosun-runner-base]=trixie [pgbouncer]=trixie)
# Images whose packages are extracted, not installed: no dpkg, no shell.
declare -A extract_only=([bosun-distroless]=1)
# Files packages install that an image leaves out (dpkg path-exclude).
declare -A excludes=(
  # PostgreSQL's JIT: LLVM (libllvm14, libz3-4) and the bitcode of the server,
  # 155 MB and 1100 files, half of the image. Queries run interpreted; JIT is
  # an optimisation the official image's interface does not promise (and jit
  # is set off in the config initdb writes).
  [postgres]="/usr/lib/postgresql/*/lib/bitcode/* /usr/lib/postgresql/*/lib/llvmjit*
    /usr/lib/x86_64-linux-gnu/libLLVM*.so* /usr/lib/x86_64-linux-gnu/libz3.so*"
)
excludes[postgres-13]=${excludes[postgres]}
excludes[postgres-17]=${excludes[postgres]}
# Files under hack/images/ an image uses (besides oci.py, which all use).
declare -A files=(
  [postgres]=images/postgres/docker-entrypoint.sh
  [postgres-13]=images/postgres/docker-entrypoint.sh
  [postgres-17]=images/postgres/docker-entrypoint.sh
  [mariadb]="images/mariadb/docker-entrypoint.sh images/mariadb/healthcheck.sh"
  [redis]=images/redis/docker-entrypoint.sh
  [nginx]=images/nginx/nginx.conf
)
path=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin

# The image config (the "config" object of the OCI image config), as the
# official images have it. $1: name, $2: the directory holding the version
# files the customize hook wrote.
image_config() {
  local v m
  case $1 in
    pause) cat <<EOF
{"Entrypoint": ["/pause"], "User": "65535:65535", "WorkingDir": "/", "Env": ["PATH=$path"]}
EOF
      ;;
    bosun-distroless) cat <<EOF
{"User": "65532:65532", "WorkingDir": "/home/nonroot",
 "Env": ["PATH=$path", "SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt"]}
EOF
      ;;
    bosun-base | bosun-perl | bosun-runner-base | bosun-toolbox) cat <<EOF
{"Cmd": ["bash"], "WorkingDir": "/", "Env": ["PATH=$path"]}
EOF
      ;;
    postgres | postgres-*) v=$(<"$2/postgres.version"); m=$(major "$1"); cat <<EOF
{"Entrypoint": ["docker-entrypoint.sh"], "Cmd": ["postgres"], "WorkingDir": "/",
 "Env": ["PATH=$path:/usr/lib/postgresql/$m/bin", "LANG=en_US.utf8", "PG_MAJOR=$m",
         "PG_VERSION=$v", "PGDATA=/var/lib/postgresql/data"],
 "ExposedPorts": ["5432/tcp"], "Volumes": ["/var/lib/postgresql/data"], "StopSignal": "SIGINT"}
EOF
      ;;
    mariadb) v=$(<"$2/mariadb.version"); cat <<EOF
{"Entrypoint": ["docker-entrypoint.sh"], "Cmd": ["mariadbd"], "WorkingDir": "/",
 "Env": ["PATH=$path", "LANG=C.UTF-8", "MARIADB_VERSION=$v"],
 "ExposedPorts": ["3306/tcp"], "Volumes": ["/var/lib/mysql"]}
EOF
      ;;
    nginx) v=$(<"$2/nginx.version"); cat <<EOF
{"Cmd": ["nginx", "-g", "daemon off;"], "WorkingDir": "/",
 "Env": ["PATH=$path", "NGINX_VERSION=${v%%-*}"],
 "ExposedPorts": ["80/tcp", "8080/tcp"], "StopSignal": "SIGQUIT"}
EOF
      ;;
    pgbouncer) v=$(<"$2/pgbouncer.version"); cat <<EOF
{"Cmd": ["bash"], "User": "999:999", "WorkingDir": "/",
 "Env": ["PATH=$path", "PGBOUNCER_VERSION=${v%%-*}"], "ExposedPorts": ["6432/tcp"]}
EOF
      ;;
    redis) v=$(<"$2/redis.version"); cat <<EOF
{"Entrypoint": ["docker-entrypoint.sh"], "Cmd": ["redis-server"], "WorkingDir": "/data",
 "Env": ["PATH=$path", "REDIS_VERSION=${v%%-*}"],
 "ExposedPorts": ["6379/tcp"], "Volumes": ["/data"]}
EOF
      ;;
  esac
}

# The PostgreSQL major of a postgres image: its tag.
major() { echo "${ref[$1]##*:}"; }

# --- mmdebstrap hooks (run as `images.sh _hook PHASE NAME WORKDIR ROOTFS`) ------

# Everything a hook changes in the root file system, it changes from inside a
# chroot: absolute symlinks in it (/var/run -> /run) must not lead to the host.
in_root() { # ROOTFS: runs the bash script on stdin in the chroot
  chroot "$1" /bin/bash -euo pipefail -s
}

# A system user and group with a fixed id, added before the package that would
# create them (with the next free id) is installed; its maintainer scripts
# then find them. The essential set has no useradd: edit the files.
add_user() { # ROOTFS NAME UID HOME SHELL GECOS
  in_root "$1" <<EOF
grep -q '^$2:' /etc/group || echo '$2:x:$3:' >>/etc/group
grep -q '^$2:' /etc/passwd || echo '$2:x:$3:$3:$6:$4:$5' >>/etc/passwd
if [ -e /etc/shadow ]; then grep -q '^$2:' /etc/shadow || echo '$2:*:19000:0:99999:7:::' >>/etc/shadow; fi
if [ -e /etc/gshadow ]; then grep -q '^$2:' /etc/gshadow || echo '$2:!::' >>/etc/gshadow; fi
EOF
}

# Copies a file of hack/images/ into the chroot as an executable.
add_script() { # ROOTFS SRC DEST
  # shellcheck disable=SC2016 # $0 is for the inner shell
  chroot "$1" /bin/sh -c 'cat >"$0" && chmod 0755 "$0"' "$3" <"$here/images/$2"
}

# After the essential packages, before the --include ones.
hook_essential() { # NAME ROOTFS
  local r=$2
  case $1 in
    postgres | postgres-*)
      add_user "$r" postgres 999 /var/lib/postgresql /bin/bash "PostgreSQL administrator"
      # No "main" cluster from the package's postinst: the entrypoint makes one.
      in_root "$r" <<'EOF'
mkdir -p /etc/postgresql-common/createcluster.d
echo "create_main_cluster = false" >/etc/postgresql-common/createcluster.d/bosun.conf
EOF
      ;;
    mariadb) add_user "$r" mysql 999 /var/lib/mysql /bin/false "MySQL Server" ;;
    redis) add_user "$r" redis 999 /var/lib/redis /usr/sbin/nologin "" ;;
    # (postgresql-common, which pgbouncer depends on, would add it with the next free id)
    pgbouncer) add_user "$r" postgres 999 /var/lib/postgresql /bin/bash "PostgreSQL administrator" ;;
  esac
}

# The installed version of a package (for the image's *_VERSION variable).
pkg_version() { # ROOTFS PACKAGE
  # shellcheck disable=SC2016 # a dpkg-query format
  chroot "$1" dpkg-query -W -f '${Version}' "$2"
}

# After everything is installed.
hook_customize() { # NAME WORKDIR ROOTFS
  local name=$1 work=$2 r=$3
  if [ -n "${extract_only[$name]:-}" ]; then customize_extracted "$r"; return; fi
  case $name in
    postgres | postgres-*)
      pkg_version "$r" "postgresql-$(major "$name")" >"$work/postgres.version"
      add_script "$r" postgres/docker-entrypoint.sh /usr/local/bin/docker-entrypoint.sh
      # (one major per image: the globs below name one file)
      in_root "$r" <<'EOF'
# Every cluster initdb makes listens on all addresses; no JIT (its LLVM is
# left out of the image, see rootfs_debian).
sample=$(echo /usr/share/postgresql/*/postgresql.conf.sample)
sed -ri "s/^#?(listen_addresses)\s*=\s*\S+.*/\1 = '*'/; s/^#?(jit)\s*=\s*on\b/\1 = off/" $sample
grep -q "^listen_addresses = '\*'" $sample && grep -q "^jit = off" $sample
[ -z "$(ls -A /etc/postgresql)" ]  # no cluster from the package
localedef -i en_US -c -f UTF-8 -A /usr/share/locale/locale.alias en_US.UTF-8
mkdir -p /var/lib/postgresql/data /run/postgresql /docker-entrypoint-initdb.d
chown 999:999 /var/lib/postgresql /var/lib/postgresql/data /run/postgresql
# As the official image: any uid may fill the data directory (the entrypoint
# tightens it to 0700) and create the socket.
chmod 1777 /var/lib/postgresql/data
chmod 3777 /run/postgresql
EOF
      ;;
    mariadb)
      pkg_version "$r" mariadb-server >"$work/mariadb.version"
      add_script "$r" mariadb/docker-entrypoint.sh /usr/local/bin/docker-entrypoint.sh
      add_script "$r" mariadb/healthcheck.sh /usr/local/bin/healthcheck.sh
      in_root "$r" <<'EOF'
# The package's postinst initialised a data directory: start empty.
rm -rf /var/lib/mysql
mkdir -p /var/lib/mysql /run/mysqld /docker-entrypoint-initdb.d
chown 999:999 /var/lib/mysql /run/mysqld
chmod 1777 /run/mysqld
# All addresses, errors to stderr rather than log files, any uid; no reverse
# DNS lookups of clients.
find /etc/mysql -name '*.cnf' -exec sed -Ei 's/^(bind-address|log|user\s)/#&/' '{}' +
printf '[mariadb]\nhost-cache-size=0\nskip-name-resolve\n' >/etc/mysql/mariadb.conf.d/05-skipcache.cnf
EOF
      ;;
    nginx)
      pkg_version "$r" nginx >"$work/nginx.version"
      # shellcheck disable=SC2016 # $0 is for the inner shell
      chroot "$r" /bin/sh -c 'cat >"$0"' /etc/nginx/nginx.conf <"$recipe/images/nginx/nginx.conf"
      in_root "$r" <<'EOF'
# Logs to the container's output, as the official image's; the paths nginx opens
# before it reads its configuration writable by any uid.
ln -sf /dev/stdout /var/log/nginx/access.log
ln -sf /dev/stderr /var/log/nginx/error.log
chmod 1777 /var/log/nginx /var/lib/nginx
rm -rf /etc/nginx/sites-enabled /etc/nginx/sites-available
nginx -t
EOF
      ;;
    pgbouncer)
      pkg_version "$r" pgbouncer >"$work/pgbouncer.version"
      in_root "$r" <<'EOF'
# Nothing uses Debian's sample configuration: the pooler writes its own.
rm -f /etc/pgbouncer/pgbouncer.ini /etc/pgbouncer/userlist.txt
mkdir -p /etc/pgbouncer /var/lib/postgresql /run/postgresql /var/log/postgresql
chown 999:999 /etc/pgbouncer /var/lib/postgresql /run/postgresql /var/log/postgresql
# As in the postgres images: any uid may create the socket (and log).
chmod 3777 /run/postgresql
chmod 1777 /var/log/postgresql
[ "$(command -v pgbouncer)" = /usr/sbin/pgbouncer ] && command -v psql >/dev/null
EOF
      ;;
    redis)
      pkg_version "$r" redis-server >"$work/redis.version"
      add_script "$r" redis/docker-entrypoint.sh /usr/local/bin/docker-entrypoint.sh
      in_root "$r" <<'EOF'
mkdir -p /data
chown 999:999 /data
EOF
      ;;
  esac
  # What a container does not need: logs and backups of the bootstrap, and
  # in /run what is not ours.
  in_root "$r" <<'EOF'
find /var/log -type f -delete
find /run -xdev -mindepth 1 -maxdepth 1 \! -name lock \! -name mysqld \! -name postgresql -exec rm -rf '{}' +
rm -f /var/cache/debconf/*-old /var/lib/dpkg/*-old /var/cache/ldconfig/aux-cache
EOF
}

# An extracted root (no shell in it, so nothing runs inside): the files the
# packages' maintainer scripts and base-passwd would have made, as distroless has
# them, and no documentation. The paths below are plain directories the packages
# ship (no symlink leads out of the root).
customize_extracted() { # ROOTFS
  local r=$1
  printf '%s\n' 'root:x:0:0:root:/root:/sbin/nologin' 'nobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin' \
    'nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin' >"$r/etc/passwd"
  printf '%s\n' 'root:x:0:' 'nogroup:x:65534:' 'nonroot:x:65532:' >"$r/etc/group"
  printf '%s\n' 'passwd: files' 'group: files' 'hosts: files dns' >"$r/etc/nsswitch.conf"
  install -d -m 0700 "$r/root"
  install -d -m 0700 -o 65532 -g 65532 "$r/home/nonroot"
  install -d -m 1777 "$r/tmp"
  # ca-certificates' postinst: the bundle of the certificates it ships.
  install -d "$r/etc/ssl/certs"
  cat "$r"/usr/share/ca-certificates/mozilla/*.crt >"$r/etc/ssl/certs/ca-certificates.crt"
  [ -s "$r/etc/ssl/certs/ca-certificates.crt" ] || die "no CA certificates extracted"
  rm -rf "$r/usr/share/doc" "$r/usr/share/man" "$r/usr/share/info" "$r/usr/share/lintian" \
    "$r/usr/share/locale" "$r/usr/share/ca-certificates" "$r/var/cache/debconf" "$r/var/lib/dpkg"
}

# --- building ------------------------------------------------------------------

# The cache keys of the images: their recipe (from $recipe, the hack/
# directory of this checkout or, while building, a snapshot of it), and their
# base's key. Computed once per run, in image order (a base before its images).
recipe=$here
declare -A keys=()
compute_keys() {
  local name f
  keys=()
  for name in "${images[@]}"; do
    keys[$name]=$(
      echo "${ref[$name]}"
      [ -z "${base[$name]:-}" ] || echo "${keys[${base[$name]}]}"
      cat "$recipe/images.sh" "$recipe/images/oci.py"
      for f in ${files[$name]:-}; do cat "$recipe/$f"; done
    ) || die "cannot read the recipe of $name"
    keys[$name]=$(sha256sum <<<"${keys[$name]}" | cut -c1-12)
  done
}

archive() { echo "$cache/$1-${keys[$1]:?}.tar"; }

# pause: kubelet's own pause.c from the k8s.io/kubernetes module the node's
# kubelet is built from (hack/controlplane/node), as its Makefile builds it.
rootfs_pause() { # WORKDIR
  local work=$1 src
  src=$(cd "$here/controlplane/node" && GOFLAGS=-mod=mod GOTOOLCHAIN=local go list -m -f '{{.Dir}}' k8s.io/kubernetes)
  if [ -z "$src" ] || [ ! -d "$src" ]; then
    (cd "$here/controlplane/node" && GOFLAGS=-mod=mod GOTOOLCHAIN=local go mod download k8s.io/kubernetes)
    src=$(cd "$here/controlplane/node" && GOFLAGS=-mod=mod GOTOOLCHAIN=local go list -m -f '{{.Dir}}' k8s.io/kubernetes)
  fi
  gcc -Os -Wall -Werror -static -DVERSION="$KUBE_VERSION-bosun" -o "$work/pause" "$src/build/pause/linux/pause.c"
  strip "$work/pause"
}

# Everything else: mmdebstrap to a tarball.
rootfs_debian() { # NAME WORKDIR
  local name=$1 work=$2 mode=root include=$base_packages suite sources
  suite=${suite_of[$name]:-bookworm}
  mapfile -t sources < <(sources "$suite")
  [ "$(id -u)" = 0 ] || mode=unshare
  [ -z "${packages[$name]}" ] || include+=,${packages[$name]}
  # The hooks' second step installs the usrmerge source's real usr-is-merged, which
  # bullseye does not have: there the symlinks of the first step alone.
  local merged_usr=(--hook-dir=/usr/share/mmdebstrap/hooks/merged-usr)
  [ "$suite" != bullseye ] || merged_usr=(--setup-hook=/usr/share/mmdebstrap/hooks/merged-usr/setup00.sh)
  if [ -n "${extract_only[$name]:-}" ]; then
    # No dpkg to configure anything and no hook running inside; merged /usr by
    # the symlinks alone.
    mmdebstrap --mode="$mode" --variant=extract --format=tar --include="$include" \
      --setup-hook=/usr/share/mmdebstrap/hooks/merged-usr/setup00.sh \
      --customize-hook="'$recipe/images.sh' _hook customize '$name' '$work' \"\$1\"" \
      "$suite" "$work/$name.rootfs.tar" "${sources[@]}"
    return
  fi
  local opts=(
    --mode="$mode" --variant=essential --format=tar
    # merged /usr as debootstrap does it, not with the usrmerge package (and perl).
    "${merged_usr[@]}"
    --aptopt='APT::Install-Recommends "false"'
    --include="$include"
    # No documentation (but the copyright files), manuals, translations.
    --dpkgopt='path-exclude=/usr/share/doc/*'
    --dpkgopt='path-include=/usr/share/doc/*/copyright'
    --dpkgopt='path-exclude=/usr/share/man/*'
    --dpkgopt='path-exclude=/usr/share/info/*'
    --dpkgopt='path-exclude=/usr/share/locale/*'
    --dpkgopt='path-include=/usr/share/locale/locale.alias'
    --dpkgopt='path-exclude=/usr/share/lintian/*'
    # (Not /usr/share/postgresql/*/man: the alternatives of psql and postgres
    # point there and break without them.)
    # No fsync per file: a failed build is thrown away anyway. It stays in the
    # image's dpkg.cfg.d, as in Debian's official images.
    --dpkgopt=force-unsafe-io
    # /run is emptied by default; the hooks create /run/postgresql and
    # /run/mysqld, which the official images have, and clean /run themselves.
    --skip=cleanup/run
  )
  local xs x
  # (read, not a plain expansion: the patterns must not glob on this host)
  IFS=$' \n' read -d '' -ra xs <<<"${excludes[$name]:-}" || true
  for x in "${xs[@]}"; do opts+=(--dpkgopt="path-exclude=$x"); done
  opts+=(
    --essential-hook="'$recipe/images.sh' _hook essential '$name' '$work' \"\$1\""
    --customize-hook="'$recipe/images.sh' _hook customize '$name' '$work' \"\$1\""
  )
  mmdebstrap "${opts[@]}" "$suite" "$work/$name.rootfs.tar" "${sources[@]}"
}

# Builds one image into the cache. Runs in the background, output in a log.
build_one() { # NAME WORKDIR
  local name=$1 work=$2 start out args
  start=$(now)
  out=$(archive "$name")
  args=(--ref "${ref[$name]}" --out "$work/$name.tar")
  if [ "$name" = pause ]; then
    rootfs_pause "$work"
    args+=(--file "$work/pause=/pause:0755")
  else
    rootfs_debian "$name" "$work"
    args+=(--rootfs "$work/$name.rootfs.tar")
  fi
  if [ -n "${base[$name]:-}" ]; then
    # The base is built by a job started before this one (or is cached).
    local base_out
    base_out=$(archive "${base[$name]}")
    until [ -e "$base_out" ]; do
      [ ! -e "$work/${base[$name]}.failed" ] || die "$name: its base ${base[$name]} failed to build"
      sleep 1
    done
    args+=(--base "$base_out")
  fi
  python3 "$recipe/images/oci.py" "${args[@]}" --config "$(image_config "$name" "$work")"
  rm -f "$work/$name.rootfs.tar"
  mv "$work/$name.tar" "$out"
  elapsed "$start" >"$work/$name.seconds"
  # Keep the three newest archives of this image (other checkouts may be at
  # other recipes), drop the rest.
  rm -f "$cache/$name.failed.log"
  # shellcheck disable=SC2012 # the names are ours: <name>-<12 hex>.tar
  ls -t "$cache/$name"-????????????.tar | tail -n +4 | xargs -r rm -f
}

# On exit (also when interrupted): stop the builds still running, drop their
# work. mmdebstrap unmounts and removes its own temporary root on SIGTERM.
# shellcheck disable=SC2329 # called from the EXIT trap
build_cleanup() {
  local pids=() pid
  for pid in $(jobs -p); do tree "$pid"; done
  ((${#pids[@]} == 0)) || kill "${pids[@]}" 2>/dev/null || true
  wait || true
  rm -rf "$1"
}
# shellcheck disable=SC2329 # called by build_cleanup
tree() { # adds a process and its descendants to pids
  local c
  pids+=("$1")
  for c in $(pgrep -P "$1" || true); do tree "$c"; done
}

cmd_build() {
  local name todo=()
  mkdir -p "$cache"
  exec 9>"$cache/.lock"
  if ! flock -n 9; then
    log "another images.sh is building; waiting for it"
    flock 9
  fi
  compute_keys
  for name in "${images[@]}"; do
    [ -e "$(archive "$name")" ] || todo+=("$name")
  done
  if ((${#todo[@]} == 0)); then
    echo "$cache"
    return 0
  fi
  command -v mmdebstrap >/dev/null || die "mmdebstrap is not installed (hack/prerequisites.sh installs it)"

  local work start running=0 failed=()
  start=$(now)
  work=$(mktemp -d "$cache/.build.XXXXXX")
  # shellcheck disable=SC2064 # expand $work now
  trap "build_cleanup '$work'" EXIT
  trap 'exit 130' INT
  trap 'exit 143' TERM
  # Build from a snapshot of the recipe, so that what is built is what the
  # keys say even if the checkout changes meanwhile; the hooks run from it too.
  mkdir -p "$work/recipe/images" "$work/recipe/controlplane"
  cp "$self" "$work/recipe/images.sh"
  cp -r "$here/images/." "$work/recipe/images/"
  cp "$here/controlplane/versions.env" "$work/recipe/controlplane/"
  recipe=$work/recipe
  compute_keys
  todo=()
  for name in "${images[@]}"; do
    [ -e "$(archive "$name")" ] || todo+=("$name")
  done
  log "building ${todo[*]} (logs in $work while it runs; $jobs at a time)"
  for name in "${todo[@]}"; do
    while ((running >= jobs)); do
      wait -n || true
      running=$((running - 1))
    done
    (
      # Not `if build_one`: that would turn off set -e inside it.
      set +e
      (set -e; build_one "$name" "$work") >"$work/$name.log" 2>&1
      rc=$?
      set -e
      if [ "$rc" = 0 ]; then
        finished=$(compgen -G "$work/*.seconds" | wc -l)
        log "built ${ref[$name]} ($finished/${#todo[@]}) in $(<"$work/$name.seconds")s ($(( $(stat -c %s "$(archive "$name")") / 1000000 )) MB)"
      else
        touch "$work/$name.failed"
        cp "$work/$name.log" "$cache/$name.failed.log"
        log "building ${ref[$name]} failed; the end of its log ($cache/$name.failed.log):"
        tail -n 30 "$work/$name.log" >&2
        exit 1
      fi
    ) &
    running=$((running + 1))
  done
  wait || true
  for name in "${todo[@]}"; do
    [ -e "$(archive "$name")" ] || failed+=("$name")
  done
  ((${#failed[@]} == 0)) || die "failed to build: ${failed[*]}"
  log "built ${#todo[@]} image(s) in $(elapsed "$start")s into $cache"
  echo "$cache"
}

# --- importing -------------------------------------------------------------------

# The manifest digest an archive's index.json names (it is the archive's second
# entry, so tar stops early).
archive_digest() {
  tar -xOf "$1" --occurrence=1 index.json | grep -o '"digest":"sha256:[0-9a-f]*"' | head -n 1 | cut -d'"' -f4
}

# Imports one archive; prints its line.
import_one() { # NAME ADDRESS
  local start
  start=$(now)
  ctr -a "$2" -n k8s.io images import "$(archive "$1")" >/dev/null ||
    die "importing ${ref[$1]} into $2 failed"
  printf '%-40s imported in %ss\n' "${ref[$1]}" "$(elapsed "$start")"
}

cmd_import() {
  local address=
  while (($#)); do
    case $1 in
      --address) address=${2:?--address needs a value}; shift 2 ;;
      --address=*) address=${1#*=}; shift ;;
      *) die "import: unknown argument $1" ;;
    esac
  done
  [ -n "$address" ] || die "usage: images.sh import --address /path/to/containerd.sock"
  command -v ctr >/dev/null || die "ctr is not installed (hack/prerequisites.sh installs containerd)"
  (cmd_build >/dev/null) || exit 1
  compute_keys
  local name start start1 existing
  start=$(now)
  existing=$(ctr -a "$address" -n k8s.io images ls) ||
    die "cannot list the images of the containerd at $address"
  # One after the other, in image order: a shared layer comes with the first
  # image that has it, and the next ones skip it. (Side by side is slower: the
  # time goes into the kernel creating files, and there are two cores.)
  for name in "${images[@]}"; do
    [ -z "${hidden[$name]:-}" ] || continue
    start1=$(now)
    if awk -v r="${ref[$name]}" -v d="$(archive_digest "$(archive "$name")")" \
      '$1 == r && $3 == d { found = 1 } END { exit !found }' <<<"$existing"; then
      printf '%-40s present (%ss)\n' "${ref[$name]}" "$(elapsed "$start1")"
    else
      import_one "$name" "$address"
    fi
  done
  # The other names an image goes by: tags of the imported image (no copy).
  local alias digest
  for name in "${!aliases[@]}"; do
    digest=$(archive_digest "$(archive "$name")")
    for alias in ${aliases[$name]}; do
      awk -v r="$alias" -v d="$digest" '$1 == r && $3 == d { found = 1 } END { exit !found }' <<<"$existing" ||
        ctr -a "$address" -n k8s.io images tag --force "${ref[$name]}" "$alias" >/dev/null ||
        die "tagging ${ref[$name]} as $alias in $address failed"
    done
  done
  log "images ready in $address after $(elapsed "$start")s"
}

# The runner image: the runner base and one more layer with the bosun binary.
# Cached by the binary's hash (the three newest kept), imported only when the
# containerd does not have it at that digest.
runner_ref=localhost/bosun-runner:dev
cmd_runner() {
  local address='' binary=''
  while (($#)); do
    case $1 in
      --address) address=${2:?--address needs a value}; shift 2 ;;
      --address=*) address=${1#*=}; shift ;;
      -*) die "runner: unknown argument $1" ;;
      *) binary=$1; shift ;;
    esac
  done
  [ -n "$address" ] && [ -n "$binary" ] || die "usage: images.sh runner --address SOCKET BINARY"
  [ -x "$binary" ] || die "runner: $binary is not an executable"
  (cmd_build >/dev/null) || exit 1
  compute_keys
  local start key out work existing
  start=$(now)
  key=$( { sha256sum "$binary" | cut -c1-64; echo "${keys[bosun-runner-base]}"; sha256sum "$here/images/oci.py"; } | sha256sum | cut -c1-16)
  out="$cache/runner-with-bosun-$key.tar"
  if [ ! -e "$out" ]; then
    work=$(mktemp -d "$cache/.runner.XXXXXX")
    objcopy --strip-debug "$binary" "$work/bosun" || { rm -rf "$work"; die "runner: stripping $binary failed"; }
    python3 "$here/images/oci.py" --ref "$runner_ref" --base "$(archive bosun-runner-base)" --additive \
      --config "{\"Entrypoint\": [\"/usr/local/bin/bosun\"], \"WorkingDir\": \"/\", \"User\": \"65532:65532\", \"Env\": [\"PATH=$path\"]}" \
      --file "$work/bosun=/usr/local/bin/bosun:0755" --out "$work/image.tar" || { rm -rf "$work"; die "runner: building the image failed"; }
    mv "$work/image.tar" "$out"
    rm -rf "$work"
    # shellcheck disable=SC2012 # names are ours, without odd characters
    ls -t "$cache"/runner-with-bosun-*.tar | tail -n +4 | xargs -r rm -f
  fi
  existing=$(ctr -a "$address" -n k8s.io images ls) || die "cannot list the images of the containerd at $address"
  if awk -v r="$runner_ref" -v d="$(archive_digest "$out")" '$1 == r && $3 == d { found = 1 } END { exit !found }' <<<"$existing"; then
    printf '%-40s present (%ss)\n' "$runner_ref" "$(elapsed "$start")"
  else
    ctr -a "$address" -n k8s.io images import "$out" >/dev/null || die "importing $runner_ref into $address failed"
    printf '%-40s imported in %ss\n' "$runner_ref" "$(elapsed "$start")"
  fi
}

# --- main ------------------------------------------------------------------------

main() {
  local name
  case ${1:-} in
    build) shift; [ $# = 0 ] || die "usage: images.sh build"; cmd_build ;;
    import) shift; cmd_import "$@" ;;
    runner) shift; cmd_runner "$@" ;;
    list)
      # shellcheck disable=SC2086 # the aliases are words
      for name in "${images[@]}"; do [ -n "${hidden[$name]:-}" ] || printf '%s\n' "${ref[$name]}" ${aliases[$name]:-}; done
      ;;
    _hook) # called back by mmdebstrap: _hook PHASE NAME WORKDIR ROOTFS
      case ${2:-} in
        essential) hook_essential "$3" "$5" ;;
        customize) hook_customize "$3" "$4" "$5" ;;
        *) die "unknown hook ${2:-}" ;;
      esac
      ;;
    *) echo "usage: images.sh build | import --address SOCKET | list" >&2; exit 2 ;;
  esac
}

# On one line: bash has read all of it before running it, so editing this file
# while it runs (e.g. during a long build) cannot change what it does next.
main "$@"; exit
