#!/usr/bin/env bash
# Remote data on the testbed (issue 16's benchmark): a storage host w1 behind
# a 1 Gbit/s link serves WebDataset shards over HTTP (http-server) and S3
# (s3rver); a worker host w2 reads them. Side by side, on w2:
#   - curl fetching every whole shard (4 at once): what the link and server give;
#   - prepflow's read path (bench/remote_read_bench: per-sample range reads
#     with the read-ahead), over HTTP and over S3;
#   - the same two through a relay adding DELAY_MS to every request
#     (tests/servers/delay.js; the kernel here has no netem), with
#     --read-ahead-requests 0 (each read waits for itself) for contrast.
# Prints one JSON line per measurement; docs/benchmarks.md has the figures.
#
#   sudo scripts/bench_remote.sh DATA_DIR      (an ImageFolder; packed into shards first)
#   env: BW_MBIT=1000 DELAY_MS=20 SHARD_SAMPLES=64 READ_AHEAD=64 ROUNDS=3
set -euo pipefail
cd "$(dirname "$0")/.."
data=${1:?usage: scripts/bench_remote.sh DATA_DIR}
bw=${BW_MBIT:-1000}
delay=${DELAY_MS:-20}
shard_samples=${SHARD_SAMPLES:-64}
read_ahead=${READ_AHEAD:-64}
rounds=${ROUNDS:-3}
bin=$PWD/build/bin
servers=$PWD/tests/servers
work=$(mktemp -d /tmp/prepflow-bench-remote.XXXXXX)
tb=scripts/testbed.sh

cleanup() { $tb down >/dev/null 2>&1 || true; rm -rf "$work"; }
trap cleanup EXIT

"$bin/prepflow" pack --data "$data" --out "$work/www/shards" --shard-samples "$shard_samples" >&2
n=$(ls "$work/www/shards" | grep -c '\.tar$')
last=$(printf '%06d' $((n - 1)))
bytes=$(cat "$work/www/shards"/*.tar | wc -c)
$tb up 2 --bw "$bw" >&2
storage=$($tb addr w1)

# Storage host: http-server over the shards, s3rver with a bucket of them.
$tb exec w1 env LISTEN_HOST=0.0.0.0 node "$servers/serve.js" http "$work/www" >"$work/http.log" 2>&1 &
$tb exec w1 env LISTEN_HOST=0.0.0.0 node --openssl-legacy-provider "$servers/serve.js" s3 \
  "$work/s3" data >"$work/s3.log" 2>&1 &
port_of() {
  for _ in $(seq 1 100); do
    p=$(sed -n 's/^listening .*:\([0-9]*\)$/\1/p' "$1")
    [ -n "$p" ] && { echo "$p"; return; }
    sleep 0.1
  done
  echo "bench_remote: $1 never said it was listening" >&2; exit 1
}
http_port=$(port_of "$work/http.log")
s3_port=$(port_of "$work/s3.log")
export AWS_ACCESS_KEY_ID=S3RVER AWS_SECRET_ACCESS_KEY=S3RVER
export AWS_ENDPOINT_URL="http://$storage:$s3_port"
for f in "$work/www/shards"/*; do  # upload through the link, as a writer would
  curl -sf -X PUT --data-binary "@$f" --aws-sigv4 "aws:amz:us-east-1:s3" \
    --user "S3RVER:S3RVER" -H "x-amz-content-sha256: UNSIGNED-PAYLOAD" \
    "$AWS_ENDPOINT_URL/data/shards/$(basename "$f")" >/dev/null
done

# The relays on the worker host, adding the delay to each request.
$tb exec w2 node "$servers/delay.js" "$storage:$http_port" "$delay" >"$work/delay-http.log" 2>&1 &
$tb exec w2 node "$servers/delay.js" "$storage:$s3_port" "$delay" >"$work/delay-s3.log" 2>&1 &
delay_http=$(port_of "$work/delay-http.log")
delay_s3=$(port_of "$work/delay-s3.log")

curl_shards() {  # base URL, label: every whole shard, 4 transfers at once
  local t0 t1
  t0=$(date +%s.%N)
  seq -f "$1/shard-%06g.tar" 0 $((n - 1)) | $tb exec w2 xargs -P 4 -n 8 curl -sf -o /dev/null
  t1=$(date +%s.%N)
  awk -v b="$bytes" -v s="$(echo "$t1 - $t0" | bc)" -v l="$2" \
    'BEGIN { printf "{\"what\":\"%s\",\"bytes\":%d,\"seconds\":%.3f,\"mb_per_s\":%.2f}\n", l, b, s, b / s / 1e6 }'
}
prepflow_reads() {  # dataset, label, read-ahead requests
  $tb exec w2 env AWS_ENDPOINT_URL="$3" "$bin/remote_read_bench" --data "$1" \
    --read-ahead-requests "$4" --batch 128 | sed "s/^{/{\"what\":\"$2\",/"
}

for r in $(seq 1 "$rounds"); do
  curl_shards "http://$storage:$http_port/shards" "curl whole shards, http"
  prepflow_reads "http://$storage:$http_port/shards/shard-{000000..$last}.tar" \
    "prepflow per-sample reads, http" "$AWS_ENDPOINT_URL" "$read_ahead"
  prepflow_reads "s3://data/shards" "prepflow per-sample reads, s3" "$AWS_ENDPOINT_URL" "$read_ahead"
  curl_shards "http://127.0.0.1:$delay_http/shards" "curl whole shards, http +${delay}ms"
  prepflow_reads "http://127.0.0.1:$delay_http/shards/shard-{000000..$last}.tar" \
    "prepflow per-sample reads, http +${delay}ms" "$AWS_ENDPOINT_URL" "$read_ahead"
  prepflow_reads "s3://data/shards" "prepflow per-sample reads, s3 +${delay}ms" \
    "http://127.0.0.1:$delay_s3" "$read_ahead"
  prepflow_reads "s3://data/shards" "prepflow per-sample reads, s3 +${delay}ms, no read-ahead" \
    "http://127.0.0.1:$delay_s3" 0
done
