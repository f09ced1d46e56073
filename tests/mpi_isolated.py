"""mpi_isolated.py: run a generated run.sh (mpirun) in its own OpenMPI session folder.

The test drivers run several jobs at once. OpenMPI keeps its session files
under $TMPDIR/ompi.<host>.<uid>, shared by every mpirun of the user, and one
job's clean-up of that folder can fail another's start ("orte_session_dir
failed", seen once in 1,765 conformance runs and in 3 of 1,059 sharded per-op
runs). Each run here gets a short folder of its own under /tmp (OpenMPI puts
sockets there, and socket paths are limited in length).
"""
import os
import shutil
import subprocess
import tempfile


def run(args, env=None, **kw):
    tmp = tempfile.mkdtemp(prefix="o2s.", dir="/tmp")
    try:
        return subprocess.run(args, env=dict(env if env is not None else os.environ, TMPDIR=tmp), **kw)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
