#!/bin/bash
# Where a redirect's tail latency goes to the scheduler: one all-in-one, wrk (one thread, 64
# connections) over a request list, and for each of Rebound's threads its CPU time and its
# context switches; then `perf sched latency` over one more wrk run (how long each thread
# waited for a CPU once runnable: the redirect thread's "max delay" is what a busy 2-core
# machine adds to the p99).
#
#   benches/sched-latency.sh BIN DATA_DIR REQUESTS LABEL [NAME=VALUE ...]
#
# BIN: a Rebound binary. DATA_DIR: an all-in-one's data directory with links (a copy is
# served: e.g. benches/results/raw/<run>/data-main of a `scripts/bench --only side` run).
# REQUESTS: that run's requests-warm.txt. NAME=VALUE: Rebound's environment, e.g.
# REBOUND_BREAKDOWNS=none. Writes sched-LABEL.data and exp-LABEL.* into $OUT (default
# /tmp/sched-latency). Needs wrk and perf (as root).
set -euo pipefail
BIN=$1 DATA=$2 REQUESTS=$3 LABEL=$4
shift 4
OUT=${OUT:-/tmp/sched-latency}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$OUT"
rm -rf "$OUT/data-$LABEL"
cp -r "$DATA" "$OUT/data-$LABEL"
port=$((20000 + RANDOM % 10000))
env -i PATH="$PATH" HOME="$HOME" REBOUND_BOOTSTRAP_KEY=bench-operator-key-0000000000 \
    REBOUND_PUBLIC_BASE_URL=https://sho.rt REBOUND_LOG=warn REBOUND_REDIRECT_THREADS=1 \
    REBOUND_DATA_DIR="$OUT/data-$LABEL" REBOUND_REDIRECT_ADDR=127.0.0.1:$port \
    REBOUND_API_ADDR=127.0.0.1:$((port + 1)) REBOUND_METRICS_ADDR=127.0.0.1:$((port + 2)) "$@" \
    "$BIN" >"$OUT/exp-$LABEL.log" 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null || true' EXIT
for _ in $(seq 150); do
    curl -sf "127.0.0.1:$((port + 1))/readyz" >/dev/null && break
    sleep 0.2
done
replay="$ROOT/benches/wrk/replay.lua"
run_wrk() { wrk -t1 -c64 -d"$1"s --latency -s "$replay" "http://127.0.0.1:$port" -- "$REQUESTS"; }
# Every code requested once or more (the L1 filled), then the measured runs.
run_wrk 8 >/dev/null
# Per thread: id, name, CPU ticks (user + system), involuntary and voluntary switches.
threads() {
    for t in /proc/$pid/task/*; do
        echo "$(basename "$t") $(tr ' ' _ <"$t/comm") $(sed 's/.*) //' "$t/stat" | awk '{print $12 + $13}') \
$(awk '/^nonvoluntary_ctxt_switches/ {print $2}' "$t/status") $(awk '/^voluntary_ctxt_switches/ {print $2}' "$t/status")"
    done | sort
}
threads >"$OUT/exp-$LABEL.before"
for _ in 1 2 3; do run_wrk 5 | grep -E "Requests/sec|  99%"; done
threads >"$OUT/exp-$LABEL.after"
perf sched record -a -o "$OUT/sched-$LABEL.data" -- bash -c "$(declare -f run_wrk); replay=$replay port=$port REQUESTS=$REQUESTS run_wrk 3" \
    2>/dev/null | grep -E "Requests/sec|  99%"
curl -s "127.0.0.1:$((port + 2))/metrics" | grep -E "^rebound_(breakdown_)?clicks_dropped_total"
grep VmRSS "/proc/$pid/status"
echo "threads over the three runs (ticks of 10 ms):"
join "$OUT/exp-$LABEL.before" "$OUT/exp-$LABEL.after" |
    awk '{d = $7 - $3; n = $8 - $4; v = $9 - $5; if (d > 0 || n > 5) printf "  %-18s cpu_ticks %5d involuntary %6d voluntary %7d\n", $2, d, n, v}'
echo "waiting for a CPU (perf sched latency, the longest first):"
perf sched latency -i "$OUT/sched-$LABEL.data" --sort max 2>/dev/null | grep -E "rebound|tokio|wrk" | head -6
