/* test_propagate.c: sharding propagation on the golden models and the
 * errors users hit first. Each case is a model, a mesh and annotations;
 * the assertions are on the plan's layouts and collectives. */
#include "tests/partition/plan_setup.h"

/* Bytes per rank the plan sends to reshard `tensor`, over all its reshards. */
static int64_t reshard_bytes_of(Setup *s, const char *tensor)
{
    int64_t bytes = 0;
    for (int i = 0; i < s->p->nreshards; i++)
        if (strcmp(s->p->reshards[i].tensor->name, tensor) == 0)
            bytes += s->p->reshards[i].r.bytes;
    return bytes;
}

static void test_partition_propagate_mlp_megatron(void **st)
{
    (void)st;
    Setup s;
    char b[128];
    const char *shards[] = {"W1=[_,tp]", NULL};
    plan_ok(&s, "tests/models/mlp.onnx", "tp=2", NULL, shards, -1);
    assert_string_equal(layout(&s, "h", b), "[_,tp]");
    assert_string_equal(layout(&s, "a", b), "[_,tp]");
    /* The second weight is row-split by propagation, not annotation. */
    assert_string_equal(layout(&s, "W2", b), "[tp,_]");
    assert_int_equal(s.p->tensors[graph_tensor_find(s.g, "W2")->id].origin, ORIGIN_PROPAGATED);
    assert_string_equal(layout(&s, "o", b), "[_,_] partial(tp)");
    /* Exactly one all-reduce, and it sits before the bias Add. */
    assert_int_equal(count_comm(&s), 1);
    assert_int_equal(count_coll(&s, COLL_ALL_REDUCE, "tp"), 1);
    assert_string_equal(s.p->reshards[0].tensor->name, "o");
    assert_string_equal(s.p->reshards[0].consumer->name, "bias2");
    assert_string_equal(layout(&s, "y", b), "[_,_]");
    setup_free(&s);
}

static void test_partition_propagate_attention_heads(void **st)
{
    (void)st;
    Setup s;
    char b[128];
    const char *shards[] = {"Wq=[_,tp]", "Wk=[_,tp]", "Wv=[_,tp]", NULL};
    plan_ok(&s, "tests/models/attention.onnx", "tp=2", NULL, shards, -1);
    /* The split of D = H*dh lands on the head factor through Reshape and
     * stays on heads through Transpose, MatMul and Softmax. */
    assert_string_equal(layout(&s, "q_h", b), "[_,_,tp,_]");
    assert_string_equal(layout(&s, "q_t", b), "[_,tp,_,_]");
    assert_string_equal(layout(&s, "k_t", b), "[_,tp,_,_]");
    assert_string_equal(layout(&s, "probs", b), "[_,tp,_,_]");
    assert_string_equal(layout(&s, "ctx_m", b), "[_,_,tp]");
    assert_string_equal(layout(&s, "bq", b), "[tp]");
    /* Wo is free: row-split it and all-reduce o_mm (2 KiB per rank on
     * tp=2), or gather ctx_m (1 KiB) and keep Wo whole. The fewer bytes
     * win, as in XLA's partitioner; Megatron's all-reduce needs Wo=[tp,_]. */
    assert_string_equal(layout(&s, "Wo", b), "[_,_]");
    assert_int_equal(count_comm(&s), 1);
    assert_int_equal(count_coll(&s, COLL_ALL_GATHER, "tp"), 1);
    assert_int_equal(reshard_bytes_of(&s, "ctx_m"), 1024);
    assert_string_equal(s.p->reshards[0].consumer->name, "o_proj");
    setup_free(&s);
}

static void test_partition_propagate_tiny_gpt_dp_tp(void **st)
{
    (void)st;
    Setup s;
    char b[128];
    plan_ok(&s, "tests/models/tiny_gpt.onnx", "dp=2,tp=2", "tests/partition/tiny_gpt_megatron.txt", NULL, -1);
    /* Two all-reduces per block over tp, none over dp. */
    assert_int_equal(count_coll(&s, COLL_ALL_REDUCE, "tp"), 4);
    assert_int_equal(count_coll(&s, COLL_ALL_REDUCE, "dp"), 0);
    assert_int_equal(count_coll(&s, COLL_ALL_REDUCE, "dp+tp"), 0);
    /* Embedding and LM head: no reshard of the vocab tables at all. */
    for (int i = 0; i < s.p->nreshards; i++) {
        assert_string_not_equal(s.p->reshards[i].tensor->name, "tok_emb");
        assert_string_not_equal(s.p->reshards[i].tensor->name, "lm_head");
    }
    assert_string_equal(layout(&s, "tok", b), "[dp,_,_]");
    assert_string_equal(layout(&s, "l0_probs", b), "[dp,tp,_,_]");
    assert_string_equal(layout(&s, "l1_act", b), "[dp,_,tp]");
    /* Nothing else moves in the step: the logits stay split over dp and
     * --out gathers them to rank 0 once (2 x 16 x 256 floats, half of
     * them on rank 0 already). */
    assert_int_equal(count_comm(&s), 4);
    assert_int_equal(count_coll(&s, COLL_ALL_GATHER, "dp"), 0);
    PlanTotals t;
    plan_totals(s.p, &t);
    assert_int_equal(t.output_gather_bytes, 16384);
    setup_free(&s);
}

/* Under dp the embeddings' gradients (ScatterND adding into zeros) are
 * scattered on each rank and come out partial over dp, so they are
 * all-reduced like every other weight gradient: no all-gather of the
 * activation gradient or of the token ids on the way. */
static void test_partition_propagate_embedding_gradient_partial_over_dp(void **st)
{
    (void)st;
    Setup s;
    memset(&s, 0, sizeof s);
    s.g = load_ok("tests/models/train/tiny_gpt_lm.onnx");
    diag_init(&s.d, "tiny_gpt_lm");
    TrainOptions o;
    train_options_default(&o);
    assert_int_equal(ir_build_training(s.g, &o, &s.d), 0);
    assert_int_equal(mesh_parse("dp=2", &s.mesh, &s.d), 0);
    const char *const shards[] = {"tokens=[dp,_]", "labels=[dp,_]"};
    for (int i = 0; i < 2; i++)
        assert_int_equal(annotate_add_flag(&s.ann, &s.arena, s.g, &s.mesh, shards[i], "--shard", &s.d), 0);
    s.p = partition_propagate(s.g, &s.mesh, &s.ann, &s.d);
    assert_non_null(s.p);
    int scatters = 0;
    for (int i = 0; i < s.g->nnodes; i++) {
        const Node *n = s.g->nodes[i];
        if (n->op != OP_SCATTER_ND)
            continue;
        assert_true(rule_scatter_adds_into_zeros(n));
        assert_int_equal(s.p->tensors[n->outputs[0]->id].sharding.partial, 1u); /* partial over dp */
        scatters++;
    }
    assert_int_equal(scatters, 2); /* the token and the position embeddings */
    /* The only all-gathers left are the loss's (its mean needs the whole batch). */
    for (int i = 0; i < s.p->nreshards; i++)
        for (int j = 0; j < s.p->reshards[i].r.nsteps; j++)
            if (s.p->reshards[i].r.steps[j].kind == COLL_ALL_GATHER)
                assert_true(s.p->reshards[i].tensor->producer == NULL ||
                            !s.p->reshards[i].tensor->producer->grad);
    setup_free(&s);
}

static void test_partition_propagate_vocab_parallel_embedding(void **st)
{
    (void)st;
    Setup s;
    char b[128];
    /* A table split over the vocabulary makes the lookup a partial sum. */
    const char *shards[] = {"tok_emb=[tp,_]", NULL};
    plan_ok(&s, "tests/models/tiny_gpt.onnx", "tp=2", NULL, shards, -1);
    assert_string_equal(layout(&s, "tok", b), "[_,_,_] partial(tp)");
    /* Adding the (unsplit) position embedding is linear only if both terms
     * are partial, so the lookup is reduced first. */
    int found = 0;
    for (int i = 0; i < s.p->nreshards; i++)
        if (strcmp(s.p->reshards[i].tensor->name, "tok") == 0) {
            found = 1;
            assert_int_equal(s.p->reshards[i].r.steps[0].kind, COLL_ALL_REDUCE);
        }
    assert_true(found);
    setup_free(&s);
}

static void test_partition_propagate_onnx_annotations_match_flags(void **st)
{
    (void)st;
    Setup a, f;
    const char *shards[] = {"W1=[_,tp]", NULL};
    plan_ok(&a, "tests/models/mlp_sharded.onnx", "tp=2", NULL, NULL, -1);
    plan_ok(&f, "tests/models/mlp.onnx", "tp=2", NULL, shards, -1);
    assert_int_equal(a.g->ntensors, f.g->ntensors);
    char x[128], y[128];
    for (int i = 0; i < a.g->ntensors; i++)
        assert_string_equal(sharding_str(&a.p->tensors[i].sharding, &a.mesh, x, sizeof x),
                            sharding_str(&f.p->tensors[i].sharding, &f.mesh, y, sizeof y));
    assert_int_equal(a.p->nreshards, f.p->nreshards);
    for (int i = 0; i < a.p->nreshards; i++) {
        assert_string_equal(a.p->reshards[i].tensor->name, f.p->reshards[i].tensor->name);
        assert_int_equal(a.p->reshards[i].r.nsteps, f.p->reshards[i].r.nsteps);
        assert_int_equal(a.p->reshards[i].r.bytes, f.p->reshards[i].r.bytes);
    }
    assert_int_equal(a.p->tensors[graph_tensor_find(a.g, "W1")->id].origin, ORIGIN_MODEL);
    setup_free(&a);
    setup_free(&f);
}

static void test_partition_propagate_convnet_dp(void **st)
{
    (void)st;
    Setup s;
    char b[128];
    const char *shards[] = {"x=[dp,_,_,_]", NULL};
    plan_ok(&s, "tests/models/convnet.onnx", "dp=2", NULL, shards, -1);
    assert_string_equal(layout(&s, "c1_pool", b), "[dp,_,_,_]");
    assert_string_equal(layout(&s, "flat", b), "[dp,_]");
    assert_string_equal(layout(&s, "c0_W", b), "[_,_,_,_]");
    /* Data parallel inference: nothing communicates in the step. */
    assert_int_equal(count_comm(&s), 0);
    assert_string_equal(layout(&s, "y", b), "[dp,_]");
    setup_free(&s);
}

static void test_partition_propagate_deterministic(void **st)
{
    (void)st;
    char *out[2];
    size_t len[2];
    for (int k = 0; k < 2; k++) {
        Setup s;
        plan_ok(&s, "tests/models/tiny_gpt.onnx", "dp=2,tp=2", "tests/partition/tiny_gpt_megatron.txt", NULL, -1);
        FILE *f = open_memstream(&out[k], &len[k]);
        plan_print_json(s.p, NULL, f);
        plan_print_text(s.p, NULL, f);
        fclose(f);
        setup_free(&s);
    }
    assert_int_equal(len[0], len[1]);
    assert_memory_equal(out[0], out[1], len[0]);
    free(out[0]);
    free(out[1]);
}


/* ---- conflicts settled by cost, annotations that hold ------------------- */

static void test_partition_propagate_conflict_settled_by_cost(void **st)
{
    (void)st;
    /* x=[tp,_] and W1=[_,tp] put tp on two factors of one contraction.
     * Gathering the 2 KiB activation and all-reducing the 2 KiB result is
     * cheaper than gathering the 64 KiB weight, whatever the factor order. */
    Setup s;
    char b[128];
    const char *shards[] = {"x=[tp,_]", "W1=[_,tp]", NULL};
    plan_ok(&s, "tests/models/mlp.onnx", "tp=2", NULL, shards, -1);
    assert_string_equal(layout(&s, "h", b), "[_,tp]");
    assert_int_equal(reshard_bytes_of(&s, "W1"), 0);
    assert_int_equal(reshard_bytes_of(&s, "x"), 1024);
    assert_int_equal(count_coll(&s, COLL_ALL_REDUCE, "tp"), 1);
    assert_int_equal(count_comm(&s), 2);
    /* The choice is on record with every candidate's cost. */
    const CostChoice *cc = s.p->nodes[graph_tensor_find(s.g, "h")->producer->id].choice;
    assert_non_null(cc);
    assert_true(cc->ncand >= 3);
    for (int i = 0; i < cc->ncand; i++)
        assert_true(cc->cost_s[cc->pick] <= cc->cost_s[i] || cc->cost_s[i] < 0);
    char *text;
    size_t len;
    FILE *f = open_memstream(&text, &len);
    Diag d;
    diag_init(&d, NULL);
    assert_int_equal(plan_print_explain(s.p, "h", f, &d), 0);
    fclose(f);
    const char *want[] = {"computes it so", "propagation's merge", "from W1's layout", "computed replicated"};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        assert_non_null(strstr(text, want[i]));
    free(text);
    diag_free(&d);
    setup_free(&s);
}

static void test_partition_propagate_intermediate_annotation_holds(void **st)
{
    (void)st;
    /* h=[_,tp] must hold against x=[tp,_]; W2 then follows h, not a stale
     * batch split that would be all-gathered on every run. */
    Setup s;
    char b[128];
    const char *shards[] = {"x=[tp,_]", "h=[_,tp]", NULL};
    plan_ok(&s, "tests/models/mlp.onnx", "tp=2", NULL, shards, -1);
    assert_string_equal(layout(&s, "h", b), "[_,tp]");
    assert_int_equal(s.p->tensors[graph_tensor_find(s.g, "h")->id].origin, ORIGIN_USER);
    assert_string_equal(layout(&s, "W2", b), "[tp,_]");
    assert_int_equal(reshard_bytes_of(&s, "W2"), 0);
    assert_int_equal(reshard_bytes_of(&s, "W1"), 0);
    assert_int_equal(count_comm(&s), 2);
    setup_free(&s);
}

static void test_partition_propagate_pinned_weight_gathers_activation(void **st)
{
    (void)st;
    /* W1 pinned replicated against x split on the contracted dim: slicing
     * W1 would leave h partial (an 8 KiB all-reduce); gathering x moves
     * 1 KiB. */
    Setup s;
    char b[128];
    const char *shards[] = {"x=[_,tp]", "W1=[_,_]", NULL};
    plan_ok(&s, "tests/models/mlp.onnx", "tp=2", NULL, shards, -1);
    assert_string_equal(layout(&s, "W1", b), "[_,_]");
    assert_int_equal(count_coll(&s, COLL_ALL_REDUCE, "tp"), 0);
    assert_int_equal(count_coll(&s, COLL_ALL_GATHER, "tp"), 1);
    assert_int_equal(reshard_bytes_of(&s, "x"), 1024);
    setup_free(&s);
}

/* Bytes per rank the whole plan sends. */
static int64_t plan_bytes(Setup *s)
{
    int64_t bytes = 0;
    for (int i = 0; i < s->p->nreshards; i++)
        bytes += s->p->reshards[i].r.bytes;
    return bytes;
}

static void test_partition_propagate_pinned_weight_sliced_for_reduce(void **st)
{
    (void)st;
    /* W2 pinned replicated after a column-split W1: gathering a moves
     * 4 KiB per rank, slicing W2 by rows (free: every rank holds it) and
     * all-reducing the 2 KiB o moves 2 KiB. W2 keeps its annotated layout
     * where it is defined; only fc2 reads a slice of it. */
    Setup s;
    char b[128];
    const char *shards[] = {"W1=[_,tp]", "W2=[_,_]", NULL};
    plan_ok(&s, "tests/models/mlp.onnx", "tp=2", NULL, shards, -1);
    assert_string_equal(layout(&s, "W2", b), "[_,_]");
    assert_int_equal(s.p->tensors[graph_tensor_find(s.g, "W2")->id].origin, ORIGIN_USER);
    assert_string_equal(layout(&s, "a", b), "[_,tp]");
    assert_string_equal(layout(&s, "o", b), "[_,_] partial(tp)");
    assert_int_equal(reshard_bytes_of(&s, "a"), 0);
    assert_int_equal(reshard_bytes_of(&s, "W2"), 0);
    assert_int_equal(count_coll(&s, COLL_ALL_GATHER, "tp"), 0);
    assert_int_equal(count_coll(&s, COLL_ALL_REDUCE, "tp"), 1);
    assert_int_equal(reshard_bytes_of(&s, "o"), 2048);
    assert_int_equal(plan_bytes(&s), 2048);
    setup_free(&s);
}

static void test_partition_propagate_conv_gathers_input_not_partial_result(void **st)
{
    (void)st;
    /* c0's output channels split over tp reach c1 as its contracted input
     * channels. Keeping them split leaves c1_conv partial (an 8 KiB
     * all-reduce per rank); gathering the 4 KiB c0_pool moves 2 KiB. A
     * merge that needs no operand moved is still costed against the
     * alternatives when its result is partial. */
    Setup s;
    char b[128];
    const char *shards[] = {"c0_W=[tp,_,_,_]", NULL};
    plan_ok(&s, "tests/models/convnet.onnx", "tp=2", NULL, shards, -1);
    assert_string_equal(layout(&s, "c0_pool", b), "[_,tp,_,_]");
    assert_string_equal(layout(&s, "c1_W", b), "[_,_,_,_]");
    assert_string_equal(layout(&s, "c1_conv", b), "[_,_,_,_]");
    assert_int_equal(count_coll(&s, COLL_ALL_REDUCE, "tp"), 0);
    assert_int_equal(count_coll(&s, COLL_ALL_GATHER, "tp"), 1);
    assert_int_equal(reshard_bytes_of(&s, "c0_pool"), 2048);
    assert_int_equal(plan_bytes(&s), 2048);
    setup_free(&s);
}

static void test_partition_propagate_tiny_gpt_pinned_row_weights(void **st)
{
    (void)st;
    /* Wo and W2 pinned replicated after column-split Q/K/V and W1. Per
     * block, o_proj gathers its 8 KiB input (4 KiB per rank) rather than
     * all-reduce its 8 KiB result (8 KiB), and fc2 slices W2 and
     * all-reduces its 8 KiB result rather than gather a 32 KiB input
     * (16 KiB): 24 KiB in all, as XLA's partitioner, not 40 KiB. */
    Setup s;
    char b[128];
    plan_ok(&s, "tests/models/tiny_gpt.onnx", "tp=2", "tests/partition/tiny_gpt_tp_pinned.txt", NULL, -1);
    for (int l = 0; l < 2; l++) {
        char name[32];
        snprintf(name, sizeof name, "l%d_Wo", l);
        assert_string_equal(layout(&s, name, b), "[_,_]");
        snprintf(name, sizeof name, "l%d_W2", l);
        assert_string_equal(layout(&s, name, b), "[_,_]");
        snprintf(name, sizeof name, "l%d_ctx_m", l);
        assert_int_equal(reshard_bytes_of(&s, name), 4096);
        snprintf(name, sizeof name, "l%d_act", l);
        assert_string_equal(layout(&s, name, b), "[_,_,tp]");
        assert_int_equal(reshard_bytes_of(&s, name), 0);
        snprintf(name, sizeof name, "l%d_fc2", l);
        assert_string_equal(layout(&s, name, b), "[_,_,_] partial(tp)");
        assert_int_equal(reshard_bytes_of(&s, name), 8192);
    }
    assert_int_equal(count_coll(&s, COLL_ALL_GATHER, "tp"), 2);
    assert_int_equal(count_coll(&s, COLL_ALL_REDUCE, "tp"), 2);
    assert_int_equal(plan_bytes(&s), 24576);
    setup_free(&s);
}

/* ---- errors ------------------------------------------------------------- */

static char *flag_error(const char *model, const char *mesh, const char *shard)
{
    Graph *g = load_ok(model);
    Mesh m;
    Diag d;
    Arena a = {0};
    AnnotationList l = {0};
    diag_init(&d, NULL);
    int rc = mesh_parse(mesh, &m, &d);
    if (rc == 0 && shard)
        rc = annotate_add_flag(&l, &a, g, &m, shard, "--shard", &d);
    Plan *p = NULL;
    if (rc == 0) {
        p = partition_propagate(g, &m, &l, &d);
        rc = p ? 0 : -1;
    }
    assert_int_equal(rc, -1);
    assert_int_equal(d.n, 1);
    char *msg = strdup(d.msgs[0]);
    plan_free(p);
    diag_free(&d);
    free(l.items);
    arena_free(&a);
    graph_free(g);
    return msg;
}

static void expect_flag_error(const char *mesh, const char *shard, const char *a, const char *b)
{
    char *msg = flag_error("tests/models/mlp.onnx", mesh, shard);
    assert_mentions(msg, a, b, NULL);
    free(msg);
}

static void test_annotate_unknown_tensor(void **st) { (void)st; expect_flag_error("tp=2", "W9=[_,tp]", "--shard W9=[_,tp]", "no tensor named \"W9\""); }
static void test_annotate_unknown_axis(void **st) { (void)st; expect_flag_error("tp=2", "W1=[_,mp]", "W1=[_,mp]", "unknown mesh axis \"mp\""); }
static void test_annotate_axis_twice(void **st) { (void)st; expect_flag_error("dp=2,tp=2", "W1=[tp,tp]", "W1=[tp,tp]", "axis \"tp\" is used twice"); }
static void test_mesh_axis_size_zero(void **st) { (void)st; expect_flag_error("dp=2,tp=0", NULL, "--mesh dp=2,tp=0", "axis \"tp\" has size 0"); }
static void test_annotate_wrong_rank(void **st) { (void)st; expect_flag_error("tp=2", "W1=[_,tp,_]", "W1=[_,tp,_]", "spec has 3 dims but tensor \"W1\" has rank 2"); }

/* NODE:INPUT annotates the tensor that the nodes NODE matches read there:
 * "fc?:1" is fc1's W1 and fc2's W2; an exact node name is itself. */
static void test_annotate_node_pattern(void **st)
{
    (void)st;
    Setup s;
    char buf[128];
    const char *const shards[] = {"fc?:1=[_,tp]", "bias2:1=[tp]", NULL};
    plan_ok(&s, "tests/models/mlp.onnx", "tp=2", NULL, shards, -1);
    assert_string_equal(layout(&s, "W1", buf), "[_,tp]");
    assert_string_equal(layout(&s, "W2", buf), "[_,tp]");
    assert_string_equal(layout(&s, "b2", buf), "[tp]");
    assert_int_equal(s.ann.n, 3);
    assert_string_equal(s.ann.items[0].from, "--shard fc?:1");
    setup_free(&s);
}

static void test_annotate_pattern_no_match(void **st)
{
    (void)st;
    expect_flag_error("tp=2", "*/q_proj/MatMul:1=[_,tp]", "--shard */q_proj/MatMul:1=[_,tp]",
                      "pattern \"*/q_proj/MatMul\" matches no node");
}
static void test_annotate_pattern_bad_slot(void **st) { (void)st; expect_flag_error("tp=2", "fc*:2=[_,tp]", "fc*:2=[_,tp]", "node \"fc1\" (MatMul) has no input 2 (it has 2 inputs)"); }
static void test_annotate_pattern_rank(void **st) { (void)st; expect_flag_error("tp=2", "*2:1=[_,tp]", "*2:1=[_,tp]", "spec has 2 dims but tensor \"b2\" (input 1 of node \"bias2\") has rank 1"); }
static void test_annotate_pattern_no_slot(void **st) { (void)st; expect_flag_error("tp=2", "fc*=[_,tp]", "no tensor named \"fc*\"", "needs the input it annotates"); }
static void test_annotate_node_unknown(void **st) { (void)st; expect_flag_error("tp=2", "fc9:1=[_,tp]", "no tensor named \"fc9:1\"", "no node named \"fc9\""); }

/* Two sources for one tensor: the same layout is one annotation, a
 * different one an error naming both. */
static void test_annotate_pattern_conflict(void **st)
{
    (void)st;
    Graph *g = load_ok("tests/models/mlp.onnx");
    Mesh m;
    Diag d;
    Arena a = {0};
    AnnotationList l = {0};
    diag_init(&d, NULL);
    assert_int_equal(mesh_parse("tp=2", &m, &d), 0);
    assert_int_equal(annotate_add_flag(&l, &a, g, &m, "fc?:1=[_,tp]", "--shard", &d), 0);
    assert_int_equal(annotate_add_flag(&l, &a, g, &m, "W2=[_,tp]", "f.txt:3:", &d), 0);
    assert_int_equal(l.n, 2);
    assert_int_equal(annotate_add_flag(&l, &a, g, &m, "W2=[tp,_]", "f.txt:4:", &d), -1);
    assert_int_equal(d.n, 1);
    assert_mentions(d.msgs[0], "f.txt:4: W2=[tp,_]: tensor \"W2\" is already annotated as [_,tp] by --shard fc?:1", NULL);
    diag_free(&d);
    free(l.items);
    arena_free(&a);
    graph_free(g);
}

static void test_annotate_uneven(void **st)
{
    (void)st;
    /* 256 hidden units over tp=3: blocks of 86 (the last holds 84 and 2
     * of padding); the split propagates to W2's rows and a, and fc2's
     * partial sum is all-reduced, as for an even split. */
    Setup s;
    char buf[128];
    const char *const shards[] = {"W1=[_,tp]", NULL};
    plan_ok(&s, "tests/models/mlp.onnx", "tp=3", NULL, shards, -1);
    assert_string_equal(layout(&s, "W2", buf), "[tp,_]");
    assert_string_equal(layout(&s, "a", buf), "[_,tp]");
    assert_int_equal(count_coll(&s, COLL_ALL_REDUCE, "tp"), 1);
    const Tensor *w2 = graph_tensor_find(s.g, "W2");
    int64_t local[IR_MAX_RANK];
    sharding_local_dims(&s.p->tensors[w2->id].sharding, &s.mesh, w2, local);
    assert_int_equal(local[0], 86);
    setup_free(&s);
    /* An uneven annotation on an output holds: 64 columns in blocks of 22. */
    const char *const out[] = {"y=[_,tp]", NULL};
    plan_ok(&s, "tests/models/mlp.onnx", "tp=3", NULL, out, -1);
    assert_string_equal(layout(&s, "y", buf), "[_,tp]");
    const Tensor *y = graph_tensor_find(s.g, "y");
    sharding_local_dims(&s.p->tensors[y->id].sharding, &s.mesh, y, local);
    assert_int_equal(local[1], 22);
    assert_true(sharding_is_uneven(&s.p->tensors[y->id].sharding, &s.mesh, y));
    setup_free(&s);
}

static void test_split_units(void **st)
{
    (void)st;
    /* attention.onnx reads q, k, v [2,8,32] as 4 heads x 8: their hidden
     * dim, the weights' columns and biases that feed them, and the merged
     * context are cut in units of a head (units.c); the per-head dims and
     * x's hidden dim (a contraction of another factor) are not. */
    Setup s;
    char buf[128];
    const char *const shards[] = {"Wq=[_,tp]", "Wk=[_,tp]", "Wv=[_,tp]", "Wo=[tp,_]", NULL};
    plan_ok(&s, "tests/models/attention.onnx", "tp=8", NULL, shards, -1);
    static const struct { const char *t; int dim; int64_t unit; } want[] = {
        {"q", 2, 8}, {"Wq", 1, 8}, {"bq", 0, 8}, {"ctx_m", 2, 8}, {"Wo", 0, 8}, {"q_h", 2, 0}, {"x", 2, 0},
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        const Tensor *t = graph_tensor_find(s.g, want[i].t);
        assert_non_null(t);
        if (t->split_unit[want[i].dim] != want[i].unit)
            print_error("%s dim %d: unit %lld\n", want[i].t, want[i].dim, (long long)t->split_unit[want[i].dim]);
        assert_int_equal(t->split_unit[want[i].dim], want[i].unit);
    }
    /* 4 heads over tp=8: one head on each of ranks 0-3, ranks 4-7 padding;
     * the attention stays split (no gather of q, k or v) and the output
     * projection's partial sum is the one collective. */
    assert_string_equal(layout(&s, "q_h", buf), "[_,_,tp,_]");
    assert_string_equal(layout(&s, "probs", buf), "[_,tp,_,_]");
    const Tensor *wq = graph_tensor_find(s.g, "Wq");
    int64_t local[IR_MAX_RANK];
    sharding_local_dims(&s.p->tensors[wq->id].sharding, &s.mesh, wq, local);
    assert_int_equal(local[1], 8);
    assert_int_equal(count_coll(&s, COLL_ALL_GATHER, "tp"), 0);
    assert_int_equal(count_coll(&s, COLL_ALL_REDUCE, "tp"), 1);
    setup_free(&s);
}

static void test_annotation_that_cannot_hold(void **st)
{
    (void)st;
    /* Softmax needs its axis whole: the annotation is refused, naming it
     * and the node, never stored as something else. */
    char *msg = flag_error("tests/models/tiny_gpt.onnx", "tp=2", "l0_probs=[_,_,_,tp]");
    assert_mentions(msg, "annotation l0_probs=[_,_,_,tp] cannot hold", "l0_softmax", "Softmax", "must be whole", NULL);
    free(msg);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_partition_propagate_mlp_megatron),
        cmocka_unit_test(test_partition_propagate_attention_heads),
        cmocka_unit_test(test_partition_propagate_tiny_gpt_dp_tp),
        cmocka_unit_test(test_partition_propagate_vocab_parallel_embedding),
        cmocka_unit_test(test_partition_propagate_onnx_annotations_match_flags),
        cmocka_unit_test(test_partition_propagate_convnet_dp),
        cmocka_unit_test(test_partition_propagate_deterministic),
        cmocka_unit_test(test_partition_propagate_conflict_settled_by_cost),
        cmocka_unit_test(test_partition_propagate_intermediate_annotation_holds),
        cmocka_unit_test(test_partition_propagate_pinned_weight_gathers_activation),
        cmocka_unit_test(test_partition_propagate_pinned_weight_sliced_for_reduce),
        cmocka_unit_test(test_partition_propagate_conv_gathers_input_not_partial_result),
        cmocka_unit_test(test_partition_propagate_tiny_gpt_pinned_row_weights),
        cmocka_unit_test(test_partition_propagate_embedding_gradient_partial_over_dp),
        cmocka_unit_test(test_annotation_that_cannot_hold),
        cmocka_unit_test(test_annotate_unknown_tensor),
        cmocka_unit_test(test_annotate_unknown_axis),
        cmocka_unit_test(test_annotate_axis_twice),
        cmocka_unit_test(test_mesh_axis_size_zero),
        cmocka_unit_test(test_annotate_wrong_rank),
        cmocka_unit_test(test_annotate_node_pattern),
        cmocka_unit_test(test_annotate_pattern_no_match),
        cmocka_unit_test(test_annotate_pattern_bad_slot),
        cmocka_unit_test(test_annotate_pattern_rank),
        cmocka_unit_test(test_annotate_pattern_no_slot),
        cmocka_unit_test(test_annotate_node_unknown),
        cmocka_unit_test(test_annotate_pattern_conflict),
        cmocka_unit_test(test_annotate_uneven),
        cmocka_unit_test(test_split_units),
    };
    return cmocka_run_group_tests_name("partition/propagate", tests, NULL, NULL);
}
