#!/usr/bin/env bash
# cuda_build.sh: compiles and links the CUDA output (--target cuda) of
# every golden case in cases.txt with nvcc (three also with MPI=0), requires
# no warnings, and checks every rank's two-stream schedule for races
# (check_streams.py). No GPU is needed; tests/gpu/run.sh runs them.
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
    # A few also without MPI (make MPI=0: launch.sh, no mpi.h), as on a bare GPU machine.
    case "$name" in gpt_1|gpt_dp2_tp2|mlp_fsdp_tp_p1)
        # shellcheck disable=SC2086
        "$BIN" compile "tests/models/$model.onnx" --mesh "$mesh" $flags --target cuda -o "$OUT/${name}_nompi" \
            >/dev/null 2>&1 && echo "MPI=0" > "$OUT/${name}_nompi/.make_args" && n=$((n + 1));;
    esac
done < tests/e2e/cases.txt
# Build each case's first and last rank, JOBS cases at a time: the ranks
# between them run the same emitter paths on other offsets (the last one has
# any uneven remainder), and nvcc takes ~6 s a file, so building all 366
# was CI's longest step. CUDA_ALL_RANKS=1 builds every rank.
ls -d "$OUT"/*/ | CUDA_ALL_RANKS=${CUDA_ALL_RANKS:-0} xargs -P "$JOBS" -I{} sh -c '
    cd {} && set -- $(ls rank*.cu | sed "s/\.cu\$//" | sort -V)
    [ "$CUDA_ALL_RANKS" = 1 ] || set -- $(printf "%s\n" "$@" | sed -n "1p;\$p" | uniq)
    make -s $(cat .make_args 2>/dev/null) "$@" >build.log 2>&1 || echo "FAIL {}: build"' \
    | tee "$OUT/failures.txt"
[ -s "$OUT/failures.txt" ] && fail=1
for log in "$OUT"/*/build.log; do
    if grep -qi "warning" "$log"; then
        echo "FAIL $(dirname "$log"): nvcc warnings:"; grep -i warning "$log" | head -5; fail=1
    fi
done
# The two streams of every rank program: no memory touched by both unordered
# (and the checker itself must catch a removed wait).
python3 tests/e2e/check_streams.py --self-test "$OUT/gpt_dp2_tp2" "$OUT"/*/rank*.cu || fail=1
[ $fail = 0 ] && echo "cuda_build: $n cases compiled and linked with nvcc ($(ls "$OUT"/*/rank* | grep -vc '\.cu$') rank programs), no warnings"
exit $fail
