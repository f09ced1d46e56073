#!/usr/bin/env bash
# tests/gpu/run.sh: everything that needs a GPU, in one call (< 8 minutes).
#  1. builds the CUDA output of every golden model for one rank (and for
#     more ranks when more GPUs are present), runs it, compares with the
#     ONNX Runtime goldens (|out - golden| <= 1e-5 + 1e-4 |golden|);
#  2. times the larger GPT of `make bench` (d_model 512, 4 layers, seq 128,
#     batch 4) on one GPU and reports, as a table, its time per iteration,
#     its GEMM throughput, and the fraction of the rate cuBLAS reaches on
#     the same GEMM shapes alone (tests/gpu/gemm_rate.cu).
# Needs: nvcc, NCCL, cuBLAS, MPI; build/onnx2spmd and build/venv (carried
# from the machine that built them, or built here by make).
set -u
cd "$(dirname "$0")/../.."
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
OUT=build/gpu
mkdir -p "$OUT"
PY=build/venv/bin/python
[ -x "$PY" ] || PY=python3
[ -x build/onnx2spmd ] || make build/onnx2spmd >/dev/null || exit 1
NGPU=$(nvidia-smi -L 2>/dev/null | wc -l)
[ "$NGPU" -ge 1 ] || { echo "gpu: no GPU found"; exit 1; }
echo "gpu: $NGPU GPU(s): $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"
ARCH=${ARCH:-sm_$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -1 | tr -d .)}
fail=0

# 1. golden runs: one rank always; tp=2 / dp=2,tp=2 when the GPUs are there.
cases=("mlp dp=1" "attention dp=1" "tiny_gpt dp=1" "convnet dp=1")
if [ "$NGPU" -ge 2 ]; then
    cases+=("mlp tp=2 --shard W1=[_,tp]" "tiny_gpt tp=2 --shardings tests/e2e/tiny_gpt_tp.txt"
            "tiny_gpt dp=2 --shard tokens=[dp,_] --shard-weights dp")
fi
if [ "$NGPU" -ge 4 ]; then
    cases+=("tiny_gpt dp=2,tp=2 --shardings tests/partition/tiny_gpt_megatron.txt --shard-weights dp")
fi
for c in "${cases[@]}"; do
    read -r model mesh flags <<<"$c"
    d="$OUT/${model}_${mesh//[=,]/_}"
    rm -rf "$d" # holds the last run's outputs, which compile -o would refuse to replace
    # shellcheck disable=SC2086
    build/onnx2spmd compile "tests/models/$model.onnx" --mesh "$mesh" $flags --target cuda --cuda-arch "$ARCH" \
        -o "$d" >/dev/null || { echo "FAIL compile $c"; fail=1; continue; }
    make -s -j4 -C "$d" >"$d.build.log" 2>&1 || { echo "FAIL build $c"; tail -5 "$d.build.log"; fail=1; continue; }
    args=()
    for f in tests/golden/$model/input_*.npy; do n=$(basename "$f" .npy); args+=(--in "${n#input_}=$f"); done
    for f in tests/golden/$model/output_*.npy; do n=$(basename "$f" .npy); args+=(--out "${n#output_}=$d/$n.npy"); done
    timeout 120 "$d/run.sh" "${args[@]}" </dev/null >"$d.log" 2>&1 || { echo "FAIL run $c"; tail -5 "$d.log"; fail=1; continue; }
    for f in tests/golden/$model/output_*.npy; do
        n=$(basename "$f" .npy)
        res=$("$PY" tests/e2e/compare.py "$f" "$d/$n.npy") || fail=1
        printf '%-12s %-10s %s\n' "$model" "$mesh" "$res"
    done
done

# 2. the larger GPT on one GPU against cuBLAS alone.
"$PY" - "$OUT" <<'PYEOF'
import os, sys
import numpy as np
sys.path.insert(0, "tests/models")
import make_models
out = sys.argv[1]
rng = np.random.default_rng(3)
m, _ = make_models.make_tiny_gpt(rng, V=1024, D=512, H=8, S=128, B=4, F=2048, L=4, name="gpt_512")
open(os.path.join(out, "gpt_512.onnx"), "wb").write(m.SerializeToString())
np.save(os.path.join(out, "gpt_512_tokens.npy"), rng.integers(0, 1024, (4, 128), dtype=np.int64))
PYEOF
d=$OUT/gpt_512_cuda
rm -rf "$d"
build/onnx2spmd compile "$OUT/gpt_512.onnx" --mesh dp=1 --target cuda --cuda-arch "$ARCH" -o "$d" >/dev/null || exit 1
make -s -C "$d" >"$d.build.log" 2>&1 || { echo "FAIL build gpt_512"; tail -5 "$d.build.log"; exit 1; }
gen=$("$d/run.sh" --in tokens="$OUT/gpt_512_tokens.npy" --iters 50 </dev/null 2>&1 | grep "time per iteration" | sed 's/.*: \([0-9.]*\) ms.*/\1/')
/usr/local/cuda/bin/nvcc -O3 -arch="$ARCH" -o "$OUT/gemm_rate" tests/gpu/gemm_rate.cu -lcublas || exit 1
# GEMMs of gpt_512 per forward pass (B*S = 512 rows): per layer QKV 3x
# (512,512,512), scores and context 32x (128,128,64)+(128,64,128), output
# (512,512,512), MLP (512,2048,512)+(512,512,2048); LM head (512,1024,512).
ref=$("$OUT/gemm_rate" 512 512 512 16 128 128 64 128 128 64 128 128 512 2048 512 4 512 512 2048 4 512 1024 512 1)
gflop=$(echo "$ref" | awk '{print $2}'); cublas_s=$(echo "$ref" | awk '{print $4}'); cublas_rate=$(echo "$ref" | awk '{print $6}')
awk -v g="$gflop" -v t="$gen" -v cs="$cublas_s" -v cr="$cublas_rate" 'BEGIN {
    rate = g / (t / 1e3);
    printf "\n%-46s %12s %14s %10s\n", "gpt_512 on 1 GPU (float32, TF32 off)", "ms/iter", "GEMM GFLOP/s", "fraction";
    printf "%-46s %12.3f %14.1f %10s\n", "cuBLAS alone, same GEMM shapes", cs * 1e3, cr, "1.00";
    printf "%-46s %12.3f %14.1f %10.2f\n", "generated program, whole forward pass", t, rate, rate / cr;
}'
[ -n "$gen" ] || fail=1
[ $fail = 0 ] && echo "gpu: all checks passed"
exit $fail
