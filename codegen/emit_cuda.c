/* emit_cuda.c: main() of a CUDA + NCCL rank program.
 *
 * The rest of rank<k>.cu comes from emit_c.c (same buffers, same forward()
 * with the collectives written as NCCL calls on the communication stream
 * and events between the streams). main() picks this rank's GPU (local
 * rank modulo the devices on the node), creates the compute and
 * communication streams and the cuBLAS handle (float32 math unless --tf32),
 * bootstraps NCCL (over MPI, or through a file when built with MPI=0 and
 * started by launch.sh), uploads this rank's weight shards and input
 * blocks, times the iterations with CUDA events, and downloads the outputs.
 * A one-rank program uses no NCCL. The command line is the C target's:
 * --in, --out, --iters, --timeout, --trace, --comms (overlap or serial; the
 * GPU's collectives progress on their own stream).
 */
#include "codegen.h"

#include <string.h>

void emit_cuda_main(const Program *pr, int64_t wbytes, uint64_t sum, FILE *f)
{
    const Graph *g = pr->g;
    fprintf(f, "\n/* ---- main ---- */\n\n#define WEIGHT_BYTES %lldULL\n#define WEIGHT_CHECKSUM 0x%016llxULL\n\n",
            (long long)wbytes, (unsigned long long)sum);
    emit_model_names(pr, f);
    fprintf(f, "int main(int argc, char **argv)\n{\n    RtArgs args;\n    int ndev = 0;\n"
               "    rt_parse_args(argc, argv, &args, model_inputs, model_outputs); /* before any launch or CUDA work */\n"
               "    rt_launch_init(&argc, &argv);\n"
               "    /* One GPU per rank: the local rank on this node picks it. */\n"
               "    int local = rt_local_rank();\n"
               "    CHECK_CUDA(cudaGetDeviceCount(&ndev));\n"
               "    if (local >= ndev)\n"
               "        rt_die(\"this is rank %%d on its node, which has %%d GPU(s): NCCL needs a GPU per rank \"\n"
               "               \"(start at most %%d ranks per node)\", local, ndev, ndev);\n"
               "    CHECK_CUDA(cudaSetDevice(local));\n"
               "    CHECK_CUDA(cudaStreamCreateWithFlags(&g_stream, cudaStreamNonBlocking));\n"
               "    CHECK_CUDA(cudaStreamCreateWithFlags(&g_comm, cudaStreamNonBlocking));\n"
               "    CHECK_CUBLAS(cublasCreate(&g_blas));\n"
               "    CHECK_CUBLAS(cublasSetStream(g_blas, g_stream));\n"
               "    /* float32 GEMMs match the goldens; TF32 only when compiled with --tf32. */\n"
               "    CHECK_CUBLAS(cublasSetMathMode(g_blas, O2S_TF32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_PEDANTIC_MATH));\n"
               "    init_comms();\n"
               "    {\n        unsigned char *host = rt_load_weights(argv[0], \"weights.rank%d.bin\", WEIGHT_BYTES, WEIGHT_CHECKSUM);\n"
               "        CHECK_CUDA(cudaMalloc((void **)&g_weights, WEIGHT_BYTES + 64));\n"
               "        CHECK_CUDA(cudaMemcpy(g_weights, host, WEIGHT_BYTES, cudaMemcpyHostToDevice));\n"
               "        free(host);\n    }\n"
               "    CHECK_CUDA(cudaMalloc((void **)&g_arena, %lld));\n",
            pr->rank, (long long)(pr->arena_bytes ? pr->arena_bytes : 64));
    if (pr->plan->pipe)
        fprintf(f, "    pipe_init();\n");
    emit_inputs(pr, f, 1);
    fprintf(f, "    /* The uploads above ran on the legacy stream, and a pageable cudaMemcpy may\n"
               "     * return before its DMA lands: finish them before the first kernel on the\n"
               "     * non-blocking compute stream. */\n"
               "    CHECK_CUDA(cudaDeviceSynchronize());\n");
    emit_trace_init(pr, f);
    fprintf(f, "    if (args.iters > 0) {\n        cudaEvent_t t0, t1;\n"
               "        CHECK_CUDA(cudaEventCreate(&t0));\n        CHECK_CUDA(cudaEventCreate(&t1));\n"
               "        forward(); /* warm-up */\n        rt_cuda_sync(g_stream, \"the warm-up pass\");\n"
               "        rt_barrier(\"the other ranks (barrier before timing)\");\n"
               "        CHECK_CUDA(cudaEventRecord(t0, g_stream));\n"
               "        for (int i = 0; i < args.iters; i++)\n            forward();\n"
               "        CHECK_CUDA(cudaEventRecord(t1, g_stream));\n        rt_cuda_sync(g_stream, \"the timed passes\");\n"
               "        float ms = 0;\n        CHECK_CUDA(cudaEventElapsedTime(&ms, t0, t1));\n"
               "        if (RANK == 0)\n"
               "            printf(\"time per iteration: %%.3f ms (%%d iterations after 1 warm-up, %%d ranks, CUDA events)\\n\"\n"
               "                   \"peak host memory: %%.1f MiB (rank 0, VmHWM); device: arena %%lld + weights %%llu bytes\\n\",\n"
               "                   ms / args.iters, args.iters, WORLD, rt_peak_rss_kib() / 1024.0, %lldLL, WEIGHT_BYTES);\n"
               "    } else {\n        forward();\n    }\n    rt_cuda_sync(g_stream, \"the forward pass\");\n"
               "    rt_trace_write();\n",
            (long long)pr->arena_bytes);
    if (pr->plan->pipe)
        emit_pipe_outputs(pr, f);
    for (int i = 0; !pr->plan->pipe && i == 0; i++)
        fprintf(f, "    for (int i = 0; i < args.nout; i++) {\n");
    for (int i = 0; !pr->plan->pipe && i < g->noutputs; i++) {
        const Tensor *t = g->outputs[i];
        const Buffer *b = &pr->bufs[program_output_buf(pr, i)];
        fprintf(f, "        if (strcmp(args.out_name[i], ");
        esc_c_string(f, t->name);
        fprintf(f, ") == 0) {\n");
        if (t->rank == 0 || !sharding_used_axes(&b->layout)) {
            fprintf(f, "            void *host = rt_alloc(%lld);\n"
                       "            CHECK_CUDA(cudaMemcpy(host, %s, %lld, cudaMemcpyDeviceToHost));\n",
                    (long long)b->bytes, b->name, (long long)b->bytes);
            emit_output_write(pr, i, "host", f);
            fprintf(f, "            free(host);\n");
        } else {
            emit_output_write(pr, i, b->name, f); /* from the device, block by block */
        }
        fprintf(f, "            continue;\n        }\n");
    }
    if (!pr->plan->pipe)
        fprintf(f, "        rt_die(\"--out %%s: the model has no output of that name\", args.out_name[i]);\n    }\n");
    if (plan_world_ranks(pr->plan) > 1)
        fprintf(f, "    for (int i = 0; i < g_nnccl; i++)\n        CHECK_NCCL(ncclCommDestroy(g_nccl[i]));\n");
    fprintf(f, "    CHECK_CUBLAS(cublasDestroy(g_blas));\n    rt_launch_finish();\n    return 0;\n}\n");
}
