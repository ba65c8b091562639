#!/usr/bin/env bash
# Configures and builds skippy.
# Usage: scripts/build.sh [BUILD_DIR] [cmake configure args...] [-- cmake --build args...]
#   scripts/build.sh                                   build/ (RelWithDebInfo), everything
#   scripts/build.sh build-asan -DSKIPPY_SANITIZE=address,undefined
#   scripts/build.sh build-tsan -DSKIPPY_SANITIZE=thread -- --target skippy_cache_tests
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir=${1:-build}
shift || true
configure=()
build=()
# ccache, where installed, makes rebuilds in several work trees cheap (not needed in CI).
launcher=()
if command -v ccache >/dev/null 2>&1; then launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache); fi
while [ $# -gt 0 ]; do
  if [ "$1" = "--" ]; then shift; build=("$@"); break; fi
  configure+=("$1"); shift
done
generator=()
if command -v ninja >/dev/null 2>&1; then generator=(-G Ninja); fi
if [ ! -f "$build_dir/CMakeCache.txt" ]; then
  cmake -S . -B "$build_dir" "${generator[@]}" "${launcher[@]}" "${configure[@]}" >&2
elif [ ${#configure[@]} -gt 0 ]; then
  cmake -S . -B "$build_dir" "${configure[@]}" >&2
fi
cmake --build "$build_dir" -j "$(nproc)" "${build[@]}" >&2
