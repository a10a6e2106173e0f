#!/usr/bin/env bash
# Runs every test. Installs what is missing and builds first (scripts/setup.sh),
# then runs the GoogleTest suites with ctest.
#
#   scripts/test.sh [ctest args...]     e.g. scripts/test.sh -R Decode
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/setup.sh
ctest --test-dir build --output-on-failure --timeout 600 -j "$(nproc)" "$@"
