#!/usr/bin/env bash
# test_out_dir.sh: `compile -o` never deletes or writes through anything
# that is not an earlier onnx2spmd output. Each refusal exits 2 with one
# line naming the path, before any work, and leaves everything as it was.
# Usage: test_out_dir.sh BIN
set -u
BIN=$(realpath "${1:-build/onnx2spmd}")
M=$(realpath tests/models/mlp.onnx)
fail=0
err() { echo "FAIL: $*"; fail=1; }
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
cd "$T" || exit 1
compile() { "$BIN" compile "$M" --mesh tp=2 --shard 'W1=[_,tp]' "$@"; }
refused() { # expected-substring path
    out=$(compile -o "$2" 2>&1 >/dev/null); rc=$?
    [ $rc -eq 2 ] || err "-o $2: exit $rc, expected 2"
    [ "$(printf '%s\n' "$out" | grep -c .)" -eq 1 ] || err "-o $2: not one line: $out"
    case "$out" in *"-o ${2%/}: "*"$1"*) ;; *) err "-o $2: '$out' does not say '$1'";; esac
}

mkdir user && echo precious > user/notes.txt
ln -s user link
refused "symbolic link" link
refused "symbolic link" link/
refused "not an onnx2spmd output" user
refused "not a folder" user/notes.txt
[ "$(cat user/notes.txt)" = precious ] && [ -L link ] || err "a refused -o changed user files"

# The model's own folder, even when it carries a marker.
mkdir model && cp "$M" model/ && touch model/.onnx2spmd-output
out=$("$BIN" compile model/mlp.onnx --mesh tp=2 -o model 2>&1 >/dev/null); rc=$?
[ $rc -eq 2 ] && case "$out" in *"folder holding the model"*) true;; *) false;; esac || err "model folder: $rc $out"
[ -f model/mlp.onnx ] || err "model folder: the model is gone"

# A new folder (trailing slash, missing parents), then replaced in place,
# also after `make` built the rank binaries in it.
compile -o a/b/out/ >/dev/null || err "new -o with trailing slash failed"
[ -f a/b/out/.onnx2spmd-output ] && [ -f a/b/out/rank0.c ] || err "no output or marker in a/b/out"
# The runtime and kernels stand once in the folder, in headers every rank
# file includes, listed in the marker and as the Makefile's dependencies.
[ -f a/b/out/o2s_runtime.h ] && [ -f a/b/out/o2s_kernels.h ] || err "no o2s_runtime.h / o2s_kernels.h in a/b/out"
grep -q '^#include "o2s_runtime.h"$' a/b/out/rank0.c && grep -q '^#include "o2s_kernels.h"$' a/b/out/rank1.c \
    || err "a rank file does not include the folder's headers"
grep -q '^files:.* o2s_runtime.h o2s_kernels.h ' a/b/out/.onnx2spmd-output || err "the marker does not list the headers"
grep -q '^rank%: rank%.c o2s_runtime.h o2s_kernels.h$' a/b/out/Makefile || err "the Makefile does not depend on the headers"
ls -a a/b | grep -q 'tmp' && err "a temporary folder was left beside the output"
make -s -C a/b/out >/dev/null 2>&1 || err "generated Makefile failed"
[ -x a/b/out/rank1 ] || err "make built no rank1"
compile -o a/b/out >/dev/null || err "replacing an earlier output failed"
[ -e a/b/out/rank1 ] && err "the replaced output kept a stale binary"
[ "$(ls -a a/b | wc -l)" -eq 3 ] || err "leftovers beside the output: $(ls -a a/b)"

# An earlier output holding a user's file (or folder) is not replaced.
echo mine > a/b/out/logits.npy
refused '"logits.npy", which compile did not write' a/b/out
[ "$(cat a/b/out/logits.npy)" = mine ] || err "a user's file in an output folder was touched"
rm a/b/out/logits.npy && mkdir a/b/out/sub
refused '"sub"' a/b/out
rmdir a/b/out/sub

# A file named like ours but a symlink is removed as a link, never followed.
echo keep > victim
rm a/b/out/rank0.c && ln -s "$T/victim" a/b/out/rank0.c
compile -o a/b/out >/dev/null || err "replacing an output with a symlinked file failed"
[ "$(cat victim)" = keep ] || err "compile wrote through a symlink in the old output"
[ -L a/b/out/rank0.c ] && err "the symlink survived the replacement"

# A marker that is a symlink does not count.
mkdir fake && ln -s "$T/a/b/out/.onnx2spmd-output" fake/.onnx2spmd-output && echo x > fake/data
refused "not an onnx2spmd output" fake
[ -f fake/data ] || err "fake output folder lost its file"

[ $fail = 0 ] && echo "test_out_dir: -o refuses 7 unsafe targets, replaces only earlier outputs"
exit $fail
