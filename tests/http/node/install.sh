#!/usr/bin/env bash
# CTest fixture: installs the pinned test clients (the openai client; the ai SDK with
# its OpenAI-compatible provider and zod, for the agent-framework test) into
# node_modules (npm ci from the committed package-lock.json), unless every pinned
# version is already there.
set -euo pipefail
cd "$(dirname "$0")"
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  echo "node and npm are needed for the HTTP integration tests (Node 20)" >&2
  exit 1
fi
missing=$(node -e "
  const deps = require('./package.json').dependencies;
  const bad = Object.entries(deps).filter(([name, want]) => {
    try { return require('./node_modules/' + name + '/package.json').version !== want; } catch { return true; }
  });
  console.log(bad.map(([n, v]) => n + '@' + v).join(' '));
")
if [ -z "$missing" ]; then
  echo "pinned test clients already installed"
  exit 0
fi
npm ci --no-audit --no-fund --loglevel=error
echo "installed: $missing"
