#!/usr/bin/env python3
"""cuda_select.py: which CUDA rank programs cuda_build.sh gives to nvcc.

nvcc takes 6 to 12 s a rank file on a 2-core machine (host gcc at -O3,
cicc and ptxas over the same runtime kernels every time), and the golden
cases give 366 rank files: building them all was CI's longest step. Most
of those files say the same things with other numbers and names. This
picks a set that still puts every distinct statement that any of them
contains through nvcc at least once:

- a line's "form" is the line with its comments, string and number
  literals blanked and each arena, weight, input or output buffer name
  (B_x, W_x, I_x, O_x) replaced by the C type its #define gives it, so
  `k_add_f32(B_a, W_b, 4096)` in one case and `k_add_f32(B_c, W_d, 64)` in
  another are one form, but a call on a float buffer and the same call on
  a uint16_t one are two;
- files are taken greedily, the one adding the most new forms first
  (ties by path), until every form of every file is covered.

On the golden cases this is 30-odd of 366 files. Deterministic: the same
files give the same list. Usage: cuda_select.py RANK.cu... (prints the
chosen paths, one a line, in the order chosen).
"""
import re
import sys

DEFINE = re.compile(r"^#define ([BWIO]_\w+) \(\((\w[\w ]*?) \*\)")
BUFFER = re.compile(r"\b[BWIO]_\w+")
NUMBERED = re.compile(r"\b([A-Za-z_]\w*?)\d+\b")


_MEMO = {}  # a raw line -> its form, or None where it names a buffer (most lines recur)


def blank(line):
    """The line without comments, literals and number suffixes on names."""
    line = re.sub(r"/\*.*?\*/|//.*", "", line).strip()
    if line.startswith("*"):
        return ""
    line = re.sub(r'"(?:[^"\\]|\\.)*"', '""', line)
    line = re.sub(r"'(?:[^'\\]|\\.)*'", "''", line)
    line = re.sub(r"\b0[xX][0-9a-fA-F]+[uUlL]*\b", "0", line)
    return re.sub(r"\b\d+(\.\d*)?([eE][-+]?\d+)?[fFuUlL]*\b", "0", line)


def forms(path):
    lines = open(path, encoding="utf-8").read().splitlines()
    ctype = {}
    for line in lines:
        m = DEFINE.match(line)
        if m:
            ctype[m.group(1)] = m.group(2).replace(" ", "_")
    out = set()
    for raw in lines:
        form = _MEMO.get(raw, False)
        if form is False:
            line = blank(raw)
            form = None if BUFFER.search(line) else NUMBERED.sub(r"\1N", line)
            _MEMO[raw] = form
        if form is None:  # names buffers: their types are this file's
            line = BUFFER.sub(lambda m: "<%s>" % ctype.get(m.group(0), "buf"), blank(raw))
            form = NUMBERED.sub(r"\1N", line)  # t12, rank3, s0_...
        if form:
            out.add(form)
    return out


def select(paths):
    feats = {p: forms(p) for p in sorted(paths)}
    ids = {}
    bits = {}  # each file's forms as one big int, a bit a form
    for p, fs in feats.items():
        b = 0
        for f in sorted(fs):
            b |= 1 << ids.setdefault(f, len(ids))
        bits[p] = b
    want = (1 << len(ids)) - 1
    chosen, covered = [], 0
    while covered != want:
        # the most new forms; on a tie the first path in sorted order
        best = max(bits, key=lambda p: bin(bits[p] & ~covered).count("1"))
        chosen.append(best)
        covered |= bits[best]
    return chosen


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit("usage: cuda_select.py RANK.cu...")
    print("\n".join(select(sys.argv[1:])))
