/* ---- onnx2spmd kernels (templates/kernels.c) ------------------------------
 * Plain C kernels for the core op set, on this rank's local blocks. Shapes
 * arrive as constants from the generated call sites; GEMMs go through
 * the blocked AVX-512/AVX2 kernel below where it is built, else CBLAS
 * (OpenBLAS, one thread per rank). Broadcasting is expressed by
 * per-operand strides (0 on a broadcast dim) over the output's dims.
 * All are static inline so a rank that does not use one pays nothing.
 */

/* With collectives in flight (rt_nfly), long kernels run in blocks and
 * test them between blocks (rt_poll), so a transfer moves on during a GEMM
 * rather than only at the node's end. A GEMM splits into blocks of about
 * K_POLL_FLOPS along its longer output dim, none under K_POLL_SPAN wide
 * (each block packs the other operand again: at 256 that is a few percent);
 * elementwise loops test every K_POLL_ELEMS elements. With nothing in
 * flight every kernel runs whole. */
#define K_POLL_FLOPS 20000000
#define K_POLL_SPAN 256
#define K_POLL_ELEMS 65536

/* ---- GEMM on prepacked weights ------------------------------------------
 * A weight is a constant, so each GEMM weight (B, k x n) is packed once,
 * into bodies.h's column panels of K_PANEL (32) columns: panel p holds
 * columns [p K_PANEL, (p+1) K_PANEL) row after row, zero-padded, so the
 * kernel reads it as one contiguous stream and CBLAS's packing of B on
 * every call is gone (ONNX Runtime prepacks its weights the same way).
 * An inference program's packs are made by the compiler and mapped from
 * the weight file; a training program's at start-up (k_pack_b_f32) and
 * after each update (k_repack_b_f32). Each K_MR x K_NR block of y is K_MR
 * x (K_NR / K_VW) vector accumulators held in registers over a K_KC-deep
 * slice of k: the K_MR rows of A are packed k-major into a small buffer
 * (one broadcast per element, read in order), the panel slice streams
 * from L2. Blocks: K_KC deep, K_NC columns (one K_KC x K_NC slice of B
 * stays in L2 while every row block passes over it). Built with AVX-512F
 * (16 lanes, 8 rows: a tile is one whole panel) or AVX2 + FMA (8 lanes,
 * 6 rows: a tile is half a panel, its rows K_PANEL apart); elsewhere
 * k_matmul_packed_f32 runs plain loops over the panels and other GEMMs
 * go to CBLAS. */
#if defined(__AVX512F__) || (defined(__AVX2__) && defined(__FMA__))
#include <immintrin.h>
#define K_PACKED_GEMM 1
#if defined(__AVX512F__)
#define K_PACKED_ISA "AVX-512F"
#define K_VW 16
#define K_MR 8
typedef __m512 k_vec;
#define K_VLOAD(p) _mm512_loadu_ps(p)
#define K_VSTORE(p, v) _mm512_storeu_ps((p), (v))
#define K_VSET1(x) _mm512_set1_ps(x)
#define K_VZERO() _mm512_setzero_ps()
#define K_VFMA(a, b, c) _mm512_fmadd_ps((a), (b), (c))
#else
#define K_PACKED_ISA "AVX2 + FMA"
#define K_VW 8
#define K_MR 6
typedef __m256 k_vec;
#define K_VLOAD(p) _mm256_loadu_ps(p)
#define K_VSTORE(p, v) _mm256_storeu_ps((p), (v))
#define K_VSET1(x) _mm256_set1_ps(x)
#define K_VZERO() _mm256_setzero_ps()
#define K_VFMA(a, b, c) _mm256_fmadd_ps((a), (b), (c))
#endif
#define K_NR (2 * K_VW)
#define K_KC 512
#define K_NC 512

/* y[K_MR x K_NR] (ldy) = ap[kc x K_MR] (k-major) @ bp[kc x K_NR] (rows
 * ldbp apart), plus y
 * itself when acc, else plus the row bias[K_NR] on every row (bias NULL:
 * none). */
static inline __attribute__((always_inline)) void k_gemm_tile(int64_t kc, const float *ap, const float *bp,
                                                               int64_t ldbp, float *y, int64_t ldy, int acc,
                                                               const float *bias)
{
    k_vec c0[K_MR], c1[K_MR];
    for (int i = 0; i < K_MR; i++) {
        c0[i] = acc ? K_VLOAD(y + i * ldy) : bias ? K_VLOAD(bias) : K_VZERO();
        c1[i] = acc ? K_VLOAD(y + i * ldy + K_VW) : bias ? K_VLOAD(bias + K_VW) : K_VZERO();
    }
    for (int64_t p = 0; p < kc; p++) {
        k_vec b0 = K_VLOAD(bp + p * ldbp), b1 = K_VLOAD(bp + p * ldbp + K_VW);
#pragma GCC unroll 8
        for (int i = 0; i < K_MR; i++) {
            k_vec ai = K_VSET1(ap[p * K_MR + i]);
            c0[i] = K_VFMA(ai, b0, c0[i]);
            c1[i] = K_VFMA(ai, b1, c1[i]);
        }
    }
    for (int i = 0; i < K_MR; i++) {
        K_VSTORE(y + i * ldy, c0[i]);
        K_VSTORE(y + i * ldy + K_VW, c1[i]);
    }
}

/* y (m x n, ldy) = alpha op(a) @ op(B), plus y itself when acc, else plus
 * the row bias[n] (a bias Add folded in: NULL, none). op(a) is m x k: a
 * itself (lda) or, when ta, a stored k x m. B is either bp, in K_PANEL
 * panels (bodies.h), or b (ldb; stored n x k when tb), which is packed here
 * one K_KC x K_NC block at a time into a buffer of this function's, just
 * before every row block passes over it: the packing reads each element
 * of b once per block, against the K_MR-row passes' 2 m / K_MR flops per
 * element, so GEMMs on activations (the backward pass's, attention's) get
 * the same inner kernel as those on weights. alpha scales a as it is
 * packed. Edge blocks (m or n not a whole tile) run on a copy in `edge`.
 * Tests the collectives in flight every K_POLL_FLOPS. */
static inline void k_gemm_blocked_f32(int64_t m, int64_t n, int64_t k, float alpha, const float *a, int ta,
                                      int64_t lda, const float *b, int tb, int64_t ldb, const float *bp, float *y,
                                      int64_t ldy, int acc, const float *bias)
{
    static float bblock[K_KC * K_NC] __attribute__((aligned(64)));
    float ap[K_KC * K_MR] __attribute__((aligned(64))), edge[K_MR * K_NR] __attribute__((aligned(64)));
    float bedge[K_NR] __attribute__((aligned(64)));
    int64_t panels = (n + K_NR - 1) / K_NR, done = 0;
    for (int64_t k0 = 0; k0 < k; k0 += K_KC) {
        int64_t kc = k - k0 < K_KC ? k - k0 : K_KC;
        int tile_acc = acc || k0 > 0;
        for (int64_t p0 = 0; p0 < panels; p0 += K_NC / K_NR) {
            int64_t p1 = p0 + K_NC / K_NR < panels ? p0 + K_NC / K_NR : panels;
            if (!bp)
                for (int64_t p = p0; p < p1; p++) {
                    float *dst = bblock + (p - p0) * kc * K_NR;
                    int64_t c0 = p * K_NR, nr = n - c0 < K_NR ? n - c0 : K_NR;
                    for (int64_t q = 0; q < kc; q++) {
                        float *row = dst + q * K_NR;
                        if (tb)
                            for (int64_t j = 0; j < nr; j++)
                                row[j] = b[(c0 + j) * ldb + k0 + q];
                        else
                            memcpy(row, b + (k0 + q) * ldb + c0, (size_t)nr * sizeof(float));
                        for (int64_t j = nr; j < K_NR; j++)
                            row[j] = 0.0f;
                    }
                }
            for (int64_t i0 = 0; i0 < m; i0 += K_MR) {
                int64_t mr = m - i0 < K_MR ? m - i0 : K_MR;
                if (ta) {
                    const float *as = a + k0 * lda + i0;
                    for (int64_t q = 0; q < kc; q++)
                        for (int64_t i = 0; i < K_MR; i++)
                            ap[q * K_MR + i] = i < mr ? alpha * as[q * lda + i] : 0.0f;
                } else {
                    const float *as = a + i0 * lda + k0;
                    for (int64_t q = 0; q < kc; q++)
                        for (int64_t i = 0; i < K_MR; i++)
                            ap[q * K_MR + i] = i < mr ? alpha * as[i * lda + q] : 0.0f;
                }
                for (int64_t p = p0; p < p1; p++) {
                    /* a tile of a packed B: its panel's columns from (p K_NR) mod K_PANEL */
                    const float *bs = bp ? bp + (p * K_NR / K_PANEL * k + k0) * K_PANEL + p * K_NR % K_PANEL
                                         : bblock + (p - p0) * kc * K_NR;
                    int64_t ldbp = bp ? K_PANEL : K_NR;
                    const float *bb = bias && !tile_acc ? bias + p * K_NR : NULL;
                    float *ys = y + i0 * ldy + p * K_NR;
                    int64_t nr = n - p * K_NR < K_NR ? n - p * K_NR : K_NR;
                    if (mr == K_MR && nr == K_NR) {
                        k_gemm_tile(kc, ap, bs, ldbp, ys, ldy, tile_acc, bb);
                        continue;
                    }
                    memset(edge, 0, sizeof edge);
                    for (int64_t i = 0; tile_acc && i < mr; i++)
                        memcpy(edge + i * K_NR, ys + i * ldy, (size_t)nr * sizeof(float));
                    if (bb) {
                        memset(bedge, 0, sizeof bedge);
                        memcpy(bedge, bb, (size_t)nr * sizeof(float));
                        bb = bedge;
                    }
                    k_gemm_tile(kc, ap, bs, ldbp, edge, K_NR, tile_acc, bb);
                    for (int64_t i = 0; i < mr; i++)
                        memcpy(ys + i * ldy, edge + i * K_NR, (size_t)nr * sizeof(float));
                }
                done += 2 * mr * kc * (p1 - p0) * K_NR;
                if (rt_nfly && done >= K_POLL_FLOPS) {
                    rt_poll();
                    done = 0;
                }
            }
        }
    }
}

/* y (m x n, ldy) = a (m x k, lda) @ B, plus y itself when acc, else plus
 * the row bias[n]; bp is B in K_PANEL panels. */
static inline void k_gemm_packed_f32(int64_t m, int64_t n, int64_t k, const float *a, int64_t lda,
                                     const float *bp, float *y, int64_t ldy, int acc, const float *bias)
{
    /* (b is not read when bp is given; passing NULL there lets GCC's
     * constant propagation see a block copy from a null pointer on a path
     * that never runs, and -Warray-bounds fires at -O3) */
    k_gemm_blocked_f32(m, n, k, 1.0f, a, 0, lda, bp, 0, 0, bp, y, ldy, acc, bias);
}
#else
#define K_PACKED_GEMM 0
#define K_PACKED_ISA "not built"
#endif

/* One GEMM, y (ldy) = alpha op(a) op(b) + beta y. Where the blocked
 * kernel above is built, it takes every GEMM whose beta is 0 or 1 (all
 * that the emitters write but a Gemm's own beta): OpenBLAS picks its
 * kernels by the CPU it recognises, and one it does not (0.3.21 on
 * Sapphire Rapids: "Prescott", no vector code) runs at a third of the
 * blocked kernel's speed, which was most of a training step. Elsewhere,
 * CBLAS, in blocks of columns or rows when collectives are in flight. */
static inline void k_sgemm(int ta, int tb, int64_t m, int64_t n, int64_t k, float alpha, const float *a,
                           int64_t lda, const float *b, int64_t ldb, float beta, float *y, int64_t ldy)
{
#if K_PACKED_GEMM
    if ((beta == 0.0f || beta == 1.0f) && k > 0) { /* k = 0: CBLAS writes beta y, the kernel nothing */
        k_gemm_blocked_f32(m, n, k, alpha, a, ta, lda, b, tb, ldb, NULL, y, ldy, beta == 1.0f, NULL);
        return;
    }
#endif
    int by_cols = n >= m;
    int64_t span = by_cols ? n : m, blocks = 1;
    if (rt_nfly) {
        int64_t work = 2 * m * n * k / K_POLL_FLOPS, most = span / K_POLL_SPAN;
        blocks = work < most ? work : most;
        blocks = blocks < 1 ? 1 : blocks;
    }
    int64_t step = (span + blocks - 1) / blocks;
    step = (step + 15) / 16 * 16; /* whole vector tiles per block */
    for (int64_t o = 0; o < span; o += step) {
        int64_t w = span - o < step ? span - o : step;
        const float *ab = a, *bb = b;
        float *yb = y;
        if (by_cols) {
            bb = tb ? b + o * ldb : b + o;
            yb = y + o;
        } else {
            ab = ta ? a + o : a + o * lda;
            yb = y + o * ldy;
        }
        cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
                    (int)(by_cols ? m : w), (int)(by_cols ? w : n), (int)k, alpha, ab, (int)lda, bb, (int)ldb, beta,
                    yb, (int)ldy);
        if (o + w < span)
            rt_poll();
    }
}


/* B (k x n; stored n x k when tb) in K_PANEL panels (bodies.h), in memory
 * of its own: a training program's weights, packed at start-up. */
static inline float *k_pack_b_f32(const float *b, int64_t k, int64_t n, int tb)
{
    float *bp = rt_alloc((size_t)k_panels_bytes(k, n));
    k_pack_panels_f32(bp, b, k, n, tb);
    return bp;
}

/* Packs b into bp (from k_pack_b_f32) again: a weight that trains,
 * after each update (codegen/emit_train.c). */
static inline void k_repack_b_f32(float *bp, const float *b, int64_t k, int64_t n, int tb)
{
    k_pack_panels_f32(bp, b, k, n, tb);
}

/* y (m x n) = a (m x k) @ B, plus y when acc (a Gemm's C, written first),
 * else plus the row bias[n] when there is one (a bias Add folded in); bp
 * is B in K_PANEL panels. Without the vector kernel: plain loops, a row
 * of y against one panel at a time (the compiler vectorises the K_PANEL
 * columns). */
static inline void k_matmul_packed_f32(float *y, const float *a, const float *bp, const float *bias, int64_t m,
                                       int64_t k, int64_t n, int acc)
{
#if K_PACKED_GEMM
    k_gemm_packed_f32(m, n, k, a, k, bp, y, n, acc, bias);
#else
    int64_t panels = (n + K_PANEL - 1) / K_PANEL;
    for (int64_t i = 0; i < m; i++) {
        if (rt_nfly && i % 8 == 0)
            rt_poll();
        for (int64_t p = 0; p < panels; p++) {
            int64_t c0 = p * K_PANEL, nr = n - c0 < K_PANEL ? n - c0 : K_PANEL;
            float acc_row[K_PANEL];
            for (int64_t j = 0; j < K_PANEL; j++)
                acc_row[j] = j >= nr ? 0.0f : acc ? y[i * n + c0 + j] : bias ? bias[c0 + j] : 0.0f;
            const float *ai = a + i * k, *panel = bp + p * k * K_PANEL;
            for (int64_t q = 0; q < k; q++)
                for (int64_t j = 0; j < K_PANEL; j++)
                    acc_row[j] += ai[q] * panel[q * K_PANEL + j];
            memcpy(y + i * n + c0, acc_row, (size_t)nr * sizeof(float));
        }
    }
#endif
}

/* Rows of `cols` elements a loop may run between tests of the collectives
 * in flight (all of them when none is). */
static inline int64_t k_poll_rows(int64_t cols)
{
    if (!rt_nfly)
        return INT64_MAX;
    return cols >= K_POLL_ELEMS ? 1 : K_POLL_ELEMS / (cols > 0 ? cols : 1);
}

/* No NCCL here: nothing to abort before MPI_Abort. */
static void rt_abort_comms(void)
{
}

/* Steps the row-major multi-index idx over the first n dims (the last
 * fastest) by one element, moving each offset o_k by its strides s_k and
 * back when a dim wraps: the odometer of every strided loop below. Up to
 * three offsets; unused ones are NULL (inlined, the checks fold away). */
static inline __attribute__((always_inline)) void k_next(int n, const int64_t *dims, int64_t *idx, int64_t *o0,
                                                         const int64_t *s0, int64_t *o1, const int64_t *s1,
                                                         int64_t *o2, const int64_t *s2)
{
    for (int i = n - 1; i >= 0; i--) {
        *o0 += s0[i];
        if (o1)
            *o1 += s1[i];
        if (o2)
            *o2 += s2[i];
        if (++idx[i] < dims[i])
            return;
        *o0 -= s0[i] * dims[i];
        if (o1)
            *o1 -= s1[i] * dims[i];
        if (o2)
            *o2 -= s2[i] * dims[i];
        idx[i] = 0;
    }
}

/* Copies and clears of whole buffers (device memory on the CUDA target). */
static inline void k_copy(void *dst, const void *src, int64_t bytes)
{
    memcpy(dst, src, (size_t)bytes);
}

static inline void k_zero(void *dst, int64_t bytes)
{
    memset(dst, 0, (size_t)bytes);
}

/* One run of k_binary_f32's innermost dim: a and b step by 1 or hold
 * still (stride 0), so each case is a loop the compiler vectorises. */
static inline void k_binary_run_f32(int op, float *y, const float *a, int64_t as, const float *b, int64_t bs,
                                    int64_t n)
{
    if (op == K_ARITH_POW) {
        for (int64_t j = 0; j < n; j++)
            y[j] = powf(a[j * as], b[j * bs]);
        return;
    }
    if (as == 1 && bs == 1) {
        switch (op) {
        case K_ARITH_ADD: for (int64_t j = 0; j < n; j++) y[j] = a[j] + b[j]; break;
        case K_ARITH_SUB: for (int64_t j = 0; j < n; j++) y[j] = a[j] - b[j]; break;
        case K_ARITH_MUL: for (int64_t j = 0; j < n; j++) y[j] = a[j] * b[j]; break;
        default: for (int64_t j = 0; j < n; j++) y[j] = a[j] / b[j]; break;
        }
    } else if (as == 0 && bs == 1) {
        float x = *a;
        switch (op) {
        case K_ARITH_ADD: for (int64_t j = 0; j < n; j++) y[j] = x + b[j]; break;
        case K_ARITH_SUB: for (int64_t j = 0; j < n; j++) y[j] = x - b[j]; break;
        case K_ARITH_MUL: for (int64_t j = 0; j < n; j++) y[j] = x * b[j]; break;
        default: for (int64_t j = 0; j < n; j++) y[j] = x / b[j]; break;
        }
    } else if (as == 1 && bs == 0) {
        float z = *b;
        switch (op) {
        case K_ARITH_ADD: for (int64_t j = 0; j < n; j++) y[j] = a[j] + z; break;
        case K_ARITH_SUB: for (int64_t j = 0; j < n; j++) y[j] = a[j] - z; break;
        case K_ARITH_MUL: for (int64_t j = 0; j < n; j++) y[j] = a[j] * z; break;
        default: for (int64_t j = 0; j < n; j++) y[j] = a[j] / z; break;
        }
    } else {
        for (int64_t j = 0; j < n; j++) {
            float x = a[j * as], z = b[j * bs];
            y[j] = op == K_ARITH_ADD ? x + z : op == K_ARITH_SUB ? x - z : op == K_ARITH_MUL ? x * z : x / z;
        }
    }
}

/* Drops the dims of 1 and merges each dim into the one before it where
 * all `ns` stride arrays s[k] walk the two as one (the outer stride is
 * the inner one times its size), so a loop nest over the result runs
 * fewer, longer inner loops. Returns the merged rank; d gets the merged
 * dims and xs[k] each array's merged strides. */
static inline int k_merge_dims(int rank, const int64_t *dims, int ns, const int64_t *const *s, int64_t *d,
                               int64_t (*xs)[K_MAX_RANK])
{
    int r = 0;
    for (int i = 0; i < rank; i++) {
        if (dims[i] == 1)
            continue;
        int merge = r > 0;
        for (int k = 0; k < ns && merge; k++)
            merge = xs[k][r - 1] == s[k][i] * dims[i];
        if (!merge)
            d[r++] = 1;
        d[r - 1] *= dims[i];
        for (int k = 0; k < ns; k++)
            xs[k][r - 1] = s[k][i];
    }
    return r;
}

/* Binary elementwise with broadcasting. op: a K_ARITH_* selector.
 * y is dense; sa and sb are the operands' strides over y's dims (0 where
 * broadcast). Dims that both operands walk as one (a stride equal to the
 * next dim's stride times its size) merge first, so a bias row, a mask
 * over heads or a scalar runs as one long inner loop. */
static inline void k_binary_f32(int op, float *y, const float *a, const float *b, int rank, const int64_t *dims,
                                const int64_t *sa, const int64_t *sb)
{
    int64_t d[K_MAX_RANK], xs[2][K_MAX_RANK];
    const int64_t *st[2] = {sa, sb};
    int r = k_merge_dims(rank, dims, 2, st, d, xs);
    const int64_t *xa = xs[0], *xb = xs[1];
    if (r == 0) { /* one element */
        k_binary_run_f32(op, y, a, 0, b, 0, 1);
        return;
    }
    int64_t n = d[r - 1], outer = 1;
    for (int i = 0; i < r - 1; i++)
        outer *= d[i];
    int64_t idx[K_MAX_RANK] = {0}, oa = 0, ob = 0;
    for (int64_t k = 0; k < outer; k++) {
        k_binary_run_f32(op, y + k * n, a + oa, xa[r - 1], b + ob, xb[r - 1], n);
        k_next(r - 1, d, idx, &oa, xa, &ob, xb, NULL, NULL);
    }
}

static inline void k_binary_i64(int op, int64_t *y, const int64_t *a, const int64_t *b, int rank,
                                const int64_t *dims, const int64_t *sa, const int64_t *sb)
{
    int64_t n = 1;
    for (int i = 0; i < rank; i++)
        n *= dims[i];
    int64_t idx[K_MAX_RANK] = {0}, oa = 0, ob = 0;
    for (int64_t k = 0; k < n; k++) {
        int64_t x = a[oa], z = b[ob], r;
        switch (op) {
        case K_ARITH_ADD: r = x + z; break;
        case K_ARITH_SUB: r = x - z; break;
        case K_ARITH_MUL: r = x * z; break;
        case K_ARITH_DIV: r = k_idiv(x, z); break;
        default: r = k_ipow(x, z); break;
        }
        y[k] = r;
        k_next(rank, dims, idx, &oa, sa, &ob, sb, NULL, NULL);
    }
}

/* Fast paths: same shape, or b broadcast along the leading dims (a bias). */
static inline void k_add_rows_f32(float *y, const float *a, const float *b, int64_t rows, int64_t cols)
{
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++)
            y[r * cols + c] = a[r * cols + c] + b[c];
}

static inline void k_add_f32(float *y, const float *a, const float *b, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        y[i] = a[i] + b[i];
}

/* Same-shape, scalar and row-broadcast forms of the four arithmetic ops,
 * written as plain loops the compiler vectorises. op as in k_binary_f32. */
static inline void k_arith_f32(int op, float *y, const float *a, const float *b, int64_t rows, int64_t cols,
                               int64_t a_rs, int64_t b_rs, int64_t b_cs)
{
    int64_t every = k_poll_rows(cols);
    for (int64_t r = 0; r < rows; r++) {
        if (r && r % every == 0)
            rt_poll();
        const float *ap = a + r * a_rs, *bp = b + r * b_rs;
        float *yp = y + r * cols;
        switch (op) {
        case K_ARITH_ADD: for (int64_t c = 0; c < cols; c++) yp[c] = ap[c] + bp[c * b_cs]; break;
        case K_ARITH_SUB: for (int64_t c = 0; c < cols; c++) yp[c] = ap[c] - bp[c * b_cs]; break;
        case K_ARITH_MUL: for (int64_t c = 0; c < cols; c++) yp[c] = ap[c] * bp[c * b_cs]; break;
        default: for (int64_t c = 0; c < cols; c++) yp[c] = ap[c] / bp[c * b_cs]; break;
        }
    }
}

/* One row of Where on 4-byte elements: y[j] = c[j] ? v[j] : *one, or with
 * inv the other way round; bit selects, so it vectorises. */
static inline void k_where_row_f32(float *y, const unsigned char *c, const float *v, const float *one, int64_t n,
                                   int inv)
{
    uint32_t o, vb;
    memcpy(&o, one, sizeof o);
    for (int64_t j = 0; j < n; j++) {
        uint32_t m = 0u - (uint32_t)((c[j] != 0) != (inv != 0));
        memcpy(&vb, v + j, sizeof vb);
        vb = (vb & m) | (o & ~m);
        memcpy(y + j, &vb, sizeof vb);
    }
}

/* Where(cond, x, y) with broadcasting; elsize 4 or 8. */
static inline void k_where(void *y, const unsigned char *c, const void *x, const void *z, size_t elsize, int rank,
                           const int64_t *dims, const int64_t *sc, const int64_t *sx, const int64_t *sz)
{
    int64_t n = 1;
    for (int i = 0; i < rank; i++)
        n *= dims[i];
    if (n == 0)
        return;
    /* The innermost dim in a loop of its own (typed for 4-byte elements,
     * a masked score row), the outer ones by the index walk. */
    int r = rank ? rank - 1 : 0;
    int64_t run = rank ? dims[rank - 1] : 1, cl = rank ? sc[rank - 1] : 0, xl = rank ? sx[rank - 1] : 0,
            zl = rank ? sz[rank - 1] : 0;
    int64_t idx[K_MAX_RANK] = {0}, oc = 0, ox = 0, oz = 0;
    for (int64_t k = 0; k < n; k += run) {
        if (elsize == 4 && cl == 1 && xl == 1 && zl == 0) { /* a mask row over a row, else one value */
            k_where_row_f32((float *)y + k, c + oc, (const float *)x + ox, (const float *)z + oz, run, 0);
        } else if (elsize == 4 && cl == 1 && xl == 0 && zl == 1) {
            k_where_row_f32((float *)y + k, c + oc, (const float *)z + oz, (const float *)x + ox, run, 1);
        } else if (elsize == 4) {
            char *yp = (char *)y + k * 4;
            const char *xp = (const char *)x + ox * 4, *zp = (const char *)z + oz * 4;
            const unsigned char *cp = c + oc;
            for (int64_t j = 0; j < run; j++)
                memcpy(yp + j * 4, cp[j * cl] ? xp + j * xl * 4 : zp + j * zl * 4, 4);
        } else {
            for (int64_t j = 0; j < run; j++)
                memcpy((char *)y + (k + j) * (int64_t)elsize,
                       c[oc + j * cl] ? (const char *)x + (ox + j * xl) * (int64_t)elsize
                                      : (const char *)z + (oz + j * zl) * (int64_t)elsize,
                       elsize);
        }
        k_next(r, dims, idx, &oc, sc, &ox, sx, &oz, sz);
    }
}

/* GCC vectorises the clamps and selects inside k_exp only when it may
 * ignore FP traps and signed zeros; the erf-based loops below are the only
 * ones built that way (their inputs and outputs are ordinary finite values
 * or saturate the same way). Other compilers build them as written. */
#if defined(__GNUC__) && !defined(__clang__) && !defined(__CUDACC__)
#define K_VECTOR_MATH __attribute__((optimize("fast-math", "fp-contract=fast"), unused))
#else
#define K_VECTOR_MATH __attribute__((unused))
#endif

/* Before an elementwise loop that may run in place (y == x, as the fused
 * bias + activation does): each iteration reads x[i] before it writes
 * y[i], so no iteration depends on another. Without it GCC versions the
 * loop on a run-time overlap check, and y == x takes the scalar copy. */
#if defined(__clang__)
#define K_IVDEP _Pragma("clang loop vectorize(assume_safety)")
#elif defined(__GNUC__)
#define K_IVDEP _Pragma("GCC ivdep")
#else
#define K_IVDEP
#endif

/* The bits of a where c holds, of b elsewhere: a select GCC keeps as one
 * (a ?: between two computed values may be sunk into a branch, and a loop
 * with a branch in it does not vectorise). */
K_VECTOR_MATH static inline float k_select(int c, float a, float b)
{
    uint32_t ua, ub, m = 0u - (uint32_t)(c != 0);
    memcpy(&ua, &a, sizeof ua);
    memcpy(&ub, &b, sizeof ub);
    ua = (ua & m) | (ub & ~m);
    memcpy(&a, &ua, sizeof a);
    return a;
}

/* exp and erf without libm calls, so loops over them vectorise. k_exp:
 * 2^k * p(r) with r in [-ln2/2, ln2/2] and a degree-6 polynomial (relative
 * error ~2e-7). k_erf: two polynomial pieces and no division (a
 * reciprocal made the loop latency-bound: 2.3 ns an element against 1.5
 * now): z P(z^2) below |x| = 0.921875, 1 - exp(Q(z)) above, Q fitting
 * log erfc, with z clamped at 3.925 where erf rounds to 1. Least-squares
 * fits over Chebyshev points; absolute error under 1.2e-7 (small piece)
 * and 4e-8 (large), checked in tests/kernels against libm's erf. */
K_VECTOR_MATH static inline float k_exp(float x)
{
    /* Below -87 the result would be subnormal (and subnormals make every
     * later FMA on them slow): return 0, as expf underflows to. */
    int under = x < -87.0f;
    x = x < -87.0f ? -87.0f : x > 88.0f ? 88.0f : x;
    /* k = round(x / ln 2) by truncation (floorf would not vectorise). */
    float k = __builtin_rintf(x * 1.44269504f);
    int32_t ki = (int32_t)k;
    float r = x - k * 0.693145752f - k * 1.42860677e-6f;
    float p = 1.0f + r * (1.0f + r * (0.5f + r * (0.166666672f + r * (0.0416664824f + r * (0.00833336171f +
                                                                                           r * 0.00139304635f)))));
    int32_t bits;
    memcpy(&bits, &p, sizeof bits);
    bits += ki * (1 << 23);
    memcpy(&p, &bits, sizeof p);
    return k_select(under, 0.0f, p);
}

K_VECTOR_MATH static inline float k_erf(float x)
{
    float z = x < 0 ? -x : x, z2 = z * z;
    float small = z * (1.128379159f + z2 * (-0.3761252404f + z2 * (0.1128203878f + z2 * (-0.02677294519f +
                  z2 * (0.005000880233f + z2 * -6.024533380e-4f)))));
    float zb = z < 3.925f ? z : 3.925f;
    float q = 3.109375592e-4f + zb * (-1.130200252f + zb * (-0.6318756217f + zb * (-0.1100401764f +
              zb * (0.02640231049f + zb * (-0.004754324374f + zb * (5.959683903e-4f + zb * (-4.599266121e-5f +
              zb * 1.635543630e-6f)))))));
    float r = k_select(z < 0.921875f, small, 1.0f - k_exp(q));
    return k_select(x < 0, -r, r);
}

/* tanh: an odd Taylor polynomial below |x| = 1/4 (error under 1e-9
 * relative there, where 1 - 2/(e^2x + 1) would cancel), that form above. */
K_VECTOR_MATH static inline float k_tanh(float x)
{
    float z = x < 0 ? -x : x, z2 = z * z;
    float small = z * (1.0f + z2 * (-0.333333333f + z2 * (0.133333333f + z2 * (-0.0539682540f +
                                                                                  z2 * 0.0218694885f))));
    float big = 1.0f - 2.0f / (k_exp(2.0f * (z < 9.0f ? z : 9.0f)) + 1.0f);
    float r = k_select(z < 0.25f, small, big);
    return k_select(x < 0, -r, r);
}

/* One activation of v (op as k_unary_run_f32: K_UNARY_ERF to
 * K_UNARY_GELU_TANH), inlined into each loop with op a constant. */
K_VECTOR_MATH static inline __attribute__((always_inline)) float k_act(int op, float v)
{
    switch (op) {
    case K_UNARY_ERF: return k_erf(v);
    case K_UNARY_TANH: return k_tanh(v);
    case K_UNARY_SIGMOID: return 1.0f / (1.0f + k_exp(-v));
    case K_UNARY_GELU: return 0.5f * v * (1.0f + k_erf(v * 0.70710678118654752f));
    default: return 0.5f * v * (1.0f + k_tanh(0.7978845608028654f * (v + 0.044715f * v * v * v)));
    }
}

/* y = act(x), or act(x + b) where b is not NULL (the fused bias, as long
 * as x): one plain loop per op and form, so each vectorises and a bias
 * sum goes straight into the activation. y may be x. */
#define K_ACT_LOOP(OP) \
    case OP: \
        if (b) \
            K_IVDEP for (int64_t i = 0; i < n; i++) y[i] = k_act(OP, x[i] + b[i]); \
        else \
            K_IVDEP for (int64_t i = 0; i < n; i++) y[i] = k_act(OP, x[i]); \
        break
K_VECTOR_MATH static void k_act_loop(int op, float *y, const float *x, const float *b, int64_t n)
{
    switch (op) {
    K_ACT_LOOP(K_UNARY_ERF);
    K_ACT_LOOP(K_UNARY_TANH);
    K_ACT_LOOP(K_UNARY_SIGMOID);
    K_ACT_LOOP(K_UNARY_GELU);
    default: K_ACT_LOOP(K_UNARY_GELU_TANH);
    }
}
#undef K_ACT_LOOP

/* Unary float ops, on x or on x + b (b NULL: none). op: a K_UNARY_*
 * selector (templates/bodies.h). Relu and sqrt
 * are built as written (outside K_VECTOR_MATH: sqrt stays exact). */
static inline void k_unary_bias_run_f32(int op, float *y, const float *x, const float *b, int64_t n)
{
    switch (op) {
    case K_UNARY_RELU:
        if (b)
            K_IVDEP for (int64_t i = 0; i < n; i++) { float v = x[i] + b[i]; y[i] = v > 0 ? v : 0; }
        else
            K_IVDEP for (int64_t i = 0; i < n; i++) y[i] = x[i] > 0 ? x[i] : 0;
        break;
    case K_UNARY_SQRT:
        if (b)
            K_IVDEP for (int64_t i = 0; i < n; i++) y[i] = sqrtf(x[i] + b[i]);
        else
            K_IVDEP for (int64_t i = 0; i < n; i++) y[i] = sqrtf(x[i]);
        break;
    default: k_act_loop(op, y, x, b, n); break;
    }
}

static inline void k_unary_run_f32(int op, float *y, const float *x, int64_t n)
{
    k_unary_bias_run_f32(op, y, x, NULL, n);
}

static inline void k_unary_f32(int op, float *y, const float *x, int64_t n)
{
    int64_t step = rt_nfly ? K_POLL_ELEMS : n;
    for (int64_t i = 0; i < n; i += step) {
        k_unary_run_f32(op, y + i, x + i, n - i < step ? n - i : step);
        if (i + step < n)
            rt_poll();
    }
}

/* Pow by one exponent (a scalar operand): the small integer and half
 * powers exported activations use (x^3 in GPT-2's Gelu, x^2 in RMSNorm)
 * as multiplies, which vectorise; any other exponent through powf. */
static inline void k_pow_scalar_f32(float *y, const float *x, const float *e, int64_t n)
{
    float p = *e;
    if (p == 2.0f)
        for (int64_t i = 0; i < n; i++) y[i] = x[i] * x[i];
    else if (p == 3.0f)
        for (int64_t i = 0; i < n; i++) y[i] = x[i] * x[i] * x[i];
    else if (p == 1.0f)
        for (int64_t i = 0; i < n; i++) y[i] = x[i];
    else if (p == 0.5f)
        for (int64_t i = 0; i < n; i++) y[i] = sqrtf(x[i]);
    else
        for (int64_t i = 0; i < n; i++) y[i] = powf(x[i], p);
}

static inline void k_relu_i64(int64_t *y, const int64_t *x, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        y[i] = x[i] > 0 ? x[i] : 0;
}

/* Cast between any two element types (ONNX codes, runtime.c). Also the
 * widening of a float16/bfloat16/int32... operand into its compute type
 * before a node and the narrowing of a result after it; the common pairs
 * get their own loops. */
static inline void k_cast(void *y, int to, const void *x, int from, int64_t n)
{
    if (from == RT_F16 && to == RT_F32)
        for (int64_t i = 0; i < n; i++)
            ((float *)y)[i] = rt_h2f(((const uint16_t *)x)[i]);
    else if (from == RT_F32 && to == RT_F16)
        for (int64_t i = 0; i < n; i++)
            ((uint16_t *)y)[i] = rt_f2h(((const float *)x)[i]);
    else if (from == RT_BF16 && to == RT_F32)
        for (int64_t i = 0; i < n; i++)
            ((float *)y)[i] = rt_bf2f(((const uint16_t *)x)[i]);
    else if (from == RT_F32 && to == RT_BF16)
        for (int64_t i = 0; i < n; i++)
            ((uint16_t *)y)[i] = rt_f2bf(((const float *)x)[i]);
    else if (from == RT_I64 && to == RT_F32) /* directly: no double rounding through double */
        for (int64_t i = 0; i < n; i++)
            ((float *)y)[i] = (float)((const int64_t *)x)[i];
    else
        for (int64_t i = 0; i < n; i++)
            rt_convert(y, to, x, from, i);
}

/* Batched matmul: y[b] = a[b] @ w[b], with per-batch element offsets
 * (0 stride for a broadcast operand). */
static inline void k_matmul_f32(float *y, const float *a, const float *w, int64_t batch, int64_t m, int64_t k,
                                int64_t n, int64_t a_bstride, int64_t w_bstride)
{
    for (int64_t b = 0; b < batch; b++) {
        k_sgemm(0, 0, m, n, k, 1.0f, a + b * a_bstride, k, w + b * w_bstride, n, 0.0f, y + b * m * n, n);
        if (b + 1 < batch)
            rt_poll();
    }
}

/* An MoE expert GEMM over one (group, expert) block's filled columns:
 * y [m, n] = a [m, k] @ b [k, n] on the first `cols` columns (a count
 * from rt_moe_count), zeros in the others, which is what the whole GEMM
 * gives there on a dispatch buffer's zero columns (and which the combine
 * never reads). */
static inline void k_matmul_cols_f32(float *y, const float *a, const float *b, int64_t m, int64_t k, int64_t n,
                                     int64_t cols)
{
    if (cols > 0)
        k_sgemm(0, 0, m, cols, k, 1.0f, a, k, b, n, 0.0f, y, n);
    for (int64_t i = 0; i < m && cols < n; i++)
        memset(y + i * n + cols, 0, (size_t)(n - cols) * sizeof *y);
}

/* One GEMM y = op(a) @ op(b) on matrices read in place: ta/tb say that a
 * (m x k) or b (k x n) is stored transposed, lda/ldb are their leading
 * dimensions (a Transpose folded into the call: its copy is never made). */
static inline void k_matmul_view_f32(float *y, const float *a, int ta, int64_t lda, const float *b, int tb,
                                     int64_t ldb, int64_t m, int64_t k, int64_t n)
{
    k_sgemm(ta, tb, m, n, k, 1.0f, a, lda, b, ldb, 0.0f, y, n);
}

static inline void k_matmul_i64(int64_t *y, const int64_t *a, const int64_t *w, int64_t batch, int64_t m,
                                int64_t k, int64_t n, int64_t a_bstride, int64_t w_bstride)
{
    for (int64_t b = 0; b < batch; b++)
        for (int64_t i = 0; i < m; i++)
            for (int64_t j = 0; j < n; j++) {
                int64_t s = 0;
                for (int64_t q = 0; q < k; q++)
                    s += a[b * a_bstride + i * k + q] * w[b * w_bstride + q * n + j];
                y[b * m * n + i * n + j] = s;
            }
}

/* y = beta * c (m x n), c broadcast by strides: the start of a Gemm. */
static inline void k_gemm_init_f32(float *y, const float *c, int64_t m, int64_t n, float beta, int64_t c_rs,
                                   int64_t c_cs)
{
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++)
            y[i * n + j] = beta * c[i * c_rs + j * c_cs];
}

/* Gemm: y = alpha * op(a) @ op(b) + beta * c, c broadcast by strides.
 * Without c the GEMM's own beta of 0 writes y: no memset, which gcc 12's
 * -Warray-bounds also flagged where c and y are both offsets into the
 * arena (on its path where the arena pointer is NULL). */
static inline void k_gemm_f32(float *y, const float *a, const float *b, const float *c, int64_t m, int64_t n,
                              int64_t k, int ta, int tb, float alpha, float beta, int64_t c_rs, int64_t c_cs)
{
    if (c)
        k_gemm_init_f32(y, c, m, n, beta, c_rs, c_cs);
    k_sgemm(ta, tb, m, n, k, alpha, a, ta ? m : k, b, tb ? k : n, c ? 1.0f : 0.0f, y, n);
}

/* One softmax row (contiguous) of maximum mx: exp(x - mx) with k_exp, normalise;
 * plain loops, vectorised. Rows with no finite maximum go the exact way. */
/* The largest of a contiguous row (NaNs aside), as a vector reduction. */
K_VECTOR_MATH static float k_row_max_f32(const float *x, int64_t n)
{
    float mx = -INFINITY;
    for (int64_t j = 0; j < n; j++)
        mx = x[j] > mx ? x[j] : mx;
    return mx;
}

K_VECTOR_MATH static void k_softmax_row_f32(float *y, const float *x, int64_t n, float mx)
{
    float sum = 0;
    for (int64_t j = 0; j < n; j++) {
        y[j] = k_exp(x[j] - mx);
        sum += y[j];
    }
    float inv = 1.0f / sum;
    for (int64_t j = 0; j < n; j++)
        y[j] *= inv;
}

/* Softmax over the middle dim of [outer, n, inner]: contiguous rows
 * (inner 1) with a finite maximum through k_softmax_row_f32, the rest
 * (strided, or a row of -inf, whose result is NaN) with expf. */
static inline void k_softmax_f32(float *y, const float *x, int64_t outer, int64_t n, int64_t inner)
{
    int64_t every = k_poll_rows(n * inner);
    for (int64_t o = 0; o < outer; o++)
        for (int64_t i = 0; i < inner; i++) {
            if (o && !i && o % every == 0)
                rt_poll();
            const float *xp = x + o * n * inner + i;
            float *yp = y + o * n * inner + i;
            float mx = -INFINITY, sum = 0;
            if (inner == 1)
                mx = k_row_max_f32(xp, n);
            else
                for (int64_t j = 0; j < n; j++)
                    mx = xp[j * inner] > mx ? xp[j * inner] : mx;
            if (inner == 1 && isfinite(mx)) {
                k_softmax_row_f32(yp, xp, n, mx);
                continue;
            }
            for (int64_t j = 0; j < n; j++) {
                yp[j * inner] = expf(xp[j * inner] - mx);
                sum += yp[j * inner];
            }
            for (int64_t j = 0; j < n; j++)
                yp[j * inner] /= sum;
        }
}

/* Mean and variance of one row, as sums the compiler may reorder into
 * vector lanes (float lanes, each of a few hundred terms at most). */
K_VECTOR_MATH static void k_row_moments_f32(const float *x, int64_t n, float *mean, float *var)
{
    float s = 0, q = 0;
    for (int64_t j = 0; j < n; j++)
        s += x[j];
    float m = s / (float)n;
    for (int64_t j = 0; j < n; j++)
        q += (x[j] - m) * (x[j] - m);
    *mean = m;
    *var = q / (float)n;
}

/* LayerNormalization over the trailing n elements of each of `outer` rows.
 * Scale/bias have `sn`/`bn` elements, broadcast over the row (n % sn == 0).
 * The usual case (scale and bias as long as the row) runs as vector loops. */
static inline void k_layernorm_f32(float *y, float *mean_out, float *istd_out, const float *x, const float *scale,
                                   const float *bias, int64_t outer, int64_t n, int64_t sn, int64_t bn, float eps)
{
    int64_t every = k_poll_rows(n);
    if (sn == n && (!bias || bn == n)) {
        for (int64_t o = 0; o < outer; o++) {
            if (o && o % every == 0)
                rt_poll();
            const float *xp = x + o * n;
            float *yp = y + o * n, mean, var;
            k_row_moments_f32(xp, n, &mean, &var);
            float istd = (float)(1.0 / sqrt((double)var + eps));
            if (bias)
                for (int64_t j = 0; j < n; j++)
                    yp[j] = (xp[j] - mean) * istd * scale[j] + bias[j];
            else
                for (int64_t j = 0; j < n; j++)
                    yp[j] = (xp[j] - mean) * istd * scale[j];
            if (mean_out)
                mean_out[o] = mean;
            if (istd_out)
                istd_out[o] = istd;
        }
        return;
    }
    for (int64_t o = 0; o < outer; o++) {
        if (o && o % every == 0)
            rt_poll();
        const float *xp = x + o * n;
        float *yp = y + o * n;
        double mean = 0, var = 0;
        for (int64_t j = 0; j < n; j++)
            mean += xp[j];
        mean /= (double)n;
        for (int64_t j = 0; j < n; j++)
            var += (xp[j] - mean) * (xp[j] - mean);
        var /= (double)n;
        float istd = (float)(1.0 / sqrt(var + eps));
        for (int64_t j = 0; j < n; j++) {
            float v = (float)(xp[j] - mean) * istd * scale[j % sn];
            yp[j] = bias ? v + bias[j % bn] : v;
        }
        if (mean_out)
            mean_out[o] = (float)mean;
        if (istd_out)
            istd_out[o] = istd;
    }
}

/* Generic strided copy: y (contiguous over dims) = x read with strides sx.
 * Transpose, Slice and the packing around collectives are all this. */
static inline void k_strided_copy(void *y, const void *x, size_t elsize, int rank, const int64_t *dims,
                                  const int64_t *sx, int64_t x_offset)
{
    int64_t n = 1;
    for (int i = 0; i < rank; i++)
        n *= dims[i];
    if (n == 0)
        return;
    /* Copy the innermost contiguous run at once when it is unit-stride;
     * else walk the innermost dim in a loop of its own (a transpose's
     * reads), typed for 4- and 8-byte elements. */
    int unit = rank && sx[rank - 1] == 1;
    int64_t run = rank ? dims[rank - 1] : 1, step = rank ? sx[rank - 1] : 1;
    int r = rank ? rank - 1 : 0;
    int64_t idx[K_MAX_RANK] = {0}, ox = x_offset;
    for (int64_t k = 0; k < n; k += run) {
        if (unit || rank == 0)
            memcpy((char *)y + k * (int64_t)elsize, (const char *)x + ox * (int64_t)elsize, (size_t)run * elsize);
        else if (elsize == 4)
            for (int64_t j = 0; j < run; j++)
                memcpy((char *)y + (k + j) * 4, (const char *)x + (ox + j * step) * 4, 4);
        else if (elsize == 8)
            for (int64_t j = 0; j < run; j++)
                memcpy((char *)y + (k + j) * 8, (const char *)x + (ox + j * step) * 8, 8);
        else
            for (int64_t j = 0; j < run; j++)
                memcpy((char *)y + (k + j) * (int64_t)elsize, (const char *)x + (ox + j * step) * (int64_t)elsize,
                       elsize);
        k_next(r, dims, idx, &ox, sx, NULL, NULL, NULL, NULL);
    }
}

/* The inverse: x written into y at strides sy (unpacking). */
static inline void k_strided_store(void *y, const void *x, size_t elsize, int rank, const int64_t *dims,
                                   const int64_t *sy, int64_t y_offset)
{
    int64_t n = 1;
    for (int i = 0; i < rank; i++)
        n *= dims[i];
    if (n == 0)
        return;
    int64_t run = rank && sy[rank - 1] == 1 ? dims[rank - 1] : 1;
    int r = rank && sy[rank - 1] == 1 ? rank - 1 : rank;
    int64_t idx[K_MAX_RANK] = {0}, oy = y_offset;
    for (int64_t k = 0; k < n; k += run) {
        memcpy((char *)y + oy * (int64_t)elsize, (const char *)x + k * (int64_t)elsize, (size_t)run * elsize);
        k_next(r, dims, idx, &oy, sy, NULL, NULL, NULL, NULL);
    }
}

/* Zeros a strided region of y (the padding of an uneven split). */
static inline void k_strided_zero(void *y, size_t elsize, int rank, const int64_t *dims, const int64_t *sy,
                                  int64_t y_offset)
{
    int64_t n = 1;
    for (int i = 0; i < rank; i++)
        n *= dims[i];
    if (n == 0)
        return;
    int64_t run = rank && sy[rank - 1] == 1 ? dims[rank - 1] : 1;
    int r = rank && sy[rank - 1] == 1 ? rank - 1 : rank;
    int64_t idx[K_MAX_RANK] = {0}, oy = y_offset;
    for (int64_t k = 0; k < n; k += run) {
        memset((char *)y + oy * (int64_t)elsize, 0, (size_t)run * elsize);
        k_next(r, dims, idx, &oy, sy, NULL, NULL, NULL, NULL);
    }
}

/* y at strides sy = x at strides sx, over dims (a block cut short by
 * padding on both sides of a copy). */
static inline void k_strided_move(void *y, const int64_t *sy, int64_t y_offset, const void *x, const int64_t *sx,
                                  int64_t x_offset, size_t elsize, int rank, const int64_t *dims)
{
    int64_t n = 1;
    for (int i = 0; i < rank; i++)
        n *= dims[i];
    if (n == 0)
        return;
    int unit = rank && sx[rank - 1] == 1 && sy[rank - 1] == 1;
    int64_t run = unit ? dims[rank - 1] : 1;
    int r = unit ? rank - 1 : rank;
    int64_t idx[K_MAX_RANK] = {0}, ox = x_offset, oy = y_offset;
    for (int64_t k = 0; k < n; k += run) {
        memcpy((char *)y + oy * (int64_t)elsize, (const char *)x + ox * (int64_t)elsize, (size_t)run * elsize);
        k_next(r, dims, idx, &ox, sx, &oy, sy, NULL, NULL);
    }
}

/* Gather along an axis of data viewed as [outer, len, inner]; this rank
 * holds rows [offset, offset + len) of a table of global_len rows, and
 * writes zeros for indices it does not own (a masked lookup whose partial
 * results are summed across the ranks that split the table). */
static inline void k_gather(void *y, const void *x, const int64_t *idx, int64_t nidx, size_t elsize, int64_t outer,
                            int64_t len, int64_t inner, int64_t offset, int64_t global_len)
{
    size_t row = (size_t)inner * elsize;
    for (int64_t o = 0; o < outer; o++)
        for (int64_t i = 0; i < nidx; i++) {
            int64_t g = idx[i] < 0 ? idx[i] + global_len : idx[i];
            if (g < 0 || g >= global_len)
                rt_die("node \"%s\": index %lld out of range [0, %lld)", rt_node, (long long)idx[i],
                       (long long)global_len);
            char *dst = (char *)y + ((size_t)(o * nidx + i)) * row;
            int64_t l = g - offset;
            if (l >= 0 && l < len)
                memcpy(dst, (const char *)x + ((size_t)(o * len + l)) * row, row);
            else
                memset(dst, 0, row);
        }
}

/* Concat/Split piece copy: copy a [outer, n, inner] block between tensors
 * whose axis lengths are src_len and dst_len, at axis offsets. */
static inline void k_copy_axis(void *dst, int64_t dst_len, int64_t dst_off, const void *src, int64_t src_len,
                               int64_t src_off, int64_t outer, int64_t n, int64_t inner, size_t elsize)
{
    size_t run = (size_t)(n * inner) * elsize;
    for (int64_t o = 0; o < outer; o++)
        memcpy((char *)dst + ((size_t)((o * dst_len + dst_off) * inner)) * elsize,
               (const char *)src + ((size_t)((o * src_len + src_off) * inner)) * elsize, run);
}

/* Pow with operands of different dtypes (ONNX allows float32 ^ int64 and
 * int64 ^ float32); computed in double, stored as the base's dtype. */
static inline double k_load(const void *p, int dt, int64_t i)
{
    return dt == 1 ? (double)((const float *)p)[i] : (double)((const int64_t *)p)[i];
}

static inline void k_pow_mixed(void *y, const void *a, int adt, const void *b, int bdt, int rank, const int64_t *dims,
                               const int64_t *sa, const int64_t *sb)
{
    int64_t n = 1;
    for (int i = 0; i < rank; i++)
        n *= dims[i];
    int64_t idx[K_MAX_RANK] = {0}, oa = 0, ob = 0;
    for (int64_t k = 0; k < n; k++) {
        double r = pow(k_load(a, adt, oa), k_load(b, bdt, ob));
        if (adt == 1)
            ((float *)y)[k] = (float)r;
        else
            ((int64_t *)y)[k] = (int64_t)r;
        k_next(rank, dims, idx, &oa, sa, &ob, sb, NULL, NULL);
    }
}

/* Bias + activation (fused Add and activation): y = act(a + b), b a row
 * of `cols` repeated over `rows` (or as long as a). act as k_unary_f32.
 * One pass: the sum goes straight into the activation. */
static inline void k_bias_act_f32(int act, float *y, const float *a, const float *b, int64_t rows, int64_t cols)
{
    int64_t every = k_poll_rows(cols);
    for (int64_t i = 0; i < rows; i++) {
        if (i && i % every == 0)
            rt_poll();
        k_unary_bias_run_f32(act, y + i * cols, a + i * cols, b, cols);
    }
}

/* Bias + residual (a fused bias Add read by a residual Add):
 * y = r + (a + b[col]). */
static inline void k_bias_residual_f32(float *y, const float *a, const float *b, const float *r, int64_t rows,
                                       int64_t cols)
{
    int64_t every = k_poll_rows(cols);
    for (int64_t i = 0; i < rows; i++) {
        if (i && i % every == 0)
            rt_poll();
        for (int64_t c = 0; c < cols; c++)
            y[i * cols + c] = r[i * cols + c] + (a[i * cols + c] + b[c]);
    }
}
