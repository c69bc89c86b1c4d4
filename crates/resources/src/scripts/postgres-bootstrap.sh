set -euo pipefail
log() { echo "bosun-bootstrap: $*" >&2; }
ordinal=${BOSUN_ORDINAL:-${HOSTNAME##*-}}
if [ "$ordinal" != 0 ] && [ ! -s "$PGDATA/PG_VERSION" ]; then
  if [ -z "${REPLICATION_PASSWORD:-}" ]; then
    log "REPLICATION_PASSWORD is empty: the credentials Secret has no replication-password key"
    exit 1
  fi
  if [ -e "$PGDATA" ] && ! rmdir "$PGDATA" 2>/dev/null; then
    log "$PGDATA is not empty but holds no cluster (no PG_VERSION): left as it is; empty or delete the claim to clone the primary again"
    exit 1
  fi
  until pg_isready -q -h "$PRIMARY_HOST" -p "$PRIMARY_PORT"; do
    log "waiting for the primary $PRIMARY_HOST:$PRIMARY_PORT"
    sleep 2
  done
  partial="$PGDATA.partial"
  rm -rf "$partial"
  log "cloning the primary $PRIMARY_HOST:$PRIMARY_PORT into $PGDATA"
  PGPASSWORD=$REPLICATION_PASSWORD pg_basebackup --no-password -h "$PRIMARY_HOST" -p "$PRIMARY_PORT" \
    -U "$REPLICATION_USER" -D "$partial" -R -X stream -c fast
  mv "$partial" "$PGDATA"
  log "cloned; starting as a hot standby"
fi
exec "$@"
