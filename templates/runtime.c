/* ---- onnx2spmd runtime (templates/runtime.c) ------------------------------
 * Error handling, tensor files (.npy and ONNX TensorProto .pb), the weight
 * file, command-line flags and timing. Every MPI call goes through
 * CHECK_MPI; any failure prints one line naming the rank, the call, the
 * ONNX node being run and the source line, then aborts the whole job so
 * that no peer is left blocked in a collective.
 */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef O2S_CUDA
#include <cblas.h>
#endif
/* The C API only: MPI's C++ bindings are deprecated and warn under nvcc. */
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>

static const char *rt_node = "(startup)"; /* ONNX node now running, for errors */
static void rt_abort_comms(void); /* CUDA: aborts NCCL communicators first */

static inline void rt_die(const char *fmt, ...) __attribute__((noreturn, format(printf, 1, 2)));
static inline void rt_die(const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    fprintf(stderr, "rank %d: error: %s\n", RANK, msg);
    fflush(stderr);
    rt_abort_comms();
    MPI_Abort(MPI_COMM_WORLD, 1);
    exit(1);
}

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

static inline void *rt_alloc(size_t bytes)
{
    void *p = NULL;
    if (posix_memalign(&p, 64, bytes ? bytes : 64) != 0)
        rt_die("out of memory (%zu bytes)", bytes);
    memset(p, 0, bytes ? bytes : 64);
    return p;
}

/* ---- tensor files ---- */

enum { RT_F32 = 1, RT_I64 = 7, RT_BOOL = 9 };

typedef struct RtTensor {
    int dtype;
    int rank;
    int64_t dims[8];
    void *data;
    size_t bytes;
} RtTensor;

static inline size_t rt_dtype_size(int dt)
{
    return dt == RT_F32 ? 4 : dt == RT_I64 ? 8 : 1;
}

static inline const char *rt_dtype_name(int dt)
{
    return dt == RT_F32 ? "float32" : dt == RT_I64 ? "int64" : dt == RT_BOOL ? "bool" : "unsupported";
}

static inline unsigned char *rt_read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        rt_die("cannot open %s: %s", path, strerror(errno));
    if (fseek(f, 0, SEEK_END) != 0)
        rt_die("cannot read %s", path);
    long n = ftell(f);
    rewind(f);
    unsigned char *buf = (unsigned char *)rt_alloc((size_t)(n > 0 ? n : 1));
    if (n < 0 || fread(buf, 1, (size_t)n, f) != (size_t)n)
        rt_die("cannot read %s", path);
    fclose(f);
    *len = (size_t)n;
    return buf;
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
    if (off + hlen > len)
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
    if (strstr(d, "'<f4'") == d + 9)
        t->dtype = RT_F32;
    else if (strstr(d, "'<i8'") == d + 9)
        t->dtype = RT_I64;
    else if (strstr(d, "'|b1'") == d + 9)
        t->dtype = RT_BOOL;
    else
        rt_die("%s: dtype %.8s is not supported (float32 <f4, int64 <i8, bool |b1)", path, d + 9);
    const char *p = strchr(sh, '(');
    t->rank = 0;
    for (p = p ? p + 1 : sh; *p && *p != ')';) {
        while (*p == ' ' || *p == ',')
            p++;
        if (*p == ')')
            break;
        if (t->rank == 8)
            rt_die("%s: more than 8 dims", path);
        t->dims[t->rank++] = strtoll(p, (char **)&p, 10);
    }
    size_t n = rt_dtype_size(t->dtype);
    for (int i = 0; i < t->rank; i++)
        n *= (size_t)t->dims[i];
    if (off + hlen + n != len)
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
            else if ((field == 7 || field == 5) && npacked_ints < (1 << 12)) {
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
            } else if (field == 4 || field == 5 || field == 7) {
                typed = p;
                typed_len = n;
                typed_field = field;
            }
            p += n;
        } else if (wire == 5) {
            p += 4;
        } else if (wire == 1) {
            p += 8;
        } else {
            rt_die("%s: unsupported protobuf wire type %d", path, wire);
        }
    }
    if (t->dtype != RT_F32 && t->dtype != RT_I64 && t->dtype != RT_BOOL)
        rt_die("%s: dtype %d is not supported", path, t->dtype);
    size_t numel = 1;
    for (int i = 0; i < t->rank; i++)
        numel *= (size_t)t->dims[i];
    t->bytes = numel * rt_dtype_size(t->dtype);
    t->data = rt_alloc(t->bytes);
    if (raw) {
        if (raw_len != t->bytes)
            rt_die("%s: raw_data holds %zu bytes, shape needs %zu", path, raw_len, t->bytes);
        memcpy(t->data, raw, raw_len);
    } else if (typed && typed_field == 4 && t->dtype == RT_F32 && typed_len == t->bytes) {
        memcpy(t->data, typed, typed_len);
    } else if (typed && (typed_field == 7 || typed_field == 5)) {
        const unsigned char *q = typed;
        for (size_t i = 0; i < numel; i++) {
            int64_t v = (int64_t)rt_varint(&q, typed + typed_len, path);
            if (t->dtype == RT_I64)
                ((int64_t *)t->data)[i] = v;
            else
                ((unsigned char *)t->data)[i] = v != 0;
        }
    } else if (npacked_ints == (int)numel) {
        for (size_t i = 0; i < numel; i++) {
            if (t->dtype == RT_I64)
                ((int64_t *)t->data)[i] = ints[i];
            else
                ((unsigned char *)t->data)[i] = ints[i] != 0;
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
                       dtype == RT_F32 ? "<f4" : dtype == RT_I64 ? "<i8" : "|b1", shape);
    int total = 10 + len + 1, pad = (64 - total % 64) % 64;
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "wb");
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
    if (fwrite(data, 1, n, f) != n || fclose(f) != 0 || rename(tmp, path) != 0)
        rt_die("cannot write %s: %s", path, strerror(errno));
}

/* Copies this rank's block of a full tensor: per dim, nshards[i] equal
 * blocks of which this rank holds block index[i]. */
static inline void rt_take_block(void *dst, const void *src, int rank, const int64_t *gdims, const int64_t *nshards,
                          const int64_t *index, size_t elsize)
{
    int64_t ldims[8], inner = (int64_t)elsize;
    int last = rank - 1;
    for (int i = 0; i < rank; i++)
        ldims[i] = gdims[i] / nshards[i];
    if (rank == 0) {
        memcpy(dst, src, elsize);
        return;
    }
    int64_t rows = 1;
    for (int i = 0; i < last; i++)
        rows *= ldims[i];
    size_t row_bytes = (size_t)(ldims[last] * inner);
    for (int64_t r = 0; r < rows; r++) {
        int64_t rem = r, goff = 0, stride = 1;
        int64_t gstride[8];
        for (int i = last; i >= 0; i--) {
            gstride[i] = stride;
            stride *= gdims[i];
        }
        for (int i = last - 1; i >= 0; i--) {
            int64_t li = rem % ldims[i];
            rem /= ldims[i];
            goff += (index[i] * ldims[i] + li) * gstride[i];
        }
        goff += index[last] * ldims[last];
        memcpy((char *)dst + (size_t)r * row_bytes, (const char *)src + (size_t)goff * elsize, row_bytes);
    }
}

/* ---- weights: one file per rank, checked by size and FNV-1a checksum ---- */

static inline uint64_t rt_fnv1a(const unsigned char *p, size_t n)
{
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ p[i]) * 1099511628211ull;
    return h;
}

/* The weight file sits next to the binary, wherever it is run from. */
static inline unsigned char *rt_load_weights(const char *argv0, const char *name, size_t want_bytes, uint64_t want_sum)
{
    char path[4096];
    const char *slash = strrchr(argv0, '/');
    if (slash)
        snprintf(path, sizeof path, "%.*s/%s", (int)(slash - argv0), argv0, name);
    else
        snprintf(path, sizeof path, "%s", name);
    FILE *f = fopen(path, "rb");
    if (!f)
        rt_die("weight file %s: %s", path, strerror(errno));
    unsigned char hdr[24];
    if (fread(hdr, 1, 24, f) != 24 || memcmp(hdr, "O2SPMDW1", 8) != 0)
        rt_die("weight file %s: not an onnx2spmd weight file", path);
    uint64_t bytes, sum;
    memcpy(&bytes, hdr + 8, 8);
    memcpy(&sum, hdr + 16, 8);
    if (bytes != want_bytes)
        rt_die("weight file %s: holds %llu bytes, this rank needs %zu", path, (unsigned long long)bytes, want_bytes);
    unsigned char *w = (unsigned char *)rt_alloc(want_bytes);
    if (fread(w, 1, want_bytes, f) != want_bytes)
        rt_die("weight file %s: truncated", path);
    fclose(f);
    if (sum != want_sum || rt_fnv1a(w, want_bytes) != want_sum)
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

/* Starts MPI with errors returned (so CHECK_MPI can name them) and checks
 * that this binary runs as the rank it was generated for. */
static inline void rt_init_mpi(int *argc, char ***argv)
{
    int world = 0, me = -1;
    CHECK_MPI(MPI_Init(argc, argv));
    CHECK_MPI(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
    CHECK_MPI(MPI_Comm_size(MPI_COMM_WORLD, &world));
    CHECK_MPI(MPI_Comm_rank(MPI_COMM_WORLD, &me));
    if (world != WORLD || me != RANK)
        rt_die("launched as rank %d of %d, but this binary is rank %d of %d: use run.sh (mpirun -np %d)", me, world,
               RANK, WORLD, WORLD);
}

/* ---- flags ---- */

typedef struct RtArgs {
    const char *in_name[64], *in_path[64], *out_name[64], *out_path[64];
    int nin, nout, iters;
} RtArgs;

static inline void rt_parse_args(int argc, char **argv, RtArgs *a)
{
    memset(a, 0, sizeof *a);
    for (int i = 1; i < argc; i++) {
        const char *flag = argv[i];
        if (strcmp(flag, "--iters") == 0 && i + 1 < argc) {
            a->iters = atoi(argv[++i]);
            continue;
        }
        int is_in = strcmp(flag, "--in") == 0, is_out = strcmp(flag, "--out") == 0;
        if ((!is_in && !is_out) || i + 1 >= argc)
            rt_die("usage: %s [--in NAME=FILE]... [--out NAME=FILE.npy]... [--iters N] (bad argument \"%s\")",
                   argv[0], flag);
        char *arg = argv[++i], *eq = strchr(arg, '=');
        if (!eq)
            rt_die("%s %s: expected NAME=FILE", flag, arg);
        *eq = 0;
        if (is_in && a->nin < 64) {
            a->in_name[a->nin] = arg;
            a->in_path[a->nin++] = eq + 1;
        } else if (is_out && a->nout < 64) {
            a->out_name[a->nout] = arg;
            a->out_path[a->nout++] = eq + 1;
        }
    }
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
static inline MPI_Comm rt_comm_split(int color, int key)
{
    MPI_Comm c;
    CHECK_MPI(MPI_Comm_split(MPI_COMM_WORLD, color, key, &c));
    return c;
}
#endif
