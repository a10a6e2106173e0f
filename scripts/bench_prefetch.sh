#!/usr/bin/env bash
# Batches ahead (--prefetch-seconds) where a split has both sides bound: the
# testbed's light scenario (trainer 1 core, two workers of 0.5 core,
# bench/light.pbtxt) at a static split, each setting once per round in turn,
# so each round's runs share the machine's mood. Prints one JSON object:
# per setting the rates, their median, the median ratio to the first
# setting's run of the same round, and the median cores the trainer and the
# workers kept busy (of 1 core each side: the trainer's from its --json, the
# workers' from their processes' CPU time).
#
#   sudo scripts/bench_prefetch.sh [DATA]
#   env: SETTINGS ("0 0.25 0.5": --prefetch-seconds values), ROUNDS (6), EPOCHS (40),
#        SPLIT (cut=3,remote_fraction=0.5)
set -euo pipefail
cd "$(dirname "$0")/.."
data=$(realpath "${1:-../shared/datasets/photos-512}")
settings=${SETTINGS:-0 0.25 0.5}
rounds=${ROUNDS:-6}
epochs=${EPOCHS:-40}
split=${SPLIT:-cut=3,remote_fraction=0.5}
tb=scripts/testbed.sh
work=$(mktemp -d)
cleanup() { "$tb" down >/dev/null 2>&1 || true; rm -rf "$work"; }
trap cleanup EXIT
scripts/setup.sh >&2
"$tb" up 2 --cpu 0.5 --trainer-cpu 1 >&2

hz=$(getconf CLK_TCK)
worker_cpu() {  # the CPU seconds the running workers have used
  local total=0 p
  for p in $(pgrep -f "prepflow-worker .*--port-file $work/"); do
    total=$(awk -v t="$total" -v hz="$hz" '{ print t + ($14 + $15) / hz }' "/proc/$p/stat")
  done
  echo "$total"
}

run() {  # setting round -> one JSON line
  local pids=() h addrs="" c0 c1 t0 t1
  for h in w1 w2; do
    rm -f "$work/$h.port"
    "$tb" exec "$h" build/bin/prepflow-worker --listen "$("$tb" addr "$h")" --port 7700 --insecure \
      --data-root "$data" --port-file "$work/$h.port" >/dev/null 2>>"$work/$h.err" &
    pids+=($!)
    addrs="${addrs:+$addrs,}$("$tb" addr "$h"):7700"
  done
  for h in w1 w2; do
    for _ in $(seq 100); do [ -s "$work/$h.port" ] && break; sleep 0.1; done
  done
  c0=$(worker_cpu) t0=$(date +%s.%N)
  "$tb" exec trainer build/bin/prepflow run --data "$data" --index-cache-dir "" \
    --pipeline bench/light.pbtxt --epochs "$epochs" --json --workers "$addrs" --offload "$split" \
    --prefetch-seconds "$1" 2>>"$work/trainer.err" | tail -n 1 >"$work/run.json"
  c1=$(worker_cpu) t1=$(date +%s.%N)
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
  python3 - "$work/run.json" "$1" "$2" "$c0" "$c1" "$t0" "$t1" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
workers = (float(sys.argv[5]) - float(sys.argv[4])) / (float(sys.argv[7]) - float(sys.argv[6]))
print(json.dumps({"setting": sys.argv[2], "round": int(sys.argv[3]),
                  "images_per_s": d["images_per_s"], "checksum": d["checksum"],
                  "trainer_busy": d["cpu_seconds"] / d["seconds"], "workers_busy": workers}))
PY
}

for r in $(seq "$rounds"); do
  for s in $settings; do
    echo "bench_prefetch: round $r: --prefetch-seconds $s" >&2
    run "$s" "$r" >>"$work/runs.jsonl"
  done
done

python3 - "$work/runs.jsonl" "$split" "$epochs" <<'PY'
import collections, json, statistics, sys
runs = [json.loads(l) for l in open(sys.argv[1])]
by = collections.defaultdict(dict)
for x in runs:
    by[x["setting"]][x["round"]] = x
first = next(iter(by))
out = {"benchmark": "prefetch_seconds", "split": sys.argv[2], "epochs": int(sys.argv[3]),
       "rounds": len(by[first]), "all_checksums_equal": len({x["checksum"] for x in runs}) == 1}
for s, rs in by.items():
    rates = [rs[r]["images_per_s"] for r in sorted(rs)]
    out[s] = {"rates": [round(x) for x in rates], "median": round(statistics.median(rates)),
              "vs_first": round(statistics.median(
                  rs[r]["images_per_s"] / by[first][r]["images_per_s"] for r in rs), 3),
              "trainer_busy": round(statistics.median(x["trainer_busy"] for x in rs.values()), 3),
              "workers_busy": round(statistics.median(x["workers_busy"] for x in rs.values()), 3)}
print(json.dumps(out))
PY
