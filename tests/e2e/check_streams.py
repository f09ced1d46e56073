"""check_streams.py: proves, without a GPU, that the CUDA target's two
streams never touch the same memory unordered.

A CUDA rank program runs kernels on the compute stream (g_stream) and NCCL
collectives on the communication stream (g_comm); cudaEventRecord and
cudaStreamWaitEvent are the only edges between them. This script reads
forward() of each rank<k>.cu, replays it twice in a row (as the timed loop
does, with no host sync between calls) on a model of the two streams with
vector clocks, and reports every pair of operations on different streams
that touch overlapping arena bytes, at least one of them writing, with
neither ordered before the other. Arena buffers are the `#define B_x
((T *)(g_arena + OFF)) /* N bytes ...` lines, so two buffers that the
liveness plan placed on the same bytes count as the same memory.

What an operation touches: an NCCL call reads its send buffer and writes
its receive buffer; a compute statement (a k_* launch, a cuBLAS call, an
async copy or memset) is taken to write every arena buffer it names
(conservative: a kernel's inputs count as writes too). Weights (W_) and
inputs (I_) are never written after start-up and are not modelled.

Usage: check_streams.py RANK.cu...   (exit 1 on any race)
       check_streams.py --self-test DIR   (also checks that deleting one
       compute-side wait in DIR's rank0.cu is caught)
"""
import re
import sys

ARENA = re.compile(r"^#define (B_\w+) \(\(\w[\w ]*\*\)\(g_arena \+ (\d+)\)\) /\* (\d+) bytes")
RECORD = re.compile(r"cudaEventRecord\((\w+), (g_stream|g_comm)\)")
WAIT = re.compile(r"cudaStreamWaitEvent\((g_stream|g_comm), (\w+), 0\)")
CUDA_WAIT = re.compile(r"\brt_cuda_wait\((\w+), \d+\)")  # the compute stream waits (and a trace records it)
NCCL = re.compile(r"nccl(AllReduce|AllGather|ReduceScatter|Send|Recv)\(([^;]*)g_comm\)")
COMPUTE = re.compile(r"\b(k_\w+|cublas\w+|cudaMemcpyAsync|cudaMemcpy2DAsync|cudaMemsetAsync)\(")
BUF = re.compile(r"\bB_\w+\b")


def parse(text):
    ranges = {}
    for line in text.splitlines():
        m = ARENA.match(line)
        if m:
            ranges[m.group(1)] = (int(m.group(2)), int(m.group(2)) + int(m.group(3)))
    body = re.search(r"^static void forward\(void\)\n\{\n(.*?)^\}", text, re.S | re.M)
    if not body:
        raise ValueError("no forward() found")
    ops = []  # (kind, stream or event info, reads, writes, line)
    for line in body.group(1).splitlines():
        code = line.split("/*")[0]
        m = RECORD.search(code)
        if m:
            ops.append(("record", m.group(2), m.group(1), line.strip()))
            continue
        m = WAIT.search(code)
        if m:
            ops.append(("wait", m.group(1), m.group(2), line.strip()))
            continue
        m = CUDA_WAIT.search(code)
        if m:
            ops.append(("wait", "g_stream", m.group(1), line.strip()))
            continue
        m = NCCL.search(code)
        if m:
            bufs = BUF.findall(m.group(2))
            if m.group(1) == "Send":
                reads, writes = bufs, []
            elif m.group(1) == "Recv":
                reads, writes = [], bufs[:1]
            else:
                reads, writes = bufs[:1], bufs[1:2]
            ops.append(("op", "g_comm", (reads, writes), line.strip()))
            continue
        if COMPUTE.search(code) and "static const" not in code:
            bufs = BUF.findall(code)
            if bufs:
                ops.append(("op", "g_stream", ([], bufs), line.strip()))
    return ranges, ops


def races(ranges, ops, iterations=2):
    streams = {"g_stream": 0, "g_comm": 1}
    clock = {s: [0, 0] for s in streams}
    events = {}
    done = []  # (stream index, vector clock, reads, writes, line, iteration)
    found = []
    for it in range(iterations):
        for kind, stream, arg, line in ops:
            si = streams[stream]
            if kind == "record":
                events[arg] = list(clock[stream])
                continue
            if kind == "wait":
                ev = events.get(arg, [0, 0])
                clock[stream] = [max(a, b) for a, b in zip(clock[stream], ev)]
                continue
            clock[stream][si] += 1
            vc = list(clock[stream])
            reads, writes = arg
            for osi, ovc, oreads, owrites, oline, oit in done:
                if osi == si or ovc[osi] <= vc[osi]:
                    continue  # same stream (in order) or ordered before this op
                for a in writes + reads:
                    for b in owrites + (oreads if a in writes else []):
                        ra, rb = ranges.get(a), ranges.get(b)
                        if ra and rb and ra[0] < rb[1] and rb[0] < ra[1]:
                            found.append("%s (iteration %d) and %s (iteration %d) touch %s/%s unordered"
                                         % (oline, oit + 1, line, it + 1, b, a))
            done.append((si, vc, reads, writes, line, it))
    return found


def check(path, text=None):
    text = text if text is not None else open(path).read()
    ranges, ops = parse(text)
    return races(ranges, ops)


def main(argv):
    if argv and argv[0] == "--self-test":
        import os
        path = os.path.join(argv[1], "rank0.cu")
        text = open(path).read()
        lines = text.splitlines(True)
        start = next(i for i, l in enumerate(lines) if l.startswith("static void forward(void)"))
        waits = [i for i, l in enumerate(lines) if i > start and (CUDA_WAIT.search(l.split("/*")[0]) or
                                                                  "cudaStreamWaitEvent(g_stream," in l)]
        if not waits:
            print("self-test: %s has no compute-side wait to remove" % path)
            return 1
        broken = "".join(lines[:waits[0]] + lines[waits[0] + 1:])
        if not check(path, broken):
            print("self-test FAILED: removing %r went unnoticed" % lines[waits[0]].strip())
            return 1
        print("self-test: removing the first compute-side wait in %s is caught" % path)
        argv = argv[2:]
    bad = 0
    for path in argv:
        found = check(path)
        for f in found[:5]:
            print("RACE %s: %s" % (path, f))
        bad += bool(found)
    print("check_streams: %d rank programs, %d with unordered cross-stream access" % (len(argv), bad))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
