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

The two MLP training models also have their forward and backward here
(mlp_mse_loss_grads, mlp_sce_loss_grads), so their goldens are checked by
code that shares nothing with ORT. Run as a script (numpy alone, or onnx too
for `train` on a golden folder):

  np_reference.py replay DIR...  an ort_oracle.py --dump-grads run: our
                                 optimizer on ORT's recorded gradients must
                                 give ORT's final weights (how the formulas
                                 above were checked against ORT 1.19.2)
  np_reference.py grads DIR...   an ort_oracle.py --grads-only run of an MLP:
                                 ORT's gradients against ours
  np_reference.py train DIR...   a golden (or run) of an MLP: losses and
                                 weights against training it in numpy
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


# Forward and backward of the two MLP training models, written out by hand:
# a check of ORT's gradients that shares no code with it, and the oracle for
# these two models where onnxruntime-training is not at hand. Each takes the
# weights and one batch (dicts by ONNX name) and returns (loss, grads), in
# float64 so that the check measures ORT's rounding and not ours.

def _erf(x):
    return np.vectorize(math.erf, otypes=[np.float64])(x)


def mlp_mse_loss_grads(params, feeds):
    """tests/models/train/mlp_mse.onnx: Gelu(x W1 + b1) W2 + b2 = y,
    loss = mean((y - target)^2)."""
    p = {k: v.astype(np.float64) for k, v in params.items()}
    x, target = feeds["x"].astype(np.float64), feeds["target"].astype(np.float64)
    h = x @ p["W1"] + p["b1"]
    cdf = 0.5 * (1.0 + _erf(h / math.sqrt(2.0)))
    a = h * cdf  # exact (erf) Gelu: the ONNX op's default approximate="none"
    y = a @ p["W2"] + p["b2"]
    diff = y - target
    loss = float(np.mean(diff * diff))
    dy = 2.0 * diff / diff.size
    da = dy @ p["W2"].T
    dh = da * (cdf + h * np.exp(-0.5 * h * h) / math.sqrt(2.0 * math.pi))
    return loss, {"W1": x.T @ dh, "b1": dh.sum(0), "W2": a.T @ dy, "b2": dy.sum(0)}


def mlp_sce_loss_grads(params, feeds):
    """tests/models/train/mlp_sce.onnx: Gemm(transB) -> Relu -> Gemm(transB)
    = logits, loss = SoftmaxCrossEntropyLoss(logits, labels, mean)."""
    p = {k: v.astype(np.float64) for k, v in params.items()}
    x, labels = feeds["x"].astype(np.float64), feeds["labels"]
    h = x @ p["W1"].T + p["b1"]
    a = np.maximum(h, 0.0)
    logits = a @ p["W2"].T + p["b2"]
    z = logits - logits.max(axis=1, keepdims=True)
    logp = z - np.log(np.exp(z).sum(axis=1, keepdims=True))
    rows = np.arange(len(labels))
    loss = float(-np.mean(logp[rows, labels]))
    dlogits = np.exp(logp)
    dlogits[rows, labels] -= 1.0
    dlogits /= len(labels)
    dh = (dlogits @ p["W2"]) * (h > 0)
    return loss, {"W1": dh.T @ x, "b1": dh.sum(0), "W2": dlogits.T @ a, "b2": dlogits.sum(0)}


def mlp_sce_ignore_loss_grads(params, feeds):
    """tests/models/train/mlp_sce_ignore.onnx: mlp_sce with ignore_index
    -100: the mean over the counted labels only, ignored rows no gradient."""
    p = {k: v.astype(np.float64) for k, v in params.items()}
    x, labels = feeds["x"].astype(np.float64), feeds["labels"]
    keep = labels != -100
    rows, lab = np.arange(len(labels))[keep], labels[keep]
    h = x @ p["W1"].T + p["b1"]
    a = np.maximum(h, 0.0)
    logits = a @ p["W2"].T + p["b2"]
    z = logits - logits.max(axis=1, keepdims=True)
    logp = z - np.log(np.exp(z).sum(axis=1, keepdims=True))
    loss = float(-np.mean(logp[rows, lab]))
    dlogits = np.exp(logp)
    dlogits[rows, lab] -= 1.0
    dlogits[~keep] = 0.0
    dlogits /= keep.sum()
    dh = (dlogits @ p["W2"]) * (h > 0)
    return loss, {"W1": dh.T @ x, "b1": dh.sum(0), "W2": dlogits.T @ a, "b2": dlogits.sum(0)}


MODEL_GRADS = {"mlp_mse": mlp_mse_loss_grads, "mlp_sce": mlp_sce_loss_grads,
               "mlp_sce_ignore": mlp_sce_ignore_loss_grads}


def lr_factor(cfg, step):
    """The learning-rate factor of optimizer step `step` (1, 2, ...) in
    Hugging Face's counting (transformers' get_cosine_schedule_with_warmup
    and get_constant_schedule_with_warmup, s = step - 1): s / warmup during
    the warm-up, then 1 or 0.5 (1 + cos(pi p)) to total_steps."""
    warmup, total, s = cfg.get("warmup_steps", 0), cfg.get("total_steps", 0), step - 1
    if s < warmup:
        return s / warmup
    if cfg.get("lr_schedule", "constant") != "cosine":
        return 1.0
    if total <= warmup or s >= total:
        return 0.0
    return 0.5 * (1.0 + np.cos(np.pi * (s - warmup) / (total - warmup)))


def train(loss_grads, cfg, initial, batches):
    """cfg["steps"] steps of loss_grads + the optimizer of cfg, step s on
    batches[(s-1) % len(batches)]. Returns (losses, params); the weights are
    kept in float32 between steps, as the model stores them."""
    params, state, losses = dict(initial), {}, []
    for s in range(1, cfg["steps"] + 1):
        loss, grads = loss_grads(params, batches[(s - 1) % len(batches)])
        grads = {k: g.astype(params[k].dtype) for k, g in grads.items()}
        losses.append(loss)
        step_cfg = dict(cfg, lr=cfg["lr"] * lr_factor(cfg, s))
        params, state = optimizer_step(step_cfg, params, grads, state, s)
    return np.array(losses), params


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


def _load_run(run):
    """config.json and initial.npz of an ort_oracle.py output folder, or of a
    golden (whose initial weights are the model's: taken from the model)."""
    with open(os.path.join(run, "config.json")) as fh:
        cfg = json.load(fh)
    path = os.path.join(run, "initial.npz")
    if os.path.exists(path):
        return cfg, dict(np.load(path))
    import onnx  # only here: replay and grads need numpy alone
    from onnx import numpy_helper
    model = onnx.load(cfg["model"])
    return cfg, {i.name: numpy_helper.to_array(i) for i in model.graph.initializer
                 if i.name in cfg["trainable"]}


def _model_feeds(cfg):
    """The fixed inputs beside the model (make_train_models.py), as one batch."""
    stem = os.path.splitext(cfg["model"])[0]
    return {n: np.load("%s.input_%s.npy" % (stem, n)) for n in cfg["inputs"]}


def cmd_replay(run):
    """ORT's weights after N steps against our optimizer fed ORT's gradients
    (a run of ort_oracle.py --dump-grads)."""
    cfg, initial = _load_run(run)
    recorded = np.load(os.path.join(run, "grads_steps.npz"))
    steps = [{} for _ in range(cfg["steps"])]
    for key in recorded.files:  # "s<step>.<name>"
        s, name = key.split(".", 1)
        steps[int(s[1:]) - 1][name] = recorded[key]
    ours = replay(cfg, initial, steps)
    return "weights", max_scaled_diff(ours, dict(np.load(os.path.join(run, "weights.npz"))))


def cmd_grads(run):
    """ORT's gradients (ort_oracle.py --grads-only) against the hand-written
    backward of an MLP model."""
    cfg, initial = _load_run(run)
    name = os.path.splitext(os.path.basename(cfg["model"]))[0]
    _, ours = MODEL_GRADS[name](initial, _model_feeds(cfg))
    return "gradients", max_scaled_diff(ours, dict(np.load(os.path.join(run, "grads.npz"))))


def cmd_train(run):
    """A golden (or an ort_oracle.py run) of an MLP model against training
    it here: forward, backward and optimizer all in numpy."""
    cfg, initial = _load_run(run)
    name = os.path.splitext(os.path.basename(cfg["model"]))[0]
    losses, params = train(MODEL_GRADS[name], cfg, initial, [_model_feeds(cfg)])
    theirs = np.load(os.path.join(run, "losses.npy"))
    loss_diff = float(np.max(np.abs(losses - theirs) / np.abs(theirs)))
    w_diff = max_scaled_diff(params, dict(np.load(os.path.join(run, "weights.npz"))))
    return "losses and weights", max(loss_diff, w_diff)


COMMANDS = {"replay": cmd_replay, "grads": cmd_grads, "train": cmd_train}


def main(argv):
    """np_reference.py replay|grads|train [--tol T] DIR...: prints the largest
    scaled difference for each DIR; exits 1 if one exceeds T (default 1e-5:
    float32 rounding over a few steps is about 1e-6)."""
    args = argv[1:]
    tol = 1e-5
    if "--tol" in args:
        i = args.index("--tol")
        tol = float(args[i + 1])
        del args[i:i + 2]
    if len(args) < 2 or args[0] not in COMMANDS:
        sys.exit("usage: np_reference.py replay|grads|train [--tol T] DIR...")
    bad = 0
    for run in args[1:]:
        what, diff = COMMANDS[args[0]](run)
        ok = diff <= tol
        bad += not ok
        print("np_reference %s %s: %s differ by %.3g (relative)%s"
              % (args[0], run, what, diff, "" if ok else " > %g" % tol))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
