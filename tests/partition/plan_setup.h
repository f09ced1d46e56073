/* plan_setup.h: a planned model for the partition unit tests.
 *
 * plan_run() loads a model, applies its own ONNX sharding specs, the
 * --shard flags and an optional --shardings file, and plans it: by
 * propagation (mem_limit < 0) or by --auto under mem_limit bytes per rank
 * (0: no limit). The plan may be NULL; s->d says why. plan_ok() requires
 * a plan. layout() and the collective counts read it back.
 */
#ifndef ONNX2SPMD_PLAN_SETUP_H
#define ONNX2SPMD_PLAN_SETUP_H

#include "tests/test_util.h"

#include "partition/partition.h"

typedef struct Setup {
    Graph *g;
    Plan *p;
    Mesh mesh;
    AnnotationList ann;
    Arena arena;
    Diag d;
} Setup;

static inline void setup_free(Setup *s)
{
    plan_free(s->p);
    graph_free(s->g);
    free(s->ann.items);
    arena_free(&s->arena);
    diag_free(&s->d);
}

static inline void plan_run(Setup *s, const char *model, const char *mesh, const char *file,
                            const char *const *shards, int64_t mem_limit)
{
    memset(s, 0, sizeof(*s));
    s->g = load_ok(model);
    diag_init(&s->d, model);
    assert_int_equal(mesh_parse(mesh, &s->mesh, &s->d), 0);
    assert_int_equal(annotate_add_model(&s->ann, &s->arena, s->g, &s->mesh, &s->d), 0);
    for (int i = 0; shards && shards[i]; i++)
        assert_int_equal(annotate_add_flag(&s->ann, &s->arena, s->g, &s->mesh, shards[i], "--shard", &s->d), 0);
    if (file)
        assert_int_equal(annotate_add_file(&s->ann, &s->arena, s->g, &s->mesh, file, &s->d), 0);
    if (mem_limit < 0) {
        s->p = partition_propagate(s->g, &s->mesh, &s->ann, &s->d);
    } else {
        AutoOptions o = {.mem_limit = mem_limit, .time_limit_s = 30};
        s->p = partition_auto(s->g, &s->mesh, &s->ann, &o, &s->d);
    }
}

static inline void plan_ok(Setup *s, const char *model, const char *mesh, const char *file,
                           const char *const *shards, int64_t mem_limit)
{
    plan_run(s, model, mesh, file, shards, mem_limit);
    if (!s->p)
        print_error("%s\n", diag_first(&s->d));
    assert_non_null(s->p);
}

static inline const char *layout(Setup *s, const char *tensor, char *buf)
{
    const Tensor *t = graph_tensor_find(s->g, tensor);
    assert_non_null(t);
    return sharding_str(&s->p->tensors[t->id].sharding, &s->mesh, buf, 128);
}

/* Communicating steps of kind k over exactly `axes` (names joined by "+"). */
static inline int count_coll(Setup *s, CollKind k, const char *axes)
{
    unsigned mask = 0;
    char copy[64];
    snprintf(copy, sizeof copy, "%s", axes);
    for (char *save = NULL, *tok = strtok_r(copy, "+", &save); tok; tok = strtok_r(NULL, "+", &save))
        mask |= 1u << mesh_axis_find(&s->mesh, tok);
    int n = 0;
    for (int i = 0; i < s->p->nreshards; i++)
        for (int j = 0; j < s->p->reshards[i].r.nsteps; j++)
            n += s->p->reshards[i].r.steps[j].kind == k && s->p->reshards[i].r.steps[j].axes == mask;
    return n;
}

static inline int count_comm(Setup *s)
{
    PlanTotals t;
    plan_totals(s->p, &t);
    return t.ncollectives;
}

#endif
