#!/usr/bin/env bash
# Worker classes and cost on the testbed (scripts/testbed.sh; needs root): a
# scheduler on the trainer's host and four workers of CORES cores each, w1
# and w2 of class spot at SPOT a core-hour, w3 and w4 on-demand at DEAR. A
# job asks for WANT cores (--max-remote-cores) with --offload auto, for
# EPOCHS epochs, in two set-ups side by side, ROUNDS times:
#   priced  every worker tells the scheduler its class's price: grants take
#           the cheapest cores first
#   flat    every worker tells the same price (the mean), as a scheduler
#           that knows no prices would see them; the on-demand workers come
#           first in its order (their ids sort first), as they may anywhere
# For each run: images/s, the grant's cost an hour at the true prices (from
# the workers granted at the end), and the cost per epoch. One JSON line a
# run.
#
#   sudo scripts/bench_cost.sh [DATA]
#   env: CORES (1), WANT (2), EPOCHS (20), ROUNDS (2), SPOT (0.012), DEAR (0.04),
#        KEEP_LOGS (a folder for every run's log and the daemons')
set -euo pipefail
cd "$(dirname "$0")/.."
data=$(realpath "${1:-../shared/datasets/photos-512}")
cores=${CORES:-1} want=${WANT:-2} epochs=${EPOCHS:-20} rounds=${ROUNDS:-2}
spot=${SPOT:-0.012} dear=${DEAR:-0.04}
tb=scripts/testbed.sh
work=$(mktemp -d)
cleanup() {
  pkill -f "build/bin/prepflow-worker --listen 10.77" 2>/dev/null || true
  pkill -f "build/bin/prepflow-scheduler --listen 10.77" 2>/dev/null || true
  "$tb" down >/dev/null 2>&1 || true
  if [ -n "${KEEP_LOGS:-}" ]; then mkdir -p "$KEEP_LOGS" && cp -r "$work"/. "$KEEP_LOGS"/; fi
  rm -rf "$work"
}
trap cleanup EXIT
"$tb" up 4 --cpu "$cores" --trainer-cpu 0.5 >&2

run() {  # priced|flat round -> one JSON line
  local mode=$1 round=$2 extra id price
  cleanup_daemons
  rm -f "$work/sched.port"
  "$tb" exec trainer build/bin/prepflow-scheduler --listen "$("$tb" addr trainer)" --insecure \
    --port 0 --port-file "$work/sched.port" --heartbeat-seconds 0.5 --expire-after 3 \
    >/dev/null 2>>"$work/scheduler.err" &
  for _ in $(seq 100); do [ -s "$work/sched.port" ] && break; sleep 0.05; done
  local scheduler
  scheduler="$("$tb" addr trainer):$(cat "$work/sched.port")"
  for h in w1 w2 w3 w4; do
    case $h in w1|w2) extra="--class spot" price=$spot id=z-$h ;; *) extra="--class on-demand" price=$dear id=a-$h ;; esac
    [ "$mode" = flat ] && price=$(awk -v a="$spot" -v b="$dear" 'BEGIN { print (a + b) / 2 }')
    # shellcheck disable=SC2086
    "$tb" exec "$h" build/bin/prepflow-worker --listen "$("$tb" addr "$h")" --port 7700 --insecure \
      --data-root "$data" --scheduler "$scheduler" --worker-id "$id" $extra \
      --cost-per-core-hour "$price" >/dev/null 2>>"$work/$h.err" &
  done
  sleep 2  # every worker registered
  "$tb" exec trainer build/bin/prepflow run --data "$data" --pipeline imagenet-train \
    --epochs "$epochs" --offload auto --scheduler "$scheduler" --max-remote-cores "$want" --json \
    2>"$work/run.$mode.$round.err" | tail -n 1 >"$work/run.json"
  cleanup_daemons
  python3 - "$work/run.json" "$mode" "$spot" "$dear" "$epochs" "$("$tb" addr w1)" \
    "$("$tb" addr w2)" <<'PY'
import json, sys
path, mode, spot, dear, epochs, w1, w2 = sys.argv[1:]
d = json.load(open(path))
price = lambda address: float(spot) if address.split(":")[0] in (w1, w2) else float(dear)
rate = sum(w["granted_cores"] * price(w["address"]) for w in d["workers"])
seconds = d["images"] / d["images_per_s"]
print(json.dumps({"benchmark": "cost", "mode": mode, "images_per_s": round(d["images_per_s"], 1),
                  "granted_cores": round(d["granted_cores"], 2),
                  "cost_per_hour": round(rate, 4),
                  "reported_cost_per_hour": round(d["grant_cost_per_hour"], 4),
                  "cost_per_epoch": rate * seconds / 3600 / int(epochs),
                  "checksum": d["checksum"]}))
PY
}
cleanup_daemons() {
  pkill -f "build/bin/prepflow-worker --listen 10.77" 2>/dev/null || true
  pkill -f "build/bin/prepflow-scheduler --listen 10.77" 2>/dev/null || true
  sleep 0.5
}

for r in $(seq "$rounds"); do
  run priced "$r"
  run flat "$r"
done
