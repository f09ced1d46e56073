#!/usr/bin/env bash
# test_runtime_errors.sh: a built rank program meets bad launches, bad
# flags, bad files and failing peers with one clear error line and a
# non-zero exit on every rank, and never hangs (each run is under a
# timeout; 124 would mean a hang). Faults: a rank SIGKILLed or SIGSTOPped
# in the middle of the collectives must end the whole job within 30 s
# (--timeout 8).
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
expect "wrong -np" 'launched as rank 0 of 1' mpirun --oversubscribe -np 1 "$D/out/rank0" --in x=$GOOD

# Flags are checked before any MPI work.
expect "--iters not a number" '--iters abc: expected an integer from 1 to' "$D/out/run.sh" --in x=$GOOD --iters abc
expect "--iters overflow" '--iters 99999999999: expected an integer' "$D/out/run.sh" --in x=$GOOD --iters 99999999999
expect "--timeout negative" '--timeout -1: expected an integer from 0' "$D/out/run.sh" --in x=$GOOD --timeout -1
expect "unknown --out" '--out z: the model has no output of that name' "$D/out/run.sh" --in x=$GOOD --out z=$D/z.npy
expect "unwritable --out" '--out y=/nonexistent/y.npy: cannot write into /nonexistent' \
    "$D/out/run.sh" --in x=$GOOD --out y=/nonexistent/y.npy
expect "--out is a folder" "--out y=$D: is a folder" "$D/out/run.sh" --in x=$GOOD --out y=$D
expect "unwritable --trace" '--trace /nonexistent/t.json: cannot write into /nonexistent' \
    "$D/out/run.sh" --in x=$GOOD --trace /nonexistent/t.json
expect "--trace is a folder" "--trace $D: is a folder" "$D/out/run.sh" --in x=$GOOD --trace $D
expect "--comms unknown" '--comms eager: expected overlap, unprogressed or serial' \
    "$D/out/run.sh" --in x=$GOOD --comms eager
mkfifo "$D/fifo.npy"
expect "--in a FIFO" 'fifo.npy: not a regular file' "$D/out/run.sh" --in x="$D/fifo.npy"
expect "--in a device" '/dev/zero: not a regular file' "$D/out/run.sh" --in x=/dev/zero
expect "--in a folder" "$D: not a regular file" "$D/out/run.sh" --in x="$D"

# An output is renamed over its final name: a symlink there is replaced,
# never written through.
echo keep > "$D/victim"
ln -s "$PWD/$D/victim" "$D/y.npy"
timeout 60 "$D/out/run.sh" --in x=$GOOD --out y="$D/y.npy" </dev/null >/dev/null 2>&1 || err "run with --out over a symlink failed"
[ "$(cat "$D/victim")" = keep ] || err "--out wrote through a symlink"
[ -L "$D/y.npy" ] && err "--out left the symlink in place"

# Peers that die or stop mid-run: every rank exits within 30 s with a line.
fault() { # signal, expected substring, output folder, run flags...
    local sig=$1 want=$2 out=$3 t0 rc
    shift 3
    t0=$(date +%s)
    timeout 60 "$out/run.sh" "$@" --timeout 8 </dev/null >"$D/fault.log" 2>&1 &
    local job=$!
    for _ in $(seq 100); do pgrep -f "^$PWD/$out/rank1" >/dev/null && break; sleep 0.1; done
    sleep 1
    pkill "-$sig" -f "^$PWD/$out/rank1"
    wait $job; rc=$?
    local dt=$(( $(date +%s) - t0 ))
    sleep 1
    # A stopped rank is still "alive" to pgrep until mpirun reaps the job.
    pgrep -f "^$PWD/$out/rank0" >/dev/null && err "$out rank1 $sig: rank0 survived the job"
    [ $rc -ne 0 ] || err "$out rank1 $sig: job exited 0"
    [ $rc -ne 124 ] || err "$out rank1 $sig: job still running after 60 s"
    [ $dt -le 30 ] || err "$out rank1 $sig: job took $dt s to end"
    grep -q -- "$want" "$D/fault.log" || err "$out rank1 $sig: no line saying '$want' in: $(head -5 "$D/fault.log")"
    pkill -KILL -f "^$PWD/$out/rank" 2>/dev/null
    echo "fault: $out rank1 SIG$sig -> job ended in $dt s"
}
fault KILL 'rank 1 with PID' "$D/out" --in x=$GOOD --iters 1000000000
fault STOP 'waited 8 s for' "$D/out" --in x=$GOOD --iters 1000000000
pkill -CONT -f "^$PWD/$D/out/rank" 2>/dev/null
# A training program whose peer stops during its gradient all-reduces.
T=tests/models/train/mlp_mse
"$BIN" compile $T.onnx --train --mesh dp=2 --shard 'x=[dp,_]' --shard 'target=[dp,_]' -o "$D/train" >/dev/null &&
    make -s -C "$D/train" >/dev/null || err "the training program did not compile and build"
fault STOP 'waited 8 s for' "$D/train" --in x=$T.input_x.npy --in target=$T.input_target.npy --steps 1000000000 \
    --log-every 1000000000
pkill -CONT -f "^$PWD/$D/train/rank" 2>/dev/null
# A loss that stops being finite (a learning rate of 1e6 overflows it by
# step 3) stops every rank with the step and the value, not NaN to the end.
"$BIN" compile $T.onnx --train --lr 1e6 --mesh dp=2 --shard 'x=[dp,_]' --shard 'target=[dp,_]' -o "$D/diverge" >/dev/null &&
    make -s -C "$D/diverge" >/dev/null || err "the diverging training program did not compile and build"
expect "loss not finite" 'rank 0: error: step 3: the loss is inf, not finite: training stopped' \
    "$D/diverge/run.sh" --in x=$T.input_x.npy --in target=$T.input_target.npy --steps 50
out=$(timeout 60 "$D/diverge/run.sh" --in x=$T.input_x.npy --in target=$T.input_target.npy --steps 50 </dev/null 2>/dev/null)
printf '%s\n' "$out" | grep -q '^step 3 loss' && err "a step with a non-finite loss printed its loss: $out"
cp "$D/out/weights.rank1.bin" "$D/saved.bin"
rm "$D/out/weights.rank1.bin"
expect "missing weight file" 'weights.rank1.bin: cannot open: No such file' "$D/out/run.sh" --in x=$GOOD
cp "$D/saved.bin" "$D/out/weights.rank1.bin"
printf '\x01' | dd of="$D/out/weights.rank1.bin" bs=1 seek=4100 conv=notrunc 2>/dev/null
expect "corrupt weight file" 'checksum mismatch' "$D/out/run.sh" --in x=$GOOD
head -c 50 "$D/saved.bin" > "$D/out/weights.rank1.bin"
expect "truncated weight file" 'weights.rank1.bin' "$D/out/run.sh" --in x=$GOOD
[ $fail = 0 ] && echo "runtime errors: all reported, none hung"
exit $fail
