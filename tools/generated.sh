#!/usr/bin/env bash
# generated.sh [--check]: (re)writes generated/, the committed compiler
# output for five examples, or with --check regenerates them and requires
# byte-identical files. Weight files are not committed (they are binary and
# large); everything a reader needs is: rank<k>.c (or .cu), the runtime and
# kernels headers they include (o2s_runtime.h, o2s_kernels.h or .cuh),
# plan.txt, Makefile, run.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-build/onnx2spmd}
check=0
[ "${1:-}" = --check ] && check=1
examples=(
    "mlp_tp2|tests/models/mlp.onnx --mesh tp=2 --shard W1=[_,tp]"
    "tiny_gpt_dp2_tp2|tests/models/tiny_gpt.onnx --mesh dp=2,tp=2 --shardings tests/partition/tiny_gpt_megatron.txt"
    "mlp_auto_tp2|tests/models/mlp.onnx --mesh tp=2 --auto --mem-limit 100K"
    "tiny_gpt_dp2_tp2_cuda_fsdp|tests/models/tiny_gpt.onnx --mesh dp=2,tp=2 --shardings tests/partition/tiny_gpt_megatron.txt --shard-weights dp --target cuda"
    "tiny_gpt_pp2_tp2_mb2|tests/models/tiny_gpt.onnx --mesh pp=2,dp=1,tp=2 --microbatches 2 --device cpu --shardings tests/partition/tiny_gpt_megatron.txt"
)
fail=0
for ex in "${examples[@]}"; do
    name=${ex%%|*}
    args=${ex#*|}
    out=build/generated/$name
    # shellcheck disable=SC2086
    "$BIN" compile $args -o "$out" >/dev/null
    if [ $check = 1 ]; then
        for f in "$out"/rank*.c "$out"/rank*.cu "$out"/o2s_*.h "$out"/o2s_*.cuh "$out"/plan.txt "$out"/Makefile "$out"/run.sh; do
            [ -e "$f" ] || continue
            if ! cmp -s "$f" "generated/$name/$(basename "$f")"; then
                echo "generated/$name/$(basename "$f") differs from a fresh compile"; fail=1
            fi
        done
        [ "$(ls generated/$name | wc -l)" = "$(ls "$out" | grep -E '^rank[0-9]+\.cu?$|^o2s_[a-z]+\.(h|cuh)$|^plan\.txt$|^Makefile$|^run\.sh$' | wc -l)" ] \
            || { echo "generated/$name: file list differs"; fail=1; }
    else
        rm -rf "generated/$name"
        mkdir -p "generated/$name"
        for f in "$out"/*; do
            case "$(basename "$f")" in rank[0-9]*.c|rank[0-9]*.cu|o2s_*.h|o2s_*.cuh|plan.txt|Makefile|run.sh) cp "$f" "generated/$name/";; esac
        done
    fi
done
[ $check = 1 ] && [ $fail = 0 ] && echo "generated/: byte-identical to a fresh compile"
exit $fail
