#!/usr/bin/env bash
# The GPU checklist as one command, for a machine with a GPU and the CUDA
# toolkit (the device machines lent to some sessions have CUDA, CMake and
# Python, but none of prepflow's Debian libraries, so this builds client/gpu
# on its own):
#
#   1. builds client/gpu standalone (build-gpu/, or $BUILD);
#   2. gpu_test cpu, then gpu_test device: the kernel bit-exact against the
#      CPU reference, double buffering, the consumer-stream race, the empty
#      batch, the stale error;
#   3. gpu_test device again under compute-sanitizer's memcheck, racecheck
#      and synccheck (where compute-sanitizer is installed);
#   4. the torch hand-off (prepflow/_gpu.py, the code the Loader runs) over
#      the standalone ctypes shim: torch's default stream, a side stream, an
#      external stream, a DLPack reader, a training loop, an empty batch and
#      a second GPU, $REPEAT rounds in a row (races show only sometimes),
#      then once under memcheck and synccheck (needs python3 with a CUDA
#      torch and numpy: $PYTHON);
#   5. gpu_bench: the normalizer against back-to-back pinned cudaMemcpyAsync,
#      and how much of a copy hides behind the consumer's step; bench_torch:
#      the normalizer against torch's own normalize on the device and against
#      the CPU path plus .cuda(), with the host CPU each costs.
#
# The checks come first and the sanitizers last (they are the slowest), each
# step under a time limit, so a short lease still brings back the essentials.
# Prints one JSON line per step ({"step", "passed", "seconds", "detail"}),
# the device and its host link, and a summary line last; exits 1 if any step
# failed. No usable GPU is a failure, not a skip: a checklist that could not
# run has not passed.
#
#   scripts/gpu_check.sh   env: BUILD (build-gpu), PYTHON (python3), BENCH_ARGS,
#                          REPEAT (20), STEP_TIMEOUT (seconds, 300), LOGS (a
#                          folder that keeps each step's whole output)
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
build=${BUILD:-build-gpu}
if [ -n "${LOGS:-}" ]; then
  log=$LOGS
  mkdir -p "$log"
else
  log=$(mktemp -d)
  trap 'rm -rf "$log"' EXIT
fi
step_timeout=${STEP_TIMEOUT:-300}
passed=0
failed=0

# step NAME COMMAND...: runs it, prints its JSON line.
step() {
  local name=$1
  shift
  local start end rc detail
  start=$(date +%s.%N)
  timeout --kill-after=10 "$step_timeout" "$@" >"$log/$name" 2>&1
  rc=$?
  [ "$rc" -eq 124 ] && echo "(stopped after ${step_timeout}s)" >>"$log/$name"
  end=$(date +%s.%N)
  detail=$(tail -c 600 "$log/$name" | python3 -c 'import json,sys; print(json.dumps(sys.stdin.read().strip()))')
  if [ "$rc" -eq 0 ]; then passed=$((passed + 1)); ok=true; else failed=$((failed + 1)); ok=false; fi
  printf '{"step": "%s", "passed": %s, "exit": %d, "seconds": %.1f, "detail": %s}\n' \
    "$name" "$ok" "$rc" "$(awk "BEGIN { print $end - $start }")" "$detail"
  return "$rc"
}

step build sh -c "cmake -S client/gpu -B '$build' -DCMAKE_BUILD_TYPE=Release >/dev/null && cmake --build '$build' -j" \
  || { echo '{"summary": "the build failed"}'; exit 1; }
step gpu_test_cpu "$build/gpu_test" cpu
# gpu_test exits 77 without a usable device; here that is a failure.
step gpu_test_device "$build/gpu_test" device
python=${PYTHON:-python3}
export PREPFLOW_GPU_LIB="$build/libprepflow_gpu_c.so"
handoff=("$python" client/gpu/python/test_torch_handoff.py)
step torch_handoff "${handoff[@]}" --repeat "${REPEAT:-20}"
# shellcheck disable=SC2086
step gpu_bench "$build/gpu_bench" ${BENCH_ARGS:-}
step torch_bench "$python" client/gpu/python/bench_torch.py
sanitizer=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
if [ -x "$sanitizer" ]; then
  # API errors are not reported as failures: gpu_test provokes one on
  # purpose (the stale-error test) and torch probes the device with others;
  # the code under test checks every call it makes itself.
  sanitize=("$sanitizer" --error-exitcode 1 --report-api-errors no --tool)
  for tool in memcheck racecheck synccheck; do
    step "sanitizer_$tool" "${sanitize[@]}" "$tool" "$build/gpu_test" device
  done
  for tool in memcheck synccheck; do
    step "torch_handoff_$tool" "${sanitize[@]}" "$tool" "${handoff[@]}"
  done
else
  failed=$((failed + 1))
  echo '{"step": "sanitizer", "passed": false, "detail": "compute-sanitizer not found"}'
fi
nvidia-smi --query-gpu=name,driver_version,compute_cap,pcie.link.gen.max,pcie.link.width.max \
  --format=csv,noheader 2>/dev/null | sed 's/^/{"device": "/; s/$/"}/'
printf '{"summary": "%d passed, %d failed"}\n' "$passed" "$failed"
[ "$failed" -eq 0 ]
