/* test_program.c: the per-rank program: schedule (collectives start right
 * after their producer and are waited on just before their first reader),
 * the liveness-based arena (no two simultaneously live buffers overlap,
 * and sharing makes the arena smaller than the sum of its buffers), and
 * local shapes. */
#include "tests/test_util.h"

#include <math.h>

#include "codegen/codegen.h"

typedef struct Built {
    Graph *g;
    Plan *p;
    Mesh mesh;
    AnnotationList ann;
    Arena arena;
} Built;

static void build(Built *b, const char *model, const char *mesh, const char *file, const char *const *shards)
{
    memset(b, 0, sizeof(*b));
    b->g = load_ok(model);
    Diag d;
    diag_init(&d, model);
    assert_int_equal(mesh_parse(mesh, &b->mesh, &d), 0);
    for (int i = 0; shards && shards[i]; i++)
        assert_int_equal(annotate_add_flag(&b->ann, &b->arena, b->g, &b->mesh, shards[i], "--shard", &d), 0);
    if (file)
        assert_int_equal(annotate_add_file(&b->ann, &b->arena, b->g, &b->mesh, file, &d), 0);
    b->p = partition_propagate(b->g, &b->mesh, &b->ann, &d);
    assert_non_null(b->p);
    diag_free(&d);
}

static void built_free(Built *b)
{
    plan_free(b->p);
    graph_free(b->g);
    free(b->ann.items);
    arena_free(&b->arena);
}

static int inst_of(const Program *pr, InstKind k, const char *node)
{
    for (int i = 0; i < pr->ninsts; i++)
        if (pr->insts[i].kind == k && pr->insts[i].node && strcmp(pr->insts[i].node->name, node) == 0)
            return i;
    return -1;
}

/* The buffer whose storage b uses: itself, or the one a reshape aliases. */
static int storage_of(const Program *pr, int b)
{
    return pr->bufs[b].alias_of >= 0 ? pr->bufs[b].alias_of : b;
}

/* No two buffers live at once share memory, unless one is a view (an
 * aliasing reshape) of the other's storage, placed with it and exactly
 * where it is. */
static void check_arena(const Program *pr)
{
    int64_t sum = 0;
    for (int i = 0; i < pr->nbufs; i++) {
        const Buffer *a = &pr->bufs[i];
        if (a->kind < BUF_VALUE || a->last < 0)
            continue;
        if (storage_of(pr, i) != i) {
            const Buffer *r = &pr->bufs[storage_of(pr, i)];
            assert_int_equal(a->offset, r->offset);
            assert_int_equal(a->bytes, r->bytes);
            assert_true(r->first <= a->first && a->last <= r->last);
            continue;
        }
        sum += a->bytes;
        assert_true(a->offset + a->bytes <= pr->arena_bytes);
        for (int j = i + 1; j < pr->nbufs; j++) {
            const Buffer *b = &pr->bufs[j];
            if (b->kind < BUF_VALUE || b->last < 0 || storage_of(pr, j) != j)
                continue;
            int live_together = !(a->last < b->first || b->last < a->first);
            int share = a->offset < b->offset + b->bytes && b->offset < a->offset + a->bytes;
            if (live_together && share)
                print_error("%s [%d,%d] and %s [%d,%d] overlap in memory\n", a->name, a->first, a->last, b->name,
                            b->first, b->last);
            assert_false(live_together && share);
        }
    }
    assert_true(pr->arena_bytes <= sum + 64 * pr->nbufs);
}

static void test_program_build_overlap_schedule(void **st)
{
    (void)st;
    Built b;
    const char *shards[] = {"W1=[_,tp]", NULL};
    build(&b, "tests/models/mlp.onnx", "tp=2", NULL, shards);
    Diag d;
    diag_init(&d, NULL);
    Program *pr = program_build(b.p, 1, NULL, &d);
    /* The all-reduce of o starts right after fc2 and is waited on right
     * before bias2, its first reader. */
    int fc2 = inst_of(pr, INST_COMPUTE, "fc2"), start = inst_of(pr, INST_START, "fc2");
    int wait = inst_of(pr, INST_WAIT, "bias2"), bias = inst_of(pr, INST_COMPUTE, "bias2");
    assert_true(fc2 >= 0 && start == fc2 + 1);
    assert_true(wait >= 0 && bias == wait + 1);
    /* Local shapes: W1's block is its column half. */
    const Buffer *w1 = &pr->bufs[pr->tensor_buf[graph_tensor_find(b.g, "W1")->id]];
    assert_int_equal(w1->dims[0], 64);
    assert_int_equal(w1->dims[1], 128);
    assert_int_equal(pr->coords[0], 1);
    check_arena(pr);
    program_free(pr);
    diag_free(&d);
    built_free(&b);
}

static void test_program_build_waits_late_in_gpt(void **st)
{
    (void)st;
    Built b;
    build(&b, "tests/models/tiny_gpt.onnx", "dp=2,tp=2", "tests/partition/tiny_gpt_megatron.txt", NULL);
    Diag d;
    diag_init(&d, NULL);
    for (int r = 0; r < b.mesh.nranks; r++) {
        Program *pr = program_build(b.p, r, NULL, &d);
        check_arena(pr);
        /* Every reshard starts before it is waited on, and the wait sits
         * directly before the first compute that reads the result. */
        for (int k = 0; k < b.p->nreshards; k++) {
            assert_true(pr->reshards[k].start_at < pr->reshards[k].wait_at);
            int w = pr->reshards[k].wait_at;
            if (w + 1 < pr->ninsts && pr->insts[w].node) {
                const Inst *next = &pr->insts[w + 1];
                assert_true(next->kind == INST_COMPUTE || next->kind == INST_WAIT);
            }
        }
        /* The arena is much smaller than all values together (liveness). */
        int64_t all = 0;
        for (int i = 0; i < pr->nbufs; i++)
            if (pr->bufs[i].kind >= BUF_VALUE)
                all += pr->bufs[i].bytes;
        assert_true(pr->arena_bytes * 2 < all);
        program_free(pr);
    }
    diag_free(&d);
    built_free(&b);
}

static void test_program_build_fuses_ready_all_reduces(void **st)
{
    (void)st;
    Built b;
    const char *shards[] = {"x=[_,tp]", NULL};
    build(&b, "tests/models/branches.onnx", "tp=2", NULL, shards);
    assert_int_equal(b.p->nreshards, 3);
    Diag d;
    diag_init(&d, NULL);
    ProgramOptions fused = {.fuse_bytes = 65536}, off = {.fuse_bytes = 0}, tiny = {.fuse_bytes = 512};
    Program *pr = program_build(b.p, 0, &fused, &d);
    /* Three all-reduces, one call: one live START and one live WAIT. */
    int starts = 0, waits = 0;
    for (int i = 0; i < pr->ninsts; i++) {
        starts += pr->insts[i].kind == INST_START && pr->insts[i].reshard >= 0;
        waits += pr->insts[i].kind == INST_WAIT && pr->insts[i].reshard >= 0;
    }
    assert_int_equal(starts, 1);
    assert_int_equal(waits, 1);
    for (int r = 0; r < 3; r++)
        assert_int_equal(pr->reshards[r].fused_leader, 0);
    /* The fused call starts after the last projection, waits before the first Relu. */
    assert_true(pr->reshards[0].start_at > inst_of(pr, INST_COMPUTE, "proj_c"));
    assert_true(pr->reshards[0].wait_at < inst_of(pr, INST_COMPUTE, "relu_a"));
    check_arena(pr);
    program_free(pr);
    pr = program_build(b.p, 0, &off, &d);
    for (int r = 0; r < 3; r++)
        assert_int_equal(pr->reshards[r].fused_leader, -1);
    program_free(pr);
    /* Each all-reduce moves 1 KiB: a 512-byte threshold fuses nothing. */
    pr = program_build(b.p, 0, &tiny, &d);
    assert_int_equal(pr->reshards[1].fused_leader, -1);
    program_free(pr);
    diag_free(&d);
    built_free(&b);
}

/* Readers of gathered weights, in order, and where each gather starts. */
static void check_prefetch(Built *b, int k)
{
    Diag d;
    diag_init(&d, NULL);
    ProgramOptions opt = {.prefetch = k};
    Program *pr = program_build(b->p, 0, &opt, &d);
    assert_non_null(pr);
    assert_int_equal(pr->prefetch_used, k);
    /* The compute each gather feeds: the first compute after its wait
     * (a fused bias Add is read by the activation it is fused into). */
    int readers[256], nreaders = 0;
    for (int i = 0; i < pr->ninsts; i++) {
        if (pr->insts[i].kind != INST_COMPUTE)
            continue;
        int reads = 0;
        for (int r = 0; r < b->p->nreshards; r++) {
            int use = pr->reshards[r].wait_at;
            while (use < pr->ninsts && pr->insts[use].kind != INST_COMPUTE)
                use++;
            reads |= b->p->reshards[r].weight_gather && use == i;
        }
        if (reads && nreaders < 256)
            readers[nreaders++] = i;
    }
    int checked = 0;
    for (int r = 0; r < b->p->nreshards; r++) {
        if (!b->p->reshards[r].weight_gather)
            continue;
        int w = pr->reshards[r].wait_at, j = 0;
        /* Waited on just before its reader: only other waits in between. */
        int use = w;
        while (pr->insts[use].kind != INST_COMPUTE)
            use++;
        assert_int_equal(pr->insts[use].kind, INST_COMPUTE);
        while (j < nreaders && readers[j] != use)
            j++;
        assert_true(j < nreaders);
        /* Started before the compute of the reader k places earlier. */
        if (j - k >= 0)
            assert_true(pr->reshards[r].start_at < readers[j - k]);
        if (j >= 1 && k >= 1)
            assert_true(pr->reshards[r].start_at < readers[j - 1]);
        /* ... and, with prefetch, early enough that the planned compute
         * under it is four times its own time, unless that would take it
         * past 8k readers back (or the program's start). */
        if (k >= 1) {
            double under = 0, need = 0;
            for (int i = pr->reshards[r].start_at + 1; i < w; i++)
                if (pr->insts[i].kind == INST_COMPUTE) {
                    const Node *n = pr->insts[i].node;
                    under += plan_node_planned_seconds(b->p, n);
                    if (pr->nodes[n->id].fused_from >= 0) /* the bias Add it carries */
                        under += plan_node_planned_seconds(b->p, b->p->g->nodes[pr->nodes[n->id].fused_from]);
                }
            for (int s = 0; s < b->p->reshards[r].r.nsteps; s++)
                need += 4 * b->p->reshards[r].r.steps[s].seconds;
            int first_compute = 0;
            while (pr->insts[first_compute].kind != INST_COMPUTE)
                first_compute++;
            int at_limit = j - 8 * k >= 0 ? pr->reshards[r].start_at < readers[j - 8 * k] : pr->reshards[r].start_at < first_compute;
            assert_true(under >= need * (1 - 1e-9) || at_limit);
        }
        checked++;
    }
    assert_true(checked >= 10);
    check_arena(pr);
    program_free(pr);
    diag_free(&d);
}

static void test_program_build_prefetches_weight_gathers(void **st)
{
    (void)st;
    Built b;
    build(&b, "tests/models/tiny_gpt.onnx", "dp=2,tp=2", "tests/partition/tiny_gpt_megatron.txt", NULL);
    Diag d;
    diag_init(&d, NULL);
    assert_int_equal(partition_shard_weights(b.p, "dp", &d), 0);
    check_prefetch(&b, 1);
    check_prefetch(&b, 2);
    /* A memory limit below what prefetch 2 needs backs off to less. */
    ProgramOptions two = {.prefetch = 2}, tight;
    Program *pr = program_build(b.p, 0, &two, &d);
    int64_t need = pr->arena_bytes + pr->weight_bytes + pr->input_bytes;
    program_free(pr);
    tight = two;
    tight.mem_limit = need - 1;
    pr = program_build(b.p, 0, &tight, &d);
    if (pr) {
        assert_true(pr->prefetch_used < 2);
        program_free(pr);
    } else {
        assert_non_null(strstr(diag_first(&d), "over --mem-limit"));
    }
    diag_free(&d);
    built_free(&b);
}

/* The cost model over the program's own schedule: every collective's
 * time is counted once, exposure never exceeds it, and gathering weights
 * further ahead hides more (never less); a plan whose waits follow their
 * starts at once hides nothing. */
static void test_program_estimate_follows_the_schedule(void **st)
{
    (void)st;
    Built b;
    build(&b, "tests/models/tiny_gpt.onnx", "dp=2,tp=2", "tests/partition/tiny_gpt_megatron.txt", NULL);
    Diag d;
    diag_init(&d, NULL);
    assert_int_equal(partition_shard_weights(b.p, "dp", &d), 0);
    PlanEstimate pe;
    plan_estimate(b.p, &pe);
    double exposed[3];
    for (int k = 0; k < 3; k++) {
        ProgramOptions o = {.prefetch = k, .fuse_bytes = 0};
        Program *pr = program_build(b.p, 0, &o, &d);
        assert_non_null(pr);
        ProgramEstimate e;
        program_estimate(pr, &e);
        assert_true(fabs(e.comm_s - pe.comm_s) <= 1e-9 * pe.comm_s); /* every reshard once, unfused */
        assert_true(e.exposed_s >= 0 && e.exposed_s <= e.comm_s + 1e-15);
        assert_true(e.compute_s > 0 && e.compute_s <= pe.compute_s + 1e-12);
        assert_true(e.step_s >= e.compute_s + e.exposed_s - 1e-12);
        exposed[k] = e.exposed_s;
        program_free(pr);
    }
    assert_true(exposed[1] <= exposed[0] + 1e-15 && exposed[2] <= exposed[1] + 1e-15);
    assert_true(exposed[1] < exposed[0]); /* a gather one node ahead hides some of itself */
    diag_free(&d);
    built_free(&b);

    /* Megatron alone: each all-reduce's reader follows it at once. */
    build(&b, "tests/models/tiny_gpt.onnx", "dp=2,tp=2", "tests/partition/tiny_gpt_megatron.txt", NULL);
    diag_init(&d, NULL);
    ProgramOptions o = {.prefetch = 1, .fuse_bytes = 0};
    Program *pr = program_build(b.p, 0, &o, &d);
    ProgramEstimate e;
    program_estimate(pr, &e);
    assert_true(e.comm_s > 0 && fabs(e.exposed_s - e.comm_s) <= 1e-12);
    program_free(pr);
    diag_free(&d);
    built_free(&b);
}

static int node_id(const Graph *g, const char *name)
{
    for (int i = 0; i < g->nnodes; i++)
        if (strcmp(g->nodes[i]->name, name) == 0)
            return i;
    fail_msg("no node %s", name);
    return -1;
}

/* GEMM weights packed (C target only), a bias Add folded into the GEMM
 * before it (its output a view of the MatMul's), but not a bias that
 * fuses into an activation, nor one read after an all-reduce. An
 * inference program's packs are in its weight file, in place of the
 * weights they pack: tiny_gpt's dims are whole panels, so the file is
 * exactly the weights' size (each held once). */
static void test_program_build_packs_gemm_weights(void **st)
{
    (void)st;
    Built b;
    build(&b, "tests/models/tiny_gpt.onnx", "r=1", NULL, NULL);
    Diag d;
    diag_init(&d, NULL);
    Program *pr = program_build(b.p, 0, NULL, &d);
    int q = node_id(b.g, "l0_q_proj"), qb = node_id(b.g, "l0_q_bias"), fc1 = node_id(b.g, "l0_fc1");
    int wq = pr->tensor_buf[graph_tensor_find(b.g, "l0_Wq")->id];
    assert_true(pr->nodes[q].packed_b >= 0 && pr->nodes[fc1].packed_b >= 0);
    assert_int_equal(pr->packs[pr->nodes[q].packed_b].buf, wq);
    assert_true(pr->packs[pr->nodes[q].packed_b].in_file && pr->bufs[wq].packed_only);
    assert_int_equal(pr->nodes[q].gemm_bias, pr->tensor_buf[graph_tensor_find(b.g, "l0_bq")->id]);
    assert_true(pr->nodes[qb].alias);
    assert_int_equal(storage_of(pr, pr->tensor_buf[graph_tensor_find(b.g, "l0_q")->id]),
                     pr->tensor_buf[graph_tensor_find(b.g, "l0_q_mm")->id]);
    assert_int_equal(pr->nodes[fc1].gemm_bias, -1); /* its bias goes with the Gelu (k_bias_act) */
    assert_int_equal(pr->packed_bytes, 0); /* nothing packed at start-up */
    int64_t plain = 0;
    for (int i = 0; i < pr->nbufs; i++)
        if (pr->bufs[i].kind == BUF_WEIGHT)
            plain += (pr->bufs[i].bytes + 63) / 64 * 64;
    assert_int_equal(pr->weight_bytes, plain);
    check_arena(pr);
    program_free(pr);
    ProgramOptions cuda = {.cuda = 1};
    pr = program_build(b.p, 0, &cuda, &d);
    assert_int_equal(pr->npacks, 0);
    assert_int_equal(pr->nodes[q].packed_b, -1);
    assert_int_equal(pr->nodes[q].gemm_bias, -1); /* no packed GEMM: the bias Add runs on its own */
    assert_false(pr->nodes[qb].alias);
    assert_false(pr->bufs[wq].packed_only);
    program_free(pr);
    built_free(&b);

    const char *shards[] = {"W1=[_,tp]", NULL};
    build(&b, "tests/models/mlp.onnx", "tp=2", NULL, shards);
    pr = program_build(b.p, 0, NULL, &d);
    int fc2 = node_id(b.g, "fc2");
    assert_true(pr->nodes[fc2].packed_b >= 0);
    assert_int_equal(pr->nodes[fc2].gemm_bias, -1); /* bias2 reads the all-reduced sum */
    assert_false(pr->nodes[node_id(b.g, "bias2")].alias);
    program_free(pr);
    diag_free(&d);
    built_free(&b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_program_build_overlap_schedule),
        cmocka_unit_test(test_program_build_waits_late_in_gpt),
        cmocka_unit_test(test_program_build_fuses_ready_all_reduces),
        cmocka_unit_test(test_program_build_prefetches_weight_gathers),
        cmocka_unit_test(test_program_estimate_follows_the_schedule),
        cmocka_unit_test(test_program_build_packs_gemm_weights),
    };
    return cmocka_run_group_tests_name("codegen/program", tests, NULL, NULL);
}
