#!/usr/bin/env bash
# slowloris.sh — Debian's slowhttptest against `hearth serve` on 127.0.0.1, CONNECTIONS strong (default 5000, above
# the server's limit of 4000), opened 250 a second, each sending a little every 2 s (never idle long enough for the
# idle timeout). Modes, each on a fresh server:
#   H  slow headers (slowloris), --timeout-headers DEADLINE
#   B  slow body (R-U-Dead-Yet: a 64 KiB Content-Length, a few bytes every 2 s), same deadline
#   X  slow read (three pipelined requests for the chat page, read 16 bytes every 2 s through a tiny window)
#   L  slow headers with a deadline longer than the attack (300 s): the connections pile up to the limit, and the
#      server must make room by closing the ones waiting longest for their request
# While each runs, a normal client asks /health every second (curl, 2 s timeout): every probe must be answered.
# In H, B and X the slow connections must not outlive the deadline: from the second slowhttptest has opened them
# all (its own per-second counts) to the second the server holds none of them (ss), at most DEADLINE + 5 s.
# Prints per mode: probes answered and the slowest, the most connections the server held (ss), that time, and the
# server's count of connections closed late or to make room.
# Usage: tests/soak/slowloris.sh [CONNECTIONS, default 5000] [DEADLINE s, default 20] [MODES, default "H B X L"]
#        (HEARTH = the binary, default build/hearth; from the repo root or anywhere; about a minute a mode)
set -uo pipefail
conns=${1:-5000}; deadline=${2:-20}; modes=${3:-H B X L}
(( conns >= 1 && conns <= 10000 )) || { echo "FAIL: CONNECTIONS must be 1..10000"; exit 1; }
root=$(cd "$(dirname "$0")/../.." && pwd)
HEARTH=${HEARTH:-$root/build/hearth}
command -v slowhttptest >/dev/null || { echo "SKIP: slowhttptest not installed (apt-get install slowhttptest)"; exit 0; }
tmp=$(mktemp -d); srv=
trap '[[ -n $srv ]] && kill $srv 2>/dev/null; rm -rf "$tmp"' EXIT
ulimit -n "$(ulimit -Hn)" 2>/dev/null
(( $(ulimit -n) > conns + 100 )) || { echo "FAIL: open-file limit $(ulimit -n) is below $conns connections"; exit 1; }
rate=250 fail=0
open_s=$(( (conns + rate - 1) / rate ))

# serve DEADLINE: a fresh server; sets URL and port
serve() {
    [[ -n $srv ]] && { kill $srv; wait $srv 2>/dev/null; }
    "$HEARTH" serve --host 127.0.0.1 --port 0 -t 1 --timeout-headers "$1" 2>"$tmp/srv.log" & srv=$!
    URL=
    for _ in $(seq 200); do URL=$(grep -o 'http://127\.0\.0\.1:[0-9]*' "$tmp/srv.log" | head -1); [[ -n $URL ]] && break; sleep 0.05; done
    [[ -n $URL ]] || { echo "FAIL: the server did not start"; cat "$tmp/srv.log"; exit 1; }
    port=${URL##*:}
}
held() { ss -Htn state established "( sport = :$port )" 2>/dev/null | wc -l; }

for mode in $modes; do
    d=$deadline
    case $mode in
        H) args=(-H -t GET -u /v1/models) ;;
        B) args=(-B -t POST -u /v1/completions -s 65536) ;;
        X) args=(-X -t GET -u / -k 3 -n 2 -w 16 -y 32 -z 16) ;;
        L) args=(-H -t GET -u /v1/models); d=300 ;;
        *) echo "FAIL: unknown mode $mode"; exit 1 ;;
    esac
    serve "$d"
    args[4]=$URL${args[4]}
    # at most this long (slowhttptest ends once it holds no connection; L once its connections have piled up)
    limit=$(( 3 * open_s + d + 30 ))
    [[ $mode == L ]] && limit=$(( 2 * open_s + 20 ))
    slowhttptest "${args[@]}" -c "$conns" -r "$rate" -i 2 -x 8 -l "$limit" -p 3 -g -o "$tmp/slow-$mode" >"$tmp/slow-$mode.log" 2>&1 &
    att=$! start=$(date +%s%N)
    ok=0 bad=0 worst=0 most=0
    : >"$tmp/held"
    for _ in $(seq "$limit"); do
        t0=$(date +%s%N)
        if curl -s -m 2 "$URL/health" | grep -q '"status":"ok"'; then ok=$((ok + 1)); else bad=$((bad + 1)); fi
        ms=$(( ($(date +%s%N) - t0) / 1000000 )); (( ms > worst )) && worst=$ms
        n=$(held); (( n > most )) && most=$n
        echo "$(( ($(date +%s%N) - start) / 1000000000 )) $n" >>"$tmp/held"
        (( most > 1 && n <= 1 )) && break   # the server holds none of them any more
        kill -0 $att 2>/dev/null || (( most > 1 )) || break
        sleep 0.8
    done
    kill $att 2>/dev/null; wait $att 2>/dev/null
    # when slowhttptest had opened them all (its per-second counts: closed + connected = all), and when the server
    # (ss, once a second) held none of them any more
    t_all=$(awk -F, -v c="$conns" '$1 ~ /^[0-9]+$/ && $2 + $4 >= c { print $1; exit }' "$tmp/slow-$mode.csv" 2>/dev/null)
    t_all=${t_all:--1}
    t_none=$(awk -v a="$t_all" 'a >= 0 && $1 >= a && $2 <= 1 { print $1; exit }' "$tmp/held")
    t_none=${t_none:--1}
    late=$(curl -s "$URL/metrics" | awk '/^hearth_connections_closed_late_total/ { print $2 }')
    line="slowhttptest -$mode, $conns connections, deadline $d s: /health answered $ok of $((ok + bad)) probes (slowest $worst ms);"
    line+=" the server held at most $most connections; closed late or to make room: $late;"
    if [[ $mode == L ]]; then
        echo "$line all open by second $t_all"
    else
        echo "$line all open by second $t_all, none left at second $t_none ($(( t_none - t_all )) s later)"
        (( t_all >= 0 && t_none >= 0 && t_none - t_all <= d + 5 )) || fail=1
    fi
    [[ $bad -eq 0 ]] || fail=1
    kill -0 $srv 2>/dev/null || { echo "FAIL: the server died"; fail=1; }
done
[[ $fail -eq 0 ]] && echo "all slowloris checks passed" || echo "FAIL: a probe went unanswered or slow connections outlived the deadline"
exit $fail
