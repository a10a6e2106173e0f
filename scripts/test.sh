#!/usr/bin/env bash
# Runs every test. Installs what is missing and builds first (scripts/setup.sh),
# then runs the suites with ctest.
#
#   scripts/test.sh [ctest args...]            e.g. scripts/test.sh -R Decode
#   scripts/test.sh --sanitize address [...]   the same under AddressSanitizer and
#                                              UndefinedBehaviorSanitizer (build-asan/)
#   scripts/test.sh --sanitize thread [...]    under ThreadSanitizer (build-tsan/)
set -euo pipefail
cd "$(dirname "$0")/.."

build=build
setup=()
if [ "${1:-}" = --sanitize ]; then
  setup=(--sanitize "$2")
  build=build-${2:0:1}san
  shift 2
  # Any report fails the test that triggered it, with a stack.
  export ASAN_OPTIONS=${ASAN_OPTIONS:-abort_on_error=1:detect_leaks=1:strict_string_checks=1}
  export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
  export TSAN_OPTIONS=${TSAN_OPTIONS:-halt_on_error=1:second_deadlock_stack=1:suppressions=$PWD/tests/tsan.supp}
fi
scripts/setup.sh "${setup[@]}"
ctest --test-dir "$build" --output-on-failure --timeout 900 -j "$(nproc)" "$@"
