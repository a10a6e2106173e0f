#!/usr/bin/env bash
# Two builds (or more) side by side on the testbed: for each round, each
# build's workers and trainer run the same job, one build after the other,
# so the machine's drift falls on every build alike. Prints one JSON line a
# run, then one summary line: each build's median samples/s, and each
# build's rate over the first build's in the same round (per pair and their
# median). Every run's checksum must agree. Workers are restarted before
# every run, so no run inherits another's caches or streams.
#
#   scripts/bench_pair.sh BUILD_BIN_DIR [BUILD_BIN_DIR...]
#     env: ROUNDS (3), EPOCHS (20), FLAGS (the trainer's: "--offload auto"),
#          WORKER_FLAGS (the workers'), UP (testbed: "2 --cpu 0.5 --trainer-cpu 0.5"),
#          DATA (../shared/datasets/photos-512), PIPELINE (imagenet-train)
#
# E.g. the commit before against this one (docs/benchmarks.md, "Caching
# workers take a busy home's samples too"):
#   git worktree add /tmp/before HEAD~1 && (build it there)
#   WORKER_FLAGS="--cache-bytes 1000000000" FLAGS="--offload remote" \
#     scripts/bench_pair.sh /tmp/before/build/bin build/bin
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 1 ] || { echo "usage: scripts/bench_pair.sh BIN_DIR [BIN_DIR...]" >&2; exit 2; }
for b in "$@"; do
  if [ ! -x "$b/prepflow" ] || [ ! -x "$b/prepflow-worker" ]; then
    echo "bench_pair: $b has no prepflow and prepflow-worker" >&2
    exit 2
  fi
done
rounds=${ROUNDS:-3}
epochs=${EPOCHS:-20}
data=$(realpath "${DATA:-../shared/datasets/photos-512}")
tb=scripts/testbed.sh
port=7700
work=$(mktemp -d)
pids=()
stop_workers() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
  pids=()
}
cleanup() { stop_workers; "$tb" down >/dev/null 2>&1 || true; rm -rf "$work"; }
trap cleanup EXIT

# shellcheck disable=SC2086
"$tb" up ${UP:-2 --cpu 0.5 --trainer-cpu 0.5} >&2
hosts=$("$tb" status | awk '$1 ~ /^w[0-9]+$/ { print $1 }')

run() {  # bin round -> one JSON line
  local bin=$1 workers=""
  for h in $hosts; do
    rm -f "$work/$h.port"
    # shellcheck disable=SC2086
    "$tb" exec "$h" "$bin/prepflow-worker" --listen "$("$tb" addr "$h")" --port "$port" --insecure \
      --data-root "$data" ${WORKER_FLAGS:-} --port-file "$work/$h.port" >/dev/null 2>>"$work/$h.err" &
    pids+=($!)
  done
  for h in $hosts; do
    for _ in $(seq 100); do [ -s "$work/$h.port" ] && break; sleep 0.1; done
    [ -s "$work/$h.port" ] || { echo "bench_pair: the worker on $h did not start" >&2; exit 1; }
    workers="${workers:+$workers,}$("$tb" addr "$h"):$port"
  done
  local json
  # shellcheck disable=SC2086
  json=$(timeout 300 "$tb" exec trainer "$bin/prepflow" run --data "$data" --index-cache-dir "" \
    --pipeline "${PIPELINE:-imagenet-train}" --epochs "$epochs" --worker-timeout 60 --json \
    --workers "$workers" ${FLAGS:---offload auto} 2>>"$work/trainer.log" | tail -n 1) || true
  stop_workers
  [[ "$json" == "{"* ]] || json='{"images_per_s": 0, "error": "no result"}'
  python3 -c 'import json, sys
d = json.loads(sys.argv[3])
keep = ("images_per_s", "checksum", "cache_hits", "cache_misses", "stolen_items", "hedged_items",
        "remote_images", "plan_prediction_error", "error")
print(json.dumps({"bin": sys.argv[1], "round": int(sys.argv[2]),
                  **{k: d[k] for k in keep if k in d}}))' "$bin" "$2" "$json"
}

for r in $(seq "$rounds"); do
  for bin in "$@"; do
    echo "bench_pair: round $r/$rounds: $bin" >&2
    run "$bin" "$r" | tee -a "$work/runs.jsonl"
  done
done

python3 - "$work/runs.jsonl" "$@" <<'PY'
import json, statistics, sys
runs = [json.loads(l) for l in open(sys.argv[1])]
bins = sys.argv[2:]
rate = {(r["bin"], r["round"]): r["images_per_s"] for r in runs}
rounds = sorted({r["round"] for r in runs})
out = {"benchmark": "pair", "bins": bins, "rounds": len(rounds),
       "all_checksums_equal": len({r.get("checksum") for r in runs}) == 1}
out["median_images_per_s"] = {b: round(statistics.median(rate[b, k] for k in rounds), 1) for b in bins}
base = bins[0]
for b in bins[1:]:
    pairs = [rate[b, k] / rate[base, k] for k in rounds if rate[base, k] > 0]
    out[f"{b} / {base}"] = {"per_pair": [round(p, 3) for p in pairs],
                            "median": round(statistics.median(pairs), 3) if pairs else None}
print(json.dumps(out))
PY
