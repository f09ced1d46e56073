/* graph.c: tensors, nodes, attributes, the op table and topological order.
 *
 * Tensors are found by name through an open-addressing hash owned by the
 * graph arena. graph_toposort() runs Kahn's algorithm keeping the model's
 * own order among ready nodes (a min-heap of node indices, so any input
 * order costs O(n log n)), so an already-sorted graph is unchanged and
 * the result is deterministic; a cycle is reported by walking back from a
 * node that never became ready until a node repeats, which names a node
 * that really lies on the cycle (not merely downstream of it).
 */
#include "ir.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

const OpInfo op_table[OP_COUNT] = {
#define OP(e, nm, mi, ma, mo, mao, since, fn, rule, emit, fold, vjp) [e] = {nm, mi, ma, mo, mao, since, fn, fold, vjp},
#include "ops.def"
#undef OP
};

int op_from_name(const char *onnx_name)
{
    /* Ops the compiler makes itself (since_opset 0: the optimizer
     * updates of --train) are never read from a model. */
    for (int i = 0; i < OP_COUNT; i++)
        if (op_table[i].since_opset > 0 && strcmp(op_table[i].name, onnx_name) == 0)
            return i;
    return -1;
}

const char *node_op_name(const Node *n)
{
    return n->op == OP_UNSUPPORTED && n->op_type ? n->op_type : op_table[n->op].name;
}

/* ---- dtypes ------------------------------------------------------------- */

static const char *const onnx_dtype_names[] = {
    "undefined", "float32", "uint8", "int8", "uint16", "int16", "int32",
    "int64", "string", "bool", "float16", "float64", "uint32", "uint64",
    "complex64", "complex128", "bfloat16", "float8e4m3fn", "float8e4m3fnuz",
    "float8e5m2", "float8e5m2fnuz", "uint4", "int4", "float4e2m1",
    "float8e8m0", "uint2", "int2",
};

const char *dtype_onnx_name(int t)
{
    int n = (int)(sizeof(onnx_dtype_names) / sizeof(onnx_dtype_names[0]));
    return t >= 0 && t < n ? onnx_dtype_names[t] : "unknown";
}

const char *dtype_name(DType t)
{
    return dtype_onnx_name((int)t);
}

size_t dtype_size(DType t)
{
    switch (t) {
    case DT_F32: case DT_I32: case DT_U32: return 4;
    case DT_I64: case DT_F64: return 8;
    case DT_BOOL: case DT_U8: case DT_I8: return 1;
    case DT_F16: case DT_BF16: case DT_I16: case DT_U16: return 2;
    default: return 0;
    }
}

int dtype_supported(int t)
{
    return dtype_size((DType)t) != 0;
}

int dtype_is_float(DType t)
{
    return t == DT_F32 || t == DT_F16 || t == DT_BF16 || t == DT_F64;
}

int dtype_is_int(DType t)
{
    return t == DT_I64 || t == DT_I32 || t == DT_I16 || t == DT_I8 || t == DT_U32 || t == DT_U16 || t == DT_U8;
}

DType dtype_compute(DType t)
{
    return dtype_is_float(t) ? DT_F32 : dtype_is_int(t) ? DT_I64 : t;
}

/* IEEE binary16 and bfloat16 from and to float, round to nearest even;
 * NaN stays NaN, overflow becomes infinity, halves keep subnormals. */
static float bits_f32(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static uint32_t f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

float half_to_float(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000) << 16, e = (h >> 10) & 0x1f, m = h & 0x3ff;
    if (e == 0x1f)
        return bits_f32(sign | 0x7f800000u | (m << 13));
    if (e)
        return bits_f32(sign | ((e + 112) << 23) | (m << 13));
    float v = (float)m * 0x1p-24f; /* a subnormal (or zero): m * 2^-24, exact */
    return sign ? -v : v;
}

uint16_t float_to_half(float f)
{
    uint32_t u = f32_bits(f), au = u & 0x7fffffffu;
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000);
    if (au >= 0x7f800000u) /* inf or NaN (quiet) */
        return (uint16_t)(sign | 0x7c00 | (au > 0x7f800000u ? 0x200 : 0));
    if (au >= 0x477ff000u) /* rounds to 65520 or more: infinity */
        return (uint16_t)(sign | 0x7c00);
    if (au < 0x38800000u) {
        /* Below the smallest normal half: a subnormal, m * 2^-24. */
        float q = bits_f32(au) * 0x1p24f; /* exact; round to nearest even integer */
        uint32_t m = (uint32_t)q;
        float frac = q - (float)m;
        if (frac > 0.5f || (frac == 0.5f && (m & 1)))
            m++;
        return (uint16_t)(sign | m);
    }
    uint32_t r = au + 0xfff + ((au >> 13) & 1); /* round to nearest even at bit 13 */
    return (uint16_t)(sign | (((r >> 13) - (112u << 10)) & 0x7fff));
}

float bf16_to_float(uint16_t h)
{
    return bits_f32((uint32_t)h << 16);
}

uint16_t float_to_bf16(float f)
{
    uint32_t u = f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((u >> 16) | 0x40); /* quiet NaN */
    return (uint16_t)((u + 0x7fff + ((u >> 16) & 1)) >> 16);
}

/* double -> int64 without undefined behaviour: NaN is 0, out of range
 * saturates (the model's values are untrusted). */
static int64_t sat_i64(double v)
{
    if (v != v)
        return 0;
    if (v >= 9223372036854775807.0)
        return INT64_MAX;
    if (v <= -9223372036854775808.0)
        return INT64_MIN;
    return (int64_t)v;
}

double dtype_load(DType t, const void *p, int64_t i)
{
    const char *c = (const char *)p + (size_t)i * dtype_size(t);
    switch (t) {
    case DT_F32: { float v; memcpy(&v, c, 4); return v; }
    case DT_F64: { double v; memcpy(&v, c, 8); return v; }
    case DT_I64: { int64_t v; memcpy(&v, c, 8); return (double)v; }
    case DT_I32: { int32_t v; memcpy(&v, c, 4); return v; }
    case DT_F16: { uint16_t v; memcpy(&v, c, 2); return half_to_float(v); }
    case DT_BF16: { uint16_t v; memcpy(&v, c, 2); return bf16_to_float(v); }
    case DT_I16: { int16_t v; memcpy(&v, c, 2); return v; }
    case DT_U16: { uint16_t v; memcpy(&v, c, 2); return v; }
    case DT_U32: { uint32_t v; memcpy(&v, c, 4); return v; }
    case DT_I8: return (int8_t)*c;
    case DT_U8: return (uint8_t)*c;
    default: return *c != 0;
    }
}

void dtype_store(DType t, void *p, int64_t i, double v)
{
    char *c = (char *)p + (size_t)i * dtype_size(t);
    switch (t) {
    case DT_F32: { float f = (float)v; memcpy(c, &f, 4); break; }
    case DT_F64: memcpy(c, &v, 8); break;
    case DT_I64: { int64_t x = sat_i64(v); memcpy(c, &x, 8); break; }
    case DT_I32: { int64_t x = sat_i64(v); int32_t y = (int32_t)(uint32_t)(uint64_t)x; memcpy(c, &y, 4); break; }
    case DT_F16: { uint16_t h = float_to_half((float)v); memcpy(c, &h, 2); break; }
    case DT_BF16: { uint16_t h = float_to_bf16((float)v); memcpy(c, &h, 2); break; }
    case DT_I16: case DT_U16: { uint16_t y = (uint16_t)(uint64_t)sat_i64(v); memcpy(c, &y, 2); break; }
    case DT_U32: { uint32_t y = (uint32_t)(uint64_t)sat_i64(v); memcpy(c, &y, 4); break; }
    case DT_I8: case DT_U8: *c = (char)(uint8_t)(uint64_t)sat_i64(v); break;
    default: *c = v != 0; break;
    }
}

/* ---- graph and tensors -------------------------------------------------- */

Graph *graph_new(const char *path)
{
    Graph *g = calloc(1, sizeof(Graph));
    if (!g)
        abort();
    g->path = arena_strdup(&g->arena, path ? path : "<memory>");
    g->index_cap = 256;
    g->index = arena_alloc(&g->arena, (size_t)g->index_cap * sizeof(Tensor *));
    return g;
}

void *graph_zeros(Graph *g, size_t bytes)
{
    if (bytes < ((size_t)1 << 20))
        return arena_alloc(&g->arena, bytes ? bytes : 1);
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
        fprintf(stderr, "onnx2spmd: out of memory (%zu bytes)\n", bytes);
        abort();
    }
    Mapping *m = arena_alloc(&g->arena, sizeof(Mapping));
    *m = (Mapping){NULL, p, bytes, g->maps};
    g->maps = m;
    return p;
}

void graph_free(Graph *g)
{
    if (!g)
        return;
    if (g->proto && g->proto_free)
        g->proto_free(g->proto);
    for (Mapping *m = g->maps; m; m = m->next)
        munmap(m->addr, m->len);
    arena_free(&g->arena);
    free(g);
}

static uint64_t name_hash(const char *s)
{
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

Tensor *graph_tensor_find(const Graph *g, const char *name)
{
    uint64_t mask = (uint64_t)g->index_cap - 1;
    for (uint64_t i = name_hash(name) & mask;; i = (i + 1) & mask) {
        Tensor *t = g->index[i];
        if (!t || strcmp(t->name, name) == 0)
            return t;
    }
}

static void index_insert(Graph *g, Tensor *t)
{
    uint64_t mask = (uint64_t)g->index_cap - 1;
    uint64_t i = name_hash(t->name) & mask;
    while (g->index[i])
        i = (i + 1) & mask;
    g->index[i] = t;
}

/* Grows an arena-backed pointer array by doubling (old storage stays in the
 * arena until the graph is freed; total waste is bounded by the final size). */
static void **grow(Arena *a, void **arr, int n, int *cap)
{
    if (n < *cap)
        return arr;
    int nc = *cap ? 2 * *cap : 16;
    void **na = arena_alloc(a, (size_t)nc * sizeof(void *));
    if (n)
        memcpy(na, arr, (size_t)n * sizeof(void *));
    *cap = nc;
    return na;
}

Tensor *graph_tensor_get(Graph *g, const char *name)
{
    Tensor *t = graph_tensor_find(g, name);
    if (t)
        return t;
    if (2 * (g->ntensors + 1) > g->index_cap) {
        g->index_cap *= 2;
        g->index = arena_alloc(&g->arena, (size_t)g->index_cap * sizeof(Tensor *));
        for (int i = 0; i < g->ntensors; i++)
            index_insert(g, g->tensors[i]);
    }
    t = arena_alloc(&g->arena, sizeof(Tensor));
    t->name = arena_strdup(&g->arena, name);
    t->label = esc_label(&g->arena, t->name);
    t->id = g->ntensors;
    t->rank = -1;
    t->decl_rank = -1;
    g->tensors = (Tensor **)grow(&g->arena, (void **)g->tensors, g->ntensors,
                                 &g->tensors_cap);
    g->tensors[g->ntensors++] = t;
    index_insert(g, t);
    return t;
}

Tensor *graph_tensor_fresh(Graph *g, const char *base)
{
    size_t len = strlen(base) + 24;
    char *buf = malloc(len);
    if (!buf)
        abort();
    snprintf(buf, len, "%s", base);
    for (int k = 1; graph_tensor_find(g, buf); k++)
        snprintf(buf, len, "%s.%d", base, k);
    Tensor *t = graph_tensor_get(g, buf);
    free(buf);
    return t;
}

Node *graph_node_add(Graph *g, OpKind op, const char *name)
{
    Node *n = arena_alloc(&g->arena, sizeof(Node));
    n->op = op;
    n->id = g->nnodes;
    if (name && *name) {
        n->name = arena_strdup(&g->arena, name);
    } else {
        char buf[96];
        snprintf(buf, sizeof(buf), "%s_%d", op_table[op].name, g->nnodes);
        n->name = arena_strdup(&g->arena, buf);
    }
    n->label = esc_label(&g->arena, n->name);
    g->nodes = (Node **)grow(&g->arena, (void **)g->nodes, g->nnodes, &g->nodes_cap);
    g->nodes[g->nnodes++] = n;
    return n;
}

Node *graph_node_make(Graph *g, OpKind op, const char *name, Tensor *const *in, int nin)
{
    Node *n = graph_node_add(g, op, name);
    n->inputs = arena_alloc(&g->arena, (size_t)nin * sizeof(Tensor *));
    memcpy(n->inputs, in, (size_t)nin * sizeof(Tensor *));
    n->ninputs = nin;
    n->outputs = arena_alloc(&g->arena, sizeof(Tensor *));
    n->outputs[0] = graph_tensor_fresh(g, n->name);
    n->outputs[0]->producer = n;
    n->noutputs = 1;
    return n;
}

int64_t tensor_numel(const Tensor *t)
{
    int64_t n = 1;
    for (int i = 0; i < t->rank; i++)
        n *= t->dims[i]; /* bounded by shape inference's checked product */
    return n;
}

/* ---- attributes --------------------------------------------------------- */

const Attr *node_attr(const Node *n, const char *name)
{
    for (int i = 0; i < n->nattrs; i++)
        if (strcmp(n->attrs[i].name, name) == 0)
            return &n->attrs[i];
    return NULL;
}

int64_t node_attr_int(const Node *n, const char *name, int64_t dflt)
{
    const Attr *a = node_attr(n, name);
    return a && a->type == ATTR_INT ? a->i : dflt;
}

float node_attr_float(const Node *n, const char *name, float dflt)
{
    const Attr *a = node_attr(n, name);
    return a && a->type == ATTR_FLOAT ? a->f : dflt;
}

const char *node_attr_str(const Node *n, const char *name, const char *dflt)
{
    const Attr *a = node_attr(n, name);
    return a && a->type == ATTR_STRING ? a->s : dflt;
}

/* The attribute called name, added (empty) when the node has none. */
static Attr *attr_get(Graph *g, Node *n, const char *name)
{
    Attr *a = (Attr *)node_attr(n, name);
    if (!a) {
        Attr *na = arena_alloc(&g->arena, (size_t)(n->nattrs + 1) * sizeof(Attr));
        if (n->nattrs)
            memcpy(na, n->attrs, (size_t)n->nattrs * sizeof(Attr));
        n->attrs = na;
        a = &na[n->nattrs++];
        a->name = arena_strdup(&g->arena, name);
    }
    return a;
}

void node_attr_set_floats(Graph *g, Node *n, const char *name, const float *vals, int count)
{
    Attr *a = attr_get(g, n, name);
    a->type = ATTR_FLOATS;
    a->n = count;
    a->floats = arena_alloc(&g->arena, (size_t)(count ? count : 1) * sizeof(float));
    if (count)
        memcpy(a->floats, vals, (size_t)count * sizeof(float));
}

void node_attr_set_int(Graph *g, Node *n, const char *name, int64_t val)
{
    Attr *a = attr_get(g, n, name);
    a->type = ATTR_INT;
    a->i = val;
}

void node_attr_set_float(Graph *g, Node *n, const char *name, float val)
{
    Attr *a = attr_get(g, n, name);
    a->type = ATTR_FLOAT;
    a->f = val;
}

void node_attr_set_str(Graph *g, Node *n, const char *name, const char *val)
{
    Attr *a = attr_get(g, n, name);
    a->type = ATTR_STRING;
    a->s = arena_strdup(&g->arena, val);
}

void node_attr_set_ints(Graph *g, Node *n, const char *name,
                        const int64_t *vals, int count)
{
    Attr *a = attr_get(g, n, name);
    a->type = ATTR_INTS;
    a->n = count;
    a->ints = arena_alloc(&g->arena, (size_t)(count ? count : 1) * sizeof(int64_t));
    if (count)
        memcpy(a->ints, vals, (size_t)count * sizeof(int64_t));
}

char *shape_str(const int64_t *dims, int rank, char *buf, size_t cap)
{
    if (rank < 0) { /* after an unsupported op (inspect only) */
        snprintf(buf, cap, "?");
        return buf;
    }
    size_t off = 0;
    off += (size_t)snprintf(buf + off, cap - off, "[");
    for (int i = 0; i < rank && off < cap; i++)
        off += (size_t)snprintf(buf + off, cap - off, "%s%lld", i ? ", " : "",
                                (long long)dims[i]);
    if (off < cap)
        snprintf(buf + off, cap - off, "]");
    return buf;
}

/* ---- order -------------------------------------------------------------- */

/* Min-heap of node indices: the ready node that comes first in the model. */
static void heap_push(int *h, int *n, int v)
{
    int i = (*n)++;
    for (; i > 0 && h[(i - 1) / 2] > v; i = (i - 1) / 2)
        h[i] = h[(i - 1) / 2];
    h[i] = v;
}

static int heap_pop(int *h, int *n)
{
    int top = h[0], v = h[--*n], i = 0;
    for (;;) {
        int c = 2 * i + 1;
        if (c >= *n)
            break;
        if (c + 1 < *n && h[c + 1] < h[c])
            c++;
        if (h[c] >= v)
            break;
        h[i] = h[c];
        i = c;
    }
    h[i] = v;
    return top;
}

void graph_link_consumers(Graph *g)
{
    for (int i = 0; i < g->ntensors; i++) {
        g->tensors[i]->nconsumers = 0;
        g->tensors[i]->consumers = NULL;
    }
    for (int i = 0; i < g->nnodes; i++)
        for (int j = 0; j < g->nodes[i]->ninputs; j++)
            if (g->nodes[i]->inputs[j])
                g->nodes[i]->inputs[j]->nconsumers++;
    for (int i = 0; i < g->ntensors; i++) {
        Tensor *t = g->tensors[i];
        if (t->nconsumers)
            t->consumers = arena_alloc(&g->arena, (size_t)t->nconsumers * sizeof(Node *));
        t->nconsumers = 0;
    }
    for (int i = 0; i < g->nnodes; i++) {
        Node *n = g->nodes[i];
        for (int j = 0; j < n->ninputs; j++) {
            Tensor *t = n->inputs[j];
            /* A node reading the same tensor twice is one consumer. */
            if (t && (t->nconsumers == 0 || t->consumers[t->nconsumers - 1] != n))
                t->consumers[t->nconsumers++] = n;
        }
    }
}

int graph_toposort(Graph *g, Diag *d)
{
    int nn = g->nnodes, rc = -1;
    int *pending = calloc((size_t)nn + 1, sizeof(int));
    Node **order = calloc((size_t)nn + 1, sizeof(Node *));
    int *ready = calloc((size_t)nn + 1, sizeof(int));
    if (!pending || !order || !ready)
        abort();
    for (int i = 0; i < nn; i++)
        g->nodes[i]->id = i;
    graph_link_consumers(g);
    /* pending[i]: inputs of node i whose producer has not been placed yet. */
    for (int i = 0; i < nn; i++) {
        Node *n = g->nodes[i];
        for (int j = 0; j < n->ninputs; j++)
            if (n->inputs[j] && n->inputs[j]->producer)
                pending[i]++;
    }
    /* Ready nodes are taken lowest model index first. A scan from a cursor
     * that moves back to each newly ready node would be quadratic when the
     * model lists its nodes out of order (each placement can send it back
     * and forth across the graph); the heap is O(log n) per node and, for
     * a sorted model, never holds more than a few. */
    int nready = 0, placed = 0;
    for (int i = 0; i < nn; i++)
        if (!pending[i])
            heap_push(ready, &nready, i);
    while (nready) {
        int i = heap_pop(ready, &nready);
        Node *n = g->nodes[i];
        order[placed++] = n;
        pending[i] = -1;
        for (int k = 0; k < n->noutputs; k++) {
            Tensor *t = n->outputs[k];
            if (!t)
                continue;
            for (int c = 0; c < t->nconsumers; c++) {
                Node *u = t->consumers[c];
                for (int j = 0; j < u->ninputs; j++)
                    if (u->inputs[j] == t && --pending[u->id] == 0)
                        heap_push(ready, &nready, u->id);
            }
        }
    }
    if (placed < nn) {
        /* Walk back through unplaced producers; the walk must revisit a node
         * within nn steps, and that node lies on a cycle. */
        Node *n = NULL;
        for (int i = 0; i < nn && !n; i++)
            if (pending[i] > 0)
                n = g->nodes[i];
        int *seen = calloc((size_t)nn, sizeof(int));
        if (!seen)
            abort();
        while (!seen[n->id]) {
            seen[n->id] = 1;
            Node *prev = NULL;
            for (int j = 0; j < n->ninputs && !prev; j++) {
                Tensor *t = n->inputs[j];
                if (t && t->producer && pending[t->producer->id] > 0)
                    prev = t->producer;
            }
            IR_ASSERT(prev);
            n = prev;
        }
        free(seen);
        diag_add(d, "node \"%s\" (%s): lies on a cycle in the graph", n->name,
                 node_op_name(n));
        goto cleanup;
    }
    if (nn > 0)
        memcpy(g->nodes, order, (size_t)nn * sizeof(Node *));
    for (int i = 0; i < nn; i++)
        g->nodes[i]->id = i;
    rc = 0;
cleanup:
    free(pending);
    free(order);
    free(ready);
    return rc;
}

void graph_last_readers(const Graph *g, int *last)
{
    for (int i = 0; i < g->ntensors; i++)
        last[i] = -1;
    for (int ni = 0; ni < g->nnodes; ni++)
        for (int k = 0; k < g->nodes[ni]->ninputs; k++)
            if (g->nodes[ni]->inputs[k])
                last[g->nodes[ni]->inputs[k]->id] = ni;
    for (int i = 0; i < g->noutputs; i++)
        last[g->outputs[i]->id] = g->nnodes;
}
