/* test_decode.c: compile --decode's import and rewrite (frontend/load.c's
 * dims by role, ir/decode.c).
 *
 * On the GPT-2 and Llama KV-cache exports: the dims bound from --max-seq,
 * each cache's Concat turned into a KvCacheWrite of max-seq slots that the
 * attention reads, the past inputs and present outputs gone, the fed
 * inputs found; then --kv-cache naming one pair, a model without a cache,
 * and a max-seq that disagrees with a --dim. The numbers are
 * tests/e2e/decode.py's, against ONNX Runtime.
 */
#include "tests/test_util.h"

/* Loads a decoding model (its batch dim bound to 2 when it has one). */
static Graph *load_decode(const char *path, int64_t max_seq)
{
    static const DimBinding batch = {"batch", 2};
    int symbolic = strstr(path, "_kv.") != NULL;
    FrontendOptions opt = {.dims = &batch, .ndims = symbolic, .decode_max_seq = max_seq};
    Diag d;
    Graph *g = NULL;
    diag_init(&d, path);
    int rc = frontend_load_file(path, &opt, &g, &d);
    if (rc)
        print_error("load %s failed: %s\n", path, diag_first(&d));
    diag_free(&d);
    return g;
}

static void decode_ok(Graph *g, int64_t max_seq)
{
    DecodeOptions o = {.max_seq = max_seq, .generate = 4};
    Diag d;
    diag_init(&d, NULL);
    int rc = ir_build_decode(g, &o, &d);
    if (rc)
        print_error("ir_build_decode: %s\n", diag_first(&d));
    assert_int_equal(rc, 0);
    diag_free(&d);
}

static int count_op(const Graph *g, OpKind op)
{
    int n = 0;
    for (int i = 0; i < g->nnodes; i++)
        n += g->nodes[i]->op == op;
    return n;
}

static void test_gpt2_caches_in_place(void **state)
{
    (void)state;
    Graph *g = load_decode("tests/models/exports/gpt2_kv.onnx", 12);
    assert_non_null(g);
    const Tensor *past = graph_tensor_find(g, "past_key_values.1.value");
    assert_int_equal(past->dims[2], 11); /* max-seq - 1 past positions */
    assert_int_equal(graph_tensor_find(g, "attention_mask")->dims[1], 12);
    assert_int_equal(graph_tensor_find(g, "input_ids")->dims[1], 1);
    assert_int_equal(g->ninputs, 7);
    decode_ok(g, 12);
    assert_int_equal(count_op(g, OP_KV_CACHE_WRITE), 4);
    assert_int_equal(count_op(g, OP_CONCAT), 0); /* the caches' and the exporter's one-input Concat */
    for (int i = 0; i < g->nnodes; i++) {
        const Node *n = g->nodes[i];
        if (n->op != OP_KV_CACHE_WRITE)
            continue;
        const Tensor *c = n->outputs[0];
        assert_int_equal(c->rank, 4);
        assert_int_equal(c->dims[0], 2);
        assert_int_equal(c->dims[1], 4);
        assert_int_equal(c->dims[2], 12);
        assert_int_equal(c->dims[3], 16);
        assert_int_equal(n->inputs[0]->dims[2], 1); /* the new position */
        assert_int_equal(node_attr_int(n, "axis", -1), 2);
        assert_false(c->is_output);
        assert_true(c->nconsumers > 0); /* the attention reads the cache */
    }
    assert_int_equal(g->ninputs, 3);
    assert_non_null(g->decode_ids);
    assert_non_null(g->decode_positions);
    assert_non_null(g->decode_mask);
    assert_int_equal(g->noutputs, 1);
    assert_string_equal(g->decode_logits->name, "logits");
    assert_int_equal(g->decode_slots, 12);
    assert_int_equal(g->decode_generate, 4);
    graph_free(g);
}

static void test_llama_gqa_caches(void **state)
{
    (void)state;
    Graph *g = load_decode("tests/models/exports/llama_kv.onnx", 16);
    assert_non_null(g);
    decode_ok(g, 16);
    assert_int_equal(count_op(g, OP_KV_CACHE_WRITE), 4);
    for (int i = 0; i < g->nnodes; i++)
        if (g->nodes[i]->op == OP_KV_CACHE_WRITE)
            assert_int_equal(g->nodes[i]->outputs[0]->dims[1], 2); /* 2 key-value heads of 4 */
    graph_free(g);
}

static void expect_decode_error(const char *path, const char *kv, const char *want)
{
    Graph *g = load_decode(path, 12);
    assert_non_null(g);
    DecodeOptions o = {.max_seq = 12, .generate = 4, .kv = kv};
    Diag d;
    diag_init(&d, NULL);
    assert_int_equal(ir_build_decode(g, &o, &d), -1);
    if (!strstr(diag_first(&d), want))
        print_error("got \"%s\", want \"%s\"\n", diag_first(&d), want);
    assert_non_null(strstr(diag_first(&d), want));
    diag_free(&d);
    graph_free(g);
}

static void test_refusals(void **state)
{
    (void)state;
    /* One pair named: the other past inputs are left over, and named. */
    expect_decode_error("tests/models/exports/gpt2_kv.onnx", "past_key_values.0.key=present.0.key",
                        "graph input \"past_key_values.0.value\" is neither");
    /* A pair that is not one. */
    expect_decode_error("tests/models/exports/gpt2_kv.onnx", "past_key_values.0.key=present.1.key",
                        "--kv-cache past_key_values.0.key=present.1.key: no graph output");
    /* No cache at all. */
    expect_decode_error("tests/models/exports/gpt2_ts.onnx", NULL, "no key-value cache found");
}

/* A --dim that binds the past length against --max-seq: the cache's
 * positions disagree, and the error says what to bind. */
static void test_max_seq_disagrees(void **state)
{
    (void)state;
    static const DimBinding dims[] = {{"batch", 2}, {"past", 5}};
    FrontendOptions opt = {.dims = dims, .ndims = 2, .decode_max_seq = 12};
    Diag d;
    Graph *g = NULL;
    diag_init(&d, NULL);
    int rc = frontend_load_file("tests/models/exports/gpt2_kv.onnx", &opt, &g, &d);
    if (rc == 0) { /* past bound to 5, total by role to 12: the Concat's shapes disagree */
        DecodeOptions o = {.max_seq = 12, .generate = 4};
        rc = ir_build_decode(g, &o, &d);
    }
    assert_int_equal(rc, -1);
    assert_true(d.n >= 1);
    diag_free(&d);
    graph_free(g);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gpt2_caches_in_place),
        cmocka_unit_test(test_llama_gqa_caches),
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_max_seq_disagrees),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
