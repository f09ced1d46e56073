#!/usr/bin/env python3
"""run_train.py [FILTER]: the training golden tests (tests/train/cases.txt).

For each case: `onnx2spmd compile --train` the model of tests/models/train/
on the case's mesh and shardings, build the rank programs with -Werror, run
5 steps under mpirun from the model's fixed inputs, and compare the loss
printed at every step (relative 1e-4) and every trained weight written by
--out (max |ours - ref| over the tensor at most 1e-4 of max |ref|: a weight
an update takes through zero has no meaningful element-wise relative error)
with a reference:

  * tests/golden/train/MODEL_OPT/ when it exists: onnxruntime-training's
    losses and weights (tests/train/make_goldens.sh);
  * for the MLP models otherwise (gradient clipping): training written in
    numpy (tests/train/np_reference.py);
  * otherwise the case MODEL_OPT_1 of this run: the same model on one rank,
    itself checked by finite differences (below). A case flagged `@fd` is such a reference for
    another configuration (named by that case's `@ref=`): it is run and its
    own gradients are checked by finite differences.

A `resume` case checks checkpoints: AdamW for 5 steps straight against 2
steps saved and 3 resumed (losses and weights bit for bit), and a truncated
checkpoint refused with one line. An `fd` case checks the backward pass alone: one SGD step at lr 1 gives
each weight's gradient as (before - after); for every trained tensor its
projection on a random direction v is compared with the central difference
(L(w + e v) - L(w - e v)) / 2e that ONNX Runtime's inference computes
(onnx.reference for opset 23 models, which ORT 1.22 refuses).
(tiny_gpt_lm has no onnxruntime-training golden: ORT 1.19.2 returns zero
gradients for its first layer's LayerNorm scale and bias, which finite
differences refute; see tests/train/README.md.)
"""
import os
import re
import subprocess
import sys

import numpy as np
import onnx
from onnx import numpy_helper

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests", "train"))
import np_reference  # noqa: E402

BIN = os.environ.get("BIN", os.path.join(ROOT, "build", "onnx2spmd"))
OUT = os.path.join(ROOT, "build", "train")
MODELS = os.path.join(ROOT, "tests", "models", "train")
GOLDEN = os.path.join(ROOT, "tests", "golden", "train")
STEPS = 5
OPTIMIZERS = {
    "sgd": (["--optimizer", "sgd", "--lr", "0.1"], {"optimizer": "sgd", "lr": 0.1}),
    "adamw": (["--optimizer", "adamw", "--lr", "0.01", "--weight-decay", "0.01"],
              {"optimizer": "adamw", "lr": 0.01, "beta1": 0.9, "beta2": 0.999, "eps": 1e-8,
               "weight_decay": 0.01, "adam_mode": "torch"}),
    "fd": (["--optimizer", "sgd", "--lr", "1"], None),
}
LOSS_RTOL = 1e-4
WEIGHT_TOL = 1e-4
# AdamW against another plan of ours: its step lr * m / (sqrt(v) + eps) is
# about lr whatever the gradient's size, so an element whose gradient is at
# rounding level (summed in another order over dp and tp) moves by lr in a
# direction rounding picks. The weights then agree to 2.5e-4, the losses to
# 3e-6; the cases also freeze the key biases, whose gradient is exactly zero
# (softmax does not see a constant added to every key).
WEIGHT_TOL_ADAMW_PLANS = 1e-3
# --precision bf16|fp16 against the float32 reference: the activations,
# their gradients and the weights' gradients carry 8 (bf16) or 11 (fp16)
# bits, rounded at every node's output; five steps then drift by about
# 30 (bf16) or 4 (fp16) times their unit roundoff.
PRECISION_TOL = {"bf16": 3e-2, "fp16": 5e-3}
# ... except AdamW's weights: its step is about lr whatever a gradient's
# size, so an element whose gradient is at rounding level moves by lr in
# a direction rounding picks. Its cases compare each weight's whole update
# instead: |w - w_ref| / |w_ref - w0| (norms; an update below 1% of the
# weight counts as that 1%) within 0.25, where a wrong gradient gives 1 or
# more.
ADAMW_UPDATE_TOL = 0.25


def update_err(params, ref, initial):
    worst = 0.0
    for k in ref:
        a, b, w0 = (x.astype(np.float64) for x in (params[k], ref[k], initial[k]))
        worst = max(worst, float(np.linalg.norm(a - b)) /
                    max(float(np.linalg.norm(b - w0)), 1e-2 * float(np.linalg.norm(w0)), 1e-30))
    return worst
STDOUT = {}  # the last run's output of each case


def model_parts(model):
    m = onnx.load(os.path.join(MODELS, model + ".onnx"))
    weights = {i.name: numpy_helper.to_array(i) for i in m.graph.initializer
               if i.data_type == onnx.TensorProto.FLOAT}
    feeds = {}
    for f in sorted(os.listdir(MODELS)):
        if f.startswith(model + ".input_") and f.endswith(".npy"):
            feeds[f[len(model) + 7:-4]] = os.path.join(MODELS, f)
    return m, weights, feeds


def batched(name, flags, feeds):
    """A case's `@batches=K` (not a compiler flag): its --in files hold K
    batches (the model's inputs, then K-1 more drawn from a fixed seed, of
    the same kind), so step s trains on batch (s-1) mod K."""
    k = [int(f.split("=", 1)[1]) for f in flags if f.startswith("@batches=")]
    flags = [f for f in flags if not f.startswith("@")]
    if not k or k[0] == 1:
        return flags, feeds
    os.makedirs(os.path.join(OUT, "data"), exist_ok=True)
    rng = np.random.default_rng(7)
    out = {}
    for n, path in feeds.items():
        a = np.load(path)
        more = [a]
        for _ in range(k[0] - 1):
            if a.dtype.kind == "f":
                more.append(rng.standard_normal(a.shape).astype(a.dtype))
            elif "mask" in n:  # the model's own masks, rows in another order (none wholly masked)
                more.append(np.roll(a, len(more), axis=0))
            else:
                more.append(rng.integers(int(a.min()), int(a.max()) + 1, a.shape).astype(a.dtype))
        out[n] = os.path.join(OUT, "data", "%s.%s.npy" % (name, n))
        np.save(out[n], np.concatenate(more, axis=0))
    return flags, out


def run_case(name, model, opt, flags, steps):
    """Compiles, builds and runs one case: (losses, {weight: final value})."""
    d = os.path.join(OUT, name)
    subprocess.run(["rm", "-rf", d], check=True)
    _, weights, feeds = model_parts(model)
    flags, feeds = batched(name, flags, feeds)
    if "--frozen" in flags:
        for k in flags[flags.index("--frozen") + 1].split(","):
            weights.pop(k)
    cmd = [BIN, "compile", "--train", os.path.join(MODELS, model + ".onnx"), "-o", d] + OPTIMIZERS[opt][0] + flags
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode:
        raise RuntimeError("compile: " + r.stderr.strip())
    r = subprocess.run(["make", "-s", "-j%d" % os.cpu_count(), "-C", d, "WARN=-Wall -Wextra -Werror"],
                       capture_output=True, text=True)
    if r.returncode:
        raise RuntimeError("build: " + (r.stdout + r.stderr)[-2000:])
    args = [os.path.join(d, "run.sh"), "--steps", str(steps)]
    for k, path in feeds.items():
        args += ["--in", "%s=%s" % (k, path)]
    for k in weights:
        args += ["--out", "%s=%s/w_%s.npy" % (k, d, k)]
    r = subprocess.run(args, capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL)
    if r.returncode:
        raise RuntimeError("run: " + (r.stdout + r.stderr)[-2000:])
    STDOUT[name] = r.stdout
    losses = [float(m.group(2)) for m in re.finditer(r"^step (\d+) loss (\S+)$", r.stdout, re.M)]
    if len(losses) != steps:
        raise RuntimeError("run printed %d losses, not %d:\n%s" % (len(losses), steps, r.stdout[-1000:]))
    return np.array(losses), {k: np.load("%s/w_%s.npy" % (d, k)) for k in weights}


def compare(losses, params, ref_losses, ref_params):
    """The worst relative loss error and scaled weight error."""
    le = float(np.max(np.abs(losses - ref_losses) / np.abs(ref_losses)))
    we = np_reference.max_scaled_diff(params, ref_params)
    return le, we


def reference(name, model, opt, flags, results, cases):
    """(losses, weights, what) to compare a case with."""
    gold = os.path.join(GOLDEN, "%s_%s" % (model, opt))
    numpy_only = ("--clip-norm", "--lr-schedule", "--warmup-steps", "--momentum", "--weight-decay", "--accum",
                   "--microbatches")
    if not any(f in numpy_only or f.startswith("@") for f in flags) and os.path.isdir(gold):
        return np.load(os.path.join(gold, "losses.npy")), dict(np.load(os.path.join(gold, "weights.npz"))), \
            "onnxruntime-training"
    if model in np_reference.MODEL_GRADS:
        _, weights, feeds = model_parts(model)
        cfg = dict(OPTIMIZERS[opt][1], steps=STEPS)
        if "--clip-norm" in flags:
            cfg["max_grad_norm"] = float(flags[flags.index("--clip-norm") + 1])
        for flag, key, conv in (("--lr-schedule", "lr_schedule", str), ("--warmup-steps", "warmup_steps", int),
                                ("--total-steps", "total_steps", int), ("--momentum", "momentum", float),
                                ("--weight-decay", "sgd_weight_decay" if opt == "sgd" else "weight_decay", float)):
            if flag in flags:
                cfg[key] = conv(flags[flags.index(flag) + 1])
        _, files = batched(name, flags, feeds)
        data = {k: np.load(v) for k, v in files.items()}
        kb = [int(f.split("=", 1)[1]) for f in flags if f.startswith("@batches=")] or [1]
        batches = [{k: np.split(v, kb[0])[j] for k, v in data.items()} for j in range(kb[0])]
        # A step's K microbatches (--accum K, or a pipeline's --microbatches K)
        # are, for a mean loss, one batch K times as large.
        acc_flag = "--accum" if "--accum" in flags else "--microbatches" if "--microbatches" in flags else None
        if acc_flag:
            acc = int(flags[flags.index(acc_flag) + 1])
            batches = [{k: np.concatenate([batches[(st * acc + m) % len(batches)][k] for m in range(acc)])
                        for k in batches[0]} for st in range(STEPS)]
        losses, params = np_reference.train(np_reference.MODEL_GRADS[model], cfg, weights, batches)
        return losses, params, "numpy"
    ref = [f.split("=", 1)[1] for f in flags if f.startswith("@ref=")]
    one = ref[0] if ref else "%s_%s_1" % (model, opt)
    if one not in results:  # filtered out: run it now
        spec = [c for c in cases if c[0] == one]
        if not spec:
            raise RuntimeError("no reference: cases.txt has no case %s" % one)
        results[one] = run_case(*spec[0], STEPS)
    return results[one][0], results[one][1], "the 1-rank case " + one


def fd_check(model, flags):
    """The largest disagreement between our gradient's projection on a
    random direction and ONNX Runtime's central difference, per tensor,
    relative to the larger of the two, the gradient's norm and the
    difference quotient's own noise: ORT's float32 loss L carries rounding
    of some 100 ulps (summed over thousands of terms), which the quotient
    divides by eps, so a weight whose gradient is below that (a rotary
    table, a bias the softmax cancels) is compared with the noise."""
    import onnxruntime as ort
    m, weights, feeds = model_parts(model)
    _, after = run_case(model + "_fd", model, "fd", flags, 1)
    batch = {k: np.load(v) for k, v in feeds.items()}
    loss_name = "loss"
    rng = np.random.default_rng(0)
    worst, where = 0.0, None
    eps = 1e-2
    def loss_of(model):
        # ONNX Runtime 1.22 stops at opset 22 (Attention, RotaryEmbedding are 23)
        if max(o.version for o in model.opset_import if o.domain in ("", "ai.onnx")) > 22:
            from onnx.reference import ReferenceEvaluator
            return float(np.sum(ReferenceEvaluator(model).run([loss_name], batch)[0]))
        s = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
        return float(np.sum(s.run([loss_name], batch)[0]))  # a [1, 1] loss too

    loss0 = loss_of(m)
    noise = 100 * abs(float(loss0)) * np.finfo(np.float32).eps / eps
    for k, w0 in weights.items():
        g = w0.astype(np.float64) - after[k].astype(np.float64)
        v = rng.standard_normal(w0.shape)
        v /= np.linalg.norm(v)
        ls = []
        for sign in (1, -1):
            mm = onnx.ModelProto()
            mm.CopyFrom(m)
            for init in mm.graph.initializer:
                if init.name == k:
                    init.CopyFrom(numpy_helper.from_array((w0 + sign * eps * v).astype(np.float32), k))
            ls.append(loss_of(mm))
        fd = (ls[0] - ls[1]) / (2 * eps)
        ours = float(np.sum(g * v))
        # float32 losses: the difference quotient carries `noise` (above)
        err = abs(fd - ours) / max(abs(fd), abs(ours), np.linalg.norm(g), noise, 1e-3)
        if not np.isfinite(err) or err > worst:
            worst, where = err, "%s (ours %.6g, finite difference %.6g)" % (k, ours, fd)
        if not np.isfinite(err):
            break
    return worst, where


def overflow_check(name, model, opt, flags):
    """fp16 loss scaling from 2^24, where the first steps' gradients
    overflow float16: each such step must be skipped (the weights and
    AdamW's step count untouched, so the next step prints the same loss)
    and halve the scale. Scales that are powers of two scale float16
    gradients exactly, so the run must then go on as the plain run (from
    2^16) does, one step behind per skip."""
    n = 12
    losses, w = run_case(name, model, opt, flags + ["--loss-scale", str(2 ** 24)], n)
    scales = [float(x) for x in re.findall(r"^gradient overflow \(float16\): update skipped, loss scale now (\S+)$",
                                           STDOUT[name], re.M)]
    k = len(scales)
    if not 1 <= k <= n - 3 or scales != [2.0 ** (23 - i) for i in range(k)]:
        return False, "skipped steps' scales %s" % scales
    plain, pw = run_case(name + "_plain", model, opt, flags, n - k)
    same_start = bool(np.all(losses[:k + 1] == losses[0]))
    le, we = compare(losses[k:], w, plain, pw)
    ok = same_start and le <= 1e-5 and we <= 1e-5
    return ok, "%d overflowed steps skipped (scale down to 2^%d), then against the plain run: losses %.1e, " \
        "weights %.1e%s" % (k, 24 - k, le, we, "" if same_start else "; the skipped steps' losses CHANGED")


def resume_check(name, model, opt, flags):
    """5 steps straight, against 2 steps saved (--save-every 1) and 3
    resumed: the same losses and final weights, bit for bit; then a
    truncated checkpoint must stop --resume with one line naming it."""
    d = os.path.join(OUT, name)
    full_losses, full_w = run_case(name, model, opt, flags, STEPS)
    _, weights, feeds = model_parts(model)
    ck = os.path.join(d, "ckpt")
    base = [os.path.join(d, "run.sh")]
    for k, path in feeds.items():
        base += ["--in", "%s=%s" % (k, path)]
    outs = []
    for k in weights:
        outs += ["--out", "%s=%s/r_%s.npy" % (k, d, k)]
    r1 = subprocess.run(base + ["--steps", "2", "--save", ck, "--save-every", "1"], capture_output=True, text=True,
                        timeout=300, stdin=subprocess.DEVNULL)
    r2 = subprocess.run(base + outs + ["--steps", "3", "--resume", ck], capture_output=True, text=True, timeout=300,
                        stdin=subprocess.DEVNULL)
    if r1.returncode or r2.returncode:
        raise RuntimeError("save/resume run failed: " + (r1.stderr + r2.stderr)[-1500:])
    got = [float(m.group(2)) for m in re.finditer(r"^step (\d+) loss (\S+)$", r1.stdout + r2.stdout, re.M)]
    steps = sorted(os.listdir(ck))
    same_w = all(np.array_equal(np.load("%s/r_%s.npy" % (d, k)), full_w[k]) for k in weights)
    ok = got == list(full_losses) and same_w and steps == ["latest", "step2"]
    with open(os.path.join(ck, "step2", "rank0.ckpt"), "r+b") as fh:
        fh.truncate(100)
    r3 = subprocess.run(base + ["--steps", "1", "--resume", ck], capture_output=True, text=True, timeout=300,
                        stdin=subprocess.DEVNULL)
    err_ok = r3.returncode != 0 and "rank0.ckpt" in r3.stderr and "bytes" in r3.stderr
    return ok and err_ok, "losses %s, weights %s, kept %s, truncated file %s" % (
        "equal" if got == list(full_losses) else "%s != %s" % (got, list(full_losses)),
        "equal" if same_w else "DIFFER", steps, "refused" if err_ok else "NOT refused: " + r3.stderr[-300:])


def main(argv):
    filt = argv[1] if len(argv) > 1 else ""
    os.makedirs(OUT, exist_ok=True)
    cases = []
    with open(os.path.join(ROOT, "tests", "train", "cases.txt")) as fh:
        for line in fh:
            parts = line.split()
            if parts and not parts[0].startswith("#"):
                cases.append((parts[0], parts[1], parts[2], parts[3:]))
    results, fails, n = {}, 0, 0
    for name, model, opt, flags in cases:
        if filt not in name:
            continue
        n += 1
        try:
            if opt == "resume":
                ok, what = resume_check(name, model, "adamw", flags)
                print("%s %s: 2 steps saved + 3 resumed against 5 straight: %s" % ("ok  " if ok else "FAIL", name, what))
                fails += not ok
                continue
            if opt == "overflow":
                ok, what = overflow_check(name, model, "adamw", flags)
                print("%s %s: %s" % ("ok  " if ok else "FAIL", name, what))
                fails += not ok
                continue
            if opt == "fd":
                err, where = fd_check(model, flags)
                ok = bool(err < 2e-2)  # NaN fails
                print("%s %s: gradients against finite differences, worst %.2e at %s" %
                      ("ok  " if ok else "FAIL", name, err, where))
                fails += not ok
                continue
            losses, params = run_case(name, model, opt, flags, STEPS)
            results[name] = (losses, params)
            if "@fd" in flags:  # a reference for other cases, itself checked by finite differences
                err, where = fd_check(model, [f for f in flags if not f.startswith("@")])
                ok = bool(err < 2e-2) and bool(np.all(np.isfinite(losses)))
                print("%s %s: %d steps, the reference of its flags; gradients against finite differences, worst "
                      "%.2e at %s" % ("ok  " if ok else "FAIL", name, STEPS, err, where))
                fails += not ok
                continue
            ref_l, ref_p, what = reference(name, model, opt, flags, results, cases)
            le, we = compare(losses, params, ref_l, ref_p)
            tol = WEIGHT_TOL_ADAMW_PLANS if opt == "adamw" and what.startswith("the 1-rank") else WEIGHT_TOL
            ltol = LOSS_RTOL
            if "--precision" in flags:
                ltol = tol = PRECISION_TOL[flags[flags.index("--precision") + 1]]
                if opt == "adamw":
                    we, tol = update_err(params, ref_p, model_parts(model)[1]), ADAMW_UPDATE_TOL
            ok = le <= ltol and we <= tol
            print("%s %s: %d steps against %s: losses %.1e, weights %.1e" %
                  ("ok  " if ok else "FAIL", name, STEPS, what, le, we))
            fails += not ok
        except (RuntimeError, subprocess.TimeoutExpired) as e:
            print("FAIL %s: %s" % (name, e))
            fails += 1
    print("train: %d of %d cases passed" % (n - fails, n))
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
