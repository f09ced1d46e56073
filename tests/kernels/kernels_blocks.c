/* kernels_blocks.c: the C target's kernels run in blocks exactly as whole.
 *
 * With collectives in flight (rt_nfly > 0) the GEMMs split into column or
 * row blocks and the elementwise kernels into runs, testing the
 * collectives between them (templates/kernels.c). The blocks are pointer
 * arithmetic on views (transposed operands, leading dimensions wider than
 * the matrix), so each case runs once whole and once split and the two
 * results must agree, for every transpose combination and both split
 * directions, uneven tails included. The test includes the very templates
 * the generated programs embed; MPI is linked but never started (with
 * rt_nlive 0 a poll tests nothing).
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define RANK 0
#define WORLD 1
#include "templates/runtime.c"
#include "templates/bodies.h"
#include "templates/kernels.c"
#include "templates/bodies_reduce.h"   /* ReduceSum/ReduceMean: the reduce family */
#include "templates/kernels_reduce.c"
#include "templates/bodies_train.h"    /* GeluGrad: the train family */
#include "templates/kernels_train.c"

#include <cmocka.h>

static float *rnd(int64_t n, unsigned seed)
{
    float *p = malloc(sizeof(float) * (size_t)n);
    assert_non_null(p);
    for (int64_t i = 0; i < n; i++) {
        seed = seed * 1103515245u + 12345u;
        p[i] = (float)((seed >> 8) & 0xffff) / 32768.0f - 1.0f;
    }
    return p;
}

static void same(const float *a, const float *b, int64_t n)
{
    double worst = 0;
    for (int64_t i = 0; i < n; i++) {
        double e = fabs((double)a[i] - (double)b[i]);
        worst = e > worst ? e : worst;
    }
    assert_true(worst <= 1e-4); /* a block is the same dot products, at most reassociated by the BLAS */
}

/* y = op(a) op(b) through k_matmul_view_f32 with padded leading dims. */
static void check_view(int64_t m, int64_t k, int64_t n, int ta, int tb)
{
    int64_t lda = (ta ? m : k) + 3, ldb = (tb ? k : n) + 5;
    float *a = rnd((ta ? k : m) * lda, 1), *b = rnd((tb ? n : k) * ldb, 2);
    float *whole = calloc((size_t)(m * n), sizeof(float)), *split = calloc((size_t)(m * n), sizeof(float));
    assert_true(whole && split);
    rt_nfly = 0;
    k_matmul_view_f32(whole, a, ta, lda, b, tb, ldb, m, k, n);
    rt_nfly = 1;
    k_matmul_view_f32(split, a, ta, lda, b, tb, ldb, m, k, n);
    rt_nfly = 0;
    same(whole, split, m * n);
    /* Against a plain loop, so a block that was skipped or doubled shows. */
    for (int64_t i = 0; i < m; i += 37)
        for (int64_t j = 0; j < n; j += 41) {
            double s = 0;
            for (int64_t q = 0; q < k; q++)
                s += (double)(ta ? a[q * lda + i] : a[i * lda + q]) * (double)(tb ? b[j * ldb + q] : b[q * ldb + j]);
            assert_true(fabs(s - split[i * n + j]) <= 1e-3 * (1 + fabs(s)));
        }
    free(a);
    free(b);
    free(whole);
    free(split);
}

static void test_gemm_blocks_match_the_whole_call(void **st)
{
    (void)st;
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++) {
            check_view(64, 600, 1000, ta, tb); /* columns: 3 blocks, the last shorter */
            check_view(700, 500, 64, ta, tb);  /* rows: 2 blocks */
            check_view(8, 16, 8, ta, tb);      /* too small to split */
        }
}

static void test_gemm_with_bias_and_batches(void **st)
{
    (void)st;
    int64_t m = 600, n = 520, k = 300;
    float *a = rnd(m * k, 3), *b = rnd(k * n, 4), *c = rnd(n, 5);
    float *y0 = malloc(sizeof(float) * (size_t)(m * n)), *y1 = malloc(sizeof(float) * (size_t)(m * n));
    assert_true(y0 && y1);
    rt_nfly = 0;
    k_gemm_f32(y0, a, b, c, m, n, k, 0, 0, 0.5f, 2.0f, 0, 1);
    rt_nfly = 1;
    k_gemm_f32(y1, a, b, c, m, n, k, 0, 0, 0.5f, 2.0f, 0, 1);
    same(y0, y1, m * n);
    /* Two batches of [300 x 300] @ [300 x 260]. */
    rt_nfly = 0;
    k_matmul_f32(y0, a, b, 2, 300, 300, 260, 300 * 300, 0);
    rt_nfly = 1;
    k_matmul_f32(y1, a, b, 2, 300, 300, 260, 300 * 300, 0);
    rt_nfly = 0;
    same(y0, y1, 2 * 300 * 260);
    free(a);
    free(b);
    free(c);
    free(y0);
    free(y1);
}

static void test_elementwise_runs_match_the_whole_loop(void **st)
{
    (void)st;
    int64_t rows = 700, cols = 300, n = rows * cols; /* 210000: three runs of 64K and a tail */
    float *x = rnd(n, 6), *b = rnd(cols, 7), *r = rnd(n, 8), *g = rnd(cols, 9);
    float *y0 = malloc(sizeof(float) * (size_t)n), *y1 = malloc(sizeof(float) * (size_t)n);
    assert_true(y0 && y1);
    for (int op = 0; op < 7; op++) {
        for (int64_t i = 0; i < n; i++)
            r[i] = fabsf(r[i]); /* sqrt's domain */
        rt_nfly = 0;
        k_unary_f32(op, y0, r, n);
        rt_nfly = 1;
        k_unary_f32(op, y1, r, n);
        assert_memory_equal(y0, y1, sizeof(float) * (size_t)n);
        rt_nfly = 0;
        k_bias_act_f32(op, y0, x, b, rows, cols);
        rt_nfly = 1;
        k_bias_act_f32(op, y1, x, b, rows, cols);
        assert_memory_equal(y0, y1, sizeof(float) * (size_t)n);
        /* The one-pass bias + activation against the add, then the activation. */
        for (int64_t i = 0; i < n; i++)
            y1[i] = x[i] + b[i % cols];
        k_unary_f32(op, y1, y1, n);
        for (int64_t i = 0; i < n; i++)
            if (!(op == 1 && y1[i] != y1[i])) /* sqrt of a negative sum: NaN both ways */
                assert_true(fabsf(y0[i] - y1[i]) <= 1e-6f * (1 + fabsf(y1[i])));
    }
    for (int which = 0; which < 4; which++) {
        for (int split = 0; split < 2; split++) {
            float *y = split ? y1 : y0;
            rt_nfly = split;
            switch (which) {
            case 0: k_arith_f32(0, y, x, b, rows, cols, cols, 0, 1); break;
            case 1: k_softmax_f32(y, x, rows, cols, 1); break;
            case 2: k_layernorm_f32(y, NULL, NULL, x, g, b, rows, cols, cols, cols, 1e-5f); break;
            default: k_bias_residual_f32(y, x, b, r, rows, cols); break;
            }
        }
        rt_nfly = 0;
        assert_memory_equal(y0, y1, sizeof(float) * (size_t)n);
    }
    free(x);
    free(b);
    free(r);
    free(g);
    free(y0);
    free(y1);
}

/* The vector LayerNorm (scale and bias as long as the row) and the general
 * one (shorter, broadcast) against a double-precision reference. */
static void test_layernorm_paths_agree_with_a_reference(void **st)
{
    (void)st;
    int64_t rows = 33, n = 768;
    float *x = rnd(rows * n, 10), *g = rnd(n, 11), *b = rnd(n, 12), *y = malloc(sizeof(float) * (size_t)(rows * n));
    float mean[33], istd[33];
    assert_non_null(y);
    for (int64_t i = 0; i < rows * n; i++)
        x[i] = 3.0f + 2.0f * x[i]; /* an offset, as residual streams have */
    for (int pass = 0; pass < 2; pass++) {
        int64_t sn = pass ? n / 4 : n; /* pass 1: a scale broadcast four times over the row */
        k_layernorm_f32(y, mean, istd, x, g, b, rows, n, sn, sn, 1e-5f);
        for (int64_t o = 0; o < rows; o++) {
            double m = 0, v = 0;
            for (int64_t j = 0; j < n; j++)
                m += x[o * n + j];
            m /= (double)n;
            for (int64_t j = 0; j < n; j++)
                v += (x[o * n + j] - m) * (x[o * n + j] - m);
            v /= (double)n;
            double is = 1.0 / sqrt(v + 1e-5);
            assert_true(fabs(mean[o] - m) <= 1e-5 * (1 + fabs(m)) && fabs(istd[o] - is) <= 1e-5 * is);
            for (int64_t j = 0; j < n; j++) {
                double want = (x[o * n + j] - m) * is * g[j % sn] + b[j % sn];
                assert_true(fabs(y[o * n + j] - want) <= 1e-4 * (1 + fabs(want)));
            }
        }
    }
    free(x);
    free(g);
    free(b);
    free(y);
}

/* The vectorised activations against libm, over their whole useful range. */
static void test_activations_agree_with_libm(void **st)
{
    (void)st;
    int64_t n = 40001;
    float *x = malloc(sizeof(float) * (size_t)n), *y = malloc(sizeof(float) * (size_t)n);
    assert_true(x && y);
    for (int64_t i = 0; i < n; i++)
        x[i] = -20.0f + 40.0f * (float)i / (float)(n - 1);
    for (int op = 2; op < 7; op++) {
        k_unary_f32(op, y, x, n);
        for (int64_t i = 0; i < n; i++) {
            double v = x[i], want = op == 2 ? erf(v) : op == 3 ? tanh(v) : op == 4 ? 1 / (1 + exp(-v))
                                    : op == 5 ? 0.5 * v * (1 + erf(v / sqrt(2.0)))
                                              : 0.5 * v * (1 + tanh(0.7978845608028654 * (v + 0.044715 * v * v * v)));
            assert_true(fabs(y[i] - want) <= 2e-6 * (1 + fabs(want)));
        }
    }
    /* erf itself to 2e-7, run in place as the fused bias + Gelu runs it. */
    for (int64_t i = 0; i < n; i++)
        x[i] = -6.0f + 12.0f * (float)i / (float)(n - 1);
    memcpy(y, x, sizeof(float) * (size_t)n);
    k_unary_f32(2, y, y, n);
    for (int64_t i = 0; i < n; i++)
        assert_true(fabs(y[i] - erf((double)x[i])) <= 2e-7);
    free(x);
    free(y);
}

static uint32_t lcg(uint32_t *s)
{
    *s = *s * 1103515245u + 12345u;
    return *s >> 8;
}

/* Row-major strides of dims, 0 where the operand has size 1 (broadcast). */
static void bcast_strides(const int64_t *od, const int64_t *dims, int rank, int64_t *st)
{
    int64_t acc = 1;
    for (int i = rank - 1; i >= 0; i--) {
        st[i] = od[i] == 1 && dims[i] != 1 ? 0 : acc;
        acc *= od[i];
    }
}

/* Broadcast arithmetic (merged dims, contiguous, scalar and strided inner
 * runs) against a plain index loop, bit for bit: the same float op on the
 * same two values. Random ranks 0-5, random broadcast patterns. */
static void test_broadcast_binary_matches_an_index_loop(void **st)
{
    (void)st;
    uint32_t seed = 7;
    for (int trial = 0; trial < 400; trial++) {
        int rank = (int)(lcg(&seed) % 6), op = (int)(lcg(&seed) % 5);
        int64_t dims[K_MAX_RANK], ad[K_MAX_RANK], bd[K_MAX_RANK], sa[K_MAX_RANK], sb[K_MAX_RANK], n = 1, na = 1, nb = 1;
        for (int i = 0; i < rank; i++) {
            dims[i] = 1 + lcg(&seed) % 5;
            ad[i] = lcg(&seed) % 3 == 0 ? 1 : dims[i];
            bd[i] = lcg(&seed) % 3 == 0 ? 1 : dims[i];
            n *= dims[i], na *= ad[i], nb *= bd[i];
        }
        bcast_strides(ad, dims, rank, sa);
        bcast_strides(bd, dims, rank, sb);
        float *a = rnd(na, 11 + (unsigned)trial), *b = rnd(nb, 97 + (unsigned)trial);
        float *y = malloc(sizeof(float) * (size_t)n);
        assert_true(y != NULL);
        if (op == 4)
            for (int64_t i = 0; i < na; i++)
                a[i] = fabsf(a[i]) + 0.5f; /* pow of a positive base */
        k_binary_f32(op, y, a, b, rank, dims, sa, sb);
        for (int64_t k = 0; k < n; k++) {
            int64_t rest = k, oa = 0, ob = 0;
            for (int i = rank - 1; i >= 0; i--) {
                int64_t c = rest % dims[i];
                rest /= dims[i];
                oa += c * sa[i];
                ob += c * sb[i];
            }
            float x = a[oa], z = b[ob];
            float want = op == 0 ? x + z : op == 1 ? x - z : op == 2 ? x * z : op == 3 ? x / z : powf(x, z);
            assert_true(memcmp(&y[k], &want, sizeof want) == 0);
        }
        free(a);
        free(b);
        free(y);
    }
}

/* Sums over random sets of dims (merged runs, a reduced or a kept last
 * dim) against a double reference. */
static void test_reduce_matches_a_reference(void **st)
{
    (void)st;
    uint32_t seed = 3;
    for (int trial = 0; trial < 300; trial++) {
        int rank = 1 + (int)(lcg(&seed) % 4);
        int64_t dims[K_MAX_RANK], yd[K_MAX_RANK], sy[K_MAX_RANK], n = 1, ny = 1;
        for (int i = 0; i < rank; i++) {
            dims[i] = 1 + lcg(&seed) % 19;
            yd[i] = lcg(&seed) % 2 ? 1 : dims[i];
            n *= dims[i], ny *= yd[i];
        }
        int64_t acc = 1;
        for (int i = rank - 1; i >= 0; i--) {
            sy[i] = yd[i] == 1 ? 0 : acc;
            acc *= yd[i];
        }
        float *x = rnd(n, 5 + (unsigned)trial), *y = malloc(sizeof(float) * (size_t)ny);
        double *ref = calloc((size_t)ny, sizeof(double));
        assert_true(y && ref);
        k_reduce_f32(y, ny, x, rank, dims, sy, 0.5f);
        for (int64_t k = 0; k < n; k++) {
            int64_t rest = k, oy = 0;
            for (int i = rank - 1; i >= 0; i--) {
                oy += (rest % dims[i]) * sy[i];
                rest /= dims[i];
            }
            ref[oy] += x[k];
        }
        for (int64_t i = 0; i < ny; i++)
            assert_true(fabs(y[i] - 0.5 * ref[i]) <= 1e-5 * (double)(n / ny + 1));
        free(x);
        free(y);
        free(ref);
    }
}

/* The GEMM on a prepacked weight against a double-precision reference:
 * every edge (m under a row block, n not whole panels, k over K_KC),
 * B stored either way; y accumulated into (acc), a bias row added
 * (with_bias) or neither; whole or tested in blocks. The panels are the
 * same whatever the build (bodies.h K_PANEL): the AVX-512 kernel reads
 * one as a tile, AVX2 as two, a build with neither runs plain loops; the
 * Makefile builds this file for each. */
static void check_packed(int64_t m, int64_t k, int64_t n, int tb, int acc, int with_bias, int fly)
{
    float *a = rnd(m * k, 7), *b = rnd(k * n, 8), *y = rnd(m * n, 9), *bias = rnd(n, 10);
    double *ref = malloc(sizeof(double) * (size_t)(m * n));
    assert_non_null(ref);
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
            double s = acc ? y[i * n + j] : with_bias ? bias[j] : 0.0;
            for (int64_t q = 0; q < k; q++)
                s += (double)a[i * k + q] * (tb ? b[j * k + q] : b[q * n + j]);
            ref[i * n + j] = s;
        }
    float *bp = k_pack_b_f32(b, k, n, tb);
    rt_nfly = fly;
    k_matmul_packed_f32(y, a, bp, with_bias ? bias : NULL, m, k, n, acc);
    rt_nfly = 0;
    double worst = 0;
    for (int64_t i = 0; i < m * n; i++) {
        double e = fabs(y[i] - ref[i]) / (1.0 + fabs(ref[i]));
        worst = e > worst ? e : worst;
    }
    assert_true(worst <= 1e-5 * (1 + k / 256)); /* float32 sums of k products, rounded once each */
    free(a);
    free(b);
    free(y);
    free(ref);
    free(bp);
    free(bias);
}

static void test_packed_gemm_matches_a_reference(void **st)
{
    (void)st;
    static const int64_t shapes[][3] = {{64, 64, 64}, {8, 16, 32}, {5, 7, 3}, {37, 1100, 70}, {130, 300, 600},
                                        {1, 20, 33}, {512, 40, 17}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (int tb = 0; tb < 2; tb++)
            for (int mode = 0; mode < 3; mode++) /* plain, acc, bias */
                check_packed(shapes[s][0], shapes[s][1], shapes[s][2], tb, mode == 1, mode == 2, (int)(s + mode) % 2);
}

/* k_sgemm against CBLAS itself: where the blocked kernel is built it takes
 * every GEMM with beta 0 or 1 (templates/kernels.c), so each transpose
 * combination, alpha, accumulation into y, padded leading dims and shapes
 * that cross K_KC, K_NC and the tile edges must give CBLAS's values. */
static void check_sgemm(int64_t m, int64_t k, int64_t n, int ta, int tb, float alpha, float beta)
{
    int64_t lda = (ta ? m : k) + 2, ldb = (tb ? k : n) + 3, ldy = n + 1;
    float *a = rnd((ta ? k : m) * lda, 11), *b = rnd((tb ? n : k) * ldb, 12);
    float *y = rnd(m * ldy, 13), *ref = malloc(sizeof(float) * (size_t)(m * ldy));
    assert_non_null(ref);
    memcpy(ref, y, sizeof(float) * (size_t)(m * ldy));
    k_sgemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, y, ldy);
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, (int)m, (int)n,
                (int)k, alpha, a, (int)lda, b, (int)ldb, beta, ref, (int)ldy);
    for (int64_t i = 0; i < m; i++) {
        for (int64_t j = 0; j < n; j++)
            assert_true(fabsf(y[i * ldy + j] - ref[i * ldy + j]) <= 1e-4f * (1.0f + (float)k));
        assert_true(y[i * ldy + n] == ref[i * ldy + n]); /* the padding column is left alone */
    }
    free(a);
    free(b);
    free(y);
    free(ref);
}

static void test_sgemm_matches_cblas(void **st)
{
    (void)st;
    static const int64_t shapes[][3] = {{64, 64, 64}, {5, 7, 3}, {1, 600, 33}, {130, 1100, 70}, {37, 40, 700}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (int t = 0; t < 4; t++) {
            check_sgemm(shapes[s][0], shapes[s][1], shapes[s][2], t & 1, t >> 1, 1.0f, 0.0f);
            check_sgemm(shapes[s][0], shapes[s][1], shapes[s][2], t & 1, t >> 1, 0.5f, 1.0f);
        }
}

/* GeluGrad's fused pass against its formula in double precision, both
 * forms, run whole and in polled runs, over the range activations take
 * and out to where erf and tanh saturate. */
static void test_gelu_grad_matches_libm(void **st)
{
    (void)st;
    int64_t n = 70001;
    float *x = malloc(sizeof(float) * (size_t)n), *dy = rnd(n, 21), *dx = malloc(sizeof(float) * (size_t)n);
    float *split = malloc(sizeof(float) * (size_t)n);
    assert_true(x && dx && split);
    for (int64_t i = 0; i < n; i++)
        x[i] = -12.0f + 24.0f * (float)i / (float)(n - 1);
    for (int tanh_form = 0; tanh_form < 2; tanh_form++) {
        rt_nfly = 0;
        k_gelu_grad_f32(dx, dy, x, n, tanh_form);
        rt_nfly = 1;
        k_gelu_grad_f32(split, dy, x, n, tanh_form);
        rt_nfly = 0;
        double worst = 0;
        for (int64_t i = 0; i < n; i++) {
            double v = x[i], s;
            if (tanh_form) {
                double c = sqrt(2.0 / M_PI), t = tanh(c * (v + 0.044715 * v * v * v));
                s = 0.5 * (1 + t) + 0.5 * v * (1 - t * t) * c * (1 + 3 * 0.044715 * v * v);
            } else {
                s = 0.5 * (1 + erf(v / sqrt(2.0))) + v * exp(-0.5 * v * v) / sqrt(2 * M_PI);
            }
            double e = fabs(dx[i] - dy[i] * s);
            worst = e > worst ? e : worst;
            assert_true(dx[i] == split[i]);
        }
        assert_true(worst < 1e-6); /* |dy| <= 1; k_erf and k_exp are within ~2e-7 (measured: under 2e-7) */
    }
    free(x);
    free(dy);
    free(dx);
    free(split);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gemm_blocks_match_the_whole_call),
        cmocka_unit_test(test_gemm_with_bias_and_batches),
        cmocka_unit_test(test_elementwise_runs_match_the_whole_loop),
        cmocka_unit_test(test_layernorm_paths_agree_with_a_reference),
        cmocka_unit_test(test_activations_agree_with_libm),
        cmocka_unit_test(test_broadcast_binary_matches_an_index_loop),
        cmocka_unit_test(test_reduce_matches_a_reference),
        cmocka_unit_test(test_packed_gemm_matches_a_reference),
        cmocka_unit_test(test_sgemm_matches_cblas),
        cmocka_unit_test(test_gelu_grad_matches_libm),
    };
#if defined(__AVX2__)
    if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma")) {
        printf("kernels_blocks: built for AVX2 and FMA, which this CPU lacks: skipped\n");
        return 0;
    }
#endif
    printf("kernels_blocks: the GEMM on packed weights: %s\n", K_PACKED_ISA);
    return cmocka_run_group_tests(tests, NULL, NULL);
}
