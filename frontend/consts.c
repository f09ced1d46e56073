/* consts.c: --const NAME=FILE, a graph input bound to a value at compile time.
 *
 * Some models take shape-deciding values as graph inputs (Resize's scales,
 * a reduction's axes, Pad's pads, TopK's k) where a program with static
 * shapes needs them fixed. Binding such an input to a file turns it into
 * an initializer before import, as torch.export or jax.jit specialise a
 * static argument: the generated program no longer reads it. The file is
 * a .npy array or a serialized TensorProto (the ONNX test-data format);
 * its dtype and shape must be the ones the model declares.
 */
#include "frontend.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "onnx.pb-c.h"

/* .npy: magic, version, little-endian header length, then a Python dict
 * with descr, fortran_order and shape. */
static int parse_npy(const unsigned char *buf, size_t len, DType *dt, int *rank, int64_t *dims,
                     size_t *data_off, const char *path, Diag *d)
{
    static const struct { const char *descr; DType dt; } types[] = {
        {"'<f4'", DT_F32}, {"'<f2'", DT_F16}, {"'<f8'", DT_F64}, {"'<i8'", DT_I64}, {"'<i4'", DT_I32},
        {"'<i2'", DT_I16}, {"'|i1'", DT_I8}, {"'<u4'", DT_U32}, {"'<u2'", DT_U16}, {"'|u1'", DT_U8},
        {"'|b1'", DT_BOOL}, {"'<V2'", DT_BF16}, {"'|V2'", DT_BF16},
    };
    if (len < 10 || memcmp(buf, "\x93NUMPY", 6) != 0) {
        diag_add(d, "--const %s: not a .npy file", path);
        return -1;
    }
    size_t hlen = buf[6] == 1 ? (size_t)buf[8] | (size_t)buf[9] << 8
                              : len < 12 ? (size_t)-1
                              : (size_t)buf[8] | (size_t)buf[9] << 8 | (size_t)buf[10] << 16 | (size_t)buf[11] << 24;
    size_t off = buf[6] == 1 ? 10 : 12;
    if (hlen > len - off || hlen > 4000) {
        diag_add(d, "--const %s: truncated .npy header", path);
        return -1;
    }
    char hdr[4096];
    memcpy(hdr, buf + off, hlen);
    hdr[hlen] = 0;
    const char *ds = strstr(hdr, "'descr':"), *fo = strstr(hdr, "'fortran_order':"), *sh = strstr(hdr, "'shape':");
    if (!ds || !fo || !sh || !strchr(sh, '(')) {
        diag_add(d, "--const %s: malformed .npy header", path);
        return -1;
    }
    if (strstr(fo, "True") == fo + 17) {
        diag_add(d, "--const %s: Fortran-ordered arrays are not supported", path);
        return -1;
    }
    *dt = DT_UNDEFINED;
    for (ds += 8; *ds == ' '; ds++)
        ;
    for (size_t k = 0; k < sizeof types / sizeof types[0]; k++)
        if (strncmp(ds, types[k].descr, 5) == 0)
            *dt = types[k].dt;
    if (*dt == DT_UNDEFINED) {
        diag_add(d, "--const %s: unsupported .npy dtype %.6s", path, ds);
        return -1;
    }
    *rank = 0;
    for (const char *p = strchr(sh, '(') + 1; *p && *p != ')';) {
        while (*p == ' ' || *p == ',')
            p++;
        if (*p == ')')
            break;
        char *end;
        long long v = strtoll(p, &end, 10);
        if (end == p || v < 0 || *rank == IR_MAX_RANK) {
            diag_add(d, "--const %s: malformed or unsupported .npy shape", path);
            return -1;
        }
        dims[(*rank)++] = v;
        p = end;
    }
    *data_off = off + hlen;
    return 0;
}

static int bind_one(Graph *g, Tensor *t, const char *path, Diag *d)
{
    size_t size;
    int fd = frontend_file_open(path, "--const", &size, d);
    if (fd < 0)
        return -1;
    unsigned char *buf = malloc(size ? size : 1);
    size_t got = 0;
    while (buf && got < size) {
        ssize_t r = read(fd, buf + got, size - got);
        if (r <= 0)
            break;
        got += (size_t)r;
    }
    close(fd);
    if (!buf || got != size) {
        diag_add(d, "--const %s: cannot read the file", path);
        free(buf);
        return -1;
    }
    Tensor v = {.name = t->name, .label = t->label, .rank = -1};
    int rc = -1;
    size_t pl = strlen(path);
    if (pl > 4 && strcmp(path + pl - 4, ".npy") == 0) {
        DType dt;
        int rank;
        int64_t dims[IR_MAX_RANK], numel = 1, nbytes;
        size_t off;
        if (parse_npy(buf, size, &dt, &rank, dims, &off, path, d) == 0) {
            for (int i = 0; i < rank && numel >= 0; i++)
                if (ck_mul_i64(numel, dims[i], &numel))
                    numel = -1;
            if (numel < 0 || ck_mul_i64(numel, (int64_t)dtype_size(dt), &nbytes) || (size_t)nbytes != size - off) {
                diag_add(d, "--const %s: its data does not match its .npy shape", path);
            } else {
                v.dtype = dt;
                v.rank = rank;
                memcpy(v.dims, dims, sizeof dims);
                v.nbytes = nbytes;
                void *copy = arena_alloc(&g->arena, (size_t)nbytes + 8);
                memcpy(copy, buf + off, (size_t)nbytes);
                v.data = copy;
                rc = 0;
            }
        }
    } else {
        Onnx__TensorProto *tp = onnx__tensor_proto__unpack(NULL, size, buf);
        if (!tp) {
            diag_add(d, "--const %s: neither a .npy file nor a TensorProto", path);
        } else {
            if (frontend_tensor_import(g, tp, &v, NULL, "--const", d) == 0) {
                /* The typed fields point into tp: keep a copy past its free. */
                void *copy = arena_alloc(&g->arena, (size_t)v.nbytes + 8);
                if (v.nbytes)
                    memcpy(copy, v.data, (size_t)v.nbytes);
                v.data = copy;
                rc = 0;
            }
            onnx__tensor_proto__free_unpacked(tp, NULL);
        }
    }
    free(buf);
    if (rc)
        return -1;
    int same = v.dtype == t->dtype && v.rank == t->rank;
    for (int i = 0; same && i < v.rank; i++)
        same = v.dims[i] == t->dims[i];
    if (!same) {
        char a[160], b[160];
        diag_add(d, "--const %s=%s: the file holds %s %s; the model declares %s %s", t->label, path,
                 dtype_name(v.dtype), shape_str(v.dims, v.rank, a, sizeof a), dtype_name(t->dtype),
                 shape_str(t->dims, t->rank, b, sizeof b));
        return -1;
    }
    t->data = v.data;
    t->is_input = 0;
    t->is_initializer = 1;
    return 0;
}

int frontend_bind_consts(Graph *g, const FrontendOptions *opt, Diag *d)
{
    for (int b = 0; b < opt->nconsts; b++) {
        int found = -1;
        for (int i = 0; i < g->ninputs; i++)
            if (strcmp(g->inputs[i]->name, opt->consts[b].name) == 0)
                found = i;
        if (found < 0) {
            char nm[200];
            esc_term(opt->consts[b].name, nm, sizeof nm);
            diag_add(d, "--const %s: the model has no graph input of that name", nm);
            return -1;
        }
        if (bind_one(g, g->inputs[found], opt->consts[b].path, d))
            return -1;
        memmove(&g->inputs[found], &g->inputs[found + 1], (size_t)(g->ninputs - found - 1) * sizeof(Tensor *));
        g->ninputs--;
    }
    return 0;
}
