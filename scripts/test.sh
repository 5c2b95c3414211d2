#!/usr/bin/env bash
# The test command: installs what is missing, builds, runs the whole ctest suite.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
pets_build -DPETS_BUILD_TESTS=ON
cd "$PETS_BUILD"
ctest --output-on-failure --parallel "$PETS_JOBS" --timeout 900 "$@"
