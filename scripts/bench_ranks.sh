#!/usr/bin/env bash
# Ranks of one multi-GPU job sharing a node (issue 19). On the testbed: a
# trainer host with TRAINER_CPU cores (1) running RANKS (2) ranks of one
# training job at once, and two worker hosts with CPU cores (0.5) each, in a
# pool that prepflow-scheduler shares out (POOL=scheduler, the default; it
# runs on w1's host) or named to every rank (POOL=workers).
# Side by side, ROUNDS times, one after another in each round:
#   - shared: --offload auto, the ranks one job (--job, --local-ranks
#     RANKS): each plans with its share of the trainer's cores, and the
#     workers serve the job once;
#   - independent: --offload auto, each rank a job of its own that plans
#     with the whole trainer (--local-ranks 1, no --job), as every rank did
#     before;
#   - each static placement of STATICS, the ranks one job.
# A job's rate: all its ranks' samples over the slowest rank's wall time.
# Prints one JSON object: the medians, shared/independent, shared/best
# static, the plans, and whether each rank's checksum agrees across runs.
#
#   sudo scripts/bench_ranks.sh [DATA]
#   env: POOL (scheduler), RANKS (2), TRAINER_CPU (1), CPU (0.5: each worker),
#        EPOCHS (8), ROUNDS (3), PIPELINE (examples/pipelines/simclr.pipeline),
#        STATICS ("off remote cut=6,remote_fraction=0.5 cut=6,remote_fraction=0.33"),
#        KEEP_LOGS (a folder for the logs)
# The hosts' quotas should add up to no more than the machine's cores (here
# 2): a host whose quota the machine cannot give is slower than the planner
# is told, and its stalls look like a slow link.
set -euo pipefail
cd "$(dirname "$0")/.."
data=$(realpath "${1:-../shared/datasets/photos-512}")
ranks=${RANKS:-2}
trainer_cpu=${TRAINER_CPU:-1}
cpu=${CPU:-0.5}
epochs=${EPOCHS:-8}
rounds=${ROUNDS:-3}
pipeline=${PIPELINE:-examples/pipelines/simclr.pipeline}
statics=${STATICS:-off remote cut=6,remote_fraction=0.5 cut=6,remote_fraction=0.33}
pool=${POOL:-scheduler}
tb=scripts/testbed.sh
work=$(mktemp -d)
cleanup() {
  "$tb" down >/dev/null 2>&1 || true
  if [ -n "${KEEP_LOGS:-}" ]; then mkdir -p "$KEEP_LOGS" && cp -r "$work"/. "$KEEP_LOGS"/; fi
  rm -rf "$work"
}
trap cleanup EXIT

source scripts/bench_lib.sh
"$tb" up 2 --cpu "$cpu" --trainer-cpu "$trainer_cpu" >&2
if [ "$pool" = scheduler ]; then
  "$tb" exec w1 build/bin/prepflow-scheduler --listen "$("$tb" addr w1)" --insecure \
    --port-file "$work/scheduler.port" >/dev/null 2>"$work/scheduler.err" &
  for _ in $(seq 100); do [ -s "$work/scheduler.port" ] && break; sleep 0.1; done
  scheduler="$("$tb" addr w1):$(cat "$work/scheduler.port")"
  start_workers "$work" "$data" "w1 w2" --scheduler "$scheduler"
  source_flags=(--scheduler "$scheduler")
  sleep 7  # past the scheduler's settling period (--expire-after 6 s): grants as they run
else
  start_workers "$work" "$data" "w1 w2"
  source_flags=(--workers "$workers")
fi
find "$data" -type f -exec cat {} + >/dev/null

# run LABEL FLAGS...: the ranks at once on the trainer, each with FLAGS;
# appends "label <TAB> rank <TAB> JSON" to runs.tsv.
run() {
  local label=$1 r
  shift
  local pids=()
  for r in $(seq 0 $((ranks - 1))); do
    "$tb" exec trainer build/bin/prepflow run --data "$data" --pipeline "$pipeline" \
      --epochs "$epochs" "${source_flags[@]}" --worker-timeout 60 --json \
      --rank "$r" --world-size "$ranks" "$@" \
      >"$work/$label.$round.$r.json" 2>"$work/$label.$round.$r.log" &
    pids+=($!)
  done
  for r in "${!pids[@]}"; do
    wait "${pids[$r]}" || { echo "$label rank $r failed: $(tail -n 3 "$work/$label.$round.$r.log")" >&2; exit 1; }
    printf '%s\t%s\t%s\n' "$label" "$r" "$(tail -n 1 "$work/$label.$round.$r.json")" >>"$work/runs.tsv"
  done
}
for round in $(seq "$rounds"); do
  echo "bench_ranks: round $round" >&2
  run shared --offload auto --job "bench-$round" --local-ranks "$ranks"
  run independent --offload auto --local-ranks 1
  for s in $statics; do
    run "static:$s" --offload "$s" --job "bench-$round-$s" --local-ranks "$ranks"
  done
done

python3 - "$work/runs.tsv" "$ranks" "$trainer_cpu" "$cpu" "$epochs" "$pipeline" "$pool" <<'PY'
import collections, json, sys
# (label, round) -> the ranks' results, in run order (each round runs every label once).
runs = collections.defaultdict(list)
seen = collections.Counter()
for line in open(sys.argv[1]):
    label, rank, js = line.rstrip("\n").split("\t", 2)
    r = json.loads(js)
    key = (label, seen[(label, rank)])
    seen[(label, rank)] += 1
    runs[key].append(r)
rates, plans, checksums = collections.defaultdict(list), {}, collections.defaultdict(set)
for (label, _), rs in runs.items():
    rates[label].append(sum(r["images"] for r in rs) / max(r["seconds"] for r in rs))
    plans.setdefault(label, [r.get("plan", "") for r in rs])
    for r in rs:
        checksums[r["rank"]].add(r["checksum"])
median = {k: sorted(v)[len(v) // 2] for k, v in rates.items()}
static = {k: v for k, v in median.items() if k.startswith("static:")}
best = max(static, key=static.get)
print(json.dumps({
    "benchmark": "ranks_sharing_a_node", "pool": sys.argv[7], "pipeline": sys.argv[6],
    "epochs": int(sys.argv[5]),
    "ranks": int(sys.argv[2]), "trainer_cpu": float(sys.argv[3]), "worker_cpu": float(sys.argv[4]),
    "rounds": len(rates["shared"]),
    "medians_images_per_s": {k: round(v, 1) for k, v in median.items()},
    "shared_vs_independent": round(median["shared"] / median["independent"], 2),
    "best_static": best,
    "shared_vs_best_static": round(median["shared"] / static[best], 3),
    "round_rates": {k: [round(x, 1) for x in v] for k, v in rates.items()},
    "first_round_plans": plans,
    "each_ranks_checksum_equal_across_runs": all(len(c) == 1 for c in checksums.values()),
}))
PY
