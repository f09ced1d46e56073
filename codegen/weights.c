/* weights.c: each rank's weight shards, as one checked file.
 *
 * A rank stores only its block of each weight (the plan's layout decides
 * which), 64-byte aligned at the offsets the program assigned, and, for
 * an inference program, each GEMM weight packed into the kernel's column
 * panels (templates/bodies.h k_pack_panels_f32, the body the programs
 * use), in place of the plain block where nothing else reads it. The file
 * is a 4096-byte header ("O2SPMDW3", the payload's size, its 64-bit hash
 * (runtime.c's rt_hash64), the panel width), then the payload, so the
 * program maps it page-aligned and reads the weights where they lie. The
 * generated loader checks size, panel width and hash against constants
 * compiled into that rank's binary, so a missing, truncated, corrupt or
 * mismatched file is one clear error, not wrong answers.
 *
 * The files are written for all ranks at once, tensor by tensor: each
 * weight is read from the model once (external data with pread, into one
 * buffer reused), and its blocks go to every rank holding one before the
 * next. The compiler holds one tensor, one block and one packed block at
 * a time, whatever the model's size.
 */
#include "codegen.h"
#include "templates/bodies.h" /* k_pack_panels_f32, K_PANEL */

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

enum { WEIGHTS_HEADER = 4096 }; /* "O2SPMDW3", the payload's size, its hash, K_PANEL; zeros to a page */

/* The weight files' hash, templates/runtime.c's rt_hash64 computed in
 * pieces: 64-byte blocks into 8 lanes, then the tail, the lanes and the
 * length. */
typedef struct {
    uint64_t lane[8];
} Hash64;

static const uint64_t HASH_PRIME = 1099511628211ull, HASH_BASIS = 1469598103934665603ull;

static void hash_init(Hash64 *h)
{
    for (int l = 0; l < 8; l++)
        h->lane[l] = HASH_BASIS ^ (uint64_t)l;
}

static void hash_blocks(Hash64 *h, const unsigned char *p, size_t n) /* n: a multiple of 64 */
{
    for (size_t i = 0; i + 64 <= n; i += 64)
        for (int l = 0; l < 8; l++) {
            uint64_t w;
            memcpy(&w, p + i + 8 * l, 8);
            h->lane[l] = (h->lane[l] ^ w) * HASH_PRIME;
        }
}

static uint64_t hash_finish(const Hash64 *h, const unsigned char *tail, size_t ntail, uint64_t total)
{
    uint64_t r = HASH_BASIS;
    for (size_t i = 0; i < ntail; i++)
        r = (r ^ tail[i]) * HASH_PRIME;
    for (int l = 0; l < 8; l++)
        r = (r ^ h->lane[l]) * HASH_PRIME;
    return (r ^ total) * HASH_PRIME;
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

/* One rank's weight buffer, for the tensor-major walk. */
typedef struct {
    int tensor_id, rank;
    const Buffer *buf;
} Shard;

static int shard_order(const void *a, const void *b)
{
    const Shard *x = a, *y = b;
    if (x->tensor_id != y->tensor_id)
        return (x->tensor_id > y->tensor_id) - (x->tensor_id < y->tensor_id);
    if (x->rank != y->rank)
        return (x->rank > y->rank) - (x->rank < y->rank);
    return (x->buf->offset > y->buf->offset) - (x->buf->offset < y->buf->offset);
}

/* A tensor's bytes, once per tensor. One in a mapped external-data file
 * is read with pread into `*buf` (grown to the largest tensor and reused):
 * the mapping is never touched, so its pages never join the compiler's
 * RSS, and a bulk read beats faulting the pages in one by one. Heap data
 * (inline tensors, folded constants) is used where it is. */
typedef struct {
    unsigned char *buf;
    int64_t cap;
    const Mapping *open_map; /* the mapping fd reads, or NULL */
    int fd;
} Source;

static const unsigned char *source_bytes(Source *src, const Graph *g, const Tensor *t)
{
    const Mapping *m = g->maps;
    uintptr_t a = (uintptr_t)t->data;
    while (m && (a < (uintptr_t)m->addr || a >= (uintptr_t)m->addr + m->len))
        m = m->next;
    if (!m || !m->path)
        return t->data;
    if (src->open_map != m) {
        if (src->fd >= 0)
            close(src->fd);
        src->fd = open(m->path, O_RDONLY | O_CLOEXEC);
        src->open_map = src->fd >= 0 ? m : NULL;
        if (src->fd < 0)
            return t->data; /* the mapping still reads it */
    }
    if (t->nbytes > src->cap) {
        free(src->buf);
        src->cap = t->nbytes;
        src->buf = malloc((size_t)src->cap);
        if (!src->buf)
            abort();
    }
    off_t at = (off_t)(a - (uintptr_t)m->addr);
    for (int64_t got = 0; got < t->nbytes;) {
        ssize_t n = pread(src->fd, src->buf + got, (size_t)(t->nbytes - got), at + (off_t)got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return t->data; /* (the loader checked the file's size) */
        got += n;
    }
    return src->buf;
}

static int write_all(int fd, const void *p, size_t n, off_t at)
{
    const unsigned char *c = p;
    while (n) {
        ssize_t w = pwrite(fd, c, n, at);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return -1;
        c += w;
        n -= (size_t)w;
        at += w;
    }
    return 0;
}

/* The hash of a rank file's payload, read back in chunks (the page cache
 * holds it, the compiler's memory does not): for a rank whose blocks did
 * not arrive in offset order. */
static int file_hash(int fd, int64_t bytes, uint64_t *sum)
{
    enum { CHUNK = 1 << 22 };
    unsigned char *buf = malloc(CHUNK);
    if (!buf)
        abort();
    Hash64 h;
    hash_init(&h);
    for (int64_t at = 0; at < bytes;) {
        size_t want = bytes - at < CHUNK ? (size_t)(bytes - at) : CHUNK, got = 0;
        while (got < want) {
            ssize_t n = pread(fd, buf + got, want - got, (off_t)(WEIGHTS_HEADER + at + (int64_t)got));
            if (n < 0 && errno == EINTR)
                continue;
            if (n <= 0) {
                free(buf);
                return -1;
            }
            got += (size_t)n;
        }
        at += (int64_t)want;
        if (at < bytes) {
            hash_blocks(&h, buf, want); /* CHUNK is a multiple of 64 */
        } else {
            hash_blocks(&h, buf, want & ~(size_t)63);
            *sum = hash_finish(&h, buf + (want & ~(size_t)63), want & 63, (uint64_t)bytes);
        }
    }
    if (!bytes)
        *sum = hash_finish(&h, NULL, 0, 0);
    free(buf);
    return 0;
}

/* A rank file's hash, taken as its blocks are written while they come in
 * offset order (each block is followed by zeros to the next multiple of
 * 64, where the next one starts); `ordered` clears at the first that does
 * not, and the file is then read back. */
typedef struct {
    Hash64 h;
    int64_t at;
    int ordered;
} RankHash;

static void rank_hash_block(RankHash *rh, const unsigned char *p, int64_t offset, int64_t bytes)
{
    if (!rh->ordered || offset != rh->at) {
        rh->ordered = 0;
        return;
    }
    size_t whole = (size_t)bytes & ~(size_t)63, rest = (size_t)bytes & 63;
    hash_blocks(&rh->h, p, whole);
    if (rest) {
        unsigned char last[64] = {0};
        memcpy(last, p + whole, rest);
        hash_blocks(&rh->h, last, 64);
    }
    rh->at += (int64_t)whole + (rest ? 64 : 0);
}

/* Does this rank's block of t reach past a dim's end (sharding.c's
 * padding, stored as zeros)? */
static int block_padded(const Tensor *t, const Sharding *s, const Program *pr)
{
    int64_t ldims[IR_MAX_RANK];
    sharding_local_dims(s, &pr->plan->mesh, t, ldims);
    for (int i = 0; i < t->rank; i++)
        if ((mesh_block_index(&pr->plan->mesh, pr->vrank, s->axes[i], s->naxes[i]) + 1) * ldims[i] > t->dims[i])
            return 1;
    return 0;
}

/* This rank's block of t when it is one run of the source's bytes (split
 * on the first dim alone, or not at all, and not padded): written straight
 * from the model, with no copy. NULL otherwise. */
static const unsigned char *block_run(const unsigned char *src, const Tensor *t, const Sharding *s,
                                      const Program *pr)
{
    int64_t ldims[IR_MAX_RANK], inner = 1;
    sharding_local_dims(s, &pr->plan->mesh, t, ldims);
    for (int i = 1; i < t->rank; i++) {
        if (ldims[i] != t->dims[i])
            return NULL;
        inner *= t->dims[i];
    }
    if (t->rank == 0)
        return src;
    int64_t first = mesh_block_index(&pr->plan->mesh, pr->vrank, s->axes[0], s->naxes[0]) * ldims[0];
    if (first + ldims[0] > t->dims[0])
        return NULL;
    return src + (size_t)(first * inner) * dtype_size(t->dtype);
}

int weights_write(const Graph *g, Program *const *prs, int nranks, const char *dir, uint64_t *sums, Diag *d)
{
    int rc = -1, nshards = 0, cap = 0;
    Source src = {.fd = -1};
    int *fds = malloc((size_t)nranks * sizeof(int));
    RankHash *rh = calloc((size_t)nranks, sizeof *rh);
    if (!rh)
        abort();
    for (int r = 0; r < nranks; r++) {
        hash_init(&rh[r].h);
        rh[r].ordered = 1;
    }
    Shard *shards = NULL;
    unsigned char *stage = NULL, *panels = NULL;
    int64_t stage_bytes = 0, panel_bytes = 0;
    char path[8300];
    if (!fds)
        abort();
    for (int r = 0; r < nranks; r++)
        fds[r] = -1;
    struct rlimit nofile; /* every rank's file is open at once: a large mesh may need more than the soft limit */
    if (getrlimit(RLIMIT_NOFILE, &nofile) == 0 && nofile.rlim_cur != RLIM_INFINITY &&
        nofile.rlim_cur < (rlim_t)nranks + 64) {
        nofile.rlim_cur = nofile.rlim_max == RLIM_INFINITY || nofile.rlim_max > (rlim_t)nranks + 64
                              ? (rlim_t)nranks + 64
                              : nofile.rlim_max;
        setrlimit(RLIMIT_NOFILE, &nofile); /* if it stays short, open() names the file and the reason */
    }
    /* Each file: magic, payload size, hash (filled in last), payload.
     * The payload starts as a hole of the right size: alignment gaps and
     * padded blocks' zeros cost no writes. */
    for (int r = 0; r < nranks; r++) {
        snprintf(path, sizeof path, "%s/weights.rank%d.bin", dir, r);
        fds[r] = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        uint64_t hdr[3] = {(uint64_t)prs[r]->weight_bytes, 0, K_PANEL};
        if (fds[r] < 0 || write_all(fds[r], "O2SPMDW3", 8, 0) || write_all(fds[r], hdr, sizeof hdr, 8) ||
            ftruncate(fds[r], (off_t)(WEIGHTS_HEADER + prs[r]->weight_bytes))) {
            diag_add(d, "cannot write %s: %s", path, strerror(errno));
            goto out;
        }
        for (int i = 0; i < prs[r]->nbufs; i++) {
            const Buffer *b = &prs[r]->bufs[i];
            if (b->kind != BUF_WEIGHT || !b->bytes)
                continue;
            if (!b->tensor->data) {
                diag_add(d, "tensor \"%s\": has no data to store", b->tensor->name);
                goto out;
            }
            if (nshards == cap) {
                cap = cap ? 2 * cap : 256;
                shards = realloc(shards, (size_t)cap * sizeof *shards);
                if (!shards)
                    abort();
            }
            shards[nshards++] = (Shard){b->tensor->id, r, b};
            stage_bytes = b->bytes > stage_bytes ? b->bytes : stage_bytes;
            for (int q = 0; q < prs[r]->npacks; q++)
                if (prs[r]->packs[q].buf == i && prs[r]->packs[q].in_file && prs[r]->packs[q].bytes > panel_bytes)
                    panel_bytes = prs[r]->packs[q].bytes;
        }
    }
    /* Tensor by tensor: each source read once, its blocks written to every
     * rank that holds one. */
    if (nshards) /* (a model without weights: shards is NULL) */
        qsort(shards, (size_t)nshards, sizeof *shards, shard_order);
    stage = malloc((size_t)stage_bytes + 1);
    panels = malloc((size_t)panel_bytes + 1);
    if (!stage || !panels)
        abort();
    const unsigned char *data = NULL;
    for (int i = 0; i < nshards; i++) {
        const Shard *sh = &shards[i];
        const Buffer *b = sh->buf;
        if (i == 0 || shards[i - 1].tensor_id != sh->tensor_id)
            data = source_bytes(&src, g, b->tensor);
        const unsigned char *from = block_run(data, b->tensor, &b->layout, prs[sh->rank]);
        if (!from) {
            if (block_padded(b->tensor, &b->layout, prs[sh->rank])) /* else every byte is copied over */
                memset(stage, 0, (size_t)b->bytes);
            take_block(stage, data, b->tensor, &b->layout, prs[sh->rank]);
            from = stage;
        }
        if (!b->packed_only) {
            rank_hash_block(&rh[sh->rank], from, b->offset, b->bytes);
            if (write_all(fds[sh->rank], from, (size_t)b->bytes, (off_t)(WEIGHTS_HEADER + b->offset)))
                goto write_failed;
        }
        /* Its GEMM panels, where the program reads them (after it, in the
         * order memplan.c placed them). */
        const Program *pr = prs[sh->rank];
        for (int q = 0; q < pr->npacks; q++) {
            const struct PackedWeight *pw = &pr->packs[q];
            if (&pr->bufs[pw->buf] != b || !pw->in_file)
                continue;
            if ((uintptr_t)from % _Alignof(float)) { /* an inline tensor's bytes, where the protobuf left them */
                memmove(stage, from, (size_t)b->bytes);
                from = stage;
            }
            float *bp = (float *)(void *)panels;
            k_pack_panels_f32(bp, (const float *)(const void *)from, pw->k, pw->n, pw->trans);
            rank_hash_block(&rh[sh->rank], panels, pw->offset, pw->bytes);
            if (write_all(fds[sh->rank], panels, (size_t)pw->bytes, (off_t)(WEIGHTS_HEADER + pw->offset)))
                goto write_failed;
        }
        continue;
    write_failed:
        diag_add(d, "cannot write %s/weights.rank%d.bin: %s", dir, sh->rank, strerror(errno));
        goto out;
    }
    for (int r = 0; r < nranks; r++) {
        uint64_t sum = 0;
        int ordered = rh[r].ordered && rh[r].at == prs[r]->weight_bytes; /* weight_bytes: a multiple of 64 */
        if (ordered)
            sum = hash_finish(&rh[r].h, NULL, 0, (uint64_t)prs[r]->weight_bytes);
        if ((!ordered && file_hash(fds[r], prs[r]->weight_bytes, &sum)) || write_all(fds[r], &sum, sizeof sum, 16)) {
            diag_add(d, "cannot write %s/weights.rank%d.bin: %s", dir, r, strerror(errno));
            goto out;
        }
        sums[r] = sum;
    }
    rc = 0;
out:
    if (src.fd >= 0)
        close(src.fd);
    free(src.buf);
    for (int r = 0; r < nranks; r++)
        if (fds[r] >= 0 && close(fds[r]) && !rc) {
            diag_add(d, "cannot write %s/weights.rank%d.bin: %s", dir, r, strerror(errno));
            rc = -1;
        }
    free(fds);
    free(rh);
    free(shards);
    free(stage);
    free(panels);
    return rc;
}
