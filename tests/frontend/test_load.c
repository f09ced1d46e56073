/* test_load.c: decoding the golden models and the frontend's handling of
 * initializers, Constant nodes, external data, --dim bindings and the opset
 * variants (constant inputs folded into attributes). */
#include "tests/test_util.h"

static void expect_shape(Graph *g, const char *name, const char *shape)
{
    Tensor *t = graph_tensor_find(g, name);
    assert_non_null(t);
    char buf[128];
    assert_string_equal(shape_str(t->dims, t->rank, buf, sizeof buf), shape);
}

static int count_op(const Graph *g, OpKind op)
{
    int n = 0;
    for (int i = 0; i < g->nnodes; i++)
        n += g->nodes[i]->op == op;
    return n;
}

static void test_load_mlp(void **s)
{
    (void)s;
    Graph *g = load_ok("tests/models/mlp.onnx");
    assert_int_equal(g->opset, 21);
    assert_int_equal(g->ir_version, 10);
    assert_int_equal(g->nnodes, 4);
    assert_int_equal(g->ninputs, 1);
    expect_shape(g, "x", "[8, 64]");
    expect_shape(g, "h", "[8, 256]");
    expect_shape(g, "y", "[8, 64]");
    Tensor *w1 = graph_tensor_find(g, "W1");
    assert_true(w1->is_initializer && w1->data && w1->nbytes == 64 * 256 * 4);
    assert_int_equal(w1->nconsumers, 1);
    assert_int_equal(count_op(g, OP_GELU), 1);
    graph_free(g);
}

static void test_load_attention(void **s)
{
    (void)s;
    Graph *g = load_ok("tests/models/attention.onnx");
    expect_shape(g, "q_t", "[2, 4, 8, 8]");
    expect_shape(g, "k_t", "[2, 4, 8, 8]");
    expect_shape(g, "probs", "[2, 4, 8, 8]");
    expect_shape(g, "ctx_m", "[2, 8, 32]");
    expect_shape(g, "y", "[2, 8, 32]");
    /* Reshape's shape input became an attribute. */
    for (int i = 0; i < g->nnodes; i++)
        if (g->nodes[i]->op == OP_RESHAPE) {
            assert_int_equal(g->nodes[i]->ninputs, 1);
            assert_non_null(node_attr(g->nodes[i], "shape"));
        }
    graph_free(g);
}

static void test_load_tiny_gpt(void **s)
{
    (void)s;
    Graph *g = load_ok("tests/models/tiny_gpt.onnx");
    expect_shape(g, "tokens", "[2, 16]");
    expect_shape(g, "tok", "[2, 16, 64]");
    expect_shape(g, "pos", "[16, 64]");
    expect_shape(g, "l0_scores_m", "[2, 4, 16, 16]");
    expect_shape(g, "l1_act", "[2, 16, 256]");
    expect_shape(g, "logits", "[2, 16, 256]");
    assert_int_equal(graph_tensor_find(g, "tokens")->dtype, DT_I64);
    assert_int_equal(graph_tensor_find(g, "causal")->dtype, DT_BOOL);
    assert_int_equal(count_op(g, OP_LAYERNORM), 5);
    assert_int_equal(count_op(g, OP_GATHER), 2);
    graph_free(g);
}

static void test_load_convnet(void **s)
{
    (void)s;
    Graph *g = load_ok("tests/models/convnet.onnx");
    expect_shape(g, "c0_conv", "[2, 8, 16, 16]");
    expect_shape(g, "c0_pool", "[2, 8, 8, 8]");
    expect_shape(g, "c1_pool", "[2, 16, 4, 4]");
    expect_shape(g, "flat", "[2, 256]");
    expect_shape(g, "y", "[2, 10]");
    /* Explicit pads were normalised into the attribute. */
    const Attr *pads = node_attr(g->nodes[0], "pads");
    assert_non_null(pads);
    assert_int_equal(pads->n, 4);
    graph_free(g);
}

static void test_load_external_data(void **s)
{
    (void)s;
    Graph *g = load_ok("tests/models/external/external_ok.onnx");
    Tensor *w = graph_tensor_find(g, "w");
    assert_non_null(w->data);
    float v[6];
    memcpy(v, w->data, sizeof v);
    /* weights.bin holds 0..15 as float32; offset 8 bytes skips two. */
    for (int i = 0; i < 6; i++)
        assert_true(v[i] == (float)(i + 2));
    graph_free(g);
}

static void test_load_dim_binding(void **s)
{
    (void)s;
    DimBinding b[] = {{"batch", 5}};
    Graph *g = load_ok_dims("tests/models/bad/symbolic_dim.onnx", b, 1);
    expect_shape(g, "x", "[5, 3]");
    expect_shape(g, "y", "[5, 3]");
    graph_free(g);
}

static void test_load_constant_node(void **s)
{
    (void)s;
    Graph *g = load_ok("tests/models/ops/constant_ints.onnx");
    Tensor *k = graph_tensor_find(g, "k");
    assert_int_equal(k->dtype, DT_I64);
    assert_non_null(k->data);
    int64_t v[3];
    memcpy(v, k->data, sizeof v);
    assert_true(v[0] == 3 && v[1] == 1 && v[2] == 4);
    graph_free(g);
}

static void test_load_opset_variants_fold_to_attributes(void **s)
{
    (void)s;
    static const char *const models[] = {
        "tests/models/ops/reducemean_input.onnx", "tests/models/ops/reducesum_input.onnx",
        "tests/models/ops/unsqueeze_input.onnx", "tests/models/ops/squeeze_input.onnx",
        "tests/models/ops/split_input.onnx", "tests/models/ops/slice_basic.onnx",
    };
    for (size_t i = 0; i < sizeof models / sizeof models[0]; i++) {
        Graph *g = load_ok(models[i]);
        assert_int_equal(g->nodes[0]->ninputs, 1);
        assert_true(node_attr(g->nodes[0], "axes") || node_attr(g->nodes[0], "split"));
        graph_free(g);
    }
    /* The attribute form (opset 13 ReduceMean) gives the same IR. */
    Graph *g = load_ok("tests/models/ops/reducemean_attr.onnx");
    assert_int_equal(node_attr(g->nodes[0], "axes")->ints[0], -1);
    graph_free(g);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_load_mlp),
        cmocka_unit_test(test_load_attention),
        cmocka_unit_test(test_load_tiny_gpt),
        cmocka_unit_test(test_load_convnet),
        cmocka_unit_test(test_load_external_data),
        cmocka_unit_test(test_load_dim_binding),
        cmocka_unit_test(test_load_constant_node),
        cmocka_unit_test(test_load_opset_variants_fold_to_attributes),
    };
    return cmocka_run_group_tests_name("frontend/load", tests, NULL, NULL);
}
