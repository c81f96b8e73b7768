#!/usr/bin/env bash
# Data parallelism: `mpirun -np 2 hearth serve --dp 2` (two whole replicas, rank 0 routing) answers 8 concurrent
# clients (OpenAI completions and chat, streamed and not, a seed each, logprobs, stop strings that cut the text
# after several tokens) exactly as one `hearth serve` process does, three rounds; both replicas take requests
# (per-replica /metrics move); `mpirun -np 4 ... --dp 2 --tp 2` (two replicas, each split over two ranks) answers
# the same 8 and 2 greedy clients as one process too, on both replicas; clients that leave mid-stream are
# cancelled on their replica (logged there) while the others are answered; and the refusals (ranks that do not
# cut into the replicas or their --tp groups, --split on one-rank replicas, no mpirun, other commands, a bad
# value). Every wait is bounded: a lost reply is a FAIL naming the client, never a stuck test. Skipped when
# hearth is built without MPI or mpirun is missing.
set -uo pipefail
source "$(dirname "$0")/lib.sh"
need_mpi
tmp=$(mktemp -d)
pids=() clients=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done; wait 2>/dev/null; rm -rf "$tmp"; }
trap cleanup EXIT

# start_dp NAME ARGS...: `mpirun -np 2 hearth serve --dp 2 ARGS` on a free port (its output in $tmp/NAME.log); sets URL.
# (-k 10: an mpirun told to stop has been seen to hang on with its ranks gone; it is then killed, not waited on forever)
start_dp() { SERVE_VIA="timeout -k 10 120 mpirun --oversubscribe -np 2" start_server "$1" --dp 2 "${@:2}"; }
# post OUT URL PATH BODY: one client in the background (at most 30 s), its pid appended to `clients`
# (collected by pid: `jobs -p` forgets a client that already finished, and a wait on the list's tail then
# waits for the server instead), the HTTP status in OUT.code.
post() { timeout 30 curl -sS -o "$1" -w '%{http_code}' "$2$3" -d "$4" >"$1.code" 2>"$1.err" & clients+=($!); }
# The content of a reply, without ids and times: a reply's choices and usage; a stream's text, tokens and
# logprobs, and finish reason, joined over its chunks (how the chunks fall depends on timing).
norm() {
    if [[ $(head -c 5 "$1") == "data:" ]]; then
        sed -n 's/^data: {/{/p' "$1" | jq -sc '{text: (map(.choices[0] | (.text // .delta.content // "")) | add),
            lp: (map(.choices[0].logprobs | select(. != null) | (.content // [range(0; .tokens | length) as $i |
                 [.tokens[$i], .token_logprobs[$i], .top_logprobs[$i]]])) | add),
            finish: map(.choices[0].finish_reason | select(. != null))}'
    else jq -c '{choices, usage}' "$1"; fi
}
text_of() { norm "$1" | jq -r '.text // .choices[0].text // .choices[0].message.content'; }
finish_of() { norm "$1" | jq -r '.finish[0] // .choices[0].finish_reason'; }
metric() { curl -s "$1/metrics" | sed -n "s/^$2{replica=\"$3\"} //p"; }

# ---- 8 concurrent clients: the single process's replies ----
long="You are a storyteller for small children. Every story is short, kind and simple, with a happy ending and a lesson about friendship."
body() {   # body I [STOP]: request I (completions when odd, chat when even; streamed for I = 2, 3, 6, 7; greedy for 9, 10)
    local i=$1 stop=${2:-} st=false extra="" temp=0.9
    ((i > 8)) && temp=0
    [[ $i == [2367] ]] && st=true
    [[ $i == [13] ]] && extra=',"logprobs":2'
    [[ $i == [46] ]] && extra=',"logprobs":true,"top_logprobs":2'
    [[ -n $stop ]] && extra="$extra,\"stop\":[$(jq -Rn --arg s "$stop" '$s')]"
    local common="\"max_tokens\":48,\"temperature\":$temp,\"seed\":$((i * 7)),\"stream\":$st$extra"
    if ((i % 2)); then echo "{\"prompt\":\"Once upon a time, in a town by the sea $i\",$common}"
    else echo "{\"messages\":[{\"role\":\"system\",\"content\":\"$long\"},{\"role\":\"user\",\"content\":\"Tell me story number $i.\"}],$common}"; fi
}
path() { (($1 % 2)) && echo /v1/completions || echo /v1/chat/completions; }
start_server one --parallel 8 -t 1   # (lib.sh: the embedded model)
ONE=$URL
start_dp dp --parallel 4 -t 1
DP=$URL
# Requests 3, 5 and 6 stop at a piece of their own reply that spans several tokens (held back, then cut)
declare -A stop
for i in 3 5 6; do post "$tmp/free$i" "$ONE" "$(path $i)" "$(body $i)"; done
wait "${clients[@]}"
for i in 3 5 6; do s=$(text_of "$tmp/free$i"); stop[$i]=${s:10:12}; done
clients=()
for i in {1..10}; do post "$tmp/one$i" "$ONE" "$(path $i)" "$(body $i "${stop[$i]:-}")"; done
wait "${clients[@]}"
for i in {1..10}; do
    check "one process, client $i: 200 [$(cat "$tmp/one$i.code") $(cat "$tmp/one$i.err")]" '[[ $(cat "$tmp/one$i.code") == 200 ]]'
    norm "$tmp/one$i" >"$tmp/want$i"
done
for i in 3 5 6; do
    check "request $i: its stop string [${stop[$i]}] cut the reply [$(text_of "$tmp/one$i")]" \
        '[[ ${#stop[$i]} == 12 && $(finish_of "$tmp/one$i") == stop && $(text_of "$tmp/one$i" | wc -c) -le 11 ]]'
done

# ---- the same 8 at once against the two replicas, three rounds (prompt caches warm in the later ones) ----
# same_replies LABEL URL NAME N: requests 1..N at once to URL (replies in $tmp/NAME1..N), each answered with the
# single process's reply
same_replies() {
    local label=$1 url=$2 name=$3 n=$4 i code
    clients=()
    for ((i = 1; i <= n; i++)); do post "$tmp/$name$i" "$url" "$(path $i)" "$(body $i "${stop[$i]:-}")"; done
    wait "${clients[@]}"
    for ((i = 1; i <= n; i++)); do
        code=$(cat "$tmp/$name$i.code")
        check "$label, client $i: answered [$code $(cat "$tmp/$name$i.err")]" '[[ $code == 200 ]]'
        check "$label, client $i: the single process's reply [$(norm "$tmp/$name$i") vs $(cat "$tmp/want$i")]" \
            '[[ $(norm "$tmp/$name$i") == "$(cat "$tmp/want$i")" ]]'
    done
}
for round in 1 2 3; do same_replies "--dp 2 round $round" "$DP" dp 8; done
# both replicas took requests and generated (a replica's token count arrives with its twice-a-second heartbeat)
for _ in $(seq 40); do [[ $(metric "$DP" hearth_replica_tokens_generated_total 1) -gt 0 ]] && break; sleep 0.1; done
for r in 0 1; do
    n=$(metric "$DP" hearth_replica_requests_total $r) g=$(metric "$DP" hearth_replica_tokens_generated_total $r) a=$(metric "$DP" hearth_replica_active $r)
    check "replica $r: requests routed ($n), tokens generated ($g), none left active ($a)" '[[ $n -gt 0 && $g -gt 0 && $a == 0 ]]'
done
check "8 x 3 requests routed in all" '[[ $(($(metric "$DP" hearth_replica_requests_total 0) + $(metric "$DP" hearth_replica_requests_total 1))) == 24 ]]'

# ---- replicas of several ranks: -np 4 --dp 2 --tp 2, each replica's layers split over its two ranks ----
SERVE_VIA="timeout -k 10 120 mpirun --oversubscribe -np 4" start_server dptp --dp 2 --tp 2 --parallel 4 -t 1
DPTP=$URL
same_replies "--dp 2 --tp 2" "$DPTP" tp 10
for _ in $(seq 40); do [[ $(metric "$DPTP" hearth_replica_tokens_generated_total 1) -gt 0 ]] && break; sleep 0.1; done
for r in 0 1; do
    n=$(metric "$DPTP" hearth_replica_requests_total $r) g=$(metric "$DPTP" hearth_replica_tokens_generated_total $r)
    check "--dp 2 --tp 2, replica $r: requests routed ($n), tokens generated ($g)" '[[ $n -gt 0 && $g -gt 0 ]]'
done
check "--dp 2 --tp 2: two replicas of two ranks, each rank of replica 1 holding its part [$(grep -v "^POST" "$tmp/dptp.log")]" \
    'grep -q "^data parallel: 2 replicas of 2 ranks each" "$tmp/dptp.log" &&
     grep -qE "^replica 1: rank 0/2 on .*: layers 0-4, tensor part 1/2 " "$tmp/dptp.log" &&
     grep -qE "^replica 1: rank 1/2 on .*: layers 0-4, tensor part 2/2 " "$tmp/dptp.log"'

# ---- clients that leave mid-stream (a model slow enough, ~5 ms a token, that 1500 tokens take seconds) ----
"$HEARTH" synth --shape tiny-llama --type Q4_0 --layers "$(slow_layers 192)" -o "$tmp/slow.gguf" -t 1 2>/dev/null
start_dp slow -m "$tmp/slow.gguf" --parallel 4 -t 1 -c 2048
SLOW=$URL
leave='{"prompt":"hello world","max_tokens":1500,"ignore_eos":true,"temperature":0,"stream":true}'
t0=$SECONDS
leaving=()
for k in 1 2; do timeout 1 curl -sN "$SLOW/v1/completions" -d "$leave" -o "$tmp/leave$k" & leaving+=($!); done   # one per replica
sleep 0.3
clients=()
for i in 1 2 3 4; do
    post "$tmp/stay$i" "$SLOW" /v1/completions "{\"prompt\":\"hello $i\",\"max_tokens\":24,\"ignore_eos\":true,\"seed\":$i,\"stream\":$([[ $i == [12] ]] && echo true || echo false)}"
done
wait "${clients[@]}" "${leaving[@]}"
for i in 1 2 3 4; do
    check "clients that stay are answered while others leave, client $i [$(cat "$tmp/stay$i.code")]" \
        '[[ $(cat "$tmp/stay$i.code") == 200 ]] && grep -q "\"finish_reason\":\"length\"" "$tmp/stay$i"'
done
check "the leaving clients had begun to receive their streams" '[[ -s $tmp/leave1 && -s $tmp/leave2 ]]'
for _ in $(seq 100); do
    [[ $(metric "$SLOW" hearth_replica_active 0) == 0 && $(metric "$SLOW" hearth_replica_active 1) == 0 ]] && break
    sleep 0.1
done
check "the streams left were cancelled on both replicas within seconds ($((SECONDS - t0)) s)" \
    '[[ $(metric "$SLOW" hearth_replica_active 0) == 0 && $(metric "$SLOW" hearth_replica_active 1) == 0 && $((SECONDS - t0)) -lt 8 ]]'
check "replica 1 logged the cancellation [$(grep -v "^POST" "$tmp/slow.log")]" 'grep -qE "^replica 1: request [0-9]+ cancelled \(its client left\)$" "$tmp/slow.log"'
check "rank 0 logged both as 499 [$(grep "^POST" "$tmp/slow.log")]" '[[ $(grep -c "^POST /v1/completions 499 .*(cancelled)" "$tmp/slow.log") == 2 ]]'
sleep 0.6   # the last heartbeat: the cancelled sequence stopped early on replica 1
check "replica 1 stopped generating the cancelled stream ($(metric "$SLOW" hearth_replica_tokens_generated_total 1) tokens)" \
    '[[ $(metric "$SLOW" hearth_replica_tokens_generated_total 1) -lt 1000 ]]'

# ---- refusals: one line each ----
f=$tmp/slow.gguf
refused() {   # refused NP MESSAGE ARGS...: mpirun -np NP hearth serve ARGS fails with the one error line MESSAGE
    local np=$1 msg=$2; shift 2
    err=$(timeout 60 mpirun --oversubscribe -np "$np" "$HEARTH" serve -m "$f" --port 0 "$@" 2>&1)
    check "-np $np $*: refused [$err]" '[[ $(grep -c "^error:" <<<"$err") == 1 && $err == *"error: $msg"* ]]'
}
refused 3 "--dp 2: the job has 3 ranks, not a multiple of 2 (mpirun -np 2N: N ranks per replica)" --dp 2 --tp 2
refused 4 "--dp 2 --tp 3: each replica has 2 ranks (4 / 2), not a multiple of 3" --dp 2 --tp 3
refused 2 "--dp 2 --split: each replica has one rank (2 / 2); start it with mpirun -np 4 (the ranges' count times 2)" --dp 2 --split 96,96
refused 4 "--split gives 3 ranges of layers for 2 ranks per replica" --dp 2 --split 64,64,64
check "--dp without mpirun: refused" 'one_error_line "$HEARTH" serve -m "$f" --dp 2 && [[ $LAST_ERR == "error: --dp 2: start hearth with mpirun -np 2 (one rank per replica)" ]]'
check "--dp --tp without mpirun: refused" 'one_error_line "$HEARTH" serve -m "$f" --dp 2 --tp 2 && [[ $LAST_ERR == "error: --dp 2: start hearth with mpirun -np 2N (N ranks per replica)" ]]'
check "--dp on run: refused" 'one_error_line "$HEARTH" run -m "$f" -p hi --dp 2 && [[ $LAST_ERR == "error: --dp: only hearth serve runs replicas"* ]]'
check "--dp 0: refused" 'one_error_line "$HEARTH" serve -m "$f" --dp 0 && [[ $LAST_ERR == "error: --dp needs a value from 1 to 1024"* ]]'

exit $fail
