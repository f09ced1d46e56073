/* test_moe.c: ir/moe.c's rewrite of the exporters' batched MoE block into
 * MoeDispatch, per-expert GEMMs over the stacked weights and MoeCombine.
 *
 * On the Mixtral and Qwen2-MoE exports (tests/models/make_moe_exports.py:
 * 32 tokens, top-2 of 4 experts, width 64): the new nodes and their
 * shapes, the capacity (the factor's rounding, its clamps) and the groups
 * (reduced to a divisor of the tokens), the gathered-weight form gone, the
 * block's output kept; a block with a middle op that is not element-wise
 * left dense beside a rewritten one; a model without a block untouched;
 * the eager export of Mixtral (a NonZero loop) turned into the batched form
 * by frontend/moe_eager.c at load, then rewritten the same way.
 * The numbers are tests/e2e/moe.py's and the golden cases'.
 */
#include "tests/test_util.h"

static Graph *load(const char *path)
{
    FrontendOptions opt = {0};
    Diag d;
    Graph *g = NULL;
    diag_init(&d, path);
    if (frontend_load_file(path, &opt, &g, &d))
        print_error("load %s failed: %s\n", path, diag_first(&d));
    diag_free(&d);
    return g;
}

static void moe_ok(Graph *g, double factor, int groups)
{
    MoeOptions o = {.capacity_factor = factor, .groups = groups};
    Diag d;
    diag_init(&d, NULL);
    int rc = ir_build_moe(g, &o, &d);
    if (rc)
        print_error("ir_build_moe: %s\n", diag_first(&d));
    assert_int_equal(rc, 0);
    diag_free(&d);
}

static int count_op(const Graph *g, OpKind op)
{
    int n = 0;
    for (int i = 0; i < g->nnodes; i++)
        n += !g->nodes[i]->folded && g->nodes[i]->op == op;
    return n;
}

/* Gathers whose data is a stacked expert weight. */
static int expert_gathers(const Graph *g)
{
    int n = 0;
    for (int i = 0; i < g->nnodes; i++) {
        const Node *nd = g->nodes[i];
        n += !nd->folded && nd->op == OP_GATHER && strstr(nd->inputs[0]->name, "experts.") != NULL;
    }
    return n;
}

static const Node *nth_op(const Graph *g, OpKind op, int k)
{
    for (int i = 0; i < g->nnodes; i++)
        if (!g->nodes[i]->folded && g->nodes[i]->op == op && k-- == 0)
            return g->nodes[i];
    return NULL;
}

static void assert_dims(const Tensor *t, int rank, const int64_t *dims)
{
    assert_int_equal(t->rank, rank);
    for (int i = 0; i < rank; i++)
        assert_int_equal(t->dims[i], dims[i]);
}

static void test_mixtral_blocks(void **state)
{
    (void)state;
    Graph *g = load("tests/models/exports/mixtral_moe.onnx");
    assert_non_null(g);
    assert_int_equal(expert_gathers(g), 4);
    moe_ok(g, 1.25, 2);
    assert_int_equal(count_op(g, OP_MOE_DISPATCH), 2);
    assert_int_equal(count_op(g, OP_MOE_COMBINE), 2);
    assert_int_equal(expert_gathers(g), 0);
    assert_int_equal(count_op(g, OP_TILE), 0); /* the tokens' copy per choice is gone */
    assert_int_equal(g->nmoe_weights, 4);
    assert_string_equal(g->moe_weights[0]->name, "inner.model.layers.0.mlp.experts.gate_up_proj");
    assert_string_equal(g->moe_weights[1]->name, "inner.model.layers.0.mlp.experts.down_proj");
    assert_int_equal(moe_layers(g), 2);

    const Node *dn = nth_op(g, OP_MOE_DISPATCH, 0);
    assert_int_equal(moe_layer_index(g, dn), 0);
    assert_int_equal(moe_layer_index(g, nth_op(g, OP_MOE_DISPATCH, 1)), 1);
    /* 2 groups of 16; capacity ceil(1.25 * 2 * 16 / 4) = 10 */
    assert_dims(dn->inputs[0], 3, (const int64_t[]){2, 16, 64});
    assert_dims(dn->inputs[1], 3, (const int64_t[]){2, 16, 2});
    assert_dims(dn->outputs[0], 4, (const int64_t[]){2, 4, 64, 10});
    assert_dims(dn->outputs[1], 3, (const int64_t[]){2, 16, 2});
    assert_int_equal(dn->outputs[1]->dtype, DT_I64);
    assert_int_equal(node_attr_int(dn, "capacity", 0), 10);

    /* The expert GEMMs: stacked weights times the buffer, [G, E, out, C]. */
    const Node *m1 = dn->outputs[0]->consumers[0];
    assert_int_equal(m1->op, OP_MATMUL);
    assert_ptr_equal(m1->inputs[0], g->moe_weights[0]);
    assert_dims(m1->outputs[0], 4, (const int64_t[]){2, 4, 256, 10});
    const Node *sl = nth_op(g, OP_SLICE, 0); /* the gate and up halves, now along dim 2 */
    for (int k = 0; sl && k < 8 && sl->inputs[0] != m1->outputs[0]; k++)
        sl = nth_op(g, OP_SLICE, k + 1);
    assert_non_null(sl);
    assert_int_equal(node_attr(sl, "axes")->ints[0], 2);
    assert_dims(sl->outputs[0], 4, (const int64_t[]){2, 4, 128, 10});

    /* The combine, and the block's own output as a Reshape of it. */
    const Node *cn = nth_op(g, OP_MOE_COMBINE, 0);
    assert_ptr_equal(cn->inputs[1], dn->outputs[1]);
    assert_dims(cn->inputs[0], 4, (const int64_t[]){2, 4, 64, 10});
    assert_dims(cn->outputs[0], 3, (const int64_t[]){2, 16, 64});
    const Tensor *out = graph_tensor_find(g, "/inner/model/layers.0/mlp/experts/ReduceSum_output_0");
    assert_non_null(out);
    assert_int_equal(out->producer->op, OP_RESHAPE);
    assert_ptr_equal(out->producer->inputs[0], cn->outputs[0]);
    assert_dims(out, 2, (const int64_t[]){32, 64});
    graph_free(g);
}

/* The eager export: after load the loop is gone (no NonZero, OneHot or
 * ScatterElements), the batched form stands in its place with the block's
 * last accumulation as its ReduceSum, and ir/moe.c rewrites it as it does
 * the batched export (the same dispatch shapes and capacity). */
static void test_mixtral_eager(void **state)
{
    (void)state;
    Graph *g = load("tests/models/exports/mixtral_moe_eager.onnx");
    assert_non_null(g);
    assert_int_equal(count_op(g, OP_NONZERO), 0);
    assert_int_equal(count_op(g, OP_ONEHOT), 0);
    assert_int_equal(count_op(g, OP_SCATTER_ELEMENTS), 0);
    assert_int_equal(expert_gathers(g), 4); /* W1 and W2 by pair, per layer */
    const char *name = "/inner/model/layers.0/mlp/experts/Add_11_output_0";
    const Tensor *out = graph_tensor_find(g, name);
    assert_non_null(out);
    assert_int_equal(out->producer->op, OP_REDUCE_SUM);
    assert_dims(out, 2, (const int64_t[]){32, 64});

    moe_ok(g, 1.25, 2);
    assert_int_equal(count_op(g, OP_MOE_DISPATCH), 2);
    assert_int_equal(expert_gathers(g), 0);
    assert_string_equal(g->moe_weights[0]->name, "inner.model.layers.0.mlp.experts.gate_up_proj");
    assert_string_equal(g->moe_weights[1]->name, "inner.model.layers.0.mlp.experts.down_proj");
    const Node *dn = nth_op(g, OP_MOE_DISPATCH, 0);
    assert_dims(dn->outputs[0], 4, (const int64_t[]){2, 4, 64, 10});
    out = graph_tensor_find(g, name);
    assert_int_equal(out->producer->op, OP_RESHAPE);
    assert_ptr_equal(out->producer->inputs[0], nth_op(g, OP_MOE_COMBINE, 0)->outputs[0]);
    graph_free(g);
}

/* The KV-cache export of Mixtral has dynamic dims: torch's repeat() of the
 * tokens per choice exports its repeats as OneHot([1], 3, [1, k]), which
 * folds at load to [1, k, 1] (ir/ops_index.c fold_onehot), so the block
 * is found with the dims bound. */
static void test_mixtral_kv_onehot_folds(void **state)
{
    (void)state;
    DimBinding dims[] = {{"batch", 2}, {"seq", 1}, {"past", 3}, {"total", 4}};
    FrontendOptions opt = {.dims = dims, .ndims = 4};
    Diag d;
    Graph *g = NULL;
    diag_init(&d, NULL);
    int rc = frontend_load_file("tests/models/exports/mixtral_kv.onnx", &opt, &g, &d);
    if (rc)
        print_error("load: %s\n", diag_first(&d));
    assert_int_equal(rc, 0);
    diag_free(&d);
    assert_int_equal(count_op(g, OP_ONEHOT), 0);
    const Node *tile = nth_op(g, OP_TILE, 0);
    assert_non_null(tile);
    const Attr *rep = node_attr(tile, "repeats");
    assert_non_null(rep);
    assert_int_equal(rep->n, 3);
    assert_int_equal(rep->ints[0], 1);
    assert_int_equal(rep->ints[1], 2);
    assert_int_equal(rep->ints[2], 1);
    moe_ok(g, 1.25, 2);
    assert_int_equal(count_op(g, OP_MOE_DISPATCH), 2);
    graph_free(g);
}

/* The capacity's clamps (at least 1, at most a group's tokens), the
 * dropless default (no factor: a group's tokens) and the groups reduced
 * to a divisor of the 32 tokens. */
static void test_capacity_and_groups(void **state)
{
    (void)state;
    static const struct {
        double factor;
        int groups;
        int64_t want_groups, want_cap;
    } cases[] = {
        {1.25, 1, 1, 20},   /* ceil(1.25 * 2 * 32 / 4) */
        {2.0, 4, 4, 8},     /* E / k: a group's every token */
        {100.0, 2, 2, 16},  /* clamped to the group's 16 tokens */
        {0.01, 2, 2, 1},    /* at least 1 */
        {1.0, 3, 2, 8},     /* 3 groups do not divide 32: 2 */
        {1.0, 64, 32, 1},   /* more groups than tokens: one token each */
        {1.5, 8, 8, 3},     /* 8 groups of 4 tokens: ceil(1.5 * 2 * 4 / 4) */
        {0, 1, 1, 32},      /* no factor (the default): dropless, a group's every token */
        {0, 4, 4, 8},       /* dropless in 4 groups of 8 */
        {0, 3, 2, 16},      /* dropless, 3 groups reduced to 2 */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        Graph *g = load("tests/models/exports/mixtral_moe.onnx");
        moe_ok(g, cases[i].factor, cases[i].groups);
        const Node *dn = nth_op(g, OP_MOE_DISPATCH, 0);
        assert_int_equal(dn->outputs[0]->dims[0], cases[i].want_groups);
        assert_int_equal(dn->outputs[0]->dims[3], cases[i].want_cap);
        graph_free(g);
    }
}

/* Qwen2-MoE: the shared expert beside the routed ones stays as it is. */
static void test_qwen2_shared_expert(void **state)
{
    (void)state;
    Graph *g = load("tests/models/exports/qwen2moe_moe.onnx");
    int matmuls = count_op(g, OP_MATMUL), sigmoids = count_op(g, OP_SIGMOID);
    moe_ok(g, 2.0, 1);
    assert_int_equal(count_op(g, OP_MOE_DISPATCH), 2);
    assert_int_equal(expert_gathers(g), 0);
    assert_int_equal(count_op(g, OP_MATMUL), matmuls); /* the routed GEMMs are the same MatMuls, re-shaped */
    assert_int_equal(count_op(g, OP_SIGMOID), sigmoids);
    graph_free(g);
}

/* A block whose middle holds an op that is not element-wise (here layer
 * 0's SiLU made a Softmax) stays in its gathered form; layer 1 is still
 * rewritten. */
static void test_block_left_dense(void **state)
{
    (void)state;
    Graph *g = load("tests/models/exports/mixtral_moe.onnx");
    Node *sig = NULL;
    for (int i = 0; i < g->nnodes && !sig; i++)
        if (g->nodes[i]->op == OP_SIGMOID && strstr(g->nodes[i]->name, "layers.0/mlp/experts"))
            sig = g->nodes[i];
    assert_non_null(sig);
    sig->op = OP_SOFTMAX;
    moe_ok(g, 1.25, 1);
    assert_int_equal(count_op(g, OP_MOE_DISPATCH), 1);
    assert_int_equal(expert_gathers(g), 2);
    assert_int_equal(g->nmoe_weights, 2);
    assert_string_equal(g->moe_weights[0]->name, "inner.model.layers.1.mlp.experts.gate_up_proj");
    graph_free(g);
}

static void test_no_block(void **state)
{
    (void)state;
    Graph *g = load("tests/models/tiny_gpt.onnx");
    int n = g->nnodes;
    moe_ok(g, 1.25, 2);
    assert_int_equal(g->nnodes, n);
    assert_int_equal(g->nmoe_weights, 0);
    assert_int_equal(moe_layers(g), 0);
    graph_free(g);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_mixtral_blocks),
        cmocka_unit_test(test_capacity_and_groups),
        cmocka_unit_test(test_qwen2_shared_expert),
        cmocka_unit_test(test_block_left_dense),
        cmocka_unit_test(test_no_block),
        cmocka_unit_test(test_mixtral_eager),
        cmocka_unit_test(test_mixtral_kv_onehot_folds),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
