#!/usr/bin/env bash
# Starts and stops the real database and storage servers that the backup
# runner's tests (`bosun backup run` / `bosun restore run`) run against, on
# this machine, without Kubernetes:
#
#   postgres         PostgreSQL 15 (Debian's postgresql-15), scram-sha-256 everywhere
#   mariadb          MariaDB (Debian's mariadb-server), root@127.0.0.1 with a password
#   minio            S3 (MinIO, built from the Go module proxy)
#   fake-gcs-server  GCS emulator (built from the Go module proxy, with
#                    backends/fake-gcs-server/xml-api.patch: the XML API uploads
#                    that object_store uses)
#   azurite          Azure Blob emulator (Azurite, from npm)
#   ferretdb         MongoDB wire protocol over the PostgreSQL above (FerretDB v1,
#                    built from the Go module proxy), SCRAM authentication, with
#                    mongodump/mongorestore/mongoimport/mongoexport (mongo-tools,
#                    built from the Go module proxy); left out, with the reason
#                    in mongo-missing, if those cannot be built
#
# The builds are cached per pinned version (backends/build.sh); the first `up`
# on a machine builds them all (~11 minutes on 2 cores), later ones start in
# seconds.
#
# Usage: backends.sh up | down | env | status | check
#
# Everything listens on 127.0.0.1 only, on free ports picked at `up`, with
# random credentials. `eval "$(hack/backends.sh env)"` exports what a client
# needs: PG*, MYSQL_*, S3_*/AWS_*, GCS_*/GOOGLE_*, AZURE_*/AZURITE_*, MONGODB_*
# (and mongo-tools on PATH). `check` proves them with the real clients.
#
# Everything lives in one state directory, ${BOSUN_BACKENDS_DIR:-<repo>/.backends}:
#   bosun-backends       marker: this directory is ours and may be deleted
#   env                  the export lines `env` prints (credentials: mode 600)
#   ports.env            the ports, as sourceable KEY=value lines
#   bin-dirs             the build.sh bin directories the servers were started from
#   postgres/ mariadb/ minio/ gcs/ azurite/ ferretdb/   each server's data
#   logs/<server>.log    pids/<server>.pid
#   mongo-missing        why there is no MongoDB (absent when there is)
#
# Progress and errors go to stderr; stdout only carries `env`'s lines.
set -euo pipefail
set +m  # see hack/controlplane/cluster.sh: setsid must exec in place

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo_root=$(cd "$here/.." && pwd)
state=$(realpath -m "${BOSUN_BACKENDS_DIR:-$repo_root/.backends}")
timeout=${BOSUN_BACKENDS_TIMEOUT:-120}
pg_bin=/usr/lib/postgresql/15/bin

all_components=(postgres mariadb minio fake-gcs-server azurite ferretdb)
builds=(minio fake-gcs-server azurite ferretdb mongo-tools)

log() { echo "backends.sh: $*" >&2; }
die() { log "$*"; exit 1; }
now() { echo "${EPOCHREALTIME/[,.]/}"; }
elapsed() { local us=$(( $(now) - $1 )); printf '%d.%01d' $((us / 1000000)) $((us % 1000000 / 100000)); }

# The components this state directory runs: MongoDB only when it could be built.
components=()
set_components() {
  components=()
  local c
  for c in "${all_components[@]}"; do
    [ "$c" = ferretdb ] && [ -e "$state/mongo-missing" ] && continue
    components+=("$c")
  done
}
set_components

# --- process bookkeeping (as in hack/controlplane/cluster.sh) ------------------

pidfile() { echo "$state/pids/$1.pid"; }

# The executable name a live component runs as. Azurite is a node script.
exe_name() {
  case $1 in
    mariadb) echo mariadbd ;;
    azurite) echo node ;;
    *) echo "$1" ;;
  esac
}

is_running() {
  local stat
  stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
  stat=${stat##*) }
  [ "${stat%% *}" != Z ]
}

# Prints the pid of a component if it is alive: the pid file must name a live
# process that runs the component's executable (a reused pid does not count).
component_pid() {
  local f pid exe
  f=$(pidfile "$1")
  [ -r "$f" ] || return 1
  read -r pid <"$f" 2>/dev/null || return 1
  [[ $pid =~ ^[0-9]+$ ]] || return 1
  exe=$(readlink "/proc/$pid/exe" 2>/dev/null) || return 1
  exe=${exe% (deleted)}
  [ "${exe##*/}" = "$(exe_name "$1")" ] || return 1
  if [ "$1" = azurite ]; then
    tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q azurite || return 1
  fi
  is_running "$pid" || return 1
  echo "$pid"
}

alive_count() {
  local c n=0
  for c in "${components[@]}"; do component_pid "$c" >/dev/null && n=$((n + 1)); done
  echo "$n"
}

# Processes still running from the state directory that no pid file names
# (a killed `up`, a lost pid file), told apart from e.g. a `tail -f` on a log
# by the executable. PostgreSQL's backends are children of the postmaster and
# go with it.
strays() {
  local pid exe pattern
  pattern=$(printf '%s/' "$state" | sed 's/[][\\.*^$+?(){}|]/\\&/g')
  for pid in $(pgrep -f -- "$pattern" || true); do
    exe=$(readlink "/proc/$pid/exe" 2>/dev/null) || continue
    exe=${exe% (deleted)}
    case ${exe##*/} in
      postgres | mariadbd | minio | fake-gcs-server | ferretdb) echo "$pid" ;;
      node) tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q azurite && echo "$pid" ;;
    esac
  done
}

await_gone() {  # tenths-of-seconds pids...
  local n=$1 i pid left
  shift
  for ((i = 0; i < n; i++)); do
    left=0
    for pid in "$@"; do is_running "$pid" && left=1; done
    [ "$left" = 0 ] && return 0
    sleep 0.1
  done
  return 1
}

stop_all() {
  local c pid pids=() pg=''
  for c in "${all_components[@]}"; do
    if pid=$(component_pid "$c"); then
      pids+=("$pid")
      [ "$c" != postgres ] || pg=$pid
    fi
  done
  mapfile -t pids < <({ printf '%s\n' "${pids[@]}"; strays; } | grep . | sort -u)
  [ "${#pids[@]}" -gt 0 ] || return 0
  # FerretDB first: it holds connections to PostgreSQL. PostgreSQL gets SIGINT
  # (fast shutdown: SIGTERM would wait for clients to disconnect), the rest SIGTERM.
  pid=$(component_pid ferretdb) && { kill -TERM "$pid" 2>/dev/null || true; await_gone 30 "$pid" || true; }
  for pid in "${pids[@]}"; do
    if [ "$pid" = "$pg" ]; then kill -INT "$pid" 2>/dev/null || true; else kill -TERM "$pid" 2>/dev/null || true; fi
  done
  if ! await_gone 100 "${pids[@]}"; then
    local left=()
    for pid in "${pids[@]}" $(strays); do is_running "$pid" && left+=("$pid"); done
    log "still running 10 s after SIGTERM, sending SIGKILL: ${left[*]}"
    kill -KILL "${left[@]}" 2>/dev/null || true
    await_gone 30 "${left[@]}" || die "could not stop processes: ${left[*]}"
  fi
  await_reaped "${pids[@]}"
}

# Exited servers stay zombies until init reaps them, which in some VMs takes
# a couple of seconds; waiting for that (best effort) means that after `down`
# no process of ours shows in ps at all.
await_reaped() {
  local i pid gone
  for ((i = 0; i < 50; i++)); do
    gone=1
    for pid in "$@"; do [ -e "/proc/$pid" ] && gone=0; done
    [ "$gone" = 1 ] && return 0
    sleep 0.1
  done
}

remove_state() {
  [ -e "$state" ] || return 0
  if [ ! -e "$state/bosun-backends" ] && [ -n "$(ls -A "$state")" ]; then
    die "$state exists but is not a backends directory (no bosun-backends marker); not removing it"
  fi
  rm -rf "$state"
}

lock() {
  local dir=${XDG_RUNTIME_DIR:-/tmp} key
  [ -d "$dir" ] && [ -w "$dir" ] || dir=/tmp
  key=$(printf '%s' "$state" | sha256sum | cut -c1-16)
  exec 9>>"$dir/bosun-backends-$key.lock"
  flock 9
}

# Free ports below the ephemeral range (see cluster.sh for why).
free_ports() {
  python3 -c '
import random, socket, sys
n = int(sys.argv[1])
try:
    lo = int(open("/proc/sys/net/ipv4/ip_local_port_range").read().split()[0])
except (OSError, ValueError):
    lo = 32768
socks = []
if lo - 1 > 10000 + 100 * n:
    for port in random.sample(range(10000, lo), min(2000, lo - 10000)):
        s = socket.socket()
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            s.close()
            continue
        socks.append(s)
        if len(socks) == n:
            break
while len(socks) < n:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    socks.append(s)
print(" ".join(str(s.getsockname()[1]) for s in socks))
' "$1"
}

secret() { python3 -c 'import secrets; print(secrets.token_hex(int(__import__("sys").argv[1])))' "$1"; }

# PostgreSQL refuses to run as root, and MariaDB should not: as root, they run
# as the system users their Debian packages create; as anyone else, as that user.
# setpriv execs, so the pid stays the server's.
pg_user=postgres  # the superuser's name
if [ "$(id -u)" = 0 ]; then
  run_as_postgres=(setpriv --reuid=postgres --regid=postgres --init-groups --)
  mysql_user=mysql
else
  run_as_postgres=()
  mysql_user=$(id -un)
fi
as_user() {  # user command...
  local u=$1
  shift
  if [ "$(id -u)" = 0 ]; then
    setpriv --reuid="$u" --regid="$u" --init-groups -- "$@"
  else
    "$@"
  fi
}
owner() { [ "$(id -u)" = 0 ] && chown -R "$1:$1" "${@:2}" || true; }

# Starts one component detached from this script's session, with no inherited
# descriptors; returns once the pid is the component's executable (or gone).
start() {  # component command...
  local c=$1 pid deadline
  shift
  (cd "$state" && exec setsid "$@" </dev/null >>"$state/logs/$c.log" 2>&1 9<&-) &
  pid=$!
  echo "$pid" >"$(pidfile "$c")"
  disown "$pid"
  deadline=$(( $(now) + 10000000 ))
  until component_pid "$c" >/dev/null; do
    is_running "$pid" || break
    [ "$(now)" -lt "$deadline" ] || die "$c (pid $pid) has not started 10 s after launch; '$0 down' cleans up"
    sleep 0.02
  done
}

# --- builds -----------------------------------------------------------------

# Builds (or finds in the cache) every server, in parallel: downloads and npm
# overlap with compiling. Sets bin_<name> for each; a failed MongoDB build only
# means no MongoDB (mongo_reason says why), any other failure is fatal.
mongo_reason=''
build_all() {
  local b pids=() dir rc
  dir=$(mktemp -d "${TMPDIR:-/tmp}/bosun-backends-build.XXXXXX")
  for b in "${builds[@]}"; do
    "$here/backends/build.sh" "$b" >"$dir/$b.out" 2>"$dir/$b.err" &
    pids+=($!)
  done
  local i
  for i in "${!builds[@]}"; do
    b=${builds[$i]}
    rc=0
    wait "${pids[$i]}" || rc=$?
    if [ "$rc" != 0 ]; then
      case $b in
        ferretdb | mongo-tools)
          mongo_reason="building $b failed: $(tail -n 3 "$dir/$b.err" | tr '\n' ' ')"
          log "$mongo_reason"
          continue
          ;;
        *) cat "$dir/$b.err" >&2; die "building $b failed" ;;
      esac
    fi
    grep -v -e '^$' -e '^go: downloading ' "$dir/$b.err" >&2 || true
    printf -v "bin_${b//-/_}" '%s' "$(cat "$dir/$b.out")"
  done
  rm -rf "$dir"
}

# --- setup and start ------------------------------------------------------------

start_backends() {
  mkdir -p "$state"
  touch "$state/bosun-backends"
  chmod 755 "$state"
  mkdir -p "$state/logs" "$state/pids"
  if [ "$(id -u)" = 0 ] && ! setpriv --reuid=postgres --regid=postgres --init-groups -- test -x "$state"; then
    die "the postgres user cannot reach $state (a parent directory is not world-searchable); set BOSUN_BACKENDS_DIR elsewhere"
  fi
  # Unix socket paths are limited to 107 bytes.
  if [ "${#state}" -gt 70 ]; then
    die "$state is too long a path for the servers' unix sockets (at most 70 characters); set BOSUN_BACKENDS_DIR to a shorter one"
  fi
  if [ -n "$mongo_reason" ]; then
    echo "$mongo_reason" >"$state/mongo-missing"
  fi
  set_components
  # shellcheck disable=SC2154 # bin_* are set with printf -v above
  printf '%s\n' "$bin_minio" "$bin_fake_gcs_server" "$bin_azurite" "${bin_ferretdb:-}" "${bin_mongo_tools:-}" >"$state/bin-dirs"

  read -r PG_PORT MYSQL_PORT MINIO_PORT GCS_PORT AZURITE_PORT MONGO_PORT FERRETDB_DEBUG_PORT <<<"$(free_ports 7)"
  cat >"$state/ports.env" <<EOF
PG_PORT=$PG_PORT
MYSQL_PORT=$MYSQL_PORT
MINIO_PORT=$MINIO_PORT
GCS_PORT=$GCS_PORT
AZURITE_PORT=$AZURITE_PORT
MONGO_PORT=$MONGO_PORT
FERRETDB_DEBUG_PORT=$FERRETDB_DEBUG_PORT
EOF
  pg_password=$(secret 16) mysql_password=$(secret 16) mongo_password=$(secret 16)
  s3_access_key=$(secret 10) s3_secret_key=$(secret 20)
  s3_bucket=bosun-test gcs_bucket=bosun-test azure_container=bosun-test

  # MinIO makes a bucket of each top-level directory of a fresh drive.
  mkdir -p "$state/minio/data/$s3_bucket"
  start minio env MINIO_ROOT_USER="$s3_access_key" MINIO_ROOT_PASSWORD="$s3_secret_key" \
    MINIO_SITE_REGION=us-east-1 MINIO_BROWSER=off MINIO_UPDATE=off MINIO_CALLHOME_ENABLE=off \
    "$bin_minio/minio" server --quiet --address "127.0.0.1:$MINIO_PORT" "$state/minio/data"
  # env(1) execs: the pid is minio's.

  # fake-gcs-server makes a bucket of each directory under -data at start.
  mkdir -p "$state/gcs/seed/$gcs_bucket" "$state/gcs/storage"
  start fake-gcs-server "$bin_fake_gcs_server/fake-gcs-server" -scheme http -host 127.0.0.1 -port "$GCS_PORT" \
    -public-host "127.0.0.1:$GCS_PORT" -external-url "http://127.0.0.1:$GCS_PORT" \
    -backend filesystem -filesystem-root "$state/gcs/storage" -data "$state/gcs/seed" \
    -location US -log-level warn

  mkdir -p "$state/azurite"
  start azurite node "$(realpath "$bin_azurite/azurite-blob")" --blobHost 127.0.0.1 --blobPort "$AZURITE_PORT" \
    --location "$state/azurite" --skipApiVersionCheck --loose --disableTelemetry --silent

  # The databases' set-up steps (a few seconds each) run concurrently, and
  # while the storage servers above start.
  local pids=() p
  setup_postgres & pids+=($!)
  setup_mariadb & pids+=($!)
  for p in "${pids[@]}"; do wait "$p" || die "setting up the databases failed (logs in $state/logs)"; done

  start postgres "${run_as_postgres[@]}" "$pg_bin/postgres" -D "$state/postgres/data" -c config_file="$state/postgres/postgresql.conf"
  start mariadb /usr/sbin/mariadbd --no-defaults --user="$mysql_user" \
    --datadir="$state/mariadb/data" --socket="$state/mariadb/run/mysqld.sock" \
    --pid-file="$state/mariadb/run/mysqld.pid" --tmpdir="$state/mariadb/tmp" \
    --bind-address=127.0.0.1 --port="$MYSQL_PORT" --skip-name-resolve \
    --init-file="$state/mariadb/init.sql" \
    --character-set-server=utf8mb4 --collation-server=utf8mb4_unicode_ci \
    --skip-log-bin --innodb-flush-log-at-trx-commit=0 --innodb-doublewrite=0 \
    --innodb-buffer-pool-size=128M --log-warnings=1

  write_env
}

setup_postgres() {
  local d=$state/postgres
  mkdir -p "$d/data" "$d/run"
  umask 077
  printf '%s\n' "$pg_password" >"$d/pwfile"
  umask 022
  owner postgres "$d"
  as_user postgres "$pg_bin/initdb" -D "$d/data" -U "$pg_user" --pwfile="$d/pwfile" \
    --auth-local=scram-sha-256 --auth-host=scram-sha-256 --encoding=UTF8 --locale=C.UTF-8 \
    --no-sync >"$state/logs/postgres-initdb.log" 2>&1 || {
    tail -n 20 "$state/logs/postgres-initdb.log" >&2
    return 1
  }
  rm -f "$d/pwfile"
  # No trust anywhere: every connection, socket or TCP, needs the password.
  cat >"$d/pg_hba.conf" <<EOF
local all         all                scram-sha-256
host  all         all  127.0.0.1/32  scram-sha-256
host  replication all  127.0.0.1/32  scram-sha-256
EOF
  # Durability settings off: the data is disposable and fsync dominates.
  cat >"$d/postgresql.conf" <<EOF
data_directory = '$d/data'
hba_file = '$d/pg_hba.conf'
ident_file = '$d/data/pg_ident.conf'
listen_addresses = '127.0.0.1'
port = $PG_PORT
unix_socket_directories = '$d/run'
password_encryption = 'scram-sha-256'
max_connections = 100
fsync = off
synchronous_commit = off
full_page_writes = off
wal_level = replica
logging_collector = off
log_min_messages = warning
log_connections = off
log_timezone = 'UTC'
timezone = 'UTC'
datestyle = 'iso, mdy'
lc_messages = 'C.UTF-8'
dynamic_shared_memory_type = posix
EOF
  owner postgres "$d"
}

setup_mariadb() {
  local d=$state/mariadb
  mkdir -p "$d/data" "$d/run" "$d/tmp"
  owner mysql "$d"
  # root@localhost (the socket) keeps unix_socket authentication for the
  # machine's root; TCP clients are root@127.0.0.1 (no name resolution), which
  # the init file creates with the password on every start.
  # Its own tmpdir: a bootstrap clears #sql* files from its tmpdir, so two state
  # directories set up at once in a shared /tmp break each other's install.
  /usr/bin/mariadb-install-db --no-defaults --user="$mysql_user" --datadir="$d/data" --tmpdir="$d/tmp" \
    --auth-root-authentication-method=socket --skip-test-db --skip-name-resolve \
    >"$state/logs/mariadb-install-db.log" 2>&1 || {
    tail -n 20 "$state/logs/mariadb-install-db.log" >&2
    return 1
  }
  umask 077
  cat >"$d/init.sql" <<EOF
CREATE USER IF NOT EXISTS 'root'@'127.0.0.1' IDENTIFIED BY '$mysql_password';
ALTER USER 'root'@'127.0.0.1' IDENTIFIED BY '$mysql_password';
GRANT ALL PRIVILEGES ON *.* TO 'root'@'127.0.0.1' WITH GRANT OPTION;
EOF
  umask 022
  owner mysql "$d"
}

# FerretDB keeps its data in a database of its own in the PostgreSQL above,
# connecting as the PostgreSQL superuser. Clients authenticate with SCRAM as
# MongoDB's do (FerretDB's "new authentication", v1's experimental flag):
# user root in admin, created at first start, with a password of its own.
start_ferretdb() {
  [ ! -e "$state/mongo-missing" ] || return 0
  "$pg_bin/psql" -X -q -h 127.0.0.1 -p "$PG_PORT" -U "$pg_user" -d postgres \
    -c 'CREATE DATABASE ferretdb' >/dev/null
  mkdir -p "$state/ferretdb"
  # Secrets through the environment rather than the command line (ps).
  start ferretdb env \
    FERRETDB_POSTGRESQL_URL="postgres://$pg_user:$PGPASSWORD@127.0.0.1:$PG_PORT/ferretdb" \
    FERRETDB_SETUP_PASSWORD="$MONGODB_PASSWORD" \
    "$bin_ferretdb/ferretdb" --handler=postgresql \
    --listen-addr="127.0.0.1:$MONGO_PORT" --debug-addr="127.0.0.1:$FERRETDB_DEBUG_PORT" \
    --state-dir="$state/ferretdb" --telemetry=disable --log-level=warn \
    --test-enable-new-auth --setup-database=admin --setup-username="$MONGODB_USER"
}

# The export lines `env` prints. Besides the variables the tests read, the
# ones the clients themselves read: libpq (PG*), the mariadb client
# (MYSQL_HOST, MYSQL_TCP_PORT, MYSQL_PWD), AWS SDKs (AWS_ENDPOINT_URL), Google
# client libraries (STORAGE_EMULATOR_HOST), and object_store's from_env
# builders: AWS_ENDPOINT/AWS_ALLOW_HTTP, and AWS_BUCKET, GOOGLE_BUCKET and
# AZURE_CONTAINER_NAME; AZURE_STORAGE_USE_EMULATOR with
# AZURITE_BLOB_STORAGE_URL (emulator mode) or AZURE_ENDPOINT/AZURE_ALLOW_HTTP;
# GOOGLE_SERVICE_ACCOUNT, a key file pointing the GCS client at the emulator
# without OAuth (the form object_store's own emulator tests use).
write_env() {
  local azure_key=Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==
  local azure_account=devstoreaccount1
  printf '{"gcs_base_url": "http://127.0.0.1:%s", "disable_oauth": true, "client_email": "", "private_key": "", "private_key_id": ""}\n' \
    "$GCS_PORT" >"$state/gcs/service-account.json"
  local mask
  mask=$(umask)
  umask 077
  {
    echo "# hack/backends.sh: servers in $state"
    kv BOSUN_BACKENDS_DIR "$state"
    kv PGHOST 127.0.0.1
    kv PGPORT "$PG_PORT"
    kv PGUSER "$pg_user"
    kv PGPASSWORD "$pg_password"
    kv PGDATABASE postgres
    kv MYSQL_HOST 127.0.0.1
    kv MYSQL_PORT "$MYSQL_PORT"
    kv MYSQL_TCP_PORT "$MYSQL_PORT"
    kv MYSQL_USER root
    kv MYSQL_PWD "$mysql_password"
    kv S3_ENDPOINT "http://127.0.0.1:$MINIO_PORT"
    kv S3_BUCKET "$s3_bucket"
    kv AWS_BUCKET "$s3_bucket"
    kv AWS_ACCESS_KEY_ID "$s3_access_key"
    kv AWS_SECRET_ACCESS_KEY "$s3_secret_key"
    kv AWS_REGION us-east-1
    kv AWS_DEFAULT_REGION us-east-1
    kv AWS_ENDPOINT_URL "http://127.0.0.1:$MINIO_PORT"
    kv AWS_ENDPOINT "http://127.0.0.1:$MINIO_PORT"
    kv AWS_ALLOW_HTTP true
    kv GCS_ENDPOINT "http://127.0.0.1:$GCS_PORT"
    kv GCS_BUCKET "$gcs_bucket"
    kv GOOGLE_BUCKET "$gcs_bucket"
    kv STORAGE_EMULATOR_HOST "http://127.0.0.1:$GCS_PORT"
    kv GOOGLE_SERVICE_ACCOUNT "$state/gcs/service-account.json"
    kv AZURE_ENDPOINT "http://127.0.0.1:$AZURITE_PORT/$azure_account"
    kv AZURE_CONTAINER "$azure_container"
    kv AZURE_CONTAINER_NAME "$azure_container"
    kv AZURE_STORAGE_ACCOUNT_NAME "$azure_account"
    kv AZURE_STORAGE_ACCOUNT_KEY "$azure_key"
    kv AZURE_STORAGE_USE_EMULATOR true
    kv AZURITE_BLOB_STORAGE_URL "http://127.0.0.1:$AZURITE_PORT"
    kv AZURE_ALLOW_HTTP true
    kv AZURE_STORAGE_CONNECTION_STRING "DefaultEndpointsProtocol=http;AccountName=$azure_account;AccountKey=$azure_key;BlobEndpoint=http://127.0.0.1:$AZURITE_PORT/$azure_account;"
    if [ -z "$(cat "$state/mongo-missing" 2>/dev/null)" ]; then
      kv MONGODB_URI "mongodb://root:$mongo_password@127.0.0.1:$MONGO_PORT/?authSource=admin"
      kv MONGODB_HOST 127.0.0.1
      kv MONGODB_PORT "$MONGO_PORT"
      kv MONGODB_USER root
      kv MONGODB_PASSWORD "$mongo_password"
      kv MONGODB_TOOLS_DIR "$bin_mongo_tools"
      # mongodump and mongorestore on PATH, once however often this is eval'd.
      printf 'case ":$PATH:" in *:%q:*) ;; *) export PATH=%q:"$PATH" ;; esac\n' "$bin_mongo_tools" "$bin_mongo_tools"
    else
      echo "# no MongoDB: $(cat "$state/mongo-missing")"
    fi
  } >"$state/env.tmp"
  umask "$mask"
  mv "$state/env.tmp" "$state/env"
}
kv() { printf 'export %s=%q\n' "$1" "$2"; }

# --- health ------------------------------------------------------------------

load() {
  [ -f "$state/ports.env" ] && [ -f "$state/env" ] || return 1
  # shellcheck source=/dev/null
  . "$state/ports.env"
  # shellcheck source=/dev/null
  . "$state/env"
}

failed='' culprit=''
check() {
  failed='' culprit=''
  if ! "$pg_bin/psql" -X -qAt -h 127.0.0.1 -p "$PG_PORT" -c 'SELECT 1' >/dev/null 2>&1; then
    failed="postgres to accept the superuser's password" culprit=postgres; return 1
  fi
  if ! mariadb --no-defaults --connect-timeout=3 -h 127.0.0.1 -P "$MYSQL_PORT" -u root -e 'SELECT 1' >/dev/null 2>&1; then
    failed="mariadb to accept root@127.0.0.1's password" culprit=mariadb; return 1
  fi
  if ! curl -sf --max-time 3 "http://127.0.0.1:$MINIO_PORT/minio/health/ready" >/dev/null; then
    failed="minio /minio/health/ready" culprit=minio; return 1
  fi
  if ! curl -sf --max-time 3 "http://127.0.0.1:$GCS_PORT/storage/v1/b/$GCS_BUCKET" >/dev/null; then
    failed="fake-gcs-server bucket $GCS_BUCKET" culprit=fake-gcs-server; return 1
  fi
  if [ "$(curl -s -o /dev/null -w '%{http_code}' --max-time 3 "http://127.0.0.1:$AZURITE_PORT/devstoreaccount1?comp=list" || true)" = 000 ]; then
    failed="azurite to answer" culprit=azurite; return 1
  fi
  if [ ! -e "$state/mongo-missing" ] && component_pid postgres >/dev/null && ! component_pid ferretdb >/dev/null &&
    [ ! -e "$state/pids/ferretdb.pid" ]; then
    start_ferretdb   # needs PostgreSQL up
  fi
  if [ ! -e "$state/mongo-missing" ] &&
    ! curl -sf --max-time 3 "http://127.0.0.1:$FERRETDB_DEBUG_PORT/debug/readyz" >/dev/null; then
    failed="ferretdb /debug/readyz" culprit=ferretdb; return 1
  fi
}

# The bucket and container, made once all servers answer (MinIO's comes from
# its data directory; checked here through the S3 API all the same).
make_buckets() {
  python3 "$here/backends/objstore.py" s3-mkbucket || return 1
  python3 "$here/backends/objstore.py" azure-mkcontainer || return 1
}

exited=''
wait_healthy() {  # start-time
  local start=$1 deadline c last=''
  exited=''
  deadline=$(( $(now) + timeout * 1000000 ))
  while :; do
    set_components
    for c in "${components[@]}"; do
      [ "$c" = ferretdb ] && [ ! -e "$state/pids/ferretdb.pid" ] && continue
      if ! component_pid "$c" >/dev/null; then
        log "$c exited; last lines of $state/logs/$c.log:"
        tail -n 30 "$state/logs/$c.log" >&2 || true
        exited=$c
        return 2
      fi
    done
    check && break
    if [ "$failed" != "$last" ]; then
      log "$(elapsed "$start")s: waiting for $failed"
      last=$failed
    fi
    if [ "$(now)" -gt "$deadline" ]; then
      log "not healthy after ${timeout}s: waiting for $failed; last lines of $state/logs/$culprit.log:"
      tail -n 30 "$state/logs/$culprit.log" >&2 || true
      die "servers left running for inspection; '$0 down' stops them"
    fi
    sleep 0.2
  done
}

# --- subcommands ----------------------------------------------------------------

cmd_up() {
  local start n rc
  start=$(now)
  lock
  build_all
  n=$(alive_count)
  if [ "$n" -eq "${#components[@]}" ] && load && check 2>/dev/null; then
    if [ "$(cat "$state/bin-dirs")" != "$(printf '%s\n' "$bin_minio" "$bin_fake_gcs_server" "$bin_azurite" "${bin_ferretdb:-}" "${bin_mongo_tools:-}")" ]; then
      log "warning: the running servers were built from other pins; run down and up to switch"
    fi
    log "already running and healthy ($state; 'eval \"\$($0 env)\"')"
    return 0
  fi
  if [ "$n" -gt 0 ]; then
    log "found $n of ${#components[@]} servers alive or unhealthy; restarting them"
  elif [ -e "$state" ]; then
    log "removing stale state in $state (no server running)"
  fi
  stop_all
  remove_state
  log "starting servers in $state"
  local attempt
  for attempt in 1 2; do
    start_backends
    load
    rc=0
    wait_healthy "$start" || rc=$?
    if [ "$rc" = 2 ] && [ "$attempt" = 1 ] && grep -qi 'address already in use\|EADDRINUSE\|Do you already have another server running' "$state/logs/$exited.log" 2>/dev/null; then
      log "port conflict; restarting with other ports"
      stop_all
      remove_state
      continue
    fi
    break
  done
  [ "$rc" = 0 ] || die "servers failed to start ('$0 down' cleans up)"
  make_buckets || die "creating the bucket and container failed"
  log "healthy after $(elapsed "$start")s: postgres :$PG_PORT, mariadb :$MYSQL_PORT, minio :$MINIO_PORT, fake-gcs-server :$GCS_PORT, azurite :$AZURITE_PORT$(
    [ -e "$state/mongo-missing" ] && echo ", no MongoDB ($(cat "$state/mongo-missing"))" || echo ", ferretdb :$MONGO_PORT")"
  log "use: eval \"\$($0 env)\""
}

cmd_down() {
  lock
  if [ ! -e "$state" ]; then
    log "no backends in $state"
    return 0
  fi
  stop_all
  local left
  left=$(strays)
  [ -z "$left" ] || die "processes still running: $left"
  remove_state
  log "stopped; removed $state"
}

require_running() {
  [ "$(alive_count)" -eq "${#components[@]}" ] && load || die "backends are not running; start them with '$0 up'"
}

cmd_env() {
  require_running
  cat "$state/env"
}

cmd_status() {
  local c pid ok=0 port
  echo "state directory: $state"
  load 2>/dev/null || true
  for c in "${all_components[@]}"; do
    case $c in
      postgres) port=${PG_PORT:-?} ;;
      mariadb) port=${MYSQL_PORT:-?} ;;
      minio) port=${MINIO_PORT:-?} ;;
      fake-gcs-server) port=${GCS_PORT:-?} ;;
      azurite) port=${AZURITE_PORT:-?} ;;
      ferretdb) port="${MONGO_PORT:-?} (debug ${FERRETDB_DEBUG_PORT:-?})" ;;
    esac
    if [ "$c" = ferretdb ] && [ -e "$state/mongo-missing" ]; then
      printf '%-16s missing  %s\n' "$c" "$(cat "$state/mongo-missing")"
    elif pid=$(component_pid "$c"); then
      printf '%-16s running  pid %-8s port %s\n' "$c" "$pid" "$port"
    else
      printf '%-16s stopped\n' "$c"
      ok=1
    fi
  done
  if [ "$ok" = 0 ]; then
    if check; then echo "healthy"; else echo "unhealthy: waiting for $failed"; ok=1; fi
  fi
  return "$ok"
}

# Proves what the tests rely on, with the real clients: the right password
# works and a wrong one fails (PostgreSQL, MariaDB, MongoDB), each storage
# server takes a multipart upload and lists it, mongodump/mongorestore work.
fails=0
pass() { echo "ok    $*"; }
fail() { echo "FAIL  $*"; fails=$((fails + 1)); }
cmd_check() {
  require_running
  local out t obj=$here/backends/objstore.py
  if "$pg_bin/psql" -X -qAt -c 'SELECT 1' >/dev/null 2>&1; then pass "postgres: $PGUSER with the password"; else fail "postgres: $PGUSER with the password"; fi
  if PGPASSWORD=wrong "$pg_bin/psql" -X -qAt -c 'SELECT 1' >/dev/null 2>&1; then fail "postgres: a wrong password was accepted"; else pass "postgres: a wrong password is refused"; fi
  if mariadb --no-defaults -e 'SELECT 1' >/dev/null 2>&1; then pass "mariadb: $MYSQL_USER with the password"; else fail "mariadb: $MYSQL_USER with the password"; fi
  if MYSQL_PWD=wrong mariadb --no-defaults -e 'SELECT 1' >/dev/null 2>&1; then fail "mariadb: a wrong password was accepted"; else pass "mariadb: a wrong password is refused"; fi
  for t in s3 gcs azure; do
    if out=$(python3 "$obj" "check-$t" 2>&1) && [[ $out != *FAILS* ]]; then pass "$out"; else fail "$out"; fi
  done
  if [ -e "$state/mongo-missing" ]; then
    echo "skip  mongodb: $(cat "$state/mongo-missing")"
  elif out=$(check_mongo 2>&1); then
    pass "mongodb: $out"
  else
    fail "mongodb: $out"
  fi
  [ "$fails" = 0 ] || die "$fails check(s) failed"
  log "all checks passed"
}

# Documents written with mongoimport, dumped, restored under another database
# name and exported again must match; a wrong password must be refused.
check_mongo() {
  local d rc=0
  d=$(mktemp -d)
  printf '%s\n' '{"_id": 1, "s": "a", "n": 1.5, "a": [1, 2], "o": {"k": "v"}}' \
    '{"_id": 2, "s": "b", "t": {"$date": "2024-01-02T03:04:05Z"}}' >"$d/in.json"
  {
    mongoimport --uri="$MONGODB_URI" --quiet --drop --db=bosuncheck --collection=docs --file="$d/in.json" &&
      mongodump --uri="$MONGODB_URI" --quiet --db=bosuncheck --archive="$d/dump.archive" --gzip &&
      mongorestore --uri="$MONGODB_URI" --quiet --drop --gzip --archive="$d/dump.archive" \
        --nsFrom='bosuncheck.*' --nsTo='bosuncheck_restored.*' &&
      mongoexport --uri="$MONGODB_URI" --quiet --db=bosuncheck_restored --collection=docs --sort='{"_id": 1}' --out="$d/out.json"
  } >"$d/log" 2>&1 || { cat "$d/log"; rm -rf "$d"; return 1; }
  if ! python3 -c 'import json, sys; a, b = ([json.loads(l) for l in open(f)] for f in sys.argv[1:]); sys.exit(a != b)' "$d/in.json" "$d/out.json"; then
    echo "restored documents differ: $(cat "$d/out.json")"; rc=1
  elif mongodump --uri="${MONGODB_URI/:$MONGODB_PASSWORD@/:wrong@}" --db=bosuncheck --archive=/dev/null >/dev/null 2>&1; then
    echo "a wrong password was accepted"; rc=1
  else
    echo "mongoimport, mongodump --archive --gzip, mongorestore (renamed), mongoexport round trip ok; a wrong password is refused"
  fi
  rm -rf "$d"
  return "$rc"
}

usage() {
  cat >&2 <<EOF
usage: $0 COMMAND
  up       build what is missing (cached), start the servers (no-op if healthy), wait for health
  down     stop every server and remove $state
  env      print export lines for the servers (eval "\$($0 env)")
  status   show servers, pids and ports (exit 1 unless all run and are healthy)
  check    prove passwords, uploads, listing and dumps work with the real clients
EOF
  exit "${1:-2}"
}

[ $# -eq 1 ] || usage
case $1 in
  up) cmd_up ;;
  down) cmd_down ;;
  env) cmd_env ;;
  status) cmd_status ;;
  check) cmd_check ;;
  -h | --help | help) usage 0 ;;
  *) usage ;;
esac
