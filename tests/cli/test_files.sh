#!/usr/bin/env bash
# test_files.sh: hostile files, as a model or wherever a path is accepted.
# Models nested thousands of levels deep (subgraphs in graph attributes,
# in model-local functions, sequence types), made here rather than
# committed, and malformed protobuf; then a FIFO, a character device and a
# folder given as the model, as --shardings, as --dot and as an external
# data file. Each must exit 2 within seconds with one stderr line naming
# the culprit: no crash (139), no hang. Usage: test_files.sh BIN
set -u
BIN=${1:-build/onnx2spmd}
PY=build/venv/bin/python
M=tests/models/mlp.onnx
fail=0
err() { echo "FAIL: $*"; fail=1; }
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT

refused() { # label expected-substring command...
    local label=$1 want=$2; shift 2
    out=$(timeout 10 "$@" 2>&1 >/dev/null); rc=$?
    if [ $rc -eq 124 ]; then err "$label: still running after 10 s"; return; fi
    [ $rc -eq 2 ] || err "$label: exit $rc, expected 2"
    [ "$(printf '%s\n' "$out" | grep -c .)" -eq 1 ] || err "$label: not one line: $out"
    case "$out" in *"$want"*) ;; *) err "$label: '$out' does not say '$want'";; esac
}

# ---- deep nesting ---------------------------------------------------------
# Written as raw protobuf: the onnx package's own encoder refuses this depth.
# Each level is an If node whose then_branch holds the next graph.
"$PY" - "$T" <<'EOF' || err "cannot generate the deep models"
import sys
import onnx
from onnx import helper

def varint(n):
    out = bytearray()
    while True:
        b, n = n & 0x7F, n >> 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)

def field(num, payload):  # a length-delimited field
    return varint(num << 3 | 2) + varint(len(payload)) + payload

def nested_node(levels):  # the outermost If node of the chain
    g = helper.make_graph([helper.make_node("Identity", ["c"], ["y"])], "leaf", [], []).SerializeToString()
    for i in range(levels):
        attr = field(1, b"then_branch") + varint(20 << 3) + varint(onnx.AttributeProto.GRAPH) + field(6, g)
        node = (field(1, b"c") + field(2, b"y") + field(3, b"if%d" % (levels - 1 - i))
                + field(4, b"If") + field(5, attr))
        g = field(1, node) + field(2, b"g%d" % i)  # GraphProto{node, name}
    return node

shell = helper.make_model(helper.make_graph([], "unused", [], []),
                          opset_imports=[helper.make_opsetid("", 17)])
shell.ClearField("graph")
head = shell.SerializeToString()
out = sys.argv[1]
node = nested_node(3000)
open(out + "/deep_graph.onnx", "wb").write(head + field(7, field(1, node) + field(2, b"main")))
# The same chain in a model-local function: FunctionProto{name, domain, node}.
open(out + "/deep_function.onnx", "wb").write(
    head + field(25, field(1, b"f") + field(10, b"local") + field(7, node)))
# A graph input whose type is a sequence of a sequence of ... a tensor,
# 10,000 deep, built from the inside out as a list of length prefixes.
leaf = field(1, varint(1 << 3) + varint(1))  # TypeProto.tensor_type{elem_type: FLOAT}
prefixes, size = [], len(leaf)
for _ in range(10000):
    for num in (1, 4):  # Sequence.elem_type, then TypeProto.sequence_type
        p = varint(num << 3 | 2) + varint(size)
        prefixes.append(p)
        size += len(p)
t = b"".join(reversed(prefixes)) + leaf
graph = field(11, field(1, b"x") + field(2, t)) + field(2, b"types")
open(out + "/deep_type.onnx", "wb").write(head + field(7, graph))
# Malformed: a length past the end, and a varint that never ends.
open(out + "/bad_length.onnx", "wb").write(head + varint(7 << 3 | 2) + varint(1 << 40))
open(out + "/bad_varint.onnx", "wb").write(head + varint(7 << 3 | 2) + b"\xff" * 11)
EOF
for cmd in inspect plan compile; do
    extra=()
    [ $cmd = inspect ] || extra=(--mesh tp=2)
    [ $cmd = compile ] && extra+=(-o "$T/out")
    for m in deep_graph deep_function; do
        refused "$cmd $m" "subgraphs nested deeper than 64 levels" "$BIN" $cmd "$T/$m.onnx" "${extra[@]}"
    done
    refused "$cmd deep_type" 'types nested deeper than 64 levels (in the type of "x")' "$BIN" $cmd "$T/deep_type.onnx" "${extra[@]}"
    for m in bad_length bad_varint; do
        refused "$cmd $m" "$T/$m.onnx: not a valid ONNX model" "$BIN" $cmd "$T/$m.onnx" "${extra[@]}"
    done
done
[ -e "$T/out" ] && err "a refused compile left $T/out"

# ---- files that are not regular files -------------------------------------
mkfifo "$T/fifo" && mkdir "$T/dir" || err "cannot make the FIFO or the folder"
for p in "$T/fifo" /dev/zero "$T/dir"; do
    refused "model $p" "$p: not a regular file" "$BIN" inspect "$p"
    refused "plan model $p" "$p: not a regular file" "$BIN" plan "$p" --mesh tp=2
    refused "compile model $p" "$p: not a regular file" "$BIN" compile "$p" --mesh tp=2 -o "$T/out"
    refused "--shardings $p" "--shardings $p: not a regular file" "$BIN" plan $M --mesh tp=2 --shardings "$p"
    refused "--dot $p" "--dot $p: not a regular file" "$BIN" plan $M --mesh tp=2 --dot "$p"
done
[ -p "$T/fifo" ] && [ -d "$T/dir" ] && [ -c /dev/zero ] || err "a refused --dot replaced its target"

# External data: the model's weight file replaced by a FIFO, a folder, and
# a link to /dev/zero (which also resolves outside the model's folder).
mkdir "$T/ext"
cp tests/models/external/external_ok.onnx "$T/ext/"
for kind in fifo dir dev; do
    rm -rf "$T/ext/weights.bin"
    case $kind in
    fifo) mkfifo "$T/ext/weights.bin" ;;
    dir) mkdir "$T/ext/weights.bin" ;;
    dev) ln -s /dev/zero "$T/ext/weights.bin" ;;
    esac
    refused "external data $kind" "external data file \"weights.bin\"" "$BIN" inspect "$T/ext/external_ok.onnx"
    refused "compile external data $kind" "external data file \"weights.bin\"" \
        "$BIN" compile "$T/ext/external_ok.onnx" --mesh tp=2 -o "$T/out"
done

[ $fail -eq 0 ] && echo "files: all passed ($BIN)"
exit $fail
