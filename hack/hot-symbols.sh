#!/usr/bin/env bash
# hot-symbols.sh: list the functions `bosun run` executes while it converges WebApps,
# for the release build's layout (crates/bosun/build.rs, lld --symbol-ordering-file).
#
# Runs the release binary under valgrind's callgrind while `make bench` converges N
# (default 100) WebApps on the local cluster, then writes every function it ran, by
# its mangled name and most called first, to crates/bosun/hot-symbols.txt. Rerun it after large changes;
# `make bench` shows the binary's resident pages (peak_rss_file_mib) when it is stale.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
count=${N:-100}
out=$root/crates/bosun/hot-symbols.txt
work=$root/target/hot-symbols
command -v valgrind >/dev/null || { echo "hot-symbols.sh: valgrind is needed (apt-get install valgrind)" >&2; exit 1; }
mkdir -p "$work"
rm -f "$work/callgrind.out"

cd "$root"
cargo build --release -p bosun
# The bench stops bosun with SIGKILL, which callgrind cannot dump on: bosun runs on
# beside the killed wrapper until this script stops it with SIGTERM below.
cat > "$work/bosun" <<WRAPPER
#!/usr/bin/env bash
valgrind --tool=callgrind --demangle=no --dump-instr=no --callgrind-out-file=$work/callgrind.out \
  $root/target/release/bosun "\$@" &
wait
WRAPPER
chmod +x "$work/bosun"
cargo run --release -p bosun-bench -- --count "$count" --idle-seconds 5 --bosun "$work/bosun"
pkill -TERM -f -- "--callgrind-out-file=$work/callgrind.out" || true
for _ in $(seq 1 120); do
  pgrep -f -- "--callgrind-out-file=$work/callgrind.out" >/dev/null || break
  sleep 1
done
[ -s "$work/callgrind.out" ] || { echo "hot-symbols.sh: callgrind wrote no profile" >&2; exit 1; }
# Most called first: the paths every object takes (a WebApp's reconcile) sit together,
# the start-up of each controller after them.
awk '
  /^c?fn=\(/ {
    id = $1; sub(/^c?fn=/, "", id)
    if (NF > 1) name[id] = $2
    if ($0 ~ /^cfn=/) callee = id
  }
  /^calls=/ { split($1, c, "="); calls[callee] += c[2] }
  END { for (id in name) print calls[id] + 0, name[id] }
' "$work/callgrind.out" | grep -E ' (_R|_ZN)' | LC_ALL=C sort -k1,1nr -k2,2 | cut -d' ' -f2 > "$out"
echo "hot-symbols.sh: $(wc -l < "$out") functions in $out"
