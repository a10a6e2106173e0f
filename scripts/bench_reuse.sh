#!/usr/bin/env bash
# Reuse on the testbed (issue 17's benchmark): WebDataset shards on an
# S3-compatible store (s3rver) on host w1, whose link is limited to BW_MBIT;
# the trainer reads them. Side by side, on the trainer:
#   - caches: a job with an empty --cache-dir (the first epoch: every sample
#     from storage), then the same job again (the cache holds the dataset:
#     what every later epoch gets);
#   - echoing: --echo 2 against fresh samples only, without a cache; and
#     --echo auto against fresh samples only over ECHO_EPOCHS epochs (auto's
#     first epoch measures, fresh; the planner picks the later ones' factor
#     from the storage rate it learnt, up to --max-echo MAX_ECHO).
#   - workers' caches: two workers (hosts w2, w3, links not limited) with
#     --cache-bytes run every sample's stages up to cut 3 (uint8 crops; the
#     trainer normalizes), reading from the store themselves: a first job
#     (empty caches, each sample read by its home worker), then a second job
#     (the caches hold the dataset: what every later epoch gets). The
#     workers are restarted each round, so the first job finds them empty.
# And curl fetching every whole shard (4 at once) from the trainer: what the
# link and the store give. Prints one JSON line per run (prepflow run --json,
# with a "what"); the figures go to docs/benchmarks.md.
#
#   sudo scripts/bench_reuse.sh DATA_DIR      (an ImageFolder; packed into shards first)
#   env: BW_MBIT=200 PIPELINE=imagenet-train THREADS=2 ROUNDS=3 SHARD_SAMPLES=64
#        ECHO_EPOCHS=4 MAX_ECHO=4
set -euo pipefail
cd "$(dirname "$0")/.."
data=${1:?usage: scripts/bench_reuse.sh DATA_DIR}
bw=${BW_MBIT:-200}
pipeline=${PIPELINE:-imagenet-train}
threads=${THREADS:-2}
rounds=${ROUNDS:-3}
shard_samples=${SHARD_SAMPLES:-64}
echo_epochs=${ECHO_EPOCHS:-4}
max_echo=${MAX_ECHO:-4}
bin=$PWD/build/bin
servers=$PWD/tests/servers
work=$(mktemp -d /tmp/prepflow-bench-reuse.XXXXXX)
tb=scripts/testbed.sh

cleanup() { $tb down >/dev/null 2>&1 || true; [ -n "${KEEP_LOGS:-}" ] && cp "$work"/*.log "$KEEP_LOGS"/ 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT

"$bin/prepflow" pack --data "$data" --out "$work/shards" --shard-samples "$shard_samples" >&2
$tb up 3 --bw "$bw" --bw-hosts w1 >&2
mkdir -p "$work/empty"
storage=$($tb addr w1)
$tb exec w1 env LISTEN_HOST=0.0.0.0 node --openssl-legacy-provider "$servers/serve.js" s3 \
  "$work/s3" data >"$work/s3.log" 2>&1 &
for _ in $(seq 1 100); do
  port=$(sed -n 's/^listening .*:\([0-9]*\)$/\1/p' "$work/s3.log")
  [ -n "$port" ] && break
  sleep 0.1
done
[ -n "$port" ] || { echo "bench_reuse: s3rver never said it was listening" >&2; exit 1; }
export AWS_ACCESS_KEY_ID=S3RVER AWS_SECRET_ACCESS_KEY=S3RVER
export AWS_ENDPOINT_URL="http://$storage:$port"
for f in "$work/shards"/*; do
  $tb exec trainer curl -sf -X PUT --data-binary "@$f" --aws-sigv4 "aws:amz:us-east-1:s3" \
    --user "S3RVER:S3RVER" -H "x-amz-content-sha256: UNSIGNED-PAYLOAD" \
    "$AWS_ENDPOINT_URL/data/shards/$(basename "$f")" >/dev/null
done

run() {  # label, flags...: one job on the trainer, its JSON line with the label
  local label=$1
  shift
  $tb exec trainer env AWS_ENDPOINT_URL="$AWS_ENDPOINT_URL" "$bin/prepflow" run \
    --data s3://data/shards --pipeline "$pipeline" --threads "$threads" --index-cache-dir "" \
    --json "$@" 2>>"$work/run.log" | tail -n 1 | sed "s/^{/{\"what\":\"$label\",/"
}

curl_shards() {  # every whole shard, 4 transfers at once, signed as prepflow signs
  local t0 t1 bytes
  bytes=$(cat "$work/shards"/*.tar | wc -c)
  t0=$(date +%s.%N)
  ls "$work/shards" | grep '\.tar$' | sed "s|^|$AWS_ENDPOINT_URL/data/shards/|" |
    $tb exec trainer xargs -P 4 -n 1 curl -sf -o /dev/null --aws-sigv4 "aws:amz:us-east-1:s3" \
      --user "S3RVER:S3RVER" \
      -H "x-amz-content-sha256: e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
  t1=$(date +%s.%N)
  awk -v b="$bytes" -v s="$(echo "$t1 - $t0" | bc)" \
    'BEGIN { printf "{\"what\":\"curl whole shards\",\"bytes\":%d,\"seconds\":%.3f,\"mb_per_s\":%.2f}\n", b, s, b / s / 1e6 }'
}

start_workers() {  # -> $workers: w2 and w3, caches empty
  workers="" worker_pids=""
  for w in w2 w3; do
    rm -f "$work/$w.port"
    $tb exec "$w" env AWS_ENDPOINT_URL="$AWS_ENDPOINT_URL" "$bin/prepflow-worker" \
      --listen "$($tb addr "$w")" --insecure --data-root "$work/empty" --cache-bytes $((1 << 30)) \
      --allow-url-prefix "s3://data/" \
      --port-file "$work/$w.port" >/dev/null 2>>"$work/$w.log" &
    worker_pids="$worker_pids $!"
  done
  for w in w2 w3; do
    for _ in $(seq 100); do [ -s "$work/$w.port" ] && break; sleep 0.1; done
    workers="${workers:+$workers,}$($tb addr "$w"):$(cat "$work/$w.port")"
  done
}
stop_workers() {
  kill $worker_pids 2>/dev/null || true
  wait $worker_pids 2>/dev/null || true
}

for r in $(seq 1 "$rounds"); do
  start_workers
  run "workers' caches: first epoch (empty)" --offload cut=3 --workers "$workers"
  run "workers' caches: a later epoch (they hold the dataset)" --offload cut=3 --workers "$workers"
  stop_workers
  curl_shards
  rm -rf "$work/cache"
  run "cache: first epoch (empty --cache-dir)" --cache-dir "$work/cache"
  run "cache: a later epoch (the cache holds the dataset)" --cache-dir "$work/cache"
  run "fresh samples only" --echo 1
  run "echo 2" --echo 2
  run "fresh samples only, $echo_epochs epochs" --echo 1 --epochs "$echo_epochs"
  run "echo auto, $echo_epochs epochs" --echo auto --max-echo "$max_echo" --epochs "$echo_epochs"
done
