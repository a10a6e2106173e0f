#!/usr/bin/env bash
# The planner in every scenario, one command. For each scenario, on the
# testbed (scripts/testbed.sh): off, auto told nothing, and a sweep of static
# splits once each; then ROUNDS interleaved rounds of off, auto, auto as it
# was before 2026-11-28 (auto-prev: no minimum gain, no slow start) and the
# two best static splits of the sweep. Medians per mode; auto against off and
# against the best static split; auto's prediction error (each placement's
# delivery against its prediction while it ran: plan_prediction_error), and
# its last plan's prediction beside the second half of its epochs' rate
# (second_half_error, from epoch_seconds). Every run's checksum must
# agree within a scenario. Workers are restarted before every run, so no run
# inherits another's caches or streams.
#
#   sudo scripts/bench_scenarios.sh [DATA]
#   env: SCENARIOS (all: cpu link far churn echo light storage jobs2 ranks), ROUNDS (3),
#        EPOCHS (30), SWEEP (the static splits; each scenario has its own
#        default), RUN_LIMIT (seconds a run may take, 300; one that takes
#        longer counts as 0 samples/s), AUTO_FLAGS (more flags for the auto
#        runs, e.g. "--replan-probe-share 0.1" to try a setting), WORKER_FLAGS (more flags
#        for every worker, e.g. "--max-items-per-stream 2"), OUT (a file for the JSON lines; one
#        per scenario, also printed), LOGS (a folder to keep every run's log in, and each worker host's stderr)
#
# Scenarios (trainer and worker CPU are cgroup quotas, links token buckets):
#   cpu    trainer 0.5 core, two workers of 0.5: the trainer is CPU-bound.
#          It runs 2 x EPOCHS epochs: 20 epochs were an 8 s run, of which
#          the first plans (on the first hundred samples' costs) held 2-3 s
#   link   trainer 0.5, workers 1 core, its ingest 100 Mbit/s, untold
#   far    trainer 0.5, workers 0.5, one of them behind 40 Mbit/s
#   churn  trainer 0.5, workers 0.5: w1 and w2 at the start; w3 (listed,
#          down at the start) starts after CHURN_AT seconds (4) and joins at
#          the client's next dial of it (1, 3, 7 s: at 7), and w2 is killed
#          at CHURN_AT
#   echo   as cpu, with a 1 GB sample cache and --echo 2
#   light  bench/light.pbtxt (thumbnails, ~1 ms a sample), trainer 1 core,
#          workers 0.5: offloading has little to give. It runs 3 x EPOCHS
#          epochs: at 1,400 samples/s, 20 epochs were a 7 s run, and the
#          plans made on the first seconds' costs (the first samples are
#          dearer) held half of it
#   storage as cpu, the data packed into WebDataset shards on an S3-compatible
#          store (s3rver) on w3, whose link is STORAGE_MBIT (50): trainer
#          and workers read through it, and storage binds every placement
#   jobs2  two jobs at once, on the trainer and on w3 (0.5 core each),
#          sharing w1 and w2 through a scheduler (each worker 0.5 core):
#          rates, predictions and epochs are the two jobs' together
#   ranks  one job of two ranks on the trainer (1 core; --local-ranks 2),
#          workers 0.5, shared through a scheduler: the job's rate is its
#          ranks' samples over the slower rank's time; its checksum, the
#          ranks' in order (scripts/bench_ranks.sh compares more settings).
#          Each rank reads half of every epoch, so the ranks run 2 x EPOCHS
#          epochs: a run as long as the other rows' (at 20 epochs a rank's
#          run was 5 s, and the planner's cold-start costs held its
#          predictions 15% low for half of it)
set -euo pipefail
cd "$(dirname "$0")/.."
data=$(realpath "${1:-../shared/datasets/photos-512}")
scenarios=${SCENARIOS:-cpu link far churn echo light storage jobs2 ranks}
rounds=${ROUNDS:-3}
epochs=${EPOCHS:-30}
churn_at=${CHURN_AT:-4}
run_limit=${RUN_LIMIT:-300}
tb=scripts/testbed.sh
port=7700
work=$(mktemp -d)
out=${OUT:-$work/scenarios.jsonl}
cleanup() {
  stop_store
  "$tb" down >/dev/null 2>&1 || true
  if [ -n "${LOGS:-}" ]; then mkdir -p "$LOGS" && cp "$work"/*.log "$work"/*.tsv "$work"/*.err "$LOGS"/ 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT

# Sets the scenario's testbed (up), the workers started before each run
# (hosts), those named to the client (listed), run flags, the pipeline, what
# runs beside each run (during) and the static splits to sweep (behind a
# tight link, only small remote shares finish in reasonable time).
scenario() {
  up="2 --cpu 0.5 --trainer-cpu 0.5" hosts="w1 w2" listed="w1 w2" flags="" during=""
  pipeline=imagenet-train store="" trainers=trainer shared="" ranks="" run_epochs=$epochs
  sweep="cut=1,remote_fraction=0.5 cut=3,remote_fraction=0.25 cut=3,remote_fraction=0.5"
  sweep+=" cut=3,remote_fraction=0.75 remote"
  case "$1" in
    cpu) run_epochs=$((2 * epochs)) ;;
    link)
      up="2 --cpu 1 --trainer-cpu 0.5 --trainer-bw 100"
      sweep="cut=3,remote_fraction=0.1 cut=3,remote_fraction=0.2 cut=3,remote_fraction=0.3"
      ;;
    far)
      up="2 --cpu 0.5 --trainer-cpu 0.5 --bw 40 --bw-hosts w2"
      sweep="cut=3,remote_fraction=0.25 cut=3,remote_fraction=0.5 cut=3,remote_fraction=0.75"
      ;;
    churn) up="3 --cpu 0.5 --trainer-cpu 0.5" listed="w1 w2 w3" during=churn ;;
    echo) flags="--cache-bytes 1000000000 --echo 2" ;;
    light)
      up="2 --cpu 0.5 --trainer-cpu 1" pipeline=bench/light.pbtxt run_epochs=$((3 * epochs))
      ;;
    jobs2) up="3 --cpu 0.5 --trainer-cpu 0.5" trainers="trainer w3" shared=1 ;;
    ranks)
      up="2 --cpu 0.5 --trainer-cpu 1" trainers="trainer trainer" shared=1 ranks=2
      run_epochs=$((2 * epochs))
      ;;
    storage)
      up="3 --cpu 0.5 --trainer-cpu 0.5 --bw ${STORAGE_MBIT:-50} --bw-hosts w3" store=w3
      sweep="cut=3,remote_fraction=0.25 cut=3,remote_fraction=0.5 remote"
      ;;
    *) echo "bench_scenarios: unknown scenario '$1'" >&2; exit 2 ;;
  esac
  sweep=${SWEEP:-$sweep}
}

# The store (storage scenario): the data packed into shards once, served by
# s3rver on host $1 and uploaded; sets source (what --data names), creds (the
# environment both ends read it with) and wflags (the workers' flags).
source=$data creds="" wflags="" store_pid=""
start_store() {
  [ -d "$work/shards" ] || build/bin/prepflow pack --data "$data" --out "$work/shards" --shard-samples 64 >&2
  "$tb" exec "$1" env LISTEN_HOST=0.0.0.0 node --openssl-legacy-provider tests/servers/serve.js s3 \
    "$work/s3" data >"$work/s3.log" 2>&1 &
  store_pid=$!
  local sport=""
  for _ in $(seq 100); do
    sport=$(sed -n 's/^listening .*:\([0-9]*\)$/\1/p' "$work/s3.log")
    [ -n "$sport" ] && break
    sleep 0.1
  done
  [ -n "$sport" ] || { echo "bench_scenarios: s3rver did not start" >&2; exit 1; }
  local endpoint="http://$("$tb" addr "$1"):$sport"
  creds="AWS_ACCESS_KEY_ID=S3RVER AWS_SECRET_ACCESS_KEY=S3RVER AWS_ENDPOINT_URL=$endpoint"
  for f in "$work/shards"/*; do
    "$tb" exec trainer curl -sf -X PUT --data-binary "@$f" --aws-sigv4 "aws:amz:us-east-1:s3" \
      --user "S3RVER:S3RVER" -H "x-amz-content-sha256: UNSIGNED-PAYLOAD" \
      "$endpoint/data/shards/$(basename "$f")" >/dev/null
  done
  source=s3://data/shards wflags="--allow-url-prefix s3://data/"
}
stop_store() {
  if [ -n "$store_pid" ]; then kill "$store_pid" 2>/dev/null || true; wait "$store_pid" 2>/dev/null || true; fi
  store_pid="" source=$data creds="" wflags=""
  rm -rf "$work/s3"
}

declare -A pid
start_worker() {  # host
  rm -f "$work/$1.port"
  # shellcheck disable=SC2086
  "$tb" exec "$1" env $creds build/bin/prepflow-worker --listen "$("$tb" addr "$1")" --port "$port" \
    --insecure --data-root "$data" $wflags ${WORKER_FLAGS:-} ${sched:+--scheduler "$sched"} --port-file "$work/$1.port" \
    >/dev/null 2>>"$work/$1.err" &
  pid[$1]=$!
  for _ in $(seq 100); do [ -s "$work/$1.port" ] && return; sleep 0.1; done
  echo "bench_scenarios: the worker on $1 did not start: $(tail -n 3 "$work/$1.err")" >&2
  exit 1
}
stop_workers() {
  for h in "${!pid[@]}"; do kill "${pid[$h]}" 2>/dev/null || true; wait "${pid[$h]}" 2>/dev/null || true; done
  pid=()
}
churn() {  # beside a run: w3 joins, w2 is killed
  sleep "$churn_at"
  start_worker w3
  echo "${pid[w3]}" >"$work/w3.pid"  # for stop_workers, outside this subshell
  kill -9 "${pid[w2]}" 2>/dev/null || true
}

# The scheduler the jobs2 scenario shares its workers through: on the
# trainer's host; sets sched (its address).
sched="" sched_pid=""
start_scheduler() {
  rm -f "$work/sched.port"
  "$tb" exec trainer build/bin/prepflow-scheduler --listen "$("$tb" addr trainer)" --insecure \
    --port 0 --port-file "$work/sched.port" --heartbeat-seconds 0.5 --expire-after 3 \
    >/dev/null 2>>"$work/scheduler.err" &
  sched_pid=$!
  for _ in $(seq 100); do [ -s "$work/sched.port" ] && break; sleep 0.05; done
  sched="$("$tb" addr trainer):$(cat "$work/sched.port")"
}

# One job on each host of $trainers (with $ranks: one rank each), at once;
# prints their JSON lines joined into one (jobs2 and ranks: the rates,
# predictions and epochs added up).
run_jobs() {  # log-prefix, then the run's flags
  local log=$1 i=0 t jobs=() rank=()
  shift
  for t in $trainers; do
    if [ -n "$ranks" ]; then rank=(--job bench --rank "$i" --world-size "$ranks" --local-ranks "$ranks"); fi
    # shellcheck disable=SC2086
    timeout "$run_limit" "$tb" exec "$t" env $creds build/bin/prepflow run --data "$source" \
      --index-cache-dir "" --pipeline "$pipeline" --epochs "$run_epochs" --worker-timeout 60 --json \
      "${rank[@]}" "$@" 2>"$log.$t$i.log" | tail -n 1 >"$work/job.$i" &
    jobs+=($!)
    i=$((i + 1))
  done
  wait "${jobs[@]}"
  python3 - "$ranks" "$work"/job.* <<'PY'
import json, sys
ranks, jobs = sys.argv[1], []
for path in sys.argv[2:]:
    try:
        jobs.append(json.load(open(path)))
    except Exception:
        jobs.append({"images_per_s": 0, "error": "no result"})
if len(jobs) == 1:
    print(json.dumps(jobs[0]))
    sys.exit()
out = dict(jobs[0])
for k in ("images_per_s", "plan_predicted_images_per_s", "plan_delivered_images_per_s"):
    out[k] = sum(j.get(k, 0) for j in jobs)
# The jobs' prediction errors, weighted by the seconds each judged.
judged = sum(j.get("plan_prediction_seconds", 0) for j in jobs)
out["plan_prediction_seconds"] = judged
out["plan_prediction_error"] = sum(
    j.get("plan_prediction_error", 0) * j.get("plan_prediction_seconds", 0) for j in jobs
) / judged if judged > 0 else 0
# Epoch by epoch, the jobs' rates added: an "epoch" of one job's samples in
# the harmonic sum of their epochs' seconds.
eps = [j.get("epoch_seconds") or [] for j in jobs]
n = min(len(e) for e in eps)
out["epoch_seconds"] = [1 / sum(1 / e[k] for e in eps) for k in range(n)]
out["images"] = jobs[0].get("images", 0)
if ranks:  # one job: its samples over the slower rank's time; each rank's checksum
    out["images_per_s"] = sum(j.get("images", 0) for j in jobs) / max(j.get("seconds", 1e9) for j in jobs)
    out["checksum"] = "+".join(str(j.get("checksum")) for j in jobs)
else:
    sums = {j.get("checksum") for j in jobs}
    out["checksum"] = sums.pop() if len(sums) == 1 else "the jobs differ"
print(json.dumps(out))
PY
  rm -f "$work"/job.*
}

run() {  # scenario mode round -> one line: scenario <TAB> mode <TAB> round <TAB> JSON
  local s=$1 mode=$2 r=$3 beside="" workers="" offload=$2 prev=""
  [ "$mode" = auto ] && prev=${AUTO_FLAGS:-}
  if [ "$mode" = auto-prev ]; then
    offload=auto prev="--replan-probe-share 1 --replan-min-gain 0 --replan-link-growth 0"
  fi
  if [ -n "$shared" ]; then start_scheduler; fi
  for h in $hosts; do start_worker "$h"; done
  if [ -n "$shared" ]; then sleep 2; fi  # every worker registered
  for h in $listed; do workers="${workers:+$workers,}$("$tb" addr "$h"):$port"; done
  if [ -n "$during" ]; then "$during" & beside=$!; fi
  local json pool=(--workers "$workers")
  if [ -n "$shared" ]; then pool=(--scheduler "$sched"); fi
  # shellcheck disable=SC2086
  json=$(run_jobs "$work/$s.${mode//[^a-z0-9]/_}.$r" --offload "$offload" "${pool[@]}" $flags $prev)
  [[ "$json" == "{"* ]] || json="{\"images_per_s\": 0, \"error\": \"no result in ${run_limit} s\"}"
  if [ -n "$beside" ]; then wait "$beside" || true; fi
  if [ -s "$work/w3.pid" ]; then pid[w3]=$(cat "$work/w3.pid"); rm -f "$work/w3.pid"; fi
  stop_workers
  if [ -n "$sched_pid" ]; then kill "$sched_pid" 2>/dev/null || true; wait "$sched_pid" 2>/dev/null || true; fi
  sched="" sched_pid=""
  printf '%s\t%s\t%s\t%s\n' "$s" "$mode" "$r" "$json"
}

summarise() {  # scenario tsv -> one JSON line
  python3 - "$1" "$2" "$run_epochs" <<'PY'
import json, statistics, sys
scenario, path, epochs = sys.argv[1], sys.argv[2], int(sys.argv[3])
rows = [line.rstrip("\n").split("\t", 3) for line in open(path)]
sweep, runs, checksums, autos = {}, {}, set(), []
for _, mode, r, js in rows:
    d = json.loads(js)
    if "checksum" in d:
        checksums.add(d["checksum"])
    if r == "0":
        sweep[mode] = d["images_per_s"]
        continue
    runs.setdefault(mode, []).append(d["images_per_s"])
    if mode == "auto":
        autos.append(d)
median = {m: statistics.median(v) for m, v in runs.items()}
static = {m: v for m, v in median.items() if m not in ("off", "auto", "auto-prev")}
best = max(static, key=static.get)
def ratio(a, b):  # None where b gave nothing (every run of it failed)
    return round(a / b, 3) if b > 0 else None
def steady(d):  # samples/s over the second half of the epochs
    ep = d.get("epoch_seconds", [])
    half = ep[len(ep) // 2:]
    return d["images"] / len(ep) * len(half) / sum(half) if half and sum(half) > 0 else 0
# Each placement's delivery against its prediction while it ran (the
# client's plan_prediction_error), and, as before 2026-11-29, the last
# plan's prediction against the second half's rate.
errors = [d["plan_prediction_error"] for d in autos if d.get("plan_prediction_seconds", 0) > 0]
half_errors = [abs(steady(d) - d["plan_predicted_images_per_s"]) / d["plan_predicted_images_per_s"]
               for d in autos if d.get("plan_predicted_images_per_s", 0) > 0]
last = autos[-1] if autos else {}
print(json.dumps({
    "benchmark": "scenario", "scenario": scenario, "epochs": epochs, "rounds": len(autos),
    "off": round(median["off"], 1), "auto": round(median["auto"], 1),
    "auto_prev": round(median["auto-prev"], 1),
    "auto_vs_auto_prev": ratio(median["auto"], median["auto-prev"]),
    "best_static": best, "best_static_images_per_s": round(static[best], 1),
    "auto_vs_off": ratio(median["auto"], median["off"]),
    "auto_vs_best_static": ratio(median["auto"], static[best]),
    "auto_predicted": round(statistics.median(
        d.get("plan_predicted_images_per_s", 0) for d in autos), 1) if autos else 0,
    "auto_steady": round(statistics.median(steady(d) for d in autos), 1) if autos else 0,
    "prediction_error": round(statistics.median(errors), 3) if errors else None,
    "prediction_seconds": [round(d.get("plan_prediction_seconds", 0), 1) for d in autos],
    "second_half_error": round(statistics.median(half_errors), 3) if half_errors else None,
    "auto_plan": last.get("plan"), "auto_plan_reason": last.get("plan_reason"),
    "auto_plan_changes": [d.get("plan_changes") for d in autos],
    "auto_backoffs": [d.get("plan_backoffs") for d in autos],
    "round_rates": {m: [round(x, 1) for x in v] for m, v in runs.items()},
    "sweep": {m: round(v, 1) for m, v in sweep.items()},
    "all_checksums_equal": len(checksums) == 1,
}))
PY
}

scripts/setup.sh >&2
find "$data" -type f -exec cat {} + >/dev/null
: >"$out"
for s in $scenarios; do
  scenario "$s"
  # shellcheck disable=SC2086
  "$tb" up $up >&2
  if [ -n "$store" ]; then start_store "$store"; fi
  tsv="$work/$s.tsv"
  for m in off auto $sweep; do
    echo "bench_scenarios: $s: sweep: $m" >&2
    run "$s" "$m" 0 >>"$tsv"
  done
  top=$(python3 - "$tsv" <<'PY'
import json, sys
rate = {}
for line in open(sys.argv[1]):
    _, mode, _, js = line.rstrip("\n").split("\t", 3)
    if mode not in ("off", "auto", "auto-prev"):
        rate[mode] = json.loads(js)["images_per_s"]
print(" ".join(sorted(rate, key=rate.get)[-2:]))
PY
)
  for r in $(seq "$rounds"); do
    for m in off auto auto-prev $top; do
      echo "bench_scenarios: $s: round $r: $m" >&2
      run "$s" "$m" "$r" >>"$tsv"
    done
  done
  grep -hE "plan [0-9]+:|link binds|warm-up|trying all local" "$work/$s.auto."*.log | head -n 8 >&2 || true
  summarise "$s" "$tsv" | tee -a "$out"
  stop_store
  "$tb" down >&2
done
