#!/usr/bin/env bash
# test_cli.sh: the command line as users meet it. Every malformed model
# must exit 2 with exactly one stderr line that names the file; good models
# exit 0; --json parses; --help and --version behave. Usage: test_cli.sh BIN
set -u
BIN=${1:-build/onnx2spmd}
PY=build/venv/bin/python
fail=0
err() { echo "FAIL: $*"; fail=1; }

for m in tests/models/bad/*.onnx; do
    case "$m" in */unknown_op.onnx|*/loop.onnx) continue;; esac # inspect shows these (below)
    out=$("$BIN" inspect "$m" 2>&1 >/dev/null); rc=$?
    lines=$(printf '%s\n' "$out" | grep -c .)
    [ $rc -eq 2 ] || err "$m: exit $rc, expected 2"
    [ "$lines" -eq 1 ] || err "$m: $lines stderr lines, expected 1: $out"
    case "$out" in "onnx2spmd: error: $m: "*) ;; *) err "$m: line does not name the file: $out";; esac
done
for m in tests/models/*.onnx tests/models/ops/*.onnx tests/models/external/*.onnx; do
    "$BIN" inspect "$m" >/dev/null 2>&1 || err "$m: inspect failed"
    "$BIN" inspect --nodes --json "$m" | "$PY" -m json.tool >/dev/null || err "$m: --json does not parse"
done
# A model with unsupported ops: inspect summarises it with them marked;
# plan and compile refuse it with one line listing every unsupported op.
for m in tests/models/bad/unknown_op.onnx tests/models/bad/loop.onnx; do
    "$BIN" inspect --nodes "$m" | grep -q "(not supported)" || err "$m: inspect does not mark the unsupported op"
    "$BIN" inspect --nodes --json "$m" | "$PY" -m json.tool >/dev/null || err "$m: inspect --json does not parse"
    out=$("$BIN" plan "$m" --mesh a=1 2>&1 >/dev/null); rc=$?
    [ $rc -eq 2 ] && [ "$(printf '%s\n' "$out" | grep -c .)" -eq 1 ] || err "$m: plan: exit $rc: $out"
    case "$out" in *"does not support: "*"(1)"*) ;; *) err "$m: plan error does not list the ops: $out";; esac
done
"$BIN" inspect --nodes tests/models/mlp.onnx | grep -q "x, W1 -> h" || err "inspect --nodes does not show node inputs"
"$BIN" inspect --dim batch=3 tests/models/bad/symbolic_dim.onnx | grep -q '\[3, 3\]' || err "--dim binding"
"$BIN" inspect tests/models/tiny_gpt.onnx | grep -q "parameters 134163" || err "tiny_gpt parameter count"
"$BIN" --help | grep -q "usage: onnx2spmd" || err "--help"
"$BIN" --version | grep -q "^onnx2spmd [0-9]" || err "--version"
"$BIN" inspect >/dev/null 2>&1; [ $? -eq 2 ] || err "missing MODEL must exit 2"
"$BIN" frobnicate x >/dev/null 2>&1; [ $? -eq 2 ] || err "unknown command must exit 2"
"$BIN" inspect --dim nonsense tests/models/mlp.onnx >/dev/null 2>&1; [ $? -eq 2 ] || err "bad --dim must exit 2"
"$BIN" inspect /nonexistent.onnx 2>&1 | grep -q "/nonexistent.onnx: cannot open" || err "missing file message"

# plan: the user errors, each exit 2 with one line naming the culprit.
plan_err() { # expected-substring args...
    local want=$1; shift
    out=$("$BIN" plan "$@" 2>&1 >/dev/null); rc=$?
    lines=$(printf '%s\n' "$out" | grep -c .)
    [ $rc -eq 2 ] || err "plan $*: exit $rc, expected 2"
    [ "$lines" -eq 1 ] || err "plan $*: $lines stderr lines: $out"
    case "$out" in *"$want"*) ;; *) err "plan $*: '$out' does not mention '$want'";; esac
}
M=tests/models/mlp.onnx
plan_err 'no tensor named "W9"' $M --mesh tp=2 --shard 'W9=[_,tp]'
plan_err 'unknown mesh axis "mp"' $M --mesh tp=2 --shard 'W1=[_,mp]'
plan_err 'axis "tp" is used twice' $M --mesh dp=2,tp=2 --shard 'W1=[tp,tp]'
plan_err 'axis "tp" has size 0' $M --mesh dp=2,tp=0
plan_err 'tensor "W1" has rank 2' $M --mesh tp=2 --shard 'W1=[tp]'
plan_err '--mesh is required' $M
plan_err 'unknown link class' $M --mesh tp=2 --link tp=carrier-pigeon
plan_err 'no tensor named "nope"' $M --mesh tp=2 --explain nope
# --train: the loss, the weight lists and the optimizer are checked up front.
plan_err 'has no scalar float output; name the loss with --loss' $M --mesh tp=2 --train
T=tests/models/train/mlp_mse.onnx
plan_err '--loss nope: the model has no output of that name' $T --mesh dp=1 --train --loss nope
plan_err '--frozen W9: the model has no initializer of that name' $T --mesh dp=1 --train --frozen W9
plan_err '--optimizer adam: expected sgd or adamw' $T --mesh dp=1 --train --optimizer adam
plan_err '--betas 0.9: expected B1,B2' $T --mesh dp=1 --train --betas 0.9
plan_err 'no trainable float initializer' $T --mesh dp=1 --train --frozen W1,b1,W2,b2
plan_err '--schedule interleaved: 3 microbatches do not go through 2 stages in whole groups' $T --mesh pp=2 --train --schedule interleaved --microbatches 3
plan_err '--virtual-stages 2: model chunks per rank are for --schedule interleaved' $T --mesh pp=2 --train --virtual-stages 2
plan_err '--virtual-stages 1: the interleaved schedule needs 2 or more chunks' $T --mesh pp=2 --train --schedule interleaved --virtual-stages 1 --microbatches 2
plan_err '--microbatches 2 and --accum 4: in a pipeline they are the same count' $T --mesh pp=2 --train --microbatches 2 --accum 4
plan_err '--clip-norm: the gradients' $T --mesh pp=2 --train --clip-norm 1
plan_err '--schedule: pipeline schedules are for --train' $T --mesh pp=2 --schedule gpipe
plan_err '--schedule pipe: expected 1f1b, gpipe or interleaved' $T --mesh pp=2 --train --schedule pipe
plan_err '--stage-boundaries: "W1" is a graph input or weight' $T --mesh pp=2 --train --stage-boundaries W1
# --decode: the flags, the caches and the inputs it feeds.
K=tests/models/exports/gpt2_kv.onnx
plan_err '--max-seq: only with --decode' $K --mesh tp=1 --max-seq 8
plan_err '--decode: --max-seq S is required' $K --mesh tp=1 --decode
plan_err '--sample: only with --decode' $K --mesh tp=1 --sample 0.7
plan_err '--seed: only with --sample' $K --mesh tp=1 --decode --max-seq 8 --dim batch=1 --seed 3
plan_err '--sample 0: expected a temperature above 0' $K --mesh tp=1 --decode --max-seq 8 --sample 0
plan_err '--decode: a decoding program does not train' $K --mesh tp=1 --decode --max-seq 8 --train
plan_err 'dim 0 is symbolic ("batch"); bind it with --dim batch=VALUE' $K --mesh tp=1 --decode --max-seq 8
plan_err '--decode: no key-value cache found' tests/models/exports/gpt2_ts.onnx --mesh tp=1 --decode --max-seq 16
plan_err '--kv-cache past_key_values.0.key=logits: no graph output of that name' $K --mesh tp=1 --decode --max-seq 8 --dim batch=1 --kv-cache past_key_values.0.key=logits
plan_err '--decode: decoding runs on meshes without a pipeline axis' $K --mesh pp=2 --decode --max-seq 8 --dim batch=1
plan_err '--decode: graph input "past_key_values.0.value" is neither' $K --mesh tp=1 --decode --max-seq 8 --dim batch=1 --kv-cache past_key_values.0.key=present.0.key
# Mixtures of experts: the flags, and a model without a block they apply to.
MX=tests/models/exports/mixtral_moe.onnx
plan_err '--capacity-factor 0: expected a number above 0' $MX --mesh ep=2 --capacity-factor 0
plan_err '--moe-groups 0: expected a count from 1' $MX --mesh ep=2 --moe-groups 0
plan_err '--shard experts=zz: the mesh has no axis of that name' $MX --mesh ep=2 --shard experts=zz
plan_err '--shard experts=ep: the model has no mixture-of-experts block' $M --mesh ep=2 --shard experts=ep
plan_err '--capacity-factor: the model has no mixture-of-experts block' $M --mesh ep=2 --capacity-factor 2
# --shard experts=ep with the tokens over ep: one all-to-all each way per
# layer, and the plan says the capacity: by default a group's tokens
# (dropless), with the worst-case buffer; GShard's --capacity-factor 1.25
# on request. --auto under a memory limit splits the experts itself.
out=$("$BIN" plan $MX --mesh ep=2 --shard experts=ep --shard 'input_ids=[ep,_]' --shard 'attention_mask=[ep,_]' 2>&1)
[ "$(printf '%s\n' "$out" | grep -c ' all-to-all  ')" = 4 ] || err "plan --shard experts=ep: not 4 all-to-alls: $out"
printf '%s\n' "$out" | grep -q "^moe      2 layers: dropless" || err "plan --shard experts=ep: the default is not dropless"
[ "$(printf '%s\n' "$out" | grep -c "2 groups of 16 tokens, top-2 of 4 experts, capacity 16 per expert per group: no pair is ever dropped")" = 2 ] ||
    err "plan --shard experts=ep: no dropless capacity line"
[ "$(printf '%s\n' "$out" | grep -c "expert buffer 16384 bytes per rank (the worst case.*fills 8192 of them")" = 2 ] ||
    err "plan --shard experts=ep: no worst-case and balanced buffer bytes"
"$BIN" plan $MX --mesh ep=2 --shard experts=ep --shard 'input_ids=[ep,_]' --capacity-factor 1.25 2>&1 |
    grep -q "2 groups of 16 tokens, top-2 of 4 experts, capacity 10 per expert per group: up to 24 of 64 pairs dropped" ||
    err "plan --capacity-factor 1.25: no capacity line with its drops"
"$BIN" plan $MX --mesh ep=2 --auto --mem-limit 900K 2>&1 | grep -q "experts inner.model.layers.1.mlp.experts.gate_up_proj (\[ep,_,_\])" ||
    err "plan --auto --mem-limit 900K: the experts are not split over ep"
# transformers' eager export of the same model (NonZero per expert) plans
# as the batched one: the same layers, capacities and collectives
# (tests/e2e/moe.py refuses its near misses with the NonZero line).
eager=$("$BIN" plan tests/models/exports/mixtral_moe_eager.onnx --mesh ep=2 --shard experts=ep --shard 'input_ids=[ep,_]' --shard 'attention_mask=[ep,_]' 2>&1)
[ "$(printf '%s\n' "$eager" | grep -c ' all-to-all  ')" = 4 ] || err "plan of the eager export: not 4 all-to-alls: $eager"
[ "$(printf '%s\n' "$eager" | sed -n '/^moe/,/^$/p')" = "$(printf '%s\n' "$out" | sed -n '/^moe/,/^$/p')" ] ||
    err "plan of the eager export: its moe section differs from the batched export's"
# plan --json carries the same MoE layers (and --decode's caches and
# choice of token): numbers that add up, weights by name and layout.
"$BIN" plan $MX --mesh ep=2 --shard experts=ep --shard 'input_ids=[ep,_]' --json 2>/dev/null | "$PY" -c '
import json, sys
d = json.load(sys.stdin)["moe"]
assert d["dropless"] is True and len(d["layers"]) == 2, d
for i, l in enumerate(d["layers"]):
    assert (l["groups"], l["tokens_per_group"], l["top_k"], l["experts"], l["capacity"]) == (2, 16, 2, 4, 16), l
    assert l["pairs"] == 64 and l["worst_dropped"] == 0 and l["tokens_sharding"] == "[ep,_,_]", l
    assert (l["buffer_bytes_per_rank"], l["balanced_bytes_per_rank"]) == (2 * 4 * 64 * 16 * 4 // 2, 16384 // 2), l
    assert l["up_weight"] == {"name": "inner.model.layers.%d.mlp.experts.gate_up_proj" % i, "sharding": "[ep,_,_]"}, l
    assert l["down_weight"]["name"] == "inner.model.layers.%d.mlp.experts.down_proj" % i, l' ||
    err "plan --json: no moe section, or its numbers are off"
"$BIN" plan $K --mesh tp=2 --decode --max-seq 16 --dim batch=1 --generate 4 --sample 0.7 --seed 5 --json 2>/dev/null | "$PY" -c '
import json, sys
d = json.load(sys.stdin)["decode"]
assert (d["generate"], d["max_seq"], d["choice"], d["temperature"], d["seed"]) == (4, 16, "sample", 0.7, 5), d
assert len(d["caches"]) == 4 and d["caches"][0]["name"] == "present.0.key" and d["caches"][0]["shape"] == [1, 4, 16, 16], d' ||
    err "plan --decode --json: no decode section, or its fields are off"
# Qwen2-MoE's shared expert does not depend on the dispatch: it runs while
# the all-to-all carries the tokens to their experts (ir/moe.c moves the
# dispatch ahead of it), so rank 0 starts that all-to-all before the shared
# expert's first GEMM and waits for it after.
rm -rf build/cli_qwen_ep2
"$BIN" compile tests/models/exports/qwen2moe_moe.onnx --mesh ep=2 --shard experts=ep --shard 'input_ids=[ep,_]' \
    --shard 'attention_mask=[ep,_]' -o build/cli_qwen_ep2 >/dev/null 2>&1 || err "compile qwen2moe_moe ep=2 failed"
line() { grep -n "$1" build/cli_qwen_ep2/rank0.c | head -1 | cut -d: -f1; }
a2a=$(line 'MPI_Ialltoallv\?(B__inner_model_layers_0_mlp_experts_moe_buffer') # (v: the counts-based one)
shared=$(line 'k_matmul.*B__inner_model_layers_0_mlp_shared_expert_gate_proj_MatMul_output_0')
wait=$(line 'rt_wait.*req_r1\|MPI_Wait.*req_r1')
[ -n "$a2a" ] && [ -n "$shared" ] && [ -n "$wait" ] && [ "$a2a" -lt "$shared" ] && [ "$shared" -lt "$wait" ] ||
    err "qwen2moe ep=2: the shared expert does not run between the dispatch all-to-all ($a2a) and its wait ($wait): $shared"
plan_err '--zero 1: only with --train' $T --mesh dp=2 --zero 1
plan_err '--recompute some: expected none, selective or full' $T --mesh dp=1 --train --recompute some
plan_err '--precision fp8: expected fp32, bf16 or fp16' $T --mesh dp=1 --train --precision fp8
plan_err '--precision bf16: only with --train' $T --mesh dp=1 --precision bf16
plan_err '--loss-scale 0: expected a number from 1 to 1e30' $T --mesh dp=1 --train --precision fp16 --loss-scale 0
plan_err '--loss-scale: only with --precision fp16' $T --mesh dp=1 --train --precision bf16 --loss-scale 1024
plan_err '--zero 4: expected 0, 1, 2 or 3' $T --mesh dp=2 --train --zero 4
plan_err 'the mesh has no axis "data"' $T --mesh dp=2 --train --zero 1 --zero-axis data
plan_err '--zero 3 stores the weights split over --zero-axis; drop --shard-weights dp' $T --mesh dp=2 --train --zero 3 --shard-weights dp
"$BIN" plan $T --mesh dp=2 --shard 'x=[dp,_]' --train --zero 1 | grep -q "reduce-scatter .*W1" || err "plan --train --zero 1: no gradient reduce-scatter for W1"
"$BIN" plan $T --mesh dp=2 --shard 'x=[dp,_]' --train | grep -q "all-reduce .*W1" || err "plan --train: no gradient all-reduce for W1"
# --auto lays the updates out for --zero as propagation does: the optimizer
# state split over dp, the updated blocks all-gathered back.
G=tests/models/train/tiny_gpt_lm.onnx
"$BIN" plan $G --mesh dp=2 --train --optimizer adamw --auto --zero 1 2>/dev/null | grep -q "updated weight blocks (--zero 1)" ||
    err "plan --auto --train --zero 1: the updates are not on the ZeRO blocks"
# --auto --train without --zero chooses the ZeRO stage: the first whose
# programs fit --mem-limit. The limits come from plan's own table: stage
# 0's total fits at stage 0, a byte less takes a higher stage, 1K fits none
# (one line naming --mem-limit and the smallest total).
A="$G --mesh dp=2 --train --optimizer adamw --frozen l0_bk,l1_bk,neg_inf --shard tokens=[dp,_] --shard labels=[dp,_] --auto"
zero_col() { awk -v c="$1" '/^ZeRO stage/ {z=1; next} z && !NF {exit} z && $1 ~ /^[0-3]$/ && (c != "chosen" || /<- chosen/) {print (c == "chosen" ? $1 : $c)}'; }
tab=$("$BIN" plan $A 2>/dev/null)
printf '%s\n' "$tab" | grep -q "zero stage  *weights  *grads  *optimizer state  *activations  *total  *fits" ||
    err "plan --auto --train: no ZeRO stage table"
[ "$(printf '%s\n' "$tab" | zero_col 1 | tr '\n' ' ')" = "0 1 2 3 " ] || err "plan --auto --train: not every stage tried: $tab"
t0=$(printf '%s\n' "$tab" | zero_col 6 | head -1)
loose=$("$BIN" plan $A --mem-limit "$t0" 2>/dev/null | zero_col chosen)
tight=$("$BIN" plan $A --mem-limit "$((t0 - 1))" 2>/dev/null | zero_col chosen)
[ "$loose" = 0 ] || err "--auto --train --mem-limit $t0 (stage 0's total): chose stage '$loose', not 0"
[ -n "$tight" ] && [ "$tight" -gt 0 ] || err "--auto --train --mem-limit $((t0 - 1)): chose stage '$tight', not above 0"
rm -rf build/cli_zero_auto
"$BIN" compile $A --mem-limit "$((t0 - 1))" -o build/cli_zero_auto 2>/dev/null | grep -q "ZeRO stage $tight: the first whose programs fit" ||
    err "compile --auto --train --mem-limit: does not take plan's stage $tight"
plan_err 'no ZeRO stage fits --mem-limit 1024 bytes per rank; the smallest plan found needs' $A --mem-limit 1K
"$BIN" plan $A --json 2>/dev/null | "$PY" -c 'import json,sys; d=json.load(sys.stdin); z=d["zero_stages"]; assert z["chosen"] == 0 and [t["stage"] for t in z["tried"]] == [0,1,2,3] and all(t["weights"] + t["grads"] + t["optimizer_state"] + t["activations"] == t["total"] for t in z["tried"]), z; assert d["recompute"]["chosen"] == "none"' ||
    err "plan --auto --train --json: no zero_stages or recompute members, or parts that do not add up"
# plan --train shows the peak under each --recompute mode, the chosen one
# marked: recomputing keeps fewer forward values (none >= selective >= full).
rt=$("$BIN" plan $G --mesh dp=1 --train --recompute selective 2>/dev/null |
     awk '/^recompute/ {z=1; next} z && !NF {exit} z && $1 ~ /^(none|selective|full)$/ {print $1, $2, ($NF == "chosen" ? "*" : "")}')
[ "$(printf '%s\n' "$rt" | awk '{printf "%s%s ", $1, $3}')" = "none selective* full " ] ||
    err "plan --train: no recompute table with selective chosen: $rt"
printf '%s\n' "$rt" | awk 'NR > 1 && $2 > prev {bad = 1} {prev = $2} END {exit bad}' ||
    err "plan --train: the forward peak is not none >= selective >= full: $rt"
# --auto: impossible constraints and bad flags, one line each.
plan_err 'annotation l0_ln1=[_,_,tp] cannot hold' tests/models/tiny_gpt.onnx --mesh tp=2 --auto --shard 'l0_ln1=[_,_,tp]'
plan_err 'no plan fits --mem-limit 1024' $M --mesh tp=2 --auto --mem-limit 1K
plan_err '--auto-time-limit abc' $M --mesh tp=2 --auto --auto-time-limit abc
plan_err '--auto-time-limit 0' $M --mesh tp=2 --auto --auto-time-limit 0
# --auto that succeeds: one stderr line (the solve), an honoured annotation,
# and --json that parses with the search's figures.
out=$("$BIN" plan $M --mesh tp=2 --auto --shard 'x=[tp,_]' --json 2>/dev/null)
printf '%s' "$out" | "$PY" -c 'import json,sys; d=json.load(sys.stdin); assert d["auto"]["optimal"]; t={x["name"]: x for x in d["tensors"]}; assert t["x"]["sharding"] == "[tp,_]", t["x"]' \
    || err "plan --auto --json: no auto section, or x=[tp,_] not kept"
"$BIN" plan $M --mesh tp=2 --auto --mem-limit 100K --explain W1 2>/dev/null | grep -q "chosen by --auto" || err "--auto --explain"
# Pipelines: bad flags and plans that cannot run stage by stage, one line each.
G=tests/models/tiny_gpt.onnx
plan_err '--microbatches 0' $G --mesh pp=2 --microbatches 0
plan_err '--microbatches abc' $G --mesh pp=2 --microbatches abc
plan_err 'the mesh has no pipeline axis' $G --mesh tp=2 --microbatches 2
plan_err '--pipeline-axis stages' $G --mesh pp=2 --pipeline-axis stages
plan_err 'not a multiple of it' $G --mesh pp=2 --microbatches 3
plan_err '--stage-boundaries: no tensor named "nope"' $G --mesh pp=2 --stage-boundaries nope
plan_err '1 tensor for 3 stages' $G --mesh pp=3 --stage-boundaries l0_out
plan_err 'across microbatches' tests/models/exports/gpt2_ts.onnx --mesh pp=2 --microbatches 2
plan_err 'unknown mesh axis "pp"' $G --mesh pp=2,tp=2 --shard 'l0_W1=[_,pp]'
# A weight as long as the batch, met elementwise (Pow of a batched value by
# a [4, 6] weight; fuzz_plans --pipeline seed 158014 case 13): every
# microbatch would read microbatch 0's block of it, so it is refused.
plan_err 'weight "e26" would be split by microbatch' tests/cli/pipeline_weight_by_batch.onnx --mesh pp=2,a=2 --microbatches 2
out=$("$BIN" plan $G --mesh pp=2,tp=2 --microbatches 2 --json 2>/dev/null)
printf '%s' "$out" | "$PY" -c 'import json,sys; p=json.load(sys.stdin)["pipeline"]; assert p["stages"] == 2 and p["microbatches"] == 2 and p["ranks_per_stage"] == 2 and abs(p["bubble"] - 1/3) < 1e-5, p' \
    || err "plan pp=2,tp=2 --microbatches 2 --json: no pipeline section"
"$BIN" plan $G --mesh pp=2 --microbatches 4 2>/dev/null | grep -q "^  schedule" && err "batch 2 in 4 microbatches must fail"
"$BIN" plan $G --mesh pp=2 --microbatches 2 2>/dev/null | grep -q "schedule      stage x time" || err "plan: no pipeline schedule"
plan_err 'match no axis of the mesh' tests/models/mlp_sharded.onnx --mesh tp=4
printf 'W1=[_,tp]\nbogus line\n' > build/bad_shardings.txt
plan_err 'build/bad_shardings.txt:2:' $M --mesh tp=2 --shardings build/bad_shardings.txt

# Annotations by node path: NODE:INPUT is the tensor the nodes that NODE
# matches (fnmatch, '*' crossing '/') read at INPUT. Megatron on the Llama
# export by module path (7 lines) plans byte for byte as the exporter's 14
# onnx::MatMul_N weight names do, as text and as JSON; each mistake is one
# line naming the pattern, the node or both sources.
LT=tests/models/exports/llama_ts.onnx
for fmt in "" --json; do
    a=$("$BIN" plan $LT --mesh dp=2,tp=2 --shard 'input_ids=[dp,_]' --shardings tests/e2e/exports/llama_ts_tp.txt $fmt)
    b=$("$BIN" plan $LT --mesh dp=2,tp=2 --shard 'input_ids=[dp,_]' --shardings tests/e2e/exports/llama_ts_tp_glob.txt $fmt)
    [ -n "$a" ] && [ "$a" = "$b" ] || err "plan $fmt: the node-path shardings do not plan as the weight names do"
done
case "$a" in *'"name": "onnx::MatMul_667"'*'"sharding": "[tp,_]"'*) ;; *) err "plan --json: the down projection is not [tp,_]";; esac
# On the command line, one bracket pattern for Q, K and V; an exact node
# path (no wildcard) is a pattern that matches itself.
a=$("$BIN" plan $LT --mesh tp=2 --shard 'onnx::MatMul_591=[_,tp]' --shard 'onnx::MatMul_607=[_,tp]' --shard 'onnx::MatMul_608=[_,tp]' \
    --shard 'onnx::MatMul_668=[_,tp]' --shard 'onnx::MatMul_684=[_,tp]' --shard 'onnx::MatMul_685=[_,tp]' --shard 'onnx::MatMul_664=[tp,_]')
b=$("$BIN" plan $LT --mesh tp=2 --shard '*/self_attn/[qkv]_proj/MatMul:1=[_,tp]' --shard '/inner/model/layers.0/self_attn/o_proj/MatMul:1=[tp,_]')
[ -n "$a" ] && [ "$a" = "$b" ] || err "plan --shard '*/[qkv]_proj/MatMul:1': not the plan of the weight names"
plan_err '--shard */q_prj/MatMul:1=[_,tp]: pattern "*/q_prj/MatMul" matches no node in the model' $LT --mesh tp=2 --shard '*/q_prj/MatMul:1=[_,tp]'
plan_err 'node "/inner/model/layers.0/self_attn/q_proj/MatMul" (MatMul) has no input 2 (it has 2 inputs)' $LT --mesh tp=2 --shard '*/q_proj/MatMul:2=[_,tp]'
plan_err 'node "/inner/model/layers.0/self_attn/Reshape" (Reshape) has no input 1' $LT --mesh tp=2 --shard '*/self_attn/*:1=[_,tp]'
plan_err 'spec has 3 dims but tensor "onnx::MatMul_591" (input 1 of node "/inner/model/layers.0/self_attn/q_proj/MatMul") has rank 2' \
    $LT --mesh tp=2 --shard '*/q_proj/MatMul:1=[_,tp,_]'
plan_err 'no tensor named "*/q_proj/MatMul"; a node pattern needs the input it annotates' $LT --mesh tp=2 --shard '*/q_proj/MatMul=[_,tp]'
plan_err 'no tensor named "fc9:1" and no node named "fc9" in the model' $M --mesh tp=2 --shard 'fc9:1=[_,tp]'
printf '*/q_proj/MatMul:1=[_,tp]\n*/self_attn/*_proj/MatMul:1=[tp,_]\n' > build/conflict_shardings.txt
plan_err 'build/conflict_shardings.txt:2: */self_attn/*_proj/MatMul:1=[tp,_]: tensor "onnx::MatMul_591" (input 1 of node "/inner/model/layers.0/self_attn/q_proj/MatMul") is already annotated as [_,tp] by build/conflict_shardings.txt:1: */q_proj/MatMul:1' \
    $LT --mesh tp=2 --shardings build/conflict_shardings.txt
plan_err '--shard onnx::MatMul_591=[tp,_]: tensor "onnx::MatMul_591" is already annotated as [_,tp] by --shard */q_proj/MatMul:1' \
    $LT --mesh tp=2 --shard '*/q_proj/MatMul:1=[_,tp]' --shard 'onnx::MatMul_591=[tp,_]'
# The same layout from two sources is one annotation.
"$BIN" plan $LT --mesh tp=2 --shard '*/q_proj/MatMul:1=[_,tp]' --shard 'onnx::MatMul_591=[_,tp]' >/dev/null ||
    err "plan: a pattern and a name agreeing on one weight must plan"
# --train: the backward nodes named after a forward one (".../c_fc/Gemm/grad2")
# are not the model's, so "Gemm*" still means the two forward Gemms.
a=$("$BIN" plan tests/models/train/gpt2_ts_lm.onnx --mesh tp=2 --train --shard '*/mlp/c_fc/Gemm*:1=[_,tp]' 2>/dev/null)
b=$("$BIN" plan tests/models/train/gpt2_ts_lm.onnx --mesh tp=2 --train --shard 'inner.transformer.h.0.mlp.c_fc.weight=[_,tp]' \
    --shard 'inner.transformer.h.1.mlp.c_fc.weight=[_,tp]' 2>/dev/null)
[ -n "$a" ] && [ "$a" = "$b" ] || err "plan --train --shard '*/c_fc/Gemm*:1': the pattern caught a backward node"
# Names from the model reach the terminal escaped: a node named with an
# escape code, a newline and a bidi override, matched by a pattern.
"$PY" - <<'PYEOF'
import numpy as np
from onnx import helper, numpy_helper, TensorProto, save
w = numpy_helper.from_array(np.ones((4, 4), np.float32), "w\x1b[2J")
n = helper.make_node("MatMul", ["x", w.name], ["y"], name="evil\x1b[31m\nnode\u202e")
g = helper.make_graph([n], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])],
                      [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])], [w])
save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), "build/cli_hostile_node.onnx")
PYEOF
plan_err 'node "evil\x1b[31m\x0anode\xe2\x80\xae" (MatMul) has no input 2' build/cli_hostile_node.onnx --mesh tp=2 --shard 'evil*:2=[_,tp]'
"$BIN" inspect --weights build/cli_hostile_node.onnx | grep -qF 'evil\x1b[31m\x0anode\xe2\x80\xae:1' ||
    err "inspect --weights: the reader's name is not escaped"
# inspect --weights: every initializer with its readers as NODE:INPUT.
"$BIN" inspect --weights $LT | grep -qE '^onnx::MatMul_591 +float32 +\[64, 64\] +16384 +/inner/model/layers.0/self_attn/q_proj/MatMul:1$' ||
    err "inspect --weights: no line for onnx::MatMul_591 with its reader"
"$BIN" inspect --weights tests/models/mlp.onnx | grep -qE '^b2 +float32 +\[64\] +256 +bias2:1$' || err "inspect --weights: mlp's b2"
"$BIN" inspect --weights --json $LT | "$PY" -c '
import json, sys
w = {x["name"]: x for x in json.load(sys.stdin)["weights"]}
q = w["onnx::MatMul_591"]
assert q["shape"] == [64, 64] and q["dtype"] == "float32" and q["bytes"] == 16384, q
assert q["readers"] == [{"node": "/inner/model/layers.0/self_attn/q_proj/MatMul", "input": 1}], q
assert len(w) == 17 and all(x["readers"] for x in w.values()), sorted(w)' || err "inspect --weights --json"

# plan: outputs users and tools read.
"$BIN" plan $M --mesh tp=2 --shard 'W1=[_,tp]' | grep -q 'all-reduce .* o .*for bias2 (Add)' || err "plan mlp all-reduce line"
"$BIN" plan $M --mesh tp=2 --shard 'W1=[_,tp]' --json | "$PY" -m json.tool >/dev/null || err "plan --json does not parse"
"$BIN" plan $M --mesh tp=2 --shard 'W1=[_,tp]' --explain W2 | grep -q 'W1 is \[_,tp\]: user annotation' || err "plan --explain chain"
rm -f build/plan.dot
"$BIN" plan $M --mesh tp=2 --shard 'W1=[_,tp]' --dot build/plan.dot >/dev/null && grep -q 'shape=diamond' build/plan.dot || err "plan --dot"
a=$("$BIN" plan tests/models/tiny_gpt.onnx --mesh dp=2,tp=2 --shardings tests/partition/tiny_gpt_megatron.txt --json)
b=$("$BIN" plan tests/models/tiny_gpt.onnx --mesh dp=2,tp=2 --shardings tests/partition/tiny_gpt_megatron.txt --json)
[ "$a" = "$b" ] || err "plan output is not deterministic"

# --const: a shape-deciding graph input (ReduceSum's axes) fixed at compile
# time from a .npy or a TensorProto; without it, the error says how.
C=build/cli_const
rm -rf "$C" && mkdir -p "$C"
"$PY" - "$C" <<'PYEOF'
import sys, numpy as np, onnx
from onnx import helper, numpy_helper, TensorProto as T
d = sys.argv[1]
g = helper.make_graph([helper.make_node("ReduceSum", ["x", "axes"], ["y"], keepdims=0, name="sum")], "const_axes",
                      [helper.make_tensor_value_info("x", T.FLOAT, [2, 3, 4]),
                       helper.make_tensor_value_info("axes", T.INT64, [1])],
                      [helper.make_tensor_value_info("y", T.FLOAT, None)])
m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])
m.ir_version = 10
onnx.save(m, d + "/model.onnx")
np.save(d + "/axes.npy", np.array([1], np.int64))
np.save(d + "/axes_bad.npy", np.array([1, 2], np.int64))
open(d + "/axes.pb", "wb").write(numpy_helper.from_array(np.array([-1], np.int64)).SerializeToString())
np.save(d + "/x.npy", np.arange(24, dtype=np.float32).reshape(2, 3, 4))
PYEOF
out=$("$BIN" plan "$C/model.onnx" --mesh a=1 2>&1 >/dev/null); rc=$?
[ $rc -eq 2 ] && case "$out" in *'"axes"'*'--const'*) true;; *) false;; esac || err "--const hint missing: $out"
"$BIN" inspect "$C/model.onnx" --const axes="$C/axes.npy" --nodes | grep -q 'y .*\[2, 4\]' || err "--const .npy: wrong shape"
"$BIN" inspect "$C/model.onnx" --const axes="$C/axes.pb" --nodes | grep -q 'y .*\[2, 3\]' || err "--const .pb: wrong shape"
out=$("$BIN" plan "$C/model.onnx" --mesh a=1 --const axes="$C/axes_bad.npy" 2>&1 >/dev/null); rc=$?
[ $rc -eq 2 ] && [ "$(printf '%s\n' "$out" | grep -c .)" -eq 1 ] && case "$out" in *"--const axes="*"[2]"*"[1]"*) true;; *) false;; esac \
    || err "--const with a wrong shape: exit $rc: $out"
out=$("$BIN" plan "$C/model.onnx" --mesh a=1 --const nope="$C/axes.npy" 2>&1 >/dev/null); rc=$?
[ $rc -eq 2 ] && case "$out" in *"--const nope: the model has no graph input"*) true;; *) false;; esac || err "--const unknown input: $out"
if "$BIN" compile "$C/model.onnx" --mesh a=1 --const axes="$C/axes.npy" -o "$C/out" >/dev/null 2>&1 && make -s -C "$C/out" >/dev/null 2>&1 &&
   "$C/out/run.sh" --in x="$C/x.npy" --out y="$C/y.npy" >/dev/null 2>&1 </dev/null; then
    "$PY" -c "import numpy as np,sys; x=np.load(sys.argv[1]); y=np.load(sys.argv[2]); sys.exit(0 if np.allclose(y, x.sum(1)) else 1)" \
        "$C/x.npy" "$C/y.npy" || err "--const: the compiled program computes the wrong sum"
else
    err "--const: compile/build/run failed"
fi

# --train where layers read one initializer (TorchScript merged the fresh
# GPT-2's equal LayerNorm weights and biases; dynamo the same): one warning
# line, and the plan stands. A model without (tiny_gpt_lm: its one shared
# float is the mask's scalar -inf) plans silently.
out=$("$BIN" plan tests/models/train/gpt2_ts_lm.onnx --mesh dp=1 --train 2>&1 >/dev/null); rc=$?
[ $rc -eq 0 ] && [ "$(printf '%s\n' "$out" | grep -c .)" -eq 1 ] && case "$out" in
    *"warning: --train: 2 trainable initializers each feed several nodes of one op (first: inner.transformer.h.0.ln_1.weight, read by 4 Identity nodes as input 0)"*) true;;
    *) false;; esac || err "plan --train on merged LayerNorm weights: exit $rc, not the one warning line: $out"
out=$("$BIN" plan tests/models/train/gpt2_dynamo_lm.onnx --mesh dp=1 --train 2>&1 >/dev/null)
case "$out" in *"(first: inner.transformer.h.0.ln_1.weight, read by 5 LayerNormalization nodes as input 1)"*) ;;
    *) err "plan --train on the dynamo export's merged LayerNorm weights: $out";; esac
out=$("$BIN" plan tests/models/train/tiny_gpt_lm.onnx --mesh dp=1 --train 2>&1 >/dev/null)
[ -z "$out" ] || err "plan --train on tiny_gpt_lm: stderr not empty: $out"

# A mean cross-entropy with ignore_index over a batch split on dp: the
# loss's sum and its count are all-reduced as two scalars, and neither the
# logits nor the labels are gathered (ir/loss_split.c).
out=$("$BIN" plan tests/models/train/mlp_sce_ignore.onnx --mesh dp=2 --shard 'x=[dp,_]' --shard 'labels=[dp]' --train 2>&1)
printf '%s\n' "$out" | grep -q ' all-gather ' && err "plan --train of a mean loss over dp gathers: $out"
[ "$(printf '%s\n' "$out" | grep -cE ' all-reduce +xent/(sum|count) +dp +4 ')" = 2 ] ||
    err "plan --train of a mean loss over dp: not one scalar all-reduce each of its sum and its count: $out"

# The LM head column-split over tp: cross-entropy keeps the classes split
# (ir/loss_vocab.c). Per token, each rank's block maximum is gathered and
# the sum of exponentials and the target logit all-reduced (8 tokens x 4
# bytes a rank each); the logits (and, in backward, their gradient) are
# never gathered. One rank keeps the fused loss node.
out=$("$BIN" plan tests/models/train/mlp_sce_ignore.onnx --mesh tp=2 --shard 'W2=[tp,_]' --shard 'b2=[tp]' --train 2>&1)
[ "$(printf '%s\n' "$out" | grep -cE ' (all-gather +xent/block_max|all-reduce +xent/(sum_exp|target)) +tp +32 ')" = 3 ] ||
    err "plan --train with the classes split: not the per-token max, sum of exponentials and target logit: $out"
# (the only other collective: fc2/grad0, the gradient of fc2's input a [8, 32], Megatron's row-parallel backward)
printf '%s\n' "$out" | grep -E '^ +[0-9]+ +(all-|reduce-scatter)' |
    grep -qvE ' (xent/block_max|xent/sum_exp|xent/target|fc2/grad0) ' &&
    err "plan --train with the classes split moves the logits or their gradient: $out"
out=$("$BIN" plan tests/models/train/mlp_sce_ignore.onnx --mesh dp=1 --train 2>&1)
printf '%s\n' "$out" | grep -q 'xent/block_max' && err "plan --train on one rank rewrote the fused cross-entropy: $out"

[ $fail -eq 0 ] && echo "cli: all passed ($BIN)"
exit $fail
