#!/usr/bin/env bash
# Sets up, builds and runs every test except the `slow` label.
# Shared test data comes from SKIPPY_TEST_DATA (default: ../shared beside the repo).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh build
ctest --test-dir build --output-on-failure -j "$(nproc)" -LE slow "$@"
