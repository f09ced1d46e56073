"""auto_bench.py: the --auto search against Megatron-LM's hand plan, and its speed.

Three tables, every number from this run:

1. Quality. tiny_gpt, a GPT-2-medium-shaped and a BERT-large-shaped graph on
   tp=2, 4, 8 and dp=2 x tp=4: the Megatron hand plan (batch over dp, Q/K/V
   and MLP-up column-split, output and MLP-down row-split, vocab-parallel
   embedding and head) beside --auto with only the batch annotated. The
   search gets at most the memory the hand plan's estimate needs per rank
   (so it cannot win by replicating weights; its programs, with their
   reshard buffers, must fit in that), and is judged on bytes sent per rank
   and on the cost model's step time (plan's estimate). The solver gets 30 s
   a solve; a plan stopped by that limit is marked with its gap.
2. Scale. --auto on the 32-layer Llama-7B-shaped graph over dp=8 x tp=8
   (64 ranks): wall time of `plan` (target: under 10 s on this 2-core
   machine), the plan's estimated step time and memory per rank; and the
   same search on the whole program (--auto-tie off) beside the one that
   solves the identical layers once, with the same optimum.
3. Solver. The same integer programs solved in process by GLPK and by
   COIN-OR CBC (--auto-solver glpk / cbc), solve time each, and whether
   they reach the same objective. CBC is the default when it loads.
"""
import json
import os
import re
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.path.join(ROOT, "build", "onnx2spmd")
PY = sys.executable
OUT = os.path.join(ROOT, "build", "bench_auto")


def plan_json(model, mesh, flags):
    t0 = time.time()
    p = subprocess.run([BIN, "plan", model, "--mesh", mesh, "--json"] + flags, capture_output=True, text=True)
    wall = time.time() - t0
    if p.returncode != 0:
        return None, wall, p.stderr.strip().splitlines()[-1] if p.stderr.strip() else "exit %d" % p.returncode
    m = re.search(r"solved by (?:GLPK|CBC) in ([0-9.]+) s", p.stderr)
    d = json.loads(p.stdout)
    d["_solve_s"] = float(m.group(1)) if m else None
    return d, wall, None


def make_models():
    os.makedirs(OUT, exist_ok=True)
    models = [("tiny_gpt", os.path.join(ROOT, "tests/models/tiny_gpt.onnx"),
               os.path.join(ROOT, "tests/partition/tiny_gpt_megatron.txt"))]
    for fam, layers in (("gpt2", 2), ("bert", 2)):
        d = os.path.join(OUT, fam)
        if not os.path.exists(os.path.join(d, fam + ".onnx")):
            subprocess.run([PY, os.path.join(ROOT, "bench/make_transformer.py"), fam, d, "--layers", str(layers),
                            "--batch", "8", "--seq", "512"], check=True, stdout=subprocess.DEVNULL)
        models.append(("%s-shaped (%d layers)" % ("GPT-2 medium" if fam == "gpt2" else "BERT-large", layers),
                       os.path.join(d, fam + ".onnx"), os.path.join(d, fam + "_megatron.txt")))
    return models


def fmt_time(s):
    return "%.3g ms" % (s * 1e3) if s >= 1e-3 else "%.3g us" % (s * 1e6)


def quality(models):
    print("\n--auto vs Megatron's hand plan (cost model: H100, NVLink; bytes sent per rank)")
    hdr = "%-30s %-10s %12s %12s %10s %10s %7s %9s %9s %7s" % (
        "model", "mesh", "hand bytes", "auto bytes", "hand step", "auto step", "ratio", "hand MiB", "auto MiB",
        "solve")
    print(hdr)
    print("-" * len(hdr))
    met = total = 0
    for name, model, hand in models:
        for mesh in ("dp=1,tp=2", "dp=1,tp=4", "dp=1,tp=8", "dp=2,tp=4"):
            h, _, herr = plan_json(model, mesh, ["--shardings", hand])
            if h is None:
                print("%-30s %-10s %s" % (name, mesh, "hand plan refused: " + herr.split("error: ")[-1][:80]))
                continue
            he = h["estimate"]
            a, _, aerr = plan_json(model, mesh, ["--auto", "--shard", "tokens=[dp,_]", "--auto-time-limit", "30",
                                                 "--mem-limit", str(he["program_bytes"])])
            if a is None:
                print("%-30s %-10s %s" % (name, mesh, "--auto failed: " + aerr[:90]))
                total += 1
                continue
            ae = a["estimate"]
            hb, ab = h["per_rank"]["communication_bytes"], a["per_rank"]["communication_bytes"]
            total += 1
            met += ab <= hb and ae["step_s"] <= he["step_s"] * (1 + 1e-9)
            gap = "" if a["auto"]["optimal"] else " (gap)"
            print("%-30s %-10s %12d %12d %10s %10s %7.2f %9.1f %9.1f %6.2fs%s" % (
                name, mesh, hb, ab, fmt_time(he["step_s"]), fmt_time(ae["step_s"]), ae["step_s"] / he["step_s"],
                he["program_bytes"] / 2**20, ae["program_bytes"] / 2**20, a["_solve_s"] or 0, gap))
    print("auto no worse than the hand plan in both bytes and step time: %d of %d" % (met, total))


def scale():
    d = os.path.join(OUT, "llama32")
    if not os.path.exists(os.path.join(d, "llama.onnx")):
        subprocess.run([PY, os.path.join(ROOT, "bench/make_transformer.py"), "llama", d, "--layers", "32",
                        "--batch", "16", "--seq", "128"], check=True, stdout=subprocess.DEVNULL)
    model = os.path.join(d, "llama.onnx")
    print("\n--auto on a 32-layer Llama-7B-shaped graph, dp=8 x tp=8 (64 ranks), batch 16 x 128")
    h, hwall, _ = plan_json(model, "dp=8,tp=8", ["--shardings", os.path.join(d, "llama_megatron.txt")])
    a, wall, err = plan_json(model, "dp=8,tp=8", ["--auto", "--shard", "tokens=[dp,_]"])
    if a is None:
        print("  --auto failed: " + err)
        return False, None
    ar, ae, he = a["auto"], a["estimate"], h["estimate"]
    print("  integer program: %d rows x %d columns, %d nonzeros, %s" % (
        ar["rows"], ar["columns"], ar["nonzeros"], "optimal" if ar["optimal"] else "time limit"))
    print("  %-28s %10s %12s %14s" % ("", "plan (s)", "est. step", "memory/rank"))
    print("  %-28s %10.2f %12s %11.2f GiB" % ("Megatron hand plan", hwall, fmt_time(he["step_s"]),
                                              he["memory_bytes"] / 2**30))
    print("  %-28s %10.2f %12s %11.2f GiB" % ("--auto (%s, solve %.2f s)" % (ar["solver"], a["_solve_s"]), wall,
                                              fmt_time(ae["step_s"]), ae["memory_bytes"] / 2**30))
    lay = ar.get("layers", {})
    print("  identical layers: %d of %d choices, solved once: %s (tied optimum %s, bound %s)" % (
        lay.get("count", 0), lay.get("choices", 0), lay.get("tied", "?"), fmt_time(lay.get("tied_s", 0)),
        fmt_time(lay.get("bound_s", 0))))
    w, wwall, werr = plan_json(model, "dp=8,tp=8", ["--auto", "--auto-tie", "off", "--shard", "tokens=[dp,_]"])
    if w is None:
        print("  --auto-tie off failed: " + werr)
    else:
        wr = w["auto"]
        same = abs(wr["fastest_s"] - ar["fastest_s"]) <= 1e-6 * wr["fastest_s"]
        print("  %-28s %10s %12s %14s %10s %9s" % ("", "plan (s)", "columns", "fastest plan", "solve (s)", "ratio"))
        print("  %-28s %10.2f %12d %14s %10.2f %9s" % ("whole program (--auto-tie off)", wwall, wr["columns"],
                                                       fmt_time(wr["fastest_s"]), w["_solve_s"] or 0, "1.00"))
        print("  %-28s %10.2f %12d %14s %10.2f %9.2f" % ("layers solved once", wall, ar["columns"],
                                                         fmt_time(ar["fastest_s"]), a["_solve_s"] or 0,
                                                         wall / wwall))
        print("  same optimum with and without tying: %s" % ("yes" if same else "NO"))
    ok = wall < 10
    print("  target (--auto under 10 s): %s" % ("met" if ok else "MISSED"))
    return ok, a["_solve_s"]


def solvers():
    print("\nsolver: the same integer programs in process, GLPK vs COIN-OR CBC (--auto-solver)")
    llama = os.path.join(OUT, "llama32", "llama.onnx")
    cases = [("llama32 dp=8,tp=8", llama, "dp=8,tp=8", []),
             ("gpt2-medium dp=2,tp=4", os.path.join(OUT, "gpt2", "gpt2.onnx"), "dp=2,tp=4", []),
             ("tiny_gpt dp=2,tp=2 300K", os.path.join(ROOT, "tests/models/tiny_gpt.onnx"), "dp=2,tp=2",
              ["--mem-limit", "300K"])]
    print("  %-26s %10s %10s  %s" % ("program", "GLPK (s)", "CBC (s)", "same objective"))
    for name, model, mesh, extra in cases:
        got = {}
        for solver in ("glpk", "cbc"):
            a, _, err = plan_json(model, mesh, ["--auto", "--shard", "tokens=[dp,_]", "--auto-solver", solver] + extra)
            got[solver] = a
        if not got["glpk"] or not got["cbc"]:
            print("  %-26s %10s %10s" % (name, "failed" if not got["glpk"] else "", "failed" if not got["cbc"] else ""))
            continue
        og, oc = got["glpk"]["auto"]["objective_s"], got["cbc"]["auto"]["objective_s"]
        print("  %-26s %10.2f %10.2f  %s" % (name, got["glpk"]["_solve_s"], got["cbc"]["_solve_s"],
                                              "yes" if abs(og - oc) <= 1e-9 * max(og, oc) else
                                              "no (%.6g vs %.6g)" % (og, oc)))


def main():
    if not os.access(BIN, os.X_OK):
        print("auto_bench: build/onnx2spmd is not built")
        return 2
    quality(make_models())
    ok, _ = scale()
    solvers()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
