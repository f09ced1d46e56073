/* fsdp.c: weights stored sharded and gathered on use (ZeRO-3 / FSDP).
 *
 * With --shard-weights AXIS, each weight whose planned layout does not
 * split it over AXIS is stored split over AXIS as well: AXIS is appended to
 * the outermost dim it divides, so the gather before use needs no packing.
 * Every consumer then reads it through a reshard from the stored layout
 * (one all-gather over AXIS, plus whatever the consumer needed before).
 * Those reshards are marked as weight gathers, so the scheduler may start
 * them ahead of use (--prefetch) and free the gathered copy after its last
 * reader. A weight no dim of which AXIS divides stays as planned, and is
 * reported.
 */
#include "partition.h"

#include <string.h>

/* Does an optimizer update read weight t through reshard r (whichever
 * reader the reshard was made for)? */
static int is_update(const Plan *p, const Tensor *t, int r)
{
    for (int c = 0; c < t->nconsumers; c++) {
        const Node *n = t->consumers[c];
        if (ir_output_in_place(n, 0) >= 0 && n->inputs[0] == t && p->nodes[n->id].in_reshard[0] == r)
            return 1;
    }
    return 0;
}

/* t is now stored as `store`: every reader that read it directly in its
 * planned layout `use` reads it through a gather; one that reads the
 * stored block as it is (-2: an update on its own block) reads it
 * directly. */
static void gather_for_readers(Plan *p, const Tensor *t, const Sharding *store, const Sharding *use,
                               const char *reason)
{
    for (int c = 0; c < t->nconsumers; c++) {
        const Node *n = t->consumers[c];
        NodePlan *np = &p->nodes[n->id];
        for (int k = 0; k < n->ninputs; k++)
            if (n->inputs[k] == t && np->in_reshard[k] == -2)
                np->in_reshard[k] = -1;
            else if (n->inputs[k] == t && np->in_reshard[k] < 0) {
                np->in_reshard[k] = plan_add_reshard(p, t, n, k, reason, store, use);
                p->reshards[np->in_reshard[k]].weight_gather = 1;
            }
    }
}

/* Mixed precision (--precision, ir/precision.c): a weight stored split and
 * read through a Cast to a narrower type is cast where it is stored, on
 * this rank's block, and the narrow copy is what is gathered before each
 * use: half the bytes of gathering the float32 master (FSDP's param_dtype).
 * The Cast then reads the stored block as it is, its output is stored
 * split like the weight, and the output's readers get the gathers. */
static void gather_narrow(Plan *p, const Node *c, const char *reason)
{
    const Mesh *m = &p->mesh;
    const Tensor *w = c->inputs[0], *y = c->outputs[0];
    NodePlan *np = &p->nodes[c->id];
    int r0 = np->in_reshard[0];
    if (c->grad || !y || y->is_output || dtype_size(y->dtype) >= dtype_size(w->dtype) || r0 < 0 ||
        !p->reshards[r0].weight_gather || !sharding_equal(&p->reshards[r0].dst, &p->tensors[y->id].sharding))
        return;
    Sharding store = p->tensors[w->id].sharding, use = p->tensors[y->id].sharding;
    np->in_reshard[0] = -1; /* the block as stored */
    p->reshards[r0].r.nsteps = 0;
    p->reshards[r0].dst = store;
    int out = rule_out_idx(c, 0);
    for (int dim = 0; dim < y->rank; dim++)
        for (int j = 0; j < np->rule.dims[out][dim].n; j++) {
            int f = np->rule.dims[out][dim].f[j];
            np->fnaxes[f] = store.naxes[dim];
            memcpy(np->faxes[f], store.axes[dim], MESH_MAX_AXES);
        }
    p->tensors[y->id].sharding = store;
    for (int r = p->tensor_reshard ? p->tensor_reshard[y->id] : -1; r >= 0; r = p->reshards[r].next_of_tensor) {
        p->reshards[r].src = store;
        p->reshards[r].weight_gather = 1;
        reshard_lower(m, y, &store, &p->reshards[r].dst, &p->reshards[r].r);
    }
    gather_for_readers(p, y, &store, &use, reason);
}

int partition_shard_weights(Plan *p, const char *axis_name, Diag *d)
{
    const Graph *g = p->g;
    const Mesh *m = &p->mesh;
    int ax = mesh_axis_find(m, axis_name);
    if (ax < 0) {
        diag_add(d, "--shard-weights %s: unknown mesh axis", axis_name);
        return -1;
    }
    char why[160];
    snprintf(why, sizeof why, "weight stored split over %s (--shard-weights %s), gathered before use", axis_name,
             axis_name);
    const char *reason = arena_strdup(&p->arena, why);
    for (int i = 0; i < g->ntensors; i++) {
        const Tensor *t = g->tensors[i];
        TensorPlan *tp = &p->tensors[i];
        if (!t->is_initializer || !t->nconsumers || (sharding_used_axes(&tp->sharding) & (1u << ax)) ||
            tp->sharding.partial)
            continue;
        int dim = -1;
        for (int k = 0; k < t->rank && dim < 0; k++) {
            Sharding s = tp->sharding; /* evenly, before and after: a gather of part of a padded dim misplaces rows */
            s.axes[k][s.naxes[k]++] = (unsigned char)ax;
            if (t->dims[k] % sharding_dim_shards(&s, m, k) == 0 && !sharding_dim_uneven(&s, m, t, k) &&
                !sharding_dim_uneven(&tp->sharding, m, t, k))
                dim = k;
        }
        if (dim < 0)
            continue; /* too small to split: stays as planned */
        Sharding use = tp->sharding, store = use;
        store.axes[dim][store.naxes[dim]++] = (unsigned char)ax;
        /* A reader that already reshards it to exactly that layout would
         * then need no reshard at all: keep such a weight as planned
         * rather than leave an empty reshard behind (fuzz_plans --auto). */
        int same = 0;
        for (int r = p->tensor_reshard ? p->tensor_reshard[t->id] : -1; r >= 0; r = p->reshards[r].next_of_tensor)
            same |= !is_update(p, t, r) && sharding_equal(&p->reshards[r].dst, &store);
        if (same)
            continue;
        tp->sharding = store;
        /* Existing reshards of this weight now start from the stored layout.
         * A training update planned on this very block (--zero 3: the
         * optimizer runs where the weight is stored) reads it as stored:
         * its reshard is dropped. */
        for (int r = p->tensor_reshard ? p->tensor_reshard[t->id] : -1; r >= 0; r = p->reshards[r].next_of_tensor) {
            if (is_update(p, t, r) && sharding_equal(&p->reshards[r].dst, &store)) {
                for (int c = 0; c < t->nconsumers; c++)
                    for (int k = 0; k < t->consumers[c]->ninputs; k++)
                        if (t->consumers[c]->inputs[k] == t && p->nodes[t->consumers[c]->id].in_reshard[k] == r)
                            p->nodes[t->consumers[c]->id].in_reshard[k] = -2; /* reads it as stored */
                p->reshards[r].r.nsteps = 0;
                p->reshards[r].src = store;
                continue;
            }
            p->reshards[r].src = store;
            p->reshards[r].weight_gather = 1;
            reshard_lower(m, t, &store, &p->reshards[r].dst, &p->reshards[r].r);
        }
        gather_for_readers(p, t, &store, &use, reason);
        for (int c = 0; c < t->nconsumers; c++)
            if (t->consumers[c]->op == OP_CAST)
                gather_narrow(p, t->consumers[c], reason);
    }
    return 0;
}
