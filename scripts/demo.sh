#!/usr/bin/env bash
# Runs prepflow's main job on an embedded default: generates a small
# photo-like dataset and runs the imagenet-train pipeline over it. Installs
# what is missing and builds first (scripts/setup.sh).
#
#   scripts/demo.sh [prepflow demo flags...]   e.g. --data DIR, --images 1024, --json
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/setup.sh >&2
exec build/bin/prepflow demo "$@"
