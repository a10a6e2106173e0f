#!/usr/bin/env bash
# One-core benchmark of the local pipeline, side by side on the same files:
#   prepflow run --threads 1 (imagenet-train)
#   torchvision ImageFolder + DataLoader(num_workers=0), same transform
#   a plain full-image libjpeg-turbo decode loop (bench/decode_loop)
# Each program is pinned to one core (taskset) and the three alternate for
# ROUNDS rounds. "Per core" is images per CPU-second of each program's own
# timed loop (start-up excluded); wall-clock rates are reported beside them.
# Ratios are per round, then the median over rounds. One JSON object on stdout.
#
#   scripts/bench_local.sh [DATA]     (default ../shared/datasets/photos-512)
#   env: ROUNDS (5), CORE (0), EPOCHS (3, for the two C++ programs)
set -euo pipefail
cd "$(dirname "$0")/.."
data=${1:-../shared/datasets/photos-512}
rounds=${ROUNDS:-5}
core=${CORE:-0}
epochs=${EPOCHS:-3}
[ -d "$data" ] || { echo "bench_local: no dataset at $data" >&2; exit 2; }

scripts/setup.sh >&2
# torchvision for the comparison lives in Debian's python3 (not on the test path).
if ! /usr/bin/python3 -c 'import torchvision' 2>/dev/null; then
  echo "bench_local: installing python3-torch python3-torchvision" >&2
  sudo=""; [ "$(id -u)" -eq 0 ] || sudo="sudo"
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends \
    python3-torch python3-torchvision >&2
fi

# Warm the page cache so every program reads from memory.
find "$data" -type f -exec cat {} + >/dev/null

out=$(mktemp)
trap 'rm -f "$out"' EXIT
for r in $(seq "$rounds"); do
  echo "bench_local: round $r/$rounds" >&2
  taskset -c "$core" build/bin/prepflow run --data "$data" --threads 1 --epochs "$epochs" --json \
    | tail -n 1 >>"$out"
  taskset -c "$core" /usr/bin/python3 bench/torchvision_loader.py --data "$data" >>"$out"
  taskset -c "$core" build/bin/decode_loop --data "$data" --epochs "$epochs" >>"$out"
done

python3 - "$out" "$data" "$rounds" <<'PY'
import json, statistics, sys, platform
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
prep = [r for r in rows if r.get("command") == "run"]
tv = [r for r in rows if r.get("program") == "torchvision"]
dec = [r for r in rows if r.get("program") == "decode_loop"]
def med(rs, key):
    return statistics.median(r[key] for r in rs)
# Ratios are taken within each round (the three ran back to back), then the
# median over rounds: the machine is shared and its speed drifts.
def ratio(a, b, key):
    return statistics.median(x[key] / y[key] for x, y in zip(a, b))
print(json.dumps({
    "benchmark": "local_one_core", "data": sys.argv[2], "rounds": int(sys.argv[3]),
    "prepflow_images_per_cpu_s": round(med(prep, "images_per_cpu_s"), 1),
    "torchvision_images_per_cpu_s": round(med(tv, "images_per_cpu_s"), 1),
    "decode_loop_images_per_cpu_s": round(med(dec, "images_per_cpu_s"), 1),
    "ratio_vs_torchvision": round(ratio(prep, tv, "images_per_cpu_s"), 2),
    "ratio_vs_decode_loop": round(ratio(prep, dec, "images_per_cpu_s"), 3),
    "wall": {
        "prepflow_images_per_s": round(med(prep, "images_per_s"), 1),
        "torchvision_images_per_s": round(med(tv, "images_per_s"), 1),
        "decode_loop_images_per_s": round(med(dec, "images_per_s"), 1),
        "ratio_vs_torchvision": round(ratio(prep, tv, "images_per_s"), 2),
        "ratio_vs_decode_loop": round(ratio(prep, dec, "images_per_s"), 3),
    },
    "prepflow_checksums": sorted({r["checksum"] for r in prep}),
    "cpu": platform.machine(),
}))
PY
