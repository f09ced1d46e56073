/* test_shape.c: shape inference for every op of the core set.
 *
 * The data-driven test loads each per-op model under tests/models/ops (one
 * or more opset variants per op: axes as attribute or input, Split with
 * sizes/equal/num_outputs, Reshape 0/-1, negative axes, broadcasting) and
 * compares every output's dtype and shape with what ONNX Runtime produced
 * (tests/models/ops/expected.txt, written by make_models.py). The other
 * tests build small graphs by hand and check the errors.
 */
#include "tests/test_util.h"

/* Checks every line of one expected-shapes file; returns the cases seen. */
static int expected_file_check(const char *path, int *checked)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    char line[512], last_case[128] = "";
    Graph *g = NULL;
    int cases = 0;
    while (fgets(line, sizeof line, f)) {
        if (line[0] == '#' || line[0] == '\n') /* a family without cases writes an empty line */
            continue;
        char cs[128], out[128], dt[32], shape[256];
        assert_int_equal(sscanf(line, "%127s %127s %31s %255[^\n]", cs, out, dt, shape), 4);
        if (strcmp(cs, last_case) != 0) {
            graph_free(g);
            char mpath[300];
            snprintf(mpath, sizeof mpath, "tests/models/ops/%s.onnx", cs);
            g = load_ok(mpath);
            snprintf(last_case, sizeof last_case, "%s", cs);
            cases++;
        }
        Tensor *t = graph_tensor_find(g, out);
        assert_non_null(t);
        char got[256];
        shape_str(t->dims, t->rank, got, sizeof got);
        if (strcmp(got, shape) != 0 || strcmp(dtype_name(t->dtype), dt) != 0)
            print_error("%s: %s: inferred %s %s, ONNX Runtime gives %s %s\n", cs, out,
                        dtype_name(t->dtype), got, dt, shape);
        assert_string_equal(got, shape);
        assert_string_equal(dtype_name(t->dtype), dt);
        (*checked)++;
    }
    graph_free(g);
    fclose(f);
    return cases;
}

static void test_ir_infer_shapes_matches_ort(void **s)
{
    (void)s;
    /* The core cases, then each op family's (tests/models/op_cases_*.py). */
    static const char *const files[] = {"expected.txt",       "expected_math.txt", "expected_reduce.txt",
                                        "expected_index.txt", "expected_shape.txt", "expected_nn.txt",
                                        "expected_loss.txt",  "expected_attn.txt"};
    int checked = 0, cases = 0;
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        char path[128];
        snprintf(path, sizeof path, "tests/models/ops/%s", files[i]);
        int n = expected_file_check(path, &checked);
        assert_true(n >= 0 || i > 0); /* the core file must exist */
        cases += n > 0 ? n : 0;
    }
    /* Every op of the table has at least one case. */
    assert_true(cases >= 50);
    assert_true(checked >= cases);
}

/* ---- hand-built graphs -------------------------------------------------- */

static Tensor *input(Graph *g, const char *name, DType dt, int rank, const int64_t *dims)
{
    Tensor *t = graph_tensor_get(g, name);
    t->is_input = 1;
    t->dtype = dt;
    t->rank = rank;
    memcpy(t->dims, dims, (size_t)rank * sizeof(int64_t));
    return t;
}

/* Runs inference expecting failure; checks the diagnostic mentions `want`. */
static void infer_fails(Graph *g, const char *want)
{
    Diag d;
    diag_init(&d, "hand.onnx");
    assert_int_equal(ir_infer_shapes(g, &d), -1);
    assert_int_equal(d.n, 1);
    assert_mentions(d.msgs[0], "hand.onnx", want, NULL);
    diag_free(&d);
    graph_free(g);
}

static void infer_ok(Graph *g)
{
    Diag d;
    diag_init(&d, "hand.onnx");
    int rc = ir_infer_shapes(g, &d);
    if (rc)
        print_error("%s\n", diag_first(&d));
    assert_int_equal(rc, 0);
    diag_free(&d);
}

static void test_shape_binary_broadcast_mismatch(void **s)
{
    (void)s;
    Graph *g = graph_new("hand.onnx");
    test_node(g, OP_ADD, input(g, "a", DT_F32, 2, (int64_t[]){2, 3}),
         input(g, "b", DT_F32, 2, (int64_t[]){4, 3}), "y");
    infer_fails(g, "do not broadcast");
}

static void test_shape_binary_dtype_mismatch(void **s)
{
    (void)s;
    Graph *g = graph_new("hand.onnx");
    test_node(g, OP_MUL, input(g, "a", DT_F32, 1, (int64_t[]){3}),
         input(g, "b", DT_I64, 1, (int64_t[]){3}), "y");
    infer_fails(g, "differ in dtype");
}

static void test_shape_broadcast_rank_extension(void **s)
{
    (void)s;
    Graph *g = graph_new("hand.onnx");
    Node *n = test_node(g, OP_SUB, input(g, "a", DT_F32, 1, (int64_t[]){5}),
                   input(g, "b", DT_F32, 4, (int64_t[]){2, 1, 3, 1}), "y");
    infer_ok(g);
    char buf[64];
    assert_string_equal(shape_str(n->outputs[0]->dims, n->outputs[0]->rank, buf, sizeof buf),
                        "[2, 1, 3, 5]");
    graph_free(g);
}

static void test_shape_reshape_two_minus_one(void **s)
{
    (void)s;
    Graph *g = graph_new("hand.onnx");
    Node *n = test_node(g, OP_RESHAPE, input(g, "x", DT_F32, 2, (int64_t[]){4, 6}), NULL, "y");
    node_attr_set_ints(g, n, "shape", (int64_t[]){-1, -1}, 2);
    infer_fails(g, "more than one -1");
}

static void test_shape_reshape_zero_copies_dim(void **s)
{
    (void)s;
    Graph *g = graph_new("hand.onnx");
    Node *n = test_node(g, OP_RESHAPE, input(g, "x", DT_F32, 3, (int64_t[]){2, 3, 4}), NULL, "y");
    node_attr_set_ints(g, n, "shape", (int64_t[]){0, 0, 2, -1}, 4);
    infer_ok(g);
    char buf[64];
    assert_string_equal(shape_str(n->outputs[0]->dims, 4, buf, sizeof buf), "[2, 3, 2, 2]");
    graph_free(g);
}

static void test_shape_reshape_wrong_count(void **s)
{
    (void)s;
    Graph *g = graph_new("hand.onnx");
    Node *n = test_node(g, OP_RESHAPE, input(g, "x", DT_F32, 2, (int64_t[]){4, 6}), NULL, "y");
    node_attr_set_ints(g, n, "shape", (int64_t[]){5, 5}, 2);
    infer_fails(g, "has 24");
}

static void test_shape_softmax_axis_out_of_range(void **s)
{
    (void)s;
    Graph *g = graph_new("hand.onnx");
    Node *n = test_node(g, OP_SOFTMAX, input(g, "x", DT_F32, 2, (int64_t[]){4, 6}), NULL, "y");
    n->attrs = arena_alloc(&g->arena, sizeof(Attr));
    n->attrs[0] = (Attr){.name = "axis", .type = ATTR_INT, .i = -3};
    n->nattrs = 1;
    infer_fails(g, "axis -3 is out of range for rank 2");
}

static void test_shape_transpose_negative_perm(void **s)
{
    (void)s;
    Graph *g = graph_new("hand.onnx");
    Node *n = test_node(g, OP_TRANSPOSE, input(g, "x", DT_F32, 2, (int64_t[]){4, 6}), NULL, "y");
    node_attr_set_ints(g, n, "perm", (int64_t[]){0, 0}, 2);
    infer_fails(g, "not a permutation");
}

static void test_shape_squeeze_non_one(void **s)
{
    (void)s;
    Graph *g = graph_new("hand.onnx");
    Node *n = test_node(g, OP_SQUEEZE, input(g, "x", DT_F32, 2, (int64_t[]){4, 1}), NULL, "y");
    node_attr_set_ints(g, n, "axes", (int64_t[]){-2}, 1);
    infer_fails(g, "cannot squeeze dim 0");
}

static void test_shape_unsqueeze_negative_axes(void **s)
{
    (void)s;
    Graph *g = graph_new("hand.onnx");
    Node *n = test_node(g, OP_UNSQUEEZE, input(g, "x", DT_F32, 2, (int64_t[]){4, 5}), NULL, "y");
    node_attr_set_ints(g, n, "axes", (int64_t[]){-1, 1}, 2);
    infer_ok(g);
    char buf[64];
    assert_string_equal(shape_str(n->outputs[0]->dims, 4, buf, sizeof buf), "[4, 1, 5, 1]");
    graph_free(g);
}

static void test_shape_matmul_inner_mismatch(void **s)
{
    (void)s;
    Graph *g = graph_new("hand.onnx");
    test_node(g, OP_MATMUL, input(g, "a", DT_F32, 2, (int64_t[]){2, 3}),
         input(g, "b", DT_F32, 2, (int64_t[]){4, 5}), "y");
    infer_fails(g, "inner dims differ");
}

static void test_shape_output_overflow(void **s)
{
    (void)s;
    Graph *g = graph_new("hand.onnx");
    /* Each input is representable; their broadcast product is not. */
    test_node(g, OP_ADD, input(g, "a", DT_F32, 2, (int64_t[]){1ll << 40, 1}),
         input(g, "b", DT_F32, 2, (int64_t[]){1, 1ll << 40}), "y");
    infer_fails(g, "overflows int64");
}

static void test_shape_gather_needs_int64(void **s)
{
    (void)s;
    Graph *g = graph_new("hand.onnx");
    test_node(g, OP_GATHER, input(g, "x", DT_F32, 2, (int64_t[]){4, 5}),
         input(g, "i", DT_F32, 1, (int64_t[]){2}), "y");
    infer_fails(g, "Gather needs int64");
}

static void test_shape_split_uneven_without_sizes(void **s)
{
    (void)s;
    Graph *g = graph_new("hand.onnx");
    Node *n = test_node(g, OP_SPLIT, input(g, "x", DT_F32, 1, (int64_t[]){7}), NULL, "y0");
    n->noutputs = 2;
    Tensor **o = arena_alloc(&g->arena, 2 * sizeof(Tensor *));
    o[0] = n->outputs[0];
    o[1] = graph_tensor_get(g, "y1");
    n->outputs = o;
    infer_fails(g, "does not split evenly");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ir_infer_shapes_matches_ort),
        cmocka_unit_test(test_shape_binary_broadcast_mismatch),
        cmocka_unit_test(test_shape_binary_dtype_mismatch),
        cmocka_unit_test(test_shape_broadcast_rank_extension),
        cmocka_unit_test(test_shape_reshape_two_minus_one),
        cmocka_unit_test(test_shape_reshape_zero_copies_dim),
        cmocka_unit_test(test_shape_reshape_wrong_count),
        cmocka_unit_test(test_shape_softmax_axis_out_of_range),
        cmocka_unit_test(test_shape_transpose_negative_perm),
        cmocka_unit_test(test_shape_squeeze_non_one),
        cmocka_unit_test(test_shape_unsqueeze_negative_axes),
        cmocka_unit_test(test_shape_matmul_inner_mismatch),
        cmocka_unit_test(test_shape_output_overflow),
        cmocka_unit_test(test_shape_gather_needs_int64),
        cmocka_unit_test(test_shape_split_uneven_without_sizes),
    };
    return cmocka_run_group_tests_name("ir/shape", tests, NULL, NULL);
}
