#!/usr/bin/env bash
# healthcheck.sh of localhost/mariadb:10.11 (hack/images.sh), for probes
# written against the official mariadb image, e.g.
#   healthcheck.sh --connect --innodb_initialized
# Written from its documentation; the common subset:
#   --connect                    the server accepts a TCP connection (unless
#                                it runs with skip-networking)
#   --innodb_initialized         InnoDB is up
#   --innodb_buffer_pool_loaded  the buffer pool was loaded at startup
#   --su-mysql / --su=USER       run the checks as that user (when root)
#   --defaults-file=F, --defaults-extra-file=F, --no-defaults, --datadir=D
# Every test must pass (exit 0); the first that fails exits 1. The checks log
# in as healthcheck@localhost with the password the entrypoint wrote to
# $datadir/.my-healthcheck.cnf on first start (USAGE only, as upstream).
set -euo pipefail

datadir=/var/lib/mysql
defaults=()
tests=()
su_user=
for arg; do
  case $arg in
    --su-mysql) su_user=mysql ;;
    --su=*) su_user=${arg#--su=} ;;
    --datadir=*) datadir=${arg#--datadir=} ;;
    --defaults-file=* | --defaults-extra-file=* | --no-defaults) defaults=("$arg") ;;
    --connect | --innodb_initialized | --innodb_buffer_pool_loaded) tests+=("${arg#--}") ;;
    --*) echo "healthcheck.sh: unsupported option $arg" >&2; exit 1 ;;
    *) echo "healthcheck.sh: unexpected argument $arg" >&2; exit 1 ;;
  esac
done
if [ -n "$su_user" ] && [ "$(id -u)" = 0 ]; then
  args=()
  for arg; do case $arg in --su-mysql | --su=*) ;; *) args+=("$arg") ;; esac; done
  exec setpriv --reuid="$su_user" --regid="$su_user" --init-groups "$0" "${args[@]}"
fi
if ((${#defaults[@]} == 0)) && [ -r "$datadir/.my-healthcheck.cnf" ]; then
  defaults=(--defaults-extra-file="$datadir/.my-healthcheck.cnf")
fi

query() { mariadb "${defaults[@]}" "$@" --skip-column-names --batch; }

for t in "${tests[@]}"; do
  case $t in
    connect)
      # Over TCP when the server has networking, else over the socket.
      skip=$(query -e 'SELECT @@skip_networking') || exit 1
      if [ "$skip" = 0 ]; then
        query --protocol=tcp -e 'SELECT 1' >/dev/null || exit 1
      fi
      ;;
    innodb_initialized)
      [ "$(query -e "SELECT 1 FROM information_schema.ENGINES WHERE engine = 'innodb' AND support IN ('YES', 'DEFAULT', 'ENABLED')")" = 1 ] || exit 1
      ;;
    innodb_buffer_pool_loaded)
      status=$(query -e "SELECT VARIABLE_VALUE FROM information_schema.GLOBAL_STATUS WHERE VARIABLE_NAME = 'Innodb_buffer_pool_load_status'") || exit 1
      [[ $status == 'Buffer pool(s) load completed at '* ]] || exit 1
      ;;
  esac
done
exit 0
