# bosun — kubebuilder-style targets. `make help` lists them.
#
# The local control plane (etcd, kube-apiserver, kube-controller-manager,
# kube-scheduler, kwok) is built from Go modules into ~/.cache/bosun and its state
# lives in .cluster/ (override with BOSUN_CLUSTER_DIR).

SHELL := /usr/bin/env bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

CLUSTER := hack/controlplane/cluster.sh
CARGO ?= cargo
BOSUN := target/debug/bosun
# bosun's binary, built with the local cluster's supervisor selected beside it, as
# cluster.sh builds it: their common crates get the same features, so what cluster.sh
# compiled is fresh here (with `-p bosun` alone, a cold machine compiles some twice).
BUILD_BOSUN := $(CARGO) build -p bosun -p bosun-localcluster --bin bosun
# make run: the local control plane unless USE_EXISTING_CLUSTER=true, which uses the
# current kubeconfig instead (never by accident).
USE_EXISTING_CLUSTER ?= false

##@ General

.PHONY: help
help: ## Show the targets.
	@awk 'BEGIN {FS = ":.*##"} /^[a-zA-Z_-]+:.*?##/ { printf "  \033[36m%-14s\033[0m %s\n", $$1, $$2 } /^##@/ { printf "\n%s\n", substr($$0, 5) }' $(MAKEFILE_LIST)

##@ Development

.PHONY: build
build: ## Build the bosun binary (debug).
	$(BUILD_BOSUN)

.PHONY: plugin
plugin: ## Build bosun and link bin/kubectl-bosun to it: with bin/ on PATH, `kubectl bosun status DB` (docs/kubectl-bosun.md).
	$(BUILD_BOSUN)
	mkdir -p bin
	ln -sf ../target/debug/bosun bin/kubectl-bosun
	@echo "kubectl bosun: export PATH=$$PWD/bin:\$$PATH"

.PHONY: sbom
sbom: ## The bosun binary's SBOM, CycloneDX 1.5 JSON of every crate it is built from, checked against the schema and Cargo.lock: target/sbom/bosun.cdx.json.
	hack/sbom.sh

.PHONY: manifests
manifests: ## Regenerate config/crd (from the Rust types), config/rbac (from the declared permissions), config/webhook, the reference blocks of docs/ and their copies in charts/bosun.
	$(CARGO) run -q -p bosun -- manifests --config-dir config
	# The Helm chart ships the same CRDs, RBAC and webhook configurations (a test compares them).
	rm -f charts/bosun/crds/*.yaml && cp config/crd/bases/*.yaml charts/bosun/crds/
	cp config/rbac/service_account.yaml config/rbac/role.yaml config/rbac/role_binding.yaml \
	  config/rbac/leader_election_role.yaml config/rbac/leader_election_role_binding.yaml charts/bosun/files/rbac/
	cp config/webhook/manifests.yaml config/webhook/service.yaml charts/bosun/files/webhook/

.PHONY: fmt
fmt: ## Format the code.
	$(CARGO) fmt --all

.PHONY: lint
# cargo-deny, built once from crates.io into the cache, keyed by its version.
CARGO_DENY_VERSION := 0.20.2
CARGO_DENY := $(HOME)/.cache/bosun/tools/cargo-deny-$(CARGO_DENY_VERSION)/bin/cargo-deny
$(CARGO_DENY):
	$(CARGO) install cargo-deny --version $(CARGO_DENY_VERSION) --locked --root $(dir $(@D))

lint: $(CARGO_DENY) ## Check formatting, run clippy with warnings as errors, cargo deny (licenses, banned crates, sources: deny.toml), shellcheck every shell program (hack/ and CI: none goes into a pod), make the binary's SBOM and check it (hack/sbom.sh), and actionlint the GitHub workflows.
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings
	# Advisories need RustSec's database from GitHub, which these machines do not reach.
	# Offline, cargo-deny reads every crate of Cargo.lock, other platforms' too, which a
	# build on this one never downloads: fetch them first (a fresh machine has none).
	$(CARGO) fetch --locked --quiet
	$(CARGO_DENY) --offline check --hide-inclusion-graph licenses bans sources
	shellcheck -x -S warning .ci/run $$(git ls-files 'hack/*.sh')
	# The binary's SBOM, checked against CycloneDX's schema and Cargo.lock.
	hack/sbom.sh
	# actionlint (built once into the cache) also shellchecks the workflows' run: blocks.
	"$$(hack/backends/build.sh actionlint)/actionlint" .github/workflows/*.yaml

.PHONY: test
# Each end-to-end test's time, for the ten slowest at the end of make test.
TEST_TIMES ?= $(CURDIR)/target/test-times.txt

test: cluster ## Unit tests and end-to-end tests on the local control plane (started if needed), test binaries side by side (hack/test.sh); ends with the ten slowest end-to-end tests.
	$(BUILD_BOSUN)
	rm -f $(TEST_TIMES)
	status=0; BOSUN_TEST_TIMES=$(TEST_TIMES) BOSUN_CLUSTER_DIR=$(CLUSTER_DIR) hack/test.sh || status=$$?; \
	  echo "the ten slowest end-to-end tests:"; sort -rn $(TEST_TIMES) 2>/dev/null | head -n 10 || true; exit $$status

.PHONY: test-unit
test-unit: ## Only the unit tests (no cluster).
	$(CARGO) test --workspace --lib --bins

##@ Local control plane

CLUSTER_DIR ?= $(if $(BOSUN_CLUSTER_DIR),$(BOSUN_CLUSTER_DIR),$(CURDIR)/.cluster)
export BOSUN_CLUSTER_DIR := $(CLUSTER_DIR)

.PHONY: prerequisites
prerequisites: ## Install what this machine lacks from Debian's packages (containerd, runc, mmdebstrap, the databases...); quick when nothing is missing.
	hack/prerequisites.sh

.PHONY: cluster
cluster: prerequisites ## Install what is missing, build (first time only) and start the local control plane; wait until healthy. On a running cluster without its real node, tries the node again.
	$(CLUSTER) up

.PHONY: cluster-down
cluster-down: ## Stop the local control plane and remove its state.
	$(CLUSTER) down

.PHONY: kubeconfig
kubeconfig: ## Print the path of the local control plane's admin kubeconfig (use with -s).
	@$(CLUSTER) kubeconfig

##@ Deployment

ifeq ($(USE_EXISTING_CLUSTER),true)
RUN_KUBECONFIG := $(or $(KUBECONFIG),$(HOME)/.kube/config)
RUN_PREREQ :=
else
RUN_KUBECONFIG := $(CLUSTER_DIR)/kubeconfig
RUN_PREREQ := cluster
# The local cluster pulls nothing: its real node runs the images hack/images.sh built,
# and its hostPath volumes ignore fsGroup.
# No Service routes to a process on the host: the apiserver (on this host too) calls the
# webhooks at a URL, and bosun creates the configurations pointing there.
RUN_ENV := BOSUN_POSTGRES_IMAGE=localhost/postgres:{version} BOSUN_POSTGRES_VOLUME_PERMISSIONS=true \
	BOSUN_REDIS_IMAGE=localhost/redis:7 BOSUN_WEBHOOK_URL=https://127.0.0.1:9443 BOSUN_WEBHOOK_REMOVE_ON_EXIT=true
endif

.PHONY: install
install: $(RUN_PREREQ) ## Install the CRDs into the cluster (local control plane unless USE_EXISTING_CLUSTER=true).
	# make run points VoteConfig's conversion webhook at its URL (and puts it back when it
	# stops); the CRD names the webhook Service, and the apiserver refuses a CRD with both:
	# what a killed make run left goes back first.
	KUBECONFIG=$(RUN_KUBECONFIG) hack/deploy.sh forget-local-run
	KUBECONFIG=$(RUN_KUBECONFIG) kubectl apply --server-side --force-conflicts -k config/crd
	KUBECONFIG=$(RUN_KUBECONFIG) kubectl wait --for=condition=Established --timeout=60s -f config/crd/bases

.PHONY: uninstall
uninstall: ## Remove the CRDs (and so every custom resource) and the webhook configurations `make run` made.
	KUBECONFIG=$(RUN_KUBECONFIG) kubectl delete --ignore-not-found -k config/crd
	KUBECONFIG=$(RUN_KUBECONFIG) kubectl delete --ignore-not-found \
	  validatingwebhookconfiguration/bosun-validating-webhook-configuration \
	  mutatingwebhookconfiguration/bosun-mutating-webhook-configuration

.PHONY: run
# When make started (for make run's "ready after" line).
MAKE_STARTED := $(shell date +%s)

run: install build ## Run bosun in the foreground against the local control plane (or USE_EXISTING_CLUSTER=true).
	# The databases' instance managers and the Backup and Restore runs use the runner
	# image: this build's bosun in it (linked statically: hack/static-bosun.sh), on the
	# real nodes (a few seconds; nothing when the binary is unchanged).
	$(if $(filter true,$(USE_EXISTING_CLUSTER)),,@for sock in $(CLUSTER_DIR)/node*/containerd.sock; do \
	  [ ! -S "$$sock" ] || hack/images.sh runner --address "$$sock" "$$(hack/static-bosun.sh)" || exit 1; done)
	@echo
	@echo "bosun: cluster, CRDs and build ready after $$(( $$(date +%s) - $(MAKE_STARTED) ))s; bosun's log follows (Ctrl-C stops it)."
	@echo "  In another shell:"
	@echo "    export KUBECONFIG=$(RUN_KUBECONFIG)"
	@echo "    kubectl apply -f config/samples/apps.example.com_v1_webapp.yaml    # the README's tour"
	$(if $(filter true,$(USE_EXISTING_CLUSTER)),,@echo "  The local cluster's own logs: $(CLUSTER_DIR)/logs/ (make cluster-down stops it)")
	@echo
	KUBECONFIG=$(RUN_KUBECONFIG) $(RUN_ENV) $(BOSUN) run $(ARGS)

# The images: IMG is bosun, RUNNER_IMG the Backup/Restore runner (its default is what
# bosun's --runner-image defaults to). Built with docker or podman, whichever works.
IMG ?= localhost/bosun:dev
RUNNER_IMG ?= localhost/bosun-runner:dev

.PHONY: docker-build
docker-build: ## Build the bosun image (IMG) and the runner image (RUNNER_IMG) from the Dockerfile; without a registry (DOCKER_BUILD_MODE=local, the default) on bases made from Debian packages.
	hack/docker-build.sh build $(IMG) $(RUNNER_IMG)

.PHONY: docker-push
docker-push: ## Push IMG and RUNNER_IMG to their registry.
	hack/docker-build.sh push $(IMG) $(RUNNER_IMG)

.PHONY: deploy
deploy: $(RUN_PREREQ) ## Install bosun (config/default, IMG) in the cluster: the local control plane's real node, with the images loaded there, unless USE_EXISTING_CLUSTER=true.
	KUBECONFIG=$(RUN_KUBECONFIG) IMG=$(IMG) RUNNER_IMG=$(RUNNER_IMG) LOCAL=$(if $(filter true,$(USE_EXISTING_CLUSTER)),false,true) \
	  hack/deploy.sh deploy

.PHONY: undeploy
undeploy: ## Remove what make deploy installed; refuses while custom resources exist, unless KEEP_CRDS=true (then the CRDs and they stay).
	KUBECONFIG=$(RUN_KUBECONFIG) IMG=$(IMG) RUNNER_IMG=$(RUNNER_IMG) LOCAL=$(if $(filter true,$(USE_EXISTING_CLUSTER)),false,true) \
	  hack/deploy.sh undeploy

# make smoke: hack/smoke.sh, the steps the CI workflow runs against staging. On the local
# cluster: the images built and loaded into the real node, a release and namespaces of its
# own (not bosun-system, where make deploy and the e2e tests install), bosun uninstalled
# at the end. With USE_EXISTING_CLUSTER=true: the images must be in a registry the
# cluster pulls from (make docker-push), the release is the documented one and stays.
ifeq ($(USE_EXISTING_CLUSTER),true)
SMOKE_RELEASE ?= bosun
SMOKE_RELEASE_NAMESPACE ?= bosun-system
SMOKE_PREREQ :=
else
SMOKE_RELEASE ?= bosun-smoke
SMOKE_RELEASE_NAMESPACE ?= bosun-smoke-system
SMOKE_PREREQ := cluster docker-build
endif
SMOKE_NAMESPACE ?= bosun-smoke
SMOKE_TIMEOUT ?= 300s

.PHONY: smoke
smoke: $(SMOKE_PREREQ) ## helm upgrade --install bosun (IMG) and wait until config/samples/staging-platform.yaml is Ready in SMOKE_NAMESPACE, printing what failed if it is not; removes what it made (on the local cluster, bosun too).
	KUBECONFIG=$(RUN_KUBECONFIG) IMG=$(IMG) RUNNER_IMG=$(RUNNER_IMG) LOCAL=$(if $(filter true,$(USE_EXISTING_CLUSTER)),false,true) \
	  RELEASE=$(SMOKE_RELEASE) RELEASE_NAMESPACE=$(SMOKE_RELEASE_NAMESPACE) SMOKE_NAMESPACE=$(SMOKE_NAMESPACE) \
	  SMOKE_TIMEOUT=$(SMOKE_TIMEOUT) hack/smoke.sh

##@ Benchmarks

N ?= 1000
.PHONY: bench
bench: cluster ## Converge N WebApps (default 1000) with a release build, then restart bosun over them; prints a table, writes target/bench/*.json.
	$(CARGO) build --release -p bosun
	$(CARGO) run --release -p bosun-bench -- --count $(N)

.PHONY: hot-symbols
hot-symbols: cluster ## Rewrite crates/bosun/hot-symbols.txt, the functions bosun run executes (callgrind during a bench of 100 WebApps), laid out together in the release binary.
	hack/hot-symbols.sh

CONSUMERS ?= 50
.PHONY: bench-appconfig
bench-appconfig: cluster ## Change an AppConfig with CONSUMERS (default 50) consuming Deployments: time to the last rollout, bosun's requests; writes target/bench/appconfig-N.json.
	$(CARGO) build --release -p bosun
	$(CARGO) run --release -p bosun-bench --bin appconfig -- --consumers $(CONSUMERS)

BENCH_RUNS ?= 5
.PHONY: bench-failover
bench-failover: cluster ## PostgreSQL failover on the real nodes: write outage of a deleted pod, a killed postmaster, a primary that cannot start, a switchover (BENCH_RUNS each, default 5), with and without synchronous replication; then the primary's node lost (power, partition; asynchronous and synchronous); rows lost, writes the cut-off primary acknowledged after the decision; writes target/bench/failover-*.json and node-loss-*.json.
	BENCH_RUNS=$(BENCH_RUNS) $(CARGO) test -p bosun --test failover -- --ignored --nocapture --test-threads 2 bench_failover
	BENCH_RUNS=$(BENCH_RUNS) $(CARGO) test -p bosun --test node_loss -- --ignored --nocapture bench_node_loss

.PHONY: bench-pooler
bench-pooler: cluster ## PostgreSQL's pooler (spec.pooler) beside direct connections, 8 pgbench clients each, on the real node: steady-state throughput (BENCH_RUNS pairs, default 5, medians; BENCH_POOLER_STEADY_ONLY=1 stops there), then a switchover, a rolling change and a deleted primary pod (failed transactions, aborted clients, longest transaction, tps before/during/after); writes target/bench/pooler.json.
	BENCH_RUNS=$(BENCH_RUNS) $(CARGO) test -p bosun --test failover -- --ignored --nocapture bench_pooler

BENCH_UPGRADE_SCALE ?= 68
.PHONY: bench-upgrade
bench-upgrade: cluster ## PostgreSQL 13 → 17 on the real node, pgbench scale BENCH_UPGRADE_SCALE (default 68, ~1 GiB): the write outage of the in-place upgrade (pg_upgrade --link) beside a dump and restore by the runner; writes target/bench/upgrade-<size>.json.
	BENCH_UPGRADE_SCALE=$(BENCH_UPGRADE_SCALE) $(CARGO) test -p bosun --test failover -- --ignored --nocapture bench_upgrade

.PHONY: bench-tls
bench-tls: ## What TLS costs a PostgreSQL as bosun configures it, off and on in one run on this machine: a connection's set-up (pgbench -C) and bulk reads (pg_dump, pg_basebackup) in MiB/s (the programs measured are PostgreSQL's: a debug build orchestrates); writes target/bench/tls.json.
	$(CARGO) run -q -p bosun-bench --bin tls

SIZE ?= 1GiB
DESTINATION ?= s3
WAL ?= 1GiB
.PHONY: bench-pitr
bench-pitr: ## Continuous backup of a SIZE (default 1GiB) PostgreSQL: a base backup's MiB/s beside pg_basebackup's, WAL push latency p50/p99 and peak RSS over WAL (default 1GiB) of UPDATEs, and the recovery of it all (restore + replay to promotion), release build; writes target/bench/pitr-SIZE.json.
	hack/backends.sh up
	$(CARGO) build --release -p bosun
	$(CARGO) run --release -p bosun-bench --bin pitr -- --size $(SIZE) --wal $(WAL)

.PHONY: bench-backup
bench-backup: ## Back up (plain and encrypted) and restore a SIZE (default 1GiB) PostgreSQL dump via DESTINATION (s3|gcs|azure|file; hack/backends.sh), release build, beside pg_dump alone and pg_dump | zstd | mc pipe; MiB/s, ratios, peak RSS; writes target/bench/backup-SIZE.json.
	hack/backends.sh up
	$(CARGO) build --release -p bosun
	BOSUN_BENCH_MC="$$(hack/backends/build.sh mc)/mc" $(CARGO) run --release -p bosun-bench --bin backup -- --size $(SIZE) --destination $(DESTINATION)
