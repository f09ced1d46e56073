/* test_fuse.c: exported GELU subgraphs become one Gelu node (ir/fuse.c).
 *
 * Hand-built graphs in the orders the exporters write (BERT's erf form,
 * GPT-2's tanh form with Pow), then the near misses that must stay as they
 * are: a wrong constant, an intermediate read elsewhere or a graph output,
 * and a second variable. The exported models themselves (bert_ts,
 * gpt2_dynamo...) go through the same pass in run_golden.sh, numerically.
 */
#include "tests/test_util.h"

static const int64_t shape[] = {2, 8};

static Tensor *var(Graph *g, const char *name)
{
    Tensor *t = graph_tensor_get(g, name);
    t->is_input = 1;
    t->dtype = DT_F32;
    t->rank = 2;
    memcpy(t->dims, shape, sizeof shape);
    return t;
}

static Tensor *scalar(Graph *g, const char *name, float v)
{
    Tensor *t = graph_tensor_get(g, name);
    float *p = arena_alloc(&g->arena, sizeof(float));
    *p = v;
    t->data = p;
    t->nbytes = 4;
    t->is_initializer = 1;
    t->dtype = DT_F32;
    t->rank = 0;
    return t;
}

static Tensor *op(Graph *g, OpKind k, Tensor *a, Tensor *b, const char *out)
{
    Tensor *t = test_node(g, k, a, b, out)->outputs[0];
    t->dtype = DT_F32;
    t->rank = 2;
    memcpy(t->dims, shape, sizeof shape);
    return t;
}

static void mark_output(Graph *g, Tensor *t)
{
    t->is_output = 1;
    g->outputs = arena_alloc(&g->arena, sizeof(Tensor *));
    g->outputs[0] = t;
    g->noutputs = 1;
}

/* BERT (torch.onnx, TorchScript): Mul(Mul(x, Add(Erf(Div(x, sqrt 2)), 1)), 0.5). */
static Tensor *bert_gelu(Graph *g, Tensor *x, float root2)
{
    Tensor *d = op(g, OP_DIV, x, scalar(g, "root2", root2), "div");
    Tensor *e = op(g, OP_ERF, d, NULL, "erf");
    Tensor *a = op(g, OP_ADD, e, scalar(g, "one", 1.0f), "add");
    Tensor *m = op(g, OP_MUL, x, a, "mul");
    return op(g, OP_MUL, m, scalar(g, "half", 0.5f), "gelu_out");
}

/* GPT-2's NewGELU: 0.5 x (1 + tanh(sqrt(2/pi) (x + c x^3))), the 0.5 x first. */
static Tensor *gpt2_gelu(Graph *g, Tensor *x, float c)
{
    Tensor *h = op(g, OP_MUL, scalar(g, "half", 0.5f), x, "half_x");
    Tensor *p = op(g, OP_POW, x, scalar(g, "three", 3.0f), "cube");
    Tensor *q = op(g, OP_MUL, p, scalar(g, "c", c), "cq");
    Tensor *s = op(g, OP_ADD, x, q, "inner");
    Tensor *u = op(g, OP_MUL, scalar(g, "k", 0.7978845608f), s, "scaled");
    Tensor *t = op(g, OP_TANH, u, NULL, "tanh");
    Tensor *v = op(g, OP_ADD, scalar(g, "one", 1.0f), t, "one_plus");
    return op(g, OP_MUL, h, v, "gelu_out");
}

static void finish(Graph *g, Tensor *y)
{
    mark_output(g, y);
    graph_link_consumers(g);
}

static void test_erf_form_becomes_gelu(void **s)
{
    (void)s;
    Graph *g = graph_new("bert");
    Tensor *x = var(g, "x");
    finish(g, bert_gelu(g, x, 1.4142135f));
    assert_int_equal(ir_fuse_activations(g), 4);
    assert_int_equal(g->nnodes, 1);
    Node *n = g->nodes[0];
    assert_int_equal(n->op, OP_GELU);
    assert_string_equal(n->name, "gelu_out");
    assert_ptr_equal(n->inputs[0], x);
    assert_int_equal(n->ninputs, 1);
    assert_string_equal(node_attr_str(n, "approximate", "?"), "none");
    assert_int_equal(g->nfused, 4);
    assert_int_equal(g->nfolded, 0);
    assert_int_equal(x->nconsumers, 1);
    graph_free(g);
}

static void test_tanh_form_becomes_gelu_tanh(void **s)
{
    (void)s;
    Graph *g = graph_new("gpt2");
    Tensor *x = var(g, "x");
    finish(g, gpt2_gelu(g, x, 0.044715f));
    assert_int_equal(ir_fuse_activations(g), 7);
    assert_int_equal(g->nnodes, 1);
    assert_int_equal(g->nodes[0]->op, OP_GELU);
    assert_string_equal(node_attr_str(g->nodes[0], "approximate", "?"), "tanh");
    graph_free(g);
}

static void test_near_misses_stay(void **s)
{
    (void)s;
    /* A constant off by 10%: some other function. */
    Graph *g = graph_new("wrong_constant");
    finish(g, gpt2_gelu(g, var(g, "x"), 0.05f));
    assert_int_equal(ir_fuse_activations(g), 0);
    assert_int_equal(g->nnodes, 8);
    graph_free(g);

    /* erf(x / sqrt 2) read by a second output: the part below it cannot go.
     * What remains above it is no GELU, so nothing fuses. */
    g = graph_new("shared");
    Tensor *x = var(g, "x");
    Tensor *y = bert_gelu(g, x, 1.4142135f);
    Tensor *erf = graph_tensor_find(g, "erf");
    Tensor *other = op(g, OP_NEG, erf, NULL, "other");
    mark_output(g, y);
    other->is_output = 1;
    graph_link_consumers(g);
    assert_int_equal(ir_fuse_activations(g), 0);
    assert_int_equal(g->nnodes, 6);
    graph_free(g);

    /* Two variables: x (1 + erf(z / sqrt 2)) / 2 with z another input. */
    g = graph_new("two_vars");
    x = var(g, "x");
    Tensor *z = var(g, "z");
    Tensor *d = op(g, OP_DIV, z, scalar(g, "root2", 1.4142135f), "div");
    Tensor *e = op(g, OP_ERF, d, NULL, "erf");
    Tensor *a = op(g, OP_ADD, e, scalar(g, "one", 1.0f), "add");
    Tensor *m = op(g, OP_MUL, x, a, "mul");
    finish(g, op(g, OP_MUL, m, scalar(g, "half", 0.5f), "out"));
    assert_int_equal(ir_fuse_activations(g), 0);
    graph_free(g);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_erf_form_becomes_gelu),
        cmocka_unit_test(test_tanh_form_becomes_gelu_tanh),
        cmocka_unit_test(test_near_misses_stay),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
