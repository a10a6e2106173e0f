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
# (curl against S3 signs as prepflow does.) Prints one JSON line per
# measurement; docs/benchmarks.md has the figures.
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
for f in "$work/www/shards"/*; do  # uploaded from the trainer host, as a writer would
  $tb exec trainer curl -sf -X PUT --data-binary "@$f" --aws-sigv4 "aws:amz:us-east-1:s3" \
    --user "S3RVER:S3RVER" -H "x-amz-content-sha256: UNSIGNED-PAYLOAD" \
    "$AWS_ENDPOINT_URL/data/shards/$(basename "$f")" >/dev/null
done

# The relays on the worker host, adding the delay to each request.
$tb exec w2 node "$servers/delay.js" "$storage:$http_port" "$delay" >"$work/delay-http.log" 2>&1 &
$tb exec w2 node "$servers/delay.js" "$storage:$s3_port" "$delay" >"$work/delay-s3.log" 2>&1 &
delay_http=$(port_of "$work/delay-http.log")
delay_s3=$(port_of "$work/delay-s3.log")

curl_shards() {  # base URL, label[, curl args]: every whole shard, 4 transfers at once
  local t0 t1 base=$1 label=$2
  shift 2
  t0=$(date +%s.%N)
  seq -f "$base/shard-%06g.tar" 0 $((n - 1)) | $tb exec w2 xargs -P 4 -n 1 curl -sf -o /dev/null "$@"
  t1=$(date +%s.%N)
  awk -v b="$bytes" -v s="$(echo "$t1 - $t0" | bc)" -v l="$label" \
    'BEGIN { printf "{\"what\":\"%s\",\"bytes\":%d,\"seconds\":%.3f,\"mb_per_s\":%.2f}\n", l, b, s, b / s / 1e6 }'
}
s3_curl=(--aws-sigv4 "aws:amz:us-east-1:s3" --user "S3RVER:S3RVER"
  -H "x-amz-content-sha256: e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855")
# The same per-sample range requests as prepflow makes, by one curl (64 at
# once): what the server gives for range requests. Per-transfer options go in
# each block of the config (`next` resets them); EXTRA is where the signing
# options go for S3.
for idx in "$work/www/shards"/*.tar.idx; do
  shard=$(basename "$idx" .idx)
  awk -F'\t' -v s="$shard" 'NR > 2 && $3 !~ /\.cls$/ {
    printf "next\nurl = \"BASE/%s\"\nrange = %d-%d\noutput = /dev/null\nsilent\nfail\nEXTRA\n",
      s, $1, $1 + $2 - 1 }' "$idx"
done | tail -n +2 >"$work/ranges.cfg"
image_bytes=$(awk -F'\t' 'FNR > 2 && $3 !~ /\.cls$/ { s += $2 } END { printf "%d", s }' \
  "$work/www/shards"/*.tar.idx)
s3_cfg='aws-sigv4 = "aws:amz:us-east-1:s3"\nuser = "S3RVER:S3RVER"\nheader = "x-amz-content-sha256: e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"'
curl_ranges() {  # base URL, label, per-transfer config lines
  local t0 t1
  sed "s|BASE|$1|; s|^EXTRA$|$3|" "$work/ranges.cfg" >"$work/ranges-now.cfg"
  t0=$(date +%s.%N)
  $tb exec w2 curl -Z --parallel-max 64 -K "$work/ranges-now.cfg"
  t1=$(date +%s.%N)
  awk -v b="$image_bytes" -v s="$(echo "$t1 - $t0" | bc)" -v l="$2" \
    'BEGIN { printf "{\"what\":\"%s\",\"seconds\":%.3f,\"mb_per_s\":%.2f}\n", l, s, b / s / 1e6 }'
}

prepflow_reads() {  # dataset, label, read-ahead requests
  $tb exec w2 env AWS_ENDPOINT_URL="$3" "$bin/remote_read_bench" --data "$1" \
    --read-ahead-requests "$4" --batch 128 | sed "s/^{/{\"what\":\"$2\",/"
}

for r in $(seq 1 "$rounds"); do
  curl_shards "http://$storage:$http_port/shards" "curl whole shards, http"
  prepflow_reads "http://$storage:$http_port/shards/shard-{000000..$last}.tar" \
    "prepflow per-sample reads, http" "$AWS_ENDPOINT_URL" "$read_ahead"
  curl_ranges "http://$storage:$http_port/shards" "curl per-sample ranges (64 at once), http" ""
  curl_shards "$AWS_ENDPOINT_URL/data/shards" "curl whole shards, s3" "${s3_curl[@]}"
  prepflow_reads "s3://data/shards" "prepflow per-sample reads, s3" "$AWS_ENDPOINT_URL" "$read_ahead"
  curl_ranges "$AWS_ENDPOINT_URL/data/shards" "curl per-sample ranges (64 at once), s3" "$s3_cfg"
  curl_shards "http://127.0.0.1:$delay_http/shards" "curl whole shards, http +${delay}ms"
  prepflow_reads "http://127.0.0.1:$delay_http/shards/shard-{000000..$last}.tar" \
    "prepflow per-sample reads, http +${delay}ms" "$AWS_ENDPOINT_URL" "$read_ahead"
  curl_shards "http://127.0.0.1:$delay_s3/data/shards" "curl whole shards, s3 +${delay}ms" \
    "${s3_curl[@]}"
  prepflow_reads "s3://data/shards" "prepflow per-sample reads, s3 +${delay}ms" \
    "http://127.0.0.1:$delay_s3" "$read_ahead"
  prepflow_reads "s3://data/shards" "prepflow per-sample reads, s3 +${delay}ms, no read-ahead" \
    "http://127.0.0.1:$delay_s3" 0
done
