#!/usr/bin/env bash
# tests/gpu/run.sh: everything that needs a GPU, in one call (under 8
# minutes on one H200; see tests/gpu/README.md). It runs on a bare GPU
# machine: nvcc and the CUDA toolkit, python3 with onnx, onnxruntime, numpy
# and the nvidia-nccl wheel; no OpenMPI, no protobuf-c, no network. Carry
# build/onnx2spmd from the CPU machine (protobuf-c is linked into it
# statically, so it needs only libc). Every step runs under a timeout and
# says what failed.
#  1. one-rank golden runs (mlp, attention, tiny_gpt and its float16 and
#     bfloat16 variants (16-bit GEMMs through cublasGemmEx), convnet, the
#     LayerNorm-offset and int64 Div/Pow models), built with MPI=0: no MPI,
#     no NCCL. Compared with the goldens (compare.py, tolerance by dtype);
#  2. determinism: tiny_gpt run twice, outputs bit-identical; and a
#     pipeline (one stage, two microbatches) against the golden;
#  2c. --trace on one GPU: a span per node from CUDA events, valid JSON;
#  2e. --decode: the GPT-2, Llama and Mixtral (MoE) KV-cache exports
#     generate 8 tokens on one GPU, caches in device memory, against ONNX
#     Runtime's tokens and logits (tests/golden/decode);
#  2f. a mixture of experts (Mixtral's MoE export, batched and eager,
#     dispatch and combine kernels, --stats' counters in device memory)
#     against the golden;
#  3. two ranks, built with MPI=0 against NCCL from NCCL_HOME or the wheel
#     (with an rpath) and started by launch.sh: run and compared where two
#     GPUs exist, else the clear refusal of two ranks on one GPU;
#  4. the larger GPT of `make bench` on one GPU against cuBLAS alone on the
#     same GEMMs, issued the same way (strided-batched, random data).
set -u
cd "$(dirname "$0")/../.."
OUT=build/gpu
mkdir -p "$OUT"
T0=$(date +%s)
fail=0
err() { echo "FAIL $*"; fail=1; }
step() { echo "== $* ($(( $(date +%s) - T0 )) s)"; }

PY=build/venv/bin/python
"$PY" -c "import onnx, onnxruntime, numpy" 2>/dev/null || PY=python3
"$PY" -c "import onnx, onnxruntime, numpy" 2>/dev/null || { echo "FAIL: no python with onnx, onnxruntime and numpy"; exit 1; }
[ -x build/onnx2spmd ] || { echo "FAIL: build/onnx2spmd missing (build it with make on the CPU machine and carry it)"; exit 1; }
build/onnx2spmd --version >/dev/null || { echo "FAIL: build/onnx2spmd does not run here: $(ldd build/onnx2spmd 2>&1 | grep 'not found')"; exit 1; }
command -v nvidia-smi >/dev/null && NGPU=$(nvidia-smi -L 2>/dev/null | wc -l) || NGPU=0
[ "$NGPU" -ge 1 ] || { echo "FAIL: no GPU found"; exit 1; }
ARCH=${ARCH:-sm_$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -1 | tr -d .)}
NVCC=${NVCC:-/usr/local/cuda/bin/nvcc}
echo "gpu: $NGPU x $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1), $ARCH, $("$NVCC" --version | tail -1)"

# compile_build NAME MODEL MESH [FLAGS...]: compile for CUDA and build with MPI=0.
compile_build() {
    local name=$1 model=$2 mesh=$3 d=$OUT/$1; shift 3
    rm -rf "$d"
    timeout 60 build/onnx2spmd compile "$model" --mesh "$mesh" "$@" --target cuda --cuda-arch "$ARCH" -o "$d" \
        >"$d.compile.log" 2>&1 || { err "$name: compile: $(tail -2 "$d.compile.log")"; return 1; }
    timeout 300 make -s -j8 -C "$d" MPI=0 NVCC="$NVCC" >"$d.build.log" 2>&1 \
        || { err "$name: build: $(grep -m3 -i 'error' "$d.build.log")"; return 1; }
}
# golden_args MODEL DIR: --in/--out flags for a golden model's files.
golden_args() {
    args=()
    for f in tests/golden/$1/input_*.npy; do n=$(basename "$f" .npy); args+=(--in "${n#input_}=$f"); done
    for f in tests/golden/$1/output_*.npy; do n=$(basename "$f" .npy); args+=(--out "${n#output_}=$2/$n.npy"); done
}
compare() { # MODEL DIR LABEL
    for f in tests/golden/$1/output_*.npy; do
        local n res
        n=$(basename "$f" .npy)
        res=$("$PY" tests/e2e/compare.py "$f" "$2/$n.npy") || err "$3: $res"
        printf '%-28s %s\n' "$3" "$res"
    done
}

step "1. one-rank golden runs (MPI=0, no NCCL)"
pids=()
for m in mlp attention tiny_gpt convnet layernorm_offset int_ops tiny_gpt_f16 tiny_gpt_bf16; do
    compile_build "${m}_1" "tests/models/$m.onnx" r=1 &
    pids+=($!)
done
wait "${pids[@]}"
for m in mlp attention tiny_gpt convnet layernorm_offset int_ops tiny_gpt_f16 tiny_gpt_bf16; do
    d=$OUT/${m}_1
    [ -x "$d/rank0" ] || continue
    golden_args "$m" "$d"
    timeout 120 "$d/rank0" "${args[@]}" --timeout 60 </dev/null >"$d.log" 2>&1 \
        || { err "${m}_1: run (exit $?): $(tail -3 "$d.log")"; continue; }
    compare "$m" "$d" "${m} r=1"
done

step "2. determinism: tiny_gpt twice"
d=$OUT/tiny_gpt_1
if [ -x "$d/rank0" ]; then
    timeout 120 "$d/rank0" --in tokens=tests/golden/tiny_gpt/input_tokens.npy --out logits="$OUT/again.npy" </dev/null \
        >/dev/null 2>&1 || err "tiny_gpt second run"
    cmp -s "$d/output_logits.npy" "$OUT/again.npy" && echo "tiny_gpt r=1: two runs bit-identical" \
        || err "tiny_gpt: two runs differ (a non-deterministic kernel)"
fi

step "2b. a pipeline on one GPU: tiny_gpt as one stage of two microbatches (MPI=0)"
if compile_build gpt_pp1_mb2 tests/models/tiny_gpt.onnx pp=1 --microbatches 2; then
    d=$OUT/gpt_pp1_mb2
    golden_args tiny_gpt "$d"
    timeout 120 "$d/rank0" "${args[@]}" --timeout 60 </dev/null >"$d.log" 2>&1 \
        && compare tiny_gpt "$d" "tiny_gpt pp=1, 2 microbatches" || err "gpt_pp1_mb2: run (exit $?): $(tail -3 "$d.log")"
fi

step "2d. --train on one GPU: mlp_mse and mlp_sce, 5 SGD and AdamW steps against onnxruntime-training's losses (fp32; bf16 and fp16 within their tolerance)"
for m in mlp_mse mlp_sce; do
    for opt in sgd adamw sgd_bf16 adamw_fp16; do
        case $opt in
            sgd) oflags="--optimizer sgd --lr 0.1" tol=1e-4 ;;
            adamw) oflags="--optimizer adamw --lr 0.01 --weight-decay 0.01" tol=1e-4 ;;
            sgd_bf16) oflags="--optimizer sgd --lr 0.1 --precision bf16" tol=3e-2 ;;
            adamw_fp16) oflags="--optimizer adamw --lr 0.01 --weight-decay 0.01 --precision fp16" tol=5e-3 ;;
        esac
        # shellcheck disable=SC2086
        compile_build "train_${m}_$opt" "tests/models/train/$m.onnx" r=1 --train $oflags || continue
        d=$OUT/train_${m}_$opt
        ins=()
        for f in tests/models/train/$m.input_*.npy; do
            n=${f##*.input_}; ins+=(--in "${n%.npy}=$f")
        done
        timeout 120 "$d/rank0" "${ins[@]}" --steps 5 --timeout 60 </dev/null >"$d.log" 2>&1 \
            || { err "train_${m}_$opt: run (exit $?): $(tail -3 "$d.log")"; continue; }
        "$PY" - "$d.log" "tests/golden/train/${m}_${opt%_*}/losses.npy" "$tol" <<'PYEOF' || err "train_${m}_$opt: losses differ"
import re, sys, numpy as np
ours = np.array([float(v) for v in re.findall(r"^step \d+ loss (\S+)$", open(sys.argv[1]).read(), re.M)])
ref = np.load(sys.argv[2])
rel = np.max(np.abs(ours - ref) / np.abs(ref)) if len(ours) == len(ref) else float("inf")
print("train %s: 5 steps, losses within %.1e of onnxruntime-training" % (sys.argv[1], rel))
sys.exit(0 if rel < float(sys.argv[3]) else 1)
PYEOF
    done
done

step "2c. --trace on the GPU: CUDA-event spans for every node, valid trace JSON, same numbers"
d=$OUT/tiny_gpt_1
if [ -x "$d/rank0" ]; then
    timeout 120 "$d/rank0" --in tokens=tests/golden/tiny_gpt/input_tokens.npy --out logits="$OUT/traced.npy" \
        --iters 5 --trace "$OUT/trace.json" </dev/null >"$OUT/trace.log" 2>&1 || err "tiny_gpt --trace: $(tail -3 "$OUT/trace.log")"
    cmp -s "$d/output_logits.npy" "$OUT/traced.npy" || err "tiny_gpt: a traced run's logits differ"
    nodes=$(grep -cE 'rt_enter\([0-9]+\);' "$d/rank0.cu")
    "$PY" - "$OUT/trace.json" "$nodes" <<'PYEOF' || err "tiny_gpt --trace: bad trace"
import json, sys
ev = json.load(open(sys.argv[1]))["traceEvents"]
steps = [e for e in ev if e.get("cat") == "step"]
nodes = [e for e in ev if e.get("cat") == "node" and e["args"]["iteration"] == 3]
assert len(steps) == 6, len(steps)
assert len(nodes) == int(sys.argv[2]), (len(nodes), sys.argv[2])
assert all(e["dur"] >= 0 for e in nodes) and sum(e["dur"] for e in nodes) <= steps[3]["dur"] * 1.01
print("tiny_gpt --trace: %d node spans per pass, %.3f ms on the GPU" % (len(nodes), steps[3]["dur"] / 1e3))
PYEOF
    "$PY" tools/trace_report.py "$OUT/trace.json" >"$OUT/trace_report.txt" || err "trace_report.py failed"
    head -8 "$OUT/trace_report.txt"
fi

step "2e. --decode on one GPU: GPT-2, Llama and Mixtral (MoE) KV-cache exports, prompt + 8 tokens against ONNX Runtime's loop"
for m in gpt2 llama mixtral; do
    d=$OUT/decode_$m
    compile_build "decode_$m" "tests/models/exports/${m}_kv.onnx" tp=1 --decode --max-seq 24 --generate 8 --dim batch=2 \
        || continue
    timeout 120 "$d/rank0" --in "input_ids=tests/golden/decode/${m}_prompt.npy" --out "tokens=$d/tokens.npy" \
        --out "logits=$d/logits.npy" --iters 3 --timeout 60 </dev/null >"$d.log" 2>&1 \
        || { err "decode_$m: run (exit $?): $(tail -3 "$d.log")"; continue; }
    "$PY" - "$m" "$d" <<'PYEOF' || err "decode_$m: tokens or logits differ from ONNX Runtime's"
import sys
import numpy as np
m, d = sys.argv[1], sys.argv[2]
t, l = np.load(d + "/tokens.npy"), np.load(d + "/logits.npy")
rt, rl = np.load("tests/golden/decode/%s_tokens.npy" % m), np.load("tests/golden/decode/%s_logits.npy" % m)
err = float(np.max(np.abs(l - rl)))
print("decode %s r=1: tokens %s, max|logits - ORT| %.2e" % (m, "equal" if np.array_equal(t, rt) else "DIFFER", err))
sys.exit(0 if np.array_equal(t, rt) and err <= 1e-4 else 1)
PYEOF
    grep "per token" "$d.log"
done

step "2f. mixture of experts on one GPU: Mixtral's MoE dispatch and combine kernels against ONNX Runtime, --stats (batched and eager exports)"
for x in mixtral_moe mixtral_moe_eager; do
    d=$OUT/${x}_1
    compile_build "${x}_1" "tests/models/exports/$x.onnx" r=1 --capacity-factor 2 || continue
    golden_args "$x" "$d"
    if timeout 120 "$d/rank0" "${args[@]}" --stats --timeout 60 </dev/null >"$d.log" 2>&1; then
        compare "$x" "$d" "$x r=1 (MoE kernels)"
        [ "$(grep -c '^moe .*: dropped 0 of 64 (token, expert) pairs; capacity 32' "$d.log")" = 2 ] \
            || err "${x}_1: --stats lines: $(grep '^moe' "$d.log")"
    else
        err "${x}_1: run (exit $?): $(tail -3 "$d.log")"
    fi
done

step "3. two ranks without mpirun (NCCL from NCCL_HOME or the wheel)"
if compile_build gpt_tp2 tests/models/tiny_gpt.onnx tp=2 --shardings tests/e2e/tiny_gpt_tp.txt; then
    d=$OUT/gpt_tp2
    readelf -d "$d/rank0" | grep -q 'R.*PATH' || err "gpt_tp2: no rpath to NCCL in rank0"
    golden_args tiny_gpt "$d"
    timeout 120 "$d/launch.sh" "${args[@]}" --timeout 60 </dev/null >"$d.log" 2>&1
    rc=$?
    if [ "$NGPU" -ge 2 ]; then
        [ $rc -eq 0 ] && compare tiny_gpt "$d" "tiny_gpt tp=2 launch.sh" || err "gpt_tp2: run (exit $rc): $(tail -3 "$d.log")"
    elif grep -q "NCCL needs a GPU per rank" "$d.log" && [ $rc -ne 0 ] && [ $rc -ne 124 ]; then
        echo "tiny_gpt tp=2 on 1 GPU: refused clearly: $(grep -m1 'NCCL needs' "$d.log")"
    else
        err "gpt_tp2 on one GPU: expected a clear refusal, got exit $rc: $(tail -3 "$d.log")"
    fi
fi

step "4. gpt_512 on one GPU against cuBLAS alone"
timeout 120 "$PY" - "$OUT" <<'PYEOF' || err "gpt_512: model generation"
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
gen=""
if compile_build gpt_512 "$OUT/gpt_512.onnx" r=1; then
    timeout 120 "$OUT/gpt_512/rank0" --in tokens="$OUT/gpt_512_tokens.npy" --iters 50 --timeout 60 </dev/null \
        >"$OUT/gpt_512.log" 2>&1 || err "gpt_512: run (exit $?): $(tail -3 "$OUT/gpt_512.log")"
    gen=$(grep "time per iteration" "$OUT/gpt_512.log" | sed 's/.*: \([0-9.]*\) ms.*/\1/')
fi
timeout 120 "$NVCC" -O3 -arch="$ARCH" -o "$OUT/gemm_rate" tests/gpu/gemm_rate.cu -lcublas || err "gemm_rate: build"
# The GEMMs of gpt_512 per pass, as the generated code issues them (B*S = 512
# rows): per layer Q, K, V and the output projection (512,512,512), the
# scores and the context as one strided-batched call of B*H = 32 each
# ((128,128,64) and (128,64,128)), the MLP (512,2048,512) and (512,512,2048);
# then the LM head (512,1024,512).
ref=$(timeout 120 "$OUT/gemm_rate" 512 512 512 1 16  128 128 64 32 4  128 64 128 32 4  512 2048 512 1 4 \
      512 512 2048 1 4  512 1024 512 1 1) || err "gemm_rate: run"
if [ -n "$gen" ] && [ -n "$ref" ]; then
    echo "$ref" | awk -v t="$gen" '{ g = $2; cs = $4; cr = $6; rate = g / (t / 1e3);
        printf "\n%-46s %12s %14s %10s\n", "gpt_512 on 1 GPU (float32, TF32 off)", "ms/iter", "GEMM GFLOP/s", "fraction";
        printf "%-46s %12.3f %14.1f %10s\n", "cuBLAS alone, same GEMM calls", cs * 1e3, cr, "1.00";
        printf "%-46s %12.3f %14.1f %10.2f\n", "generated program, whole forward pass", t, rate, rate / cr }'
else
    err "gpt_512: no timing"
fi

echo "gpu: $(( $(date +%s) - T0 )) s"
[ $fail = 0 ] && echo "gpu: all checks passed"
exit $fail
