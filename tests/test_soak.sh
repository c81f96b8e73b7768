#!/usr/bin/env bash
# A short smoke of the reliability campaign (tests/soak/soak.sh runs it for 30 minutes): 15 s of mixed load on one
# server with its memory watched (soak/soak.mjs), then slowhttptest's slow headers, slow body and slow read with 300
# connections each while /health must keep answering, against a 4 s header deadline that must close them all
# (soak/slowloris.sh; the campaign runs 5,000).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/lib.sh"
if ! command -v node >/dev/null; then echo "FAIL: node not found (apt-get install -y nodejs npm)"; exit 1; fi
check "mixed load, 15 s" 'SOAK_SECONDS=15 timeout 120 node "$here/soak/soak.mjs"'
check "slowhttptest, 300 connections a mode, 4 s deadline" 'timeout 120 "$here/soak/slowloris.sh" 300 4 "H B X"'
[[ $fail -eq 0 ]] && echo "all soak checks passed"
exit $fail
