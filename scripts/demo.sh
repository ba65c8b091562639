#!/usr/bin/env bash
# The main job on a fresh machine: set up, build, make the default model, and
# generate text with it through a two-stage chain with the prefix cache on.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh build
model=build/models/skippy-tiny.gguf
if [ ! -f "$model" ]; then
  mkdir -p build/models
  build/src/cli/skippy make-model --preset tiny -o "$model"
fi
build/src/cli/skippy generate -m "$model" -p "${1:-Once upon a time}" -n "${2:-32}" --seed 42 --stages 2
