#!/bin/bash
# The all-in-one's memory with every code of a table requested, and at the take that
# writes their clicks: one all-in-one on a copy of a data directory, wrk (one thread, 64
# connections, 45 s) over a list of every code, then VmRSS every 5 s for 70 s (the take
# falls in it: the oldest click is held at most `clicks.max_hold_ms`, a minute) and VmHWM,
# the peak of the whole run.
#
#   benches/rss-take.sh BIN DATA_DIR REQUESTS LABEL [NAME=VALUE ...]
#
# BIN: a Rebound binary. DATA_DIR: an all-in-one's data directory with links (a copy is
# served: e.g. benches/results/raw/<run>/data-main of a `scripts/bench --only side --links
# 1000000` run). REQUESTS: that run's sweep list (every code once, wrk's replay format).
# NAME=VALUE: Rebound's environment, e.g. REBOUND_BREAKDOWNS=none. Prints one line: the
# samples, the peak, RSS when ready, right after wrk and at the end, wrk's rate and the L1's
# fills (every code of the list when it equals the list's codes).
set -euo pipefail
BIN=$1 DATA=$2 REQUESTS=$3 LABEL=$4
shift 4
ROOT=$(cd "$(dirname "$0")/.." && pwd)
WORK=$(mktemp -d /tmp/rss-take.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
cp -r "$DATA" "$WORK/data"
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
P1=$(port) P2=$(port) P3=$(port)
rss() { awk -v k="$1:" '$1 == k { print int($2 / 1024) }' "/proc/$PID/status"; }
env REBOUND_BOOTSTRAP_KEY=bench-operator-key-0000000000 REBOUND_PUBLIC_BASE_URL=https://sho.rt REBOUND_LOG=warn \
  REBOUND_REDIRECT_THREADS=1 REBOUND_DATA_DIR="$WORK/data" REBOUND_REDIRECT_ADDR=127.0.0.1:$P1 \
  REBOUND_API_ADDR=127.0.0.1:$P2 REBOUND_METRICS_ADDR=127.0.0.1:$P3 "$@" "$BIN" > "$WORK/rebound.log" 2>&1 &
PID=$!
trap 'kill -INT $PID 2>/dev/null || true; wait $PID 2>/dev/null || true; rm -rf "$WORK"' EXIT
for _ in $(seq 1 300); do curl -sf -o /dev/null "http://127.0.0.1:$P2/readyz" && break; sleep 0.2; done
READY=$(rss VmRSS)
wrk -t 1 -c 64 -d 45s -s "$ROOT/benches/wrk/replay.lua" "http://127.0.0.1:$P1" -- "$REQUESTS" > "$WORK/wrk.txt"
AFTER=$(rss VmRSS)
SAMPLES=""
for k in $(seq 1 14); do
  sleep 5
  SAMPLES="$SAMPLES t+$((k * 5))s $(rss VmRSS)"
done
FILLS=$(curl -s "http://127.0.0.1:$P3/metrics" | awk '/^rebound_lookups_total\{result="miss",tier="l1"\}/ { print $2 }')
echo "$LABEL: peak $(rss VmHWM) MiB; ready $READY, after wrk $AFTER, at the end $(rss VmRSS) MiB;" \
  "$(awk '/Requests\/sec/ { print $2 }' "$WORK/wrk.txt") req/s; L1 fills $FILLS; MiB after wrk:$SAMPLES"
