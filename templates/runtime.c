/* ---- onnx2spmd runtime (templates/runtime.c) ------------------------------
 * Error handling, deadlines, tensor files (.npy and ONNX TensorProto .pb),
 * the weight file, command-line flags and timing. Every MPI call goes
 * through CHECK_MPI; any failure prints one line naming the rank, the call,
 * the ONNX node being run and the source line, then aborts the whole job
 * so that no peer is left blocked in a collective.
 *
 * Nothing waits forever: a collective is waited for by polling against a
 * deadline (--timeout S, default 300, 0 off), past which the rank names
 * what it waited for and aborts the job; the few blocking MPI calls
 * (start-up, communicator splits, barriers, shutdown) run under an alarm
 * that does the same. Files are read only if they are regular files, and
 * every size read from one is checked for overflow before it is used.
 */
#ifdef __CUDACC__
/* Each rank program uses some of these helpers; unused ones are fine. */
#pragma nv_diag_suppress 177
#endif
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#ifndef O2S_CUDA
#include <cblas.h>
#endif
#if defined(O2S_CUDA) && defined(O2S_NO_MPI)
/* Built without MPI (make MPI=0): launched by launch.sh, Slurm or any
 * launcher that sets the rank in the environment; see the launch section
 * of the CUDA runtime. */
#else
#define O2S_HAVE_MPI 1
/* The C API only: MPI's C++ bindings are deprecated and warn under nvcc. */
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>
#endif

static const char *rt_node = "(startup)"; /* ONNX node now running, for errors */
static void rt_abort_comms(void); /* CUDA: aborts NCCL communicators first */
static int rt_job_up;             /* launched: an error aborts the whole job */
static int rt_timeout_s = 300;    /* --timeout: seconds any wait may take; 0: none */

static inline void rt_die(const char *fmt, ...) __attribute__((noreturn, format(printf, 1, 2)));
static inline void rt_die(const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
#ifdef RT_ON_DIE
    RT_ON_DIE(msg); /* the reader fuzzer returns from here instead of exiting */
#endif
    /* Before the launch every rank sees the same bad flag: rank 0 says it. */
    if (rt_job_up || RANK == 0) {
        fprintf(stderr, "rank %d: error: %s\n", RANK, msg);
        fflush(stderr);
    }
    if (rt_job_up) {
        rt_abort_comms();
#ifdef O2S_HAVE_MPI
        MPI_Abort(MPI_COMM_WORLD, 1);
#endif
        exit(1); /* without MPI the launcher stops the other ranks */
    }
    exit(2);
}

/* ---- deadlines ---- */

static inline double rt_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* A blocking call that cannot be polled runs under an alarm: the handler
 * prints the message prepared here (write() is async-signal-safe) and
 * exits, and mpirun then takes the rest of the job down. */
static char rt_watch_msg[1024];
static size_t rt_watch_len;

static void rt_on_alarm(int sig)
{
    (void)sig;
    ssize_t w = write(2, rt_watch_msg, rt_watch_len);
    (void)w;
    _exit(3);
}

static inline void rt_watch(const char *what)
{
    if (!rt_timeout_s)
        return;
    int n = snprintf(rt_watch_msg, sizeof rt_watch_msg,
                     "rank %d: error: waited %d s for %s (node \"%s\"): a peer rank is stopped, dead or much "
                     "slower; aborting the job (--timeout)\n", RANK, rt_timeout_s, what, rt_node);
    rt_watch_len = n < 0 ? 0 : (size_t)n < sizeof rt_watch_msg ? (size_t)n : sizeof rt_watch_msg - 1;
    signal(SIGALRM, rt_on_alarm);
    alarm((unsigned)rt_timeout_s);
}

static inline void rt_unwatch(void)
{
    alarm(0);
}


#ifdef O2S_HAVE_MPI
static inline void rt_check_mpi(int rc, const char *call, const char *file, int line)
{
    if (rc == MPI_SUCCESS)
        return;
    char err[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(rc, err, &len);
    rt_die("%s failed in node \"%s\" at %s:%d: %s", call, rt_node, file, line, err);
}
#define CHECK_MPI(call) rt_check_mpi((call), #call, __FILE__, __LINE__)
/* A blocking MPI call under the --timeout alarm. */
#define CHECK_MPI_WATCHED(call, what) (rt_watch(what), CHECK_MPI(call), rt_unwatch())
#endif

/* ---- traces (--trace FILE) and progress ----
 * With --trace, each rank records spans on the monotonic clock: one per
 * node, one per collective from its start to its completion as observed,
 * one per wait (the time the rank sat blocked), one per forward pass.
 * After the run rank 0 gathers every rank's spans and writes one Chrome
 * trace-event JSON (Perfetto, chrome://tracing): a process per rank, a
 * compute track and communication tracks. Times count from a barrier
 * every rank leaves together. Without --trace a node costs a store and a
 * test of one flag.
 *
 * The generated program names its nodes and collectives in two tables
 * (rt_nodes[], rt_comms[]) and calls rt_enter(node) before each node,
 * rt_started(comm, request) after starting a collective and
 * rt_wait(request, comm) where it needs the result. */

typedef struct RtNodeInfo {
    const char *name, *op, *shape; /* label, op type, local shape of its first output */
} RtNodeInfo;

typedef struct RtCommInfo {
    const char *what;     /* "all-reduce of X (reshard 3)": what a wait names */
    const char *kind;     /* all-reduce, all-gather, ...; send, receive */
    const char *tensor;   /* the value it moves */
    const char *axes;     /* the mesh axes it runs over, or the peer */
    const char *overlaps; /* the nodes the schedule runs between its start and its wait */
    long long bytes;      /* sent per rank */
} RtCommInfo;

/* RT_EV_PACK / RT_EV_UNPACK: a collective's copies into its send buffer
 * and out of its receive buffer; RT_EV_LOCAL: a reshard step that moves no
 * data between ranks (a slice of this rank's block). All three are compute
 * on this rank, named by their rt_comms[] entry. */
enum { RT_EV_NODE, RT_EV_WAIT, RT_EV_COMM, RT_EV_STEP, RT_EV_PACK, RT_EV_UNPACK, RT_EV_LOCAL };

/* -DO2S_NO_TRACE compiles the recording out (what make bench compares the
 * default build against: --trace off should cost nothing measurable). */
#ifdef O2S_NO_TRACE
#define RT_TRACING 0
#else
#define RT_TRACING rt_tr.on
#endif

typedef struct RtEvent {
    double t0, t1; /* seconds on the monotonic clock; a collective not yet complete: t1 < 0 */
    int type, id;  /* id: index into rt_nodes[] or rt_comms[] */
    int iter;      /* forward pass, 0 the first */
    int at;        /* a collective: the node that ran when its completion was seen; -1: its wait */
} RtEvent;

#define RT_MAX_EVENTS (1 << 22) /* 4M spans, about 160 MiB; later ones are counted, not kept */

static struct {
    const RtNodeInfo *nodes;
    const RtCommInfo *comms;
    const char *path, *where; /* --trace FILE; this rank's mesh coordinates */
    int on, iter, node;       /* node: the open node span, -1 none */
    int copy, copy_type;      /* copy: the open copy span's rt_comms[] entry, -1 none */
    double origin, node_t0, copy_t0, step_t0;
    RtEvent *ev;
    size_t nev, cap, lost;
} rt_tr; /* node is -1 from rt_trace_init on */

/* --comms: overlap (the default: collectives start early and are tested
 * between nodes, so MPI moves them while compute runs), unprogressed
 * (start early, no tests: MPI progresses only inside its own calls) or
 * serial (each waited for as soon as it starts; what overlap hides). */
enum { RT_COMMS_OVERLAP, RT_COMMS_UNPROGRESSED, RT_COMMS_SERIAL };
static int rt_comms_mode;

static inline int rt_trace_add(int type, int id, double t0, double t1)
{
    if (rt_tr.nev == rt_tr.cap) {
        if (rt_tr.cap == RT_MAX_EVENTS) {
            rt_tr.lost++;
            return -1;
        }
        size_t cap = rt_tr.cap ? 2 * rt_tr.cap : 4096;
        RtEvent *e = (RtEvent *)realloc(rt_tr.ev, cap * sizeof *e);
        if (!e)
            rt_die("--trace: out of memory for %zu events", cap);
        rt_tr.ev = e;
        rt_tr.cap = cap;
    }
    RtEvent *e = &rt_tr.ev[rt_tr.nev];
    e->t0 = t0;
    e->t1 = t1;
    e->type = type;
    e->id = id;
    e->iter = rt_tr.iter;
    e->at = -1;
    return (int)rt_tr.nev++;
}

#if !defined(O2S_CUDA) /* the CUDA target's spans come from CUDA events: rt_cuda_* */
/* Ends the open node or copy span (at a node, a copy, a collective or a
 * wait). */
static inline void rt_trace_close(double now)
{
    if (rt_tr.node >= 0)
        rt_trace_add(RT_EV_NODE, rt_tr.node, rt_tr.node_t0, now);
    rt_tr.node = -1;
    if (rt_tr.copy >= 0)
        rt_trace_add(rt_tr.copy_type, rt_tr.copy, rt_tr.copy_t0, now);
    rt_tr.copy = -1;
}

/* Before a reshard's copies (RT_EV_PACK, RT_EV_UNPACK or RT_EV_LOCAL for
 * collective `comm`): with --trace, they get a span of their own instead
 * of running inside the node before them. */
static inline void rt_copy(int type, int comm)
{
    if (!RT_TRACING)
        return;
    double now = rt_now();
    rt_trace_close(now);
    rt_tr.copy = comm;
    rt_tr.copy_type = type;
    rt_tr.copy_t0 = now;
}

static inline void rt_step_begin(void)
{
    if (RT_TRACING)
        rt_tr.step_t0 = rt_now();
}

static inline void rt_step_end(void)
{
    if (!RT_TRACING)
        return;
    double now = rt_now();
    rt_trace_close(now);
    rt_trace_add(RT_EV_STEP, 0, rt_tr.step_t0, now);
    rt_tr.iter++;
}
#endif

#if !defined(O2S_CUDA)
/* Collectives started and not yet waited for, in start order: rt_nfly of
 * them, rt_nlive of those not yet seen complete. rt_nfly follows the
 * schedule alone (whatever MPI has finished), so kernels that split their
 * work around tests when it is non-zero split it the same way every run. */
static struct rt_flying {
    MPI_Request *req;
    int ev;   /* its span, -1 untraced */
    int done; /* seen complete by a test (*req is MPI_REQUEST_NULL then) */
} *rt_fly;
static int rt_nfly, rt_nlive, rt_fly_cap; /* the list grows by doubling, in the first pass */

/* Tests every collective in flight once: MPI's progress engine moves
 * them along, and a completed one's span ends here (during node `at`). */
static inline void rt_progress(int at, double now)
{
    for (int i = 0; i < rt_nfly; i++) {
        if (rt_fly[i].done)
            continue;
        int done = 0;
        CHECK_MPI(MPI_Test(rt_fly[i].req, &done, MPI_STATUS_IGNORE));
        if (!done)
            continue;
        rt_fly[i].done = 1;
        rt_nlive--;
        if (rt_fly[i].ev >= 0) {
            rt_tr.ev[rt_fly[i].ev].t1 = now;
            rt_tr.ev[rt_fly[i].ev].at = at;
        }
    }
}

/* Between blocks of a long kernel: with collectives in flight, tests
 * them, so a transfer moves on while a GEMM or an activation runs (MPI
 * progresses a non-blocking collective only inside MPI calls). */
static inline void rt_poll(void)
{
    if (rt_nlive && rt_comms_mode == RT_COMMS_OVERLAP)
        rt_progress(RT_TRACING ? rt_tr.node : -1, RT_TRACING ? rt_now() : 0);
}

static inline void rt_trace_enter(int node)
{
    double now = rt_now();
    int last = rt_tr.node;
    rt_trace_close(now);
    if (rt_nlive && rt_comms_mode == RT_COMMS_OVERLAP)
        rt_progress(last, now);
    rt_tr.node = node;
    rt_tr.node_t0 = rt_now();
}

/* Before each node: names it for errors, tests the collectives in
 * flight, and with --trace opens its span. */
static inline void rt_enter(int node)
{
    rt_node = rt_tr.nodes[node].name;
    if (RT_TRACING)
        rt_trace_enter(node);
    else if (rt_nlive && rt_comms_mode == RT_COMMS_OVERLAP)
        rt_progress(-1, 0);
}

/* Drops a waited-for collective from the in-flight list, ending its span
 * at t1 if no test saw it complete first. */
static inline void rt_landed(MPI_Request *req, double t1)
{
    for (int i = 0; i < rt_nfly; i++)
        if (rt_fly[i].req == req) {
            if (!rt_fly[i].done) {
                rt_nlive--;
                if (rt_fly[i].ev >= 0)
                    rt_tr.ev[rt_fly[i].ev].t1 = t1;
            }
            memmove(&rt_fly[i], &rt_fly[i + 1], sizeof rt_fly[0] * (size_t)(rt_nfly - i - 1));
            rt_nfly--;
            return;
        }
}

/* Waits for a non-blocking collective, polling against the deadline; past
 * it, names what it waited for and aborts the job. (The CUDA target polls
 * its streams instead: rt_cuda_sync.) */
static inline void rt_wait(MPI_Request *req, int comm)
{
    if (*req == MPI_REQUEST_NULL) {
        rt_landed(req, 0); /* seen complete between nodes, or never started (a slot's first use) */
        return;
    }
    double t0 = RT_TRACING ? rt_now() : 0;
    if (RT_TRACING)
        rt_trace_close(t0);
    if (!rt_timeout_s) {
        CHECK_MPI(MPI_Wait(req, MPI_STATUS_IGNORE));
    } else {
        double deadline = rt_now() + rt_timeout_s;
        for (unsigned spin = 1;; spin++) {
            int done = 0;
            CHECK_MPI(MPI_Test(req, &done, MPI_STATUS_IGNORE));
            if (done)
                break;
            if (spin > 16)
                sched_yield(); /* ranks may share cores: let a computing one run */
            if (spin % 64 == 0 && rt_now() > deadline)
                rt_die("waited %d s for %s (node \"%s\"): a peer rank is stopped, dead or much slower; aborting the "
                       "job (--timeout)", rt_timeout_s, rt_tr.comms[comm].what, rt_node);
        }
    }
    double t1 = RT_TRACING ? rt_now() : 0;
    rt_landed(req, t1);
    if (RT_TRACING)
        rt_trace_add(RT_EV_WAIT, comm, t0, t1);
}

/* Around a collective called blocking (its reader is next: nothing to
 * overlap): traced as in flight and waited for over the whole call. */
static inline double rt_block_begin(void)
{
    if (!RT_TRACING)
        return 0;
    double t0 = rt_now();
    rt_trace_close(t0);
    return t0;
}

static inline void rt_block_end(int comm, double t0)
{
    if (!RT_TRACING)
        return;
    double t1 = rt_now();
    rt_trace_add(RT_EV_COMM, comm, t0, t1);
    rt_trace_add(RT_EV_WAIT, comm, t0, t1);
}

/* After a collective's start: it is in flight (and, with --comms serial,
 * waited for at once). */
static inline void rt_started(int comm, MPI_Request *req)
{
    int ev = -1;
    if (RT_TRACING) {
        double now = rt_now();
        rt_trace_close(now);
        ev = rt_trace_add(RT_EV_COMM, comm, now, -1);
    }
    if (rt_nfly == rt_fly_cap) {
        rt_fly_cap = rt_fly_cap ? 2 * rt_fly_cap : 16;
        rt_fly = realloc(rt_fly, sizeof rt_fly[0] * (size_t)rt_fly_cap);
        if (!rt_fly)
            rt_die("out of memory for %d collectives in flight", rt_fly_cap);
    }
    rt_fly[rt_nfly].req = req;
    rt_fly[rt_nfly].ev = ev;
    rt_fly[rt_nfly++].done = 0;
    rt_nlive++;
    if (rt_comms_mode == RT_COMMS_SERIAL)
        rt_wait(req, comm);
}
#endif

/* A string as a JSON string: quotes, backslashes and control bytes
 * escaped. The tables hold the compiler's labels, which are valid UTF-8
 * with every unsafe code point already spelled out as \xNN, so the other
 * bytes pass as they are. */
static inline void rt_json_str(FILE *f, const char *s)
{
    fputc('"', f);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            fprintf(f, "\\%c", c);
        else if (c < 0x20 || c == 0x7f)
            fprintf(f, "\\u%04x", c);
        else
            fputc(c, f);
    }
    fputc('"', f);
}

#define RT_TRACE_LANES 16

/* This rank's events as trace-event JSON objects, each followed by ",\n". */
static inline void rt_trace_format(FILE *f)
{
    fprintf(f, "{\"name\": \"process_name\", \"ph\": \"M\", \"pid\": %d, \"args\": {\"name\": ", RANK);
    char name[256];
    snprintf(name, sizeof name, "rank %d (%s)", RANK, rt_tr.where);
    rt_json_str(f, name);
    fprintf(f, "}},\n{\"name\": \"process_sort_index\", \"ph\": \"M\", \"pid\": %d, \"args\": {\"sort_index\": %d}},\n"
               "{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": %d, \"tid\": 0, \"args\": {\"name\": \"compute\"}},\n",
            RANK, RANK, RANK);
    /* Collectives may overlap one another: each takes the first
     * communication lane free at its start. */
    double lane_end[RT_TRACE_LANES];
    int nlanes = 0;
    for (size_t i = 0; i < rt_tr.nev; i++) {
        const RtEvent *e = &rt_tr.ev[i];
        double ts = (e->t0 - rt_tr.origin) * 1e6, dur = (e->t1 - e->t0) * 1e6;
        if (e->t1 < e->t0)
            continue; /* a collective the run ended before it completed */
        if (e->type == RT_EV_STEP) {
            fprintf(f, "{\"name\": \"forward\", \"cat\": \"step\", \"ph\": \"X\", \"pid\": %d, \"tid\": 0, "
                       "\"ts\": %.3f, \"dur\": %.3f, \"args\": {\"iteration\": %d}},\n", RANK, ts, dur, e->iter);
        } else if (e->type == RT_EV_NODE) {
            const RtNodeInfo *n = &rt_tr.nodes[e->id];
            fprintf(f, "{\"name\": ");
            rt_json_str(f, n->name);
            fprintf(f, ", \"cat\": \"node\", \"ph\": \"X\", \"pid\": %d, \"tid\": 0, \"ts\": %.3f, \"dur\": %.3f, "
                       "\"args\": {\"op\": ", RANK, ts, dur);
            rt_json_str(f, n->op);
            fprintf(f, ", \"shape\": ");
            rt_json_str(f, n->shape);
            fprintf(f, ", \"iteration\": %d}},\n", e->iter);
        } else if (e->type == RT_EV_PACK || e->type == RT_EV_UNPACK || e->type == RT_EV_LOCAL) {
            const RtCommInfo *c = &rt_tr.comms[e->id];
            const char *kind = e->type == RT_EV_PACK ? "pack" : e->type == RT_EV_UNPACK ? "unpack" : c->kind;
            char what[512];
            snprintf(what, sizeof what, "%s%s%s", e->type == RT_EV_LOCAL ? "" : kind,
                     e->type == RT_EV_LOCAL ? "" : ": ", c->what);
            fprintf(f, "{\"name\": ");
            rt_json_str(f, what);
            fprintf(f, ", \"cat\": \"copy\", \"ph\": \"X\", \"pid\": %d, \"tid\": 0, \"ts\": %.3f, \"dur\": %.3f, "
                       "\"args\": {\"kind\": ", RANK, ts, dur);
            rt_json_str(f, kind);
            fprintf(f, ", \"tensor\": ");
            rt_json_str(f, c->tensor);
            fprintf(f, ", \"comm\": %d, \"iteration\": %d}},\n", e->id, e->iter);
        } else {
            const RtCommInfo *c = &rt_tr.comms[e->id];
            int tid = 0;
            if (e->type == RT_EV_COMM) {
                int l = 0;
                while (l < nlanes && lane_end[l] > e->t0)
                    l++;
                if (l == RT_TRACE_LANES)
                    l = RT_TRACE_LANES - 1;
                if (l == nlanes) {
                    nlanes++;
                    fprintf(f, "{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": %d, \"tid\": %d, \"args\": "
                               "{\"name\": \"communication%s\"}},\n", RANK, 1 + l, l ? " (overlapping)" : "");
                }
                lane_end[l] = e->t1;
                tid = 1 + l;
            }
            char what[512];
            snprintf(what, sizeof what, "%s%s", e->type == RT_EV_WAIT ? "wait: " : "", c->what);
            fprintf(f, "{\"name\": ");
            rt_json_str(f, what);
            fprintf(f, ", \"cat\": \"%s\", \"ph\": \"X\", \"pid\": %d, \"tid\": %d, \"ts\": %.3f, \"dur\": %.3f, "
                       "\"args\": {\"kind\": ", e->type == RT_EV_WAIT ? "wait" : "comm", RANK, tid, ts, dur);
            rt_json_str(f, c->kind);
            fprintf(f, ", \"tensor\": ");
            rt_json_str(f, c->tensor);
            fprintf(f, ", \"axes\": ");
            rt_json_str(f, c->axes);
            fprintf(f, ", \"bytes\": %lld, \"comm\": %d, ", c->bytes, e->id);
            if (e->type == RT_EV_COMM) {
                fprintf(f, "\"overlaps\": ");
                rt_json_str(f, c->overlaps);
                fprintf(f, ", \"completed\": ");
                if (e->at >= 0) {
                    char during[512];
                    snprintf(during, sizeof during, "during node %s", rt_tr.nodes[e->at].name);
                    rt_json_str(f, during);
                } else {
                    rt_json_str(f, "in its wait");
                }
                fprintf(f, ", ");
            }
            fprintf(f, "\"iteration\": %d}},\n", e->iter);
        }
    }
    if (rt_tr.lost)
        fprintf(f, "{\"name\": \"trace full: %zu later events dropped\", \"ph\": \"i\", \"s\": \"p\", \"pid\": %d, "
                   "\"tid\": 0, \"ts\": %.3f},\n", rt_tr.lost, RANK,
                rt_tr.nev ? (rt_tr.ev[rt_tr.nev - 1].t0 - rt_tr.origin) * 1e6 : 0.0);
}

/* Sets the tables (every run); with --trace FILE, starts recording. The
 * clock's origin is where the ranks leave a barrier together. */
static inline void rt_trace_init(const char *path, const RtNodeInfo *nodes, const RtCommInfo *comms, const char *where)
{
    rt_tr.nodes = nodes;
    rt_tr.comms = comms;
    rt_tr.where = where;
    rt_tr.path = path;
    rt_tr.node = -1;
    rt_tr.copy = -1;
    if (!path)
        return;
#ifdef O2S_NO_TRACE
    rt_die("--trace %s: this program was built with -DO2S_NO_TRACE", path);
#endif
#ifdef O2S_HAVE_MPI
    CHECK_MPI_WATCHED(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier (trace start)");
#endif
    rt_tr.origin = rt_now();
    rt_tr.on = 1;
}

static const char *const rt_comms_names[] = {"overlap", "unprogressed", "serial"};

/* Rank 0 writes every rank's spans to the --trace file, under a
 * temporary name renamed over it once complete. (Without MPI each rank
 * writes its own: FILE for rank 0, FILE.rankN for the others.) */
static inline void rt_trace_write(void)
{
    if (!rt_tr.path)
        return;
    rt_tr.on = 0;
    char *text = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&text, &len);
    if (!m)
        rt_die("--trace %s: %s", rt_tr.path, strerror(errno));
    rt_trace_format(m);
    if (fclose(m) != 0 || len > 0x7fffffff)
        rt_die("--trace %s: this rank's trace does not fit in memory or 2 GiB", rt_tr.path);
    char *all = text;
    size_t total = len;
    char path[4200];
    snprintf(path, sizeof path, "%s", rt_tr.path);
#ifdef O2S_HAVE_MPI
    int n = (int)len, *lens = NULL, *offs = NULL;
    if (RANK == 0) {
        lens = (int *)calloc(WORLD, sizeof(int));
        offs = (int *)calloc(WORLD, sizeof(int));
        if (!lens || !offs)
            rt_die("--trace: out of memory");
    }
    CHECK_MPI_WATCHED(MPI_Gather(&n, 1, MPI_INT, lens, 1, MPI_INT, 0, MPI_COMM_WORLD), "MPI_Gather (trace sizes)");
    all = NULL;
    if (RANK == 0) {
        total = 0;
        for (int r = 0; r < WORLD; r++) {
            offs[r] = (int)total;
            total += (size_t)lens[r];
            if (total > 0x7fffffff)
                rt_die("--trace %s: the ranks' traces exceed 2 GiB; run fewer --iters", rt_tr.path);
        }
        all = (char *)malloc(total + 1);
        if (!all)
            rt_die("--trace: out of memory");
    }
    CHECK_MPI_WATCHED(MPI_Gatherv(text, n, MPI_CHAR, all, lens, offs, MPI_CHAR, 0, MPI_COMM_WORLD),
                      "MPI_Gatherv (trace events)");
    free(lens);
    free(offs);
    free(text);
    if (RANK != 0)
        return;
#else
    if (RANK != 0)
        snprintf(path, sizeof path, "%s.rank%d", rt_tr.path, RANK);
#endif
    char tmp[4300];
    snprintf(tmp, sizeof tmp, "%s.tmp%ld", path, (long)getpid());
    FILE *f = fopen(tmp, "wb");
    if (!f)
        rt_die("--trace %s: %s", path, strerror(errno));
    fprintf(f, "{\"displayTimeUnit\": \"ns\",\n\"otherData\": {\"producer\": \"onnx2spmd\", \"ranks\": %d, "
               "\"comms\": \"%s\"},\n\"traceEvents\": [\n", WORLD, rt_comms_names[rt_comms_mode]);
    fwrite(all, 1, total, f);
    /* Every event ends in a comma: a last metadata event closes the list. */
    fprintf(f, "{\"name\": \"process_labels\", \"ph\": \"M\", \"pid\": 0, \"args\": {\"labels\": \"onnx2spmd\"}}\n]}\n");
    int bad = ferror(f);
    if (fclose(f) != 0 || bad || rename(tmp, path) != 0) {
        int e = errno;
        unlink(tmp);
        rt_die("--trace %s: cannot write it: %s", path, strerror(e));
    }
    free(all);
}

static inline void *rt_alloc(size_t bytes)
{
    void *p = NULL;
    if (posix_memalign(&p, 64, bytes ? bytes : 64) != 0)
        rt_die("out of memory (%zu bytes)", bytes);
    memset(p, 0, bytes ? bytes : 64);
    return p;
}

/* ---- tensor files ---- */

/* Element types, as ONNX's TensorProto codes. Kernels compute in float32,
 * int64 or bool; a tensor stored in another type is widened into a
 * compute-type buffer before a node and narrowed after it (k_cast). */
enum {
    RT_F32 = 1, RT_U8 = 2, RT_I8 = 3, RT_U16 = 4, RT_I16 = 5, RT_I32 = 6, RT_I64 = 7, RT_BOOL = 9,
    RT_F16 = 10, RT_F64 = 11, RT_U32 = 12, RT_BF16 = 16
};

typedef struct RtTensor {
    int dtype;
    int rank;
    int64_t dims[8];
    void *data;
    size_t bytes;
} RtTensor;

#ifdef __CUDACC__
#define RT_HD static inline __host__ __device__
#else
#define RT_HD static inline
#endif

RT_HD size_t rt_dtype_size(int dt)
{
    return dt == RT_F32 || dt == RT_I32 || dt == RT_U32 ? 4
         : dt == RT_I64 || dt == RT_F64                ? 8
         : dt == RT_F16 || dt == RT_BF16 || dt == RT_I16 || dt == RT_U16 ? 2 : 1;
}

static inline const char *rt_dtype_name(int dt)
{
    switch (dt) {
    case RT_F32: return "float32";
    case RT_U8: return "uint8";
    case RT_I8: return "int8";
    case RT_U16: return "uint16";
    case RT_I16: return "int16";
    case RT_U32: return "uint32";
    case RT_I32: return "int32";
    case RT_I64: return "int64";
    case RT_BOOL: return "bool";
    case RT_F16: return "float16";
    case RT_F64: return "float64";
    case RT_BF16: return "bfloat16";
    default: return "unsupported";
    }
}

/* .npy descriptors; bfloat16 is what ml_dtypes writes ('<V2'). */
static inline const char *rt_npy_descr(int dt)
{
    switch (dt) {
    case RT_F32: return "<f4";
    case RT_U8: return "|u1";
    case RT_I8: return "|i1";
    case RT_U16: return "<u2";
    case RT_I16: return "<i2";
    case RT_U32: return "<u4";
    case RT_I32: return "<i4";
    case RT_I64: return "<i8";
    case RT_BOOL: return "|b1";
    case RT_F16: return "<f2";
    case RT_F64: return "<f8";
    case RT_BF16: return "<V2";
    default: return NULL;
    }
}

/* IEEE binary16 and bfloat16 to and from float32, rounding to nearest
 * even; NaN stays NaN, overflow goes to infinity, subnormals are kept. */
RT_HD float rt_bits_f32(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

RT_HD uint32_t rt_f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

RT_HD float rt_h2f(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000) << 16, e = (h >> 10) & 0x1f, m = h & 0x3ff;
    if (e == 0x1f)
        return rt_bits_f32(sign | 0x7f800000u | (m << 13));
    if (e)
        return rt_bits_f32(sign | ((e + 112) << 23) | (m << 13));
    float v = (float)m * 5.9604644775390625e-8f; /* m * 2^-24, exact */
    return sign ? -v : v;
}

RT_HD uint16_t rt_f2h(float f)
{
    uint32_t u = rt_f32_bits(f), au = u & 0x7fffffffu;
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000);
    if (au >= 0x7f800000u)
        return (uint16_t)(sign | 0x7c00 | (au > 0x7f800000u ? 0x200 : 0));
    if (au >= 0x477ff000u) /* rounds to 65520 or more */
        return (uint16_t)(sign | 0x7c00);
    if (au < 0x38800000u) { /* a subnormal half: m * 2^-24 */
        float q = rt_bits_f32(au) * 16777216.0f;
        uint32_t m = (uint32_t)q;
        float frac = q - (float)m;
        if (frac > 0.5f || (frac == 0.5f && (m & 1)))
            m++;
        return (uint16_t)(sign | m);
    }
    uint32_t r = au + 0xfff + ((au >> 13) & 1);
    return (uint16_t)(sign | (((r >> 13) - (112u << 10)) & 0x7fff));
}

RT_HD float rt_bf2f(uint16_t h)
{
    return rt_bits_f32((uint32_t)h << 16);
}

RT_HD uint16_t rt_f2bf(float f)
{
    uint32_t u = rt_f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((u >> 16) | 0x40);
    return (uint16_t)((u + 0x7fff + ((u >> 16) & 1)) >> 16);
}

RT_HD int rt_dtype_is_float(int dt)
{
    return dt == RT_F32 || dt == RT_F16 || dt == RT_BF16 || dt == RT_F64;
}

/* Element i of x (dtype dt) as int64 or double, and back. Float to
 * integer truncates toward zero and saturates (NaN is 0); integer stores
 * wrap to the type's width, as C's conversions do. */
RT_HD int64_t rt_load_i64(const void *x, int dt, int64_t i)
{
    switch (dt) {
    case RT_I64: return ((const int64_t *)x)[i];
    case RT_I32: return ((const int32_t *)x)[i];
    case RT_U32: return ((const uint32_t *)x)[i];
    case RT_I16: return ((const int16_t *)x)[i];
    case RT_U16: return ((const uint16_t *)x)[i];
    case RT_I8: return ((const int8_t *)x)[i];
    case RT_U8: return ((const uint8_t *)x)[i];
    default: return ((const unsigned char *)x)[i] != 0;
    }
}

RT_HD double rt_load_f64(const void *x, int dt, int64_t i)
{
    switch (dt) {
    case RT_F32: return ((const float *)x)[i];
    case RT_F64: return ((const double *)x)[i];
    case RT_F16: return rt_h2f(((const uint16_t *)x)[i]);
    case RT_BF16: return rt_bf2f(((const uint16_t *)x)[i]);
    default: return (double)rt_load_i64(x, dt, i);
    }
}

RT_HD void rt_store_i64(void *y, int dt, int64_t i, int64_t v)
{
    switch (dt) {
    case RT_I64: ((int64_t *)y)[i] = v; break;
    case RT_I32: ((int32_t *)y)[i] = (int32_t)(uint32_t)(uint64_t)v; break;
    case RT_U32: ((uint32_t *)y)[i] = (uint32_t)(uint64_t)v; break;
    case RT_I16: ((int16_t *)y)[i] = (int16_t)(uint16_t)(uint64_t)v; break;
    case RT_U16: ((uint16_t *)y)[i] = (uint16_t)(uint64_t)v; break;
    case RT_I8: ((int8_t *)y)[i] = (int8_t)(uint8_t)(uint64_t)v; break;
    case RT_U8: ((uint8_t *)y)[i] = (uint8_t)(uint64_t)v; break;
    case RT_F32: ((float *)y)[i] = (float)v; break;
    case RT_F64: ((double *)y)[i] = (double)v; break;
    case RT_F16: ((uint16_t *)y)[i] = rt_f2h((float)v); break;
    case RT_BF16: ((uint16_t *)y)[i] = rt_f2bf((float)v); break;
    default: ((unsigned char *)y)[i] = v != 0; break;
    }
}

RT_HD void rt_store_f64(void *y, int dt, int64_t i, double v)
{
    switch (dt) {
    case RT_F32: ((float *)y)[i] = (float)v; break;
    case RT_F64: ((double *)y)[i] = v; break;
    case RT_F16: ((uint16_t *)y)[i] = rt_f2h((float)v); break;
    case RT_BF16: ((uint16_t *)y)[i] = rt_f2bf((float)v); break;
    case RT_BOOL: ((unsigned char *)y)[i] = v != 0; break;
    default:
        rt_store_i64(y, dt, i, v != v ? 0 : v >= 9223372036854775807.0 ? INT64_MAX
                               : v <= -9223372036854775808.0 ? INT64_MIN : (int64_t)v);
        break;
    }
}

/* Cast semantics between any two of the types above (ONNX Cast). */
RT_HD void rt_convert(void *y, int to, const void *x, int from, int64_t i)
{
    if (!rt_dtype_is_float(from))
        rt_store_i64(y, to, i, rt_load_i64(x, from, i)); /* exact for every integer */
    else if (from == RT_F32 && to == RT_F16)
        ((uint16_t *)y)[i] = rt_f2h(((const float *)x)[i]);
    else
        rt_store_f64(y, to, i, rt_load_f64(x, from, i));
}

/* Opens a regular file for reading: a FIFO, a device or a folder is
 * refused before anything could block on it. Returns the descriptor and
 * the size. */
static inline int rt_open_regular(const char *path, const char *what, size_t *size)
{
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0)
        rt_die("%s%s: cannot open: %s", what, path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode))
        rt_die("%s%s: not a regular file", what, path);
    *size = (size_t)st.st_size;
    return fd;
}

static inline void rt_read_all(int fd, unsigned char *buf, size_t n, const char *what, const char *path)
{
    for (size_t got = 0; got < n;) {
        ssize_t r = read(fd, buf + got, n - got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            rt_die("%s%s: %s", what, path, r < 0 ? strerror(errno) : "shorter than its size (truncated while read)");
        got += (size_t)r;
    }
}

static inline unsigned char *rt_read_file(const char *path, size_t *len)
{
    size_t n;
    int fd = rt_open_regular(path, "", &n);
    unsigned char *buf = (unsigned char *)rt_alloc(n + 1);
    rt_read_all(fd, buf, n, "", path);
    close(fd);
    *len = n;
    return buf;
}

/* numel * elsize of a shape read from a file, or die: every dim
 * non-negative, no product overflowing. */
static inline size_t rt_shape_bytes(const char *path, int rank, const int64_t *dims, size_t elsize)
{
    size_t n = elsize;
    for (int i = 0; i < rank; i++)
        if (dims[i] < 0 || __builtin_mul_overflow(n, (size_t)dims[i], &n))
            rt_die("%s: shape dim %d = %lld is negative or the size overflows", path, i, (long long)dims[i]);
    return n;
}

static inline void rt_parse_npy(const char *path, const unsigned char *buf, size_t len, RtTensor *t)
{
    if (len < 10 || memcmp(buf, "\x93NUMPY", 6) != 0)
        rt_die("%s: not a .npy file", path);
    size_t hlen, off;
    if (buf[6] == 1) {
        hlen = (size_t)buf[8] | (size_t)buf[9] << 8;
        off = 10;
    } else {
        if (len < 12)
            rt_die("%s: truncated .npy header", path);
        hlen = (size_t)buf[8] | (size_t)buf[9] << 8 | (size_t)buf[10] << 16 | (size_t)buf[11] << 24;
        off = 12;
    }
    if (hlen > len - off)
        rt_die("%s: truncated .npy header", path);
    char hdr[4096];
    snprintf(hdr, sizeof hdr, "%.*s", (int)(hlen < sizeof hdr - 1 ? hlen : sizeof hdr - 1), buf + off);
    const char *d = strstr(hdr, "'descr':");
    const char *fo = strstr(hdr, "'fortran_order':");
    const char *sh = strstr(hdr, "'shape':");
    if (!d || !fo || !sh)
        rt_die("%s: malformed .npy header", path);
    for (fo += 16; *fo == ' '; fo++)
        ;
    if (strncmp(fo, "True", 4) == 0)
        rt_die("%s: Fortran-ordered arrays are not supported", path);
    static const int types[] = {RT_F32, RT_U8, RT_I8, RT_U16, RT_I16, RT_U32, RT_I32, RT_I64, RT_BOOL, RT_F16, RT_F64, RT_BF16};
    t->dtype = 0;
    for (size_t k = 0; k < sizeof types / sizeof types[0]; k++) {
        char q[8];
        snprintf(q, sizeof q, "'%s'", rt_npy_descr(types[k]));
        if (strncmp(d + 9, q, 5) == 0)
            t->dtype = types[k];
    }
    if (strncmp(d + 9, "'|V2'", 5) == 0) /* numpy's own spelling of ml_dtypes' bfloat16 */
        t->dtype = RT_BF16;
    if (!t->dtype)
        rt_die("%s: dtype %.8s is not supported (<f4 <f2 <V2 (bfloat16) <f8 <i8 <i4 <i2 |i1 <u4 <u2 |u1 |b1)", path, d + 9);
    const char *p = strchr(sh, '(');
    t->rank = 0;
    for (p = p ? p + 1 : sh; *p && *p != ')';) {
        while (*p == ' ' || *p == ',')
            p++;
        if (*p == ')')
            break;
        if (t->rank == 8)
            rt_die("%s: more than 8 dims", path);
        char *next;
        errno = 0;
        t->dims[t->rank++] = strtoll(p, &next, 10);
        if (next == p || errno)
            rt_die("%s: malformed .npy shape", path);
        p = next;
    }
    size_t n = rt_shape_bytes(path, t->rank, t->dims, rt_dtype_size(t->dtype));
    if (n != len - off - hlen)
        rt_die("%s: holds %zu data bytes, its header says %zu", path, len - off - hlen, n);
    t->bytes = n;
    t->data = (void *)(buf + off + hlen);
}

/* Minimal TensorProto reader (dims, data_type, raw_data and the typed
 * fields), as the ONNX backend test suite stores its inputs and outputs. */
static inline uint64_t rt_varint(const unsigned char **p, const unsigned char *end, const char *path)
{
    uint64_t v = 0;
    for (int s = 0; s < 64; s += 7) {
        if (*p >= end)
            rt_die("%s: truncated protobuf", path);
        unsigned char c = *(*p)++;
        v |= (uint64_t)(c & 0x7f) << s;
        if (!(c & 0x80))
            return v;
    }
    rt_die("%s: bad varint", path);
}

static inline void rt_parse_pb(const char *path, const unsigned char *buf, size_t len, RtTensor *t)
{
    const unsigned char *p = buf, *end = buf + len, *raw = NULL, *typed = NULL;
    size_t raw_len = 0, typed_len = 0;
    int typed_field = 0, npacked_ints = 0;
    int64_t ints[1 << 12];
    memset(t, 0, sizeof *t);
    while (p < end) {
        uint64_t key = rt_varint(&p, end, path);
        int field = (int)(key >> 3), wire = (int)(key & 7);
        if (wire == 0) {
            uint64_t v = rt_varint(&p, end, path);
            if (field == 1 && t->rank < 8)
                t->dims[t->rank++] = (int64_t)v;
            else if (field == 2)
                t->dtype = (int)v;
            else if ((field == 7 || field == 5 || field == 11) && npacked_ints < (1 << 12)) { /* int64, int32, uint64 */
                ints[npacked_ints++] = (int64_t)v;
                typed_field = field;
            }
        } else if (wire == 2) {
            uint64_t n = rt_varint(&p, end, path);
            if (n > (uint64_t)(end - p))
                rt_die("%s: truncated protobuf", path);
            if (field == 1) {
                const unsigned char *q = p;
                while (q < p + n && t->rank < 8)
                    t->dims[t->rank++] = (int64_t)rt_varint(&q, p + n, path);
            } else if (field == 9) {
                raw = p;
                raw_len = n;
            } else if (field == 4 || field == 5 || field == 7 || field == 10 || field == 11) {
                /* float, int32, int64, double, uint64 */
                typed = p;
                typed_len = n;
                typed_field = field;
            }
            p += n;
        } else if (wire == 5 || wire == 1) {
            size_t n = wire == 5 ? 4 : 8;
            if (n > (size_t)(end - p))
                rt_die("%s: truncated protobuf", path);
            if (!typed && ((field == 4 && wire == 5) || (field == 10 && wire == 1))) {
                /* An unpacked float or double: rare; read as one element. */
                typed = p;
                typed_len = n;
                typed_field = field;
            }
            p += n;
        } else {
            rt_die("%s: unsupported protobuf wire type %d", path, wire);
        }
    }
    if (!rt_npy_descr(t->dtype))
        rt_die("%s: dtype %d is not supported", path, t->dtype);
    /* Every element must come from the file: the count is checked against
     * what the file holds before any buffer is sized from it. */
    t->bytes = rt_shape_bytes(path, t->rank, t->dims, rt_dtype_size(t->dtype));
    size_t numel = t->bytes / rt_dtype_size(t->dtype);
    if (numel > len)
        rt_die("%s: shape holds %zu elements, more than the file's %zu bytes can", path, numel, len);
    t->data = rt_alloc(t->bytes);
    if (raw) {
        if (raw_len != t->bytes)
            rt_die("%s: raw_data holds %zu bytes, shape needs %zu", path, raw_len, t->bytes);
        memcpy(t->data, raw, raw_len);
    } else if (typed && ((typed_field == 4 && t->dtype == RT_F32) || (typed_field == 10 && t->dtype == RT_F64)) &&
               typed_len == t->bytes) {
        memcpy(t->data, typed, typed_len);
    } else if (typed && (typed_field == 7 || typed_field == 5 || typed_field == 11)) {
        /* int32_data holds int32, int16, uint16, int8, uint8 and bool
         * values and the bit patterns of float16 and bfloat16; uint64_data
         * (field 11) holds uint32. */
        const unsigned char *q = typed;
        for (size_t i = 0; i < numel; i++) {
            int64_t v = (int64_t)rt_varint(&q, typed + typed_len, path);
            if (t->dtype == RT_F16 || t->dtype == RT_BF16)
                ((uint16_t *)t->data)[i] = (uint16_t)v;
            else
                rt_store_i64(t->data, t->dtype, (int64_t)i, typed_field == 5 ? (int32_t)v : v);
        }
    } else if (npacked_ints == (int)numel) {
        for (size_t i = 0; i < numel; i++) {
            if (t->dtype == RT_F16 || t->dtype == RT_BF16)
                ((uint16_t *)t->data)[i] = (uint16_t)ints[i];
            else
                rt_store_i64(t->data, t->dtype, (int64_t)i, typed_field == 5 ? (int32_t)ints[i] : ints[i]);
        }
    } else if (numel) {
        rt_die("%s: no data in a supported field", path);
    }
}

static inline void rt_read_tensor(const char *path, RtTensor *t)
{
    size_t len;
    unsigned char *buf = rt_read_file(path, &len);
    size_t pl = strlen(path);
    if (pl > 4 && strcmp(path + pl - 4, ".npy") == 0)
        rt_parse_npy(path, buf, len, t);
    else
        rt_parse_pb(path, buf, len, t);
}

/* Checks a tensor read from a file against what the model declares. */
static inline void rt_check_input(const char *name, const char *path, const RtTensor *t, int dtype, int rank,
                           const int64_t *dims)
{
    int ok = t->dtype == dtype && t->rank == rank;
    for (int i = 0; ok && i < rank; i++)
        ok = t->dims[i] == dims[i];
    if (ok)
        return;
    char want[160] = "", got[160] = "";
    for (int i = 0; i < rank; i++)
        snprintf(want + strlen(want), sizeof want - strlen(want), "%s%lld", i ? ", " : "", (long long)dims[i]);
    for (int i = 0; i < t->rank; i++)
        snprintf(got + strlen(got), sizeof got - strlen(got), "%s%lld", i ? ", " : "", (long long)t->dims[i]);
    rt_die("input \"%s\" from %s is %s [%s]; the model needs %s [%s]", name, path, rt_dtype_name(t->dtype),
           got, rt_dtype_name(dtype), want);
}

/* A training input: the model's shape, or k batches of it along dim 0
 * (step s reads batch (s-1) mod k). Returns k. */
static inline int64_t rt_check_batches(const char *name, const char *path, const RtTensor *t, int dtype, int rank,
                                       const int64_t *dims)
{
    int ok = t->dtype == dtype && t->rank == rank && (rank == 0 || (t->dims[0] > 0 && dims[0] > 0 &&
                                                                   t->dims[0] % dims[0] == 0));
    for (int i = 1; ok && i < rank; i++)
        ok = t->dims[i] == dims[i];
    if (!ok) {
        char want[160] = "", got[160] = "";
        for (int i = 0; i < rank; i++)
            snprintf(want + strlen(want), sizeof want - strlen(want), "%s%lld", i ? ", " : "", (long long)dims[i]);
        for (int i = 0; i < t->rank; i++)
            snprintf(got + strlen(got), sizeof got - strlen(got), "%s%lld", i ? ", " : "", (long long)t->dims[i]);
        rt_die("input \"%s\" from %s is %s [%s]; the model needs %s [%s], or k batches of it along dim 0", name,
               path, rt_dtype_name(t->dtype), got, rt_dtype_name(dtype), want);
    }
    return rank == 0 ? 1 : t->dims[0] / dims[0];
}

static inline void rt_write_npy(const char *path, int dtype, int rank, const int64_t *dims, const void *data)
{
    char hdr[256], shape[160] = "";
    size_t n = rt_dtype_size(dtype);
    for (int i = 0; i < rank; i++) {
        snprintf(shape + strlen(shape), sizeof shape - strlen(shape), "%lld%s", (long long)dims[i],
                 rank == 1 ? "," : (i + 1 < rank ? ", " : ""));
        n *= (size_t)dims[i];
    }
    int len = snprintf(hdr, sizeof hdr, "{'descr': '%s', 'fortran_order': False, 'shape': (%s), }",
                       rt_npy_descr(dtype), shape);
    int total = 10 + len + 1, pad = (64 - total % 64) % 64;
    /* A fresh temporary name (never through a symlink an attacker placed),
     * renamed over the final name, which replaces a link there rather than
     * writing through it. */
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    FILE *f = fd < 0 ? NULL : fdopen(fd, "wb");
    if (!f)
        rt_die("cannot write %s: %s", path, strerror(errno));
    unsigned short hl = (unsigned short)(len + pad + 1);
    fwrite("\x93NUMPY\x01\x00", 1, 8, f);
    fputc(hl & 0xff, f);
    fputc(hl >> 8, f);
    fwrite(hdr, 1, (size_t)len, f);
    for (int i = 0; i < pad; i++)
        fputc(' ', f);
    fputc('\n', f);
    if (fwrite(data, 1, n, f) != n || fclose(f) != 0 || rename(tmp, path) != 0) {
        int e = errno;
        unlink(tmp);
        rt_die("cannot write %s: %s", path, strerror(e));
    }
}

/* Blocks of a split tensor: dim i of gdims[i] elements is cut into blocks
 * of blocks[i] (ceil(gdims[i] / shards), in whole units: the compiler's
 * sharding.c); the last blocks may run past the dim's end, into padding
 * that is zero in a rank's copy and is never written back. Rank r holds
 * block index[i] along dim i. */

/* Row r (all dims but the last) of a block: its element offset in the
 * whole tensor, or -1 when it lies in padding; *ncopy: the elements of
 * the row inside the tensor. */
static inline int64_t rt_block_row(int64_t r, int rank, const int64_t *gdims, const int64_t *ldims,
                                   const int64_t *index, int64_t *ncopy)
{
    int last = rank - 1;
    int64_t goff = index[last] * ldims[last], stride = gdims[last], n = gdims[last] - goff;
    *ncopy = n < 0 ? 0 : n > ldims[last] ? ldims[last] : n;
    for (int i = last - 1; i >= 0; i--) {
        int64_t g = index[i] * ldims[i] + r % ldims[i];
        if (g >= gdims[i])
            return -1;
        r /= ldims[i];
        goff += g * stride;
        stride *= gdims[i];
    }
    return goff;
}

static inline void rt_take_block(void *dst, const void *src, int rank, const int64_t *gdims, const int64_t *blocks,
                                 const int64_t *index, size_t elsize)
{
    int64_t ldims[8] = {0}; /* (zeroed: GCC -O1 cannot see that rank > 0 fills it) */
    if (rank == 0) {
        memcpy(dst, src, elsize);
        return;
    }
    int64_t rows = 1;
    for (int i = 0; i < rank; i++) {
        ldims[i] = blocks[i];
        rows *= i < rank - 1 ? ldims[i] : 1;
    }
    size_t row_bytes = (size_t)ldims[rank - 1] * elsize;
    memset(dst, 0, (size_t)rows * row_bytes); /* padding reads as zero */
    for (int64_t r = 0; r < rows; r++) {
        int64_t n, goff = rt_block_row(r, rank, gdims, ldims, index, &n);
        if (goff >= 0 && n)
            memcpy((char *)dst + (size_t)r * row_bytes, (const char *)src + (size_t)goff * elsize, (size_t)n * elsize);
    }
}

/* The inverse of rt_take_block: puts one rank's block into the whole
 * tensor (its padding stays behind). */
static inline void rt_put_block(void *dst, const void *src, int rank, const int64_t *gdims, const int64_t *blocks,
                                const int64_t *index, size_t elsize)
{
    int64_t ldims[8] = {0};
    if (rank == 0) {
        memcpy(dst, src, elsize);
        return;
    }
    int64_t rows = 1;
    for (int i = 0; i < rank; i++) {
        ldims[i] = blocks[i];
        rows *= i < rank - 1 ? ldims[i] : 1;
    }
    size_t row_bytes = (size_t)ldims[rank - 1] * elsize;
    for (int64_t r = 0; r < rows; r++) {
        int64_t n, goff = rt_block_row(r, rank, gdims, ldims, index, &n);
        if (goff >= 0 && n)
            memcpy((char *)dst + (size_t)goff * elsize, (const char *)src + (size_t)r * row_bytes, (size_t)n * elsize);
    }
}

/* The size of one block of a split output (every block is the same size,
 * padding included). */
static inline size_t rt_block_bytes(int rank, const int64_t *blocks, size_t elsize)
{
    size_t n = elsize;
    for (int i = 0; i < rank; i++)
        n *= (size_t)blocks[i];
    return n;
}

/* The size of the whole tensor. */
static inline size_t rt_whole_bytes(int rank, const int64_t *gdims, size_t elsize)
{
    size_t n = elsize;
    for (int i = 0; i < rank; i++)
        n *= (size_t)gdims[i];
    return n;
}

#if !defined(O2S_CUDA)
/* --out of an output that stays split over the ranks: rank `root` (0, or
 * a pipeline's first rank of the last stage) assembles the whole tensor
 * from one copy of every block, once, after the run. Each rank holds nmb
 * blocks one after another in `local` (one per microbatch); rank r's m-th
 * is block index[(r * nmb + m) * rank + i] along dim i. sender[r] is 0 for
 * a rank whose blocks another rank already sends (a copy over an axis the
 * layout does not use, or another stage). Point to point, in pieces MPI's
 * int counts can hold. Returns the whole tensor on the root (the caller
 * frees it), NULL elsewhere. */
static inline void *rt_gather_output(const void *local, int nmb, int rank, const int64_t *gdims,
                                     const int64_t *blocks, const int64_t *index, const unsigned char *sender,
                                     size_t elsize, const char *name, int root)
{
    const size_t block = rt_block_bytes(rank, blocks, elsize), piece = (size_t)1 << 30;
    char what[320];
    snprintf(what, sizeof what, "the blocks of output \"%.256s\" (--out)", name); /* a long name is cut */
    if (RANK != root) {
        for (size_t off = 0; sender[RANK] && off < block * (size_t)nmb; off += piece) {
            size_t n = block * (size_t)nmb - off < piece ? block * (size_t)nmb - off : piece;
            CHECK_MPI_WATCHED(MPI_Send((const char *)local + off, (int)n, MPI_BYTE, root, 7, MPI_COMM_WORLD), what);
        }
        return NULL;
    }
    unsigned char *out = rt_alloc(rt_whole_bytes(rank, gdims, elsize)), *stage = rt_alloc(block * (size_t)nmb);
    for (int r = 0; r < WORLD; r++) {
        if (!sender[r])
            continue;
        const unsigned char *src = (const unsigned char *)local;
        if (r != root) {
            for (size_t off = 0; off < block * (size_t)nmb; off += piece) {
                size_t n = block * (size_t)nmb - off < piece ? block * (size_t)nmb - off : piece;
                CHECK_MPI_WATCHED(MPI_Recv(stage + off, (int)n, MPI_BYTE, r, 7, MPI_COMM_WORLD, MPI_STATUS_IGNORE),
                                  what);
            }
            src = stage;
        }
        for (int m = 0; m < nmb; m++)
            rt_put_block(out, src + (size_t)m * block, rank, gdims, blocks,
                         &index[((size_t)r * (size_t)nmb + (size_t)m) * (size_t)rank], elsize);
    }
    free(stage);
    return out;
}

/* All ranks reach this point before any goes on (timing starts here). */
static inline void rt_barrier(const char *what)
{
    CHECK_MPI_WATCHED(MPI_Barrier(MPI_COMM_WORLD), what);
}

/* compile --decode: rank 0's n values (the next tokens) to every rank. */
static inline void rt_bcast_i64(int64_t *v, int n, const char *what)
{
    CHECK_MPI_WATCHED(MPI_Bcast(v, n, MPI_INT64_T, 0, MPI_COMM_WORLD), what);
}

/* n counters a kernel sets (the MoE dispatch's dropped pairs), zeroed. */
static inline int64_t *rt_counters(int n)
{
    int64_t *c = calloc((size_t)n, sizeof *c);
    if (!c)
        rt_die("out of memory for %d counters", n);
    return c;
}

/* Every rank's counters summed into v on each (v read from c). */
static inline void rt_sum_counters(const int64_t *c, int64_t *v, int n, const char *what)
{
    CHECK_MPI_WATCHED(MPI_Allreduce(c, v, n, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD), what);
}
#endif

/* (the CUDA target's is in cuda_kernels.cu, over NCCL) */
static inline void rt_sum_counters(const int64_t *c, int64_t *v, int n, const char *what);

/* ---- mixture of experts: all-to-alls of the filled columns (C/MPI) ----
 *
 * The dispatch buffer [G, E, D, C] is sized for the worst case (C = Ng:
 * every token of a group on one expert), but a (group, expert) block
 * fills only its first n columns, n known from the dispatch's slots (the
 * counts). The two all-to-alls of an MoE layer (tokens to their experts,
 * expert outputs back) send each block's n filled columns, packed, after
 * a small all-to-all of the counts, as MegaBlocks and Tutel do; the
 * receiver puts them back in the worst-case layout with the unfilled
 * columns zeroed, which is what the fixed-size path leaves there (the
 * dispatch writes zeros; the combine reads only filled columns).
 *
 * Blocks are counted and packed in the order (peer q, group g, local
 * expert x): q's part is contiguous, as MPI_Alltoallv needs. The token
 * side's buffer is [gl, p * el, D, C] (its groups, every expert), the
 * expert side's [p * gl, el, D, C] (every peer's groups, its experts). */
#define RT_MOE_MAX_PEERS 256

/* One counts-based all-to-all's MPI_Alltoallv counts and displacements
 * (in elements), kept until its wait: MPI reads them until then. */
typedef struct RtMoeMove {
    int send[RT_MOE_MAX_PEERS], sdispl[RT_MOE_MAX_PEERS], recv[RT_MOE_MAX_PEERS], rdispl[RT_MOE_MAX_PEERS];
} RtMoeMove;

#if !defined(O2S_CUDA)
/* counts[(q * gl + g) * el + x]: the filled columns of expert q * el + x
 * in this rank's group g, from the dispatch's slots [gl, pairs] (a kept
 * pair's slot is expert * cap + column, a dropped one's -1). */
static inline void rt_moe_count(int *counts, const int64_t *slots, int64_t gl, int64_t pairs, int p, int64_t el,
                                int64_t cap)
{
    memset(counts, 0, (size_t)(gl * p * el) * sizeof *counts);
    for (int64_t g = 0; g < gl; g++)
        for (int64_t i = 0; i < pairs; i++) {
            int64_t s = slots[g * pairs + i];
            if (s >= 0)
                counts[((s / cap / el) * gl + g) * el + (s / cap) % el]++;
        }
}

/* Block (q, g, x)'s first element in a buffer of either side. */
static inline int64_t rt_moe_block(int token_side, int64_t q, int64_t g, int64_t x, int p, int64_t gl, int64_t el,
                                   int64_t d, int64_t cap)
{
    return (token_side ? (g * p + q) * el + x : (q * gl + g) * el + x) * d * cap;
}

/* Each peer's element count and displacement for the blocks of counts. */
static inline void rt_moe_sizes(const int *counts, int p, int64_t gl, int64_t el, int64_t d, int *n, int *displ)
{
    int64_t off = 0;
    for (int q = 0; q < p; q++) {
        int64_t c = 0;
        for (int64_t b = 0; b < gl * el; b++)
            c += counts[q * gl * el + b];
        n[q] = (int)(c * d);
        displ[q] = (int)off;
        off += c * d;
    }
}

/* Packs each block's filled columns, row by row, into send; moved[0]
 * gets the bytes packed, moved[2] those for peers other than `me` (this
 * rank's place in the group), for --stats. */
static inline void rt_moe_pack(float *send, const float *in, const int *counts, int token_side, int p, int64_t gl,
                               int64_t el, int64_t d, int64_t cap, int me, int64_t *moved)
{
    int64_t pos = 0, mine = 0;
    for (int q = 0; q < p; q++)
        for (int64_t g = 0; g < gl; g++)
            for (int64_t x = 0; x < el; x++) {
                int64_t n = counts[(q * gl + g) * el + x];
                const float *blk = in + rt_moe_block(token_side, q, g, x, p, gl, el, d, cap);
                for (int64_t di = 0; di < d && n; di++, pos += n)
                    memcpy(send + pos, blk + di * cap, (size_t)n * sizeof *send);
                mine += q == me ? n * d : 0;
            }
    moved[0] = pos * (int64_t)sizeof *send;
    moved[2] = (pos - mine) * (int64_t)sizeof *send;
}

/* The inverse: each block's filled columns from recv, the rest zeroed. */
static inline void rt_moe_unpack(float *out, const float *recv, const int *counts, int token_side, int p, int64_t gl,
                                 int64_t el, int64_t d, int64_t cap)
{
    int64_t pos = 0;
    for (int q = 0; q < p; q++)
        for (int64_t g = 0; g < gl; g++)
            for (int64_t x = 0; x < el; x++) {
                int64_t n = counts[(q * gl + g) * el + x];
                float *blk = out + rt_moe_block(token_side, q, g, x, p, gl, el, d, cap);
                for (int64_t di = 0; di < d; di++, pos += n) {
                    memcpy(blk + di * cap, recv + pos, (size_t)n * sizeof *out);
                    memset(blk + di * cap + n, 0, (size_t)(cap - n) * sizeof *out);
                }
            }
}
#endif

/* One mixture-of-experts layer, for --stats. */
typedef struct RtMoeInfo {
    const char *name; /* its dispatch node */
    long long pairs, capacity, groups; /* (token, expert) pairs per forward(); per expert per group; groups */
} RtMoeInfo;

/* --stats: rank 0 prints each MoE layer's dropped pairs in the last
 * forward(), summed over the ranks that counted them. */
static inline void rt_moe_stats(const RtMoeInfo *info, const int64_t *counters, const int64_t *moved, int n)
{
    int64_t sum[64], bytes[256];
    for (int base = 0; base < n; base += 64) {
        int m = n - base < 64 ? n - base : 64;
        rt_sum_counters(counters + base, sum, m, "the MoE counters (--stats)");
        rt_sum_counters(moved + 4 * base, bytes, 4 * m, "the MoE byte counters (--stats)");
        for (int i = 0; i < m && RANK == 0; i++) {
            printf("moe %s: dropped %lld of %lld (token, expert) pairs; capacity %lld per expert in each of %lld "
                   "groups\n", info[base + i].name, (long long)sum[i], info[base + i].pairs,
                   info[base + i].capacity, info[base + i].groups);
            const int64_t *b = bytes + 4 * i; /* to the experts, back; the same between ranks */
            if (b[0] || b[1]) /* a counts-based all-to-all ran (C/MPI, experts split) */
                printf("moe %s: the all-to-alls moved %lld bytes to the experts and %lld back, all ranks "
                       "together (filled columns only; %lld and %lld of them between ranks)\n", info[base + i].name,
                       (long long)b[0], (long long)b[1], (long long)b[2], (long long)b[3]);
        }
    }
}

/* ---- weights: one file per rank, checked by size and a 64-bit hash ---- */

/* The hash of weight files and checkpoints: FNV-1a's step on 64-bit
 * little-endian words in 8 lanes, one per word of each 64-byte block (8
 * independent multiplies keep up with memory, where byte-wise FNV-1a runs
 * under 1 GB/s), then the tail bytes, the lanes and the length folded in
 * FNV-1a style. Any one changed word changes it. codegen/weights.c
 * computes the same, so the compiler writes what this checks. */
static inline uint64_t rt_hash64(const unsigned char *p, size_t n)
{
    const uint64_t prime = 1099511628211ull, basis = 1469598103934665603ull;
    uint64_t lane[8];
    for (int l = 0; l < 8; l++)
        lane[l] = basis ^ (uint64_t)l;
    size_t i = 0;
    for (; i + 64 <= n; i += 64)
        for (int l = 0; l < 8; l++) {
            uint64_t w;
            memcpy(&w, p + i + 8 * l, 8);
            lane[l] = (lane[l] ^ w) * prime;
        }
    uint64_t h = basis;
    for (; i < n; i++)
        h = (h ^ p[i]) * prime;
    for (int l = 0; l < 8; l++)
        h = (h ^ lane[l]) * prime;
    return (h ^ (uint64_t)n) * prime;
}

/* A rank's weight file (codegen/weights.c): a 4096-byte header ("O2SPMDW3",
 * the payload's size, its hash, the GEMM panel width its packed weights
 * were written in), then the payload, page-aligned. It sits next to the
 * binary, wherever that is run from. Opens it and checks the header
 * against what this binary was compiled for; the payload's hash is
 * checked by the caller, over the bytes it will use. */
enum { RT_WEIGHTS_HEADER = 4096 };

static inline int rt_open_weights(const char *argv0, const char *name, size_t want_bytes, uint64_t want_sum,
                                  uint64_t panel, char *path, size_t cap)
{
    const char *slash = strrchr(argv0, '/');
    if (slash)
        snprintf(path, cap, "%.*s/%s", (int)(slash - argv0), argv0, name);
    else
        snprintf(path, cap, "%s", name);
    size_t size;
    int fd = rt_open_regular(path, "weight file ", &size);
    unsigned char hdr[32];
    if (size < RT_WEIGHTS_HEADER)
        rt_die("weight file %s: not an onnx2spmd weight file", path);
    rt_read_all(fd, hdr, sizeof hdr, "weight file ", path);
    if (memcmp(hdr, "O2SPMDW3", 8) != 0)
        rt_die("weight file %s: not an onnx2spmd weight file of this version (compile again)", path);
    uint64_t bytes, sum, file_panel;
    memcpy(&bytes, hdr + 8, 8);
    memcpy(&sum, hdr + 16, 8);
    memcpy(&file_panel, hdr + 24, 8);
    if (bytes != want_bytes)
        rt_die("weight file %s: holds %llu bytes, this rank needs %zu", path, (unsigned long long)bytes, want_bytes);
    if (size - RT_WEIGHTS_HEADER != want_bytes)
        rt_die("weight file %s: holds %zu bytes after its header, this rank needs %zu (truncated or padded)", path,
               size - RT_WEIGHTS_HEADER, want_bytes);
    if (file_panel != panel)
        rt_die("weight file %s: GEMM weights packed in panels of %llu columns, this binary reads panels of %llu "
               "(kernels from another onnx2spmd: compile again)", path, (unsigned long long)file_panel,
               (unsigned long long)panel);
    if (sum != want_sum)
        rt_die("weight file %s: checksum mismatch (corrupt or from another compile)", path);
    return fd;
}

/* The weights mapped where they lie in the file, not copied: read-only for
 * an inference program (the rank holds them once, as page cache that every
 * process mapping the file shares), copy-on-write for one that trains (a
 * page is copied when first updated). The hash is checked over the mapping. */
static double rt_weights_s; /* how long mapping and checking them took (start-up) */

static inline unsigned char *rt_map_weights(const char *argv0, const char *name, size_t want_bytes, uint64_t want_sum,
                                            uint64_t panel, int writable)
{
    static unsigned char none[64] __attribute__((aligned(64)));
    double t0 = rt_now();
    char path[4096];
    int fd = rt_open_weights(argv0, name, want_bytes, want_sum, panel, path, sizeof path);
    if (!want_bytes) {
        close(fd);
        return none;
    }
    void *m = mmap(NULL, RT_WEIGHTS_HEADER + want_bytes, PROT_READ | (writable ? PROT_WRITE : 0), MAP_PRIVATE, fd, 0);
    if (m == MAP_FAILED)
        rt_die("weight file %s: cannot map its %zu bytes: %s", path, want_bytes, strerror(errno));
    close(fd);
    unsigned char *w = (unsigned char *)m + RT_WEIGHTS_HEADER;
    madvise(m, RT_WEIGHTS_HEADER + want_bytes, MADV_WILLNEED); /* read ahead while the hash runs */
    if (rt_hash64(w, want_bytes) != want_sum)
        rt_die("weight file %s: checksum mismatch (corrupt or from another compile)", path);
    rt_weights_s = rt_now() - t0;
    return w;
}

/* The weights read into memory of their own (the CUDA target's host copy,
 * which goes to the device and is freed). */
static inline unsigned char *rt_load_weights(const char *argv0, const char *name, size_t want_bytes, uint64_t want_sum,
                                             uint64_t panel)
{
    char path[4096];
    int fd = rt_open_weights(argv0, name, want_bytes, want_sum, panel, path, sizeof path);
    unsigned char *w = (unsigned char *)rt_alloc(want_bytes);
    if (lseek(fd, RT_WEIGHTS_HEADER, SEEK_SET) != RT_WEIGHTS_HEADER)
        rt_die("weight file %s: cannot seek past its header: %s", path, strerror(errno));
    rt_read_all(fd, w, want_bytes, "weight file ", path);
    close(fd);
    if (rt_hash64(w, want_bytes) != want_sum)
        rt_die("weight file %s: checksum mismatch (corrupt or from another compile)", path);
    return w;
}

/* Peak resident memory of this process in KiB (Linux VmHWM; 0 elsewhere). */
static inline long rt_peak_rss_kib(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long kib = 0;
    while (f && fgets(line, sizeof line, f))
        if (strncmp(line, "VmHWM:", 6) == 0)
            kib = strtol(line + 6, NULL, 10);
    if (f)
        fclose(f);
    return kib;
}

#if !defined(O2S_CUDA)
/* After a timed run: every rank's peak (VmHWM) beside what the plan said it
 * would hold (PLANNED_BYTES, from compile), and its start-up's weight
 * mapping and check, printed by rank 0. */
static inline void rt_report_memory(long long planned_bytes, int world)
{
    double mine[3] = {rt_peak_rss_kib() / 1024.0, (double)planned_bytes / (1 << 20), rt_weights_s}, *all = NULL;
    int rank;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (rank == 0)
        all = (double *)rt_alloc(sizeof(double) * 3 * (size_t)world);
    CHECK_MPI(MPI_Gather(mine, 3, MPI_DOUBLE, all, 3, MPI_DOUBLE, 0, MPI_COMM_WORLD));
    if (rank != 0)
        return;
    printf("peak memory per rank (MiB, VmHWM / planned):");
    for (int r = 0; r < world; r++)
        printf(" %.1f / %.1f", all[3 * r], all[3 * r + 1]);
    printf("\nweights mapped and checked per rank (s):");
    for (int r = 0; r < world; r++)
        printf(" %.3f", all[3 * r + 2]);
    printf("\n");
    free(all);
}

/* MPI has no 16-bit float types: float16 and bfloat16 travel as 2-byte
 * elements, and partial sums of them are added in float32 and rounded
 * once per pairwise reduction step (as NCCL does for ncclHalf/ncclBfloat16). */
static MPI_Datatype rt_mpi_f16 = MPI_DATATYPE_NULL, rt_mpi_bf16 = MPI_DATATYPE_NULL;
static MPI_Op rt_sum_f16 = MPI_OP_NULL, rt_sum_bf16 = MPI_OP_NULL;

static void rt_sum_f16_fn(void *in, void *inout, int *len, MPI_Datatype *dt)
{
    (void)dt;
    const uint16_t *a = (const uint16_t *)in;
    uint16_t *b = (uint16_t *)inout;
    for (int i = 0; i < *len; i++)
        b[i] = rt_f2h(rt_h2f(a[i]) + rt_h2f(b[i]));
}

static void rt_sum_bf16_fn(void *in, void *inout, int *len, MPI_Datatype *dt)
{
    (void)dt;
    const uint16_t *a = (const uint16_t *)in;
    uint16_t *b = (uint16_t *)inout;
    for (int i = 0; i < *len; i++)
        b[i] = rt_f2bf(rt_bf2f(a[i]) + rt_bf2f(b[i]));
}

static inline void rt_init_mpi_types(void)
{
    CHECK_MPI(MPI_Type_contiguous(2, MPI_BYTE, &rt_mpi_f16));
    CHECK_MPI(MPI_Type_commit(&rt_mpi_f16));
    CHECK_MPI(MPI_Type_contiguous(2, MPI_BYTE, &rt_mpi_bf16));
    CHECK_MPI(MPI_Type_commit(&rt_mpi_bf16));
    CHECK_MPI(MPI_Op_create(rt_sum_f16_fn, 1, &rt_sum_f16));
    CHECK_MPI(MPI_Op_create(rt_sum_bf16_fn, 1, &rt_sum_bf16));
}
#endif

/* Starts MPI with errors returned (so CHECK_MPI can name them) and checks
 * that this binary runs as the rank it was generated for. */
#ifdef O2S_HAVE_MPI
static inline void rt_init_mpi(int *argc, char ***argv)
{
    int world = 0, me = -1;
    CHECK_MPI_WATCHED(MPI_Init(argc, argv), "MPI_Init (the other ranks to start)");
    rt_job_up = 1;
    CHECK_MPI(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
    CHECK_MPI(MPI_Comm_size(MPI_COMM_WORLD, &world));
    CHECK_MPI(MPI_Comm_rank(MPI_COMM_WORLD, &me));
    if (world != WORLD || me != RANK)
        rt_die("launched as rank %d of %d, but this binary is rank %d of %d: use run.sh (mpirun -np %d)", me, world,
               RANK, WORLD, WORLD);
#if !defined(O2S_CUDA)
    rt_init_mpi_types();
#endif
}
#endif

/* ---- flags ---- */

typedef struct RtArgs {
    const char *in_name[64], *in_path[64], *out_name[64], *out_path[64];
    const char *trace; /* --trace FILE, or NULL */
    int nin, nout, iters;
    long steps, log_every; /* training programs: --steps N (1), --log-every K (1) */
    const char *save, *resume; /* --save DIR, --resume DIR, or NULL */
    long save_every;           /* --save-every K: also every K steps (0: at the end only) */
    int stats;                 /* --stats: the mixture-of-experts counters of the last forward() */
} RtArgs;

#define RT_MAX_ITERS 1000000000
#define RT_MAX_TIMEOUT 86400

/* An output goes to a temporary name in the same folder and is renamed
 * over the final one: the folder must be writable, and the final name may
 * not be a folder. */
static inline void rt_check_writable(const char *what, const char *path)
{
    const char *slash = strrchr(path, '/');
    char dir[4096];
    snprintf(dir, sizeof dir, "%.*s", slash ? (int)(slash - path) + (slash == path) : 1, slash ? path : ".");
    struct stat st;
    if (strlen(path) > 4000 || access(dir, W_OK) != 0)
        rt_die("%s: cannot write into %s: %s", what, dir, strlen(path) > 4000 ? "path too long" : strerror(errno));
    if (lstat(path, &st) == 0 && S_ISDIR(st.st_mode))
        rt_die("%s: is a folder", what);
}

static inline long rt_parse_int(const char *flag, const char *s, long lo, long hi)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (end == s || *end || errno || v < lo || v > hi)
        rt_die("%s %s: expected an integer from %ld to %ld", flag, s, lo, hi);
    return v;
}

/* Parses and checks every flag before any MPI work, so a typo costs
 * nothing and no rank waits on one that exited. `inputs` and `outputs`
 * are the model's names (NULL-terminated). */
static inline void rt_parse_args(int argc, char **argv, RtArgs *a, const char *const *inputs,
                                 const char *const *outputs)
{
    memset(a, 0, sizeof *a);
    a->steps = a->log_every = 1;
    for (int i = 1; i < argc; i++) {
        const char *flag = argv[i];
        if ((strcmp(flag, "--steps") == 0 || strcmp(flag, "--log-every") == 0 || strcmp(flag, "--save-every") == 0) &&
            i + 1 < argc) {
            long v = rt_parse_int(flag, argv[++i], 1, RT_MAX_ITERS);
            *(flag[3] == 't' ? &a->steps : flag[3] == 'o' ? &a->log_every : &a->save_every) = v;
            continue;
        }
        if (strcmp(flag, "--stats") == 0) {
            a->stats = 1;
            continue;
        }
        if ((strcmp(flag, "--save") == 0 || strcmp(flag, "--resume") == 0) && i + 1 < argc) {
            *(flag[2] == 's' ? &a->save : &a->resume) = argv[++i];
            continue;
        }
        int is_in = strcmp(flag, "--in") == 0, is_out = strcmp(flag, "--out") == 0;
        int is_iters = strcmp(flag, "--iters") == 0, is_timeout = strcmp(flag, "--timeout") == 0;
        int is_trace = strcmp(flag, "--trace") == 0, is_comms = strcmp(flag, "--comms") == 0;
        if ((!is_in && !is_out && !is_iters && !is_timeout && !is_trace && !is_comms) || i + 1 >= argc)
            rt_die("usage: %s [--in NAME=FILE]... [--out NAME=FILE.npy]... [--iters N] [--timeout S] "
                   "[--trace FILE.json] [--comms overlap|unprogressed|serial] [--steps N] [--log-every K] [--save DIR] [--save-every K] [--resume DIR] [--stats] (bad argument \"%s\")", argv[0], flag);
        char *arg = argv[++i];
        if (is_iters) {
            a->iters = (int)rt_parse_int(flag, arg, 1, RT_MAX_ITERS);
            continue;
        }
        if (is_timeout) {
            rt_timeout_s = (int)rt_parse_int(flag, arg, 0, RT_MAX_TIMEOUT);
            continue;
        }
        if (is_trace) {
            char what[4100];
            snprintf(what, sizeof what, "--trace %s", arg);
            rt_check_writable(what, arg);
            a->trace = arg;
            continue;
        }
        if (is_comms) {
            int k = 0;
            while (k < 3 && strcmp(arg, rt_comms_names[k]) != 0)
                k++;
            if (k == 3)
                rt_die("--comms %s: expected overlap, unprogressed or serial", arg);
            rt_comms_mode = k;
            continue;
        }
        char *eq = strchr(arg, '=');
        if (!eq || eq == arg || !eq[1])
            rt_die("%s %s: expected NAME=FILE", flag, arg);
        *eq = 0;
        int known = 0;
        for (const char *const *n = is_in ? inputs : outputs; *n; n++)
            known |= strcmp(*n, arg) == 0;
        if (!known)
            rt_die("%s %s: the model has no %s of that name", flag, arg, is_in ? "input" : "output");
        if ((is_in ? a->nin : a->nout) == 64)
            rt_die("%s: more than 64 of them", flag);
        if (is_in) {
            a->in_name[a->nin] = arg;
            a->in_path[a->nin++] = eq + 1;
            continue;
        }
        char what[4200];
        snprintf(what, sizeof what, "--out %s=%s", arg, eq + 1);
        rt_check_writable(what, eq + 1);
        a->out_name[a->nout] = arg;
        a->out_path[a->nout++] = eq + 1;
    }
}

/* The learning-rate factor of optimizer step `step` (1, 2, ...), as
 * Hugging Face's schedules count them (s = step - 1, so a warm-up's first
 * step has factor 0): a linear warm-up s / warmup over the first warmup
 * steps, then 1 (constant) or 0.5 (1 + cos(pi p)) with p the progress from
 * the warm-up's end to total (cosine, 0 from total on). */
static inline float rt_lr_factor(int64_t step, int64_t warmup, int64_t total, int cosine)
{
    int64_t s = step - 1;
    if (s < warmup)
        return (float)s / (float)warmup;
    if (!cosine)
        return 1.0f;
    if (total <= warmup || s >= total)
        return 0.0f;
    double p = (double)(s - warmup) / (double)(total - warmup);
    return (float)(0.5 * (1.0 + cos(3.14159265358979323846 * p)));
}

/* ---- checkpoints (--save DIR, --resume DIR): training programs ----
 *
 * A checkpoint is DIR/step<N>/rank<k>.ckpt for every rank, each this
 * rank's whole weight blob (its shards of the weights and of the optimizer
 * state, which the compiler stores beside them) after step N, behind a
 * header: magic, rank, world, step, bytes and FNV-1a checksum. Each rank
 * writes into DIR/step<N>.tmp/ (each file under a temporary name, renamed
 * when complete); once every rank has written (a barrier), rank 0 renames
 * the folder to step<N> and then points DIR/latest at it, the same way.
 * A crash at any point leaves the previous checkpoint whole and latest
 * naming it: a torn checkpoint is never what --resume reads. Only the
 * latest step is kept. */
#define RT_CKPT_MAGIC "O2SCKPT2"

static inline void rt_ckpt_write(const char *dir, int rank, int world, long step, const void *blob, size_t bytes)
{
    char tmpdir[4200], path[4300], part[4400];
    if (mkdir(dir, 0777) != 0 && errno != EEXIST)
        rt_die("--save %s: cannot create the folder: %s", dir, strerror(errno));
    snprintf(tmpdir, sizeof tmpdir, "%s/step%ld.tmp", dir, step);
    if (mkdir(tmpdir, 0777) != 0 && errno != EEXIST)
        rt_die("--save %s: cannot create %s: %s", dir, tmpdir, strerror(errno));
    snprintf(path, sizeof path, "%s/rank%d.ckpt", tmpdir, rank);
    snprintf(part, sizeof part, "%s.part", path);
    FILE *f = fopen(part, "wb");
    if (!f)
        rt_die("--save %s: cannot write %s: %s", dir, part, strerror(errno));
    unsigned char hdr[48];
    int64_t r = rank, w = world, st = step;
    uint64_t b = bytes, sum = rt_hash64((const unsigned char *)blob, bytes);
    memcpy(hdr, RT_CKPT_MAGIC, 8);
    memcpy(hdr + 8, &r, 8);
    memcpy(hdr + 16, &w, 8);
    memcpy(hdr + 24, &st, 8);
    memcpy(hdr + 32, &b, 8);
    memcpy(hdr + 40, &sum, 8);
    if (fwrite(hdr, 1, sizeof hdr, f) != sizeof hdr || fwrite(blob, 1, bytes, f) != bytes || fflush(f) != 0 ||
        fsync(fileno(f)) != 0) {
        fclose(f);
        rt_die("--save %s: writing %s failed: %s", dir, part, strerror(errno));
    }
    if (fclose(f) != 0 || rename(part, path) != 0)
        rt_die("--save %s: writing %s failed: %s", dir, path, strerror(errno));
}

/* Rank 0, after every rank's rt_ckpt_write: step<N>.tmp becomes step<N>,
 * then latest names it. */
static inline void rt_ckpt_publish(const char *dir, long step)
{
    char tmpdir[4200], final[4200], latest[4200], part[4300];
    snprintf(tmpdir, sizeof tmpdir, "%s/step%ld.tmp", dir, step);
    snprintf(final, sizeof final, "%s/step%ld", dir, step);
    snprintf(latest, sizeof latest, "%s/latest", dir);
    snprintf(part, sizeof part, "%s.part", latest);
    struct stat st;
    if (stat(final, &st) == 0) { /* an earlier save of the same step: replaced */
        char old[4300];
        snprintf(old, sizeof old, "%s.old", final);
        if (rename(final, old) != 0)
            rt_die("--save %s: cannot replace %s: %s", dir, final, strerror(errno));
        DIR *dd = opendir(old);
        struct dirent *e;
        while (dd && (e = readdir(dd))) {
            char f[4600];
            snprintf(f, sizeof f, "%s/%s", old, e->d_name);
            if (e->d_name[0] != '.')
                unlink(f);
        }
        if (dd)
            closedir(dd);
        rmdir(old);
    }
    if (rename(tmpdir, final) != 0)
        rt_die("--save %s: cannot rename %s: %s", dir, tmpdir, strerror(errno));
    FILE *f = fopen(part, "w");
    if (!f || fprintf(f, "step%ld\n", step) < 0 || fflush(f) != 0 || fsync(fileno(f)) != 0 || fclose(f) != 0 ||
        rename(part, latest) != 0)
        rt_die("--save %s: cannot write %s: %s", dir, latest, strerror(errno));
    /* Only the latest is kept: earlier steps (and what a crashed save left)
     * go once the new one is in place. */
    DIR *dd = opendir(dir);
    struct dirent *e;
    char keep[64];
    snprintf(keep, sizeof keep, "step%ld", step);
    while (dd && (e = readdir(dd))) {
        if (strncmp(e->d_name, "step", 4) != 0 || strcmp(e->d_name, keep) == 0)
            continue;
        char sub[4600];
        snprintf(sub, sizeof sub, "%s/%s", dir, e->d_name);
        DIR *sd = opendir(sub);
        struct dirent *fe;
        while (sd && (fe = readdir(sd))) {
            char fp[4900];
            snprintf(fp, sizeof fp, "%s/%s", sub, fe->d_name);
            if (fe->d_name[0] != '.')
                unlink(fp);
        }
        if (sd)
            closedir(sd);
        rmdir(sub);
    }
    if (dd)
        closedir(dd);
}

/* --resume DIR: this rank's blob of DIR/latest, checked against this
 * program (rank, world, size, checksum); returns the step it was saved at. */
static inline long rt_ckpt_read(const char *dir, int rank, int world, void *blob, size_t bytes)
{
    char latest[4200], name[256] = "", path[4600];
    snprintf(latest, sizeof latest, "%s/latest", dir);
    FILE *f = fopen(latest, "r");
    if (!f || !fgets(name, sizeof name, f) || strncmp(name, "step", 4) != 0)
        rt_die("--resume %s: no checkpoint (%s is missing or unreadable)", dir, latest);
    fclose(f);
    name[strcspn(name, "\n")] = 0;
    if (strchr(name, '/'))
        rt_die("--resume %s: %s names %s, not a step folder", dir, latest, name);
    snprintf(path, sizeof path, "%s/%s/rank%d.ckpt", dir, name, rank);
    size_t size;
    int fd = rt_open_regular(path, "checkpoint ", &size);
    unsigned char hdr[48];
    if (size < sizeof hdr)
        rt_die("checkpoint %s: not an onnx2spmd checkpoint", path);
    rt_read_all(fd, hdr, sizeof hdr, "checkpoint ", path);
    int64_t r, w, st;
    uint64_t b, sum;
    memcpy(&r, hdr + 8, 8);
    memcpy(&w, hdr + 16, 8);
    memcpy(&st, hdr + 24, 8);
    memcpy(&b, hdr + 32, 8);
    memcpy(&sum, hdr + 40, 8);
    if (memcmp(hdr, RT_CKPT_MAGIC, 8) != 0)
        rt_die("checkpoint %s: not an onnx2spmd checkpoint", path);
    if (r != rank || w != world)
        rt_die("checkpoint %s: saved by rank %lld of %lld, this is rank %d of %d", path, (long long)r, (long long)w,
               rank, world);
    if (b != bytes || size - sizeof hdr != bytes)
        rt_die("checkpoint %s: holds %llu bytes, this program's weights and optimizer state are %zu (another "
               "compile?)", path, (unsigned long long)b, bytes);
    rt_read_all(fd, (unsigned char *)blob, bytes, "checkpoint ", path);
    close(fd);
    if (rt_hash64((const unsigned char *)blob, bytes) != sum)
        rt_die("checkpoint %s: checksum mismatch (corrupt)", path);
    if (st < 0)
        rt_die("checkpoint %s: step %lld", path, (long long)st);
    return (long)st;
}

/* The FILE of --in/--out NAME=FILE, or NULL. */
static inline const char *rt_find_arg(const char *const *names, const char *const *paths, int n, const char *name)
{
    for (int i = 0; i < n; i++)
        if (strcmp(names[i], name) == 0)
            return paths[i];
    return NULL;
}

#ifndef O2S_CUDA
/* Rank-group communicator: ranks that differ only in the given axes,
 * ordered by `key` (the group coordinate, major axis first). */
static inline MPI_Comm rt_comm_split_from(MPI_Comm parent, int color, int key)
{
    MPI_Comm c;
    CHECK_MPI_WATCHED(MPI_Comm_split(parent, color, key, &c), "MPI_Comm_split (communicator set-up)");
    return c;
}

static inline MPI_Comm rt_comm_split(int color, int key)
{
    return rt_comm_split_from(MPI_COMM_WORLD, color, key);
}
#endif
