#!/usr/bin/env bash
# cuda_build.sh: compiles and links the CUDA output (--target cuda) of
# every golden case in cases.txt with nvcc, and requires no warnings. No
# GPU is needed to build; tests/gpu/run.sh runs them where one exists.
set -u
cd "$(dirname "$0")/../.."
BIN=${BIN:-build/onnx2spmd}
OUT=build/cuda_build
JOBS=${JOBS:-$(nproc)}
filter=${1:-}
if ! command -v "${NVCC:-/usr/local/cuda/bin/nvcc}" >/dev/null 2>&1; then
    echo "cuda_build: nvcc not found (set NVCC); skipped"; exit 0
fi
rm -rf "$OUT"
mkdir -p "$OUT"
fail=0 n=0
while read -r name model mesh flags; do
    case "$name" in ''|'#'*) continue;; esac
    [ -n "$filter" ] && case "$name" in *$filter*) ;; *) continue;; esac
    # shellcheck disable=SC2086
    if ! "$BIN" compile "tests/models/$model.onnx" --mesh "$mesh" $flags --target cuda -o "$OUT/$name" \
            >/dev/null 2>"$OUT/$name.err"; then
        echo "FAIL $name: compile: $(cat "$OUT/$name.err")"; fail=1; continue
    fi
    n=$((n + 1))
done < tests/e2e/cases.txt
# Build every case's ranks, JOBS files at a time.
ls -d "$OUT"/*/ | xargs -P "$JOBS" -I{} sh -c 'make -s -C {} >{}/build.log 2>&1 || echo "FAIL {}: build"' \
    | tee "$OUT/failures.txt"
[ -s "$OUT/failures.txt" ] && fail=1
for log in "$OUT"/*/build.log; do
    if grep -qi "warning" "$log"; then
        echo "FAIL $(dirname "$log"): nvcc warnings:"; grep -i warning "$log" | head -5; fail=1
    fi
done
[ $fail = 0 ] && echo "cuda_build: $n cases compiled and linked with nvcc, no warnings"
exit $fail
