#!/usr/bin/env bash
# Regenerates the training goldens, tests/golden/train/<model>_<opt>/
# {losses.npy, weights.npz, config.json}: each model of tests/models/train/
# trained 5 steps by onnxruntime-training (tests/train/ort_oracle.py) from its
# fixed inputs, with SGD (lr 0.1) and with AdamW (lr 1e-2, betas 0.9/0.999,
# eps 1e-8, weight decay 0.01, PyTorch form). Before writing, each AdamW run's
# recorded gradients are replayed through tests/train/np_reference.py, so the
# goldens are only rewritten when ORT still applies the formulas we document.
# Run from anywhere; needs build/venv-train (tools/deps.sh --train).
set -euo pipefail
cd "$(dirname "$0")/../.."

PY=build/venv-train/bin/python
[ -x "$PY" ] || { echo "make_goldens: no $PY; run tools/deps.sh --train" >&2; exit 1; }
OUT=tests/golden/train
STEPS=5
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

for model in mlp_mse mlp_sce tiny_gpt_lm; do
    for opt in sgd adamw; do
        case $opt in
            sgd)   args="--optimizer sgd --lr 0.1" ;;
            adamw) args="--optimizer adamw --lr 1e-2 --beta1 0.9 --beta2 0.999 --eps 1e-8 --weight-decay 0.01 --adam-mode torch" ;;
        esac
        run="$tmp/${model}_$opt"
        # shellcheck disable=SC2086
        "$PY" tests/train/ort_oracle.py "tests/models/train/$model.onnx" --loss loss \
            --steps "$STEPS" $args --dump-grads --out "$run"
        "$PY" - "$run" <<'PYEOF'
import os, sys
sys.path.insert(0, "tests/train")
import json
import numpy as np
import np_reference as R
run = sys.argv[1]
cfg = json.load(open(os.path.join(run, "config.json")))
rec = np.load(os.path.join(run, "grads_steps.npz"))
steps = [{} for _ in range(cfg["steps"])]
for key in rec.files:
    s, name = key.split(".", 1)
    steps[int(s[1:]) - 1][name] = rec[key]
ours = R.replay(cfg, dict(np.load(os.path.join(run, "initial.npz"))), steps)
diff = R.max_scaled_diff(ours, dict(np.load(os.path.join(run, "weights.npz"))))
if diff > 1e-5:
    sys.exit("make_goldens: %s: numpy replay differs from ORT by %.3g" % (run, diff))
PYEOF
        dest="$OUT/${model}_$opt"
        rm -rf "$dest"
        mkdir -p "$dest"
        cp "$run/losses.npy" "$run/weights.npz" "$run/config.json" "$dest/"
    done
done
echo "make_goldens: wrote $OUT"
