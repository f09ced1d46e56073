#!/usr/bin/env bash
# readme_trace.sh: redraws docs/tiny_gpt_dp2_tp2_fsdp_trace.svg, the
# timeline README.md shows: tiny_gpt on dp=2 x tp=2 (Megatron inside) with
# FSDP weights, traced over 20 passes, the last one drawn. Timings differ
# from machine to machine and run to run, so this is not part of
# tools/generated.sh's byte-for-byte check.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=build/readme_trace
rm -rf "$OUT"
build/onnx2spmd compile tests/models/tiny_gpt.onnx --mesh dp=2,tp=2 \
    --shardings tests/partition/tiny_gpt_megatron.txt --shard-weights dp -o "$OUT" >/dev/null
make -s -C "$OUT"
"$OUT/run.sh" --in tokens=tests/golden/tiny_gpt/input_tokens.npy --iters 20 --trace "$OUT/trace.json" </dev/null
mkdir -p docs
python3 tools/trace_svg.py "$OUT/trace.json" -o docs/tiny_gpt_dp2_tp2_fsdp_trace.svg
python3 tools/trace_report.py "$OUT/trace.json" | tail -n 6
