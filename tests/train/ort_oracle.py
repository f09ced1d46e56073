#!/usr/bin/env python3
"""Trains an ONNX model with onnxruntime-training: the golden for issue 26.

Runs under build/venv-train (tools/deps.sh --train: onnxruntime-training
1.19.2, CPU), independent of the compiler. Given a model whose graph computes
a scalar loss, it builds ORT's training artifacts
(onnxruntime.training.artifacts.generate_artifacts: the gradient graph, a
checkpoint, an optimizer graph), then runs N steps with the training api
(Module, Optimizer, CheckpointState), one thread, and writes to --out:

  losses.npy      float64 [N]: the loss each step computed (before its update)
  weights.npz     the trainable initializers after N steps, by name
  config.json     everything that fixes the run: model, loss, trainables,
                  optimizer and hyper-parameters, steps, inputs, versions
  initial.npz     the trainable initializers before step 1
  grads.npz       with --grads-only: d loss / d weight at the initial weights
                  (one forward and backward, no update; losses.npy has 1 value)
  grads_steps.npz with --dump-grads: every step's gradient, "s<step>.<name>",
                  as the optimizer received it (before clipping)

Inputs: --input NAME=FILE.npy for each graph input; without any, MODEL's
siblings <model>.input_<name>.npy are used (what make_train_models.py writes).
A file of the model's input shape is fed every step; one whose leading dim is
k times the model's gives k batches, step s (from 1) using block (s-1) mod k.

What ORT 1.19.2's optimizers do (read from its source,
orttraining/training_ops/cpu/optimizer/{sgd,adamw,clip_grad_norm}/*.cc and
onnxruntime/training/onnxblock/optim/optim.py, and checked numerically by
tests/train/np_reference.py, which replays the recorded gradients):

  sgd   (onnxblock.optim.SGD -> com.microsoft SGDOptimizerV2):
        p = p - lr * g. No momentum, no weight decay, no dampening: none can
        be asked for. --momentum / --sgd-weight-decay are refused here; use
        np_reference.sgd_step with ORT's gradients for those.
  adamw (onnxblock.optim.AdamW -> com.microsoft AdamWOptimizer):
        defaults of the onnxblock (and of OptimType.AdamW, which cannot be
        changed): betas (0.9, 0.999), eps 1e-6, weight_decay 0.0,
        bias_correction on, adam_mode 1. The block's betas, eps,
        weight_decay and bias_correction can be set; adam_mode is fixed to 1
        in the block, so this script subclasses the node builder to choose it.
        adam_mode 0 ("torch", the default here: what torch.optim.AdamW and
        the compiler do):
            p = p - lr*wd*p; m = b1*m + (1-b1)*g; v = b2*v + (1-b2)*g^2
            p = p - lr/(1-b1^t) * m / (sqrt(v)/sqrt(1-b2^t) + eps)
        adam_mode 1 ("hf", HF transformers' AdamW):
            m, v as above; p = p - lr*sqrt(1-b2^t)/(1-b1^t) * m/(sqrt(v)+eps)
            then p = p - lr*wd*p (decay after the step, on the new p)
        t is the optimizer's step, 1 at the first update. The kernel computes
        in float32 (bias corrections as float32 too).
  clipping (--max-grad-norm, onnxblock.optim.ClipGradNorm ->
        InplaceClipGradNorm, before the optimizer): norm = sqrt(sum g^2)
        over all trainables, g *= min(1, max_norm / (norm + 1e-6)), i.e.
        torch.nn.utils.clip_grad_norm_.

onnxruntime.training imports torch (from onnxruntime.training.optim, for its
PyTorch-side FP16/fused optimizers, unused here); torch is not installed, so a
stub module stands in for it before the import (see _stub_torch).
"""
import argparse
import importlib.machinery
import json
import os
import sys
import tempfile
import time
import types

import numpy as np


class _AnyMeta(type):
    def __getattr__(cls, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return _Any


class _Any(metaclass=_AnyMeta):
    """Any attribute of the stub torch: a class (onnxruntime.training.optim
    subclasses torch.optim.Optimizer at import time) whose attributes are
    again this class."""

    def __init__(self, *args, **kwargs):
        pass


class _TorchStub(types.ModuleType):
    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return _Any


def _stub_torch():
    if "torch" in sys.modules:
        return
    stub = _TorchStub("torch")
    # importlib.util.find_spec("torch") (onnxruntime/tools/__init__.py)
    # raises on a module without a spec.
    stub.__spec__ = importlib.machinery.ModuleSpec("torch", None)
    sys.modules["torch"] = stub


_stub_torch()
import onnx  # noqa: E402
import onnxruntime  # noqa: E402
from onnx import numpy_helper  # noqa: E402
from onnxruntime.training import artifacts, onnxblock  # noqa: E402
from onnxruntime.training.onnxblock import _training_graph_utils  # noqa: E402
from onnxruntime.training.api import CheckpointState, Module, Optimizer  # noqa: E402

onnxruntime.set_default_logger_severity(3)  # errors only

ADAM_MODES = {"torch": 0, "hf": 1}

# Optional outputs (after the first) that ORT's gradient builders read.
OPTIONAL_OUTPUTS_FOR_GRAD = {
    "SoftmaxCrossEntropyLoss": ("log_prob",),
    "LayerNormalization": ("mean", "inv_std_dev"),
}


def _quiet_session_options():
    """ORT's graph preparation (get_optimized_model, the gradient builder)
    makes its own SessionOptions, which log every pass at info level."""
    so = onnxruntime.SessionOptions()
    so.log_severity_level = 3
    return so


_training_graph_utils.SessionOptions = _quiet_session_options


class _AdamWNode(onnxblock.optim.optim.AdamWOptimizer):
    """ORT's AdamW node builder with adam_mode chosen instead of fixed at 1."""

    def __init__(self, adam_mode, **kwargs):
        super().__init__(**kwargs)
        self._adam_mode = adam_mode

    def _build_optimizer_node(self, input_names, output_name, node_name, node_attributes):
        node_attributes = dict(node_attributes, adam_mode=self._adam_mode)
        return super()._build_optimizer_node(input_names, output_name, node_name, node_attributes)


def optimizer_block(args):
    clip = onnxblock.optim.ClipGradNorm(args.max_grad_norm) if args.max_grad_norm else None
    if args.optimizer == "sgd":
        return onnxblock.optim.SGD(clip_grad=clip)
    block = onnxblock.optim.AdamW(clip_grad=clip)
    block._adamw = _AdamWNode(ADAM_MODES[args.adam_mode], bias_correction=True,
                              betas=(args.beta1, args.beta2), eps=args.eps,
                              weight_decay=args.weight_decay)
    return block


def float_initializers(model):
    return [i.name for i in model.graph.initializer
            if i.data_type in (onnx.TensorProto.FLOAT,)]


def prepare_model(model, loss):
    """The model as ORT's gradient builder needs it: `loss` its only output
    (ORT's training graph hands every graph output to the loss block, and we
    add no loss block), and the optional outputs its gradients read named."""
    outs = [o for o in model.graph.output if o.name == loss]
    if not outs:
        sys.exit("ort_oracle: model has no output %r (outputs: %s)"
                 % (loss, ", ".join(o.name for o in model.graph.output)))
    del model.graph.output[:]
    model.graph.output.extend(outs)
    # ORT's gradient of SoftmaxCrossEntropyLoss reads the node's optional
    # second output, log_prob, and fails on a node without it ("i <
    # node_->OutputDefs().size()"); naming it changes no value.
    # LayerNormalization's gradient reads Mean and InvStdDev the same way.
    for node in model.graph.node:
        want = OPTIONAL_OUTPUTS_FOR_GRAD.get(node.op_type, ())
        while len(node.output) <= len(want):
            node.output.append("%s_%s_for_ort" % (node.output[0], want[len(node.output) - 1]))
    return model


def read_inputs(args, model):
    """name -> list of per-step batches (cycled)."""
    init_names = {i.name for i in model.graph.initializer}
    graph_inputs = [i for i in model.graph.input if i.name not in init_names]
    given = dict(kv.split("=", 1) for kv in args.input)
    stem = os.path.splitext(args.model)[0]
    feeds = {}
    for vi in graph_inputs:
        path = given.pop(vi.name, stem + ".input_%s.npy" % vi.name)
        if not os.path.exists(path):
            sys.exit("ort_oracle: no data for input %r (give --input %s=FILE.npy)" % (vi.name, vi.name))
        arr = np.load(path)
        shape = [d.dim_value if d.HasField("dim_value") else None
                 for d in vi.type.tensor_type.shape.dim]
        if len(shape) != arr.ndim or any(s is not None and s != a
                                          for s, a in zip(shape[1:], arr.shape[1:])):
            sys.exit("ort_oracle: %s: shape %s does not fit input %r %s"
                     % (path, list(arr.shape), vi.name, shape))
        b = shape[0] if shape and shape[0] else arr.shape[0]
        if arr.ndim == 0 or arr.shape[0] == b:
            feeds[vi.name] = [arr]
        elif arr.shape[0] % b == 0:
            feeds[vi.name] = [arr[i * b:(i + 1) * b] for i in range(arr.shape[0] // b)]
        else:
            sys.exit("ort_oracle: %s: leading dim %d is not a multiple of %r's batch %d"
                     % (path, arr.shape[0], vi.name, b))
    if given:
        sys.exit("ort_oracle: --input names no graph input: %s" % ", ".join(given))
    return feeds


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("model")
    ap.add_argument("--loss", default="loss", help="name of the scalar loss output")
    ap.add_argument("--trainable", help="comma-separated initializers (default: every float one)")
    ap.add_argument("--frozen", help="comma-separated float initializers to leave out")
    ap.add_argument("--optimizer", choices=("sgd", "adamw"), default="sgd")
    ap.add_argument("--lr", type=float, help="learning rate (needed unless --grads-only)")
    ap.add_argument("--beta1", type=float, default=0.9)
    ap.add_argument("--beta2", type=float, default=0.999)
    ap.add_argument("--eps", type=float, default=1e-8, help="AdamW eps (torch's default)")
    ap.add_argument("--weight-decay", type=float, default=0.01, help="AdamW decoupled decay (torch's default)")
    ap.add_argument("--adam-mode", choices=tuple(ADAM_MODES), default="torch")
    ap.add_argument("--max-grad-norm", type=float, default=0.0, help="clip by global norm (0: off)")
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--input", action="append", default=[], metavar="NAME=FILE.npy")
    ap.add_argument("--grads-only", action="store_true",
                    help="one forward+backward at the initial weights: write grads.npz, no update")
    ap.add_argument("--dump-grads", action="store_true", help="also write grads_steps.npz")
    ap.add_argument("--threads", type=int, default=1, help="ORT's intra-op threads (bench/train_bench.py)")
    ap.add_argument("--time", action="store_true",
                    help="print 'time per step: MS ms' over steps 2..N and the peak RSS (bench/train_bench.py)")
    ap.add_argument("--out", required=True)
    args = ap.parse_args(argv)
    if args.lr is None and not args.grads_only:
        ap.error("--lr is needed to train (only --grads-only goes without)")
    return args


def main(argv):
    args = parse_args(argv)
    model = prepare_model(onnx.load(args.model), args.loss)
    floats = float_initializers(model)
    trainable = args.trainable.split(",") if args.trainable else list(floats)
    frozen = set(args.frozen.split(",")) if args.frozen else set()
    unknown = [n for n in trainable + sorted(frozen) if n not in floats]
    if unknown:
        sys.exit("ort_oracle: not a float initializer: %s" % ", ".join(unknown))
    trainable = [n for n in trainable if n not in frozen]
    initial = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer if i.name in trainable}
    feeds = read_inputs(args, model)

    os.makedirs(args.out, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        artifacts.generate_artifacts(model, requires_grad=trainable, loss=None,
                                     optimizer=optimizer_block(args), artifact_directory=tmp)
        so = onnxruntime.SessionOptions()
        so.intra_op_num_threads = args.threads
        so.inter_op_num_threads = 1
        so.log_severity_level = 3
        state = CheckpointState.load_checkpoint(os.path.join(tmp, "checkpoint"))
        module = Module(os.path.join(tmp, "training_model.onnx"), state, session_options=so)
        opt = Optimizer(os.path.join(tmp, "optimizer_model.onnx"), module)
        opt.set_learning_rate(args.lr or 0.0)
        module.train()
        order = module.input_names()
        losses, grads_steps = [], {}
        t_timed = None
        for step in range(1, (1 if args.grads_only else args.steps) + 1):
            if step == 2:
                t_timed = time.perf_counter()
            batch = [feeds[n][(step - 1) % len(feeds[n])] for n in order]
            out = module(*batch)
            loss = out[0] if isinstance(out, (list, tuple)) else out
            losses.append(float(np.asarray(loss)))
            if args.grads_only or args.dump_grads:
                for n in trainable:
                    grads_steps["s%d.%s" % (step, n)] = np.array(state.parameters[n].grad)
            if args.grads_only:
                break
            opt.step()
            module.lazy_reset_grad()
        if args.time and t_timed is not None:
            import resource
            print("time per step: %.3f ms (%d steps after 1 warm-up, %d threads)\npeak memory: %.1f MiB" %
                  ((time.perf_counter() - t_timed) * 1e3 / (args.steps - 1), args.steps - 1, args.threads,
                   resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0), flush=True)
        weights = {n: np.array(state.parameters[n].data) for n in trainable}

    np.save(os.path.join(args.out, "losses.npy"), np.array(losses, dtype=np.float64))
    np.savez(os.path.join(args.out, "initial.npz"), **initial)
    if args.grads_only:
        np.savez(os.path.join(args.out, "grads.npz"),
                 **{n: grads_steps["s1." + n] for n in trainable})
    else:
        np.savez(os.path.join(args.out, "weights.npz"), **weights)
    if args.dump_grads and not args.grads_only:
        np.savez(os.path.join(args.out, "grads_steps.npz"), **grads_steps)
    cfg = {
        "model": os.path.relpath(args.model), "loss": args.loss, "trainable": trainable,
        "optimizer": args.optimizer, "lr": args.lr, "steps": 0 if args.grads_only else args.steps,
        "max_grad_norm": args.max_grad_norm,
        "inputs": {n: len(b) for n, b in feeds.items()},
        "onnxruntime_training": onnxruntime.__version__, "onnx": onnx.__version__,
    }
    if args.grads_only:  # no update: the optimizer's settings mean nothing here
        for k in ("optimizer", "lr", "max_grad_norm"):
            del cfg[k]
    elif args.optimizer == "adamw":
        cfg.update(beta1=args.beta1, beta2=args.beta2, eps=args.eps,
                   weight_decay=args.weight_decay, adam_mode=args.adam_mode)
    with open(os.path.join(args.out, "config.json"), "w") as fh:
        json.dump(cfg, fh, indent=1, sort_keys=True)
        fh.write("\n")
    print("%s %s: losses %s" % (os.path.basename(args.model),
                                "gradients" if args.grads_only else args.optimizer,
                                " ".join("%.6f" % x for x in losses)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
