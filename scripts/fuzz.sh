#!/usr/bin/env bash
# Builds the protocol fuzzer (clang, libFuzzer + ASan + UBSan) in build-fuzz and runs it
# on one job for a bounded time. Usage: scripts/fuzz.sh [seconds]   (default 60)
#
# The corpus lives in build-fuzz/corpus/protocol (kept between runs); every run first
# writes one valid message of every kind into it (protocol_fuzz_seeds), so the seeds
# always match the current format. A crash leaves build-fuzz/crash-* behind:
# add it as a regression test in tests/protocol before fixing it.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-60}
build_dir=build-fuzz
generator=()
if command -v ninja >/dev/null 2>&1; then generator=(-G Ninja); fi
if [ ! -f "$build_dir/CMakeCache.txt" ]; then
  CC=clang CXX=clang++ cmake -S . -B "$build_dir" "${generator[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DSKIPPY_BUILD_FUZZERS=ON -DSKIPPY_BUILD_TESTS=OFF -DSKIPPY_BUILD_BENCH=OFF >&2
fi
cmake --build "$build_dir" --target protocol_fuzzer protocol_fuzz_seeds -j "$(nproc)" >&2

corpus="$build_dir/corpus/protocol"
mkdir -p "$corpus"
"$build_dir/fuzz/protocol_fuzz_seeds" "$corpus"  # seeds that match the current format
"$build_dir/fuzz/protocol_fuzzer" -max_total_time="$seconds" -max_len=8192 -timeout=10 -rss_limit_mb=2048 \
  -print_final_stats=1 -artifact_prefix="$build_dir/" "$corpus"
