#!/usr/bin/env bash
# soak.sh — the long reliability campaign: a mixed load for MINUTES (default 30) on one server (soak.mjs), then
# Debian's slowhttptest in each mode with 5,000 connections (slowloris.sh). CTest runs a short smoke of both (test_soak.sh).
# Usage: tests/soak/soak.sh [MINUTES]       (HEARTH = the binary, default build/hearth)
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
export HEARTH=${HEARTH:-$here/../../build/hearth}
[[ -d $here/../server/node_modules/openai ]] || (cd "$here/../server" && npm install --no-audit --no-fund --loglevel=error >/dev/null)
fail=0

SOAK_SECONDS=$(( ${1:-30} * 60 )) node "$here/soak.mjs" || fail=1
"$here/slowloris.sh" 5000 || fail=1
exit $fail
