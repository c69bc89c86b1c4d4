set -uo pipefail
# A major upgrade of one PostgreSQL data directory with pg_upgrade --link, in the
# pod of the upgrade Job bosun makes (crates/resources/src/upgrade.rs).
#   copy     in the old major's image (an init container): its server binaries,
#            their share directory and the shared libraries they load, into
#            $BOSUN_OLD (an emptyDir), laid out as under / so that the old server
#            finds its share and lib directories relative to its binary.
#   upgrade  in the new major's image: $PGDATA (major $BOSUN_FROM, stopped) to
#            $BOSUN_TO. Steps: Check (what the data is; a clean shutdown of the old
#            server, which also tells the encoding, locales and checksums),
#            Prepare (initdb of the new cluster beside it), Check again with
#            pg_upgrade --check, Upgrade (pg_upgrade --link), Switch (the new
#            directory takes $PGDATA's place, the old one is kept as
#            $PGDATA.v$BOSUN_FROM).
# Until Switch, $PGDATA is the old cluster, whole: pg_upgrade --link only renames
# its global/pg_control once it starts linking, and a failure puts that back. A
# failure ends the pod with "<step> failed: <why>" as its termination message,
# which bosun quotes in the PostgreSQL's status. Run again after a Switch, it
# finishes or finds the work done.
log() { echo "bosun-upgrade: $*" >&2; }
from=${BOSUN_FROM:?} to=${BOSUN_TO:?} old=${BOSUN_OLD:-/opt/bosun/old}

copy() {
  local m=$from soname path
  mkdir -p "$old/usr/lib/postgresql" "$old/usr/share/postgresql" "$old/lib" || return 1
  cp -a "/usr/lib/postgresql/$m" "$old/usr/lib/postgresql/" || return 1
  cp -a "/usr/share/postgresql/$m" "$old/usr/share/postgresql/" || return 1
  # The C library's own are left out: the new image's are newer, and compatible.
  find "$old/usr/lib/postgresql/$m" -type f \( -perm -u+x -o -name '*.so' \) -exec ldd {} + 2>/dev/null |
    awk '$2 == "=>" && $3 ~ /^\// { print $1, $3 }' | sort -u |
    while read -r soname path; do
      case $soname in libc.so.* | libm.so.* | libpthread.so.* | libdl.so.* | librt.so.* | ld-linux* | libresolv.so.*) continue ;; esac
      cp -L "$path" "$old/lib/$soname" || exit 1
    done
  log "PostgreSQL $m's binaries and $(find "$old/lib" -type f | wc -l) libraries copied to $old"
}

oldbin=$old/usr/lib/postgresql/$from/bin
newbin=/usr/lib/postgresql/$to/bin
new=$PGDATA.upgrade-$to
kept=$PGDATA.v$from
work=${PGDATA%/*}/upgrade-$to
sock=/tmp/bosun-upgrade
step=Check

fail() {
  log "$step failed: $*"
  printf '%s failed: %s\n' "$step" "$*" | head -c 3500 >"${BOSUN_TERMINATION_LOG:-/dev/termination-log}" 2>/dev/null
  stop_old
  # The old cluster as it was: pg_upgrade --link renames its control file when it
  # starts linking; nothing of the new cluster is used.
  if [ -e "$PGDATA/global/pg_control.old" ] && [ ! -e "$PGDATA/global/pg_control" ]; then
    mv "$PGDATA/global/pg_control.old" "$PGDATA/global/pg_control" && log "restored $PGDATA/global/pg_control"
  fi
  # (After the switch began, the new directory is the one to finish with.)
  [ "$step" = Switch ] || [ ! -e "$new" ] || rm -rf "$new"
  exit 1
}

old_server=
stop_old() {
  [ -n "$old_server" ] || return 0
  "$oldbin/pg_ctl" -D "$PGDATA" -w -t 300 stop -m fast >&2 || log "stopping the old server failed"
  old_server=
}

# The old server on a private socket, no TCP, no archiving.
start_old() {
  mkdir -p "$sock"
  "$oldbin/pg_ctl" -D "$PGDATA" -w -t 3600 -l "$work/old-server.log" \
    -o "-c listen_addresses='' -c unix_socket_directories=$sock -c port=50432 -c archive_mode=off" start >&2 ||
    fail "the old PostgreSQL $from server did not start: $(tail -n 5 "$work/old-server.log" 2>/dev/null | tr '\n' ' ')"
  old_server=1
}

old_sql() { "$oldbin/psql" -X -h "$sock" -p 50432 -U "$POSTGRES_USER" -d template1 -tAc "$1"; }

# Where pg_upgrade's message points to a file of details, the first lines of it.
details() {
  local out=$1 file
  printf '%s\n' "$out" | grep -v '^\s*$' | tail -n 12
  for file in $(printf '%s\n' "$out" | grep -o '/[^ ]*\.txt' | sort -u); do
    [ -r "$file" ] && head -n 5 "$file"
  done
}

switch() {
  step=Switch
  local dir
  # A former upgrade's old directory: its files were linked into the data
  # directory that has run since, so it is no longer a database of its own.
  for dir in "$PGDATA".v*; do
    [ -e "$dir" ] && [ "$dir" != "$kept" ] && rm -rf "$dir" && log "removed $dir, left by an earlier upgrade"
  done
  if [ -e "$PGDATA" ]; then
    [ ! -e "$kept" ] || fail "$kept exists already"
    mv "$PGDATA" "$kept" || fail "cannot move $PGDATA to $kept"
  fi
  mv "$new" "$PGDATA" || fail "cannot move $new to $PGDATA"
  rm -rf "$work"
  log "PostgreSQL $to's data directory is $PGDATA; the PostgreSQL $from one is kept as $kept (hard links: it costs its catalog only; it can no longer be started once the new server has run)"
}

upgrade() {
  local have out enc collate ctype checksums
  mkdir -p "$work" || fail "cannot create $work"
  cd "$work" || fail "cannot enter $work"
  have=$(cat "$PGDATA/PG_VERSION" 2>/dev/null)
  if [ "$have" = "$to" ]; then
    log "$PGDATA already holds PostgreSQL $to: nothing to do"
    return 0
  fi
  if [ -z "$have" ] && [ -e "$new/bosun-upgraded" ]; then
    switch
    return 0
  fi
  [ "$have" = "$from" ] || fail "$PGDATA holds PostgreSQL '${have:-nothing}', not $from"
  [ -x "$oldbin/postgres" ] || fail "PostgreSQL $from's binaries were not copied to $oldbin"
  # The old binaries load, from $old/lib, only what this image has no library of.
  local lib names
  names=$(/sbin/ldconfig -p | awk '{ print $1 }')
  for lib in "$old"/lib/*; do
    ! grep -qxF "${lib##*/}" <<<"$names" || rm -f "$lib"
  done
  export LD_LIBRARY_PATH=$old/lib
  [ ! -e "$PGDATA/standby.signal" ] || fail "$PGDATA is a standby's (standby.signal): bosun upgrades the primary's"
  # A clean shutdown (the instance may have been killed), and what initdb must repeat.
  start_old
  enc=$(old_sql "SELECT pg_encoding_to_char(encoding) FROM pg_database WHERE datname = 'template1'") || fail "cannot read the encoding"
  collate=$(old_sql "SELECT datcollate FROM pg_database WHERE datname = 'template1'") || fail "cannot read the collation"
  ctype=$(old_sql "SELECT datctype FROM pg_database WHERE datname = 'template1'") || fail "cannot read the ctype"
  checksums=$(old_sql "SHOW data_checksums") || fail "cannot read data_checksums"
  stop_old

  step=Prepare
  rm -rf "$new"
  local args=(-D "$new" --username="$POSTGRES_USER" --encoding="$enc" --lc-collate="$collate" --lc-ctype="$ctype"
    --auth-local=trust --auth-host=scram-sha-256)
  [ "$checksums" != on ] || args+=(--data-checksums)
  out=$("$newbin/initdb" "${args[@]}" --pwfile=<(printf '%s\n' "$POSTGRES_PASSWORD") 2>&1) ||
    fail "initdb of PostgreSQL $to: $(printf '%s\n' "$out" | tail -n 5)"

  step=Check
  local upgrade_args=(-b "$oldbin" -B "$newbin" -d "$PGDATA" -D "$new" -U "$POSTGRES_USER" -s "$sock" -p 50432 -P 50433)
  out=$("$newbin/pg_upgrade" --check "${upgrade_args[@]}" 2>&1) || fail "pg_upgrade --check: $(details "$out")"
  log "pg_upgrade --check passed"

  step=Upgrade
  out=$("$newbin/pg_upgrade" --link "${upgrade_args[@]}" 2>&1) || fail "pg_upgrade --link: $(details "$out")"
  printf '%s\n' "$out" | tail -n 8 >&2
  # The old cluster's access rules (replication, the superuser's) and identity map;
  # its settings are the server's command line, not its files.
  cp "$PGDATA/pg_hba.conf" "$PGDATA/pg_ident.conf" "$new/" || fail "cannot copy pg_hba.conf"
  touch "$new/bosun-analyze-pending" "$new/bosun-upgraded" || fail "cannot mark $new"
  switch
}

case ${1:-} in
copy) copy || { echo "Copy failed: copying PostgreSQL $from's binaries" >"${BOSUN_TERMINATION_LOG:-/dev/termination-log}"; exit 1; } ;;
upgrade) upgrade ;;
*) log "usage: copy | upgrade"; exit 2 ;;
esac
