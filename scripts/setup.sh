#!/usr/bin/env bash
# Installs the Debian packages skippy's build and tests need. Idempotent: installs
# only what is missing, and runs apt-get update only then. Needs root (or sudo).
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config git
  libgtest-dev libgmock-dev libbenchmark-dev
  nlohmann-json3-dev libcli11-dev libcpp-httplib-dev libssl-dev libpcre2-dev
  clang libclang-rt-dev python3 iproute2
  python3-jinja2  # test oracle only: tests/jinja render templates with it to compare (never a runtime dependency)
  prometheus  # only its promtool is used (tests check /metrics); no daemon is started
  libhiredis-dev  # the prefix cache's shared tier speaks Redis (src/cache/redis_client.cpp)
  redis-server    # tests start their own on a free loopback port; the packaged daemon is not started
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all ${#packages[@]} packages present" >&2
  exit 0
fi

sudo_cmd=()
if [ "$(id -u)" -ne 0 ]; then sudo_cmd=(sudo); fi
echo "setup: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive

# Debian starts and enables the prometheus daemon (listening on :9090) and the redis
# daemon (:6379) when the packages are installed; we want only promtool and the
# redis-server binary. A temporary policy-rc.d keeps apt from starting services, and
# the units are disabled afterwards where systemd runs.
installing_services=false
[[ " ${missing[*]} " == *" prometheus "* || " ${missing[*]} " == *" redis-server "* ]] && installing_services=true
policy=/usr/sbin/policy-rc.d
if $installing_services && [ ! -e "$policy" ]; then
  printf '#!/bin/sh\nexit 101\n' | "${sudo_cmd[@]}" tee "$policy" >/dev/null
  "${sudo_cmd[@]}" chmod 755 "$policy"
  trap '"${sudo_cmd[@]}" rm -f "$policy"' EXIT
fi

"${sudo_cmd[@]}" apt-get update -qq
"${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null

if $installing_services && command -v systemctl >/dev/null 2>&1 && [ -d /run/systemd/system ]; then
  "${sudo_cmd[@]}" systemctl disable --now prometheus >/dev/null 2>&1 || true
  "${sudo_cmd[@]}" systemctl disable --now redis-server >/dev/null 2>&1 || true
fi
