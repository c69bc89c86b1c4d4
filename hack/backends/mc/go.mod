// Wrapper module: pins upstream MinIO Client (mc), whose `mc pipe` is the object
// store client of the hand-made backup pipeline `make bench-backup` compares bosun
// with (pg_dump | zstd | mc pipe). Built from the module's own source and go.sum
// (hack/backends/build.sh mc). Not product code.
module bosun.local/hack/backends/mc

go 1.25.0

require github.com/minio/mc v0.0.0-20250313080218-cf909e1063a9
