/* test_pipeline.c: pipeline stages (partition/pipeline.c).
 *
 * The split search on hand-computed optima: 32 identical layers over 4
 * stages are 8 each; with an embedding as heavy as 4 layers on the first,
 * the first stage takes it and 5 layers, the others 9 (36 = 4 x 9, and no
 * split does better than a quarter of the work). Cuts are priced: a
 * stage ends where crossing is cheap, and at the cheapest cuts (layer
 * boundaries) when that costs at most 10% more. Memory is a hard limit. And a
 * planned model: stages cover every node once, in order, values crossing
 * stages are recorded with their readers, the microbatch axis is refused
 * where a node needs the whole batch. Training: the microbatches a
 * schedule keeps in flight per stage, the split under a memory limit that
 * counts them, and a trained model's backward nodes on their forward
 * node's stage with the 1F1B order per stage.
 */
#include "tests/partition/plan_setup.h"

#include <math.h>

static void test_pipeline_split_uniform_layers(void **st)
{
    (void)st;
    double cost[32], cut[33] = {0};
    for (int i = 0; i < 32; i++)
        cost[i] = 1;
    int first[4];
    assert_true(fabs(pipeline_split(32, cost, cut, NULL, NULL, 0, 4, first) - 8) < 1e-12);
    assert_int_equal(first[0], 0);
    assert_int_equal(first[1], 8);
    assert_int_equal(first[2], 16);
    assert_int_equal(first[3], 24);
}

static void test_pipeline_split_embedding_shifts_boundaries(void **st)
{
    (void)st;
    double cost[33], cut[34] = {0};
    cost[0] = 4; /* the embedding */
    for (int i = 1; i <= 32; i++)
        cost[i] = 1;
    int first[4];
    assert_true(fabs(pipeline_split(33, cost, cut, NULL, NULL, 0, 4, first) - 9) < 1e-12);
    assert_int_equal(first[1], 6);  /* embedding + layers 0..4 */
    assert_int_equal(first[2], 15); /* layers 5..13 */
    assert_int_equal(first[3], 24); /* layers 14..22, then 23..31 */
}

static void test_pipeline_split_prices_cuts(void **st)
{
    (void)st;
    /* 8 items of 1; crossing costs 10 everywhere but before item 3 (2.5)
     * and item 5 (0): the best two-stage split pays nothing at 5 (5 vs 3),
     * against 5.5 vs 5 at item 3, or 14 vs 4 at the balanced cut. */
    double cost[8] = {1, 1, 1, 1, 1, 1, 1, 1}, cut[9];
    for (int i = 0; i < 9; i++)
        cut[i] = 10;
    cut[3] = 2.5;
    cut[5] = 0;
    int first[2];
    assert_true(fabs(pipeline_split(8, cost, cut, NULL, NULL, 0, 2, first) - 5) < 1e-12);
    assert_int_equal(first[1], 5);
}

static void test_pipeline_split_prefers_cheapest_cuts_within_slack(void **st)
{
    (void)st;
    /* 10 items of 1; the cut before item 4 is free (a layer boundary),
     * the others cost c. The best split over every cut is 5 + c (at 5);
     * the free cut gives 6, taken when within 10% of it. */
    double cost[10], cut[11];
    for (int i = 0; i < 10; i++)
        cost[i] = 1;
    int first[2];
    for (int k = 0; k < 2; k++) {
        double c = k ? 0.6 : 0.3;
        for (int i = 0; i < 11; i++)
            cut[i] = c;
        cut[4] = 0;
        double got = pipeline_split(10, cost, cut, NULL, NULL, 0, 2, first);
        if (k) { /* 6 <= 1.1 x 5.6 */
            assert_true(fabs(got - 6) < 1e-12);
            assert_int_equal(first[1], 4);
        } else { /* 6 > 1.1 x 5.3 */
            assert_true(fabs(got - 5.3) < 1e-12);
            assert_int_equal(first[1], 5);
        }
    }
}

static void test_pipeline_split_memory_limit(void **st)
{
    (void)st;
    double cost[4] = {1, 1, 1, 1}, cut[5] = {0};
    int64_t mem[4] = {10, 10, 10, 10}, act[4] = {0, 50, 0, 0};
    int first[2];
    assert_true(pipeline_split(4, cost, cut, mem, NULL, 15, 2, first) < 0); /* two weights per stage: 20 > 15 */
    assert_true(fabs(pipeline_split(4, cost, cut, mem, NULL, 20, 2, first) - 2) < 1e-12);
    assert_int_equal(first[1], 2);
    /* A stage holds its weights plus its peak live values. */
    assert_true(pipeline_split(4, cost, cut, mem, act, 55, 2, first) < 0);
    assert_true(pipeline_split(4, cost, cut, mem, act, 70, 2, first) > 0);
    assert_int_equal(first[1], 2);
    /* Fewer items than stages: no split. */
    assert_true(pipeline_split(1, cost, cut, NULL, NULL, 0, 2, first) < 0);
}

/* tiny_gpt over pp=2 x tp=2 with two microbatches. */
static Plan *pipe_plan(Setup *s, const char *mesh, int microbatches, const char *boundaries, const char *shard,
                       Mesh *world)
{
    memset(s, 0, sizeof *s);
    s->g = load_ok("tests/models/tiny_gpt.onnx");
    diag_init(&s->d, NULL);
    assert_int_equal(mesh_parse(mesh, world, &s->d), 0);
    world->device = device_preset_find("cpu");
    int pp = -1;
    assert_int_equal(pipeline_mesh(world, "pp", microbatches, &s->mesh, &pp, &s->d), 0);
    if (shard)
        assert_int_equal(annotate_add_flag(&s->ann, &s->arena, s->g, &s->mesh, shard, "--shard", &s->d), 0);
    assert_int_equal(pipeline_annotate(&s->ann, &s->arena, s->g, &s->mesh, &s->d), 0);
    s->p = partition_propagate(s->g, &s->mesh, &s->ann, &s->d);
    assert_non_null(s->p);
    PipelineOptions po = {.microbatches = microbatches, .boundaries = boundaries};
    if (pipeline_build(s->p, world, pp, &po, &s->d))
        return NULL;
    return s->p;
}

static void test_pipeline_build_stages(void **st)
{
    (void)st;
    Setup s;
    Mesh world;
    assert_non_null(pipe_plan(&s, "pp=2,tp=2", 2, NULL, "l0_W1=[_,tp]", &world));
    const Pipeline *pp = s.p->pipe;
    assert_int_equal(pp->nstages, 2);
    assert_int_equal(pp->nsub, 2);
    assert_int_equal(pp->microbatches, 2);
    assert_true(pp->automatic);
    assert_int_equal(pp->mb_axis, 0);
    assert_string_equal(s.mesh.axes[0].name, "mb");
    assert_true(s.mesh.axes[0].loop);
    /* Consecutive, covering every node once. */
    assert_int_equal(pp->stages[0].first, 0);
    assert_int_equal(pp->stages[0].last + 1, pp->stages[1].first);
    assert_int_equal(pp->stages[1].last, s.g->nnodes - 1);
    /* The batched input is split over the microbatches. */
    char b[128];
    assert_string_equal(layout(&s, "tokens", b), "[mb,_]");
    /* Every value read across the boundary is sent from its stage. */
    int crossing = 0;
    for (int i = 0; i < s.g->ntensors; i++)
        if (pp->readers[i]) {
            crossing++;
            assert_int_equal(pp->readers[i], 1u << 1);
            assert_int_equal(pp->tensor_stage[i], 0);
        }
    assert_true(crossing >= 1);
    /* Ranks: pp is the first axis, so stage 1 is ranks 2 and 3. */
    assert_int_equal(pipeline_stage_of_rank(pp, 3), 1);
    assert_int_equal(pipeline_sub_rank(pp, 3), 1);
    assert_int_equal(pipeline_world_rank(pp, 1, 0), 2);
    assert_true(pp->stages[0].weight_bytes > 0 && pp->stages[1].weight_bytes > 0);
    assert_true(pipeline_batch_seconds(pp) > 0);
    setup_free(&s);
}

static void test_pipeline_hand_boundaries(void **st)
{
    (void)st;
    Setup s;
    Mesh world;
    assert_non_null(pipe_plan(&s, "tp=2,pp=2", 1, "l0_out", NULL, &world));
    const Pipeline *pp = s.p->pipe;
    assert_false(pp->automatic);
    assert_int_equal(pp->mb_axis, -1);
    const Tensor *t = graph_tensor_find(s.g, "l0_out");
    assert_int_equal(pp->stages[0].last, t->producer->id);
    /* The pipeline axis last: stage 1 is ranks 1 and 3. */
    assert_int_equal(pipeline_world_rank(pp, 1, 0), 1);
    assert_int_equal(pipeline_world_rank(pp, 1, 1), 3);
    assert_int_equal(pipeline_stage_of_rank(pp, 2), 0);
    setup_free(&s);
    /* Bad boundaries name what is wrong. */
    assert_null(pipe_plan(&s, "pp=2", 1, "tokens", NULL, &world));
    assert_non_null(strstr(diag_first(&s.d), "graph input or weight"));
    setup_free(&s);
    assert_null(pipe_plan(&s, "pp=3", 1, "l0_out", NULL, &world));
    assert_non_null(strstr(diag_first(&s.d), "1 tensor for 3 stages"));
    setup_free(&s);
    assert_null(pipe_plan(&s, "pp=3", 1, "l1_out,l0_out", NULL, &world));
    assert_non_null(strstr(diag_first(&s.d), "graph order"));
    setup_free(&s);
}

static void test_pipeline_microbatches_must_divide_the_batch(void **st)
{
    (void)st;
    Setup s;
    memset(&s, 0, sizeof s);
    s.g = load_ok("tests/models/tiny_gpt.onnx"); /* batch 2 */
    diag_init(&s.d, NULL);
    Mesh world;
    int pp;
    assert_int_equal(mesh_parse("pp=2,dp=2", &world, &s.d), 0);
    assert_int_equal(pipeline_mesh(&world, "pp", 2, &s.mesh, &pp, &s.d), 0);
    assert_int_equal(annotate_add_flag(&s.ann, &s.arena, s.g, &s.mesh, "tokens=[dp,_]", "--shard", &s.d), 0);
    assert_int_equal(pipeline_annotate(&s.ann, &s.arena, s.g, &s.mesh, &s.d), -1);
    assert_non_null(strstr(diag_first(&s.d), "does not split into 2 microbatches"));
    setup_free(&s);
    memset(&s, 0, sizeof s);
    s.g = load_ok("tests/models/tiny_gpt.onnx");
    diag_init(&s.d, NULL);
    assert_int_equal(pipeline_mesh(&world, "pp", 3, &s.mesh, &pp, &s.d), 0);
    assert_int_equal(pipeline_annotate(&s.ann, &s.arena, s.g, &s.mesh, &s.d), -1);
    assert_non_null(strstr(diag_first(&s.d), "not a multiple"));
    setup_free(&s);
    /* No such pipeline axis. */
    memset(&s, 0, sizeof s);
    diag_init(&s.d, NULL);
    assert_int_equal(pipeline_mesh(&world, "stages", 1, &s.mesh, &pp, &s.d), -1);
    assert_non_null(strstr(diag_first(&s.d), "--pipeline-axis stages"));
    diag_free(&s.d);
}


static void test_pipeline_inflight_per_schedule(void **st)
{
    (void)st;
    /* 1F1B: stage s holds p - s microbatches (at most M); GPipe holds all. */
    int want[4] = {4, 3, 2, 1};
    for (int s = 0; s < 4; s++) {
        assert_int_equal(pipeline_inflight(PIPE_1F1B, 4, 1, 8, s), want[s]);
        assert_int_equal(pipeline_inflight(PIPE_GPIPE, 4, 1, 8, s), 8);
    }
    assert_int_equal(pipeline_inflight(PIPE_1F1B, 4, 1, 2, 0), 2);
    assert_int_equal(pipeline_inflight(PIPE_1F1B, 4, 1, 2, 3), 1);
    /* Interleaved, p = 2, V = 2, M = 4: stage 0 starts microbatch 3's
     * chunk 0 before microbatch 0 has left chunk 0's backward. */
    assert_int_equal(pipeline_inflight(PIPE_INTERLEAVED, 2, 2, 4, 0), 4);
    assert_int_equal(pipeline_inflight(PIPE_INTERLEAVED, 2, 2, 4, 1), 3);
}

static void test_pipeline_split_counts_stash_in_flight(void **st)
{
    (void)st;
    /* Two stages under 1F1B: stage 0 holds 2 microbatches' stash, stage 1
     * one. Items 0 and 1 keep 100 bytes each for backward. */
    double cost[4] = {1, 1, 1, 1}, cut[5] = {0};
    int64_t stash[4] = {100, 100, 0, 0};
    int inflight[2] = {2, 1}, first[2];
    assert_true(pipeline_split_train(4, cost, cut, NULL, NULL, stash, inflight, 0, 2, first) > 0);
    assert_int_equal(first[1], 2); /* no limit: the even split */
    /* 250 bytes: stage 0 cannot keep items 0 and 1 for two microbatches
     * (400), so it ends after item 0 (200), stage 1 keeping item 1 once. */
    assert_true(fabs(pipeline_split_train(4, cost, cut, NULL, NULL, stash, inflight, 250, 2, first) - 3) < 1e-12);
    assert_int_equal(first[1], 1);
    assert_true(pipeline_split_train(4, cost, cut, NULL, NULL, stash, inflight, 150, 2, first) < 0);
}

/* tiny_gpt_lm trained with accum microbatches, planned on pp=2 and cut
 * into stages under a schedule (boundaries NULL: the search). */
static const Pipeline *train_pipe(Setup *s, int accum, PipeSchedule sched, int chunks, const char *boundaries)
{
    memset(s, 0, sizeof *s);
    s->g = load_ok("tests/models/train/tiny_gpt_lm.onnx");
    diag_init(&s->d, NULL);
    TrainOptions to;
    train_options_default(&to);
    to.accum = accum;
    assert_int_equal(ir_build_training(s->g, &to, &s->d), 0);
    Mesh world;
    int pp = -1;
    assert_int_equal(mesh_parse("pp=2", &world, &s->d), 0);
    world.device = device_preset_find("cpu");
    assert_int_equal(pipeline_mesh(&world, "pp", 1, &s->mesh, &pp, &s->d), 0);
    s->p = partition_propagate(s->g, &s->mesh, &s->ann, &s->d);
    assert_non_null(s->p);
    PipelineOptions po = {.microbatches = accum, .boundaries = boundaries, .train = 1, .schedule = sched,
                          .chunks = chunks};
    assert_int_equal(pipeline_build(s->p, &world, pp, &po, &s->d), 0);
    return s->p->pipe;
}

static void test_pipeline_training_stages_and_1f1b(void **st)
{
    (void)st;
    Setup s;
    const Pipeline *pp_ = train_pipe(&s, 3, PIPE_1F1B, 1, "l0_out");
    /* Every gradient node runs on its forward node's stage; stage 1 has
     * the loss, so backward starts there and crosses back. */
    int grads = 0;
    for (int i = 0; i < s.g->nnodes; i++) {
        const Node *n = s.g->nodes[i];
        if (n->grad && n->fwd) {
            assert_int_equal(pp_->stage_of[i], pp_->stage_of[n->fwd->id]);
            grads++;
        }
    }
    assert_true(grads > 50);
    assert_int_equal(pp_->stages[0].inflight, 2);
    assert_int_equal(pp_->stages[1].inflight, 1);
    assert_true(pp_->stages[0].stash_bytes > 0 && pp_->stages[1].backward_s > pp_->stages[1].compute_s);
    /* 1F1B on stage 0: one warm-up forward, then F and B in turn. */
    const char *want0 = "F0 F1 B0 F2 B1 B2 ", *want1 = "F0 B0 F1 B1 F2 B2 ";
    char got[2][64] = {{0}};
    for (int k = 0; k < 2; k++)
        for (int i = 0; i < pp_->nops[k]; i++)
            snprintf(got[k] + strlen(got[k]), sizeof got[k] - strlen(got[k]), "%c%d ",
                     pp_->ops[k][i].backward ? 'B' : 'F', pp_->ops[k][i].mb);
    assert_string_equal(got[0], want0);
    assert_string_equal(got[1], want1);
    /* The cost model's run: stage 1's B0 waits for its F0, stage 0's B0 for stage 1's. */
    assert_true(pp_->ops[0][2].start_s >= pp_->ops[1][1].end_s);
    assert_true(pp_->step_s >= pp_->ops[0][5].end_s);
    setup_free(&s);
}

static void test_pipeline_interleaved_order(void **st)
{
    (void)st;
    Setup s;
    const Pipeline *q = train_pipe(&s, 4, PIPE_INTERLEAVED, 2, NULL);
    assert_int_equal(q->nvstages, 4);
    /* Megatron-LM's order: p microbatches through chunk 0, then chunk 1,
     * a warm-up of 2 (p - s - 1) + (V - 1) p forwards, then one forward
     * and one backward (chunks in reverse) in turn. */
    const char *want0 = "F0.0 F1.0 F0.1 F1.1 F2.0 B0.1 F3.0 B1.1 F2.1 B0.0 F3.1 B1.0 B2.1 B3.1 B2.0 B3.0 ";
    const char *want1 = "F0.0 F1.0 F0.1 B0.1 F1.1 B1.1 F2.0 B0.0 F3.0 B1.0 F2.1 B2.1 F3.1 B3.1 B2.0 B3.0 ";
    char got[2][128] = {{0}};
    for (int k = 0; k < 2; k++)
        for (int i = 0; i < q->nops[k]; i++)
            snprintf(got[k] + strlen(got[k]), sizeof got[k] - strlen(got[k]), "%c%d.%d ",
                     q->ops[k][i].backward ? 'B' : 'F', q->ops[k][i].mb, q->ops[k][i].chunk);
    assert_string_equal(got[0], want0);
    assert_string_equal(got[1], want1);
    /* Every node on a virtual stage; each gradient node on its forward node's. */
    for (int i = 0; i < s.g->nnodes; i++) {
        assert_true(q->stage_of[i] >= 0 && q->stage_of[i] < 4);
        if (s.g->nodes[i]->grad && s.g->nodes[i]->fwd && !s.g->nodes[i]->recomputed)
            assert_int_equal(q->stage_of[i], q->stage_of[s.g->nodes[i]->fwd->id]);
    }
    setup_free(&s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pipeline_split_uniform_layers),
        cmocka_unit_test(test_pipeline_split_embedding_shifts_boundaries),
        cmocka_unit_test(test_pipeline_split_prices_cuts),
        cmocka_unit_test(test_pipeline_split_prefers_cheapest_cuts_within_slack),
        cmocka_unit_test(test_pipeline_split_memory_limit),
        cmocka_unit_test(test_pipeline_build_stages),
        cmocka_unit_test(test_pipeline_hand_boundaries),
        cmocka_unit_test(test_pipeline_microbatches_must_divide_the_batch),
        cmocka_unit_test(test_pipeline_inflight_per_schedule),
        cmocka_unit_test(test_pipeline_split_counts_stash_in_flight),
        cmocka_unit_test(test_pipeline_training_stages_and_1f1b),
        cmocka_unit_test(test_pipeline_interleaved_order),
    };
    return cmocka_run_group_tests_name("pipeline", tests, NULL, NULL);
}
