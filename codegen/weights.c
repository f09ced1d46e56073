/* weights.c: each rank's weight shards, as one checked blob.
 *
 * A rank stores only its block of each weight (the plan's layout decides
 * which), 64-byte aligned at the offsets the program assigned. The file is
 * "O2SPMDW1", the payload size and its FNV-1a 64 checksum, then the
 * payload; the generated loader checks size and checksum against
 * constants compiled into that rank's binary, so a missing, truncated,
 * corrupt or mismatched file is one clear error, not wrong answers.
 */
#include "codegen.h"

#include <stdlib.h>
#include <string.h>

uint64_t weights_fnv1a(const unsigned char *p, size_t n)
{
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ p[i]) * 1099511628211ull;
    return h;
}

/* Copies this rank's block of a full row-major tensor. */
static void take_block(unsigned char *dst, const unsigned char *src, const Tensor *t, const Sharding *s,
                       const Program *pr)
{
    int rank = t->rank;
    size_t es = dtype_size(t->dtype);
    int64_t ldims[IR_MAX_RANK], index[IR_MAX_RANK], gstride[IR_MAX_RANK];
    sharding_local_dims(s, &pr->plan->mesh, t, ldims);
    for (int i = 0; i < rank; i++)
        index[i] = mesh_block_index(&pr->plan->mesh, pr->vrank, s->axes[i], s->naxes[i]);
    if (rank == 0) {
        memcpy(dst, src, es);
        return;
    }
    int64_t st = 1;
    for (int i = rank - 1; i >= 0; i--) {
        gstride[i] = st;
        st *= t->dims[i];
    }
    int64_t rows = 1;
    for (int i = 0; i < rank - 1; i++)
        rows *= ldims[i];
    size_t row_bytes = (size_t)ldims[rank - 1] * es;
    /* A padded block (sharding.c) stores zeros past the dim's end: dst
     * comes zeroed, so those rows and columns are left alone. */
    int64_t last0 = index[rank - 1] * ldims[rank - 1], ncopy = t->dims[rank - 1] - last0;
    ncopy = ncopy < 0 ? 0 : ncopy > ldims[rank - 1] ? ldims[rank - 1] : ncopy;
    for (int64_t r = 0; r < rows; r++) {
        int64_t rem = r, goff = last0;
        int pad = 0;
        for (int i = rank - 2; i >= 0; i--) {
            int64_t g = index[i] * ldims[i] + rem % ldims[i];
            pad |= g >= t->dims[i];
            goff += g * gstride[i];
            rem /= ldims[i];
        }
        if (!pad && ncopy)
            memcpy(dst + (size_t)r * row_bytes, src + (size_t)goff * es, (size_t)ncopy * es);
    }
}

unsigned char *weights_pack(const Program *pr, int64_t *bytes, uint64_t *checksum, Diag *d)
{
    unsigned char *blob = calloc(1, (size_t)pr->weight_bytes + 64);
    if (!blob)
        abort();
    for (int i = 0; i < pr->nbufs; i++) {
        const Buffer *b = &pr->bufs[i];
        if (b->kind != BUF_WEIGHT || !b->bytes)
            continue;
        if (!b->tensor->data) {
            diag_add(d, "tensor \"%s\": has no data to store", b->tensor->name);
            free(blob);
            return NULL;
        }
        take_block(blob + b->offset, b->tensor->data, b->tensor, &b->layout, pr);
    }
    *bytes = pr->weight_bytes;
    *checksum = weights_fnv1a(blob, (size_t)pr->weight_bytes);
    return blob;
}
