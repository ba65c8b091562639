#!/usr/bin/env bash
# Configures and builds skippy. Usage: scripts/build.sh [BUILD_DIR] [extra cmake args...]
# Default BUILD_DIR is build (RelWithDebInfo).
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir=${1:-build}
shift || true
generator=()
if command -v ninja >/dev/null 2>&1; then generator=(-G Ninja); fi
if [ ! -f "$build_dir/CMakeCache.txt" ]; then
  cmake -S . -B "$build_dir" "${generator[@]}" "$@" >&2
elif [ $# -gt 0 ]; then
  cmake -S . -B "$build_dir" "$@" >&2
fi
cmake --build "$build_dir" -j "$(nproc)" >&2
