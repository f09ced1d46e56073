/* wire.c: a pre-scan of the ModelProto bytes that bounds how deeply
 * messages nest, run before protobuf-c decodes them.
 *
 * protobuf-c unpacks (and frees) nested messages by recursion, one C stack
 * frame chain per level, and has no depth limit of its own: a small
 * hostile model with thousands of nested subgraph attributes overflows the
 * stack. Only a few ONNX message types can contain themselves, through
 * GraphProto -> NodeProto -> AttributeProto -> GraphProto (subgraphs) and
 * TypeProto -> Sequence/Map/Optional -> TypeProto (nested types); this scan
 * walks the protobuf wire format iteratively, with an explicit stack,
 * following only the fields on those paths (and the ModelProto fields that
 * lead to them: graph, training_info, functions) and skipping everything
 * else by its length. Each byte is read once, so the scan is linear.
 *
 * It assumes nothing about the bytes: a malformed tag, varint or length is
 * refused here with the same wording as a protobuf-c failure, and anything
 * the scan accepts is still fully checked by protobuf-c afterwards.
 */
#include "frontend.h"

#include <stddef.h>
#include <stdint.h>

/* The message types the scan follows. */
typedef enum WireKind {
    WK_MODEL,
    WK_TRAINING, /* TrainingInfoProto */
    WK_FUNCTION,
    WK_GRAPH,
    WK_NODE,
    WK_ATTR,
    WK_VALUE_INFO,
    WK_TYPE,
    WK_TYPE_WRAP, /* TypeProto.Sequence, .Map and .Optional */
} WireKind;

/* Which field of which message leads to which followed message. Fields
 * not listed are skipped whole. */
static const struct {
    WireKind in;
    uint32_t field;
    WireKind to;
} wire_edges[] = {
    {WK_MODEL, 7, WK_GRAPH},          /* graph */
    {WK_MODEL, 20, WK_TRAINING},      /* training_info */
    {WK_MODEL, 25, WK_FUNCTION},      /* functions */
    {WK_TRAINING, 1, WK_GRAPH},       /* initialization */
    {WK_TRAINING, 2, WK_GRAPH},       /* algorithm */
    {WK_FUNCTION, 7, WK_NODE},        /* node */
    {WK_FUNCTION, 11, WK_ATTR},       /* attribute_proto */
    {WK_FUNCTION, 12, WK_VALUE_INFO}, /* value_info */
    {WK_GRAPH, 1, WK_NODE},           /* node */
    {WK_GRAPH, 11, WK_VALUE_INFO},    /* input */
    {WK_GRAPH, 12, WK_VALUE_INFO},    /* output */
    {WK_GRAPH, 13, WK_VALUE_INFO},    /* value_info */
    {WK_NODE, 5, WK_ATTR},            /* attribute */
    {WK_ATTR, 6, WK_GRAPH},           /* g */
    {WK_ATTR, 11, WK_GRAPH},          /* graphs */
    {WK_ATTR, 14, WK_TYPE},           /* tp */
    {WK_ATTR, 15, WK_TYPE},           /* type_protos */
    {WK_VALUE_INFO, 2, WK_TYPE},      /* type */
    {WK_TYPE, 4, WK_TYPE_WRAP},       /* sequence_type */
    {WK_TYPE, 5, WK_TYPE_WRAP},       /* map_type */
    {WK_TYPE, 9, WK_TYPE_WRAP},       /* optional_type */
    {WK_TYPE_WRAP, 1, WK_TYPE},       /* Sequence/Optional elem_type */
    {WK_TYPE_WRAP, 2, WK_TYPE},       /* Map value_type */
};

/* Worst case of the stack: a model, a training info or function, the
 * main graph and its 64 levels of subgraphs at three messages each, then
 * an attribute's type of 64 levels of two messages each. */
#define WIRE_MAX_FRAMES (4 + 3 * (FRONTEND_MAX_GRAPH_DEPTH + 1) + 2 * FRONTEND_MAX_TYPE_DEPTH + 4)

typedef struct WireFrame {
    WireKind kind;
    size_t start, end; /* the message's bytes: buf[start, end) */
    int graphs, types; /* GraphProto and TypeProto frames up to this one */
} WireFrame;

/* Reads a varint at *pos (below end). -1 when it runs past end or is
 * longer than ten bytes or than 64 bits. */
static int wire_varint(const uint8_t *buf, size_t *pos, size_t end, uint64_t *out)
{
    uint64_t v = 0;
    for (int i = 0; i < 10; i++) {
        if (*pos >= end)
            return -1;
        uint8_t b = buf[(*pos)++];
        if (i == 9 && b > 1)
            return -1;
        v |= (uint64_t)(b & 0x7f) << (7 * i);
        if (!(b & 0x80)) {
            *out = v;
            return 0;
        }
    }
    return -1;
}

/* Moves *pos past the value of a field of the given wire type; for a
 * length-delimited one, *len gets its length and *pos stays at its first
 * byte. -1 on malformed input. */
static int wire_value(const uint8_t *buf, size_t *pos, size_t end, unsigned type,
                      uint64_t *len)
{
    uint64_t v;
    switch (type) {
    case 0: /* varint */
        return wire_varint(buf, pos, end, &v);
    case 1: /* 64-bit */
        if (end - *pos < 8)
            return -1;
        *pos += 8;
        return 0;
    case 2: /* length-delimited */
        if (wire_varint(buf, pos, end, len) || *len > end - *pos)
            return -1;
        return 0;
    case 5: /* 32-bit */
        if (end - *pos < 4)
            return -1;
        *pos += 4;
        return 0;
    default: /* groups (which protobuf-c refuses) and invalid types */
        return -1;
    }
}

/* Finds the last string field `field` directly inside buf[start, end) (the
 * last, as a decoder keeps it). Tolerates a malformed tail: it only
 * serves to name the culprit in a diagnostic. */
static int wire_find_string(const uint8_t *buf, size_t start, size_t end, uint32_t field,
                            const char **s, int *len)
{
    size_t pos = start;
    int found = 0;
    while (pos < end) {
        uint64_t tag, l = 0;
        if (wire_varint(buf, &pos, end, &tag) || wire_value(buf, &pos, end, tag & 7, &l))
            break;
        if ((tag & 7) != 2)
            continue;
        if (tag >> 3 == field) {
            *s = (const char *)buf + pos;
            *len = l > 200 ? 200 : (int)l; /* a name, not a novel */
            found = 1;
        }
        pos += (size_t)l;
    }
    return found;
}

/* Names the outermost node (or graph input, output or value_info) on the
 * way to frame `top`: the one a reader can find in the model. */
static void wire_too_deep(const uint8_t *buf, const WireFrame *st, int top, const char *what,
                          int limit, Diag *d)
{
    for (int i = 0; i <= top; i++) {
        const char *name = "", *op = "?";
        int nl = 0, ol = 1;
        if (st[i].kind == WK_NODE) {
            wire_find_string(buf, st[i].start, st[i].end, 3, &name, &nl);
            wire_find_string(buf, st[i].start, st[i].end, 4, &op, &ol);
            diag_add(d, "%s nested deeper than %d levels (under node \"%.*s\" (%.*s))", what,
                     limit, nl, name, ol, op);
            return;
        }
        if (st[i].kind == WK_VALUE_INFO) {
            wire_find_string(buf, st[i].start, st[i].end, 1, &name, &nl);
            diag_add(d, "%s nested deeper than %d levels (in the type of \"%.*s\")", what, limit,
                     nl, name);
            return;
        }
    }
    diag_add(d, "%s nested deeper than %d levels", what, limit);
}

int frontend_wire_check(const void *data, size_t len, Diag *d)
{
    const uint8_t *buf = data;
    WireFrame st[WIRE_MAX_FRAMES];
    int top = 0;
    size_t pos = 0;
    st[0] = (WireFrame){.kind = WK_MODEL, .start = 0, .end = len};
    for (;;) {
        WireFrame *f = &st[top];
        if (pos == f->end) {
            if (top == 0)
                return 0;
            top--;
            continue;
        }
        size_t at = pos;
        uint64_t tag, l = 0;
        if (wire_varint(buf, &pos, f->end, &tag) || tag >> 3 == 0 || tag >> 3 > 0x1fffffff ||
            wire_value(buf, &pos, f->end, tag & 7, &l)) {
            diag_add(d, "not a valid ONNX model (malformed protobuf at byte %zu; truncated or corrupt file?)",
                     at);
            return -1;
        }
        if ((tag & 7) != 2)
            continue;
        int follow = -1;
        for (size_t e = 0; e < sizeof wire_edges / sizeof wire_edges[0]; e++)
            if (wire_edges[e].in == f->kind && wire_edges[e].field == tag >> 3)
                follow = (int)wire_edges[e].to;
        if (follow < 0) {
            pos += (size_t)l;
            continue;
        }
        WireFrame nf = {.kind = (WireKind)follow, .start = pos, .end = pos + (size_t)l,
                        .graphs = f->graphs + (follow == WK_GRAPH),
                        .types = f->types + (follow == WK_TYPE)};
        if (nf.graphs - 1 > FRONTEND_MAX_GRAPH_DEPTH) { /* the main graph is no subgraph */
            wire_too_deep(buf, st, top, "subgraphs", FRONTEND_MAX_GRAPH_DEPTH, d);
            return -1;
        }
        if (nf.types > FRONTEND_MAX_TYPE_DEPTH) {
            wire_too_deep(buf, st, top, "types", FRONTEND_MAX_TYPE_DEPTH, d);
            return -1;
        }
        if (top + 1 >= WIRE_MAX_FRAMES) { /* unreachable by the bounds above */
            diag_add(d, "messages nested deeper than %d levels", WIRE_MAX_FRAMES);
            return -1;
        }
        st[++top] = nf;
    }
}
