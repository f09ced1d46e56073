#!/usr/bin/env bash
# test_runtime_errors.sh: a built rank program meets bad launches and bad
# files with one clear error line and a non-zero exit on every rank, and
# never hangs (each run is under a timeout; 124 would mean a hang).
set -u
cd "$(dirname "$0")/../.."
BIN=${BIN:-build/onnx2spmd}
PY=build/venv/bin/python
D=build/e2e_errors
rm -rf "$D"
fail=0
err() { echo "FAIL: $*"; fail=1; }
"$BIN" compile tests/models/mlp.onnx --mesh tp=2 --shard 'W1=[_,tp]' -o "$D/out" >/dev/null || exit 1
make -s -C "$D/out" WARN="-Wall -Wextra -Werror" >/dev/null || exit 1
"$PY" - "$D" <<'PYEOF'
import sys, numpy as np
d = sys.argv[1]
np.save(d + "/short.npy", np.zeros((4, 64), np.float32))
np.save(d + "/ints.npy", np.zeros((8, 64), np.int64))
PYEOF
GOOD=tests/golden/mlp/input_x.npy
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OPENBLAS_NUM_THREADS=1

expect() { # description, expected substring, command...
    local what=$1 want=$2; shift 2
    out=$(timeout 60 "$@" </dev/null 2>&1); rc=$?
    [ $rc -ne 0 ] || err "$what: exit 0"
    [ $rc -ne 124 ] || err "$what: hung (timeout)"
    printf '%s\n' "$out" | grep -q -- "$want" || err "$what: no line mentioning '$want' in: $(printf '%s' "$out" | head -5)"
}
expect "wrong input shape" 'input "x" from build/e2e_errors/short.npy is float32 \[4, 64\]; the model needs float32 \[8, 64\]' \
    "$D/out/run.sh" --in x="$D/short.npy"
expect "wrong input dtype" 'is int64 \[8, 64\]; the model needs float32' "$D/out/run.sh" --in x="$D/ints.npy"
expect "missing input" 'missing --in x=FILE' "$D/out/run.sh"
expect "unknown input" '--in y: the model has no input of that name' "$D/out/run.sh" --in x=$GOOD --in y=$GOOD
expect "wrong rank count" 'this binary is rank 0 of 2' mpirun --oversubscribe -np 2 "$D/out/rank0" --in x=$GOOD
cp "$D/out/weights.rank1.bin" "$D/saved.bin"
rm "$D/out/weights.rank1.bin"
expect "missing weight file" 'weights.rank1.bin: No such file' "$D/out/run.sh" --in x=$GOOD
cp "$D/saved.bin" "$D/out/weights.rank1.bin"
printf '\x01' | dd of="$D/out/weights.rank1.bin" bs=1 seek=100 conv=notrunc 2>/dev/null
expect "corrupt weight file" 'checksum mismatch' "$D/out/run.sh" --in x=$GOOD
head -c 50 "$D/saved.bin" > "$D/out/weights.rank1.bin"
expect "truncated weight file" 'weights.rank1.bin' "$D/out/run.sh" --in x=$GOOD
[ $fail = 0 ] && echo "runtime errors: all reported, none hung"
exit $fail
