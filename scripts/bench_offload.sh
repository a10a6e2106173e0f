#!/usr/bin/env bash
# End-to-end offloading on the testbed: a trainer host limited to 0.5 core
# and two worker hosts limited to 0.5 core each (cgroup quotas), demand
# unbounded. Runs imagenet-train with --offload off, auto, and every static
# mode (cut=K for each K with remote_fraction 0.25/0.5/0.75/1), and prints one
# JSON object: every mode's rate, auto/off and auto/best-static, and the plan
# auto chose. With BW_MBIT set, the workers' links are limited too and auto is
# told the limit (--bandwidth-mbps).
#
#   scripts/bench_offload.sh [DATA]     env: EPOCHS (8), BW_MBIT (unset), CPU (0.5)
# Needs root (network namespaces, cgroups).
set -euo pipefail
cd "$(dirname "$0")/.."
data=$(realpath "${1:-../shared/datasets/photos-512}")
epochs=${EPOCHS:-8}
cpu=${CPU:-0.5}
bw=${BW_MBIT:-}
scripts/setup.sh >&2
tb=scripts/testbed.sh
work=$(mktemp -d)
cleanup() { "$tb" down >/dev/null 2>&1 || true; rm -rf "$work"; }
trap cleanup EXIT

"$tb" up 2 --cpu "$cpu" --trainer-cpu "$cpu" ${bw:+--bw "$bw"} >&2
workers=""
for w in w1 w2; do
  "$tb" exec "$w" build/bin/prepflow-worker --listen "$("$tb" addr "$w")" --data-root "$data" \
    --threads 1 --port-file "$work/$w.port" >/dev/null 2>"$work/$w.err" &
done
for w in w1 w2; do
  for _ in $(seq 100); do [ -s "$work/$w.port" ] && break; sleep 0.1; done
  workers="${workers:+$workers,}$("$tb" addr "$w"):$(cat "$work/$w.port")"
done
find "$data" -type f -exec cat {} + >/dev/null

run() {  # mode -> JSON line
  "$tb" exec trainer build/bin/prepflow run --data "$data" --threads 1 --epochs "$epochs" \
    --offload "$1" --workers "$workers" --worker-timeout 60 ${bw:+--bandwidth-mbps "$bw"} --json \
    2>>"$work/runs.err" | tail -n 1
}
modes=(off auto)
for k in 1 2 3 4; do for f in 0.25 0.5 0.75 1; do modes+=("cut=$k,remote_fraction=$f"); done; done
for m in "${modes[@]}"; do
  echo "bench_offload: $m" >&2
  printf '%s\t%s\n' "$m" "$(run "$m")" >>"$work/results.tsv"
done

python3 - "$work/results.tsv" "$cpu" "${bw:-0}" <<'PY'
import json, sys
rows = {}
for line in open(sys.argv[1]):
    mode, js = line.rstrip("\n").split("\t", 1)
    rows[mode] = json.loads(js)
rate = {m: r["images_per_s"] for m, r in rows.items()}
static = {m: v for m, v in rate.items() if m.startswith("cut=")}
best = max(static, key=static.get)
checksums = {r["checksum"] for r in rows.values()}
print(json.dumps({
    "benchmark": "offload_end_to_end", "cpu_per_host": float(sys.argv[2]),
    "bandwidth_mbit": float(sys.argv[3]) or None,
    "off_images_per_s": round(rate["off"], 1), "auto_images_per_s": round(rate["auto"], 1),
    "best_static": best, "best_static_images_per_s": round(static[best], 1),
    "auto_vs_off": round(rate["auto"] / rate["off"], 2),
    "auto_vs_best_static": round(rate["auto"] / static[best], 3),
    "auto_plan": rows["auto"].get("plan"), "auto_plan_changes": rows["auto"].get("plan_changes"),
    "all_checksums_equal": len(checksums) == 1,
    "rates": {m: round(v, 1) for m, v in rate.items()},
}))
PY
