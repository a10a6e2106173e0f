#!/usr/bin/env bash
# Fault trials on the multi-host testbed (scripts/testbed.sh; needs root):
# a trainer and 3 workers on their own network namespaces, and in each trial
# one fault while a job runs EPOCHS epochs offloaded to them. Every trial checks
# that every sample arrived exactly once (the count and the local checksum)
# and reports the run's images/s against an undisturbed run's. One JSON line
# per trial, then a summary line.
#
#   scripts/fault_trials.sh [TRIALS=10] [--data DIR] [--epochs 4] [--notice 30]
#
# Faults, in rotation (each at a random moment 0.3-2.5 s after the job opened
# on its workers, on a random worker):
#   sigkill    SIGKILL the worker
#   sigterm    SIGTERM it: it drains (the scheduler and the job are told, it
#              answers what it holds, and exits when the job closes its stream)
#   link-down  its link goes down for 4 s (the trainer's --worker-timeout 2
#              moves its items), then up
#   slow-link  its link is cut to 20 Mbit/s for the rest of the run (a token
#              bucket: this kernel has no netem for delay and loss)
#   scheduler  the scheduler is SIGKILLed and restarted on the same port (the
#              job takes its workers from it)
#   rolling    every worker is replaced once, one after another: SIGTERM, its
#              exit, a new one in its place (a rolling update)
#   wave       a preemption wave: w1 and w2 (two of the three) get SIGTERM at
#              once, and SIGKILL --notice seconds later if still running
#   scale-up   a fourth worker (w4) registers while the job runs
#   none       no fault: an undisturbed run in the rotation, so a fault's
#              cost can be read against runs beside it, not only the first
# KINDS (env) picks and orders the kinds, e.g. KINDS="none rolling" for the
# cost of a rolling replacement (default: every kind but none).
set -euo pipefail
cd "$(dirname "$0")/.."
trials=${1:-10}
shift || true
data=""
epochs=4
notice=30
while [ $# -gt 0 ]; do
  case "$1" in
    --data) data=$2; shift ;;
    --epochs) epochs=$2; shift ;;
    --notice) notice=$2; shift ;;
    *) echo "fault_trials.sh: unknown flag '$1'" >&2; exit 2 ;;
  esac
  shift
done
tb=scripts/testbed.sh
bin=build/bin
work=$(mktemp -d)
cleanup() {
  pkill -f "$bin/prepflow-worker" 2>/dev/null || true
  pkill -f "$bin/prepflow-scheduler" 2>/dev/null || true
  "$tb" down >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT
"$tb" up 4 >/dev/null  # w4 joins only in the scale-up trial
if [ -z "$data" ]; then
  "$bin/prepflow" demo --images 192 --local-workers 0 --keep --json 2>/dev/null | tail -n 1 >"$work/demo.json"
  data=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["dataset"])' "$work/demo.json")
  trap 'cleanup; rm -rf "$(dirname "$data")"' EXIT
fi
data=$(realpath "$data")
root=$(dirname "$data")
args=(--data "$data" --threads 1 --epochs "$epochs" --batch 16 --worker-timeout 2 --json)
expected=$(($(find "$data" -type f | wc -l) * epochs))
local_sum=$("$bin/prepflow" run "${args[@]}" 2>/dev/null | tail -n 1 |
  python3 -c 'import json,sys; print(json.load(sys.stdin)["checksum"])')

start_scheduler() {  # port (0: any)
  rm -f "$work/sched.port"
  ("$tb" exec trainer "$bin/prepflow-scheduler" --listen "$("$tb" addr trainer)" --insecure \
    --port "$1" --port-file "$work/sched.port" --heartbeat-seconds 0.5 --expire-after 3 \
    >/dev/null 2>>"$work/scheduler.err" &)
  for _ in $(seq 100); do [ -s "$work/sched.port" ] && break; sleep 0.05; done
}
start_worker() {  # host
  rm -f "$work/$1.port"
  ("$tb" exec "$1" "$bin/prepflow-worker" --listen "$("$tb" addr "$1")" --insecure \
    --data-root "$root" --threads 1 --port-file "$work/$1.port" --grace-seconds "$notice" \
    --scheduler "$("$tb" addr trainer):$(cat "$work/sched.port")" \
    >/dev/null 2>>"$work/$1.err" &)
  for _ in $(seq 100); do [ -s "$work/$1.port" ] && break; sleep 0.05; done
}
worker_pid() { pgrep -f "prepflow-worker --listen $("$tb" addr "$1")" | head -1; }
# Waits up to `2` seconds for process `1` to exit; SIGKILL if it has not.
await_exit() {
  for _ in $(seq $((${2%.*} * 20 + 1))); do kill -0 "$1" 2>/dev/null || return 0; sleep 0.05; done
  kill -KILL "$1" 2>/dev/null || true
}

start_scheduler 0
sched_port=$(cat "$work/sched.port")
for w in w1 w2 w3; do start_worker "$w"; done
sleep 2  # every worker registered
run() {  # output file
  "$tb" exec trainer "$bin/prepflow" run "${args[@]}" --offload remote \
    --scheduler "$("$tb" addr trainer):$sched_port" 2>"$1.err" | tail -n 1 >"$1"
}
run "$work/baseline.json"
baseline=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["images_per_s"])' "$work/baseline.json")

read -ra kinds <<<"${KINDS:-sigkill sigterm link-down slow-link scheduler rolling wave scale-up}"
for k in "${kinds[@]}"; do
  case "$k" in
    sigkill|sigterm|link-down|slow-link|scheduler|rolling|wave|scale-up|none) ;;
    *) echo "fault_trials.sh: unknown kind '$k' in KINDS" >&2; exit 2 ;;
  esac
done
passed=0
for i in $(seq "$trials"); do
  kind=${kinds[$(((i - 1) % ${#kinds[@]}))]}
  victim=w$((RANDOM % 3 + 1))
  delay=$(awk -v r=$RANDOM 'BEGIN { printf "%.2f", 0.3 + 2.2 * r / 32767 }')
  rm -f "$work/trial.json.err"
  run "$work/trial.json" &
  runner=$!
  for _ in $(seq 200); do grep -q "opened job" "$work/trial.json.err" 2>/dev/null && break; sleep 0.05; done
  sleep "$delay"
  case "$kind" in
    sigkill) kill -KILL "$(worker_pid "$victim")" ;;
    sigterm) kill -TERM "$(worker_pid "$victim")" ;;
    link-down)
      ip link set "pf-$victim-br" down
      sleep 4
      ip link set "pf-$victim-br" up ;;
    slow-link)
      ip netns exec "pf-$victim" tc qdisc replace dev eth0 root tbf rate 20mbit burst 32kb \
        latency 400ms ;;
    scheduler)
      pkill -KILL -f "$bin/prepflow-scheduler" || true
      sleep 1
      start_scheduler "$sched_port" ;;
    rolling)
      for w in w1 w2 w3; do
        pid=$(worker_pid "$w")
        kill -TERM "$pid"
        await_exit "$pid" "$notice"
        start_worker "$w"
      done ;;
    wave)
      p1=$(worker_pid w1) p2=$(worker_pid w2)
      kill -TERM "$p1" "$p2"
      await_exit "$p1" "$notice"
      await_exit "$p2" 0 ;;
    scale-up) start_worker w4 ;;
    none) ;;
  esac
  wait $runner || true
  ok=$(python3 - "$work/trial.json" "$expected" "$local_sum" "$baseline" "$kind" "$victim" "$delay" <<'PY'
import json, sys
path, expected, local_sum, baseline, kind, victim, delay = sys.argv[1:]
try:
    d = json.load(open(path))
except Exception as e:
    d = {"error": f"no result: {e}"}
ok = (d.get("images") == int(expected) and d.get("errors") == 0 and d.get("checksum") == local_sum)
print(json.dumps({"trial": kind, "worker": victim, "at_s": float(delay), "exactly_once": ok,
                  "images": d.get("images"), "remote_images": d.get("remote_images"),
                  "reissued_items": d.get("reissued_items"),
                  "images_per_s": d.get("images_per_s"),
                  "vs_undisturbed": (d.get("images_per_s") or 0) / float(baseline),
                  "error": d.get("error")}), file=sys.stderr)
print("1" if ok else "0")
PY
)
  passed=$((passed + ok))
  # Repair for the next trial.
  case "$kind" in
    sigkill|sigterm) start_worker "$victim"; sleep 1 ;;
    wave) start_worker w1; start_worker w2; sleep 1 ;;
    scale-up) kill -TERM "$(worker_pid w4)"; sleep 1 ;;
    slow-link) ip netns exec "pf-$victim" tc qdisc del dev eth0 root 2>/dev/null || true ;;
  esac
done 2>&1
echo "{\"trials\": $trials, \"exactly_once\": $passed, \"undisturbed_images_per_s\": $baseline}"
[ "$passed" -eq "$trials" ]
