#!/usr/bin/env bash
# Two hosts on the testbed (scripts/testbed.sh): a worker on w1, the trainer
# on its own host; the offloaded run crosses a real (virtual) network and must
# give the local checksum; then the worker is killed mid-run and every sample
# must still arrive exactly once. Exits 77 (skipped) where namespaces are not
# allowed.
#
#   tests/scripts/testbed_test.sh BUILD_DIR
set -euo pipefail
build=$(cd "${1:?usage: testbed_test.sh BUILD_DIR}" && pwd)
top=$(cd "$(dirname "$0")/../.." && pwd)
testbed="$top/scripts/testbed.sh"
work=$(mktemp -d)
cleanup() { "$testbed" down >/dev/null 2>&1 || true; rm -rf "$work"; }
trap cleanup EXIT

set +e
"$testbed" up 1 >"$work/up.log" 2>&1
rc=$?
set -e
if [ $rc -eq 77 ]; then cat "$work/up.log"; echo "SKIPPED: testbed unavailable"; exit 77; fi
[ $rc -eq 0 ] || { cat "$work/up.log"; exit 1; }

"$build/bin/prepflow" demo --images 96 --local-workers 0 --keep --json 2>/dev/null | tail -n 1 >"$work/demo.json"
data=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["dataset"])' "$work/demo.json")
trap 'cleanup; rm -rf "$(dirname "$data")"' EXIT

"$testbed" exec w1 "$build/bin/prepflow-worker" --listen "$("$testbed" addr w1)" --insecure --data-root "$data" \
  --threads 1 --port-file "$work/port" >/dev/null 2>"$work/worker.err" &
for _ in $(seq 100); do [ -s "$work/port" ] && break; sleep 0.1; done
[ -s "$work/port" ] || { cat "$work/worker.err"; echo "FAIL: the worker did not start"; exit 1; }
worker="$("$testbed" addr w1):$(cat "$work/port")"

local_sum=$("$build/bin/prepflow" run --data "$data" --threads 1 --json 2>/dev/null | tail -n 1 |
  python3 -c 'import json,sys; print(json.load(sys.stdin)["checksum"])')
"$testbed" exec trainer "$build/bin/prepflow" run --data "$data" --threads 1 --offload cut=2 \
  --workers "$worker" --json 2>"$work/run.err" | tail -n 1 >"$work/remote.json"
python3 - "$work/remote.json" "$local_sum" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
assert d["images"] == 96 and d["errors"] == 0, d
assert d["remote_images"] == 96, d["remote_images"]
assert d["checksum"] == sys.argv[2], (d["checksum"], sys.argv[2])
print("offloaded across hosts: 96 images, checksum", d["checksum"], "= local")
PY

# Kill the worker while the trainer runs two epochs: nothing may be lost.
"$testbed" exec trainer "$build/bin/prepflow" run --data "$data" --threads 1 --offload remote \
  --workers "$worker" --epochs 2 --batch 8 --worker-timeout 5 --json 2>"$work/run2.err" |
  tail -n 1 >"$work/killed.json" &
runner=$!
for _ in $(seq 200); do grep -q "opened job" "$work/run2.err" 2>/dev/null && break; sleep 0.05; done
pkill -KILL -f "prepflow-worker --listen $("$testbed" addr w1)" || true
wait $runner
local2=$("$build/bin/prepflow" run --data "$data" --threads 1 --epochs 2 --batch 8 --json 2>/dev/null |
  tail -n 1 | python3 -c 'import json,sys; print(json.load(sys.stdin)["checksum"])')
python3 - "$work/killed.json" "$local2" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
assert d["images"] == 192 and d["errors"] == 0, d
assert d["checksum"] == sys.argv[2], (d["checksum"], sys.argv[2])
print("worker killed mid-run: 192 images exactly once,", d["remote_images"], "ran remotely")
PY
echo "1 passed, 0 failed"
