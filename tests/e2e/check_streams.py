"""check_streams.py: proves, without a GPU, that the CUDA target's two
streams never touch the same memory unordered.

A CUDA rank program runs kernels on the compute stream (g_stream) and NCCL
collectives on the communication stream (g_comm); cudaEventRecord and
cudaStreamWaitEvent are the only edges between them. This script reads
forward() (a training program's train_step()) of each rank<k>.cu, replays it twice in a row (as the timed loop
does, with no host sync between calls) on a model of the two streams with
vector clocks, and reports every pair of operations on different streams
that touch overlapping arena bytes, at least one of them writing, with
neither ordered before the other. Arena buffers are the `#define B_x
((T *)(g_arena + OFF)) /* N bytes ...` lines, so two buffers that the
liveness plan placed on the same bytes count as the same memory.

What an operation touches: an NCCL call reads its send buffer and writes
its receive buffer; a k_* launch reads the buffers it takes as const
pointers and writes the others (its signature, from the folder's
o2s_kernels.cuh); any other compute statement (a cuBLAS call, an async
copy or memset, a kernel not in the header) is taken to write every
arena buffer it names. Weights (W_) and
inputs (I_) are never written after start-up and are not modelled.

A training program's step is train_step(): forward(), backward() and
optimizer_step() inlined, its microbatch loop (--accum) unrolled and its
`if (g_micro == ACCUM)` evaluated, so a collective started in backward and
waited for in optimizer_step is checked across the whole step.

A pipeline stage's forward() loops over microbatches and calls step(mb,
slot): the loops and ifs are unrolled with MICROBATCHES, step() is inlined,
and each slot index is evaluated, so send_B_x[0] and send_B_x[1] (and the
events ready_/sent_/landed_/read_ of each slot) are memory and events of
their own, and a received value R_x is the slot it was last pointed at.

Usage: check_streams.py RANK.cu...   (exit 1 on any race)
       check_streams.py --self-test DIR   (also checks that deleting one
       compute-side wait in DIR's rank0.cu is caught)
       check_streams.py --self-test-pipeline DIR   (DIR: two stages of two
       microbatches; deleting any one of the waits that order a slot is
       caught: the send's wait for its copy on rank 0, the compute's wait
       for a received slot and the receive's wait for the slot's last
       reader on rank 1)
"""
import os
import re
import sys

ARENA = re.compile(r"^#define (B_\w+) \(\(\w[\w ]*\*\)\(g_arena \+ (\d+)\)\) /\* (\d+) bytes")
NAME = r"[\w@]+"  # an identifier, or a slot array's element (send_B_x@1: send_B_x[1], unrolled)
RECORD = re.compile(r"cudaEventRecord\((%s), (g_stream|g_comm)\)" % NAME)
WAIT = re.compile(r"cudaStreamWaitEvent\((g_stream|g_comm), (%s), 0\)" % NAME)
CUDA_WAIT = re.compile(r"\brt_cuda_wait\((%s), \d+\)" % NAME)  # the compute stream waits (and a trace records it)
NCCL = re.compile(r"nccl(AllReduce|AllGather|ReduceScatter|Send|Recv)\(([^;]*)g_comm\)")
COMPUTE = re.compile(r"\b(k_\w+|cublas\w+|cudaMemcpyAsync|cudaMemcpy2DAsync|cudaMemsetAsync)\(")
BUF = re.compile(r"\b(?:B_\w+|(?:send|slot)_\w+@\d+)")
SLOT = re.compile(r"^static unsigned char \*((?:send|slot)_\w+)\[2\];")
INDEX = re.compile(r"\b(\w+)\[([^\[\]]+)\]")
POINT = re.compile(r"^(\w+) = \([\w ]+\*\)(%s);" % NAME)  # R_x = (float *)slot_R_x[slot]
LOOP = re.compile(r"^for \(int (\w+) = ([^;]+); \1 < ([^;]+); \1\+\+\)")
LOOP_LE = re.compile(r"^for \((\w+) = ([^;]+); \1 <= ([^;]+); \1\+\+\)")  # train_step's microbatches
ASSIGN = re.compile(r"^(g_micro) = ([^;]+);")
CALL = re.compile(r"^(forward|backward|optimizer_step)\(\);")
IF = re.compile(r"^if \((.*)\)")
LET = re.compile(r"^const int (\w+) = ([^;]+);")


def code_of(line):
    return line.split("/*")[0].strip()


def function_body(text, header):
    m = re.search(r"^%s\n\{\n(.*?)^\}" % re.escape(header), text, re.S | re.M)
    return m.group(1).splitlines() if m else None


def c_eval(expr, env):
    """An int expression of the loop variables (mb & 1, slot ^ 1,
    mb + 1 < MICROBATCHES), or None if it names anything else."""
    py = expr.replace("&&", " and ").replace("||", " or ")
    py = re.sub(r"!(?!=)", " not ", py)
    if any(w not in env for w in re.findall(r"[A-Za-z_]\w*", py) if w not in ("and", "or", "not")):
        return None
    return int(eval(py, {"__builtins__": {}}, dict(env)))


def block(lines, i):
    """The statement at lines[i] (after a for or if header): a braced
    block, whose lines are returned without its braces, or one line.
    Returns (body, index after it)."""
    if not code_of(lines[i - 1]).endswith("{"):
        return [lines[i]], i + 1
    depth, j = 1, i
    while j < len(lines):
        c = code_of(lines[j])
        depth += c.count("{") - c.count("}")
        if depth == 0:
            return lines[i:j], j + 1
        j += 1
    raise ValueError("unbalanced braces after %r" % lines[i - 1].strip())


FUNCTIONS = {}  # a training program's forward, backward, optimizer_step: inlined where train_step calls them


def unroll(lines, env, step, out):
    """Appends to out the statements of lines in the order they run, with
    env's values: loops and ifs over known values unrolled, step(mb, slot)
    inlined and every evaluable index written name@value."""
    i = 0
    while i < len(lines):
        line = lines[i]
        code = code_of(line)
        loop, cond, let = LOOP.match(code), IF.match(code), LET.match(code)
        lo = hi = None
        if loop:
            lo, hi = c_eval(loop.group(2), env), c_eval(loop.group(3), env)
        elif LOOP_LE.match(code):
            loop = LOOP_LE.match(code)
            lo, hi = c_eval(loop.group(2), env), c_eval(loop.group(3), env)
            hi = None if hi is None else hi + 1
        assign = ASSIGN.match(code)
        if assign and c_eval(assign.group(2), env) is not None:
            env = dict(env, **{assign.group(1): c_eval(assign.group(2), env)})
            i += 1
            continue
        call = CALL.match(code)
        if call and call.group(1) in FUNCTIONS:
            unroll(FUNCTIONS[call.group(1)], env, step, out)
            i += 1
            continue
        if loop and lo is not None and hi is not None:
            body, i = block(lines, i + 1)
            for v in range(lo, hi):
                unroll(body, dict(env, **{loop.group(1): v}), step, out)
            continue
        if cond and c_eval(cond.group(1), env) is not None:
            body, i = block(lines, i + 1)
            if c_eval(cond.group(1), env):
                unroll(body, env, step, out)
            continue
        if let and c_eval(let.group(2), env) is not None:
            env = dict(env, **{let.group(1): c_eval(let.group(2), env)})
            i += 1
            continue
        if step is not None and re.match(r"^step\(mb, slot\);", code):
            unroll(step, {k: env[k] for k in ("MICROBATCHES", "mb", "slot")}, None, out)
            i += 1
            continue

        def index(m):
            v = c_eval(m.group(2), env)
            return m.group(0) if v is None else "%s@%d" % (m.group(1), v)

        out.append(INDEX.sub(index, line))
        i += 1


def parse(text):
    ranges = {}
    top = 0
    for line in text.splitlines():
        m = ARENA.match(line)
        if m:
            ranges[m.group(1)] = (int(m.group(2)), int(m.group(2)) + int(m.group(3)))
            top = max(top, ranges[m.group(1)][1])
    for line in text.splitlines():  # each slot of a send or receive buffer: memory of its own
        m = SLOT.match(line)
        if m:
            for s in range(2):
                ranges["%s@%d" % (m.group(1), s)] = (top, top + 1)
                top += 1
    body = function_body(text, "static void forward(void)")
    if body is None:
        raise ValueError("no forward() found")
    mb = re.search(r"^#define MICROBATCHES (\d+)$", text, re.M)
    step = function_body(text, "static void step(int mb, int slot)")
    env = {"MICROBATCHES": int(mb.group(1)) if mb else 1}
    FUNCTIONS.clear()
    train = function_body(text, "static void train_step(void)")
    if train is not None:  # a training program: a step is forward, backward, optimizer_step
        for f in ("forward", "backward", "optimizer_step"):
            FUNCTIONS[f] = function_body(text, "static void %s(void)" % f)
        acc = re.search(r"^#define ACCUM (\d+)", text, re.M)
        env.update(ACCUM=int(acc.group(1)) if acc else 1, g_micro=1)
        body = train
    statements = []
    unroll(body, env, step, statements)
    ops = []  # (kind, stream or event info, reads, writes, line)
    points = {}  # R_x -> the slot it reads now
    for line in statements:
        code = code_of(line)
        m = POINT.match(code)
        if m:
            points[m.group(1)] = m.group(2)
            continue
        for name, slot in points.items():
            code = re.sub(r"\b%s\b" % name, slot, code)
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
                ops.append(("op", "g_stream", kernel_access(code, bufs), line.strip()))
    return ranges, ops


SIGNATURE = re.compile(r"static inline \w[\w ]*?\b(k_\w+)\(([^)]*)\)", re.S)
WRITES = {}  # k_ function -> the argument positions it may write (its non-const pointers)


def load_signatures(header):
    """The k_* functions of the folder's kernels header and, for each, which
    arguments are non-const pointers: the only ones it can write."""
    WRITES.clear()
    try:
        text = open(header).read()
    except OSError:
        return
    for m in SIGNATURE.finditer(text):
        params = [p.strip() for p in m.group(2).split(",")]
        WRITES[m.group(1)] = {i for i, p in enumerate(params) if "*" in p and not p.startswith("const")}


def kernel_access(code, bufs):
    """(reads, writes) of a compute statement: for a k_* call whose
    signature is known, a buffer passed where the kernel takes a const
    pointer is read, anywhere else written; for anything else (cuBLAS, an
    async copy, a kernel not in the header) every buffer counts as written."""
    m = re.search(r"\b(k_\w+)\((.*)\);", code)
    if not m or m.group(1) not in WRITES:
        return [], bufs
    args, depth, cur = [], 0, ""
    for ch in m.group(2):
        if ch == "," and depth == 0:
            args.append(cur)
            cur = ""
            continue
        depth += ch in "([" and 1 or ch in ")]" and -1 or 0
        cur += ch
    args.append(cur)
    reads, writes = [], []
    for i, a in enumerate(args):
        for b in BUF.findall(a):
            (writes if i in WRITES[m.group(1)] else reads).append(b)
    return reads, writes


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
    load_signatures(os.path.join(os.path.dirname(path) or ".", "o2s_kernels.cuh"))
    ranges, ops = parse(text)
    return races(ranges, ops)


def caught(path, text, pattern):
    """Deleting the first line of step() or forward() whose code matches
    pattern must make check() report a race. Returns an error or None."""
    lines = text.splitlines(True)
    start = next(i for i, l in enumerate(lines) if re.match(r"static void (step|forward)\(", l))
    hit = [i for i, l in enumerate(lines) if i > start and re.search(pattern, code_of(l))]
    if not hit:
        return "self-test: %s has no line matching %r to remove" % (path, pattern)
    if not check(path, "".join(lines[:hit[0]] + lines[hit[0] + 1:])):
        return "self-test FAILED: removing %r from %s went unnoticed" % (lines[hit[0]].strip(), path)
    print("self-test: removing %r from %s is caught" % (lines[hit[0]].strip(), path))
    return None


def main(argv):
    import os
    tests = []
    while argv and argv[0] in ("--self-test", "--self-test-pipeline"):
        d = argv[1]
        if argv[0] == "--self-test":
            tests.append((os.path.join(d, "rank0.cu"), r"\brt_cuda_wait\(|cudaStreamWaitEvent\(g_stream,"))
        else:
            tests += [(os.path.join(d, "rank0.cu"), r"cudaStreamWaitEvent\(g_comm, ready_"),
                      (os.path.join(d, "rank1.cu"), r"\brt_cuda_wait\(landed_"),
                      (os.path.join(d, "rank1.cu"), r"cudaStreamWaitEvent\(g_comm, read_\w+\[slot \^ 1\]")]
        argv = argv[2:]
    for path, pattern in tests:
        err = caught(path, open(path).read(), pattern)
        if err:
            print(err)
            return 1
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
