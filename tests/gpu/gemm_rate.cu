// gemm_rate.cu: the float32 GEMM rate cuBLAS reaches alone on given shapes,
// the reference for tests/gpu/run.sh. Usage: gemm_rate M N K COUNT [M N K COUNT]...
// Prints total GFLOP, seconds per pass, and GFLOP/s (each shape COUNT times
// per pass, 20 passes after a warm-up, CUDA-event timed, TF32 off).
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

int main(int argc, char **argv)
{
    struct Shape { long m, n, k, count; };
    std::vector<Shape> shapes;
    for (int i = 1; i + 3 < argc; i += 4)
        shapes.push_back({atol(argv[i]), atol(argv[i + 1]), atol(argv[i + 2]), atol(argv[i + 3])});
    size_t maxa = 0, maxb = 0, maxc = 0;
    double flops = 0;
    for (auto &s : shapes) {
        maxa = s.m * s.k > (long)maxa ? s.m * s.k : maxa;
        maxb = s.k * s.n > (long)maxb ? s.k * s.n : maxb;
        maxc = s.m * s.n > (long)maxc ? s.m * s.n : maxc;
        flops += 2.0 * s.m * s.n * s.k * s.count;
    }
    float *a, *b, *c;
    CHECK(cudaMalloc(&a, maxa * 4));
    CHECK(cudaMalloc(&b, maxb * 4));
    CHECK(cudaMalloc(&c, maxc * 4));
    CHECK(cudaMemset(a, 0, maxa * 4));
    CHECK(cudaMemset(b, 0, maxb * 4));
    cublasHandle_t h;
    CHECK(cublasCreate(&h));
    CHECK(cublasSetMathMode(h, CUBLAS_PEDANTIC_MATH));
    const float one = 1.0f, zero = 0.0f;
    auto pass = [&]() {
        for (auto &s : shapes)
            for (long r = 0; r < s.count; r++)
                CHECK(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, (int)s.n, (int)s.m, (int)s.k, &one, b, (int)s.n, a,
                                  (int)s.k, &zero, c, (int)s.n));
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
