/* ---- onnx2spmd kernel bodies, shared by C and CUDA (templates/bodies.h) --
 * What the C kernels (templates/kernels*.c) and the CUDA kernels
 * (templates/cuda_*.cu) compute per element or per row, written once:
 * each target keeps only its loops, launchers and the kernels that
 * genuinely differ (GEMMs, cross-thread reductions). O2S_HD makes a body a
 * host and device function under nvcc and a plain static inline one in C.
 * The op families' own bodies are in templates/bodies_<family>.h, written
 * into a generated folder's kernels header just before that family.
 *
 * The selectors (the K_* codes below) are the one list of the numbers the
 * emitters (codegen/emit_*.c) pass to a kernel that serves several ops:
 * the emitters write them by name, so the generated code reads
 * k_unary_f32(K_UNARY_RELU, ...), never a bare number.
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

#ifdef __CUDACC__
#define O2S_HD __host__ __device__
#else
#define O2S_HD
#endif

#define K_MAX_RANK 8

/* ---- selectors ---- */

/* k_unary_f32, k_bias_act_f32: Relu, Sqrt, Erf, Tanh, Sigmoid, Gelu (erf)
 * and Gelu (approximate="tanh"). */
enum { K_UNARY_RELU, K_UNARY_SQRT, K_UNARY_ERF, K_UNARY_TANH, K_UNARY_SIGMOID, K_UNARY_GELU, K_UNARY_GELU_TANH };
/* k_arith_*, k_binary_*: Add, Sub, Mul, Div, Pow. */
enum { K_ARITH_ADD, K_ARITH_SUB, K_ARITH_MUL, K_ARITH_DIV, K_ARITH_POW };
/* k_scatter_nd, k_scatter_elements: the reduction attribute. */
enum { K_SCATTER_NONE, K_SCATTER_ADD, K_SCATTER_MUL, K_SCATTER_MAX, K_SCATTER_MIN };
/* k_pad: the mode attribute. */
enum { K_PAD_CONSTANT, K_PAD_REFLECT, K_PAD_EDGE, K_PAD_WRAP };
/* k_quantize, k_dequantize: one scale, one per index along the axis, one
 * per block along it. */
enum { K_QUANT_TENSOR, K_QUANT_AXIS, K_QUANT_BLOCK };
/* k_pool_f32: AveragePool (count_include_pad 0, then 1), LpPool, MaxPool. */
enum { K_POOL_AVG, K_POOL_AVG_PAD, K_POOL_LP, K_POOL_MAX };
/* k_resize_*: mode, coordinate_transformation_mode, nearest_mode. */
enum { K_RS_NEAREST, K_RS_LINEAR, K_RS_CUBIC };
enum { K_RS_HALF_PIXEL, K_RS_PYTORCH, K_RS_ALIGN, K_RS_ASYM, K_RS_TF_NN, K_RS_CROP, K_RS_SYMMETRIC };
enum { K_RS_PREFER_FLOOR, K_RS_PREFER_CEIL, K_RS_FLOOR, K_RS_CEIL };
/* k_reduce_op_*: ReduceSum, Max, Min, Prod, SumSquare, L1, L2, LogSumExp. */
enum { K_RED_SUM, K_RED_MAX, K_RED_MIN, K_RED_PROD, K_RED_SUMSQ, K_RED_L1, K_RED_L2, K_RED_LSE };
/* The loss family's reduction attribute. */
enum { K_LOSS_NONE, K_LOSS_SUM, K_LOSS_MEAN };
/* The math family: unary float ops (k_math_unary_f32), IsNaN/IsInf,
 * binary ops, comparisons and logic. */
enum {
    K_MATH_NEG, K_MATH_ABS, K_MATH_EXP, K_MATH_LOG, K_MATH_RECIPROCAL, K_MATH_SIN, K_MATH_COS, K_MATH_FLOOR,
    K_MATH_CEIL, K_MATH_ROUND, K_MATH_SIGN, K_MATH_LEAKY_RELU, K_MATH_ELU, K_MATH_SELU,
    K_MATH_HARD_SIGMOID, K_MATH_HARD_SWISH, K_MATH_SOFTPLUS, K_MATH_SOFTSIGN, K_MATH_MISH, K_MATH_DIV_BY,
    K_MATH_ACOS, K_MATH_ACOSH, K_MATH_ASIN, K_MATH_ASINH, K_MATH_ATAN, K_MATH_ATANH, K_MATH_COSH, K_MATH_SINH,
    K_MATH_TAN, K_MATH_THRESHOLDED_RELU, K_MATH_SHRINK, K_MATH_CELU, K_MATH_SWISH, K_MATH_BITWISE_NOT
};
enum { K_MATH_ISNAN, K_MATH_ISINF };
enum {
    K_MATH_ADD, K_MATH_MIN, K_MATH_MAX, K_MATH_MOD, K_MATH_FMOD, K_MATH_PRELU, K_MATH_BITWISE_AND, K_MATH_BITWISE_OR,
    K_MATH_BITWISE_XOR
};
enum { K_MATH_EQ, K_MATH_LT, K_MATH_LE, K_MATH_GT, K_MATH_GE };
enum { K_MATH_AND, K_MATH_OR, K_MATH_XOR, K_MATH_XNOR };

/* Integer Div and Pow as ONNX Runtime computes them (C++ `/`, truncating;
 * std::pow cast back), made total so no input traps: x / 0 is 0,
 * INT64_MIN / -1 wraps, and a negative exponent gives 1 / x^|z| truncated
 * (0 unless |x| is 1). The CUDA kernels use the same two functions. */
O2S_HD static inline int64_t k_idiv(int64_t x, int64_t z)
{
    return z == 0 ? 0 : z == -1 ? (int64_t)(0 - (uint64_t)x) : x / z;
}

O2S_HD static inline int64_t k_ipow(int64_t x, int64_t z)
{
    if (z < 0)
        return x == 1 ? 1 : x == -1 ? ((z & 1) ? -1 : 1) : 0;
    uint64_t r = 1, b = (uint64_t)x;
    for (; z; z >>= 1, b *= b)
        if (z & 1)
            r *= b;
    return (int64_t)r;
}

/* ---- packed GEMM weights ----
 * The one layout a float32 GEMM weight B (k x n) is packed in, whatever
 * CPU the program is built for: column panels of K_PANEL, panel p holding
 * columns [p K_PANEL, (p + 1) K_PANEL) row after row (k rows of K_PANEL
 * floats), zero past n. The compiler packs inference weights into the
 * rank's weight file (codegen/weights.c, with this body), and a training
 * program packs its weights at start-up and after each update
 * (k_repack_b_f32): the AVX-512 kernel reads a panel as its 32-column
 * tile, the AVX2 kernel as two 16-column halves, and a build with neither
 * runs k_gemm_panels_f32's plain loops over it. k_panels_bytes: its size. */
#define K_PANEL 32

O2S_HD static inline int64_t k_panels_bytes(int64_t k, int64_t n)
{
    return (n + K_PANEL - 1) / K_PANEL * K_PANEL * k * (int64_t)sizeof(float);
}

/* bp (k_panels_bytes(k, n), written whole) = b (k x n; stored n x k when
 * tb) in panels. Each panel is built in the order its source is read
 * (a row's run of K_PANEL columns at a time, or a stored-transposed
 * column's k values at a time), so packing runs near memory speed: the
 * compiler packs every inference weight this way. */
O2S_HD static inline void k_pack_panels_f32(float *bp, const float *b, int64_t k, int64_t n, int tb)
{
    int64_t panels = (n + K_PANEL - 1) / K_PANEL;
    for (int64_t p = 0; p < panels; p++) {
        int64_t c0 = p * K_PANEL, nr = n - c0 < K_PANEL ? n - c0 : K_PANEL;
        float *panel = bp + p * k * K_PANEL;
        if (tb) {
            for (int64_t j = 0; j < K_PANEL; j++)
                for (int64_t q = 0; q < k; q++)
                    panel[q * K_PANEL + j] = j < nr ? b[(c0 + j) * k + q] : 0.0f;
        } else {
            for (int64_t q = 0; q < k; q++) {
                memcpy(panel + q * K_PANEL, b + q * n + c0, (size_t)nr * sizeof(float));
                for (int64_t j = nr; j < K_PANEL; j++)
                    panel[q * K_PANEL + j] = 0.0f;
            }
        }
    }
}
