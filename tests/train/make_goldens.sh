#!/usr/bin/env bash
# Regenerates the training goldens, tests/golden/train/<model>_<opt>/
# {losses.npy, weights.npz, config.json}: each model of tests/models/train/
# trained 5 steps by onnxruntime-training (tests/train/ort_oracle.py) from its
# fixed inputs, with SGD (lr 0.1) and with AdamW (lr 1e-2, betas 0.9/0.999,
# eps 1e-8, weight decay 0.01, PyTorch form); and <model>_grads/{grads.npz,
# losses.npy, config.json}, its gradients at the initial weights. Before writing, each run's
# recorded gradients are replayed through tests/train/np_reference.py, so a
# golden is only written when ORT still applies the formulas we document.
# Run from anywhere; needs build/venv-train (tools/deps.sh --train).
set -euo pipefail
cd "$(dirname "$0")/../.."

PY=build/venv-train/bin/python
[ -x "$PY" ] || { echo "make_goldens: no $PY; run tools/deps.sh --train" >&2; exit 1; }
OUT=tests/golden/train
STEPS=5
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# tiny_gpt_lm has none: onnxruntime-training 1.19.2 gives zero gradients
# for its first layer's LayerNorm scale and bias (and part of Wq), which
# central differences of ORT's own inference refute (-0.0537 for
# l0_ln1_g[0]); tests/train/run_train.py checks it by finite differences.
# moe_block_mse is trained in its exported dense form by ORT; onnx2spmd's
# MoE rewrite with a capacity that drops nothing must match it.
for model in mlp_mse mlp_sce moe_block_mse; do
    for opt in sgd adamw; do
        case $opt in
            sgd)   args="--optimizer sgd --lr 0.1" ;;
            adamw) args="--optimizer adamw --lr 1e-2 --beta1 0.9 --beta2 0.999 --eps 1e-8 --weight-decay 0.01 --adam-mode torch" ;;
        esac
        run="$tmp/${model}_$opt"
        # shellcheck disable=SC2086
        "$PY" tests/train/ort_oracle.py "tests/models/train/$model.onnx" --loss loss \
            --steps "$STEPS" $args --dump-grads --out "$run"
        "$PY" tests/train/np_reference.py replay "$run"
        dest="$OUT/${model}_$opt"
        rm -rf "$dest"
        mkdir -p "$dest"
        cp "$run/losses.npy" "$run/weights.npz" "$run/config.json" "$dest/"
    done
done
# The gradients at the initial weights alone, <model>_grads/{grads.npz,
# losses.npy, config.json}: a check of `--train`'s backward graph that no
# optimizer difference can blur.
for model in mlp_mse mlp_sce; do
    run="$tmp/${model}_grads"
    "$PY" tests/train/ort_oracle.py "tests/models/train/$model.onnx" --loss loss --grads-only --out "$run"
    dest="$OUT/${model}_grads"
    rm -rf "$dest"
    mkdir -p "$dest"
    cp "$run/losses.npy" "$run/grads.npz" "$run/config.json" "$dest/"
done
# The MLPs' goldens again, from forward and backward written in numpy: a
# check of ORT's gradients by code that shares nothing with it.
for model in mlp_mse mlp_sce; do
    "$PY" tests/train/np_reference.py grads "$OUT/${model}_grads"
    "$PY" tests/train/np_reference.py train "$OUT/${model}_sgd" "$OUT/${model}_adamw"
done
echo "make_goldens: wrote $OUT"
