/* test_graph.c: arena, checked arithmetic, the tensor index, the op table
 * and topological ordering. */
#include "tests/test_util.h"

static void test_ck_mul_i64_overflow(void **s)
{
    (void)s;
    int64_t r;
    assert_int_equal(ck_mul_i64(1ll << 31, 1ll << 31, &r), 0);
    assert_true(r == (1ll << 62));
    assert_int_equal(ck_mul_i64(1ll << 32, 1ll << 31, &r), -1);
    assert_int_equal(ck_add_i64(INT64_MAX, 1, &r), -1);
    assert_int_equal(ck_mul_i64(-1, 5, &r), -1);
}

static void test_arena_alloc_large_and_zeroed(void **s)
{
    (void)s;
    Arena a = {0};
    char *small = arena_alloc(&a, 10);
    char *big = arena_alloc(&a, 1 << 20);
    char *small2 = arena_alloc(&a, 10);
    for (int i = 0; i < (1 << 20); i++)
        assert_int_equal(big[i], 0);
    /* The big block did not displace the small block's free space. */
    assert_true(small2 > small && small2 - small < 4096);
    assert_string_equal(arena_strdup(&a, "abc"), "abc");
    arena_free(&a);
}

static void test_graph_tensor_get_many(void **s)
{
    (void)s;
    Graph *g = graph_new("many");
    char name[32];
    for (int i = 0; i < 5000; i++) {
        snprintf(name, sizeof name, "t%d", i);
        assert_int_equal(graph_tensor_get(g, name)->id, i);
    }
    for (int i = 0; i < 5000; i += 7) {
        snprintf(name, sizeof name, "t%d", i);
        assert_int_equal(graph_tensor_find(g, name)->id, i);
    }
    assert_null(graph_tensor_find(g, "t5000"));
    graph_free(g);
}

static void test_op_table_names_unique(void **s)
{
    (void)s;
    for (int i = 0; i < OP_COUNT; i++) {
        assert_non_null(op_table[i].name);
        assert_non_null(op_table[i].infer);
        /* the optimizer updates --train makes (since 0) are never read from a model */
        assert_int_equal(op_from_name(op_table[i].name), op_table[i].since_opset ? i : -1);
        assert_true(op_table[i].min_inputs <= op_table[i].max_inputs);
    }
    assert_int_equal(op_from_name("Loop"), -1);
    assert_int_equal(op_from_name("AdamW"), -1);
}

static Node *chain(Graph *g, const char *in, const char *out, const char *name)
{
    Node *n = graph_node_add(g, OP_RELU, name);
    n->ninputs = n->noutputs = 1;
    n->inputs = arena_alloc(&g->arena, sizeof(Tensor *));
    n->outputs = arena_alloc(&g->arena, sizeof(Tensor *));
    n->inputs[0] = graph_tensor_get(g, in);
    n->outputs[0] = graph_tensor_get(g, out);
    n->outputs[0]->producer = n;
    return n;
}

static void test_graph_toposort_reorders(void **s)
{
    (void)s;
    Graph *g = graph_new("order");
    graph_tensor_get(g, "x")->is_input = 1;
    chain(g, "b", "c", "third");
    chain(g, "x", "a", "first");
    chain(g, "a", "b", "second");
    Diag d;
    diag_init(&d, "order");
    assert_int_equal(graph_toposort(g, &d), 0);
    assert_string_equal(g->nodes[0]->name, "first");
    assert_string_equal(g->nodes[1]->name, "second");
    assert_string_equal(g->nodes[2]->name, "third");
    assert_int_equal(graph_tensor_find(g, "a")->nconsumers, 1);
    diag_free(&d);
    graph_free(g);
}

static void test_graph_toposort_cycle_names_node_on_cycle(void **s)
{
    (void)s;
    Graph *g = graph_new("cyc");
    graph_tensor_get(g, "x")->is_input = 1;
    /* downstream -> of a 2-cycle {loop_a, loop_b}; the first unplaced node
     * in model order is downstream, which must not be named. */
    chain(g, "q", "z", "downstream");
    chain(g, "p", "q", "loop_a");
    chain(g, "q", "p", "loop_b");
    Diag d;
    diag_init(&d, "cyc.onnx");
    assert_int_equal(graph_toposort(g, &d), -1);
    assert_int_equal(d.n, 1);
    assert_mentions(d.msgs[0], "cyc.onnx", "cycle", NULL);
    assert_null(strstr(d.msgs[0], "downstream"));
    assert_true(strstr(d.msgs[0], "loop_a") || strstr(d.msgs[0], "loop_b"));
    diag_free(&d);
    graph_free(g);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ck_mul_i64_overflow),
        cmocka_unit_test(test_arena_alloc_large_and_zeroed),
        cmocka_unit_test(test_graph_tensor_get_many),
        cmocka_unit_test(test_op_table_names_unique),
        cmocka_unit_test(test_graph_toposort_reorders),
        cmocka_unit_test(test_graph_toposort_cycle_names_node_on_cycle),
    };
    return cmocka_run_group_tests_name("ir/graph", tests, NULL, NULL);
}
