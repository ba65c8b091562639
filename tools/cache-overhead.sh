#!/usr/bin/env bash
# What the prefix cache costs when it never hits, in instructions (callgrind counts
# instructions, not seconds, so the figures repeat on a busy machine).
# Usage: tools/cache-overhead.sh MODEL [STAGES] [PROMPT_TOKENS]
# Runs `skippy bench-cache --scenario no-hit` under callgrind with --kv-cache off and
# lookup-record and prints total instructions, plus the parts of the difference that
# are not on a request's path: background records (record_worker::run, a SCHED_IDLE
# thread) and the model identity hashed at load.
set -euo pipefail
cd "$(dirname "$0")/.."
model=${1:?usage: tools/cache-overhead.sh MODEL [STAGES] [PROMPT_TOKENS]}
stages=${2:-2}
prompt=${3:-128}
exe=build/src/cli/skippy
out=$(mktemp -d)
inclusive() {  # file, symbol pattern -> instructions of the first matching function
  local table
  table=$(callgrind_annotate --inclusive=yes "$1" 2>/dev/null || true)
  printf '%s\n' "$table" | awk -v pat="$2" '!found && index($0, pat) { gsub(",", "", $1); print $1; found = 1 } END { if (!found) print 0 }'
}
for mode in off lookup-record; do
  valgrind --tool=callgrind --callgrind-out-file="$out/$mode.out" "$exe" bench-cache -m "$model" --stages "$stages" \
    --scenario no-hit --prefix-tokens $((prompt - 8)) --suffix-tokens 8 --repeat 2 --kv-cache "$mode" --json \
    >/dev/null 2>"$out/$mode.err"
done
total_off=$(grep -o 'Collected : [0-9]*' "$out/off.err" | awk '{print $3}')
total_on=$(grep -o 'Collected : [0-9]*' "$out/lookup-record.err" | awk '{print $3}')
records=$(inclusive "$out/lookup-record.out" 'record_worker::run() [')
identity=$(inclusive "$out/lookup-record.out" 'model_identity')
python3 - "$total_off" "$total_on" "$records" "$identity" <<'PY'
import json, sys
off, on, records, identity = map(int, sys.argv[1:])
request_path = on - off - records - identity
print(json.dumps({"instructions_cache_off": off, "instructions_cache_on": on,
                  "background_record_instructions": records, "load_identity_instructions": identity,
                  "request_path_extra_instructions": request_path,
                  "request_path_extra_fraction": request_path / off,
                  "total_extra_fraction": (on - off) / off}))
PY
rm -rf "$out"
