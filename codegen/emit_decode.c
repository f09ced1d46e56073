/* emit_decode.c: compile --decode's program: the prompt, then --generate
 * tokens, one position per forward(), with the key-value cache in place.
 *
 * ir/decode.c turned each cache's Concat into a KvCacheWrite at
 * g_decode_pos; the cache buffers live in the arena for the whole run
 * (memplan.c), zeroed at start. Per position the program fills this
 * rank's blocks of the token ids, the positions (when the model takes
 * them) and the attention mask (1 on the slots written so far, in slot
 * order), runs forward(), and from the last prompt position on chooses
 * the next token: rank 0 gathers the logits (when they stay split),
 * takes each row's argmax (the first of equal maxima, as numpy's) and
 * broadcasts the tokens. The prompt is read one position per step, like
 * the generated tokens (llama2.c's prefill): one program, one set of
 * buffers. --out tokens=FILE writes the generated tokens [batch,
 * generate], --out LOGITS=FILE the logits each was chosen from.
 */
#include "codegen.h"

/* The step's value of one fed input at (b, j): a C expression. The whole
 * tensor is written on the host, this rank's block taken from it and
 * copied into the input buffer (on the CUDA target, on the compute stream). */
static void feed(Emitter *e, const Tensor *t, const char *what, const char *value)
{
    const Program *pr = e->pr;
    const Buffer *b = &pr->bufs[pr->tensor_buf[t->id]];
    char nm[ESC_NAME_CAP], buf[128];
    int64_t idx[IR_MAX_RANK];
    for (int k = 0; k < t->rank; k++)
        idx[k] = mesh_block_index(&pr->plan->mesh, pr->vrank, b->layout.axes[k], b->layout.naxes[k]);
    fprintf(e->f, "    { /* graph input %s %s: %s; this rank's block %s */\n", CMT(t->name, nm),
            shape_str(t->dims, t->rank, buf, sizeof buf), what, sharding_str(&b->layout, &pr->plan->mesh, buf + 64, 64));
    fprintf(e->f, "        static %s whole[%lld], block[%lld];\n        static const int64_t gdims[] = ",
            emit_ctype(t->dtype), (long long)(t->dims[0] * t->dims[1]), (long long)(b->dims[0] * b->dims[1]));
    emit_dims(e->f, t->dims, t->rank);
    fprintf(e->f, ", blocks[] = ");
    emit_dims(e->f, b->dims, t->rank);
    fprintf(e->f, ", index[] = ");
    emit_dims(e->f, idx, t->rank);
    fprintf(e->f, ";\n        for (int b = 0; b < BATCH; b++)\n            for (int j = 0; j < %lld; j++)\n"
                  "                whole[b * %lld + j] = %s;\n"
                  "        rt_take_block(block, whole, 2, gdims, blocks, index, %zu);\n",
            (long long)t->dims[1], (long long)t->dims[1], value, dtype_size(t->dtype));
    e->t->input_refresh(e, b);
    fprintf(e->f, "    }\n");
}

void emit_decode_state(Emitter *e, FILE *f)
{
    const Graph *g = e->pr->g;
    const Tensor *lg = g->decode_logits;
    fprintf(f, "\n/* ---- decoding state (compile --decode) ---- */\n\n"
               "#define MAX_SEQ %lld  /* the cache's positions (--max-seq) */\n"
               "#define GENERATE %d  /* tokens generated after the prompt (--generate) */\n"
               "#define BATCH %lld\n#define VOCAB %lld\n"
               "#define DT_INT64_CODE %d /* ONNX's codes: the tokens' and the logits' types */\n#define DT_FLOAT_CODE %d\n"
               "static int64_t g_decode_pos; /* the position forward() runs: the cache slot it writes */\n",
            (long long)g->decode_slots, g->decode_generate, (long long)lg->dims[0], (long long)lg->dims[lg->rank - 1],
            (int)DT_I64, (int)DT_F32);
}

void emit_decode_helpers(Emitter *e)
{
    const Program *pr = e->pr;
    const Graph *g = pr->g;
    FILE *f = e->f;
    fprintf(f, "/* The inputs of position pos, whose token in row b is tok[b]; this rank\n"
               " * keeps its blocks. */\nstatic void feed_step(const int64_t *tok, int64_t pos)\n{\n"
               "    g_decode_pos = pos;\n");
    feed(e, g->decode_ids, "the tokens", "tok[b]");
    if (g->decode_positions)
        feed(e, g->decode_positions, "the position", "pos");
    if (g->decode_mask)
        feed(e, g->decode_mask, "1 on the cache slots written so far, with this one", "j <= pos");
    fprintf(f, "}\n\n");
    if (g->decode_temperature > 0)
        fprintf(f, "/* --sample: splitmix64 from --seed, one draw per row per token (rank 0's) */\n"
                   "#define TEMPERATURE %.17g\nstatic uint64_t g_rng = %lluULL;\n\n"
                   "static double rng_uniform(void)\n{\n"
                   "    uint64_t z = (g_rng += 0x9e3779b97f4a7c15ULL);\n"
                   "    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;\n"
                   "    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;\n"
                   "    return (double)((z ^ (z >> 31)) >> 11) * 0x1.0p-53; /* [0, 1) */\n}\n\n"
                   "/* A token drawn from softmax(lg / TEMPERATURE): the first whose running sum\n"
                   " * of exp((lg - max) / TEMPERATURE) passes a uniform share of the total. */\n"
                   "static int64_t sample_row(const float *lg)\n{\n"
                   "    static double p[VOCAB];\n    float mx = lg[0];\n"
                   "    for (int64_t v = 1; v < VOCAB; v++)\n        mx = lg[v] > mx ? lg[v] : mx;\n"
                   "    double sum = 0, acc = 0;\n"
                   "    for (int64_t v = 0; v < VOCAB; v++) {\n"
                   "        p[v] = exp(((double)lg[v] - (double)mx) / TEMPERATURE);\n        sum += p[v];\n    }\n"
                   "    double u = rng_uniform() * sum;\n"
                   "    for (int64_t v = 0; v < VOCAB; v++) {\n"
                   "        acc += p[v];\n        if (acc > u)\n            return v;\n    }\n"
                   "    return VOCAB - 1;\n}\n\n",
                g->decode_temperature, (unsigned long long)g->decode_seed);
    fprintf(f, "/* After the forward() of position pos: the next token of every row, %s\n"
               " * (rank 0's choice, broadcast), kept as generated token k; rank 0 also\n"
               " * keeps the logits. */\n"
               "static void choose_next(int64_t k, int64_t *tokens, float *logits)\n{\n    int64_t next[BATCH];\n",
            g->decode_temperature > 0 ? "drawn from its logits" : "the\n * argmax of its logits");
    int gathered = e->t->output_whole(e, 0, "    ");
    fprintf(f, "    if (RANK == 0) {\n"
               "        const float *lg = (const float *)whole;\n"
               "        for (int b = 0; b < BATCH; b++) {\n");
    if (g->decode_temperature > 0)
        fprintf(f, "            next[b] = sample_row(lg + b * VOCAB);\n");
    else
        fprintf(f, "            int64_t best = 0; /* the first of equal maxima, as numpy's argmax */\n"
                   "            for (int64_t v = 1; v < VOCAB; v++)\n"
                   "                if (lg[b * VOCAB + v] > lg[b * VOCAB + best])\n"
                   "                    best = v;\n"
                   "            next[b] = best;\n");
    fprintf(f, "            memcpy(logits + ((size_t)b * GENERATE + (size_t)k) * VOCAB, lg + b * VOCAB, VOCAB * sizeof(float));\n"
               "        }\n    }\n%s"
               "    rt_bcast_i64(next, BATCH, \"the broadcast of the next tokens\");\n"
               "    for (int b = 0; b < BATCH; b++)\n        tokens[b * GENERATE + k] = next[b];\n}\n\n",
            gathered ? "    free(whole);\n" : "");
}

void emit_decode_main(Emitter *e)
{
    const Program *pr = e->pr;
    const Graph *g = pr->g;
    FILE *f = e->f;
    const Tensor *ids = g->decode_ids;
    for (int i = 0; i < g->ninputs; i++) {
        const Buffer *b = &pr->bufs[pr->tensor_buf[g->inputs[i]->id]];
        fprintf(f, "    { /* %s: filled by feed_step */\n        void *block = rt_alloc(%lld);\n", b->name,
                (long long)b->bytes);
        e->t->input_block(e, "", b->name, b);
        fprintf(f, "    }\n");
    }
    fprintf(f, "#ifdef O2S_CUDA\n    CHECK_CUDA(cudaDeviceSynchronize()); /* those uploads land before the compute stream's */\n"
               "#endif\n");
    char nm[ESC_NAME_CAP];
    fprintf(f, "    /* The prompt: --in %s=FILE, int64 [BATCH, T] */\n    static const char ids_name[] = ", CMT(ids->name, nm));
    esc_c_string(f, ids->name);
    fprintf(f, ";\n    const char *path = rt_find_arg(args.in_name, args.in_path, args.nin, ids_name);\n"
               "    if (!path)\n        rt_die(\"missing --in %%s=FILE (the prompt: int64 [%%d, T])\", ids_name, BATCH);\n"
               "    RtTensor prompt;\n    rt_read_tensor(path, &prompt);\n"
               "    if (prompt.dtype != DT_INT64_CODE || prompt.rank != 2 || prompt.dims[0] != BATCH || prompt.dims[1] < 1)\n"
               "        rt_die(\"%%s: the prompt must be int64 [%%d, T] with T >= 1\", path, BATCH);\n"
               "    const int64_t T = prompt.dims[1], *ptok = (const int64_t *)prompt.data;\n"
               "    if (T + GENERATE - 1 > MAX_SEQ)\n"
               "        rt_die(\"%%s: %%lld prompt positions and %%d generated tokens need %%lld cache slots; the program \"\n"
               "               \"has %%d (compile with a larger --max-seq)\", path, (long long)T, GENERATE,\n"
               "               (long long)(T + GENERATE - 1), MAX_SEQ);\n"
               "    int64_t *tokens = (int64_t *)rt_alloc(sizeof(int64_t) * BATCH * GENERATE);\n"
               "    float *logits = (float *)rt_alloc(RANK == 0 ? sizeof(float) * BATCH * GENERATE * VOCAB : 1);\n");
    emit_trace_init(e);
    fprintf(f, "    /* --iters N: N timed runs after one warm-up; else one run */\n"
               "    int runs = args.iters > 0 ? args.iters + 1 : 1;\n"
               "    double t_first = 0, t_next = 0;\n"
               "    for (int run = 0; run < runs; run++) {\n"
               "        rt_barrier(\"the other ranks (before a run)\");\n"
               "        double t0 = rt_now(), t1 = t0;\n"
               "        for (int64_t pos = 0; pos < T + GENERATE - 1; pos++) {\n"
               "            int64_t tok[BATCH];\n"
               "            for (int b = 0; b < BATCH; b++)\n"
               "                tok[b] = pos < T ? ptok[b * T + pos] : tokens[b * GENERATE + (pos - T)];\n"
               "            feed_step(tok, pos);\n"
               "            forward();\n"
               "            if (pos >= T - 1)\n"
               "                choose_next(pos - (T - 1), tokens, logits);\n"
               "            if (pos == T - 1)\n"
               "                t1 = rt_now(); /* choose_next waited for the step */\n"
               "        }\n"
               "        double t2 = rt_now();\n"
               "        if (run > 0 || runs == 1) {\n"
               "            t_first += t1 - t0;\n"
               "            t_next += t2 - t1;\n"
               "        }\n"
               "    }\n"
               "    int timed = runs > 1 ? runs - 1 : 1;\n"
               "    if (RANK == 0) {\n"
               "        printf(\"decode: %%lld prompt positions, first token after %%.3f ms\\n\", (long long)T, t_first * 1e3 / timed);\n"
               "        if (GENERATE > 1)\n"
               "            printf(\"decode: %%.3f ms per token after it (%%d tokens, %%.1f tokens/s over %%d rows)\\n\",\n"
               "                   t_next * 1e3 / timed / (GENERATE - 1), GENERATE - 1,\n"
               "                   (double)BATCH * (GENERATE - 1) * timed / (t_next > 0 ? t_next : 1e-9), BATCH);\n"
               "        printf(\"peak memory: %%.1f MiB (rank 0, VmHWM)\\n\", rt_peak_rss_kib() / 1024.0);\n"
               "    }\n"
               "    rt_trace_write();\n"
               "    for (int i = 0; i < args.nout; i++) {\n"
               "        static const int64_t tdims[] = {BATCH, GENERATE}, ldims[] = {BATCH, GENERATE, VOCAB};\n"
               "        if (strcmp(args.out_name[i], \"tokens\") == 0) {\n"
               "            if (RANK == 0)\n"
               "                rt_write_npy(args.out_path[i], DT_INT64_CODE, 2, tdims, tokens);\n"
               "        } else if (strcmp(args.out_name[i], ");
    esc_c_string(f, ir_output_name(g->decode_logits));
    fprintf(f, ") == 0) {\n"
               "            if (RANK == 0)\n"
               "                rt_write_npy(args.out_path[i], DT_FLOAT_CODE, 3, ldims, logits);\n"
               "        } else {\n"
               "            rt_die(\"--out %%s: a decoding program writes tokens and its logits\", args.out_name[i]);\n"
               "        }\n    }\n"
               "    free(tokens);\n    free(logits);\n");
}
