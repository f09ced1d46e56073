#!/usr/bin/env bash
# demo.sh: the main job on the bundled model. Compiles tiny_gpt for a
# dp=2 x tp=2 mesh (batch over dp, Megatron tensor parallelism over tp),
# builds the four rank programs, runs them under mpirun, and compares the
# gathered logits with ONNX Runtime's, then traces a run (tools/trace_report.py, tools/trace_svg.py).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=build/demo
# The logits are written into the output folder, which compile -o would
# (rightly) refuse to replace; a demo run starts afresh.
rm -rf "$OUT"
echo "== plan and compile: tiny_gpt on dp=2,tp=2"
build/onnx2spmd compile tests/models/tiny_gpt.onnx --mesh dp=2,tp=2 \
    --shardings tests/partition/tiny_gpt_megatron.txt -o "$OUT"
sed -n '/^collectives/,/^  activations/p' "$OUT/plan.txt"
echo "== build (mpicc + OpenBLAS)"
make -s -C "$OUT" WARN="-Wall -Wextra -Werror"
echo "== run on 4 ranks"
"$OUT/run.sh" --in tokens=tests/golden/tiny_gpt/input_tokens.npy --out logits="$OUT/logits.npy" --iters 20 </dev/null
echo "== compare with ONNX Runtime"
build/venv/bin/python tests/e2e/compare.py tests/golden/tiny_gpt/output_logits.npy "$OUT/logits.npy"
echo "== trace one run: where the time went, and a timeline"
"$OUT/run.sh" --in tokens=tests/golden/tiny_gpt/input_tokens.npy --iters 20 --trace "$OUT/trace.json" </dev/null >/dev/null
python3 tools/trace_report.py "$OUT/trace.json"
python3 tools/trace_svg.py "$OUT/trace.json" -o "$OUT/trace.svg"
echo "timeline: $OUT/trace.svg; the trace opens in https://ui.perfetto.dev"
