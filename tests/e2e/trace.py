#!/usr/bin/env python3
"""trace.py: --trace and --comms on built rank programs, end to end.

For tiny_gpt on dp=2 x tp=2 with FSDP-sharded weights (gathered with
prefetch), a pipeline (pp=2 x dp=2, two microbatches), one rank and tp=2
over the sequence (gathers unpacked at their waits), each
run with --trace under every --comms mode, checks that:
  - the numbers do not change: every run's logits match ONNX Runtime's golden;
  - the trace is valid Chrome trace-event JSON with one process per rank,
    named by its mesh coordinates, and a compute track per rank;
  - every forward pass of a rank has one span per rt_enter(), one copy span
    per rt_copy() (a reshard's pack, unpack or local slice) and one
    collective span per rt_started() or blocking call in its source (pipelines: per
    microbatch), node spans nest inside their pass, and node and copy spans
    (the compute track) never overlap;
  - a collective's span starts before it completes; under --comms serial
    every one completes in its wait, under overlap (FSDP prefetch) some
    complete between nodes (the progress tests moved them);
  - tools/trace_report.py and tools/trace_svg.py read it (numbers in range,
    an SVG with a band per rank);
  - a build with -DO2S_NO_TRACE refuses --trace with one line.
"""
import json
import os
import re
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(HERE, ".."))
import mpi_isolated  # noqa: E402

import numpy as np  # noqa: E402

BIN = os.environ.get("BIN", os.path.join(ROOT, "build", "onnx2spmd"))
OUT = os.path.join(ROOT, "build", "trace")
GOLD = os.path.join(ROOT, "tests", "golden", "tiny_gpt")
MODEL = os.path.join(ROOT, "tests", "models", "tiny_gpt.onnx")
ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", OPENBLAS_NUM_THREADS="1")
ITERS = 3

CASES = [
    ("fsdp_dp2_tp2", ["--mesh", "dp=2,tp=2", "--shardings", os.path.join(ROOT, "tests/partition/tiny_gpt_megatron.txt"),
                      "--shard-weights", "dp"], 4),
    ("pp2_dp2_mb2", ["--mesh", "pp=2,dp=2", "--microbatches", "2"], 4),
    ("one_rank", ["--mesh", "r=1"], 1),
    # the sequence split: gathers along dim 1, unpacked at their waits
    ("seq_tp2", ["--mesh", "tp=2", "--shard", "tokens=[_,tp]"], 2),
]


def check_trace(name, path, d, nranks, mode, fail, pipeline):
    try:
        with open(path) as f:
            t = json.load(f)
    except (OSError, ValueError) as e:
        fail.append("%s/%s: trace unreadable: %s" % (name, mode, e))
        return
    ev = t["traceEvents"]
    if t["otherData"]["ranks"] != nranks or t["otherData"]["comms"] != mode:
        fail.append("%s/%s: otherData %r" % (name, mode, t["otherData"]))
    procs = {e["pid"]: e["args"]["name"] for e in ev if e.get("ph") == "M" and e["name"] == "process_name"}
    if sorted(procs) != list(range(nranks)):
        fail.append("%s/%s: processes %r" % (name, mode, procs))
    during = 0
    for r in range(nranks):
        src = open(os.path.join(d, "rank%d.c" % r)).read()
        fwd = src[src.index("/* ---- one forward pass"):] if not pipeline else src[src.index("static void step("):]
        fwd = fwd[:fwd.index("\n}\n")]
        n_nodes = len(re.findall(r"\brt_enter\(\d+\);", fwd))
        n_comms = len(re.findall(r"\brt_started\(\d+, &req_r\d+\);", fwd)) + \
            len(re.findall(r"\brt_block_end\(\d+, t0\);", fwd))  # blocking calls (a reader next)
        n_copies = len(re.findall(r"\brt_copy\(RT_EV_[A-Z]+, \d+\);", fwd))
        if name == "seq_tp2" and n_copies == 0:
            fail.append("%s rank %d: no pack or unpack in the source" % (name, r))
        if name.startswith("fsdp") and (n_comms < 10 or n_nodes < 10):
            fail.append("%s rank %d: the source starts %d collectives over %d nodes" % (name, r, n_comms, n_nodes))
        mine = [e for e in ev if e.get("ph") == "X" and e["pid"] == r]
        steps = [e for e in mine if e["cat"] == "step"]
        if len(steps) != ITERS + 1:
            fail.append("%s/%s rank %d: %d passes, want %d" % (name, mode, r, len(steps), ITERS + 1))
            continue
        per = 2 if pipeline else 1  # microbatches
        for s in steps:
            it = s["args"]["iteration"]
            nodes = sorted((e for e in mine if e["cat"] == "node" and e["args"]["iteration"] == it),
                           key=lambda e: e["ts"])
            copies = sorted((e for e in mine if e["cat"] == "copy" and e["args"]["iteration"] == it),
                            key=lambda e: e["ts"])
            if len(copies) != per * n_copies:
                fail.append("%s/%s rank %d pass %d: %d copy spans, the source has %d x %d"
                            % (name, mode, r, it, len(copies), per, n_copies))
            lane0 = sorted(nodes + copies, key=lambda e: e["ts"])
            for a, b in zip(lane0, lane0[1:]):
                if a["ts"] + a["dur"] > b["ts"] + 1e-3:
                    fail.append("%s/%s rank %d: compute spans %s and %s overlap" % (name, mode, r, a["name"], b["name"]))
                    break
            comms = [e for e in mine if e["cat"] == "comm" and e["args"]["iteration"] == it and
                     not e["args"]["kind"] in ("send", "receive")]
            if len(nodes) != per * n_nodes:
                fail.append("%s/%s rank %d pass %d: %d node spans, the source has %d x %d"
                            % (name, mode, r, it, len(nodes), per, n_nodes))
            if len(comms) != per * n_comms:
                fail.append("%s/%s rank %d pass %d: %d collective spans, the source starts %d x %d"
                            % (name, mode, r, it, len(comms), per, n_comms))
            end = s["ts"] + s["dur"] + 1e-3
            for a, b in zip(nodes, nodes[1:]):
                if a["ts"] + a["dur"] > b["ts"] + 1e-3:
                    fail.append("%s/%s rank %d: node spans %s and %s overlap" % (name, mode, r, a["name"], b["name"]))
                    break
            if nodes and (nodes[0]["ts"] < s["ts"] - 1e-3 or nodes[-1]["ts"] + nodes[-1]["dur"] > end):
                fail.append("%s/%s rank %d pass %d: node spans outside the pass" % (name, mode, r, it))
            for c in comms:
                if c["dur"] < 0 or c["ts"] < s["ts"] - 1e-3 or c["tid"] < 1:
                    fail.append("%s/%s rank %d: bad collective span %r" % (name, mode, r, c))
                    break
                done = c["args"]["completed"]
                if mode == "serial" and done != "in its wait":
                    fail.append("%s/serial rank %d: %s completed %s" % (name, r, c["name"], done))
                during += done.startswith("during node ")
    if mode == "overlap" and name.startswith("fsdp") and during == 0:
        fail.append("%s/overlap: no collective completed between nodes (no progress)" % name)
    rep = subprocess.run([sys.executable, os.path.join(ROOT, "tools", "trace_report.py"), path, "--json"],
                         capture_output=True, text=True)
    if rep.returncode:
        fail.append("%s/%s: trace_report: %s" % (name, mode, rep.stderr[-300:]))
    else:
        s = json.loads(rep.stdout)
        if not (s["step_ms"] > 0 and 0 < s["compute_ms"] <= s["step_ms"] * 1.01 and s["ops"].get("MatMul", 0) > 0):
            fail.append("%s/%s: trace_report numbers %r" % (name, mode, {k: s[k] for k in ("step_ms", "compute_ms")}))
        if s["hidden"] is not None and not 0 <= s["hidden"] <= 1:
            fail.append("%s/%s: hidden %r" % (name, mode, s["hidden"]))
    svg = path[:-5] + ".svg"
    r = subprocess.run([sys.executable, os.path.join(ROOT, "tools", "trace_svg.py"), path, "-o", svg],
                       capture_output=True, text=True)
    if r.returncode:
        fail.append("%s/%s: trace_svg: %s" % (name, mode, r.stderr[-300:]))
    else:
        texts = [e.text or "" for e in ET.parse(svg).iter("{http://www.w3.org/2000/svg}text")]
        if sum(1 for x in texts if x.startswith("rank ")) != nranks:
            fail.append("%s/%s: the SVG has no band for every rank" % (name, mode))


def main():
    shutil.rmtree(OUT, ignore_errors=True)
    os.makedirs(OUT)
    fail = []
    tok = os.path.join(GOLD, "input_tokens.npy")
    golden = np.load(os.path.join(GOLD, "output_logits.npy"))
    for name, flags, nranks in CASES:
        d = os.path.join(OUT, name)
        r = subprocess.run([BIN, "compile", MODEL, "-o", d] + flags, capture_output=True, text=True)
        if r.returncode:
            fail.append("%s: compile: %s" % (name, r.stderr[-400:]))
            continue
        r = subprocess.run(["make", "-s", "-C", d, "WARN=-Wall -Wextra -Werror"], capture_output=True, text=True)
        if r.returncode:
            fail.append("%s: build: %s" % (name, (r.stdout + r.stderr)[-400:]))
            continue
        for mode in ("overlap", "unprogressed", "serial"):
            path = os.path.join(OUT, "%s_%s.json" % (name, mode))
            got = os.path.join(OUT, "%s_%s.npy" % (name, mode))
            r = mpi_isolated.run([os.path.join(d, "run.sh"), "--in", "tokens=" + tok, "--out", "logits=" + got,
                                  "--iters", str(ITERS), "--trace", path, "--comms", mode], env=ENV,
                                 capture_output=True, text=True, timeout=300)
            if r.returncode:
                fail.append("%s/%s: run: %s" % (name, mode, (r.stdout + r.stderr)[-400:]))
                continue
            err = float(np.max(np.abs(np.load(got) - golden)))
            if not np.allclose(np.load(got), golden, rtol=1e-4, atol=1e-5):
                fail.append("%s/%s: logits differ from ONNX Runtime by %.3g" % (name, mode, err))
            check_trace(name, path, d, nranks, mode, fail, "pp" in name)
            print("%-14s --comms %-12s ok: max abs err %.2e, trace %d bytes" % (name, mode, err, os.path.getsize(path)))
    # Compiled out: --trace is refused, not silently empty.
    d = os.path.join(OUT, "one_rank")
    r = subprocess.run(["make", "-s", "-C", d, "clean", "all", "CFLAGS=-O2 -std=c11 -DO2S_NO_TRACE",
                        "WARN=-Wall -Wextra -Werror"], capture_output=True, text=True)
    if r.returncode:
        fail.append("O2S_NO_TRACE build: %s" % (r.stdout + r.stderr)[-400:])
    else:
        r = mpi_isolated.run([os.path.join(d, "run.sh"), "--in", "tokens=" + tok, "--trace", os.path.join(OUT, "x.json")],
                             env=ENV, capture_output=True, text=True, timeout=120)
        if r.returncode == 0 or "built with -DO2S_NO_TRACE" not in r.stderr:
            fail.append("O2S_NO_TRACE build ran --trace: exit %d, %r" % (r.returncode, r.stderr[-300:]))
        if os.path.exists(os.path.join(OUT, "x.json")):
            fail.append("O2S_NO_TRACE build wrote a trace")
    for f in fail:
        print("FAIL", f)
    if fail:
        sys.exit(1)
    print("trace: %d programs traced under every --comms mode, numbers unchanged" % len(CASES))


if __name__ == "__main__":
    main()
