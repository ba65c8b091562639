#!/usr/bin/env bash
# Builds the fuzzers (clang, libFuzzer + ASan + UBSan) in build-fuzz and runs each on one
# job for a bounded time: the protocol fuzzer, the jinja template fuzzer, the two
# grammar fuzzers (GBNF text, JSON schemas), then the HTTP request parser's.
# Usage: scripts/fuzz.sh [protocol_seconds] [jinja_seconds] [grammar_seconds] [http_seconds]
#   SKIPPY_FUZZ_BUILD_DIR: an existing clang tree configured with -DSKIPPY_BUILD_FUZZERS=ON
#   to build the fuzzers in (CI uses its ASan tree); default build-fuzz, configured here.
#   (defaults 60, 20, 20 and 20; grammar_seconds is for each grammar fuzzer)
#
# The corpora live in build-fuzz/corpus/<target> (kept between runs); every run first
# writes fresh seeds into them (protocol_fuzz_seeds: one valid message of every kind;
# jinja_fuzz_seeds: the templates of tests/jinja and, when SKIPPY_TEST_DATA has them,
# the vocabularies' chat templates; grammar_fuzz_seeds: sample grammars and the test
# corpus's schemas; a few HTTP requests, below), so the seeds always match the current
# code. A crash leaves build-fuzz/crash-* behind: add it as a regression test in
# tests/protocol, tests/jinja, tests/grammar or tests/http before fixing it.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-60}
jinja_seconds=${2:-20}
grammar_seconds=${3:-20}
http_seconds=${4:-20}
build_dir=${SKIPPY_FUZZ_BUILD_DIR:-build-fuzz}
generator=()
if command -v ninja >/dev/null 2>&1; then generator=(-G Ninja); fi
if [ ! -f "$build_dir/CMakeCache.txt" ]; then
  CC=clang CXX=clang++ cmake -S . -B "$build_dir" "${generator[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DSKIPPY_BUILD_FUZZERS=ON -DSKIPPY_BUILD_TESTS=OFF -DSKIPPY_BUILD_BENCH=OFF >&2
fi
cmake --build "$build_dir" --target protocol_fuzzer protocol_fuzz_seeds jinja_fuzzer jinja_fuzz_seeds \
  gbnf_fuzzer json_schema_fuzzer grammar_fuzz_seeds http_fuzz -j "$(nproc)" >&2

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

"$build_dir/fuzz/grammar_fuzz_seeds" "$build_dir/corpus/gbnf" "$build_dir/corpus/json_schema"
for target in gbnf json_schema; do
  "$build_dir/fuzz/${target}_fuzzer" -max_total_time="$grammar_seconds" -max_len=4096 -timeout=10 \
    -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix="$build_dir/" "$build_dir/corpus/$target"
done

# HTTP seeds: the first byte chooses how the fuzzer cuts the rest into pieces.
http_corpus="$build_dir/corpus/http"
mkdir -p "$http_corpus"
printf '\001GET /health HTTP/1.1\r\nHost: a\r\n\r\n' > "$http_corpus/seed-get"
printf '\002POST /v1/completions HTTP/1.1\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\nhelloGET /x?y HTTP/1.0\r\nConnection: keep-alive\r\n\r\n' > "$http_corpus/seed-pipelined"
printf '\003POST /v1/chat/completions HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n5;x=y\r\nhello\r\nA\r\n0123456789\r\n0\r\nT: v\r\n\r\n' > "$http_corpus/seed-chunked"
printf '\004GET http://h/v1/models/a%%2Fb HTTP/1.1\r\nA:  b \r\nContent-Length: 0\r\n\r\n' > "$http_corpus/seed-absolute"
"$build_dir/fuzz/http_fuzz" -max_total_time="$http_seconds" -max_len=4096 -timeout=10 -rss_limit_mb=2048 \
  -print_final_stats=1 -artifact_prefix="$build_dir/" "$http_corpus"
