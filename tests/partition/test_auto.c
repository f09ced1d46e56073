/* test_auto.c: --auto, the integer-program search (partition/auto.c), and
 * the plan estimate it is judged by (partition/estimate.c).
 *
 * Hand-checked optima: under a memory limit that rules out replicated
 * weights, the MLP's best plan splits both weights by columns and
 * all-gathers the 4 KiB hidden value once (one ring latency), which beats
 * Megatron's all-reduce of the 2 KiB result (two) when the output may stay
 * split, as graph outputs do.
 * Annotations are hard constraints: they hold or the search fails naming
 * them. And the search must never do worse, by its own cost model, than
 * the hand plan it could have picked.
 */
#include "tests/partition/plan_setup.h"

#include <math.h>

static void test_partition_auto_mlp_memory_splits_weights(void **st)
{
    (void)st;
    Setup s;
    /* Replicated weights are 131 KiB; 100 KiB forces them split. The
     * output may stay split (--out gathers it once, outside the step), so
     * one all-gather of a (one latency) beats Megatron's all-reduce of o
     * (two) at these sizes. */
    plan_ok(&s, "tests/models/mlp.onnx", "tp=2", NULL, NULL, 100 * 1024);
    char b[128];
    assert_string_equal(layout(&s, "W1", b), "[_,tp]");
    assert_string_equal(layout(&s, "W2", b), "[_,tp]");
    assert_string_equal(layout(&s, "x", b), "[_,_]");
    assert_string_equal(layout(&s, "y", b), "[_,tp]");
    PlanTotals t;
    plan_totals(s.p, &t);
    assert_int_equal(t.ncollectives, 1);
    assert_int_equal(t.count[COLL_ALL_GATHER], 1);
    assert_int_equal(t.comm_bytes, 8 * 128 * 4);
    assert_int_equal(t.output_gather_bytes, 8 * 32 * 4);
    assert_true(s.p->auto_report->optimal);
    PlanEstimate e;
    plan_estimate(s.p, &e);
    assert_true(e.memory_bytes <= 100 * 1024);
    setup_free(&s);
}

static void test_partition_auto_without_limit_replicates_tiny_model(void **st)
{
    (void)st;
    /* On H100 numbers, the MLP computes in well under a microsecond: no
     * collective pays for itself, so everything stays whole. */
    Setup s;
    plan_ok(&s, "tests/models/mlp.onnx", "tp=2", NULL, NULL, 0);
    PlanTotals t;
    plan_totals(s.p, &t);
    assert_int_equal(t.ncollectives, 0);
    setup_free(&s);
}

static void test_partition_auto_annotations_hold(void **st)
{
    (void)st;
    static const char *const shards[] = {"tokens=[dp,_]", "l0_fc1=[dp,_,tp]", "l1_ln1=[dp,_,_]", NULL};
    Setup s;
    plan_ok(&s, "tests/models/tiny_gpt.onnx", "dp=2,tp=2", NULL, shards, 0);
    char b[128];
    assert_string_equal(layout(&s, "tokens", b), "[dp,_]");
    assert_string_equal(layout(&s, "l0_fc1", b), "[dp,_,tp]");
    assert_string_equal(layout(&s, "l1_ln1", b), "[dp,_,_]");
    const Tensor *t = graph_tensor_find(s.g, "tokens");
    assert_int_equal(s.p->tensors[t->id].origin, ORIGIN_USER);
    setup_free(&s);
}

static void test_partition_auto_impossible_annotation_fails(void **st)
{
    (void)st;
    /* LayerNormalization normalises over the last dim: no strategy gives
     * its result split there. */
    static const char *const shards[] = {"l0_ln1=[_,_,tp]", NULL};
    Setup s;
    plan_run(&s, "tests/models/tiny_gpt.onnx", "dp=2,tp=2", NULL, shards, 0);
    assert_null(s.p);
    assert_non_null(strstr(diag_first(&s.d), "annotation l0_ln1=[_,_,tp] cannot hold"));
    assert_non_null(strstr(diag_first(&s.d), "\"l0_ln1\" (LayerNormalization)"));
    setup_free(&s);
}

static void test_partition_auto_memory_infeasible(void **st)
{
    (void)st;
    Setup s;
    plan_run(&s, "tests/models/mlp.onnx", "tp=2", NULL, NULL, 1024);
    assert_null(s.p);
    assert_non_null(strstr(diag_first(&s.d), "no plan fits --mem-limit 1024"));
    setup_free(&s);
}

/* Under the memory Megatron's hand plan needs, the search's own objective
 * is no worse than that plan's (compute + reshards, as the ILP counts). */
static void test_partition_auto_not_worse_than_megatron(void **st)
{
    (void)st;
    Setup hand, s;
    plan_ok(&hand, "tests/models/tiny_gpt.onnx", "dp=2,tp=2", "tests/partition/tiny_gpt_megatron.txt", NULL, -1);
    PlanEstimate he;
    plan_estimate(hand.p, &he);
    static const char *const batch[] = {"tokens=[dp,_]", NULL};
    plan_ok(&s, "tests/models/tiny_gpt.onnx", "dp=2,tp=2", NULL, batch, he.memory_bytes);
    PlanEstimate ae;
    plan_estimate(s.p, &ae);
    assert_true(s.p->auto_report->optimal);
    assert_true(s.p->auto_report->objective_s <= he.compute_s + he.comm_s + 1e-12);
    assert_true(ae.step_s <= he.step_s + 1e-12);
    setup_free(&hand);
    setup_free(&s);
}

static void test_partition_auto_deterministic(void **st)
{
    (void)st;
    char *text[2];
    for (int k = 0; k < 2; k++) {
        Setup s;
        plan_ok(&s, "tests/models/tiny_gpt.onnx", "dp=2,tp=2", NULL, NULL, 300 * 1024);
        size_t len = 0;
        FILE *f = open_memstream(&text[k], &len);
        plan_print_text(s.p, NULL, f);
        plan_print_json(s.p, NULL, f);
        fclose(f);
        setup_free(&s);
    }
    assert_string_equal(text[0], text[1]);
    free(text[0]);
    free(text[1]);
}

/* The estimate's two-stream schedule: a weight gathered on use (FSDP)
 * starts at the beginning and overlaps the nodes before its reader. */
static void test_plan_estimate_overlap(void **st)
{
    (void)st;
    static const char *const shards[] = {"x=[dp,_]", NULL};
    Setup s;
    plan_ok(&s, "tests/models/mlp.onnx", "dp=2", NULL, shards, -1);
    PlanEstimate e0;
    plan_estimate(s.p, &e0);
    /* Pure data parallelism: the output stays split, nothing moves in the step. */
    assert_true(e0.comm_s == 0 && e0.exposed_s == 0);
    assert_true(e0.step_s >= e0.compute_s);
    PlanTotals t;
    plan_totals(s.p, &t);
    assert_int_equal(t.output_gather_bytes, 4 * 64 * 4);
    assert_int_equal(partition_shard_weights(s.p, "dp", &s.d), 0);
    PlanEstimate e1;
    plan_estimate(s.p, &e1);
    assert_true(e1.comm_s > e0.comm_s);
    assert_true(e1.overlapped_s > 0); /* W2's gather runs while fc1 computes */
    assert_true(e1.weight_bytes < e0.weight_bytes);
    setup_free(&s);
}

static void test_partition_auto_cbc_matches_glpk(void **st)
{
    (void)st;
    /* Both solvers prove the same optimum on tiny_gpt under a memory
     * limit (a knapsack over layouts); CBC is the default when it loads. */
    assert_true(cbc_available()); /* make deps installs coinor-libcbc3 */
    double obj[2];
    for (int k = 0; k < 2; k++) {
        Setup s;
        memset(&s, 0, sizeof s);
        s.g = load_ok("tests/models/tiny_gpt.onnx");
        diag_init(&s.d, NULL);
        assert_int_equal(mesh_parse("dp=2,tp=2", &s.mesh, &s.d), 0);
        assert_int_equal(annotate_add_flag(&s.ann, &s.arena, s.g, &s.mesh, "tokens=[dp,_]", "--shard", &s.d), 0);
        AutoOptions o = {.solver = k ? "cbc" : "glpk", .mem_limit = 300 * 1024, .time_limit_s = 30};
        s.p = partition_auto(s.g, &s.mesh, &s.ann, &o, &s.d);
        if (!s.p)
            print_error("%s\n", diag_first(&s.d));
        assert_non_null(s.p);
        assert_true(s.p->auto_report->optimal);
        assert_string_equal(s.p->auto_report->solver, k ? "CBC" : "GLPK");
        obj[k] = s.p->auto_report->objective_s;
        setup_free(&s);
    }
    assert_true(fabs(obj[0] - obj[1]) <= 1e-9 * obj[0]);
}

/* One --auto run: the first pass's optimum (the fastest plan), how the
 * layers were solved, and the program's columns. */
static double auto_fastest(const char *model, const char *mesh, const char *shard, const char *device, int tie,
                           int64_t mem_limit, int *tied, int *cols)
{
    Setup s;
    memset(&s, 0, sizeof s);
    s.g = load_ok(model);
    diag_init(&s.d, NULL);
    assert_int_equal(mesh_parse(mesh, &s.mesh, &s.d), 0);
    if (device)
        assert_non_null(s.mesh.device = device_preset_find(device));
    if (shard)
        assert_int_equal(annotate_add_flag(&s.ann, &s.arena, s.g, &s.mesh, shard, "--shard", &s.d), 0);
    AutoOptions o = {.mem_limit = mem_limit, .time_limit_s = 60, .tie = tie};
    s.p = partition_auto(s.g, &s.mesh, &s.ann, &o, &s.d);
    if (!s.p)
        print_error("%s\n", diag_first(&s.d));
    assert_non_null(s.p);
    assert_true(s.p->auto_report->optimal);
    double best = s.p->auto_report->best_s;
    *tied = s.p->auto_report->tied;
    *cols = s.p->auto_report->cols;
    setup_free(&s);
    return best;
}

static void test_partition_auto_tied_layers_keep_the_optimum(void **st)
{
    (void)st;
    /* Identical layers solved once must give the whole program's optimum:
     * taken only where the tied optimum meets the bound, else the whole
     * program is solved. Models with two layers (tied from two up with
     * AUTO_TIE_ALWAYS), meshes of 2-4 ranks, the CPU and H100 presets,
     * with and without a memory limit (which the bound leaves out). */
    static const struct {
        const char *model, *mesh, *shard, *device;
        int64_t mem;
        int exact; /* 1: must be solved once; 0: either */
    } cases[] = {
        {"tests/models/tiny_gpt.onnx", "dp=2,tp=2", "tokens=[dp,_]", "cpu", 0, 1},
        {"tests/models/tiny_gpt.onnx", "tp=4", NULL, NULL, 0, 1},
        {"tests/models/tiny_gpt.onnx", "dp=2,tp=2", "tokens=[dp,_]", NULL, 360 * 1024, 0},
        {"tests/models/exports/llama_ts.onnx", "dp=2,tp=2", NULL, "cpu", 0, 1},
        {"tests/models/exports/llama_dynamo.onnx", "tp=4", NULL, "cpu", 0, 1},
        {"tests/models/exports/gpt2_dynamo.onnx", "dp=2,tp=2", NULL, "cpu", 0, 0},
        {"tests/models/exports/gpt2_ts.onnx", "dp=2,tp=2", NULL, NULL, 600 * 1024, 0},
        {"tests/models/exports/bert_dynamo.onnx", "tp=2", NULL, "cpu", 0, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int tied_off, tied_on, cols_off, cols_on;
        double off = auto_fastest(cases[i].model, cases[i].mesh, cases[i].shard, cases[i].device, AUTO_TIE_OFF,
                                  cases[i].mem, &tied_off, &cols_off);
        double on = auto_fastest(cases[i].model, cases[i].mesh, cases[i].shard, cases[i].device, AUTO_TIE_ALWAYS,
                                 cases[i].mem, &tied_on, &cols_on);
        if (fabs(off - on) > 1e-6 * off)
            print_error("%s on %s: whole %.9g s, tied %.9g s (tie status %d)\n", cases[i].model, cases[i].mesh, off,
                        on, tied_on);
        assert_true(fabs(off - on) <= 1e-6 * off);
        assert_int_equal(tied_off, TIED_NOT_TRIED);
        if (cases[i].exact) {
            assert_int_equal(tied_on, TIED_EXACT);
            assert_true(cols_on < cols_off);
        }
        if (tied_on != TIED_EXACT)
            assert_int_equal(cols_on, cols_off); /* the whole program, solved as without layers */
    }
}

static void test_partition_auto_differing_layer_not_tied(void **st)
{
    (void)st;
    /* An annotation on one layer's tensor makes it unlike the other: the
     * two blocks of 11 choices are not taken for identical layers (a
     * shorter repeat inside one may be), and the annotation holds. */
    static const char *const shards[] = {"tokens=[dp,_]", "l1_fc1=[dp,_,tp]", NULL};
    Setup s;
    memset(&s, 0, sizeof s);
    s.g = load_ok("tests/models/tiny_gpt.onnx");
    diag_init(&s.d, NULL);
    assert_int_equal(mesh_parse("dp=2,tp=2", &s.mesh, &s.d), 0);
    for (int i = 0; shards[i]; i++)
        assert_int_equal(annotate_add_flag(&s.ann, &s.arena, s.g, &s.mesh, shards[i], "--shard", &s.d), 0);
    AutoOptions o = {.time_limit_s = 30, .tie = AUTO_TIE_ALWAYS};
    s.p = partition_auto(s.g, &s.mesh, &s.ann, &o, &s.d);
    assert_non_null(s.p);
    assert_true(s.p->auto_report->layer_choices < 11);
    char b[128];
    assert_string_equal(layout(&s, "l1_fc1", b), "[dp,_,tp]");
    setup_free(&s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_partition_auto_mlp_memory_splits_weights),
        cmocka_unit_test(test_partition_auto_without_limit_replicates_tiny_model),
        cmocka_unit_test(test_partition_auto_annotations_hold),
        cmocka_unit_test(test_partition_auto_impossible_annotation_fails),
        cmocka_unit_test(test_partition_auto_memory_infeasible),
        cmocka_unit_test(test_partition_auto_not_worse_than_megatron),
        cmocka_unit_test(test_partition_auto_deterministic),
        cmocka_unit_test(test_plan_estimate_overlap),
        cmocka_unit_test(test_partition_auto_cbc_matches_glpk),
        cmocka_unit_test(test_partition_auto_tied_layers_keep_the_optimum),
        cmocka_unit_test(test_partition_auto_differing_layer_not_tied),
    };
    return cmocka_run_group_tests_name("partition_auto", tests, NULL, NULL);
}
