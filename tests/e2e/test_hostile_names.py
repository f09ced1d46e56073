"""test_hostile_names.py: a model whose every name is an attack compiles to
inert, warning-free code that still computes the right numbers.

tiny_gpt is rewritten so that every tensor name, node name, the graph
name, the producer and the doc strings hold what could end a C comment or
string, start a preprocessor line, form a trigraph, act as a printf format,
move a terminal's cursor, reorder text (bidi), or be invalid UTF-8, plus
one 10 KB name. Invalid UTF-8 cannot be written through the protobuf API,
so a placeholder of the same length is swapped for raw bytes in the
serialized model. Then, for the C target on 1 rank, dp=2 and tp=2 (the
sharding given with --shard on hostile names) and for the CUDA target on
tp=2: compile, build with -Werror, run under mpirun (C), compare with ONNX
Runtime's output for the original model, and check that the marker file
the payloads try to create never appears. `inspect`, `inspect --json` and
`plan` must print no control bytes and valid UTF-8 JSON.
Usage: test_hostile_names.py [--no-cuda]
"""
import json
import os
import re
import shutil
import subprocess
import sys

import numpy as np
import onnx

ROOT = os.path.normpath(os.path.join(os.path.dirname(__file__), "..", ".."))
BIN = os.environ.get("BIN", os.path.join(ROOT, "build", "onnx2spmd"))
OUT = os.path.join(ROOT, "build", "hostile")
PWNED = os.path.join(OUT, "PWNED")
BAD_UTF8 = b"\xff\xfe\xc0\x80"       # invalid: lone bytes, overlong NUL
PLACEHOLDER = "QZQZ"                 # same length, swapped in the bytes

# Each payload aims at one context the name might be pasted into.
PAYLOADS = [
    '*/ system("touch ' + PWNED + '"); /*',          # C comment
    '"); system("touch ' + PWNED + '"); ("',          # C string literal
    "\\",                                              # escape / line splice
    "\n#include \"/etc/passwd\"\n",                    # preprocessor line
    "??/\n",                                           # trigraph splice
    "%s%n%n%s",                                        # format string
    "$(touch " + PWNED + ")`touch " + PWNED + "`",     # shell
    "\x1b[2J\x1b]0;owned\x07",                         # terminal escapes
    "\u202e\u2066",                                    # bidi override
    "/*",
    "# ",
    PLACEHOLDER,                                       # -> invalid UTF-8
]


def hostile(i, kind):
    """A unique hostile name: every payload, then an index."""
    return "".join(PAYLOADS) + "%s%d" % (kind, i)


def rename_model(m):
    """Renames every tensor and node of m in place; returns old -> new."""
    g = m.graph
    names = {}
    seen = [v.name for v in g.input] + [t.name for t in g.initializer]
    for n in g.node:
        seen += list(n.input) + list(n.output)
    for name in seen:
        if name and name not in names:
            names[name] = hostile(len(names), "t")
    # One 10 KB name, for the generators' fixed-size buffers.
    longest = g.node[len(g.node) // 2].output[0]
    names[longest] = names[longest] + "L" * 10240
    for v in list(g.input) + list(g.output) + list(g.value_info):
        v.name = names.get(v.name, v.name)
        v.doc_string = PAYLOADS[0]
    for t in g.initializer:
        t.name = names[t.name]
        t.doc_string = PAYLOADS[1]
    for k, n in enumerate(g.node):
        n.input[:] = [names.get(x, x) if x else x for x in n.input]
        n.output[:] = [names.get(x, x) for x in n.output]
        n.name = hostile(k, "n")
        n.doc_string = PAYLOADS[0]
    g.name = hostile(0, "g")
    m.producer_name = hostile(0, "p")
    m.doc_string = PAYLOADS[1]
    return names


def compile_build(name, cmd, fail):
    """Compiles (cmd: compile's arguments, -o added) into OUT/name and builds
    with -Werror; every generated C file printable ASCII. The folder, or
    None after a failure (recorded)."""
    d = os.path.join(OUT, name)
    r = run([BIN.encode()] + [c if isinstance(c, bytes) else c.encode() for c in cmd] + [b"-o", d.encode()])
    if r.returncode != 0:
        fail.append("%s: compile exit %d: %r" % (name, r.returncode, r.stderr[:300]))
        return None
    for fn in os.listdir(d):
        if fn.endswith((".c", ".h")):
            body = open(os.path.join(d, fn), "rb").read()
            if any(b > 0x7E or (b < 0x20 and b not in b"\n") for b in body):
                fail.append("%s/%s: bytes outside printable ASCII" % (name, fn))
    r = run(["make", "-s", "-C", d, "WARN=-Wall -Wextra -Werror"])
    if r.returncode != 0:
        fail.append("%s: build: %s" % (name, (r.stdout + r.stderr)[:600].decode(errors="replace")))
        return None
    return d


def train_case(m, names, tokens, golden_in, env, fail):
    """--train on the hostile tiny_gpt with a hostile loss appended
    (mean of the logits squared): its backward node names, gradient
    buckets, ZeRO blocks and optimizer updates all derive from model names.
    dp=2 with --zero 1 and small buckets; built with -Werror, inert, two
    steps run and print finite losses."""
    from onnx import TensorProto, helper
    t = onnx.ModelProto()
    t.CopyFrom(m)
    g = t.graph
    sq, loss = hostile(0, "sq"), hostile(0, "loss")
    g.node.extend([helper.make_node("Mul", [names["logits"], names["logits"]], [sq], name=hostile(0, "m")),
                   helper.make_node("ReduceMean", [sq], [loss], keepdims=0, name=hostile(0, "r"))])
    del g.output[:]
    g.output.append(helper.make_tensor_value_info(loss, TensorProto.FLOAT, []))
    model = os.path.join(OUT, "model_train.onnx")
    with open(model, "wb") as f:
        f.write(t.SerializeToString().replace(PLACEHOLDER.encode(), BAD_UTF8))
    d = compile_build("train_dp2", [b"compile", model.encode(), b"--train", b"--optimizer", b"adamw", b"--mesh", b"dp=2",
                                    b"--zero", b"1", b"--bucket-mb", b"0.01", b"--precision", b"fp16",
                                    b"--shard", tokens + b"=[dp,_]"], fail)
    if not d:
        return
    r = run([os.path.join(d, "run.sh").encode(), b"--in", tokens + b"=" + golden_in.encode(), b"--steps", b"2"],
            env=env, timeout=120, stdin=subprocess.DEVNULL)
    losses = [float(x) for x in re.findall(rb"^step \d+ loss (\S+)$", r.stdout, re.M)]
    if r.returncode != 0 or len(losses) != 2 or not all(np.isfinite(losses)):
        fail.append("train_dp2: run exit %d: %r" % (r.returncode, (r.stdout + r.stderr)[-400:]))
        return
    print("%-9s %-5s %-6s ok: --train --zero 1 --precision fp16 (Cast names from the model's), 2 steps, losses %.6g %.6g" % ("train_dp2", "dp=2", "c", *losses))


def rename_all(g, keep, tag, prefix=lambda name: ""):
    """Every value and node name of graph g made hostile but those in keep
    (prefix(name) in front of a value's); returns the old -> new map."""
    names = {}
    seen = [v.name for v in g.input] + [t.name for t in g.initializer] + [v.name for v in g.output]
    for n in g.node:
        seen += list(n.input) + list(n.output)
    for name in seen:
        if name and name not in names and name not in keep:
            names[name] = prefix(name) + hostile(len(names), tag)
    for v in list(g.input) + list(g.output) + list(g.value_info):
        v.name = names.get(v.name, v.name)
    for t in g.initializer:
        t.name = names[t.name]
    for k, n in enumerate(g.node):
        n.input[:] = [names.get(x, x) if x else x for x in n.input]
        n.output[:] = [names.get(x, x) for x in n.output]
        n.name = hostile(k, tag + "n")
    return names


def decode_case(env, fail):
    """--decode on the GPT-2 KV-cache export with every name hostile but the
    three it feeds by name (input_ids, attention_mask, position_ids): the
    caches (their past inputs keep "past" in front, which binds their dims),
    the logits, every node. Built with -Werror, inert, and the same tokens
    and logits as ONNX Runtime's loop (tests/golden/decode)."""
    m = onnx.load(os.path.join(ROOT, "tests", "models", "exports", "gpt2_kv.onnx"))
    names = rename_all(m.graph, {"input_ids", "attention_mask", "position_ids"}, "d",
                       lambda name: "past" if name.startswith("past_key_values") else "")
    model = os.path.join(OUT, "model_decode.onnx")
    with open(model, "wb") as f:
        f.write(m.SerializeToString().replace(PLACEHOLDER.encode(), BAD_UTF8))
    d = compile_build("decode_r1", ["compile", model, "--decode", "--max-seq", "24", "--generate", "8", "--dim",
                                    "batch=2", "--mesh", "tp=1"], fail)
    if not d:
        return
    gold = os.path.join(ROOT, "tests", "golden", "decode")
    logits = names["logits"].encode().replace(PLACEHOLDER.encode(), BAD_UTF8)
    r = run([os.path.join(d, "run.sh").encode(), b"--in", b"input_ids=" + os.path.join(gold, "gpt2_prompt.npy").encode(),
             b"--out", b"tokens=" + os.path.join(OUT, "decode_tokens.npy").encode(),
             b"--out", logits + b"=" + os.path.join(OUT, "decode_logits.npy").encode()],
            env=env, timeout=120, stdin=subprocess.DEVNULL)
    if r.returncode != 0:
        fail.append("decode_r1: run exit %d: %r" % (r.returncode, (r.stdout + r.stderr)[-400:]))
        return
    toks = np.load(os.path.join(OUT, "decode_tokens.npy"))
    err = float(np.max(np.abs(np.load(os.path.join(OUT, "decode_logits.npy")) -
                              np.load(os.path.join(gold, "gpt2_logits.npy")))))
    ok = np.array_equal(toks, np.load(os.path.join(gold, "gpt2_tokens.npy"))) and err <= 1e-4
    print("%-9s %-5s %-6s %s: --decode, hostile caches and logits: tokens %s, max|logits - ORT| %.2e"
          % ("decode_r1", "tp=1", "c", "ok" if ok else "FAIL", "equal" if ok else "differ", err))
    if not ok:
        fail.append("decode_r1: tokens or logits differ from ONNX Runtime's")


def moe_case(env, fail, export="mixtral_moe", tag="moe_ep2"):
    """Expert parallelism on the Mixtral MoE export with every name hostile
    but the inputs': the stacked expert weights split with --shard
    experts=ep (names taken from the model into a --shard annotation), the
    nodes (the dispatch's goes into --stats' table and its output). Built
    with -Werror, inert, the logits ONNX Runtime's (no token dropped), and
    --stats' lines safe for a terminal. The eager export too: the nodes its
    rewrite adds are named after a hostile node's."""
    m = onnx.load(os.path.join(ROOT, "tests", "models", "exports", export + ".onnx"))
    rename_all(m.graph, {"input_ids", "attention_mask", "logits"}, "e")
    model = os.path.join(OUT, "model_%s.onnx" % tag)
    with open(model, "wb") as f:
        f.write(m.SerializeToString().replace(PLACEHOLDER.encode(), BAD_UTF8))
    d = compile_build(tag, ["compile", model, "--mesh", "ep=2", "--shard", "experts=ep", "--shard",
                                  "input_ids=[ep,_]", "--capacity-factor", "2"], fail)
    if not d:
        return
    gold = os.path.join(ROOT, "tests", "golden", export)
    out = os.path.join(OUT, tag + "_logits.npy")
    r = run([os.path.join(d, "run.sh"), "--in", "input_ids=" + os.path.join(gold, "input_input_ids.npy"),
             "--in", "attention_mask=" + os.path.join(gold, "input_attention_mask.npy"), "--out", "logits=" + out,
             "--stats"], env=env, timeout=120, stdin=subprocess.DEVNULL)
    if r.returncode != 0:
        fail.append("%s: run exit %d: %r" % (tag, r.returncode, (r.stdout + r.stderr)[-400:]))
        return
    check_text(tag + " --stats", r.stdout, fail)
    stats = [line for line in r.stdout.split(b"\n") if line.startswith(b"moe ")]
    golden = np.load(os.path.join(gold, "output_logits.npy"))
    err = float(np.max(np.abs(np.load(out) - golden) - 1e-4 * np.abs(golden)))
    # Per layer: its dropped pairs, and the bytes its counts-based
    # all-to-alls moved (templates/runtime.c rt_moe_stats).
    dropped = [line for line in stats if b"dropped" in line]
    moved = [line for line in stats if b"all-to-alls moved" in line]
    ok = (err <= 1e-5 and len(dropped) == 2 and all(b"dropped 0 of 64" in line for line in dropped) and
          len(moved) == 2 and len(stats) == 4)
    print("%-9s %-5s %-6s %s: --shard experts=ep, hostile expert weights and nodes: max |out - golden| - "
          "1e-4|golden| = %.2e, %d --stats lines" % (tag, "ep=2", "c", "ok" if ok else "FAIL", err, len(stats)))
    if not ok:
        fail.append("%s: logits or --stats differ (%r)" % (tag, stats))


def run(cmd, **kw):
    return subprocess.run(cmd, capture_output=True, **kw)


def check_text(what, data, fail):
    """Terminal output: no C0/C1 control bytes but newline, valid UTF-8, no bidi."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        fail.append("%s: invalid UTF-8 (%s)" % (what, e))
        return
    bad = [c for c in text if (ord(c) < 0x20 and c not in "\n") or 0x7F <= ord(c) <= 0x9F
           or c in "\u202e\u2066"]
    if bad:
        fail.append("%s: prints raw control characters %r" % (what, sorted(set(bad))[:5]))


def main():
    cuda = "--no-cuda" not in sys.argv
    shutil.rmtree(OUT, ignore_errors=True)
    os.makedirs(OUT)
    src = os.path.join(ROOT, "tests", "models", "tiny_gpt.onnx")
    m = onnx.load(src)
    names = rename_model(m)
    data = m.SerializeToString()
    assert data.count(PLACEHOLDER.encode()) > 0
    data = data.replace(PLACEHOLDER.encode(), BAD_UTF8)
    model = os.path.join(OUT, "model.onnx")
    with open(model, "wb") as f:
        f.write(data)
    tokens, logits = names["tokens"].encode(), names["logits"].encode()
    for nm in (tokens, logits):
        nm_b = nm.replace(PLACEHOLDER.encode(), BAD_UTF8)
        assert b"=" not in nm_b
    tokens = tokens.replace(PLACEHOLDER.encode(), BAD_UTF8)
    logits = logits.replace(PLACEHOLDER.encode(), BAD_UTF8)
    w1 = names["l0_W1"].encode().replace(PLACEHOLDER.encode(), BAD_UTF8)
    wo = names["l0_Wo"].encode().replace(PLACEHOLDER.encode(), BAD_UTF8)
    golden_in = os.path.join(ROOT, "tests", "golden", "tiny_gpt", "input_tokens.npy")
    golden_out = np.load(os.path.join(ROOT, "tests", "golden", "tiny_gpt", "output_logits.npy"))
    fail = []
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")

    # Reports: inert on a terminal, valid JSON.
    for args in (["inspect", "--nodes"], ["plan", "--mesh", "tp=2"]):
        r = run([BIN.encode()] + [a.encode() for a in args] + [model.encode()])
        if r.returncode != 0:
            fail.append("%s: exit %d: %r" % (args[0], r.returncode, r.stderr[:300]))
        check_text(" ".join(args), r.stdout + r.stderr, fail)
    for args in (["inspect", "--nodes", "--json"], ["plan", "--mesh", "tp=2", "--json"]):
        r = run([BIN.encode()] + [a.encode() for a in args] + [model.encode()])
        try:
            doc = json.loads(r.stdout.decode("utf-8"))
            if args[0] == "inspect" and doc["nodes"][0]["name"] != hostile(0, "n").replace(PLACEHOLDER, "\ufffd" * 4):
                fail.append("inspect --json: node name not preserved: %r" % doc["nodes"][0]["name"][:80])
        except (UnicodeDecodeError, ValueError, KeyError) as e:
            fail.append("%s: not valid UTF-8 JSON: %s" % (" ".join(args), e))
    r = run([BIN.encode(), b"plan", b"--mesh", b"tp=2", b"--shard", b"nonexistent\x1b[2J=[_,tp]", model.encode()])
    check_text("plan error line", r.stderr, fail)

    cases = [("c_r1", "r=1", [], "c"),
             ("c_dp2", "dp=2", [b"--shard", tokens + b"=[dp,_]"], "c"),
             ("c_tp2", "tp=2", [b"--shard", w1 + b"=[_,tp]", b"--shard", wo + b"=[tp,_]"], "c")]
    if cuda:
        cases.append(("cuda_tp2", "tp=2", [b"--shard", w1 + b"=[_,tp]", b"--shard", wo + b"=[tp,_]"], "cuda"))
    for name, mesh, flags, target in cases:
        d = os.path.join(OUT, name)
        r = run([BIN.encode(), b"compile", model.encode(), b"--mesh", mesh.encode(), b"--target", target.encode()]
                + flags + [b"-o", d.encode()])
        if r.returncode != 0:
            fail.append("%s: compile exit %d: %r" % (name, r.returncode, r.stderr[:300]))
            continue
        for fn in os.listdir(d):
            if fn.endswith((".c", ".cu", ".h", ".cuh")):
                body = open(os.path.join(d, fn), "rb").read()
                if any(b > 0x7E or (b < 0x20 and b not in b"\n") for b in body):
                    fail.append("%s/%s: bytes outside printable ASCII" % (name, fn))
            if fn in ("Makefile", "run.sh", "o2s_runtime.h", "o2s_kernels.h", "o2s_kernels.cuh") and b"PWNED" in open(os.path.join(d, fn), "rb").read():
                fail.append("%s/%s: holds a model string" % (name, fn))
        if target == "cuda":
            if not shutil.which(os.environ.get("NVCC", "/usr/local/cuda/bin/nvcc")):
                print("%-9s skipped: no nvcc" % name)
                continue
            r = run(["make", "-s", "-C", d, "WARN=-Xcompiler -Wall,-Wextra,-Werror"])
            if r.returncode != 0 or b"warning" in (r.stdout + r.stderr).lower():
                fail.append("%s: nvcc build: %s" % (name, (r.stdout + r.stderr)[-600:].decode(errors="replace")))
            print("%-9s %-5s %-6s ok: built with nvcc, no warnings" % (name, mesh, target))
            continue
        r = run(["make", "-s", "-C", d, "WARN=-Wall -Wextra -Werror"])
        if r.returncode != 0:
            fail.append("%s: build: %s" % (name, (r.stdout + r.stderr)[:600].decode(errors="replace")))
            continue
        # The payloads call system(): a binary that links it ran model text as code.
        for k in range(int(mesh.split("=")[1])):
            syms = run(["nm", "-u", os.path.join(d, "rank%d" % k)]).stdout.decode()
            if any(w in syms.split() for w in ("system", "popen", "execl", "execvp")):
                fail.append("%s/rank%d: links system()" % (name, k))
        out = os.path.join(OUT, name + "_logits.npy")
        trace = os.path.join(OUT, name + "_trace.json")
        r = run([os.path.join(d, "run.sh").encode(), b"--in", tokens + b"=" + golden_in.encode(),
                 b"--out", logits + b"=" + out.encode(), b"--trace", trace.encode()], env=env, timeout=120,
                stdin=subprocess.DEVNULL)
        if r.returncode != 0:
            fail.append("%s: run exit %d: %r" % (name, r.returncode, (r.stdout + r.stderr)[-400:]))
            continue
        # The trace names the nodes by their (hostile) labels: still valid JSON.
        try:
            with open(trace) as f:
                nodes = [e for e in json.load(f)["traceEvents"] if e.get("cat") == "node"]
            if not nodes:
                fail.append("%s: the trace has no node spans" % name)
            for e in nodes[:40]:
                check_text(name + " trace", e["name"].encode(), fail)
        except ValueError as e:
            fail.append("%s: --trace wrote invalid JSON: %s" % (name, e))
        got = np.load(out)
        err = float(np.max(np.abs(got - golden_out) - 1e-4 * np.abs(golden_out)))
        status = "ok" if err <= 1e-5 else "FAIL"
        print("%-9s %-5s %-6s %s: max |out - golden| - 1e-4|golden| = %.2e" % (name, mesh, target, status, err))
        if err > 1e-5:
            fail.append("%s: output differs from ONNX Runtime" % name)
        # A run without --in: the error names the input, and no name is a format.
        r = run([os.path.join(d, "run.sh")], env=env, timeout=120, stdin=subprocess.DEVNULL)
        if r.returncode == 0 or b"missing --in" not in r.stderr:
            fail.append("%s: run without --in: exit %d, %r" % (name, r.returncode, r.stderr[-300:]))
        check_text(name + " runtime error", r.stderr.split(b"\n")[0], fail)
    train_case(m, names, tokens, golden_in, env, fail)
    decode_case(env, fail)
    moe_case(env, fail)
    moe_case(env, fail, "mixtral_moe_eager", "moe_eager_ep2")
    if os.path.exists(PWNED):
        fail.append("a payload ran: %s exists" % PWNED)
    for f in fail:
        print("FAIL", f)
    if fail:
        sys.exit(1)
    print("hostile names: %d builds inert and matching ONNX Runtime" % len(cases))


if __name__ == "__main__":
    main()
