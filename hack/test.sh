#!/usr/bin/env bash
# make test's runner: builds every test binary of the workspace once, then runs them
# side by side (cargo test runs them one after another), on the one local cluster.
#
# Usage: hack/test.sh                 (BOSUN_TEST_JOBS binaries at a time, default 3)
#
# Each test binary's tests already run in parallel with each other, each in a
# namespace of its own; what decides what may overlap is what a binary shares with
# the others (crates/testing's README part in the top-level README says more):
#   alone       binaries that change what every test shares: the CRDs, the
#               ClusterRole, cluster-wide webhooks, the apiserver itself, the whole
#               cluster, VoteConfig's conversion (install, chaos, lifecycle,
#               voteconfig, packaging). Each runs with only binaries that do not use
#               the cluster beside it (unit tests, the runner's tests).
#   node 2      the binaries that stop and partition the second real node (nodes,
#               node_loss): one at a time, and never beside one that places pods on
#               that node (webapp's tour; every other test's namespace is on the fake
#               nodes or pinned to the first real node).
#   real node   the heavy users of the real nodes (postgresql, failover, backup,
#               node_loss): at most two at a time, and failover (whose race of a
#               restart against a failover wants the node's CPU) never beside another
#               of them.
#   the rest    anything, as many at a time as BOSUN_TEST_JOBS.
# The order: the `alone` ones first (the binaries that need no cluster fill the other
# lanes meanwhile), then the others, then install, whose images (a release build) are
# made in the background meanwhile; the longest first within each (the times of the
# last run, in target/test-logs/durations, else a fixed guess), so the tail is short.
#
# Each binary's output goes to target/test-logs/<name>.log; a line per binary says
# when it ends (ok / FAILED, its time), and the output of each failed one is printed
# at the end. The exit status is non-zero when any binary failed or could not run.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo"
jobs=${BOSUN_TEST_JOBS:-3}
logs=$repo/target/test-logs
mkdir -p "$logs"
find "$logs" -maxdepth 1 -name '*.log' -delete
durations=$logs/durations
log() { echo "test.sh: $*" >&2; }
now() { date +%s; }
started=$(now)

# --- the binaries -------------------------------------------------------------------
log "building every test binary (cargo test --workspace --no-run)"
cargo test --workspace --no-run --message-format=json-render-diagnostics >"$logs/build.json"
# The bosun that images carry (the runner image, so every database pod), linked
# statically: built once here, not by each test binary.
log "building the static bosun of the images (hack/static-bosun.sh)"
BOSUN_STATIC_BIN=$(hack/static-bosun.sh)
export BOSUN_STATIC_BIN
# The install tests' images (`make docker-build`: a release build of bosun, minutes of
# one core; and the previous release's, hack/previous-release.sh) are built in the
# background, at the lowest priority, while the other tests run: the install binary
# runs last, once they are there (its own `make docker-build` then finds them fresh).
log "building the install tests' images in the background (log: $logs/images.log)"
: >"$logs/images.log"
(nice -n 19 make -s docker-build && nice -n 19 hack/previous-release.sh) >>"$logs/images.log" 2>&1 &
images_pid=$!
images_ready() { ! kill -0 "$images_pid" 2>/dev/null; }
# name <TAB> executable <TAB> the package's directory (cargo test's working directory)
python3 - "$logs/build.json" >"$logs/binaries.tsv" <<'EOF'
import json, os, sys
seen = set()
for line in open(sys.argv[1]):
    try:
        m = json.loads(line)
    except ValueError:
        continue
    if m.get("reason") != "compiler-artifact" or not m.get("profile", {}).get("test") or not m.get("executable"):
        continue
    target, pkg_dir = m["target"], os.path.dirname(m["manifest_path"])
    crate = os.path.basename(pkg_dir)
    kind = target["kind"][0]
    name = f"{crate}-{target['name']}" if kind == "test" else f"{crate}-unit-{kind}-{target['name']}"
    if name not in seen:
        seen.add(name)
        print(f"{name}\t{m['executable']}\t{pkg_dir}")
EOF
declare -A exe=() dir=()
while IFS=$'\t' read -r name path pkg; do exe[$name]=$path; dir[$name]=$pkg; done <"$logs/binaries.tsv"
log "${#exe[@]} test binaries"

# The classes (see the header). A name not present is simply not run.
alone=(bosun-install bosun-chaos testing-lifecycle bosun-voteconfig bosun-packaging)
node2=(testing-nodes bosun-node_loss)
# What places pods on the second real node without breaking it.
on_node2=(bosun-webapp)
heavy=(bosun-postgresql bosun-backup bosun-failover bosun-node_loss)
# Tests at a time inside a binary (libtest runs as many as the machine has cores,
# here 2): the postgresql binary's tests mostly wait for databases to start, and its
# fifteen, two at a time, made it the longest binary of all (626 s, its longest test
# 344 s).
declare -A threads=([bosun-postgresql]=4)
# Binaries that never reach the cluster: they may run beside an `alone` one.
offline=(bosun-backup_runner bosun-backup_runner_faults controller-crd_drift controller-docs_drift
  controller-rbac_drift controller-render runtime-webhook_drift bosun-instance)
is_in() { local x=$1; shift; local y; for y in "$@"; do [ "$x" = "$y" ] && return 0; done; return 1; }
offline_name() { [[ $1 == *-unit-* ]] || is_in "$1" "${offline[@]}"; }

# Expected seconds of a binary: the last run's, else a guess that puts the long ones first.
declare -A took=([bosun-install]=700 [bosun-postgresql]=350 [bosun-backup]=300 [bosun-failover]=180
  [bosun-stacks]=120 [bosun-webhooks]=150 [bosun-runtime]=90 [bosun-chaos]=60)
if [ -r "$durations" ]; then
  while read -r secs name; do took[$name]=$secs; done <"$durations"
fi
by_time() { local n; for n in "$@"; do echo "${took[$n]:-30} $n"; done | sort -rn | cut -d' ' -f2; }

# --- running ---------------------------------------------------------------------------
# A test's panic names its line; a backtrace per failure would push the causes of the
# others out of the summary a reader sees (set BOSUN_TEST_BACKTRACE=1 to have them).
export RUST_BACKTRACE=${BOSUN_TEST_BACKTRACE:-0}
declare -A pid_of=() began=()
failed=()
: >"$logs/durations.new"
running_names() { local n; for n in "${!pid_of[@]}"; do echo "$n"; done; }
count_running() { local c=0 n; for n in "${!pid_of[@]}"; do c=$((c + 1)); done; echo "$c"; }
start() {
  local name=$1
  began[$name]=$(now)
  local with=()
  [ -z "${threads[$name]:-}" ] || with=(env "RUST_TEST_THREADS=${threads[$name]}")
  (cd "${dir[$name]}" && exec "${with[@]}" "${exe[$name]}") >"$logs/$name.log" 2>&1 &
  pid_of[$name]=$!
  log "started $name ($(count_running) running)"
}
# Waits for one binary to end and records it.
reap() {
  local name rc secs
  while :; do
    for name in "${!pid_of[@]}"; do
      if ! kill -0 "${pid_of[$name]}" 2>/dev/null; then
        rc=0
        wait "${pid_of[$name]}" || rc=$?
        secs=$(($(now) - began[$name]))
        unset "pid_of[$name]"
        echo "$secs $name" >>"$logs/durations.new"
        if [ "$rc" = 0 ]; then
          log "ok      $name in ${secs}s ($(grep -h '^test result' "$logs/$name.log" | tail -n 1 | sed 's/^test result: //'))"
        else
          log "FAILED  $name in ${secs}s (exit $rc; log: $logs/$name.log)"
          failed+=("$name")
        fi
        return 0
      fi
    done
    sleep 1
  done
}
heavy_running() { local c=0 n; for n in $(running_names); do is_in "$n" "${heavy[@]}" && c=$((c + 1)); done; echo "$c"; }
may_start() { # NAME: whether it may start beside what runs now
  local name=$1 n
  offline_name "$name" && return 0
  if [ "$name" = bosun-install ] && ! images_ready; then return 1; fi
  for n in $(running_names); do
    offline_name "$n" && continue
    # An `alone` one runs beside nothing that uses the cluster, and the reverse.
    if is_in "$name" "${alone[@]}" || is_in "$n" "${alone[@]}"; then return 1; fi
    # Who breaks the second node runs beside no one else using it.
    if is_in "$name" "${node2[@]}" && { is_in "$n" "${node2[@]}" || is_in "$n" "${on_node2[@]}"; }; then return 1; fi
    if is_in "$n" "${node2[@]}" && is_in "$name" "${on_node2[@]}"; then return 1; fi
  done
  is_in "$name" "${heavy[@]}" || return 0
  [ "$(heavy_running)" -lt 2 ] || return 1
  for n in $(running_names); do
    if [ "$n" = bosun-failover ] || { [ "$name" = bosun-failover ] && is_in "$n" "${heavy[@]}"; }; then return 1; fi
  done
  return 0
}

# The `alone` ones first, with the offline ones beside them; then the rest; install
# last (its images). The longest first within each; whatever may not start yet waits
# for the next that may.
queue=()
for n in $(by_time "${alone[@]}"); do [ -z "${exe[$n]:-}" ] || [ "$n" = bosun-install ] || queue+=("$n"); done
for n in $(by_time "${!exe[@]}"); do is_in "$n" "${alone[@]}" || queue+=("$n"); done
[ -z "${exe[bosun-install]:-}" ] || queue+=(bosun-install)
while ((${#queue[@]} > 0)); do
  picked=-1
  if (($(count_running) < jobs)); then
    for i in "${!queue[@]}"; do
      if may_start "${queue[$i]}"; then picked=$i; break; fi
    done
  fi
  if ((picked >= 0)); then
    start "${queue[$picked]}"
    queue=("${queue[@]:0:picked}" "${queue[@]:picked+1}")
  elif (($(count_running) == 0)); then
    sleep 1 # only install is left, its images still building
  else
    reap
  fi
done
while (($(count_running) > 0)); do reap; done
wait "$images_pid" 2>/dev/null || true

# Doc tests (cargo builds them as it runs them).
log "doc tests (cargo test --workspace --doc)"
doc_rc=0
cargo test --workspace --doc >"$logs/doctests.log" 2>&1 || doc_rc=$?
if [ "$doc_rc" != 0 ]; then failed+=(doctests); log "FAILED  doctests (log: $logs/doctests.log)"; else log "ok      doctests"; fi

sort -rn "$logs/durations.new" >"$durations"
# Why each failed, in short, before the long sections: a reader (or CI) that sees only
# the beginning of what follows still sees every cause.
if ((${#failed[@]})); then
  echo
  echo "=== why, in short ==="
  for n in "${failed[@]}"; do
    grep -h -A 3 "panicked at" "$logs/$n.log" | sed "s|^|$n: |" | head -n 40 || true
  done
fi
for n in "${failed[@]}"; do
  echo
  echo "=== $n ($logs/$n.log) ==="
  # cargo's failure section: from the first "failures:" to the end.
  sed -n '/^failures:$/,$p' "$logs/$n.log" | head -n 400 || true # head closes the pipe early on long logs
done
# One closing line for every test of the run (libtest prints one per binary).
read -r passed_tests failed_tests < <(awk '/^test result:/ { p += $4; f += $6 } END { print p + 0, f + 0 }' "$logs"/*.log)
log "tests: $passed_tests passed, $failed_tests failed"
log "$(( ${#exe[@]} + 1 - ${#failed[@]} )) of $(( ${#exe[@]} + 1 )) test binaries passed in $(( $(now) - started ))s"
((${#failed[@]} == 0))
