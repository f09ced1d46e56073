#!/usr/bin/env python3
"""NumPy reference of the optimizers `compile --train` emits (issue 26).

The generated training program implements the PyTorch forms of SGD and
AdamW; onnxruntime-training (tests/train/ort_oracle.py) implements only a
subset of them (plain SGD; AdamW in either form, see below), so a test that
needs momentum, weight decay in SGD, or wants to check the optimizer apart
from the gradients drives these functions instead, with gradients taken
from ORT (ort_oracle.py --grads-only / --dump-grads) or from our program.

Every function is pure: it takes dicts name -> np.ndarray and returns new
dicts, never changing its arguments. `step` counts from 1 (the first update
is step 1), as in PyTorch and in ORT's optimizer. Arithmetic is done in the
parameters' dtype (float32 for our models) with the scalar factors
(bias corrections) in float64, as PyTorch does on CPU.

Formulas, for a parameter p with gradient g at step t:

  clip_grad_norm (torch.nn.utils.clip_grad_norm_, and ORT's
  InplaceClipGradNorm, which is the same):
      norm = sqrt(sum over every trainable tensor of sum(g*g))
      g   *= min(1, max_norm / (norm + 1e-6))

  sgd (torch.optim.SGD, dampening d, nesterov off unless asked):
      g = g + weight_decay * p                  (L2: added to the gradient)
      if momentum != 0:
          buf = g                               at t = 1
          buf = momentum * buf + (1 - d) * g    at t > 1
          g   = g + momentum * buf  if nesterov else  buf
      p = p - lr * g

  adamw, mode "torch" (torch.optim.AdamW; ORT AdamWOptimizer adam_mode=0):
      p = p - lr * weight_decay * p             (decoupled, before the step)
      m = beta1 * m + (1 - beta1) * g
      v = beta2 * v + (1 - beta2) * g*g
      p = p - (lr / (1 - beta1^t)) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)

  adamw, mode "hf" (HF transformers' old AdamW; ORT adam_mode=1, which is
  what onnxblock.optim.AdamW and OptimType.AdamW always build):
      m, v as above
      p = p - lr * sqrt(1 - beta2^t) / (1 - beta1^t) * m / (sqrt(v) + eps)
      p = p - lr * weight_decay * p             (decoupled, after the step)
  The two agree when weight_decay = 0 except for eps: "hf" adds eps to
  sqrt(v), not to sqrt(v_hat), i.e. its eps is eps / sqrt(1 - beta2^t) in
  "torch" terms.

Run as a script it replays an ORT run: `np_reference.py RUN_DIR` reads
RUN_DIR/config.json, initial.npz and grads_steps.npz (written by
ort_oracle.py --dump-grads), applies the optimizer named in config.json to
the recorded gradients and prints the largest relative difference from
RUN_DIR/weights.npz. That is how the formulas above were checked against
ORT 1.19.2 (tests/train/README.md).
"""
import json
import math
import os
import sys

import numpy as np

CLIP_EPS = 1e-6  # torch.nn.utils.clip_grad_norm_ and ORT's InplaceClipGradNorm


def global_norm(grads):
    """L2 norm of all gradients taken together, accumulated in float64."""
    return math.sqrt(sum(float(np.sum(np.square(g, dtype=np.float64))) for g in grads.values()))


def clip_grad_norm(grads, max_norm):
    """Returns (clipped grads, norm before clipping)."""
    norm = global_norm(grads)
    coef = min(1.0, max_norm / (norm + CLIP_EPS))
    return {k: (g * g.dtype.type(coef)) for k, g in grads.items()}, norm


def sgd_step(params, grads, state, step, lr, momentum=0.0, dampening=0.0,
             weight_decay=0.0, nesterov=False):
    """One torch.optim.SGD update. state holds the momentum buffers
    ("buf." + name); pass {} at step 1. Returns (params, state)."""
    new_p, new_s = {}, dict(state)
    for k, p in params.items():
        g = grads[k]
        t = p.dtype.type
        if weight_decay != 0:
            g = g + t(weight_decay) * p
        if momentum != 0:
            if step == 1 or ("buf." + k) not in state:
                buf = g.copy()
            else:
                buf = t(momentum) * state["buf." + k] + t(1 - dampening) * g
            new_s["buf." + k] = buf
            g = g + t(momentum) * buf if nesterov else buf
        new_p[k] = p - t(lr) * g
    return new_p, new_s


def adamw_step(params, grads, state, step, lr, beta1=0.9, beta2=0.999, eps=1e-8,
               weight_decay=0.01, mode="torch"):
    """One AdamW update in PyTorch's form (mode "torch") or in the HF form
    ORT's onnxblock builds (mode "hf"). state holds "m." + name and
    "v." + name; pass {} at step 1. Returns (params, state)."""
    if mode not in ("torch", "hf"):
        raise ValueError("adamw mode must be torch or hf, not %r" % mode)
    bc1 = 1.0 - beta1 ** step
    bc2 = 1.0 - beta2 ** step
    new_p, new_s = {}, dict(state)
    for k, p in params.items():
        g = grads[k]
        t = p.dtype.type
        m = state.get("m." + k, np.zeros_like(p))
        v = state.get("v." + k, np.zeros_like(p))
        if mode == "torch":
            p = p - t(lr * weight_decay) * p
        m = t(beta1) * m + t(1 - beta1) * g
        v = t(beta2) * v + t(1 - beta2) * g * g
        if mode == "torch":
            denom = np.sqrt(v) / t(math.sqrt(bc2)) + t(eps)
            p = p - t(lr / bc1) * (m / denom)
        else:
            p = p - t(lr * math.sqrt(bc2) / bc1) * (m / (np.sqrt(v) + t(eps)))
            p = p - t(lr * weight_decay) * p
        new_p[k], new_s["m." + k], new_s["v." + k] = p, m, v
    return new_p, new_s


def optimizer_step(cfg, params, grads, state, step):
    """Dispatches on a config dict as ort_oracle.py writes it (config.json):
    optimizer, lr, max_grad_norm and the optimizer's hyper-parameters."""
    if cfg.get("max_grad_norm"):
        grads, _ = clip_grad_norm(grads, cfg["max_grad_norm"])
    if cfg["optimizer"] == "sgd":
        return sgd_step(params, grads, state, step, cfg["lr"], cfg.get("momentum", 0.0),
                        cfg.get("dampening", 0.0), cfg.get("sgd_weight_decay", 0.0))
    if cfg["optimizer"] == "adamw":
        return adamw_step(params, grads, state, step, cfg["lr"], cfg["beta1"], cfg["beta2"],
                          cfg["eps"], cfg["weight_decay"], cfg["adam_mode"])
    raise ValueError("unknown optimizer %r" % cfg["optimizer"])


def replay(cfg, initial, grads_per_step):
    """Applies cfg's optimizer for len(grads_per_step) steps from initial."""
    params, state = dict(initial), {}
    for s, grads in enumerate(grads_per_step, start=1):
        params, state = optimizer_step(cfg, params, grads, state, s)
    return params


def max_scaled_diff(a, b):
    """Largest |a-b| / max|b| of a tensor, over every tensor of two dicts.
    Scaled by the tensor's largest value rather than each element's, since a
    weight that an update takes through zero has no meaningful relative
    error; float32 rounding gives about 1e-7."""
    worst = 0.0
    for k in b:
        d = np.abs(a[k].astype(np.float64) - b[k].astype(np.float64))
        worst = max(worst, float(np.max(d)) / max(float(np.max(np.abs(b[k]))), 1e-30))
    return worst


def main(argv):
    if len(argv) != 2:
        sys.exit("usage: np_reference.py RUN_DIR   (a run of ort_oracle.py --dump-grads)")
    run = argv[1]
    with open(os.path.join(run, "config.json")) as fh:
        cfg = json.load(fh)
    initial = dict(np.load(os.path.join(run, "initial.npz")))
    recorded = np.load(os.path.join(run, "grads_steps.npz"))
    steps = [{} for _ in range(cfg["steps"])]
    for key in recorded.files:  # "s<step>.<name>"
        s, name = key.split(".", 1)
        steps[int(s[1:]) - 1][name] = recorded[key]
    ours = replay(cfg, initial, steps)
    theirs = dict(np.load(os.path.join(run, "weights.npz")))
    print("%s: numpy %s replay vs ORT weights after %d steps: max |diff|/max|w| %.3g"
          % (run, cfg["optimizer"], cfg["steps"], max_scaled_diff(ours, theirs)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
