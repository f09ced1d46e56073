#!/usr/bin/env bash
# plan_bench.sh: compile-time benchmark. Builds a 32-layer Llama-shaped
# graph (6.7 G parameters in a sparse external file that must never be
# read), then times `inspect` (load and shape inference: the reference)
# and `plan` (propagation and reshard lowering on dp=2,tp=4, Megatron
# annotations) in the same script, median of 7 runs each. Target: plan
# under 1 s. The weight file's allocated blocks stay 0: nothing reads it.
set -euo pipefail
BIN=${BIN:-build/onnx2spmd}
OUT=build/bench
build/venv/bin/python bench/make_llama.py "$OUT" 32 >/dev/null

median() { # command... -> median wall seconds of 7 runs
    local times=()
    for _ in 1 2 3 4 5 6 7; do
        local t0 t1
        t0=$(date +%s.%N)
        "$@" >/dev/null
        t1=$(date +%s.%N)
        times+=("$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.6f", b - a }')")
    done
    printf '%s\n' "${times[@]}" | sort -g | sed -n 4p
}

ref=$(median "$BIN" inspect "$OUT/llama.onnx")
plan=$(median "$BIN" plan "$OUT/llama.onnx" --mesh dp=2,tp=4 --shardings "$OUT/llama_megatron.txt")
blocks=$(du -k "$OUT/llama.weights" | cut -f1)

printf '\n%-44s %12s %10s\n' "compile time: llama 32 layers, 835 nodes" "median (s)" "ratio"
printf '%-44s %12.4f %10s\n' "inspect (load + shape inference, reference)" "$ref" "1.00"
printf '%-44s %12.4f %10.2f\n' "plan dp=2,tp=4 Megatron" "$plan" "$(awk -v a="$plan" -v b="$ref" 'BEGIN { print a / b }')"
printf '%-44s %12s\n' "weight file blocks on disk (KiB, sparse)" "$blocks"
if awk -v a="$plan" 'BEGIN { exit !(a < 1.0) }' ; then echo "plan target (< 1 s): met"; else echo "plan target (< 1 s): MISSED"; exit 1; fi
