#!/usr/bin/env bash
# bench/dp.sh — `serve --dp 2` against one process on the same cores, as issue #45's goal is read: ROUNDS
# rounds (default 2), each `mpirun -np 2 hearth serve --dp 2 -t 1` then `hearth serve -t 2 --parallel 8`,
# 8 streaming clients x 64 tokens (bench/server_bench.js, one run after a warm-up), and the ratio of the two
# aggregates per round. For each server it also prints the CPU seconds each of its threads used during the
# measured run, to show what besides the engines takes the cores (rank 0's MPI thread, a replica's main
# thread). Not a test: it needs mpirun and node, and its numbers mean something only side by side.
#   bench/dp.sh MODEL.gguf [ROUNDS]      (HEARTH: the binary, default build/hearth; PORT: default 18731)
set -uo pipefail
model=${1:?usage: bench/dp.sh MODEL.gguf [ROUNDS]} rounds=${2:-2}
here=$(cd "$(dirname "$0")" && pwd)
hearth=$(realpath "${HEARTH:-$here/../build/hearth}") port=${PORT:-18731}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
ticks=$(getconf CLK_TCK)
threads() {   # "pid:tid ticks" of every thread of the servers started here
    for p in $(pgrep -f -- "$hearth serve -m $model"); do
        for t in /proc/$p/task/*; do echo "$p:${t##*/} $(awk '{print $14 + $15}' "$t/stat" 2>/dev/null)"; done
    done | sort
}
measure() {   # measure NAME ARGS...: starts the server, prints the aggregate t/s of 8 clients, stops it
    "${@:2}" >/dev/null 2>&1 & local pid=$!
    for _ in $(seq 300); do curl -sf "localhost:$port/health" >/dev/null && break; sleep 0.3; done
    node "$here/server_bench.js" --url "http://127.0.0.1:$port" --clients 8 --tokens 64 --runs 1 >/dev/null   # warm-up
    threads >"$tmp/a"
    node "$here/server_bench.js" --url "http://127.0.0.1:$port" --clients 8 --tokens 64 --runs 1 | awk '$1 == 8 {print $2}'
    threads >"$tmp/b"
    echo "  $1, CPU per thread (pid:tid) in the measured run:" >&2
    join "$tmp/a" "$tmp/b" | awk -v k="$ticks" '$3 > $2 {printf "    %s %.2f s\n", $1, ($3 - $2) / k}' >&2
    kill "$pid"; wait "$pid" 2>/dev/null
}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
for r in $(seq "$rounds"); do
    dp=$(measure "round $r --dp 2" mpirun --oversubscribe -np 2 "$hearth" serve -m "$model" --dp 2 -t 1 --port "$port")
    one=$(measure "round $r one process" "$hearth" serve -m "$model" -t 2 --parallel 8 --port "$port")
    echo "round $r: --dp 2 -t 1: $dp t/s, one process -t 2: $one t/s, ratio $(awk -v a="$dp" -v b="$one" 'BEGIN {printf "%.2f", a / b}')"
done
