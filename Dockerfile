# bosun's two images, from one build of the binary:
#
#   bosun   (the default target)  the operator: the binary on a distroless base,
#                                 uid 65532, nothing else (no shell); runs with a
#                                 read-only root file system and no capabilities
#   runner  (--target runner)     the Backup/Restore runner: the same binary beside
#                                 the dump clients (pg_dump, mariadb-dump, zstd)
#
# `make docker-build IMG=... RUNNER_IMG=...` builds both with docker or podman,
# whichever works here. With a registry at hand the defaults below apply: the
# binary is compiled in the `compile` stage. Where no registry can be pulled
# from (this project's local cluster), `make docker-build` passes bases that
# hack/images.sh made from Debian packages and BINARY=prebuilt: the binary is the
# one `cargo build --release` just made on the host, with the same toolchain
# and lock file.

ARG RUST_IMAGE=docker.io/library/rust:1.95-bookworm
ARG BASE_IMAGE=gcr.io/distroless/cc-debian12:nonroot
ARG RUNNER_BASE_IMAGE=docker.io/library/debian:trixie-slim
# compile | prebuilt. podman/buildah before 1.29 need it given (--build-arg
# BINARY=compile): they skip a stage named only by an argument's default.
ARG BINARY=compile

# --- the binary -------------------------------------------------------------------

FROM ${RUST_IMAGE} AS compile
WORKDIR /src
# The manifests first: the dependencies' layer is rebuilt only when they change.
COPY Cargo.toml Cargo.lock ./
COPY crates crates
# Linked statically (as hack/static-bosun.sh does): the runner copies this binary into
# database pods (`bosun install`), whose images may have an older C library.
RUN RUSTFLAGS="-C target-feature=+crt-static" cargo build --release --locked -p bosun --target x86_64-unknown-linux-gnu \
 && objcopy --strip-debug target/x86_64-unknown-linux-gnu/release/bosun /bosun

FROM scratch AS prebuilt
# make docker-build strips it into target/image/ (the only part of target/ that
# .dockerignore lets into the context).
COPY target/image/bosun /bosun

FROM ${BINARY} AS binary

# --- runner -------------------------------------------------------------------------

FROM ${RUNNER_BASE_IMAGE} AS runner
# The dump clients, unless the base has them (hack/images.sh's bosun-runner-base
# does; debian:trixie-slim does not). Trixie: its pg_dump 17 dumps every major the
# API accepts (pg_dump refuses a newer server than itself); the binary is linked
# statically, and runs on any glibc.
ARG RUNNER_PACKAGES="ca-certificates postgresql-client-17 mariadb-client zstd"
RUN if ! dpkg-query -W ${RUNNER_PACKAGES} >/dev/null 2>&1; then \
      apt-get update \
      && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends ${RUNNER_PACKAGES} \
      && rm -rf /var/lib/apt/lists/*; \
    fi \
 && command -v pg_dump && command -v mariadb-dump && command -v zstd
COPY --from=binary /bosun /usr/local/bin/bosun
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/bosun"]

# --- bosun (last: the default target) --------------------------------------------------

FROM ${BASE_IMAGE} AS bosun
COPY --from=binary /bosun /bosun
USER 65532:65532
ENTRYPOINT ["/bosun"]
CMD ["run"]
