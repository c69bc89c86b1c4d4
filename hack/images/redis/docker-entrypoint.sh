#!/bin/sh
# Entrypoint of localhost/redis:7 (hack/images.sh): Redis 7 from Debian behind
# the interface of the official `redis` image. Written from its documentation:
#  - `redis-server [/path/redis.conf] [--option value ...]`; arguments that
#    start with "-" or a first argument ending in .conf go to redis-server;
#  - without a config file it listens on all addresses with protected mode
#    off (the official image compiles that default in; Debian's binary
#    defaults to protected mode on, so it is passed here as the first option,
#    where later ones, or a config file that sets it, still win);
#  - data (dump.rdb, appendonly) in the working directory /data;
#  - started as root it chowns /data to redis and re-runs itself as redis
#    (uid 999) with setpriv; with the default umask 0022 it uses 0077.
set -eu

if [ "${1#-}" != "$1" ] || [ "${1%.conf}" != "$1" ]; then
  set -- redis-server "$@"
fi

if [ "$1" = redis-server ] || [ "$1" = /usr/bin/redis-server ]; then
  if [ "$(id -u)" = 0 ]; then
    find . \! -user redis -exec chown redis: '{}' +
    HOME=/data exec setpriv --reuid=redis --regid=redis --init-groups "$0" "$@"
  fi
  if [ "$(umask)" = 0022 ]; then
    umask 0077
  fi
  shift
  # Protected mode off unless a given config file decides it.
  if [ $# -gt 0 ] && [ "${1#-}" = "$1" ]; then
    conf=$1; shift
    if grep -Eqi '^[[:space:]]*protected-mode[[:space:]]' "$conf" 2>/dev/null; then
      set -- "$conf" "$@"
    else
      set -- "$conf" --protected-mode no "$@"
    fi
  else
    set -- --protected-mode no "$@"
  fi
  set -- redis-server "$@"
fi

exec "$@"
