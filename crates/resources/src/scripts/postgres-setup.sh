set -uo pipefail
out=${BOSUN_SETUP_LOG:-/proc/1/fd/2}
log() { echo "bosun-setup: $*" >>"$out" 2>/dev/null || echo "bosun-setup: $*" >&2; }
export PGHOST=${PGHOST:-/var/run/postgresql} PGPORT=${PGPORT:-5432}
# synchronous_commit=local: with synchronous standbys configured, the setup's own
# commits must not wait for a standby that cannot connect before the setup is done.
q() { PGOPTIONS='-c synchronous_commit=local' psql -X -q -v ON_ERROR_STOP=1 -U "$POSTGRES_USER" -d postgres "$@"; }
standby=
setup() {
  local recovery
  pg_isready -q || return 1
  recovery=$(q -tAc 'SELECT pg_is_in_recovery()') || return 1
  if [ "$recovery" = t ]; then
    standby=1
    return 0
  fi
  q -v user="$POSTGRES_USER" -v password="$POSTGRES_PASSWORD" <<'SQL' || return 1
ALTER ROLE :"user" WITH PASSWORD :'password';
SQL
  [ -n "${REPLICATION_PASSWORD:-}" ] || return 0
  q -v ruser="$REPLICATION_USER" -v rpassword="$REPLICATION_PASSWORD" <<'SQL' || return 1
SELECT format('CREATE ROLE %I', :'ruser') WHERE NOT EXISTS (SELECT FROM pg_roles WHERE rolname = :'ruser') \gexec
ALTER ROLE :"ruser" WITH REPLICATION LOGIN PASSWORD :'rpassword';
SQL
  local hba line
  hba=$(q -tAc 'SHOW hba_file') || return 1
  line="host replication $REPLICATION_USER all md5"
  if ! grep -qxF "$line" "$hba"; then
    echo "$line" >>"$hba" || return 1
    q -tAc 'SELECT pg_reload_conf()' >/dev/null || return 1
  fi
}
deadline=$((SECONDS + ${BOSUN_SETUP_TIMEOUT:-600}))
until setup; do
  if [ "$SECONDS" -ge "$deadline" ]; then
    log "the server did not accept the setup in time: passwords and replication role not updated"
    exit 0
  fi
  sleep 1
done
# A standby has its primary's roles and pg_hba.conf: nothing to set.
[ -n "$standby" ] || log "passwords and the replication role are set"
