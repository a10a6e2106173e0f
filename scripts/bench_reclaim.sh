#!/usr/bin/env bash
# What marking a class as being reclaimed buys and costs, on the testbed
# (scripts/testbed.sh; needs root). A scheduler on the trainer's host and
# four workers of CORES cores: w1 and w2 of class spot at SPOT a core-hour,
# w3 and w4 on-demand at DEAR. A job asks for WANT cores (--max-remote-cores)
# with --offload auto for EPOCHS epochs: its grant takes the two spot workers.
# Once the job has run AFTER seconds on them, spot capacity goes in a wave:
#   1. w1 is drained with `prepflow-worker --drain --drain-reason REASON`;
#   2. NOTICE seconds later w2 is SIGKILLed (capacity taken back without
#      notice, as a spot VM's can be once its notice has passed).
# Two reasons side by side, ROUNDS times:
#   reclaimed  the scheduler marks the spot class: the job moves off w2 too
#              (to on-demand cores) before w2 goes
#   stop       nothing is marked: the job keeps w2 until it is killed, and
#              the items w2 held are re-issued
# For each run: images/s, items re-issued, workers drained, the job's cost
# (grant_cost: each grant's rate over the time it held) per epoch, and
# whether every sample came once with the same checksum. One JSON line a run.
#
#   sudo scripts/bench_reclaim.sh [DATA]
#   env: CORES (1), WANT (2), EPOCHS (40), ROUNDS (3), AFTER (1.5), NOTICE (2),
#        SPOT (0.012), DEAR (0.04), KEEP_LOGS (a folder for every log)
set -euo pipefail
cd "$(dirname "$0")/.."
data=$(realpath "${1:-../shared/datasets/photos-512}")
cores=${CORES:-1} want=${WANT:-2} epochs=${EPOCHS:-40} rounds=${ROUNDS:-3}
after=${AFTER:-1.5} notice=${NOTICE:-2} spot=${SPOT:-0.012} dear=${DEAR:-0.04}
tb=scripts/testbed.sh
work=$(mktemp -d)
cleanup_daemons() {
  pkill -f "build/bin/prepflow-worker --listen 10.77" 2>/dev/null || true
  pkill -f "build/bin/prepflow-scheduler --listen 10.77" 2>/dev/null || true
  sleep 0.5
}
cleanup() {
  cleanup_daemons
  "$tb" down >/dev/null 2>&1 || true
  if [ -n "${KEEP_LOGS:-}" ]; then mkdir -p "$KEEP_LOGS" && cp -r "$work"/. "$KEEP_LOGS"/; fi
  rm -rf "$work"
}
trap cleanup EXIT
"$tb" up 4 --cpu "$cores" --trainer-cpu 0.5 >&2

start_daemons() {  # sets scheduler
  rm -f "$work/sched.port" "$work"/w?.pid
  "$tb" exec trainer build/bin/prepflow-scheduler --listen "$("$tb" addr trainer)" --insecure \
    --port 0 --port-file "$work/sched.port" --heartbeat-seconds 0.5 --expire-after 3 \
    >/dev/null 2>>"$work/scheduler.err" &
  for _ in $(seq 100); do [ -s "$work/sched.port" ] && break; sleep 0.05; done
  scheduler="$("$tb" addr trainer):$(cat "$work/sched.port")"
  local h class price
  for h in w1 w2 w3 w4; do
    case $h in w1|w2) class=spot price=$spot ;; *) class=on-demand price=$dear ;; esac
    "$tb" exec "$h" build/bin/prepflow-worker --listen "$("$tb" addr "$h")" --port 7700 \
      --insecure --data-root "$data" --scheduler "$scheduler" --worker-id "$h" --class "$class" \
      --cost-per-core-hour "$price" --pid-file "$work/$h.pid" >/dev/null 2>>"$work/$h.err" &
  done
  sleep 2  # every worker registered
}

# The wave, once the job has run `after` seconds on its workers.
wave() {  # reason log
  for _ in $(seq 400); do grep -q "opened job" "$2" 2>/dev/null && break; sleep 0.05; done
  sleep "$after"
  build/bin/prepflow-worker --drain --drain-reason "$1" --pid-file "$work/w1.pid" \
    2>>"$work/drain.err" &
  sleep "$notice"
  kill -KILL "$(cat "$work/w2.pid")"
  wait
}

run() {  # reason round -> one JSON line
  local reason=$1 round=$2 log="$work/run.$1.$2.err"
  cleanup_daemons
  start_daemons
  wave "$reason" "$log" &
  local waver=$!
  "$tb" exec trainer build/bin/prepflow run --data "$data" --pipeline imagenet-train \
    --epochs "$epochs" --offload auto --scheduler "$scheduler" --max-remote-cores "$want" \
    --worker-timeout 5 --json 2>"$log" | tail -n 1 >"$work/run.json"
  wait "$waver" || true
  cleanup_daemons
  python3 - "$work/run.json" "$reason" "$epochs" <<'PY'
import json, sys
path, reason, epochs = sys.argv[1:]
d = json.load(open(path))
print(json.dumps({"benchmark": "reclaim", "reason": reason,
                  "images_per_s": round(d["images_per_s"], 1),
                  "reissued_items": d["reissued_items"], "drained_workers": d["drained_workers"],
                  "cost_per_epoch": d["grant_cost"] / int(epochs),
                  "exactly_once": d["images"] == d["samples_per_epoch"] * int(epochs)
                                  and d["errors"] == 0,
                  "checksum": d["checksum"]}))
PY
}

for r in $(seq "$rounds"); do
  run reclaimed "$r"
  run stop "$r"
done
