#!/usr/bin/env bash
# The real database and storage servers the backup runner's tests run against
# (PostgreSQL, MariaDB, MinIO, fake-gcs-server, Azurite, FerretDB with mongo-tools),
# on 127.0.0.1 with random credentials, in ${BOSUN_BACKENDS_DIR:-<repo>/.backends}.
#
# Usage: backends.sh up | down | env | status | check
#   eval "$(hack/backends.sh env)"   exports what a client needs (PG*, MYSQL_*,
#   S3_*/AWS_*, GCS_*/GOOGLE_*, AZURE_*/AZURITE_*, MONGODB_*, mongo-tools on PATH)
#
# The supervisor is crates/localcluster (`localcluster backends VERB`; the tests call
# it as a library): this builds its CLI (incrementally, quietly) and runs it. The
# servers' build recipes stay in hack/backends/build.sh.
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
exec cargo run -q --locked --manifest-path "$repo/Cargo.toml" -p bosun-localcluster --bin localcluster -- backends "$@"
