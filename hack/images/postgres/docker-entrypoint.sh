#!/usr/bin/env bash
# Entrypoint of localhost/postgres:13, :15 and :17 (hack/images.sh): PostgreSQL from
# Debian behind the documented interface of the official `postgres` image, so
# that manifests written for postgres:<major> run unchanged. Written from that
# documentation, not copied:
#   POSTGRES_PASSWORD        superuser password; required on first start unless
#                            POSTGRES_HOST_AUTH_METHOD=trust
#   POSTGRES_USER            superuser name (postgres)
#   POSTGRES_DB              database created on first start (= POSTGRES_USER)
#   POSTGRES_INITDB_ARGS     extra initdb arguments (word-split)
#   POSTGRES_INITDB_WALDIR   WAL directory outside PGDATA
#   POSTGRES_HOST_AUTH_METHOD  pg_hba method for TCP connections
#                            (default: password_encryption, i.e. scram-sha-256)
#   PGDATA                   data directory (/var/lib/postgresql/data)
#   X_FILE                   read X from a file (for the four POSTGRES_ ones
#                            above that hold values)
#   /docker-entrypoint-initdb.d/*.sh|*.sql|*.sql.gz|*.sql.xz|*.sql.zst
#                            run once, in name order, after the first initdb
#                            (executable .sh are run, others sourced)
# Started as root it fixes the ownership of the data directory and re-runs
# itself as postgres (uid 999) with setpriv; started as any other user it
# runs as that user. A data directory that already holds a cluster
# (PG_VERSION) is used as it is: nothing is re-initialised.
#
# Deliberate differences: TCP connections from the loopback address need a
# password too (initdb --auth-host), where the official image trusts them (the
# Unix socket is trusted, as there); and there is no JIT compilation (LLVM is
# left out of the image, jit = off; see hack/images.sh).
set -Eeuo pipefail

pg_bin=/usr/lib/postgresql/${PG_MAJOR:?the image sets PG_MAJOR}/bin
log() { echo "docker-entrypoint.sh: $*" >&2; }
die() { log "error: $*"; exit 1; }

# file_env VAR [DEFAULT]: VAR from $VAR or from the file named by $VAR_FILE.
file_env() {
  local var=$1 file_var="${1}_FILE" def=${2:-} val
  if [ -n "${!var:-}" ] && [ -n "${!file_var:-}" ]; then
    die "both $var and $file_var are set (they are exclusive)"
  fi
  val=$def
  if [ -n "${!var:-}" ]; then
    val=${!var}
  elif [ -n "${!file_var:-}" ]; then
    val=$(<"${!file_var}")
  fi
  export "$var=$val"
  unset "$file_var"
}

# True when the arguments only ask postgres for information (no server start).
wants_help() {
  local a
  for a; do
    case $a in -'?'|--help|--describe-config|-V|--version|-C|-C*) return 0 ;; esac
  done
  return 1
}

# Only [dirs] and lost+found (a file system's root): initdb refuses those.
only_lost_found() {
  local e found=0
  for e in "$1"/* "$1"/.[!.]* "$1"/..?*; do
    [ -e "$e" ] || [ -L "$e" ] || continue
    [ "${e##*/}" = lost+found ] || return 1
    found=1
  done
  [ "$found" = 1 ]
}

setup_env() {
  export PGDATA=${PGDATA:-/var/lib/postgresql/data}
  file_env POSTGRES_PASSWORD
  file_env POSTGRES_USER postgres
  file_env POSTGRES_DB "$POSTGRES_USER"
  file_env POSTGRES_INITDB_ARGS
  : "${POSTGRES_HOST_AUTH_METHOD:=}"
  have_db=
  [ -s "$PGDATA/PG_VERSION" ] && have_db=1 || true
}

create_dirs() {
  local uid
  uid=$(id -u)
  mkdir -p "$PGDATA"
  # postgres insists on 0700 (or 0750); volumes often come with other modes.
  chmod 00700 "$PGDATA" 2>/dev/null || :
  mkdir -p /var/run/postgresql 2>/dev/null || :
  chmod 03775 /var/run/postgresql 2>/dev/null || :
  if [ -n "${POSTGRES_INITDB_WALDIR:-}" ]; then
    mkdir -p "$POSTGRES_INITDB_WALDIR"
    [ "$uid" != 0 ] || find "$POSTGRES_INITDB_WALDIR" \! -user postgres -exec chown postgres: '{}' +
    chmod 700 "$POSTGRES_INITDB_WALDIR"
  fi
  if [ "$uid" = 0 ]; then
    find "$PGDATA" \! -user postgres -exec chown postgres: '{}' +
    find /var/run/postgresql \! -user postgres -exec chown postgres: '{}' +
  fi
}

check_password() {
  if [ -z "$POSTGRES_PASSWORD" ] && [ "$POSTGRES_HOST_AUTH_METHOD" != trust ]; then
    cat >&2 <<'EOF'
docker-entrypoint.sh: error: the database is uninitialized and no superuser password is set.
  Set POSTGRES_PASSWORD (or POSTGRES_PASSWORD_FILE) to a non-empty value, or
  POSTGRES_HOST_AUTH_METHOD=trust to allow all connections without a password
  (not recommended).
EOF
    exit 1
  fi
  if [ "${#POSTGRES_PASSWORD}" -ge 100 ]; then
    log "warning: POSTGRES_PASSWORD is ${#POSTGRES_PASSWORD} characters long; psql prompts read at most 99"
  fi
  if [ "$POSTGRES_HOST_AUTH_METHOD" = trust ]; then
    log "warning: POSTGRES_HOST_AUTH_METHOD=trust: every TCP connection is allowed without a password"
  fi
}

run_initdb() {
  # initdb looks the current user up by uid; an arbitrary uid (runAsUser)
  # is not in /etc/passwd, so lend it an entry through nss_wrapper.
  local nss=() tmp target=$PGDATA
  if ! getent passwd "$(id -u)" >/dev/null; then
    local lib
    for lib in /usr/lib/*/libnss_wrapper.so /usr/lib/libnss_wrapper.so; do
      [ -e "$lib" ] || continue
      tmp=$(mktemp -d)
      echo "postgres:x:$(id -u):$(id -g):PostgreSQL:$PGDATA:/bin/false" >"$tmp/passwd"
      echo "postgres:x:$(id -g):" >"$tmp/group"
      nss=(env LD_PRELOAD="$lib" NSS_WRAPPER_PASSWD="$tmp/passwd" NSS_WRAPPER_GROUP="$tmp/group")
      break
    done
  fi
  # A volume's root may hold lost+found, which initdb refuses: initialise a
  # subdirectory on the same file system and move the result up.
  if only_lost_found "$PGDATA"; then
    target=$PGDATA/.initdb.$$
    log "$PGDATA holds lost+found (a volume's root); initialising via $target"
  fi
  local args=(--username="$POSTGRES_USER" -D "$target")
  [ -z "${POSTGRES_INITDB_WALDIR:-}" ] || args+=(--waldir "$POSTGRES_INITDB_WALDIR")
  [ "$POSTGRES_HOST_AUTH_METHOD" = trust ] || args+=(--auth-host=scram-sha-256)
  # shellcheck disable=SC2086 # POSTGRES_INITDB_ARGS is split on purpose
  "${nss[@]}" "$pg_bin/initdb" "${args[@]}" --pwfile=<(printf '%s\n' "$POSTGRES_PASSWORD") \
    $POSTGRES_INITDB_ARGS
  if [ "$target" != "$PGDATA" ]; then
    local e
    for e in "$target"/* "$target"/.[!.]*; do
      [ -e "$e" ] || continue
      mv "$e" "$PGDATA/"
    done
    rmdir "$target"
    chmod 00700 "$PGDATA"
  fi
  [ -z "${tmp:-}" ] || rm -rf "$tmp"
}

# Every non-local connection: password (scram-sha-256 unless told otherwise).
setup_hba() {
  local method=$POSTGRES_HOST_AUTH_METHOD
  if [ -z "$method" ]; then
    method=$("$pg_bin/postgres" -D "$PGDATA" -C password_encryption)
  fi
  printf '\n# added by docker-entrypoint.sh\nhost all all all %s\n' "$method" >>"$PGDATA/pg_hba.conf"
}

psql_init() {
  "$pg_bin/psql" -v ON_ERROR_STOP=1 --no-psqlrc --no-password --username "$POSTGRES_USER" "$@"
}

# A server for the initialisation only: Unix socket, no TCP.
temp_server_start() {
  PGUSER=$POSTGRES_USER "$pg_bin/pg_ctl" -D "$PGDATA" -w -t 60 \
    -o "-c listen_addresses='' -p ${PGPORT:-5432}" start
}

temp_server_stop() {
  PGUSER=$POSTGRES_USER "$pg_bin/pg_ctl" -D "$PGDATA" -m fast -w -t 60 stop
}

create_db() {
  if [ "$POSTGRES_DB" != postgres ]; then
    local exists
    exists=$(psql_init --dbname postgres -tA -v db="$POSTGRES_DB" <<'EOF'
SELECT 1 FROM pg_database WHERE datname = :'db';
EOF
)
    if [ -z "$exists" ]; then
      psql_init --dbname postgres -v db="$POSTGRES_DB" <<'EOF'
CREATE DATABASE :"db";
EOF
    fi
  fi
}

run_init_files() {
  local f
  for f in /docker-entrypoint-initdb.d/*; do
    [ -e "$f" ] || continue
    case $f in
      *.sh)
        if [ -x "$f" ]; then
          log "running $f"
          "$f"
        else
          log "sourcing $f"
          # shellcheck disable=SC1090 # the user's script
          . "$f"
        fi
        ;;
      *.sql) log "running $f"; psql_init --dbname "$POSTGRES_DB" -f "$f" ;;
      *.sql.gz) log "running $f"; gzip -dc "$f" | psql_init --dbname "$POSTGRES_DB" ;;
      *.sql.xz) log "running $f"; xz -dc "$f" | psql_init --dbname "$POSTGRES_DB" ;;
      *.sql.zst) log "running $f"; zstd -dc "$f" | psql_init --dbname "$POSTGRES_DB" ;;
      *) log "ignoring $f" ;;
    esac
  done
}

main() {
  # `docker run postgres -c foo=bar`: options for the server.
  if [ "${1:0:1}" = - ]; then
    set -- postgres "$@"
  fi
  if [ "$1" != postgres ] || wants_help "$@"; then
    exec "$@"
  fi

  setup_env
  create_dirs
  if [ "$(id -u)" = 0 ]; then
    # Run as postgres from here on: this script again, without root.
    HOME=/var/lib/postgresql exec setpriv --reuid=postgres --regid=postgres --init-groups \
      "${BASH_SOURCE[0]}" "$@"
  fi

  if [ -z "$have_db" ]; then
    check_password
    run_initdb
    setup_hba
    export PGPASSWORD=${PGPASSWORD:-$POSTGRES_PASSWORD}
    temp_server_start
    create_db
    run_init_files
    temp_server_stop
    unset PGPASSWORD
    log "PostgreSQL init process complete; ready for start up"
  else
    log "PostgreSQL database directory appears to contain a database; skipping initialization"
  fi
  exec "$pg_bin/postgres" "${@:2}"
}

main "$@"
