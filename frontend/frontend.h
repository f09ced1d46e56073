/* frontend.h: ONNX models into the IR.
 *
 * Sections: load.c (decoding through protobuf-c, graph construction, the
 * whole import pipeline), tensor.c (TensorProto data, external data files),
 * normalize.c (folding opset variants into one form).
 */
#ifndef ONNX2SPMD_FRONTEND_H
#define ONNX2SPMD_FRONTEND_H

#include "../ir/ir.h"

/* Lowest and highest default-domain opset accepted. */
#define FRONTEND_OPSET_MIN 13
#define FRONTEND_OPSET_MAX 25

/* A value for a symbolic input dim, from --dim NAME=VALUE. */
typedef struct DimBinding {
    const char *name;
    int64_t value;
} DimBinding;

typedef struct FrontendOptions {
    const DimBinding *dims;
    int ndims;
} FrontendOptions;

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

/* ---- tensor.c ----------------------------------------------------------- */

struct Onnx__TensorProto;
/* Fills t (dtype, shape, data) from a TensorProto; `what` names it in
 * diagnostics ("initializer", "attribute \"value\" of node ..."). */
int frontend_tensor_import(Graph *g, const struct Onnx__TensorProto *tp,
                           Tensor *t, const char *base_dir, const char *what,
                           Diag *d);

/* ---- normalize.c -------------------------------------------------------- */

/* Folds constant inputs that later opsets added (Reshape shape, Slice
 * starts/ends/axes/steps, Split split, Squeeze/Unsqueeze/ReduceSum/
 * ReduceMean axes) into attributes and checks each node's arity. */
int frontend_normalize(Graph *g, Diag *d);

#endif
