#!/usr/bin/env bash
# test_cli.sh: the command line as users meet it. Every malformed model
# must exit 2 with exactly one stderr line that names the file; good models
# exit 0; --json parses; --help and --version behave. Usage: test_cli.sh BIN
set -u
BIN=${1:-build/onnx2spmd}
PY=build/venv/bin/python
fail=0
err() { echo "FAIL: $*"; fail=1; }

for m in tests/models/bad/*.onnx; do
    out=$("$BIN" inspect "$m" 2>&1 >/dev/null); rc=$?
    lines=$(printf '%s\n' "$out" | grep -c .)
    [ $rc -eq 2 ] || err "$m: exit $rc, expected 2"
    [ "$lines" -eq 1 ] || err "$m: $lines stderr lines, expected 1: $out"
    case "$out" in "onnx2spmd: error: $m: "*) ;; *) err "$m: line does not name the file: $out";; esac
done
for m in tests/models/*.onnx tests/models/ops/*.onnx tests/models/external/*.onnx; do
    "$BIN" inspect "$m" >/dev/null 2>&1 || err "$m: inspect failed"
    "$BIN" inspect --nodes --json "$m" | "$PY" -m json.tool >/dev/null || err "$m: --json does not parse"
done
"$BIN" inspect --dim batch=3 tests/models/bad/symbolic_dim.onnx | grep -q '\[3, 3\]' || err "--dim binding"
"$BIN" inspect tests/models/tiny_gpt.onnx | grep -q "parameters 134163" || err "tiny_gpt parameter count"
"$BIN" --help | grep -q "usage: onnx2spmd" || err "--help"
"$BIN" --version | grep -q "^onnx2spmd [0-9]" || err "--version"
"$BIN" inspect >/dev/null 2>&1; [ $? -eq 2 ] || err "missing MODEL must exit 2"
"$BIN" frobnicate x >/dev/null 2>&1; [ $? -eq 2 ] || err "unknown command must exit 2"
"$BIN" inspect --dim nonsense tests/models/mlp.onnx >/dev/null 2>&1; [ $? -eq 2 ] || err "bad --dim must exit 2"
"$BIN" inspect /nonexistent.onnx 2>&1 | grep -q "/nonexistent.onnx: cannot open" || err "missing file message"

[ $fail -eq 0 ] && echo "cli: all passed ($BIN)"
exit $fail
