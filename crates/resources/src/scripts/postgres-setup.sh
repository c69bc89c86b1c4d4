set -uo pipefail
out=${BOSUN_SETUP_LOG:-/proc/1/fd/2}
log() { echo "bosun-setup: $*" >>"$out" 2>/dev/null || echo "bosun-setup: $*" >&2; }
export PGHOST=${PGHOST:-/var/run/postgresql} PGPORT=${PGPORT:-5432}
# synchronous_commit=local: with synchronous standbys configured, the setup's own
# commits must not wait for a standby that cannot connect before the setup is done.
q() { PGOPTIONS='-c synchronous_commit=local' psql -X -q -v ON_ERROR_STOP=1 -U "$POSTGRES_USER" -d postgres "$@"; }
standby=
# pg_hba.conf lines: the replication role's (standbys clone and stream) and the
# superuser's (base backups, taken from a standby when one is ready). Every instance
# has its own file (a clone copies the primary's once), so each sees to its own.
hba() {
  local hba line changed=
  hba=$(q -tAc 'SHOW hba_file') || return 1
  for line in "host replication $REPLICATION_USER all md5" "host replication $POSTGRES_USER all md5"; do
    if ! grep -qxF "$line" "$hba"; then
      echo "$line" >>"$hba" || return 1
      changed=1
    fi
  done
  [ -z "$changed" ] || q -tAc 'SELECT pg_reload_conf()' >/dev/null
}
setup() {
  local recovery datadir
  pg_isready -q || return 1
  recovery=$(q -tAc 'SELECT pg_is_in_recovery()') || return 1
  if [ "$recovery" = t ]; then
    # A standby has its primary's roles: only its pg_hba.conf is its own. A server
    # recovering from an archive (recovery.signal) becomes the primary: wait for it.
    datadir=$(q -tAc 'SHOW data_directory') || return 1
    [ -e "$datadir/standby.signal" ] || return 1
    standby=1
    hba
    return
  fi
  q -v user="$POSTGRES_USER" -v password="$POSTGRES_PASSWORD" <<'SQL' || return 1
ALTER ROLE :"user" WITH PASSWORD :'password';
SQL
  [ -n "${REPLICATION_PASSWORD:-}" ] || return 0
  q -v ruser="$REPLICATION_USER" -v rpassword="$REPLICATION_PASSWORD" <<'SQL' || return 1
SELECT format('CREATE ROLE %I', :'ruser') WHERE NOT EXISTS (SELECT FROM pg_roles WHERE rolname = :'ruser') \gexec
ALTER ROLE :"ruser" WITH REPLICATION LOGIN PASSWORD :'rpassword';
SQL
  hba
}
deadline=$((SECONDS + ${BOSUN_SETUP_TIMEOUT:-600}))
until setup; do
  # A recovery takes as long as its WAL takes to replay.
  if [ "$SECONDS" -ge "$deadline" ] && [ ! -e "${PGDATA:-}/recovery.signal" ]; then
    log "the server did not accept the setup in time: passwords and replication role not updated"
    exit 0
  fi
  sleep 1
done
[ -n "$standby" ] || log "passwords and the replication role are set"
# After a major upgrade (pg_upgrade carries no planner statistics): analyze, the
# cheapest statistics first, then drop the marker the upgrade left.
if [ -z "$standby" ]; then
  datadir=$(q -tAc 'SHOW data_directory') || exit 0
  if [ -e "$datadir/bosun-analyze-pending" ]; then
    # The new major's image may have another C library, whose collations sort text
    # differently: the indexes built on the old one are rebuilt before the database
    # records the new version (PostgreSQL 15 and later record it; on older ones the
    # query fails and there is nothing to do).
    stale=$(q -tAc "SELECT datname FROM pg_database WHERE datcollversion IS DISTINCT FROM pg_database_collation_actual_version(oid)" 2>/dev/null)
    while IFS= read -r db; do
      [ -n "$db" ] || continue
      if [ "$(q -tAc "SELECT datallowconn FROM pg_database WHERE datname = '${db//\'/\'\'}'")" = t ]; then
        log "the collation version of database $db changed: rebuilding its indexes (reindexdb)"
        reindexdb -U "$POSTGRES_USER" -d "$db" >/dev/null 2>>"$out" || { log "reindexdb of $db failed; it runs again at the next start"; exit 0; }
      fi
      q -v d="$db" <<<'ALTER DATABASE :"d" REFRESH COLLATION VERSION' >/dev/null 2>>"$out"
    done <<<"$stale"
    log "analyzing every database after the major upgrade (vacuumdb --all --analyze-in-stages)"
    if PGOPTIONS='-c synchronous_commit=local' vacuumdb -U "$POSTGRES_USER" --all --analyze-in-stages >/dev/null 2>>"$out"; then
      rm -f "$datadir/bosun-analyze-pending"
      log "analyzed"
    else
      log "vacuumdb --analyze-in-stages failed; it runs again at the next start"
    fi
  fi
fi
