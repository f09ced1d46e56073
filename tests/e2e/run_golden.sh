#!/usr/bin/env bash
# run_golden.sh [NAME-FILTER]: the end-to-end golden tests. For every case
# in cases.txt: compile, build the generated sources with -Werror, run all
# ranks under mpirun, compare every output with the ONNX Runtime golden
# (|out - golden| <= 1e-5 + 1e-4 |golden|). Prints one line per output.
set -u
cd "$(dirname "$0")/../.."
BIN=${BIN:-build/onnx2spmd}
PY=build/venv/bin/python
OUT=build/e2e
JOBS=${JOBS:-$(nproc)} # a case's rank programs build in parallel
filter=${1:-}
mkdir -p "$OUT"
fail=0 ncase=0
while read -r name model mesh flags; do
    case "$name" in ''|'#'*) continue;; esac
    [ -n "$filter" ] && case "$name" in *$filter*) ;; *) continue;; esac
    ncase=$((ncase + 1))
    dir=$OUT/$name
    rm -rf "$dir" # outputs are written into it, and compile -o never replaces user files
    # shellcheck disable=SC2086
    if ! "$BIN" compile "tests/models/$model.onnx" --mesh "$mesh" $flags -o "$dir" >/dev/null 2>"$OUT/$name.err"; then
        echo "FAIL $name: compile: $(cat "$OUT/$name.err")"; fail=1; continue
    fi
    if ! make -s -j"$JOBS" -C "$dir" WARN="-Wall -Wextra -Werror" >"$OUT/$name.build" 2>&1; then
        echo "FAIL $name: build:"; head -20 "$OUT/$name.build"; fail=1; continue
    fi
    gold=tests/golden/${model##*/} # exports/gpt2_ts -> tests/golden/gpt2_ts
    args=()
    for f in $gold/input_*.npy; do
        n=$(basename "$f" .npy); args+=(--in "${n#input_}=$f")
    done
    for f in $gold/output_*.npy; do
        n=$(basename "$f" .npy); args+=(--out "${n#output_}=$dir/${n}.npy")
    done
    if ! timeout 120 "$dir/run.sh" "${args[@]}" </dev/null >"$OUT/$name.log" 2>&1; then
        echo "FAIL $name: run:"; tail -5 "$OUT/$name.log"; fail=1; continue
    fi
    for f in $gold/output_*.npy; do
        n=$(basename "$f" .npy)
        if ! res=$("$PY" tests/e2e/compare.py "$f" "$dir/$n.npy"); then fail=1; fi
        printf '%-14s %-10s %-10s %s\n' "$name" "$model" "$mesh" "$res"
    done
done < tests/e2e/cases.txt
[ $fail -eq 0 ] && echo "e2e: all $ncase cases match the goldens"
exit $fail
