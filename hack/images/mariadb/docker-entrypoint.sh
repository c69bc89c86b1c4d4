#!/usr/bin/env bash
# Entrypoint of localhost/mariadb:10.11 (hack/images.sh): MariaDB 10.11 from
# Debian behind the documented interface of the official `mariadb` image, so
# that manifests written for mariadb:10.11 run unchanged. Written from that
# documentation, not copied. Every MARIADB_X below may also be spelt MYSQL_X,
# and given as a file with X_FILE:
#   MARIADB_ROOT_PASSWORD / MARIADB_ROOT_PASSWORD_HASH   root's password
#   MARIADB_ALLOW_EMPTY_ROOT_PASSWORD=1, MARIADB_RANDOM_ROOT_PASSWORD=1
#                           one of these three is required on first start
#   MARIADB_ROOT_HOST       host part of the network root account (%)
#   MARIADB_DATABASE        database created on first start
#   MARIADB_USER + MARIADB_PASSWORD (or MARIADB_PASSWORD_HASH)
#                           user created on first start, with all privileges
#                           on MARIADB_DATABASE
#   MARIADB_INITDB_SKIP_TZINFO=1  do not load the time zone tables
#   /docker-entrypoint-initdb.d/*.sh|*.sql|*.sql.gz|*.sql.xz|*.sql.zst
#                           run once, in name order, on first start
# and it creates the healthcheck@localhost account healthcheck.sh uses
# (credentials in $datadir/.my-healthcheck.cnf). Not implemented:
# MARIADB_AUTO_UPGRADE, MARIADB_MYSQL_LOCALHOST_USER, MARIADB_HEALTHCHECK_GRANTS,
# MARIADB_REPLICATION_* / MARIADB_MASTER_HOST.
# Started as root it fixes the ownership of the data directory and re-runs
# itself as mysql (uid 999) with setpriv. A data directory that already holds
# the system tables (mysql/) is used as it is.
set -Eeuo pipefail

log() { echo "docker-entrypoint.sh: $*" >&2; }
die() { log "error: $*"; exit 1; }

# mariadb_env NAME [DEFAULT]: MARIADB_NAME and MYSQL_NAME from MARIADB_NAME,
# MARIADB_NAME_FILE, MYSQL_NAME or MYSQL_NAME_FILE, the first one set.
mariadb_env() {
  local name=$1 def=${2:-} v val='' set=''
  for v in "MARIADB_$name" "MARIADB_${name}_FILE" "MYSQL_$name" "MYSQL_${name}_FILE"; do
    [ -n "${!v:-}" ] || continue
    if [ -n "$set" ]; then
      # Allowed only when they agree (e.g. both spellings set to the same).
      [ "${v%_FILE}" != "$v" ] && [ "$(<"${!v}")" = "$val" ] && continue
      [ "${v%_FILE}" = "$v" ] && [ "${!v}" = "$val" ] && continue
      die "$set and $v are both set, to different values"
    fi
    if [ "${v%_FILE}" != "$v" ]; then val=$(<"${!v}"); else val=${!v}; fi
    set=$v
  done
  [ -n "$set" ] || val=$def
  # Both spellings, for init scripts written against either.
  export "MARIADB_$name=$val" "MYSQL_$name=$val"
  unset "MARIADB_${name}_FILE" "MYSQL_${name}_FILE"
}

# The value of a server option as mariadbd would use it with these arguments.
server_option() {
  local opt=$1; shift
  "$@" --verbose --help 2>/dev/null | awk -v o="$opt" '$1 == o && NF == 2 { print $2; exit }'
}

sql_string() { # a quoted SQL string literal
  local s=${1//\\/\\\\}
  s=${s//\'/\\\'}
  printf "'%s'" "$s"
}

sql_ident() { # a quoted SQL identifier
  # shellcheck disable=SC2016 # backquotes, not a command substitution
  printf '`%s`' "${1//\`/\`\`}"
}

wants_help() {
  local a
  for a; do
    case $a in -'?'|--help|--print-defaults|-V|--version) return 0 ;; esac
  done
  return 1
}

setup_env() {
  mariadb_env ROOT_PASSWORD
  mariadb_env ROOT_PASSWORD_HASH
  mariadb_env ALLOW_EMPTY_ROOT_PASSWORD
  mariadb_env RANDOM_ROOT_PASSWORD
  mariadb_env ROOT_HOST %
  mariadb_env DATABASE
  mariadb_env USER
  mariadb_env PASSWORD
  mariadb_env PASSWORD_HASH
  mariadb_env INITDB_SKIP_TZINFO
  datadir=$(server_option datadir "$@")
  datadir=${datadir%/}
  socket=$(server_option socket "$@")
  port=$(server_option port "$@")
  : "${datadir:=/var/lib/mysql}" "${socket:=/run/mysqld/mysqld.sock}" "${port:=3306}"
}

create_dirs() {
  mkdir -p "$datadir" "$(dirname "$socket")" 2>/dev/null || :
  if [ "$(id -u)" = 0 ]; then
    find "$datadir" "$(dirname "$socket")" \! -user mysql -exec chown mysql: '{}' +
  fi
}

check_env() {
  if [ -z "$MARIADB_ROOT_PASSWORD" ] && [ -z "$MARIADB_ROOT_PASSWORD_HASH" ] &&
    [ -z "$MARIADB_ALLOW_EMPTY_ROOT_PASSWORD" ] && [ -z "$MARIADB_RANDOM_ROOT_PASSWORD" ]; then
    die "the database is uninitialized and no root password option is set: set one of MARIADB_ROOT_PASSWORD, MARIADB_ROOT_PASSWORD_HASH, MARIADB_ALLOW_EMPTY_ROOT_PASSWORD or MARIADB_RANDOM_ROOT_PASSWORD"
  fi
  if [ "$MARIADB_USER" = root ]; then
    die "MARIADB_USER=root: root is already created; use MARIADB_ROOT_PASSWORD for its password"
  fi
  if [ -n "$MARIADB_USER" ] && [ -z "$MARIADB_PASSWORD" ] && [ -z "$MARIADB_PASSWORD_HASH" ]; then
    die "MARIADB_USER is set but MARIADB_PASSWORD (or MARIADB_PASSWORD_HASH) is not"
  fi
}

client() { # the client, as root, on the temporary server's socket
  mariadb --defaults-extra-file="$passfile" --protocol=socket -uroot -hlocalhost \
    --socket="$socket" "$@"
}

temp_server_start() {
  "$@" --skip-networking --default-time-zone=SYSTEM --socket="$socket" --wsrep_on=OFF \
    --expire-logs-days=0 --skip-slave-start --loose-innodb_buffer_pool_load_at_startup=0 &
  server_pid=$!
  for _ in $(seq 60); do
    if client --database=mysql -e 'SELECT 1' >/dev/null 2>&1; then return 0; fi
    kill -0 "$server_pid" 2>/dev/null || die "the temporary server exited"
    sleep 1
  done
  die "the temporary server did not start within 60 s"
}

temp_server_stop() {
  kill "$server_pid"
  wait "$server_pid" || die "the temporary server did not shut down cleanly"
}

setup_db() {
  local root_pw=$MARIADB_ROOT_PASSWORD root_auth user_auth root_host health_pw
  if [ -n "$MARIADB_RANDOM_ROOT_PASSWORD" ] && [ -z "$root_pw" ] && [ -z "$MARIADB_ROOT_PASSWORD_HASH" ]; then
    root_pw=$(head -c 24 /dev/urandom | base64 | tr -d '\n/+=')
    echo "GENERATED ROOT PASSWORD: $root_pw"
  fi
  if [ -n "$MARIADB_ROOT_PASSWORD_HASH" ]; then
    root_auth="PASSWORD $(sql_string "$MARIADB_ROOT_PASSWORD_HASH")"
  else
    root_auth=$(sql_string "$root_pw")
  fi
  if [ -n "$MARIADB_PASSWORD_HASH" ]; then
    user_auth="PASSWORD $(sql_string "$MARIADB_PASSWORD_HASH")"
  else
    user_auth=$(sql_string "$MARIADB_PASSWORD")
  fi
  root_host=$(sql_string "$MARIADB_ROOT_HOST")
  health_pw=$(head -c 24 /dev/urandom | base64 | tr -d '\n/+=')
  {
    echo "SET @@SESSION.SQL_LOG_BIN=0;"
    echo "SET @@SESSION.SQL_MODE=REPLACE(@@SESSION.SQL_MODE, 'NO_BACKSLASH_ESCAPES', '');"
    if [ -z "$MARIADB_INITDB_SKIP_TZINFO" ]; then
      # Fills the mysql.time_zone* tables (CONVERT_TZ with named zones).
      mariadb-tzinfo-to-sql --skip-write-binlog /usr/share/zoneinfo 2>/dev/null
    fi
    # Only root@localhost and root@MARIADB_ROOT_HOST; no anonymous users, no
    # test database.
    echo "DROP USER IF EXISTS root@'127.0.0.1', root@'::1', ''@'localhost';"
    # shellcheck disable=SC2028 # the backslashes are for SQL
    echo "EXECUTE IMMEDIATE CONCAT('DROP USER IF EXISTS root@\\'', @@hostname, '\\', \\'\\'@\\'', @@hostname, '\\'');"
    echo "DROP DATABASE IF EXISTS test;"
    echo "ALTER USER 'root'@'localhost' IDENTIFIED BY $root_auth;"
    if [ "$MARIADB_ROOT_HOST" != localhost ]; then
      echo "CREATE USER IF NOT EXISTS 'root'@$root_host IDENTIFIED BY $root_auth;"
      echo "GRANT ALL ON *.* TO 'root'@$root_host WITH GRANT OPTION;"
      echo "GRANT PROXY ON ''@'%' TO 'root'@$root_host WITH GRANT OPTION;"
    fi
    # For healthcheck.sh: may connect, nothing else.
    local h
    for h in 127.0.0.1 ::1 localhost; do
      echo "CREATE USER IF NOT EXISTS healthcheck@'$h' IDENTIFIED BY $(sql_string "$health_pw");"
    done
    if [ -n "$MARIADB_DATABASE" ]; then
      echo "CREATE DATABASE IF NOT EXISTS $(sql_ident "$MARIADB_DATABASE");"
    fi
    if [ -n "$MARIADB_USER" ]; then
      echo "CREATE USER $(sql_string "$MARIADB_USER")@'%' IDENTIFIED BY $user_auth;"
      if [ -n "$MARIADB_DATABASE" ]; then
        # _ is a wildcard in database-level grants.
        echo "GRANT ALL ON $(sql_ident "${MARIADB_DATABASE//_/\\_}").* TO $(sql_string "$MARIADB_USER")@'%';"
      fi
    fi
  } | client --database=mysql --binary-mode
  (
    umask 077
    printf '[mariadb-client]\nport=%s\nsocket=%s\nuser=healthcheck\npassword=%s\n' \
      "$port" "$socket" "$health_pw" >"$datadir/.my-healthcheck.cnf"
  )
  # From here on the client needs root's new password. Only a hash of it may
  # be known (MARIADB_ROOT_PASSWORD_HASH): then init files cannot log in as
  # root through the client, as with the official image.
  printf '[client]\npassword="%s"\n' "$(printf '%s' "$root_pw" | sed 's/\\/\\\\/g; s/"/\\"/g')" >"$passfile"
}

run_init_files() {
  local f db=()
  [ -z "$MARIADB_DATABASE" ] || db=(--database="$MARIADB_DATABASE")
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
      *.sql) log "running $f"; client "${db[@]}" <"$f" ;;
      *.sql.gz) log "running $f"; gzip -dc "$f" | client "${db[@]}" ;;
      *.sql.xz) log "running $f"; xz -dc "$f" | client "${db[@]}" ;;
      *.sql.zst) log "running $f"; zstd -dc "$f" | client "${db[@]}" ;;
      *) log "ignoring $f" ;;
    esac
  done
}

main() {
  # `docker run mariadb --some-option`: options for the server.
  if [ "${1:0:1}" = - ]; then
    set -- mariadbd "$@"
  fi
  case $1 in mariadbd|mysqld) ;; *) exec "$@" ;; esac
  if wants_help "$@"; then exec "$@"; fi

  setup_env "$@"
  create_dirs
  if [ "$(id -u)" = 0 ]; then
    HOME=/var/lib/mysql exec setpriv --reuid=mysql --regid=mysql --init-groups \
      "${BASH_SOURCE[0]}" "$@"
  fi

  if [ ! -d "$datadir/mysql" ]; then
    check_env
    log "initializing database files in $datadir"
    # The same choices as the official image: root gets a normal password
    # account, no test database, no binary log while setting up.
    mariadb-install-db --datadir="$datadir" --rpm --auth-root-authentication-method=normal \
      --skip-test-db --default-time-zone=SYSTEM --enforce-storage-engine= --skip-log-bin \
      --expire-logs-days=0 --loose-innodb_buffer_pool_load_at_startup=0 \
      --loose-innodb_buffer_pool_dump_at_shutdown=0 "${@:2}" >/dev/null
    passfile=$(mktemp)
    trap 'rm -f "$passfile"' EXIT
    temp_server_start "$@"
    setup_db
    run_init_files
    temp_server_stop
    rm -f "$passfile"
    trap - EXIT
    log "MariaDB init process done; ready for start up"
  else
    log "MariaDB database directory appears to contain a database; skipping initialization"
  fi
  exec "$@"
}

main "$@"
