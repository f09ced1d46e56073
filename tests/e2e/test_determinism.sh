#!/usr/bin/env bash
# test_determinism.sh: two compiles of the same model and flags give
# identical folders, weights included; the committed generated/ matches.
set -u
cd "$(dirname "$0")/../.."
BIN=${BIN:-build/onnx2spmd}
fail=0
for i in 1 2; do
    "$BIN" compile tests/models/tiny_gpt.onnx --mesh dp=2,tp=2 --shardings tests/partition/tiny_gpt_megatron.txt \
        -o build/determinism/out >/dev/null || fail=1
    mv build/determinism/out build/determinism/run$i
done
diff -r build/determinism/run1 build/determinism/run2 >/dev/null || { echo "FAIL: two compiles differ"; fail=1; }
rm -rf build/determinism
# A pipeline with its searched boundaries and a tied --auto search.
for i in 1 2; do
    "$BIN" compile tests/models/tiny_gpt.onnx --mesh pp=2,tp=2 --microbatches 2 --auto --auto-tie always \
        -o build/determinism/out >/dev/null 2>&1 || fail=1
    mv build/determinism/out build/determinism/run$i
done
diff -r build/determinism/run1 build/determinism/run2 >/dev/null || { echo "FAIL: two pipelined compiles differ"; fail=1; }
rm -rf build/determinism
# Two compiles and two plans of the same flags ($2...) must agree ($1 names them).
twice() {
    local what=$1
    shift
    for i in 1 2; do
        "$BIN" compile "$@" -o build/determinism/out >/dev/null 2>&1 || fail=1
        mv build/determinism/out build/determinism/run$i
        "$BIN" plan "$@" >build/determinism/plan$i.txt 2>/dev/null || fail=1
    done
    diff -r build/determinism/run1 build/determinism/run2 >/dev/null || { echo "FAIL: two $what compiles differ"; fail=1; }
    cmp -s build/determinism/plan1.txt build/determinism/plan2.txt || { echo "FAIL: two $what plans differ"; fail=1; }
    rm -rf build/determinism
}
# --auto --train choosing its ZeRO stage under --mem-limit, and plan's
# tables of the stages and --recompute modes.
twice "--auto --train" tests/models/train/tiny_gpt_lm.onnx --train --optimizer adamw --mesh dp=2 \
    --shard tokens=[dp,_] --shard labels=[dp,_] --auto --mem-limit 2400000
# Pipeline training: the interleaved schedule with dp inside the stages,
# searched boundaries, and plan's stage x time table.
twice "pipeline-training" tests/models/train/tiny_gpt_lm.onnx --train --mesh pp=2,dp=2 --shard tokens=[dp,_] \
    --microbatches 4 --schedule interleaved
# Decoding: the caches found and rewritten, tp over Llama's GQA heads.
twice "--decode" tests/models/exports/llama_kv.onnx --decode --max-seq 24 --generate 8 --dim batch=2 --mesh tp=2 \
    --shardings tests/e2e/exports/llama_kv_tp.txt
# Expert parallelism: the MoE blocks rewritten, experts and tokens over ep
# with tp beside them, on both targets.
twice "expert-parallel" tests/models/exports/qwen2moe_moe.onnx --mesh ep=2,tp=2 --shard experts=ep \
    --shard 'input_ids=[ep,_]' --shard 'attention_mask=[ep,_]'
twice "expert-parallel CUDA" tests/models/exports/mixtral_moe.onnx --mesh ep=2 --shard experts=ep \
    --shard 'input_ids=[ep,_]' --target cuda
# The eager export, rewritten at load (frontend/moe_eager.c); an MoE decoder.
twice "eager MoE export" tests/models/exports/qwen2moe_moe_eager.onnx --mesh ep=2 --shard experts=ep \
    --shard 'input_ids=[ep,_]'
twice "MoE --decode" tests/models/exports/mixtral_kv.onnx --decode --max-seq 24 --generate 8 --dim batch=2 --mesh ep=2 \
    --shard experts=ep --shard 'input_ids=[ep,_]'
bash tools/generated.sh --check || fail=1
# Fusing all-reduces changes the calls, not the numbers: the fused and
# unfused golden runs (run_golden.sh) give bit-identical outputs.
for y in ya yb yc; do
    f=build/e2e/branches_fused/output_$y.npy u=build/e2e/branches_unfused/output_$y.npy
    if [ -e "$f" ] && [ -e "$u" ]; then
        cmp -s "$f" "$u" || { echo "FAIL: fused and unfused all-reduce results differ ($y)"; fail=1; }
    fi
done
[ $fail = 0 ] && echo "determinism: identical output folders"
exit $fail
