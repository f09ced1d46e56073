/* tensor.c: TensorProto values (initializers, Constant values, tensor
 * attributes) and the external data files they may point to.
 *
 * Data stays where it is: raw_data and the typed fields point into the
 * decoded message, external data into a read-only mapping of its file (a
 * sparse or huge weight file is never read until a later stage touches
 * it). Only bool values stored in int32_data are converted, into the arena.
 * External paths are trusted no further than the model's folder: absolute
 * paths, ".." components and links that resolve outside it are refused,
 * and offset and length are checked against the file size. Every file the
 * frontend reads (the model too) must be a regular file, checked before
 * anything could block on it: a FIFO, a device or a folder is refused.
 */
#include "frontend.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "onnx.pb-c.h"

/* Parses a non-negative decimal integer field of external_data. */
static int parse_u64(const char *s, int64_t *out)
{
    if (!s || !*s)
        return -1;
    int64_t v = 0;
    for (; *s; s++) {
        if (*s < '0' || *s > '9' || ck_mul_i64(v, 10, &v) || ck_add_i64(v, *s - '0', &v))
            return -1;
    }
    *out = v;
    return 0;
}

static int location_is_safe(const char *loc)
{
    if (!*loc || loc[0] == '/')
        return 0;
    /* Reject ".." as a whole path component, anywhere. */
    for (const char *p = loc; *p;) {
        const char *e = strchr(p, '/');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        if (len == 2 && p[0] == '.' && p[1] == '.')
            return 0;
        p += len + (e ? 1 : 0);
    }
    return 1;
}

static const char *file_kind(mode_t mode)
{
    return S_ISDIR(mode) ? "a directory" : S_ISFIFO(mode) ? "a FIFO"
         : S_ISCHR(mode) ? "a character device" : S_ISBLK(mode) ? "a block device"
         : S_ISSOCK(mode) ? "a socket" : "not a plain file";
}

int frontend_file_open(const char *path, const char *what, size_t *size, Diag *d)
{
    const char *sep = what ? ": " : "";
    struct stat st;
    /* stat before open: opening a FIFO blocks until a writer comes, and
     * opening a device may do something of its own. */
    if (stat(path, &st) != 0) {
        diag_add(d, "%s%scannot open: %s", what ? what : "", sep, strerror(errno));
        return -1;
    }
    if (!S_ISREG(st.st_mode)) {
        diag_add(d, "%s%snot a regular file (%s)", what ? what : "", sep, file_kind(st.st_mode));
        return -1;
    }
    /* O_NONBLOCK in case it was swapped for a FIFO since; it does nothing
     * to a regular file, and fstat checks what was opened. */
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    if (fd < 0) {
        diag_add(d, "%s%scannot open: %s", what ? what : "", sep, strerror(errno));
        return -1;
    }
    if (fstat(fd, &st) != 0) {
        diag_add(d, "%s%scannot open: %s", what ? what : "", sep, strerror(errno));
        close(fd);
        return -1;
    }
    if (!S_ISREG(st.st_mode) || st.st_size < 0 || (uint64_t)st.st_size > SIZE_MAX) {
        diag_add(d, "%s%snot a regular file (%s)", what ? what : "", sep,
                 S_ISREG(st.st_mode) ? "its size is out of range" : file_kind(st.st_mode));
        close(fd);
        return -1;
    }
    *size = (size_t)st.st_size;
    return fd;
}

/* Maps `loc` (relative to base_dir) once per graph; returns the mapping. */
static Mapping *map_external(Graph *g, const char *base_dir, const char *loc,
                             const char *what, const char *tname, Diag *d)
{
    char path[PATH_MAX], real_base[PATH_MAX], real_file[PATH_MAX];
    Mapping *m = NULL;
    int fd = -1;
    if (snprintf(path, sizeof(path), "%s/%s", base_dir, loc) >= (int)sizeof(path)) {
        diag_add(d, "%s \"%s\": external data path \"%s\" is too long", what, tname, loc);
        return NULL;
    }
    if (!realpath(base_dir, real_base) || !realpath(path, real_file)) {
        diag_add(d, "%s \"%s\": external data file \"%s\": %s", what, tname, loc, strerror(errno));
        return NULL;
    }
    size_t bl = strlen(real_base);
    if (strncmp(real_file, real_base, bl) != 0 || real_file[bl] != '/') {
        diag_add(d, "%s \"%s\": external data file \"%s\" resolves outside the model's folder",
                 what, tname, loc);
        return NULL;
    }
    /* The mapping list doubles as a cache keyed by resolved path. */
    for (m = g->maps; m; m = m->next)
        if (m->path && strcmp(m->path, real_file) == 0)
            return m;
    char who[1024];
    snprintf(who, sizeof(who), "%s \"%s\": external data file \"%s\"", what, tname, loc);
    size_t size;
    fd = frontend_file_open(real_file, who, &size, d);
    if (fd < 0)
        return NULL;
    m = arena_alloc(&g->arena, sizeof(Mapping));
    m->path = arena_strdup(&g->arena, real_file);
    m->len = size;
    if (m->len) {
        m->addr = mmap(NULL, m->len, PROT_READ, MAP_PRIVATE, fd, 0);
        if (m->addr == MAP_FAILED) {
            diag_add(d, "%s \"%s\": cannot map external data file \"%s\": %s", what, tname,
                     loc, strerror(errno));
            m = NULL;
            goto cleanup;
        }
    }
    m->next = g->maps;
    g->maps = m;
cleanup:
    if (fd >= 0)
        close(fd);
    return m;
}

static int import_external(Graph *g, const Onnx__TensorProto *tp, Tensor *t,
                           const char *base_dir, const char *what, Diag *d)
{
    const char *loc = NULL;
    int64_t offset = 0, length = -1;
    for (size_t i = 0; i < tp->n_external_data; i++) {
        const Onnx__StringStringEntryProto *e = tp->external_data[i];
        const char *k = e->key ? e->key : "";
        if (strcmp(k, "location") == 0) {
            loc = e->value ? e->value : "";
        } else if (strcmp(k, "offset") == 0) {
            if (parse_u64(e->value, &offset)) {
                diag_add(d, "%s \"%s\": external data offset \"%s\" is not a valid number",
                         what, t->name, e->value ? e->value : "");
                return -1;
            }
        } else if (strcmp(k, "length") == 0) {
            if (parse_u64(e->value, &length)) {
                diag_add(d, "%s \"%s\": external data length \"%s\" is not a valid number",
                         what, t->name, e->value ? e->value : "");
                return -1;
            }
        }
    }
    if (!loc) {
        diag_add(d, "%s \"%s\": external data has no location", what, t->name);
        return -1;
    }
    if (!location_is_safe(loc)) {
        diag_add(d, "%s \"%s\": external data location \"%s\" must be a relative path inside the model's folder",
                 what, t->name, loc);
        return -1;
    }
    if (!base_dir) {
        diag_add(d, "%s \"%s\": external data \"%s\" cannot be used for a model loaded from memory",
                 what, t->name, loc);
        return -1;
    }
    Mapping *m = map_external(g, base_dir, loc, what, t->name, d);
    if (!m)
        return -1;
    if (length < 0)
        length = t->nbytes;
    int64_t end;
    if (ck_add_i64(offset, length, &end) || end > (int64_t)m->len) {
        diag_add(d, "%s \"%s\": external data offset %lld + length %lld is past the end of \"%s\" (%zu bytes)",
                 what, t->name, (long long)offset, (long long)length, loc, m->len);
        return -1;
    }
    if (length != t->nbytes) {
        diag_add(d, "%s \"%s\": external data length %lld does not match its shape and dtype (%lld bytes)",
                 what, t->name, (long long)length, (long long)t->nbytes);
        return -1;
    }
    t->data = m->len ? (const char *)m->addr + offset : NULL;
    return 0;
}

int frontend_tensor_import(Graph *g, const Onnx__TensorProto *tp, Tensor *t,
                           const char *base_dir, const char *what, Diag *d)
{
    int dt = tp->has_data_type ? tp->data_type : 0;
    if (!dtype_supported(dt)) {
        diag_add(d, "%s \"%s\": dtype %s is not supported (" DTYPE_SUPPORTED_LIST ")", what,
                 t->name, dtype_onnx_name(dt));
        return -1;
    }
    if (tp->n_dims > IR_MAX_RANK) {
        diag_add(d, "%s \"%s\": rank %zu is more than %d", what, t->name, tp->n_dims,
                 IR_MAX_RANK);
        return -1;
    }
    if (tp->segment) {
        diag_add(d, "%s \"%s\": segmented tensors are not supported", what, t->name);
        return -1;
    }
    int64_t numel = 1, nbytes;
    for (size_t i = 0; i < tp->n_dims; i++) {
        if (tp->dims[i] < 0) {
            diag_add(d, "%s \"%s\": dim %zu is negative (%lld)", what, t->name, i,
                     (long long)tp->dims[i]);
            return -1;
        }
        if (ck_mul_i64(numel, tp->dims[i], &numel)) {
            diag_add(d, "%s \"%s\": element count overflows int64", what, t->name);
            return -1;
        }
        t->dims[i] = tp->dims[i];
    }
    if (ck_mul_i64(numel, (int64_t)dtype_size((DType)dt), &nbytes)) {
        diag_add(d, "%s \"%s\": byte size overflows int64", what, t->name);
        return -1;
    }
    t->dtype = (DType)dt;
    t->rank = (int)tp->n_dims;
    t->nbytes = nbytes;

    if (tp->has_data_location && tp->data_location == ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL)
        return import_external(g, tp, t, base_dir, what, d);

    size_t have;
    const void *src;
    if (tp->has_raw_data) {
        have = tp->raw_data.len;
        src = tp->raw_data.data;
    } else if (dt == DT_F32) {
        have = tp->n_float_data * sizeof(float);
        src = tp->float_data;
    } else if (dt == DT_I64) {
        have = tp->n_int64_data * sizeof(int64_t);
        src = tp->int64_data;
    } else if (dt == DT_F64) {
        have = tp->n_double_data * sizeof(double);
        src = tp->double_data;
    } else if (dt == DT_I32) {
        have = tp->n_int32_data * sizeof(int32_t);
        src = tp->int32_data;
    } else if (dt == DT_U32) {
        /* uint32 values live one per uint64 in uint64_data. */
        uint32_t *b = arena_alloc(&g->arena, (size_t)nbytes + 4);
        if ((int64_t)tp->n_uint64_data != numel) {
            diag_add(d, "%s \"%s\": holds %zu values but its shape needs %lld", what, t->name,
                     tp->n_uint64_data, (long long)numel);
            return -1;
        }
        for (int64_t i = 0; i < numel; i++)
            b[i] = (uint32_t)tp->uint64_data[i];
        t->data = b;
        return 0;
    } else {
        /* bool, int8, uint8, int16, uint16, float16 and bfloat16 values
         * live one per int32 in int32_data (the 16-bit floats as their bit
         * patterns). */
        if ((int64_t)tp->n_int32_data == numel) {
            size_t es = dtype_size((DType)dt);
            uint8_t *b = arena_alloc(&g->arena, (size_t)nbytes + 1);
            for (int64_t i = 0; i < numel; i++) {
                int32_t v = tp->int32_data[i];
                if (dt == DT_BOOL) {
                    b[i] = v != 0;
                } else if (es == 1) {
                    b[i] = (uint8_t)v;
                } else {
                    uint16_t h = (uint16_t)v;
                    memcpy(b + 2 * i, &h, 2);
                }
            }
            t->data = b;
            return 0;
        }
        have = tp->n_int32_data;
        src = NULL;
    }
    if ((int64_t)have != nbytes) {
        diag_add(d, "%s \"%s\": holds %zu bytes of data but its shape and dtype need %lld",
                 what, t->name, have, (long long)nbytes);
        return -1;
    }
    t->data = src;
    return 0;
}
