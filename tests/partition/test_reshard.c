/* test_reshard.c: layout-to-layout lowering on mesh dp=2,tp=2.
 *
 * For a [8,16] float32 tensor (512 bytes), every pair of ten layouts is
 * lowered; each result must end in the target layout and use no more
 * collectives than the minimum found by an exhaustive search over the
 * primitive moves (a separate, brute-force model of what each collective
 * can do). A table of representative pairs also pins the exact sequence
 * and bytes per rank.
 */
#include "tests/test_util.h"

#include "partition/partition.h"

static const char *const layouts[] = {
    "[_,_]", "[dp,_]", "[_,dp]", "[tp,_]", "[_,tp]", "[dp,tp]", "[tp,dp]", "[dp+tp,_]",
    "[_,_] partial(dp)", "[_,_] partial(tp)", "[_,tp+dp]",
};
enum { NLAYOUTS = sizeof layouts / sizeof layouts[0] };

static Mesh mesh;
static Tensor tensor = {.name = "t", .dtype = DT_F32, .rank = 2, .dims = {8, 16}};

static void parse(const char *text, Sharding *s)
{
    char err[128];
    if (sharding_parse(text, &mesh, s, err, sizeof err))
        print_error("%s: %s\n", text, err);
    assert_int_equal(sharding_parse(text, &mesh, s, err, sizeof err), 0);
}

/* ---- brute force: states are (dim0 list, dim1 list, partial) ----------- */

typedef struct State {
    Sharding s;
    int cost;
} State;

static int state_find(const State *v, int n, const Sharding *s)
{
    for (int i = 0; i < n; i++)
        if (sharding_equal(&v[i].s, s))
            return i;
    return -1;
}

/* All layouts reachable from s in one move, with the move's cost (1 for a
 * collective, 0 for a local slice or partialize). */
static int moves(const Sharding *s, Sharding *out, int *cost)
{
    int n = 0;
    unsigned used = sharding_used_axes(s) | s->partial;
    for (int i = 0; i < 2; i++) {
        for (int k = 0; k < s->naxes[i]; k++) { /* all-gather a suffix */
            out[n] = *s;
            out[n].naxes[i] = (unsigned char)k;
            cost[n++] = 1;
        }
        if (s->naxes[i]) /* all-to-all of the minor-most axis */
            for (int j = 0; j < 2; j++)
                if (j != i) {
                    out[n] = *s;
                    int ax = out[n].axes[i][--out[n].naxes[i]];
                    out[n].axes[j][out[n].naxes[j]++] = (unsigned char)ax;
                    cost[n++] = 1;
                }
        for (int ax = 0; ax < 2; ax++) {
            if ((s->partial >> ax) & 1) { /* reduce-scatter onto dim i */
                out[n] = *s;
                out[n].partial &= ~(1u << ax);
                out[n].axes[i][out[n].naxes[i]++] = (unsigned char)ax;
                cost[n++] = 1;
            }
            if (!((used >> ax) & 1)) { /* local slice */
                out[n] = *s;
                out[n].axes[i][out[n].naxes[i]++] = (unsigned char)ax;
                cost[n++] = 0;
            }
        }
    }
    if (s->partial == 3u) /* reduce-scatter over both axes onto one dim, either order */
        for (int i = 0; i < 2; i++)
            for (int rev = 0; rev < 2; rev++) {
                out[n] = *s;
                out[n].partial = 0;
                out[n].axes[i][out[n].naxes[i]++] = (unsigned char)rev;
                out[n].axes[i][out[n].naxes[i]++] = (unsigned char)!rev;
                cost[n++] = 1;
            }
    for (unsigned sub = 1; sub < 4; sub++) {
        if ((s->partial & sub) == sub) { /* all-reduce a subset */
            out[n] = *s;
            out[n].partial &= ~sub;
            cost[n++] = 1;
        }
        if (!(used & sub)) { /* partialize */
            out[n] = *s;
            out[n].partial |= sub;
            cost[n++] = 0;
        }
    }
    return n;
}

static int min_collectives(const Sharding *src, const Sharding *dst)
{
    State v[512];
    int nv = 1, done[512] = {0};
    v[0].s = *src;
    v[0].cost = 0;
    for (;;) { /* Dijkstra on 0/1 weights over a few hundred states */
        int best = -1;
        for (int i = 0; i < nv; i++)
            if (!done[i] && (best < 0 || v[i].cost < v[best].cost))
                best = i;
        assert_true(best >= 0);
        if (sharding_equal(&v[best].s, dst))
            return v[best].cost;
        done[best] = 1;
        Sharding next[64];
        int cost[64];
        int nm = moves(&v[best].s, next, cost);
        for (int k = 0; k < nm; k++) {
            int c = v[best].cost + cost[k], at = state_find(v, nv, &next[k]);
            if (at < 0) {
                assert_true(nv < 512);
                v[nv].s = next[k];
                v[nv++].cost = c;
            } else if (!done[at] && c < v[at].cost) {
                v[at].cost = c;
            }
        }
    }
}

static int comm_steps(const Reshard *r)
{
    int n = 0;
    for (int i = 0; i < r->nsteps; i++)
        n += r->steps[i].kind != COLL_SLICE && r->steps[i].kind != COLL_PARTIALIZE;
    return n;
}

static void test_reshard_lower_all_pairs_minimal(void **st)
{
    (void)st;
    for (int a = 0; a < NLAYOUTS; a++)
        for (int b = 0; b < NLAYOUTS; b++) {
            Sharding src, dst;
            Reshard r;
            parse(layouts[a], &src);
            parse(layouts[b], &dst);
            reshard_lower(&mesh, &tensor, &src, &dst, &r);
            const Sharding *end = r.nsteps ? &r.steps[r.nsteps - 1].after : &src;
            if (!sharding_equal(end, &dst) || comm_steps(&r) != min_collectives(&src, &dst))
                print_error("%s -> %s: %d collectives, minimum %d\n", layouts[a], layouts[b],
                            comm_steps(&r), min_collectives(&src, &dst));
            assert_true(sharding_equal(end, &dst));
            /* Gathering whole and slicing again is reported when chosen. */
            if (r.full_gather)
                assert_true(strcmp(layouts[a], "[dp+tp,_]") == 0 || strcmp(layouts[a], "[dp,tp]") == 0 ||
                            strcmp(layouts[a], "[tp,dp]") == 0 || comm_steps(&r) == 1);
            assert_int_equal(comm_steps(&r), min_collectives(&src, &dst));
        }
}

/* src, dst, expected steps ("kind:axes:bytes" separated by spaces). */
static const char *const table[][3] = {
    {"[_,_]", "[_,_]", ""},
    {"[_,_]", "[dp,_]", "slice:dp:0"},
    {"[dp,_]", "[_,_]", "all-gather:dp:256"},
    {"[dp,_]", "[_,dp]", "all-to-all:dp:128"},
    {"[dp,_]", "[tp,_]", "all-gather:dp:256 slice:tp:0"},
    {"[_,_] partial(dp)", "[_,_]", "all-reduce:dp:512"},
    {"[_,_] partial(tp)", "[tp,_]", "reduce-scatter:tp:256"},
    {"[_,_] partial(tp)", "[_,tp]", "reduce-scatter:tp:256"},
    /* slicing a partial sum is local and halves what the scatter moves */
    {"[_,_] partial(dp)", "[dp,tp]", "slice:tp:0 reduce-scatter:dp:128"},
    /* on a small tensor one gather beats an all-to-all plus a gather */
    {"[dp+tp,_]", "[_,tp]", "all-gather:dp+tp:384 slice:tp:0"},
    {"[_,_] partial(dp)", "[_,tp]", "slice:tp:0 all-reduce:dp:256"},
    {"[_,_] partial(dp)", "[_,_] partial(tp)", "partialize:tp:0 all-reduce:dp:512"},
    {"[dp+tp,_]", "[_,_]", "all-gather:dp+tp:384"},
    {"[dp+tp,_]", "[dp,_]", "all-gather:tp:128"},
    {"[dp,_]", "[dp+tp,_]", "slice:tp:0"},
    {"[dp,tp]", "[tp,dp]", "all-gather:dp:128 all-to-all:tp:128 slice:dp:0"},
    {"[dp,tp]", "[_,_]", "all-gather:dp:128 all-gather:tp:256"},
    {"[tp,dp]", "[dp,_]", "all-gather:tp:128 all-to-all:dp:128"},
    {"[_,_]", "[_,_] partial(tp)", "partialize:tp:0"},
    /* a sum over both axes scatters in one call over the combined group */
    {"[_,_] partial(dp,tp)", "[dp+tp,_]", "reduce-scatter:dp+tp:384"},
    {"[_,_] partial(dp,tp)", "[_,tp+dp]", "reduce-scatter:dp+tp:384"},
    {"[_,_] partial(dp,tp)", "[_,_]", "all-reduce:dp+tp:768"},
};

static void test_reshard_lower_table(void **st)
{
    (void)st;
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++) {
        Sharding src, dst;
        Reshard r;
        parse(table[i][0], &src);
        parse(table[i][1], &dst);
        reshard_lower(&mesh, &tensor, &src, &dst, &r);
        char got[256] = "";
        size_t off = 0;
        for (int k = 0; k < r.nsteps; k++) {
            char axes[32] = "";
            for (int a = 0; a < mesh.naxes; a++)
                if (r.steps[k].axes & (1u << a))
                    snprintf(axes + strlen(axes), sizeof axes - strlen(axes), "%s%s",
                             axes[0] ? "+" : "", mesh.axes[a].name);
            off += (size_t)snprintf(got + off, sizeof got - off, "%s%s:%s:%lld", k ? " " : "",
                                    coll_name(r.steps[k].kind), axes, (long long)r.steps[k].bytes);
        }
        if (strcmp(got, table[i][2]) != 0)
            print_error("%s -> %s: got \"%s\", expected \"%s\"\n", table[i][0], table[i][1], got,
                        table[i][2]);
        assert_string_equal(got, table[i][2]);
    }
}

static void test_reshard_multi_axis_reduction_large(void **st)
{
    (void)st;
    /* 4 MiB partial over dp and tp: one all-reduce over the combined group
     * moves 6 MiB per rank, two in a row 8 MiB; one reduce-scatter over
     * dp+tp beats two. */
    Tensor big = {.name = "big", .dtype = DT_F32, .rank = 2, .dims = {1024, 1024}};
    Sharding src, rep, split;
    Reshard r;
    parse("[_,_] partial(dp,tp)", &src);
    parse("[_,_]", &rep);
    parse("[dp+tp,_]", &split);
    reshard_lower(&mesh, &big, &src, &rep, &r);
    assert_int_equal(r.nsteps, 1);
    assert_int_equal(r.steps[0].kind, COLL_ALL_REDUCE);
    assert_int_equal(r.steps[0].axes, 3u);
    reshard_lower(&mesh, &big, &src, &split, &r);
    assert_int_equal(r.nsteps, 1);
    assert_int_equal(r.steps[0].kind, COLL_REDUCE_SCATTER);
    assert_int_equal(r.steps[0].axes, 3u);
    assert_int_equal(r.bytes, 3 << 20);
}

/* Uneven splits: a [6,6] tensor is padded over 4 shards (blocks of 2, the
 * last empty) and even over 2. Every pair of layouts still lowers to its
 * target, and each step that changes a padded dim is a whole-dim move
 * (from or to unsplit), never an all-to-all: blocks of ceil(6/4) are not
 * halves of blocks of ceil(6/2), so any other move would misplace rows. */
static void test_reshard_uneven_whole_dim_moves(void **st)
{
    (void)st;
    Tensor odd = {.name = "odd", .dtype = DT_F32, .rank = 2, .dims = {6, 6}};
    int padded_pairs = 0;
    for (int a = 0; a < NLAYOUTS; a++)
        for (int b = 0; b < NLAYOUTS; b++) {
            Sharding src, dst;
            Reshard r;
            parse(layouts[a], &src);
            parse(layouts[b], &dst);
            reshard_lower(&mesh, &odd, &src, &dst, &r);
            assert_true(r.nsteps == 0 ? sharding_equal(&src, &dst) : sharding_equal(&r.steps[r.nsteps - 1].after, &dst));
            const Sharding *before = &src;
            for (int j = 0; j < r.nsteps; j++) {
                const ReshardStep *s = &r.steps[j];
                if (s->dim >= 0 && (sharding_dim_uneven(before, &mesh, &odd, s->dim) ||
                                    sharding_dim_uneven(&s->after, &mesh, &odd, s->dim))) {
                    padded_pairs++;
                    assert_int_not_equal(s->kind, COLL_ALL_TO_ALL);
                    assert_true(before->naxes[s->dim] == 0 || s->after.naxes[s->dim] == 0);
                }
                before = &s->after;
            }
        }
    assert_true(padded_pairs > 10);
    /* [dp+tp,_] -> [dp,_]: gather dim 0 whole (6 rows from 4 blocks of 2),
     * then keep dp's block of 3. */
    Sharding src, dst;
    Reshard r;
    parse("[dp+tp,_]", &src);
    parse("[dp,_]", &dst);
    reshard_lower(&mesh, &odd, &src, &dst, &r);
    assert_int_equal(r.nsteps, 2);
    assert_int_equal(r.steps[0].kind, COLL_ALL_GATHER);
    assert_int_equal(r.steps[0].axes, 3u);
    assert_int_equal(r.steps[1].kind, COLL_SLICE);
    int64_t local[2];
    sharding_local_dims(&src, &mesh, &odd, local);
    assert_int_equal(local[0], 2);
    sharding_local_dims(&dst, &mesh, &odd, local);
    assert_int_equal(local[0], 3);
    assert_int_equal(sharding_block_valid(6, 2, 2), 2);
    assert_int_equal(sharding_block_valid(6, 2, 3), 0);
}

/* Block lengths (sharding_block_of) on a mesh a=2, b=4, c=8. */
static void test_sharding_blocks(void **st)
{
    (void)st;
    Mesh m3;
    Diag d;
    diag_init(&d, NULL);
    assert_int_equal(mesh_parse("a=2,b=4,c=8", &m3, &d), 0);
    static const unsigned char A[] = {0}, B[] = {1}, C[] = {2}, AA[] = {0, 1}, BA[] = {1, 0};
    /* 12 heads x 64 over 8: blocks of 2 heads; over 4: 3 heads, even */
    assert_int_equal(sharding_block_of(768, 64, &m3, C, 1), 128);
    assert_int_equal(sharding_block_of(768, 64, &m3, B, 1), 192);
    /* 2 x 4 (batch x seq) over a then b: batch whole, then seq: even */
    assert_int_equal(sharding_block_of(8, 4, &m3, AA, 2), 1);
    /* ... over b then a: b cuts inside the batch units: whole units, padded */
    assert_int_equal(sharding_block_of(8, 4, &m3, BA, 2), 4);
    /* GPT-2's vocabulary over 8, a single-element unit */
    assert_int_equal(sharding_block_of(50257, 0, &m3, C, 1), 6283);
    assert_int_equal(sharding_block_of(6, 1, &m3, A, 1), 3);
    diag_free(&d);
}

static void test_reshard_cost_model(void **st)
{
    (void)st;
    Mesh m;
    Diag d;
    diag_init(&d, NULL);
    assert_int_equal(mesh_parse("dp=4,tp=8", &m, &d), 0);
    assert_int_equal(mesh_links_parse(&m, "dp=ib,tp=nvlink", &d), 0);
    /* all-reduce of 1 MiB over 8 ranks on NVLink: a tree (2 x 3 alpha,
     * the MiB twice) beats the ring (14 alpha, 2*7/8 MiB) */
    double t = coll_seconds(&m, COLL_ALL_REDUCE, 2u, 1 << 20);
    double want = 2.0 * (1 << 20) / 450e9 + 6 * 3e-6 + 5e-6;
    assert_true(t > want * 0.999 && t < want * 1.001);
    /* of 1 GiB: the ring */
    t = coll_seconds(&m, COLL_ALL_REDUCE, 2u, 1 << 30);
    want = 2.0 * 7 / 8 * (1 << 30) / 450e9 + 14 * 3e-6 + 5e-6;
    assert_true(t > want * 0.999 && t < want * 1.001);
    /* a group spanning both axes runs at the slower (ib) link */
    assert_string_equal(mesh_group_link(&m, 3u)->name, "ib");
    assert_int_equal(mesh_coord(&m, 13, 0), 1);
    assert_int_equal(mesh_coord(&m, 13, 1), 5);
    diag_free(&d);
}

static void test_sharding_parse_print_roundtrip(void **st)
{
    (void)st;
    for (int i = 0; i < NLAYOUTS; i++) {
        Sharding s;
        char buf[128];
        parse(layouts[i], &s);
        assert_string_equal(sharding_str(&s, &mesh, buf, sizeof buf), layouts[i]);
    }
    Sharding s;
    char err[128];
    assert_int_equal(sharding_parse("[dp,", &mesh, &s, err, sizeof err), -1);
    assert_int_equal(sharding_parse("[dp] partial(dp)", &mesh, &s, err, sizeof err), -1);
    assert_non_null(strstr(err, "used twice"));
}

static int setup(void **st)
{
    (void)st;
    Diag d;
    diag_init(&d, NULL);
    int rc = mesh_parse("dp=2,tp=2", &mesh, &d);
    diag_free(&d);
    return rc;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reshard_lower_all_pairs_minimal),
        cmocka_unit_test(test_reshard_lower_table),
        cmocka_unit_test(test_reshard_multi_axis_reduction_large),
        cmocka_unit_test(test_reshard_uneven_whole_dim_moves),
        cmocka_unit_test(test_sharding_blocks),
        cmocka_unit_test(test_reshard_cost_model),
        cmocka_unit_test(test_sharding_parse_print_roundtrip),
    };
    return cmocka_run_group_tests_name("partition/reshard", tests, setup, NULL);
}
