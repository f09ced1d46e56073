/* frontend.h: ONNX models into the IR.
 *
 * Sections: load.c (decoding through protobuf-c, graph construction, the
 * whole import pipeline), wire.c (the nesting-depth pre-scan of the raw
 * bytes), tensor.c (TensorProto data, external data files), normalize.c
 * (folding opset variants into one form), moe_eager.c (an export style of
 * mixture-of-experts blocks into another).
 */
#ifndef ONNX2SPMD_FRONTEND_H
#define ONNX2SPMD_FRONTEND_H

#include "../ir/ir.h"

/* Lowest and highest default-domain opset accepted. */
#define FRONTEND_OPSET_MIN 7
#define FRONTEND_OPSET_MAX 27

/* A value for a symbolic input dim, from --dim NAME=VALUE. */
typedef struct DimBinding {
    const char *name;
    int64_t value;
} DimBinding;

/* A graph input fixed to a file's value, from --const NAME=FILE (consts.c). */
typedef struct ConstBinding {
    const char *name;
    const char *path;
} ConstBinding;

typedef struct FrontendOptions {
    const DimBinding *dims;
    int ndims;
    const ConstBinding *consts;
    int nconsts;
    /* inspect: keep nodes of unsupported ops (OP_UNSUPPORTED, shapes after
     * them unknown) instead of refusing the model. */
    int allow_unsupported;
    /* compile --decode --max-seq S: symbolic dims of the token ids,
     * positions, attention mask and past caches bound by their role
     * (load.c), where --dim does not bind them. 0: none. */
    int64_t decode_max_seq;
} FrontendOptions;

/* ---- consts.c ----------------------------------------------------------- */

/* Turns each --const input into an initializer holding the file's value
 * (dtype and shape checked against the declaration). */
int frontend_bind_consts(Graph *g, const FrontendOptions *opt, Diag *d);

/* ---- load.c ------------------------------------------------------------- */

/* Loads, checks, normalises and shape-infers a model. On failure returns -1
 * with *out NULL and at least one diagnostic in d. External data is
 * resolved relative to the model's folder. */
int frontend_load_file(const char *path, const FrontendOptions *opt,
                       Graph **out, Diag *d);

/* The same from memory; base_dir (may be NULL: external data refused)
 * stands in for the model's folder. Used by tests and the fuzzer. */
int frontend_load_buffer(const void *buf, size_t len, const char *name,
                         const char *base_dir, const FrontendOptions *opt,
                         Graph **out, Diag *d);

/* ---- moe_eager.c -------------------------------------------------------- */

/* Rewrites each mixture-of-experts block of transformers' eager export
 * (a loop over the experts hit, NonZero) into the batched export's form,
 * before shape inference (see moe_eager.c); a graph with none is left as
 * it is. Needs producer and consumer links (graph_toposort); sorts again. */
int frontend_moe_eager(Graph *g, Diag *d);

/* ---- wire.c ------------------------------------------------------------- */

/* Deepest nesting accepted: subgraphs (graph attributes of nodes of
 * graphs ...) and TypeProtos (sequence of map of ...). */
#define FRONTEND_MAX_GRAPH_DEPTH 64
#define FRONTEND_MAX_TYPE_DEPTH 64

/* Scans ModelProto bytes without decoding them, iteratively, and refuses
 * (-1, one diagnostic) nesting past the limits above or a malformed
 * tag, varint or length met on the way. Runs before protobuf-c, whose
 * decoder recurses once per nested message. */
int frontend_wire_check(const void *buf, size_t len, Diag *d);

/* ---- tensor.c ----------------------------------------------------------- */

struct Onnx__TensorProto;
/* Fills t (dtype, shape, data) from a TensorProto; `what` names it in
 * diagnostics ("initializer", "attribute \"value\" of node ..."). */
int frontend_tensor_import(Graph *g, const struct Onnx__TensorProto *tp,
                           Tensor *t, const char *base_dir, const char *what,
                           Diag *d);

/* Opens `path` for reading if it is a regular file, refusing a FIFO, a
 * device or a folder before anything could block on it. Returns the
 * descriptor and sets *size, or -1 with one diagnostic, prefixed with
 * "what: " when what is not NULL ("not a regular file (a FIFO)"). */
int frontend_file_open(const char *path, const char *what, size_t *size, Diag *d);

/* ---- normalize.c -------------------------------------------------------- */

/* Folds constant inputs that later opsets added (Reshape shape, Slice
 * starts/ends/axes/steps, Split split, Squeeze/Unsqueeze/ReduceSum/
 * ReduceMean axes) into attributes and checks each node's arity. */
int frontend_normalize(Graph *g, Diag *d);
/* The same for one node, once the constants it reads are known (the
 * importer interleaves it with shape inference and folding). */
int frontend_normalize_node(Graph *g, Node *n, Diag *d);

#endif
