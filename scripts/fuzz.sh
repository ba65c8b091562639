#!/usr/bin/env bash
# Builds the fuzzers (clang, libFuzzer + ASan + UBSan) in build-fuzz and runs each of the
# eight on one job, then prints a table of executions and results per fuzzer: the
# protocol fuzzer, the jinja template fuzzer, the two grammar fuzzers (GBNF text, JSON
# schemas), the HTTP request parser's, the GGUF reader's (with the hyper-parameter and
# vocabulary checks a load runs), the stage-link handshake's (listener side) and the
# tokenizers'.
#
# Usage: scripts/fuzz.sh [protocol_seconds] [jinja_seconds] [grammar_seconds] [http_seconds] [other_seconds]
#   Time-bounded: each fuzzer runs for its seconds (defaults 60, 20, 20, 20 and 20;
#   grammar_seconds is for each grammar fuzzer, other_seconds for each of gguf,
#   handshake and tokenizer). `scripts/fuzz.sh 3600` is the long run: an hour of the
#   protocol fuzzer, then the others for their defaults. CI runs 30 12 12 12 12.
#   SKIPPY_FUZZ_RUNS=N: instead of time, every fuzzer runs N executions (libFuzzer
#   -runs=N; positional seconds are ignored), e.g. SKIPPY_FUZZ_RUNS=10000000 for the
#   on-demand deep run (hours: the tokenizer fuzzer does a few hundred a second).
#   SKIPPY_FUZZ_TIMEOUT=S: libFuzzer's per-input timeout in seconds (default 10). It is
#   wall-clock time: a deep run at low priority on a busy machine wants more (e.g. 60),
#   or an input that takes 0.3 s of CPU is reported as a timeout when starved.
#   SKIPPY_FUZZ_JOBS=J: each fuzzer runs as J processes at once on its one corpus (libFuzzer
#   reloads the corpus from disk, so each process picks up what the others found), for a
#   deep run on J cores: with SKIPPY_FUZZ_RUNS=N each process runs N/J (rounded up) and
#   the table gives their sum; time-bounded, each runs for the seconds. Their logs are
#   build-fuzz/fuzz-logs/<fuzzer>.<j>.log. Default 1.
#   SKIPPY_FUZZ_ONLY=a,b: run only the named fuzzers (protocol, jinja, gbnf, json_schema,
#   http, gguf, handshake, tokenizer), e.g. to spread the deep run over several shells,
#   one list each (a shell per core).
#   SKIPPY_FUZZ_BUILD_DIR: an existing clang tree configured with -DSKIPPY_BUILD_FUZZERS=ON
#   to build the fuzzers in (CI uses its ASan tree); default build-fuzz, configured here.
#   SKIPPY_TEST_DATA: the shared data (default ../shared); its vocabularies feed the
#   tokenizer fuzzer and the jinja and tokenizer seeds (without it they use synthetic ones).
#
# The corpora live in build-fuzz/corpus/<fuzzer> (kept between runs); every run first
# writes fresh seeds into them (protocol_fuzz_seeds: one valid message of every kind;
# jinja_fuzz_seeds: the templates of tests/jinja and, when SKIPPY_TEST_DATA has them,
# the vocabularies' chat templates; grammar_fuzz_seeds: sample grammars and the test
# corpus's schemas; a few HTTP requests, below; gguf_fuzz_seeds: tiny synthetic models of
# every architecture and vocabulary-only files; handshake_fuzz_seeds: a hello of every
# link kind; tokenizer_fuzz_seeds: the vocabularies' test strings and hand-written ones),
# so the seeds always match the current code. Each fuzzer's output goes to
# build-fuzz/fuzz-logs/<fuzzer>.log. A crash leaves build-fuzz/crash-* (or timeout-*,
# oom-*) behind, named in the table: add it as a regression test in tests/<part> before
# fixing it. The exit status is non-zero when any fuzzer failed.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-60}
jinja_seconds=${2:-20}
grammar_seconds=${3:-20}
http_seconds=${4:-20}
other_seconds=${5:-20}
runs=${SKIPPY_FUZZ_RUNS:-}
only=${SKIPPY_FUZZ_ONLY:-}
unit_timeout=${SKIPPY_FUZZ_TIMEOUT:-10}
jobs=${SKIPPY_FUZZ_JOBS:-1}
# libFuzzer reads -max_total_time=0 as "no limit": a bound of 0 would run forever.
for value in "$seconds" "$jinja_seconds" "$grammar_seconds" "$http_seconds" "$other_seconds"; do
  if ! [[ "$value" =~ ^[1-9][0-9]*$ ]]; then
    echo "fuzz.sh: the seconds must be positive numbers, not '$value'" >&2
    exit 2
  fi
done
if ! [[ "$jobs" =~ ^[1-9][0-9]*$ ]]; then
  echo "fuzz.sh: SKIPPY_FUZZ_JOBS must be a positive number of processes, not '$jobs'" >&2
  exit 2
fi
if ! [[ "$unit_timeout" =~ ^[1-9][0-9]*$ ]]; then
  echo "fuzz.sh: SKIPPY_FUZZ_TIMEOUT must be a positive number of seconds, not '$unit_timeout'" >&2
  exit 2
fi
known_fuzzers=" protocol jinja gbnf json_schema http gguf handshake tokenizer "
for name in ${only//,/ }; do
  if [[ "$known_fuzzers" != *" $name "* ]]; then
    echo "fuzz.sh: SKIPPY_FUZZ_ONLY names '$name'; the fuzzers are:$known_fuzzers" >&2
    exit 2
  fi
done
if [ -n "$runs" ] && ! [[ "$runs" =~ ^[1-9][0-9]*$ ]]; then
  echo "fuzz.sh: SKIPPY_FUZZ_RUNS must be a positive number of executions, not '$runs'" >&2
  exit 2
fi
build_dir=${SKIPPY_FUZZ_BUILD_DIR:-build-fuzz}
generator=()
if command -v ninja >/dev/null 2>&1; then generator=(-G Ninja); fi
if [ ! -f "$build_dir/CMakeCache.txt" ]; then
  CC=clang CXX=clang++ cmake -S . -B "$build_dir" "${generator[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DSKIPPY_BUILD_FUZZERS=ON -DSKIPPY_BUILD_TESTS=OFF -DSKIPPY_BUILD_BENCH=OFF >&2
fi
cmake --build "$build_dir" --target protocol_fuzzer protocol_fuzz_seeds jinja_fuzzer jinja_fuzz_seeds \
  gbnf_fuzzer json_schema_fuzzer grammar_fuzz_seeds http_fuzz gguf_fuzz gguf_fuzz_seeds \
  handshake_fuzz handshake_fuzz_seeds tokenizer_fuzz tokenizer_fuzz_seeds -j "$(nproc)" >&2

logs="$build_dir/fuzz-logs"
mkdir -p "$logs"
summary=()
failed=0

# run_fuzzer NAME BINARY SECONDS CORPUS [libFuzzer flags...]: one bounded run, its
# output in $logs/NAME.log (and on stderr), a row for the table.
run_fuzzer() {
  local name=$1 binary=$2 secs=$3 corpus=$4
  shift 4
  if [ -n "$only" ] && [[ ",$only," != *",$name,"* ]]; then return 0; fi
  local bound=(-max_total_time="$secs")
  if [ -n "$runs" ]; then bound=(-runs="$(((runs + jobs - 1) / jobs))"); fi
  local flags=("${bound[@]}" -timeout="$unit_timeout" -rss_limit_mb=2048 -print_final_stats=1
    -artifact_prefix="$build_dir/" "$@" "$corpus")
  local rc=0 job_logs=()
  if [ "$jobs" -eq 1 ]; then
    job_logs=("$logs/$name.log")
    "$build_dir/fuzz/$binary" "${flags[@]}" 2>&1 | tee "$logs/$name.log" >&2 || rc=$?
  else
    local pids=() j pid
    for ((j = 1; j <= jobs; ++j)); do
      job_logs+=("$logs/$name.$j.log")
      "$build_dir/fuzz/$binary" "${flags[@]}" > "$logs/$name.$j.log" 2>&1 &
      pids+=($!)
    done
    echo "fuzz.sh: $name: $jobs processes, logs in $logs/$name.<1..$jobs>.log" >&2
    # The first process to fail stops the others: its input is what the run is for.
    # A finished process leaves the list: wait -n on a pid already reaped says "no such job".
    local status finished live
    while [ ${#pids[@]} -gt 0 ]; do
      status=0
      finished=
      wait -n -p finished "${pids[@]}" || status=$?
      live=()
      if [ -n "$finished" ]; then  # (none: no child left to wait for)
        for pid in "${pids[@]}"; do
          if [ "$pid" != "$finished" ]; then live+=("$pid"); fi
        done
      fi
      pids=("${live[@]}")
      if [ "$status" -ne 0 ] && [ "$rc" -eq 0 ]; then
        rc=$status
        if [ ${#pids[@]} -gt 0 ]; then kill "${pids[@]}" 2>/dev/null || true; fi
      fi
    done
  fi
  # Executions and rates add up over the processes; "?" when a log has no final stats.
  local execs=0 rate=0 log value result
  for log in "${job_logs[@]}"; do
    value=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
    if [[ "$value" =~ ^[0-9]+$ ]] && [ "$execs" != "?" ]; then execs=$((execs + value)); else execs="?"; fi
    value=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
    if [[ "$value" =~ ^[0-9]+$ ]] && [ "$rate" != "?" ]; then rate=$((rate + value)); else rate="?"; fi
  done
  if [ "$rc" -eq 0 ]; then
    result=ok
  else
    failed=1
    result="FAILED (exit $rc)"
    local artifact
    artifact=$(sed -n "s/.*Test unit written to //p" "${job_logs[@]}" | tail -1)
    if [ -n "$artifact" ]; then result="FAILED: $artifact"; fi
  fi
  summary+=("$(printf '%-12s %12s %10s  %s' "$name" "$execs" "$rate" "$result")")
}

corpus="$build_dir/corpus/protocol"
mkdir -p "$corpus"
"$build_dir/fuzz/protocol_fuzz_seeds" "$corpus"  # seeds that match the current format
run_fuzzer protocol protocol_fuzzer "$seconds" "$corpus" -max_len=8192

corpus="$build_dir/corpus/jinja"
mkdir -p "$corpus"
"$build_dir/fuzz/jinja_fuzz_seeds" "$corpus"
run_fuzzer jinja jinja_fuzzer "$jinja_seconds" "$corpus" -max_len=20000

mkdir -p "$build_dir/corpus/gbnf" "$build_dir/corpus/json_schema"
"$build_dir/fuzz/grammar_fuzz_seeds" "$build_dir/corpus/gbnf" "$build_dir/corpus/json_schema"
for target in gbnf json_schema; do
  run_fuzzer "$target" "${target}_fuzzer" "$grammar_seconds" "$build_dir/corpus/$target" -max_len=4096
done

# HTTP seeds: the first byte chooses how the fuzzer cuts the rest into pieces.
http_corpus="$build_dir/corpus/http"
mkdir -p "$http_corpus"
printf '\001GET /health HTTP/1.1\r\nHost: a\r\n\r\n' > "$http_corpus/seed-get"
printf '\002POST /v1/completions HTTP/1.1\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\nhelloGET /x?y HTTP/1.0\r\nConnection: keep-alive\r\n\r\n' > "$http_corpus/seed-pipelined"
printf '\003POST /v1/chat/completions HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n5;x=y\r\nhello\r\nA\r\n0123456789\r\n0\r\nT: v\r\n\r\n' > "$http_corpus/seed-chunked"
printf '\004GET http://h/v1/models/a%%2Fb HTTP/1.1\r\nA:  b \r\nContent-Length: 0\r\n\r\n' > "$http_corpus/seed-absolute"
run_fuzzer http http_fuzz "$http_seconds" "$http_corpus" -max_len=4096

# GGUF: room for the seed models; any one allocation beyond 256 MiB from a file this
# small is a bug (a count or length believed before it was checked).
corpus="$build_dir/corpus/gguf"
mkdir -p "$corpus"
"$build_dir/fuzz/gguf_fuzz_seeds" "$corpus"
run_fuzzer gguf gguf_fuzz "$other_seconds" "$corpus" -max_len=81920 -malloc_limit_mb=256

# Handshake inputs stay under a socket buffer, so the fuzzer's writes never block.
corpus="$build_dir/corpus/handshake"
mkdir -p "$corpus"
"$build_dir/fuzz/handshake_fuzz_seeds" "$corpus"
run_fuzzer handshake handshake_fuzz "$other_seconds" "$corpus" -max_len=4096

corpus="$build_dir/corpus/tokenizer"
mkdir -p "$corpus"
"$build_dir/fuzz/tokenizer_fuzz_seeds" "$corpus"
run_fuzzer tokenizer tokenizer_fuzz "$other_seconds" "$corpus" -max_len=1024

if [ -n "$runs" ]; then bound_text="$runs executions each"; else bound_text="time-bounded"; fi
if [ "$jobs" -gt 1 ]; then bound_text="$bound_text, $jobs processes per fuzzer"; fi
echo "fuzz.sh: summary ($bound_text)"
printf '%-12s %12s %10s  %s\n' fuzzer executions exec/s result
printf '%s\n' "${summary[@]}"
exit "$failed"
