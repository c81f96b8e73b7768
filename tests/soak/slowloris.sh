#!/usr/bin/env bash
# slowloris.sh — Debian's slowhttptest against `hearth serve`, with a probe of /health every second: the server
# must answer every probe while the attack runs (slow headers, slow body and slow read in turn).
# Usage: tests/soak/slowloris.sh [SECONDS per mode, default 45] [CONNECTIONS, default 1000]
#        (HEARTH = the binary, default build/hearth; from the repo root or anywhere)
set -uo pipefail
secs=${1:-45}; conns=${2:-1000}
root=$(cd "$(dirname "$0")/../.." && pwd)
HEARTH=${HEARTH:-$root/build/hearth}
command -v slowhttptest >/dev/null || { echo "SKIP: slowhttptest not installed (apt-get install slowhttptest)"; exit 0; }
tmp=$(mktemp -d); trap 'kill $srv 2>/dev/null; rm -rf "$tmp"' EXIT
ulimit -n "$(ulimit -Hn)" 2>/dev/null
"$HEARTH" serve --host 127.0.0.1 --port 0 -t 1 2>"$tmp/srv.log" & srv=$!
for _ in $(seq 200); do URL=$(grep -o 'http://127\.0\.0\.1:[0-9]*' "$tmp/srv.log" | head -1); [[ -n $URL ]] && break; sleep 0.05; done
[[ -n ${URL:-} ]] || { echo "FAIL: the server did not start"; cat "$tmp/srv.log"; exit 1; }
fail=0
for mode in H B X; do
    slowhttptest -$mode -c "$conns" -r 200 -i 5 -l "$secs" -u "$URL/v1/completions" -t POST -p 3 >"$tmp/slow-$mode.log" 2>&1 &
    att=$!
    ok=0 bad=0
    for _ in $(seq "$secs"); do
        if curl -s -m 2 "$URL/health" | grep -q '"status":"ok"'; then ok=$((ok + 1)); else bad=$((bad + 1)); fi
        sleep 1
    done
    wait $att
    echo "slowhttptest -$mode, $conns connections, $secs s: health answered $ok of $((ok + bad)) probes"
    [[ $bad -eq 0 ]] || fail=1
done
kill -0 $srv 2>/dev/null || { echo "FAIL: the server died"; fail=1; }
[[ $fail -eq 0 ]] && echo "all slowloris checks passed" || echo "FAIL: some probes went unanswered"
exit $fail
