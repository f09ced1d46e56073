#!/usr/bin/env bash
# same_output.sh REF_BIN [NEW_BIN]: plans and compiles every case of
# tests/e2e/cases.txt (both targets) with two compiler binaries and requires
# byte-identical results: plan's text and every generated file (weights,
# plan.txt, Makefile, rank files). FILTER=text keeps the cases whose name
# holds it. For refactors that must not change the output: build the
# reference from the commit before (git worktree + make), then run this.
set -u
cd "$(dirname "$0")/.."
REF=${1:?usage: same_output.sh REF_BIN [NEW_BIN]}
NEW=${2:-build/onnx2spmd}
OUT=build/same_output
rm -rf "$OUT"; mkdir -p "$OUT"
fail=0 n=0
while read -r name model mesh flags; do
    case "$name" in ''|'#'*) continue;; esac
    [ -n "${FILTER:-}" ] && case "$name" in *$FILTER*) ;; *) continue;; esac
    for side in ref new; do
        bin=$REF; [ $side = new ] && bin=$NEW
        # shellcheck disable=SC2086
        "$bin" plan "tests/models/$model.onnx" --mesh "$mesh" $flags >"$OUT/$side.$name.plan" 2>&1
        echo "exit $?" >>"$OUT/$side.$name.plan"
    done
    n=$((n + 1))
    if ! cmp -s <(sed -E 's/[0-9.]+ s\b/T s/g' "$OUT/ref.$name.plan") <(sed -E 's/[0-9.]+ s\b/T s/g' "$OUT/new.$name.plan"); then
        echo "DIFFERS $name plan"; fail=1
    fi
    for target in c cuda; do
        for side in ref new; do
            bin=$REF; [ $side = new ] && bin=$NEW
            # shellcheck disable=SC2086
            # the same -o for both: the command line is written into the output
            "$bin" compile "tests/models/$model.onnx" --mesh "$mesh" $flags --target $target \
                -o "$OUT/out/$name.$target" >/dev/null 2>"$OUT/$side.$name.$target.err"
            echo "exit $?" >>"$OUT/$side.$name.$target.err"
            mkdir -p "$OUT/$side"; rm -rf "$OUT/$side/$name.$target"
            [ -d "$OUT/out/$name.$target" ] && mv "$OUT/out/$name.$target" "$OUT/$side/$name.$target"
        done
        n=$((n + 1))
        # stderr without its timings ("solved by CBC in 0.480 s")
        if ! cmp -s <(sed -E 's/[0-9.]+ s\b/T s/g' "$OUT/ref.$name.$target.err") \
                    <(sed -E 's/[0-9.]+ s\b/T s/g' "$OUT/new.$name.$target.err") \
            || ! diff -rq "$OUT/ref/$name.$target" "$OUT/new/$name.$target" >/dev/null 2>&1; then
            echo "DIFFERS $name --target $target"; diff -rq "$OUT/ref/$name.$target" "$OUT/new/$name.$target" | head -5
            fail=1
        fi
    done
done < tests/e2e/cases.txt
[ $fail -eq 0 ] && echo "same_output: $n plans and compiles byte-identical"
exit $fail
