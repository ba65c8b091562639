#!/usr/bin/env bash
# Builds the fuzzers (clang, libFuzzer + ASan + UBSan) in build-fuzz and runs each on one
# job for a bounded time: the protocol fuzzer, then the jinja template fuzzer.
# Usage: scripts/fuzz.sh [protocol_seconds] [jinja_seconds]   (defaults 60 and 20)
#
# The corpora live in build-fuzz/corpus/{protocol,jinja} (kept between runs); every run
# first writes fresh seeds into them (protocol_fuzz_seeds: one valid message of every
# kind; jinja_fuzz_seeds: the templates of tests/jinja and, when SKIPPY_TEST_DATA has
# them, the vocabularies' chat templates), so the seeds always match the current code.
# A crash leaves build-fuzz/crash-* behind: add it as a regression test in
# tests/protocol or tests/jinja before fixing it.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-60}
jinja_seconds=${2:-20}
build_dir=build-fuzz
generator=()
if command -v ninja >/dev/null 2>&1; then generator=(-G Ninja); fi
if [ ! -f "$build_dir/CMakeCache.txt" ]; then
  CC=clang CXX=clang++ cmake -S . -B "$build_dir" "${generator[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DSKIPPY_BUILD_FUZZERS=ON -DSKIPPY_BUILD_TESTS=OFF -DSKIPPY_BUILD_BENCH=OFF >&2
fi
cmake --build "$build_dir" --target protocol_fuzzer protocol_fuzz_seeds jinja_fuzzer jinja_fuzz_seeds \
  -j "$(nproc)" >&2

corpus="$build_dir/corpus/protocol"
mkdir -p "$corpus"
"$build_dir/fuzz/protocol_fuzz_seeds" "$corpus"  # seeds that match the current format
"$build_dir/fuzz/protocol_fuzzer" -max_total_time="$seconds" -max_len=8192 -timeout=10 -rss_limit_mb=2048 \
  -print_final_stats=1 -artifact_prefix="$build_dir/" "$corpus"

corpus="$build_dir/corpus/jinja"
mkdir -p "$corpus"
"$build_dir/fuzz/jinja_fuzz_seeds" "$corpus"
"$build_dir/fuzz/jinja_fuzzer" -max_total_time="$jinja_seconds" -max_len=20000 -timeout=10 -rss_limit_mb=2048 \
  -print_final_stats=1 -artifact_prefix="$build_dir/" "$corpus"
