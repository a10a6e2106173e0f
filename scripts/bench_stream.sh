#!/usr/bin/env bash
# The wire: one client ingesting from a worker over loopback, on one job
# stream or many (STREAMS), beside what iperf3 measures for one TCP stream on
# the same loopback, in one run.
# The worker runs cut 0 over 4 MiB files already in the page cache, so its
# prefix is nearly free and the transport is what is measured
# (bench/stream_bench). Prints one JSON object with gbytes_per_s,
# iperf3_gbytes_per_s, ratio, client_cpu_s_per_gb, iperf3's receiver's
# (iperf3_receiver_cpu_s_per_gb: the kernel's bare receive on this machine
# now), their ratio (cpu_vs_iperf3_receiver) and client_threads (medians over
# ROUNDS).
#
#   scripts/bench_stream.sh     env: ROUNDS (3), SECONDS_EACH (5), ITEM_SAMPLES (4), STREAMS (1),
#                               CREDITS (8: items in flight per stream)
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${ROUNDS:-3}
secs=${SECONDS_EACH:-5}
item=${ITEM_SAMPLES:-4}
streams=${STREAMS:-1}
credits=${CREDITS:-8}

scripts/setup.sh >&2
if ! command -v iperf3 >/dev/null; then
  echo "bench_stream: installing iperf3" >&2
  sudo=""; [ "$(id -u)" -eq 0 ] || sudo="sudo"
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends iperf3 >&2
fi

work=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$work"; }
trap cleanup EXIT
mkdir -p "$work/data/c0"
for i in $(seq -w 1 48); do head -c 4194304 /dev/urandom >"$work/data/c0/f$i.jpg"; done

build/bin/prepflow-worker --data-root "$work" --threads 2 --port-file "$work/port" \
  --max-streams $((streams + 8)) --max-streams-per-client $((streams + 8)) \
  >/dev/null 2>"$work/worker.err" &
pids+=($!)
for _ in $(seq 100); do [ -s "$work/port" ] && break; sleep 0.1; done
port=$(cat "$work/port")
iperf_port=$((20000 + RANDOM % 20000))
iperf3 -s -p "$iperf_port" >/dev/null 2>&1 &
pids+=($!)
sleep 0.5

for r in $(seq "$rounds"); do
  echo "bench_stream: round $r/$rounds" >&2
  build/bin/stream_bench --worker "127.0.0.1:$port" --data "$work/data" --seconds "$secs" \
    --item-samples "$item" --credits "$credits" --streams "$streams" >>"$work/stream.jsonl"
  iperf3 -c 127.0.0.1 -p "$iperf_port" -t "$secs" -J >"$work/iperf.json"
  python3 - "$work/iperf.json" >>"$work/iperf.jsonl" <<'PY'
import json, sys
end = json.load(open(sys.argv[1]))["end"]
got = end["sum_received"]
# iperf3 -c reports the server's (the receiver's) CPU as "remote_total".
cpu_s = end["cpu_utilization_percent"]["remote_total"] / 100 * got["seconds"]
print(json.dumps({"iperf3_gbytes_per_s": got["bits_per_second"] / 8e9,
                  "iperf3_receiver_cpu_s_per_gb": cpu_s / (got["bytes"] / 1e9)}))
PY
done

python3 - "$work/stream.jsonl" "$work/iperf.jsonl" <<'PY'
import json, statistics, sys
s = [json.loads(l) for l in open(sys.argv[1])]
i = [json.loads(l) for l in open(sys.argv[2])]
ratios = [a["gbytes_per_s"] / b["iperf3_gbytes_per_s"] for a, b in zip(s, i)]
cpu_ratios = [a["client_cpu_s_per_gb"] / b["iperf3_receiver_cpu_s_per_gb"] for a, b in zip(s, i)]
print(json.dumps({
    "benchmark": "stream_one_client_one_worker_loopback", "streams": s[0]["streams"],
    "gbytes_per_s": round(statistics.median(x["gbytes_per_s"] for x in s), 3),
    "iperf3_gbytes_per_s": round(statistics.median(x["iperf3_gbytes_per_s"] for x in i), 3),
    "ratio": round(statistics.median(ratios), 3),
    "client_cpu_s_per_gb": round(statistics.median(x["client_cpu_s_per_gb"] for x in s), 4),
    "iperf3_receiver_cpu_s_per_gb":
        round(statistics.median(x["iperf3_receiver_cpu_s_per_gb"] for x in i), 4),
    "cpu_vs_iperf3_receiver": round(statistics.median(cpu_ratios), 3),
    "client_threads": max(x["client_threads"] for x in s),
    "item_samples": s[0]["item_samples"], "sample_bytes": s[0]["sample_bytes"],
    "rounds": len(s),
}))
PY
