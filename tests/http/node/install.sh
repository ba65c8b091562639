#!/usr/bin/env bash
# CTest fixture: installs the pinned openai client into node_modules (npm ci from the
# committed package-lock.json), unless the pinned version is already there.
set -euo pipefail
cd "$(dirname "$0")"
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  echo "node and npm are needed for the HTTP integration tests (Node 20)" >&2
  exit 1
fi
pinned=$(node -p "require('./package.json').dependencies.openai")
installed=$(node -p "try { require('./node_modules/openai/package.json').version } catch { '' }")
if [ "$installed" = "$pinned" ]; then
  echo "openai $pinned already installed"
  exit 0
fi
npm ci --no-audit --no-fund --loglevel=error
echo "installed openai $pinned"
