#!/usr/bin/env bash
# run_ops_sharded.sh: every per-op model (tests/models/ops) compiled on one
# rank and on a 2-rank mesh with each input split along each dim it can be
# split on (and on 3 ranks with one input split unevenly), run under mpirun
# and compared with ONNX Runtime's outputs
# (tests/golden/ops). Whatever layout the plan picks, the numbers must not
# change. Prints one line per failing case and a count.
set -u
cd "$(dirname "$0")/../.."
BIN=${BIN:-build/onnx2spmd}
PY=build/venv/bin/python
# run_ops_sharded.sh [REGEX]: only the models whose case name matches REGEX;
# OPS_TAG=name keeps the results in build/ops_sharded_name (parallel runs).
FILTER=${1:-}
OUT=build/ops_sharded${OPS_TAG:+_$OPS_TAG}
rm -rf "$OUT"
mkdir -p "$OUT"
JOBS=${JOBS:-$(nproc)}
# The rank programs build at -O0, linked by gold where there is one: these
# cases check plans and numbers, and at -O3 -march=native (the generated
# Makefile's default, which run_golden.sh keeps) building was most of this
# script's time; -O0 takes 0.8 s a case against 1.2 s at -O1 and 3 s at
# -O3, and gold links in a third of ld's time. OPS_CFLAGS overrides.
export BUILD_CFLAGS="${OPS_CFLAGS:--O0 -std=c11$(command -v ld.gold >/dev/null && echo " -fuse-ld=gold")}"
# Case list: NAME|MODEL|MESH|FLAGS
FILTER="$FILTER" "$PY" - > "$OUT/cases.txt" <<'PYEOF'
import glob, os, re
import numpy as np
import onnx
for path in sorted(glob.glob("tests/models/ops/*.onnx")):
    case = os.path.basename(path)[:-5]
    if not re.search(os.environ["FILTER"], case):
        continue
    m = onnx.load(path)
    inits = {i.name for i in m.graph.initializer}
    print("%s_1|%s|r=1|" % (case, case))
    names = [i.name for i in m.graph.input if i.name not in inits] + [i.name for i in m.graph.initializer]
    shapes = {}
    for i in m.graph.input:
        shapes[i.name] = [d.dim_value for d in i.type.tensor_type.shape.dim]
    for i in m.graph.initializer:
        if i.data_type == onnx.TensorProto.FLOAT:
            shapes[i.name] = list(i.dims)
    uneven = None
    for nm in names:
        dims = shapes.get(nm)
        if not dims:
            continue
        for d, size in enumerate(dims):
            if size % 2 == 0 and size >= 2:
                spec = ",".join("s" if k == d else "_" for k in range(len(dims)))
                print("%s_%s%d|%s|s=2|--shard %s=[%s]" % (case, nm, d, case, nm, spec))
            if uneven is None and size >= 2 and size % 3:
                uneven = (nm, d, ",".join("s" if k == d else "_" for k in range(len(dims))))
    if uneven:  # one uneven split per model: blocks of ceil(n/3), the last padded or empty
        print("%s_%s%du|%s|s=3|--shard %s=[%s]" % (case, uneven[0], uneven[1], case, uneven[0], uneven[2]))
PYEOF
run_case() {
    IFS='|' read -r name model mesh flags <<<"$1"
    d=$OUT/$name
    rm -rf "$d" # holds the last run's outputs, which compile -o would refuse to replace
    # shellcheck disable=SC2086
    if ! out=$("$BIN" compile "tests/models/ops/$model.onnx" --mesh "$mesh" $flags -o "$d" 2>&1 >/dev/null); then
        case "$out" in *"cannot be partial"*) echo "skip $name: $out"; return;; esac
        echo "FAIL $name: compile: $out"; return
    fi
    make -s -C "$d" CFLAGS="$BUILD_CFLAGS" WARN="-Wall -Wextra -Werror" >"$d.build" 2>&1 || { echo "FAIL $name: build: $(head -3 "$d.build")"; return; }
    args=()
    for f in tests/golden/ops/$model/input_*.npy; do n=$(basename "$f" .npy); args+=(--in "${n#input_}=$f"); done
    for f in tests/golden/ops/$model/output_*.npy; do n=$(basename "$f" .npy); args+=(--out "${n#output_}=$d/$n.npy"); done
    # Each job its own OpenMPI session folder: jobs run in parallel, and one
    # mpirun's clean-up of a shared /tmp/ompi.* folder can fail another's start.
    # (Short, under /tmp: OpenMPI puts sockets there, and their paths are limited.)
    local tmp rc
    tmp=$(mktemp -d /tmp/o2s.XXXXXX)
    TMPDIR=$tmp timeout 60 "$d/run.sh" "${args[@]}" </dev/null >"$d.log" 2>&1; rc=$?
    rm -rf "$tmp"
    [ $rc -eq 0 ] || { echo "FAIL $name: run: $(grep -m1 error "$d.log")"; return; }
    # Compared after all cases have run, in one compare.py --batch.
    for f in tests/golden/ops/$model/output_*.npy; do
        echo "cmp $name $f $d/$(basename "$f")"
    done
    echo "ran $name"
}
export -f run_case
export OUT BIN
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
xargs -P "$JOBS" -d '\n' -I{} bash -c 'run_case "$@"' _ {} < "$OUT/cases.txt" > "$OUT/results.txt"
grep "^cmp " "$OUT/results.txt" | cut -d' ' -f2- > "$OUT/compare.txt"
"$PY" tests/e2e/compare.py --batch "$OUT/compare.txt" | grep -v "^[^ ]* ok " > "$OUT/mismatches.txt"
sed 's/^\([^ ]*\) /FAIL \1: /' "$OUT/mismatches.txt" >> "$OUT/results.txt"
grep -E "^FAIL" "$OUT/results.txt"
ran=$(grep -c "^ran" "$OUT/results.txt"); mism=$(cut -d' ' -f1 "$OUT/mismatches.txt" | sort -u | wc -l)
ok=$((ran - mism)); bad=$(grep "^FAIL" "$OUT/results.txt" | cut -d: -f1 | sort -u | wc -l); skip=$(grep -c "^skip" "$OUT/results.txt")
echo "ops sharded: $ok passed, $bad failed, $skip refused of $(wc -l < "$OUT/cases.txt") cases ($(grep -c "u|" "$OUT/cases.txt") split unevenly over 3 ranks)"
[ "$bad" = 0 ]
