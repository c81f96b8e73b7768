#!/usr/bin/env bash
# One model over several processes: `mpirun -np 2|3 hearth ...` splits the layers over the ranks (src/dist), with
# --tp K also every layer over groups of K ranks, and everything rank 0 prints must be identical, bit for bit, to
# the single process: the golden outputs of the
# llama, gemma3 (sliding-window layers on several ranks) and qwen3 fixtures, batched and token by token; on
# models synthesized deep enough for 3 ranks, the logits of long prompts cut into micro-batches (perplexity's
# outputs via golden files), the text `run --seed 1` samples, and replies of the server under 4 concurrent
# clients. A rank that cannot load its part, a killed rank and a stopped rank end the job with an error naming
# the rank, never a hang. Skipped when hearth is built without MPI or mpirun is missing.
set -uo pipefail
source "$(dirname "$0")/lib.sh"
need_mpi
tmp=$(mktemp -d); trap 'pkill -9 -f "$tmp" 2>/dev/null; rm -rf "$tmp"' EXIT
mpi() { local np=$1; shift; timeout 120 mpirun --oversubscribe -np "$np" "$HEARTH" "$@"; }

# The fixtures' goldens (2+ layers: -np 2), all outputs of every case, batched and token by token.
for m in llama gemma3 qwen3 gemma3-Q8_0 mixtral qwen35moe; do   # (qwen35moe: recurrent layers on both ranks)
    for mode in "" --token-by-token; do
        "$HEARTH" golden -m data/models/$m.gguf -i data/golden/$m.golden -o "$tmp/one.golden" -t 1 $mode 2>/dev/null
        err=$(mpi 2 golden -m data/models/$m.gguf -i data/golden/$m.golden -o "$tmp/two.golden" -t 1 $mode 2>&1)
        check "$m $mode -np 2: golden outputs identical to one process [$err]" 'cmp -s "$tmp/one.golden" "$tmp/two.golden"'
        check "$m $mode -np 2: each rank names its layers [$err]" \
            '[[ $err =~ "rank 0/2 on "[^:]+": layers 0-"([0-9]+)" ("[0-9]+" MiB of weights)" &&
               $err =~ "rank 1/2 on "[^:]+": layers "$((BASH_REMATCH[1] + 1))"-"[0-9]+" ("[0-9]+" MiB of weights)" ]]'
        rm -f "$tmp/two.golden"
    done
done
check "gemma3 -np 3 (7 layers): golden identical" '"$HEARTH" golden -m data/models/gemma3.gguf -i data/golden/gemma3.golden -o "$tmp/one.golden" -t 1 2>/dev/null &&
    mpi 3 golden -m data/models/gemma3.gguf -i data/golden/gemma3.golden -o "$tmp/three.golden" -t 1 2>/dev/null && cmp -s "$tmp/one.golden" "$tmp/three.golden"'

# Tensor parallel (--tp K): each rank of a group holds its kv heads and a share of every matrix's rows (of
# every expert's, for the mixtures) and of the output head, and only copies cross the ranks, so everything is
# identical to one process: the fixtures' goldens at --tp 2 (batched; token by token too for a dense model and a
# mixture) and at -np 4 --tp 2 (two pipeline stages of two ranks each).
for m in llama gemma3 qwen3 qwen3moe mixtral; do
    for mode in "" $([[ $m == llama || $m == qwen3moe ]] && echo --token-by-token); do
        "$HEARTH" golden -m data/models/$m.gguf -i data/golden/$m.golden -o "$tmp/one.golden" -t 1 $mode 2>/dev/null
        err=$(mpi 2 golden -m data/models/$m.gguf -i data/golden/$m.golden -o "$tmp/two.golden" -t 1 --tp 2 $mode 2>&1)
        check "$m $mode --tp 2: golden outputs identical to one process [$err]" 'cmp -s "$tmp/one.golden" "$tmp/two.golden"'
        rm -f "$tmp/two.golden"
    done
    check "$m --tp 2: each rank names its part [$err]" \
        '[[ $err =~ "rank 0/2 on "[^:]+": layers 0-"([0-9]+)", tensor part 1/2 (" &&
           $err =~ "rank 1/2 on "[^:]+": layers 0-"${BASH_REMATCH[1]}", tensor part 2/2 (" ]]'
    err=$(mpi 4 golden -m data/models/$m.gguf -i data/golden/$m.golden -o "$tmp/four.golden" -t 1 --tp 2 2>&1)
    check "$m -np 4 --tp 2 (two stages of two ranks): golden identical [$err]" \
        'cmp -s "$tmp/one.golden" "$tmp/four.golden" && [[ $err == *"rank 3/4 on "*", tensor part 2/2 ("* ]]'
    rm -f "$tmp/four.golden"
done
err=$(mpi 3 golden -m data/models/llama.gguf -i data/golden/llama.golden -o "$tmp/x.golden" -t 1 --tp 3 2>&1)
check "--tp 3 on 2 kv heads: refused naming the constraint [$err]" \
    '[[ $(grep -c "^error:" <<<"$err") == 1 && $err == *"error: --tp 3: the model has 2 kv heads, and each rank needs at least one: --tp 2 at most"* ]]'
err=$(mpi 3 golden -m data/models/llama.gguf -i data/golden/llama.golden -o "$tmp/x.golden" -t 1 --tp 2 2>&1)
check "--tp 2 on 3 ranks: refused [$err]" '[[ $err == *"error: --tp 2: the job'"'"'s 3 ranks are not a multiple of 2"* ]]'
err=$("$HEARTH" run -m data/models/llama.gguf -p hi -n 2 --tp 2 2>&1 >/dev/null)
check "--tp without mpirun: refused [$err]" '[[ $err == "error: --tp: start hearth with mpirun -np N"* ]]'
# K and V cache types travel to the other ranks: the text of a run over a Q4_0 K / Q8_0 V cache is the single process's.
kv1=$("$HEARTH" run -m data/models/llama.gguf -p "Once upon a time" -n 16 --temp 0 -ctk q4_0 -ctv q8_0 -t 1 2>/dev/null)
kv2=$(mpi 2 run -m data/models/llama.gguf -p "Once upon a time" -n 16 --temp 0 -ctk q4_0 -ctv q8_0 -t 1 2>/dev/null)
check "run -ctk q4_0 -ctv q8_0 -np 2: the same text as one process" '[[ -n $kv1 && $kv1 == "$kv2" ]]'

# Deeper models (7 layers, so 3 ranks get 2-3 each): the logits of the fixture's token sequences (golden) and
# of every position of a text (perplexity: long inputs cut into micro-batches that the ranks work on at once,
# all rows wanted), and the text generated from a long prompt.
head -c 2000 data/text/stories-sampled.txt >"$tmp/text.txt"
prompt=$(printf 'the quick brown fox jumps over the lazy dog while %.0s' {1..24})
for spec in "tiny-llama Q4_K_M llama" "tiny-qwen3 Q8_0 qwen3" "tiny-gemma3 Q4_0 llama"; do
    read -r shape type gold <<<"$spec"
    f="$tmp/$shape.gguf"
    "$HEARTH" synth --shape $shape --type $type --layers 7 -o "$f" 2>/dev/null
    "$HEARTH" golden -m "$f" -i data/golden/$gold.golden -o "$tmp/one.golden" -t 1 2>/dev/null
    "$HEARTH" run -m "$f" -p "$prompt" -n 24 --seed 1 -t 1 >"$tmp/one.txt" 2>/dev/null
    for np in 2 3; do
        err=$(mpi $np golden -m "$f" -i data/golden/$gold.golden -o "$tmp/n.golden" -t 1 2>&1)
        check "$shape -np $np: logits identical to one process [$err]" 'cmp -s "$tmp/one.golden" "$tmp/n.golden"'
        rm -f "$tmp/n.golden"
        mpi $np run -m "$f" -p "$prompt" -n 24 --seed 1 -t 1 >"$tmp/n.txt" 2>"$tmp/n.err"
        check "$shape -np $np: run --seed 1 gives the same text [$(tail -1 "$tmp/n.err")]" \
            '[[ -s "$tmp/one.txt" ]] && cmp -s "$tmp/one.txt" "$tmp/n.txt"'
    done
    if [[ $shape != tiny-gemma3 ]]; then   # (one kv head: no tensor split)
        mpi 2 run -m "$f" -p "$prompt" -n 24 --seed 1 -t 1 --tp 2 >"$tmp/n.txt" 2>"$tmp/n.err"
        check "$shape --tp 2: run --seed 1 gives the same text [$(tail -1 "$tmp/n.err")]" '[[ -s "$tmp/one.txt" ]] && cmp -s "$tmp/one.txt" "$tmp/n.txt"'
    fi
    # perplexity evaluates every position of a text: all rows wanted, micro-batches through 3 ranks
    "$HEARTH" perplexity -m "$f" -f "$tmp/text.txt" -c 128 -t 1 --save-logits "$tmp/one.logits" >/dev/null 2>&1
    mpi 3 perplexity -m "$f" -f "$tmp/text.txt" -c 128 -t 1 --save-logits "$tmp/three.logits" >/dev/null 2>&1
    check "$shape -np 3: perplexity's logits identical" '[[ -s "$tmp/one.logits" ]] && cmp -s "$tmp/one.logits" "$tmp/three.logits"'
    if [[ $shape != tiny-gemma3 ]]; then
        mpi 4 perplexity -m "$f" -f "$tmp/text.txt" -c 128 -t 1 --tp 2 --save-logits "$tmp/four.logits" >/dev/null 2>&1
        check "$shape -np 4 --tp 2: perplexity's logits identical" '[[ -s "$tmp/one.logits" ]] && cmp -s "$tmp/one.logits" "$tmp/four.logits"'
    fi
done
f="$tmp/tiny-llama.gguf"

# --split: the layers per rank as given; wrong counts are refused in one line
err=$(mpi 3 run -m "$f" -p hi -n 2 -t 1 --split 1,5,1 2>&1 >/dev/null)
check "--split 1,5,1 [$err]" '[[ $err == *"rank 0/3 on "*": layers 0-0 "* && $err == *"rank 1/3 on "*": layers 1-5 "* && $err == *"rank 2/3 on "*": layers 6-6 "* ]]'
err=$(mpi 2 run -m "$f" -p hi -n 2 -t 1 --split 3,3 2>&1 >/dev/null)
check "--split 3,3 on 7 layers: refused [$err]" '[[ $err == *"error: --split gives 2 ranks 6 layers; this job has 2 ranks and the model 7 layers"* ]]'
err=$("$HEARTH" run -m "$f" -p hi -n 2 --split 3,4 2>&1 >/dev/null)
check "--split without mpirun: refused [$err]" '[[ $err == "error: --split: start hearth with mpirun -np N"* ]]'
err=$(mpi 3 run -m data/models/llama.gguf -p hi -n 2 -t 1 2>&1 >/dev/null)
check "more ranks than layers: refused [$err]" '[[ $err == *"error: 3 ranks for a model of 2 layers: each rank needs at least one layer"* ]]'
# Gemma 3n's four residual streams a token do not pass between pipeline ranks: refused in one line, not run wrong
"$HEARTH" synth --shape tiny-gemma3n --type Q8_0 -o "$tmp/g3n.gguf" 2>/dev/null
err=$(mpi 2 run -m "$tmp/g3n.gguf" -p hi -n 2 -t 1 2>&1 >/dev/null)
check "gemma3n over 2 pipeline ranks: refused [$err]" '[[ $err == *"error: 2 pipeline stages: gemma3n'"'"'s 4 residual streams a token do not pass between ranks yet"* ]]'

# The server under MPI (layers split, then every layer split): 4 clients at once get the single process's
# greedy replies.
want=$("$HEARTH" run -m "$f" -p "hello world" -n 16 --temp 0 -t 1 2>/dev/null)
for tp in "" "--tp 2"; do
    port=$((20000 + RANDOM % 20000))
    mpirun --oversubscribe -np 2 "$HEARTH" serve -m "$f" --port $port -t 1 --parallel 4 $tp >"$tmp/srv.log" 2>&1 &
    srv=$!
    for _ in $(seq 100); do curl -sf localhost:$port/health >/dev/null && break; sleep 0.1; done
    clients=()   # (by pid: `jobs -p` forgets a client already finished, and its tail would then name the server)
    for i in 1 2 3 4; do
        timeout 60 curl -s localhost:$port/v1/completions -d '{"prompt":"hello world","max_tokens":16,"temperature":0}' -o "$tmp/c$i.json" &
        clients+=($!)
    done
    wait "${clients[@]}"
    for i in 1 2 3 4; do
        got=$(jq -r '.choices[0].text' "$tmp/c$i.json" 2>/dev/null)
        check "serve -np 2 $tp, client $i: same reply as one process" '[[ -n $want && $got == "$want" ]]'
    done
    kill $srv; wait $srv
done

# Failures end the job with the rank named. A rank that cannot load its part (started in a directory where
# the model's relative path does not exist):
mkdir -p "$tmp/a" "$tmp/b"; cp "$f" "$tmp/a/m.gguf"
err=$(cd "$tmp/a" && timeout 60 mpirun --oversubscribe -np 1 "$HEARTH" run -m m.gguf -p hi -n 2 : -np 1 -wdir "$tmp/b" "$HEARTH" 2>&1)
check "a rank that cannot load: one error naming it [$err]" '[[ $(grep -c "^error:" <<<"$err") == 1 && $err == *"error: rank 1/2: m.gguf on "*": cannot open"* ]]'

# A killed rank (SIGKILL mid-generation): mpirun ends the job and names it; no hang.
rank1_pid() {
    for p in $(pgrep -x hearth); do
        tr '\0' '\n' 2>/dev/null </proc/$p/environ | matches "^OMPI_COMM_WORLD_RANK=1$" && grep -q "slow.gguf" /proc/$p/cmdline 2>/dev/null && { echo $p; return; }
    done
}
"$HEARTH" synth --shape tiny-llama --type F32 --layers 8 -o "$tmp/slow.gguf" 2>/dev/null
mpi 2 bench -m "$tmp/slow.gguf" -p 64 -n 4000 -r 20 --no-bw -t 1 >/dev/null 2>"$tmp/kill.err" &
job=$!
for _ in $(seq 50); do p=$(rank1_pid); [[ -n $p ]] && grep -q "rank 1/2" "$tmp/kill.err" && break; sleep 0.1; done
t0=$SECONDS; kill -9 "$p"; wait $job; rc=$?
err=$(cat "$tmp/kill.err")
check "a killed rank ends the job (rc=$rc, $((SECONDS - t0)) s) [$err]" '[[ $rc != 0 && $((SECONDS - t0)) -lt 20 && $err == *"process rank 1 "*"exited on signal 9"* ]]'

# A stopped rank: rank 0 waits HEARTH_MPI_TIMEOUT seconds, then ends the job naming it.
HEARTH_MPI_TIMEOUT=2 timeout 60 mpirun -x HEARTH_MPI_TIMEOUT --oversubscribe -np 2 "$HEARTH" bench -m "$tmp/slow.gguf" -p 64 -n 4000 -r 20 --no-bw -t 1 >/dev/null 2>"$tmp/stop.err" &
job=$!
for _ in $(seq 50); do p=$(rank1_pid); [[ -n $p ]] && grep -q "rank 1/2" "$tmp/stop.err" && break; sleep 0.1; done
t0=$SECONDS; kill -STOP "$p"; wait $job; rc=$?
kill -9 "$p" 2>/dev/null
err=$(cat "$tmp/stop.err")
check "a stopped rank times out (rc=$rc, $((SECONDS - t0)) s) [$err]" \
    '[[ $rc != 0 && $((SECONDS - t0)) -lt 20 && $err == *"error: rank 1/2 did not "*" within 2 s (HEARTH_MPI_TIMEOUT): ending the job"* ]]'

# The same under --tp 2, where the ranks wait on each other inside every layer.
HEARTH_MPI_TIMEOUT=2 timeout 60 mpirun -x HEARTH_MPI_TIMEOUT --oversubscribe -np 2 "$HEARTH" bench -m "$tmp/slow.gguf" -p 64 -n 4000 -r 20 --no-bw -t 1 --tp 2 >/dev/null 2>"$tmp/stop.err" &
job=$!
for _ in $(seq 50); do p=$(rank1_pid); [[ -n $p ]] && grep -q "rank 1/2" "$tmp/stop.err" && break; sleep 0.1; done
t0=$SECONDS; kill -STOP "$p"; wait $job; rc=$?
kill -9 "$p" 2>/dev/null
err=$(cat "$tmp/stop.err")
check "--tp 2: a stopped rank times out (rc=$rc, $((SECONDS - t0)) s) [$err]" \
    '[[ $rc != 0 && $((SECONDS - t0)) -lt 20 && $err == *"error: rank 1/2 did not "*" within 2 s (HEARTH_MPI_TIMEOUT): ending the job"* ]]'

# info under mpirun: every rank names its share
err=$(mpi 4 info -m data/models/mixtral.gguf --tp 2 2>&1)
check "info -np 4 --tp 2: four ranks name their share [$err]" \
    '[[ $(grep -c "^rank [0-3]/4 on .*: layers [01]-[01], tensor part [12]/2 (" <<<"$err") == 4 && $err == *"heads        4 (kv 2,"* ]]'

exit $fail
