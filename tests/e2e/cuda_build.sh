#!/usr/bin/env bash
# cuda_build.sh: compiles and links the CUDA output (--target cuda) of
# every golden case in cases.txt (three also with MPI=0), builds with nvcc
# the rank files that cuda_select.py picks (all with CUDA_ALL_RANKS=1),
# requires no warnings, and checks every rank's two-stream schedule for
# races (check_streams.py). No GPU is needed; tests/gpu/run.sh runs them.
# cuda_build.sh [SUBSTRING]: only the cases whose name contains it.
set -u
cd "$(dirname "$0")/../.."
BIN=${BIN:-build/onnx2spmd}
OUT=build/cuda_build
JOBS=${JOBS:-$(nproc)}
filter=${1:-}
if ! command -v "${NVCC:-/usr/local/cuda/bin/nvcc}" >/dev/null 2>&1; then
    echo "cuda_build: nvcc not found (set NVCC); skipped"; exit 0
fi
rm -rf "$OUT"
mkdir -p "$OUT"
fail=0
# Compile every case (and a few also without MPI, make MPI=0: launch.sh, no
# mpi.h, as on a bare GPU machine), JOBS at a time.
compile_case() {
    read -r name model mesh flags <<<"$1"
    # shellcheck disable=SC2086
    if ! "$BIN" compile "tests/models/$model.onnx" --mesh "$mesh" $flags --target cuda -o "$OUT/$name" \
            >/dev/null 2>"$OUT/$name.err"; then
        echo "FAIL $name: compile: $(cat "$OUT/$name.err")"; return
    fi
    echo "ok $name"
    case "$name" in gpt_1|gpt_dp2_tp2|mlp_fsdp_tp_p1|train_mlp_adamw_dp2tp2|train_gpt_adamw_fp16_zero3_dp2|decode_llama_tp2|mixtral_moe_ep2)
        # shellcheck disable=SC2086
        "$BIN" compile "tests/models/$model.onnx" --mesh "$mesh" $flags --target cuda -o "$OUT/${name}_nompi" \
            >/dev/null 2>&1 && echo "MPI=0" > "$OUT/${name}_nompi/.make_args" && echo "ok ${name}_nompi";;
    esac
}
export -f compile_case
export BIN OUT
# and three training programs (--train: backward, optimizer_step, the loss
# read back; the third in fp16 with its loss scale, ZeRO-3 and clipping),
# an expert-parallel MoE block's (MoeScatter and MoePairDot in backward),
# and three decoding programs (--decode: the caches in device memory; the
# third Mixtral's, its experts and tokens over ep: an all-to-all per step)
{ awk -v f="$filter" '$1 !~ /^#/ && NF && index($1, f)' tests/e2e/cases.txt
  printf '%s\n' "train_mlp_adamw_dp2tp2 train/mlp_mse dp=2,tp=2 --train --optimizer adamw --zero 1 --shard x=[dp,_] --shard target=[dp,_] --shard W1=[_,tp]" \
      "train_gpt_sgd_dp2tp2 train/tiny_gpt_lm dp=2,tp=2 --train --clip-norm 1 --shard tokens=[dp,_] --shard labels=[dp,_] --shard l0_Wq=[_,tp] --shard l1_Wq=[_,tp]" \
      "train_gpt_adamw_fp16_zero3_dp2 train/tiny_gpt_lm dp=2 --train --optimizer adamw --precision fp16 --zero 3 --clip-norm 1 --shard tokens=[dp,_] --shard labels=[dp,_]" \
      "train_moe_adamw_ep2 train/moe_block_mse ep=2 --train --optimizer adamw --capacity-factor 2 --shard experts=ep --shard x=[ep,_] --shard target=[ep,_]" \
      "decode_llama_tp2 exports/llama_kv tp=2 --decode --max-seq 24 --generate 8 --dim batch=2 --shardings tests/e2e/exports/llama_kv_tp.txt" \
      "decode_gpt2_dp2_tp2 exports/gpt2_kv dp=2,tp=2 --decode --max-seq 24 --generate 8 --dim batch=2 --shard input_ids=[dp,_] --shardings tests/e2e/exports/gpt2_kv_tp.txt" \
      "decode_mixtral_ep2 exports/mixtral_kv ep=2 --decode --max-seq 24 --generate 8 --dim batch=2 --shard experts=ep --shard input_ids=[ep,_]" \
      | awk -v f="$filter" 'index($1, f)'; } \
    | xargs -P "$JOBS" -d '\n' -I{} bash -c 'compile_case "$@"' _ {} > "$OUT/compiled.txt"
grep "^FAIL" "$OUT/compiled.txt" && fail=1
n=$(grep -c "^ok" "$OUT/compiled.txt")
# Which rank programs nvcc builds: nvcc takes 6-12 s a file, and building
# all 366 of the golden cases' was CI's longest step. cuda_select.py picks
# files until every distinct statement form (literals and buffer names
# blanked, buffer types kept) of every rank file has been compiled once;
# the runs without MPI build their first rank. CUDA_ALL_RANKS=1 builds all.
if [ "${CUDA_ALL_RANKS:-0}" = 1 ]; then
    ls "$OUT"/*/rank*.cu > "$OUT/selected.txt"
else
    { python3 tests/e2e/cuda_select.py $(ls "$OUT"/*/rank*.cu | grep -v _nompi/)
      ls "$OUT"/*_nompi/rank0.cu 2>/dev/null; } > "$OUT/selected.txt"
fi
xargs -P "$JOBS" -I{} sh -c '
    d=$(dirname {}) r=$(basename {} .cu)
    make -s -C "$d" $(cat "$d/.make_args" 2>/dev/null) "$r" >"$d/build.$r.log" 2>&1 || echo "FAIL {}: build"' \
    < "$OUT/selected.txt" | tee "$OUT/failures.txt"
[ -s "$OUT/failures.txt" ] && fail=1
for log in "$OUT"/*/build.*.log; do
    if grep -qi "warning" "$log"; then
        echo "FAIL $log: nvcc warnings:"; grep -i warning "$log" | head -5; fail=1
    fi
done
# The two streams of every rank program: no memory touched by both unordered
# (and the checker itself must catch a removed wait, in a pipeline's slots too).
selftest=()
[ -d "$OUT/gpt_dp2_tp2" ] && selftest+=(--self-test "$OUT/gpt_dp2_tp2")
[ -d "$OUT/gpt_pp2_mb2" ] && selftest+=(--self-test-pipeline "$OUT/gpt_pp2_mb2")
python3 tests/e2e/check_streams.py "${selftest[@]}" "$OUT"/*/rank*.cu || fail=1
[ $fail = 0 ] && echo "cuda_build: $n cases compiled; nvcc built $(wc -l < "$OUT/selected.txt") of their $(ls "$OUT"/*/rank*.cu | wc -l) rank files, every statement form among them, with no warnings"
exit $fail
