#!/usr/bin/env bash
# Fuzzes prepflow with libFuzzer (clang, with AddressSanitizer and
# UndefinedBehaviorSanitizer) for SECONDS per target, starting from the seed
# corpus in tests/fuzz/corpus/<target>/. Crashers are copied into
# tests/fuzz/regressions/<target>/, which every test run replays; fix the
# bug, keep the file. Prints one JSON line per target (runs, execs/s,
# corpus size, crashes).
#
#   scripts/fuzz.sh [SECONDS=60] [TARGET...]     targets: decode wire job tar audio manifest video
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-60}
shift || true
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(decode wire job tar audio manifest video)

scripts/setup.sh --no-build  # installs clang and libclang-rt-14-dev among the rest
build=build-fuzz
launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
if [ ! -f "$build/build.ninja" ]; then
  CC=clang CXX=clang++ cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DPREPFLOW_SANITIZE=fuzz -DPREPFLOW_BUILD_BENCH=OFF -DPREPFLOW_BUILD_PYTHON=OFF \
    -DPREPFLOW_DISABLE_CUDA=ON "${launcher[@]}" >/dev/null
fi
cmake --build "$build" --parallel "$(nproc)" --target $(printf '%s_fuzz ' "${targets[@]}")

export ASAN_OPTIONS=${ASAN_OPTIONS:-abort_on_error=0:detect_leaks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
for t in "${targets[@]}"; do
  work=$(mktemp -d)
  mkdir -p "$work/corpus" "$work/crashes"
  cp tests/fuzz/corpus/"$t"/* "$work/corpus/" 2>/dev/null || true
  log="$work/log"
  set +e
  "$build/fuzz/${t}_fuzz" "$work/corpus" -max_total_time="$seconds" -max_len=65536 \
    -timeout=10 -rss_limit_mb=2048 -artifact_prefix="$work/crashes/" -print_final_stats=1 \
    >"$log" 2>&1
  rc=$?
  set -e
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  speed=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
  crashes=$(find "$work/crashes" -type f | wc -l)
  if [ "$crashes" -gt 0 ]; then
    mkdir -p "tests/fuzz/regressions/$t"
    cp "$work"/crashes/* "tests/fuzz/regressions/$t/"
    echo "fuzz.sh: $t: $crashes crashing input(s) kept in tests/fuzz/regressions/$t/; log:" >&2
    grep -m 30 -E "ERROR|SUMMARY|#[0-9]+ 0x" "$log" >&2 || true
  fi
  printf '{"target": "%s", "seconds": %s, "runs": %s, "execs_per_s": %s, "corpus": %s, "crashes": %s, "exit": %s}\n' \
    "$t" "$seconds" "${runs:-0}" "${speed:-0}" "$(ls "$work/corpus" | wc -l)" "$crashes" "$rc"
  rm -rf "$work"
done
