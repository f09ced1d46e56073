/* test_autodiff.c: the backward pass --train builds (ir/autodiff.c,
 * ir/vjp*.c, ir/recompute.c): what it appends, what it refuses, and the
 * invariants the later stages rely on. The numbers themselves are checked
 * end to end (tests/train/run_train.py, fuzz_plans.py --train). */
#include "tests/test_util.h"

static int count_op(const Graph *g, OpKind op)
{
    int n = 0;
    for (int i = 0; i < g->nnodes; i++)
        n += g->nodes[i]->op == op;
    return n;
}

static void test_mlp_gets_a_gradient_and_an_update_per_weight(void **s)
{
    (void)s;
    Graph *g = load_ok("tests/models/train/mlp_mse.onnx");
    TrainOptions o;
    train_options_default(&o);
    o.optimizer = OPT_ADAMW;
    Diag d;
    diag_init(&d, "mlp_mse");
    int forward = g->nnodes;
    assert_int_equal(ir_build_training(g, &o, &d), 0);
    assert_int_equal(d.n, 0);
    assert_true(g->nnodes > forward);
    assert_int_equal(count_op(g, OP_ADAMW), 4); /* W1, b1, W2, b2 */
    assert_non_null(g->loss);
    assert_string_equal(g->loss->name, "loss");
    /* Every update's gradient is shaped like its weight, the updates come
     * last, and each output takes over its input's storage. */
    int first_update = -1;
    for (int i = 0; i < g->nnodes; i++) {
        const Node *n = g->nodes[i];
        if (n->op != OP_ADAMW) {
            assert_int_equal(first_update, -1);
            continue;
        }
        if (first_update < 0)
            first_update = i;
        const Tensor *w = n->inputs[0], *gr = n->inputs[1];
        assert_int_equal(gr->rank, w->rank);
        assert_memory_equal(gr->dims, w->dims, (size_t)w->rank * sizeof(int64_t));
        assert_int_equal(ir_output_in_place(n, 0), 0);
        assert_string_equal(ir_output_name(n->outputs[0]), w->name);
        assert_true(n->outputs[0]->is_output);
    }
    /* Every backward node is marked and follows the forward ones. */
    for (int i = 0; i < forward; i++)
        assert_false(g->nodes[i]->grad);
    /* The updates run in the order backward finishes their gradients
     * (dp's buckets fill in that order): the second layer's first. */
    int last_key = -1;
    for (int i = first_update; i < g->nnodes; i++) {
        const Node *p = g->nodes[i]->inputs[1]->producer;
        assert_non_null(p);
        assert_true(p->id > last_key);
        last_key = p->id;
    }
    const char *w = g->nodes[first_update]->inputs[0]->name;
    assert_true(strcmp(w, "W2") == 0 || strcmp(w, "b2") == 0);
    diag_free(&d);
    graph_free(g);
}

static void test_frozen_weight_gets_no_update(void **s)
{
    (void)s;
    Graph *g = load_ok("tests/models/train/mlp_mse.onnx");
    TrainOptions o;
    train_options_default(&o);
    o.frozen = "W1,b1";
    Diag d;
    diag_init(&d, "mlp_mse");
    assert_int_equal(ir_build_training(g, &o, &d), 0);
    assert_int_equal(count_op(g, OP_SGD), 2);
    for (int i = 0; i < g->nnodes; i++)
        if (g->nodes[i]->op == OP_SGD)
            assert_true(strcmp(g->nodes[i]->inputs[0]->name, "W1") && strcmp(g->nodes[i]->inputs[0]->name, "b1"));
    diag_free(&d);
    graph_free(g);
}

/* --precision bf16: the GEMMs read and write bfloat16, the loss stays
 * float32, the weights stay float32 masters read through one Cast each,
 * and every update gets a float32 gradient; fp16 adds the loss scale's
 * state and the factor (1/scale, NaN on overflow) the gradients take. */
static void test_mixed_precision_keeps_float32_masters(void **s)
{
    (void)s;
    for (int fp16 = 0; fp16 <= 1; fp16++) {
        Graph *g = load_ok("tests/models/train/mlp_mse.onnx");
        TrainOptions o;
        train_options_default(&o);
        o.precision = fp16 ? DT_F16 : DT_BF16;
        Diag d;
        diag_init(&d, "mlp_mse");
        assert_int_equal(ir_build_training(g, &o, &d), 0);
        assert_int_equal(g->loss->dtype, DT_F32);
        int matmuls = 0, weight_casts = 0;
        for (int i = 0; i < g->nnodes; i++) {
            const Node *n = g->nodes[i];
            if (n->op == OP_MATMUL) {
                matmuls++;
                assert_int_equal(n->inputs[0]->dtype, o.precision);
                assert_int_equal(n->inputs[1]->dtype, o.precision);
                assert_int_equal(n->outputs[0]->dtype, o.precision);
            }
            if (n->op == OP_CAST && !n->grad && n->inputs[0]->is_initializer)
                weight_casts++;
            if (n->op == OP_SGD) {
                assert_int_equal(n->inputs[0]->dtype, DT_F32);
                assert_int_equal(n->inputs[1]->dtype, DT_F32);
            }
        }
        assert_int_equal(matmuls, 5); /* 2 forward; dW1, dW2 and da backward */
        assert_int_equal(weight_casts, 4); /* W1, b1, W2, b2: one each */
        if (fp16) {
            assert_non_null(g->loss_scale);
            assert_int_equal(tensor_numel(g->loss_scale), 3);
            assert_non_null(g->grad_factor);
            assert_true(g->grad_factor->producer->per_step);
        } else {
            assert_null(g->loss_scale);
        }
        diag_free(&d);
        graph_free(g);
    }
}

static void test_bad_flags_name_the_culprit(void **s)
{
    (void)s;
    struct {
        const char *loss, *frozen, *trainable, *want;
    } cases[] = {
        {"nope", NULL, NULL, "--loss nope"},
        {NULL, "W9", NULL, "--frozen W9"},
        {NULL, NULL, "x", "--trainable x"},
        {NULL, "W1,b1,W2,b2", NULL, "no trainable float initializer"},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        Graph *g = load_ok("tests/models/train/mlp_mse.onnx");
        TrainOptions o;
        train_options_default(&o);
        o.loss = cases[k].loss;
        o.frozen = cases[k].frozen;
        o.trainable = cases[k].trainable;
        Diag d;
        diag_init(&d, "mlp_mse");
        assert_int_equal(ir_build_training(g, &o, &d), -1);
        assert_int_equal(d.n, 1);
        assert_mentions(d.msgs[0], cases[k].want, NULL);
        diag_free(&d);
        graph_free(g);
    }
}

/* A graph through an op with no gradient rule (Floor): --train names it. */
static void test_op_without_a_rule_is_named(void **s)
{
    (void)s;
    Graph *g = graph_new("floor");
    Tensor *x = graph_tensor_get(g, "x"), *w = graph_tensor_get(g, "w");
    x->is_input = 1;
    x->dtype = w->dtype = DT_F32;
    x->rank = w->rank = 1;
    x->dims[0] = w->dims[0] = 4;
    static const float ones[4] = {1, 1, 1, 1};
    w->data = ones;
    w->nbytes = sizeof ones;
    w->is_initializer = 1;
    g->inputs = arena_alloc(&g->arena, sizeof(Tensor *));
    g->inputs[0] = x;
    g->ninputs = 1;
    Node *mul = test_node(g, OP_MUL, x, w, "xw");
    Node *fl = test_node(g, OP_FLOOR, mul->outputs[0], NULL, "floored");
    Node *red = test_node(g, OP_REDUCE_SUM, fl->outputs[0], NULL, "loss");
    node_attr_set_int(g, red, "keepdims", 0);
    Diag d;
    diag_init(&d, "floor.onnx");
    assert_int_equal(ir_infer_shapes(g, &d), 0);
    g->outputs = arena_alloc(&g->arena, sizeof(Tensor *));
    g->outputs[0] = red->outputs[0];
    g->outputs[0]->is_output = 1;
    g->noutputs = 1;
    graph_link_consumers(g);
    TrainOptions o;
    train_options_default(&o);
    assert_int_equal(ir_build_training(g, &o, &d), -1);
    assert_int_equal(d.n, 1);
    assert_mentions(d.msgs[0], "floored", "Floor", "no gradient", "--frozen", NULL);
    diag_free(&d);
    graph_free(g);
}

/* --recompute: backward reads copies, which are marked, placed before
 * their first reader, and selective keeps the GEMMs. */
static void test_recompute_copies_before_first_reader(void **s)
{
    (void)s;
    for (int mode = RECOMPUTE_SELECTIVE; mode <= RECOMPUTE_FULL; mode++) {
        Graph *g = load_ok("tests/models/train/tiny_gpt_lm.onnx");
        TrainOptions o;
        train_options_default(&o);
        o.recompute = (Recomputation)mode;
        Diag d;
        diag_init(&d, "tiny_gpt_lm");
        assert_int_equal(ir_build_training(g, &o, &d), 0);
        int copies = 0, gemm_copies = 0;
        for (int i = 0; i < g->nnodes; i++) {
            const Node *n = g->nodes[i];
            if (!n->recomputed)
                continue;
            copies++;
            gemm_copies += n->op == OP_MATMUL;
            assert_true(n->grad);
            /* right before its first reader: nothing between reads its output */
            int first = g->nnodes;
            for (int c = 0; c < n->outputs[0]->nconsumers; c++)
                if (n->outputs[0]->consumers[c]->id < first)
                    first = n->outputs[0]->consumers[c]->id;
            assert_true(first > i);
            for (int k = 0; k < n->ninputs; k++)
                if (n->inputs[k] && n->inputs[k]->producer)
                    assert_true(n->inputs[k]->producer->id < i);
        }
        assert_true(copies > 0);
        if (mode == RECOMPUTE_SELECTIVE)
            assert_int_equal(gemm_copies, 0);
        else
            assert_true(gemm_copies > 0);
        diag_free(&d);
        graph_free(g);
    }
}

/* ir/loss_vocab.c: with one group (one rank, dp alone) the fused loss
 * stays; with two, the loss is primitives, the max's nodes get no
 * gradient code (ReduceMax has no rule: building backward at all shows
 * it), and no backward node reads the whole logits through a gather. */
static void test_vocab_loss_keeps_classes_split(void **s)
{
    (void)s;
    Diag d;
    diag_init(&d, "mlp_sce_ignore");
    Graph *g = load_ok("tests/models/train/mlp_sce_ignore.onnx");
    assert_int_equal(ir_split_mean_losses(g, &d), 0);
    assert_int_equal(ir_split_vocab_losses(g, 1, &d), 0);
    assert_int_equal(count_op(g, OP_SCE_LOSS), 1);
    graph_free(g);

    g = load_ok("tests/models/train/mlp_sce_ignore.onnx");
    assert_int_equal(ir_split_mean_losses(g, &d), 0);
    assert_int_equal(ir_split_vocab_losses(g, 2, &d), 0);
    assert_int_equal(d.n, 0);
    assert_int_equal(count_op(g, OP_SCE_LOSS), 0);
    assert_int_equal(count_op(g, OP_REDUCE_MAX), 2);
    const Tensor *loss = graph_tensor_find(g, "loss");
    assert_non_null(loss);
    assert_int_equal(loss->rank, 0);
    int maxes = 0;
    for (int i = 0; i < g->nnodes; i++)
        if (g->nodes[i]->op == OP_REDUCE_MAX) {
            assert_true(g->nodes[i]->no_grad);
            maxes++;
        }
    assert_int_equal(maxes, 2);
    TrainOptions o;
    train_options_default(&o);
    assert_int_equal(ir_build_training(g, &o, &d), 0);
    assert_int_equal(d.n, 0);
    for (int i = 0; i < g->nnodes; i++)
        if (g->nodes[i]->grad)
            assert_int_not_equal(g->nodes[i]->op, OP_REDUCE_MAX);
    diag_free(&d);
    graph_free(g);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_mlp_gets_a_gradient_and_an_update_per_weight),
        cmocka_unit_test(test_frozen_weight_gets_no_update),
        cmocka_unit_test(test_mixed_precision_keeps_float32_masters),
        cmocka_unit_test(test_bad_flags_name_the_culprit),
        cmocka_unit_test(test_op_without_a_rule_is_named),
        cmocka_unit_test(test_recompute_copies_before_first_reader),
        cmocka_unit_test(test_vocab_loss_keeps_classes_split),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
