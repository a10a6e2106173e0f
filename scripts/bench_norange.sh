#!/usr/bin/env bash
# WebDataset shards over an HTTP server that ignores Range requests
# (Python's http.server) against one that does them (http-server), the same
# shards side by side, interleaved rounds; one JSON line per run.
#
#   scripts/bench_norange.sh [IMAGEFOLDER] [ROUNDS]
#     IMAGEFOLDER  packed into 8 shards (default ../shared/datasets/photos-512)
set -euo pipefail
cd "$(dirname "$0")/.."
data=${1:-../shared/datasets/photos-512}
rounds=${2:-3}
prepflow=build/bin/prepflow
work=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null; rm -rf "$work"' EXIT
n=$(find "$data" -type f | wc -l)
"$prepflow" pack --data "$data" --out "$work/www/shards" --shard-samples $(((n + 7) / 8)) >/dev/null
mkdir -p "$work/www/bare" && cp "$work"/www/shards/*.tar "$work/www/bare/"
python3 tests/servers/plain_http.py "$work/www" >"$work/plain.out" 2>/dev/null &
node tests/servers/serve.js http "$work/www" >"$work/range.out" 2>&1 &
until grep -q listening "$work/plain.out" && grep -q listening "$work/range.out"; do sleep 0.2; done
for round in $(seq "$rounds"); do
  for server in plain range; do
    addr=$(sed -n 's/listening //p' "$work/$server.out")
    for folder in bare shards; do
      start=$(date +%s.%N)
      out=$(XDG_CACHE_HOME="$work/xdg-$server-$folder-$round" "$prepflow" run --threads 2 \
        --data "http://$addr/$folder/shard-{000000..000007}.tar" --pipeline imagenet-train \
        --json 2>/dev/null | tail -1)
      seconds=$(awk "BEGIN { print $(date +%s.%N) - $start }")
      echo "$out" | python3 -c '
import json, sys
d = json.load(sys.stdin)
keys = ("images", "errors", "checksum", "storage_requests", "storage_retries",
        "storage_whole_objects", "storage_bytes_read")
print(json.dumps(dict(round=int(sys.argv[1]), server=sys.argv[2], sidecars=sys.argv[3] == "shards",
                      seconds=float(sys.argv[4]), **{k: d[k] for k in keys})))' \
        "$round" "$server" "$folder" "$seconds"
    done
  done
done
