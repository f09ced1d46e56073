// gemm_rate.cu: the float32 GEMM rate cuBLAS reaches alone on the GEMMs of
// one forward pass, the reference for tests/gpu/run.sh.
// Usage: gemm_rate M N K BATCH COUNT [M N K BATCH COUNT]...
// Each group is COUNT calls of one cublasSgemmStridedBatched of BATCH
// products (BATCH 1 is a plain GEMM), the way the generated program issues
// them; operands are random (zeros let the hardware skip work), TF32 off.
// Prints total GFLOP, seconds per pass, and GFLOP/s (20 passes after a
// warm-up, timed with CUDA events).
#include <cstdio>
#include <cstdlib>
#include <vector>

#include <cublas_v2.h>
#include <cuda_runtime.h>

#define CHECK(x)                                                                                        \
    do {                                                                                                \
        if ((x) != 0) {                                                                                 \
            fprintf(stderr, "gemm_rate: %s failed at %s:%d\n", #x, __FILE__, __LINE__);                 \
            exit(1);                                                                                    \
        }                                                                                               \
    } while (0)

static float *random_device(size_t n, unsigned seed)
{
    std::vector<float> h(n);
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        h[i] = (float)(seed >> 8) / (float)(1u << 24) - 0.5f;
    }
    float *d;
    CHECK(cudaMalloc(&d, n * 4));
    CHECK(cudaMemcpy(d, h.data(), n * 4, cudaMemcpyHostToDevice));
    return d;
}

int main(int argc, char **argv)
{
    struct Shape { long m, n, k, batch, count; };
    std::vector<Shape> shapes;
    for (int i = 1; i + 4 < argc; i += 5)
        shapes.push_back({atol(argv[i]), atol(argv[i + 1]), atol(argv[i + 2]), atol(argv[i + 3]), atol(argv[i + 4])});
    if (shapes.empty()) {
        fprintf(stderr, "usage: gemm_rate M N K BATCH COUNT [M N K BATCH COUNT]...\n");
        return 2;
    }
    size_t maxa = 0, maxb = 0, maxc = 0;
    double flops = 0;
    for (auto &s : shapes) {
        maxa = s.batch * s.m * s.k > (long)maxa ? s.batch * s.m * s.k : maxa;
        maxb = s.batch * s.k * s.n > (long)maxb ? s.batch * s.k * s.n : maxb;
        maxc = s.batch * s.m * s.n > (long)maxc ? s.batch * s.m * s.n : maxc;
        flops += 2.0 * s.m * s.n * s.k * s.batch * s.count;
    }
    float *a = random_device(maxa, 1), *b = random_device(maxb, 2), *c;
    CHECK(cudaMalloc(&c, maxc * 4));
    cublasHandle_t h;
    CHECK(cublasCreate(&h));
    CHECK(cublasSetMathMode(h, CUBLAS_PEDANTIC_MATH));
    const float one = 1.0f, zero = 0.0f;
    auto pass = [&]() {
        for (auto &s : shapes)
            for (long r = 0; r < s.count; r++)
                CHECK(cublasSgemmStridedBatched(h, CUBLAS_OP_N, CUBLAS_OP_N, (int)s.n, (int)s.m, (int)s.k, &one, b,
                                                (int)s.n, s.k * s.n, a, (int)s.k, s.m * s.k, &zero, c, (int)s.n,
                                                s.m * s.n, (int)s.batch));
    };
    pass();
    cudaEvent_t t0, t1;
    CHECK(cudaEventCreate(&t0));
    CHECK(cudaEventCreate(&t1));
    CHECK(cudaEventRecord(t0));
    for (int i = 0; i < 20; i++)
        pass();
    CHECK(cudaEventRecord(t1));
    CHECK(cudaEventSynchronize(t1));
    float ms = 0;
    CHECK(cudaEventElapsedTime(&ms, t0, t1));
    double sec = ms / 1e3 / 20;
    printf("gflop %.4f seconds %.6f gflops %.1f\n", flops / 1e9, sec, flops / 1e9 / sec);
    return 0;
}
