set -uo pipefail
log() { echo "bosun-instance: $*" >&2; }
role_file=${BOSUN_ROLE_FILE:-/etc/bosun/role}
pgpass=${BOSUN_PGPASS:-/tmp/bosun.pgpass}
pid=
stopping=
stop() {
  stopping=1
  [ -z "$pid" ] || kill -INT "$pid" 2>/dev/null
}
trap stop TERM INT

told_file=${BOSUN_ROLE_TOLD:-/tmp/bosun.role}

# The role: the label's file, or what bosun told this instance directly (over exec)
# while the file is still the generation it was when told: the kubelet may refresh
# the file seconds after a label change, and any refresh makes the label the word.
role() {
  local r='' told='' generation=''
  if [ -r "$told_file" ]; then
    read -r told generation <"$told_file"
    if [ -n "$generation" ] && [ "$generation" = "$(readlink "${role_file%/*}/..data" 2>/dev/null)" ]; then
      printf '%s' "$told"
      return
    fi
  fi
  [ -r "$role_file" ] && r=$(<"$role_file")
  printf '%s' "$r"
}

wait_for_role() {
  local r said=
  while :; do
    r=$(role)
    case $r in primary | replica) printf '%s' "$r" && return ;; esac
    [ -z "$stopping" ] || exit 0
    [ -n "$said" ] || log "waiting for bosun to give this instance its role (label database.example.com/role)"
    said=1
    sleep 0.2
  done
}

escape() { printf '%s' "$1" | sed 's/[\\:]/\\&/g'; }
(
  umask 077
  rm -f "$pgpass"
  {
    printf '*:*:*:%s:%s\n' "$(escape "$REPLICATION_USER")" "$(escape "${REPLICATION_PASSWORD:-}")"
    printf '*:*:*:%s:%s\n' "$(escape "$POSTGRES_USER")" "$(escape "$POSTGRES_PASSWORD")"
  } >"$pgpass"
)
# The server's settings (`-c name=value` of the command), for single-user mode.
settings=()
previous=
for arg in "$@"; do
  [ "$previous" != -c ] || settings+=(-c "$arg")
  previous=$arg
done
conn() { printf 'host=%s port=%s user=%s passfile=%s' "$PRIMARY_HOST" "$PRIMARY_PORT" "$1" "$pgpass"; }
primary_conninfo="$(conn "$REPLICATION_USER") application_name=${HOSTNAME:-standby}"

# The primary behind PRIMARY_HOST (the read-write Service): up, and out of recovery.
wait_source() {
  local said='' recovery
  while :; do
    recovery=$(psql -X -d "$(conn "$POSTGRES_USER") dbname=postgres connect_timeout=3" -tAc 'SELECT pg_is_in_recovery()' 2>/dev/null)
    [ "$recovery" = f ] && return
    [ -z "$stopping" ] || exit 0
    [ -n "$said" ] || log "waiting for the primary at $PRIMARY_HOST:$PRIMARY_PORT"
    said=1
    sleep 1
  done
}

clone() {
  if [ -e "$PGDATA" ] && ! rmdir "$PGDATA" 2>/dev/null; then
    log "$PGDATA is not empty but holds no cluster (no PG_VERSION): left as it is; empty or delete the claim to clone the primary again"
    exit 1
  fi
  if [ -z "${REPLICATION_PASSWORD:-}" ]; then
    log "REPLICATION_PASSWORD is empty: the credentials Secret has no replication-password key"
    exit 1
  fi
  wait_source
  local partial="$PGDATA.partial"
  rm -rf "$partial"
  log "cloning the primary $PRIMARY_HOST:$PRIMARY_PORT into $PGDATA"
  if ! pg_basebackup --no-password -d "$(conn "$REPLICATION_USER")" -D "$partial" -X stream -c fast; then
    log "pg_basebackup failed"
    exit 1
  fi
  touch "$partial/standby.signal"
  mv "$partial" "$PGDATA"
  log "cloned; starting as a hot standby"
}

# A former primary's data: rewound to the new primary's timeline, or, when that is
# impossible, kept aside whole and the primary cloned afresh.
rejoin() {
  wait_source
  log "this data directory was a primary's: rewinding it with pg_rewind to follow $PRIMARY_HOST"
  # pg_rewind needs a clean shutdown recorded with wal_log_hints on: recover first
  # (single-user mode), with the settings the server runs with (wal_keep_size: the
  # WAL since the last checkpoint before the divergence, which pg_rewind reads).
  if ! postgres --single -D "$PGDATA" "${settings[@]}" -c wal_log_hints=on postgres </dev/null >/dev/null; then
    log "crash recovery of the old data directory failed"
  fi
  # A just-promoted primary's control file names its new timeline only after a
  # checkpoint; without one pg_rewind would see "the same timeline".
  psql -X -q -d "$(conn "$POSTGRES_USER") dbname=postgres connect_timeout=5" -c CHECKPOINT ||
    log "CHECKPOINT on the primary failed: pg_rewind may not see its new timeline"
  if pg_rewind --target-pgdata="$PGDATA" --source-server="$(conn "$POSTGRES_USER") dbname=postgres"; then
    touch "$PGDATA/standby.signal"
    log "rewound; starting as a hot standby"
    return
  fi
  local aside
  aside="$PGDATA.diverged-$(date -u +%Y%m%dT%H%M%SZ)"
  log "pg_rewind could not rewind it: the data directory is kept whole as $aside (delete it when you no longer need it) and the primary is cloned afresh"
  mv "$PGDATA" "$aside" || exit 1
  clone
}

# A first start as the primary with no data, for a database made by recovery
# (spec.bootstrap.recovery): the data directory from the archive's base backup, set
# to recover to the target. What refuses it (a target out of range) is the
# container's termination message: bosun's status quotes it.
recover() {
  local out
  log "recovering $PGDATA from the archive of $BOSUN_RECOVERY_NAME at $BOSUN_RECOVERY_DESTINATION"
  if ! out=$(env -u BOSUN_BACKUP_DESTINATION -u BOSUN_BACKUP_ENDPOINT -u BOSUN_BACKUP_REGION -u BOSUN_BACKUP_NAME \
    "${BOSUN_RUNNER:-/opt/bosun/bin/bosun}" recover --pgdata "$PGDATA" --destination "$BOSUN_RECOVERY_DESTINATION" \
    ${BOSUN_RECOVERY_ENDPOINT:+--endpoint "$BOSUN_RECOVERY_ENDPOINT"} ${BOSUN_RECOVERY_REGION:+--region "$BOSUN_RECOVERY_REGION"} \
    --namespace "$BOSUN_RECOVERY_NAMESPACE" --name "$BOSUN_RECOVERY_NAME" 2>&1); then
    log "recovery failed: $out"
    printf '%s\n' "$out" | grep -v '^{' | tail -c 3000 >"${BOSUN_TERMINATION_LOG:-/dev/termination-log}" 2>/dev/null
    exit 1
  fi
  log "recovered: $out"
}

# The server's arguments of a recovering start: one -c per line of the settings file.
recovery_args=()
recovery_settings() {
  local line
  recovery_args=()
  [ -e "$PGDATA/recovery.signal" ] && [ -r "${BOSUN_RECOVERY_SETTINGS:-}" ] || return 0
  while IFS= read -r line; do
    [ -z "$line" ] || recovery_args+=(-c "$line")
  done <"$BOSUN_RECOVERY_SETTINGS"
}

# A standby's data of an older major than this server's: the primary was upgraded
# (pg_upgrade, crates/resources/src/upgrade.rs). Once the primary answers on this
# major, the old copy goes and the primary is cloned again; a standby's data is a
# copy of the primary's, which keeps its pre-upgrade directory itself.
reclone_after_upgrade() {
  local have primary_major
  have=$(<"$PGDATA/PG_VERSION")
  [ -n "${PG_MAJOR:-}" ] && [ "$have" != "$PG_MAJOR" ] || return 0
  wait_source
  primary_major=$(psql -X -d "$(conn "$POSTGRES_USER") dbname=postgres connect_timeout=5" -tAc \
    "SELECT current_setting('server_version_num')::int / 10000")
  if [ "$primary_major" != "$PG_MAJOR" ]; then
    log "this standby's data is PostgreSQL $have and the primary runs ${primary_major:-an unknown major}, not $PG_MAJOR: left as it is"
    exit 1
  fi
  log "the primary was upgraded from PostgreSQL $have to $PG_MAJOR: this standby's copy goes, the primary is cloned again"
  rm -rf "$PGDATA" || exit 1
}

prepare() {
  case $1 in
  primary)
    if [ ! -s "$PGDATA/PG_VERSION" ] && [ -n "${BOSUN_RECOVERY_DESTINATION:-}" ]; then
      recover
    fi
    if [ -e "$PGDATA/standby.signal" ]; then
      log "bosun made this instance the primary: starting it out of recovery"
      rm -f "$PGDATA/standby.signal"
    fi
    ;;
  replica)
    [ ! -s "$PGDATA/PG_VERSION" ] || reclone_after_upgrade
    if [ ! -s "$PGDATA/PG_VERSION" ]; then
      clone
    elif [ ! -e "$PGDATA/standby.signal" ]; then
      rejoin
    fi
    ;;
  esac
}

while :; do
  current=$(wait_for_role)
  prepare "$current"
  [ -z "$stopping" ] || exit 0
  recovery_settings
  "$@" -c "primary_conninfo=$primary_conninfo" "${recovery_args[@]}" &
  pid=$!
  # The primary's setup (passwords, the replication role) beside the server, never
  # blocking it: as a postStart hook its wait for the server held the kubelet's
  # handling of the whole pod, even a deletion, for up to ten minutes.
  if [ -n "${BOSUN_SETUP_SCRIPT:-}" ]; then bash -c "$BOSUN_SETUP_SCRIPT" & fi
  demoted='' promoting=''
  # The label is the one source of the role, and the instance follows what it says
  # now, not only its changes: a label that changed twice between two looks (or
  # while the kubelet was slow to update the file) still ends in the state it names.
  # bosun never promotes or demotes an instance any other way.
  while kill -0 "$pid" 2>/dev/null; do
    sleep 0.2
    case $(role) in
    replica)
      if [ -z "$demoted" ] && [ -s "$PGDATA/PG_VERSION" ] && [ ! -e "$PGDATA/standby.signal" ]; then
        demoted=1
        log "bosun made this instance a standby: stopping the primary (fast shutdown) to rejoin as a standby"
        kill -INT "$pid"
      fi
      ;;
    primary)
      if [ -e "$PGDATA/standby.signal" ]; then
        [ -n "$promoting" ] || log "bosun made this instance the primary: promoting it"
        promoting=1
        # Waits for the promotion to end; a server still starting refuses it: again.
        pg_ctl promote -D "$PGDATA" >&2 || sleep 0.5
      fi
      ;;
    esac
  done
  wait "$pid"
  status=$?
  pid=
  [ -z "$stopping" ] || exit 0
  [ -z "$demoted" ] || continue
  log "postgres exited with status $status"
  exit "$status"
done
