#!/usr/bin/env bash
# Does --offload auto find a tight link it is not told about? On the
# testbed: a trainer host and two worker hosts limited to CPU cores each
# (cgroup quotas), and the trainer's ingest link (what all workers send it
# together) limited to TRAINER_BW_MBIT. Side by side, ROUNDS times, one
# after another in each round:
#   - off: no workers;
#   - auto told the link (--bandwidth-mbps TRAINER_BW_MBIT);
#   - auto untold: it has to learn the link from workers whose credits are
#     all out while their CPUs idle (policy/replanner.h, "links").
# Prints one JSON object: the medians, untold/told, the untold runs' plans
# and the link they learnt (ingest_limit), and whether every checksum agrees.
#
#   sudo scripts/bench_link.sh [DATA]
#   env: TRAINER_BW_MBIT (100), CPU (1: each worker), TRAINER_CPU (0.5),
#        EPOCHS (30), ROUNDS (3), PIPELINE (imagenet-train)
set -euo pipefail
cd "$(dirname "$0")/.."
data=$(realpath "${1:-../shared/datasets/photos-512}")
bw=${TRAINER_BW_MBIT:-100}
cpu=${CPU:-1}
trainer_cpu=${TRAINER_CPU:-0.5}
epochs=${EPOCHS:-30}
rounds=${ROUNDS:-3}
pipeline=${PIPELINE:-imagenet-train}
tb=scripts/testbed.sh
work=$(mktemp -d)
cleanup() { "$tb" down >/dev/null 2>&1 || true; rm -rf "$work"; }
trap cleanup EXIT

source scripts/bench_lib.sh
"$tb" up 2 --cpu "$cpu" --trainer-cpu "$trainer_cpu" --trainer-bw "$bw" >&2
start_workers "$work" "$data" "w1 w2"
find "$data" -type f -exec cat {} + >/dev/null

run() {  # label, flags... -> one line: label <TAB> JSON (the log to $work/<label>.<round>.log)
  local label=$1
  shift
  "$tb" exec trainer build/bin/prepflow run --data "$data" --pipeline "$pipeline" \
    --epochs "$epochs" --workers "$workers" --worker-timeout 60 --json "$@" \
    2>"$work/$label.$round.log" | tail -n 1 | sed "s/^/$label\t/"
}
for round in $(seq "$rounds"); do
  echo "bench_link: round $round" >&2
  run off --offload off >>"$work/runs.tsv"
  run told --offload auto --bandwidth-mbps "$bw" >>"$work/runs.tsv"
  run untold --offload auto >>"$work/runs.tsv"
  grep -E "link binds|plan [0-9]+:" "$work/untold.$round.log" | head -n 4 >&2 || true
done

python3 - "$work/runs.tsv" "$bw" "$cpu" "$trainer_cpu" "$epochs" "$pipeline" "$work" <<'PY'
import glob, json, os, sys
runs, checksums, plans, limits = {}, set(), [], []
for line in open(sys.argv[1]):
    label, js = line.rstrip("\n").split("\t", 1)
    r = json.loads(js)
    runs.setdefault(label, []).append(r["images_per_s"])
    checksums.add(r["checksum"])
    if label == "untold":
        plans.append(r.get("plan"))
        limits.append(round(r.get("ingest_limit", 0) * 8 / 1e6, 1))
median = {k: sorted(v)[len(v) // 2] for k, v in runs.items()}
noted = sum(1 for f in glob.glob(os.path.join(sys.argv[7], "untold.*.log"))
            if "link binds" in open(f).read())
print(json.dumps({
    "benchmark": "untold_tight_link", "pipeline": sys.argv[6], "epochs": int(sys.argv[5]),
    "trainer_ingest_mbit": float(sys.argv[2]), "worker_cpu": float(sys.argv[3]),
    "trainer_cpu": float(sys.argv[4]), "rounds": len(runs["untold"]),
    "medians_images_per_s": {k: round(v, 1) for k, v in median.items()},
    "untold_vs_told": round(median["untold"] / median["told"], 3),
    "told_vs_off": round(median["told"] / median["off"], 2),
    "round_rates": {k: [round(x, 1) for x in v] for k, v in runs.items()},
    "untold_learnt_link_mbit": limits, "untold_runs_that_found_a_link": noted,
    "untold_plans": plans, "all_checksums_equal": len(checksums) == 1,
}))
PY
