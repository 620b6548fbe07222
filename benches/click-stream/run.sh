#!/usr/bin/env bash
# The click stream under load (benches/results/2026-12-06f-kinesis-stream.md): an all-in-one
# with 10,000 links, its L1 warmed, then wrk with a browser's User-Agent, a Referer, a CDN
# country header and utm parameters on every request; prints wrk's figures and the stream's
# counters. Usage: run.sh on|off SECONDS CONNECTIONS. `on` sends the clicks to a Kinesis
# stream: moto's at 127.0.0.1:15000 (created with `rebound provision`), or at KINESIS_AT
# (e.g. fake_kinesis.py, which takes every call at once). REBOUND_BIN: the binary (default
# target/debug/rebound). Ports 18080-18082 must be free.
set -euo pipefail
mode=$1; secs=$2; conns=$3
export AWS_ACCESS_KEY_ID=test AWS_SECRET_ACCESS_KEY=test AWS_REGION=us-east-1
root=$(cd "$(dirname "$0")/../.." && pwd)
bin=${REBOUND_BIN:-$root/target/debug/rebound}
d=$(mktemp -d)
export AWS_ENDPOINT_URL=${KINESIS_AT:-http://127.0.0.1:15000}
stream=bench-clicks-$(date +%s)
envs=(REBOUND_DATA_DIR=$d REBOUND_BOOTSTRAP_KEY=bench-operator-key-0123456789abcdef REBOUND_REDIRECT_ADDR=127.0.0.1:18080
      REBOUND_API_ADDR=127.0.0.1:18081 REBOUND_METRICS_ADDR=127.0.0.1:18082 REBOUND_LOG=warn
      REBOUND_TRUSTED_NETWORKS=127.0.0.1 REBOUND_COUNTRY_HEADER=cloudflare)
if [ "$mode" = on ]; then envs+=(REBOUND_KINESIS_STREAM=$stream); [ -n "${KINESIS_AT:-}" ] || env "${envs[@]}" $bin provision; fi
env "${envs[@]}" $bin > $d/out.log 2> $d/err.log &
pid=$!
for _ in $(seq 1 100); do curl -s -o /dev/null http://127.0.0.1:18082/metrics && break; sleep 0.2; done
python3 -c 'print("long_url,alias"); [print(f"https://example.com/{i},link{i}") for i in range(10000)]' > $d/links.csv
REBOUND_API_URL=http://127.0.0.1:18081 REBOUND_API_KEY=bench-operator-key-0123456789abcdef $bin links import $d/links.csv > /dev/null
python3 -c 'import random; random.seed(7); [print(f"/link{random.randrange(10000)}?utm_source=newsletter&utm_campaign=spring") for _ in range(200000)]' > $d/paths.txt
# Warm L1: every link once.
wrk -t1 -c1 -d3s -s $root/benches/wrk/replay.lua http://127.0.0.1:18080 -- $d/paths.txt > /dev/null
m() { curl -s http://127.0.0.1:18082/metrics | awk -v k="$1" '$1==k {print $2}'; }
before_sent=$(m rebound_click_events_sent_total); before_red=$(m 'rebound_redirect_requests_total{outcome="redirect"}')
t0=$(date +%s.%N)
wrk -t2 -c$conns -d${secs}s -s $root/benches/wrk/replay.lua \
  -H 'User-Agent: Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0.0.0 Safari/537.36' \
  -H 'Referer: https://news.ycombinator.com/item?id=42' -H 'CF-IPCountry: FR' \
  http://127.0.0.1:18080 -- $d/paths.txt | tee $d/wrk.txt
t1=$(date +%s.%N)
sleep 3
echo "mode=$mode conns=$conns secs=$secs"
echo "redirects: $(python3 -c "print(float('$(m 'rebound_redirect_requests_total{outcome="redirect"}')') - float('${before_red:-0}'))")"
for k in rebound_click_events_sent_total rebound_click_events_lost_total rebound_click_events_dropped_total rebound_clicks_dropped_total \
  'rebound_adapter_calls_total{adapter="kinesis",operation="put_records",outcome="ok"}' \
  'rebound_adapter_call_duration_seconds_sum{adapter="kinesis",operation="put_records"}' \
  'rebound_adapter_call_duration_seconds_count{adapter="kinesis",operation="put_records"}'; do
  echo "$k $(m "$k")"
done
echo "sent before the run: ${before_sent:-0}; wall $(python3 -c "print(round($t1-$t0,2))") s"
kill -TERM $pid; wait $pid || true
rm -rf $d
