#!/usr/bin/env bash
# Installs what onnx2spmd needs on a fresh Debian machine: system packages
# through apt-get, pinned Python packages into build/venv. Idempotent and
# silent when everything is already there; prints the exact command and
# fails when it cannot install (not root). With --xla also build/venv-xla:
# jax on CPU, the peer `make bench` compares plans against (kept out of
# build/venv, which the tests use, and out of `make test`). With --train
# also build/venv-train: onnxruntime-training (CPU), the oracle of the
# training goldens (tests/train/); it cannot share build/venv, since its
# `onnxruntime` package collides with the plain onnxruntime wheel there, and
# 1.19.2, its last release, wants an onnx of its time (1.16; numpy 1.26 and
# 2.0 both work with it).
set -euo pipefail

PKGS="protobuf-c-compiler libprotobuf-c-dev libcmocka-dev openmpi-bin libopenmpi-dev
      libopenblas-dev clang libclang-rt-14-dev pkg-config python3-venv
      libglpk-dev libltdl-dev zlib1g-dev libgmp-dev libsuitesparse-dev coinor-cbc coinor-libcbc3 time"
PY_PINS="onnx==1.22.0 onnxruntime==1.22.1 numpy==2.2.6"
VENV=build/venv

missing=""
for p in $PKGS; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
if [ -n "$missing" ]; then
    cmd="apt-get update && apt-get install -y --no-install-recommends$missing"
    if [ "$(id -u)" != 0 ]; then
        echo "deps: missing Debian packages:$missing" >&2
        echo "deps: run as root: $cmd" >&2
        exit 1
    fi
    echo "deps: installing$missing"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >/dev/null
    apt-get install -y -qq --no-install-recommends $missing >/dev/null
fi

stamp="$VENV/.pins"
if [ ! -x "$VENV/bin/python" ] || [ "$(cat "$stamp" 2>/dev/null)" != "$PY_PINS" ]; then
    echo "deps: creating $VENV with $PY_PINS"
    PYTHON=${PYTHON:-python3}
    "$PYTHON" -m venv "$VENV"
    "$VENV/bin/pip" install -q --disable-pip-version-check $PY_PINS
    # The pinned onnx must carry the multi-device sharding messages (1.18+)
    # and ship the backend node test data used by the conformance run.
    "$VENV/bin/python" - <<'PYEOF'
import os, sys, onnx
d = os.path.dirname(onnx.__file__)
proto = open(os.path.join(d, "onnx.proto")).read()
for msg in ("ShardingSpecProto", "NodeDeviceConfigurationProto"):
    if msg not in proto:
        sys.exit("deps: onnx %s lacks %s in onnx.proto" % (onnx.__version__, msg))
if not os.path.isdir(os.path.join(d, "backend", "test", "data", "node")):
    sys.exit("deps: onnx %s wheel has no backend node test data" % onnx.__version__)
PYEOF
    echo "$PY_PINS" > "$stamp"
fi

want_xla=0 want_train=0
for arg in "$@"; do
    case "$arg" in
        --xla) want_xla=1 ;;
        --train) want_train=1 ;;
        *) echo "deps: unknown option $arg (known: --xla, --train)" >&2; exit 2 ;;
    esac
done

if [ "$want_xla" = 1 ]; then
    XLA_PINS="jax==0.10.2 jaxlib==0.10.2 onnx==1.22.0 numpy==2.4.6"
    XVENV=build/venv-xla
    if [ ! -x "$XVENV/bin/python" ] || [ "$(cat "$XVENV/.pins" 2>/dev/null)" != "$XLA_PINS" ]; then
        echo "deps: creating $XVENV with $XLA_PINS"
        "${PYTHON:-python3}" -m venv "$XVENV"
        "$XVENV/bin/pip" install -q --disable-pip-version-check $XLA_PINS
        echo "$XLA_PINS" > "$XVENV/.pins"
    fi
fi

if [ "$want_train" = 1 ]; then
    # protobuf is pinned too: onnx 1.16 is checked with this one, and a newer
    # major may drop what its generated code uses.
    TRAIN_PINS="onnxruntime-training==1.19.2 onnx==1.16.2 numpy==1.26.4 protobuf==7.36.2"
    TVENV=build/venv-train
    if [ ! -x "$TVENV/bin/python" ] || [ "$(cat "$TVENV/.pins" 2>/dev/null)" != "$TRAIN_PINS" ]; then
        echo "deps: creating $TVENV with $TRAIN_PINS"
        "${PYTHON:-python3}" -m venv "$TVENV"
        "$TVENV/bin/pip" install -q --disable-pip-version-check $TRAIN_PINS
        # The oracle's own import (with its torch stub) is the check that
        # this set of versions works together.
        "$TVENV/bin/python" -c "import importlib.util, sys; \
s = importlib.util.spec_from_file_location('o', 'tests/train/ort_oracle.py'); \
s.loader.exec_module(importlib.util.module_from_spec(s))"
        echo "$TRAIN_PINS" > "$TVENV/.pins"
    fi
fi
