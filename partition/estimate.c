/* estimate.c: what the cost model says a plan costs, per rank.
 *
 * Compute: every node's roofline time on its local shard (cost.c's
 * plan_node_seconds). Communication: every reshard's time under the link
 * model. The two meet in a simulation of the rank's schedule on two
 * streams, as the generated programs run it: nodes in order on the compute
 * stream; each reshard on the communication stream, started as soon as its
 * value is produced (a stored weight: at the start) and the stream is free,
 * in the order of its first consumer; a node starts once its operands'
 * reshards are done. The makespan less the compute time is the exposed
 * communication; the rest of it was overlapped.
 *
 * Memory: the local bytes of every weight, plus the peak over the steps of
 * the values live there (from their producer to their last reader) and the
 * buffers of the reshards the step reads (every step's result; at the last
 * step, the reduced graph outputs), as auto_ilp.c's memory rows count them.
 * Graph inputs count as live values; an optimizer update's results do
 * not (they take over the storage of the weight and state it updates,
 * counted with the weights). Pack buffers, scratch and alignment
 * are not counted; the per-rank programs report their exact arena.
 */
#include "partition.h"

#include <stdlib.h>
#include <string.h>

static int64_t reshard_buf_bytes(const Plan *p, int r)
{
    int64_t b = 0;
    for (int i = 0; r >= 0 && i < p->reshards[r].r.nsteps; i++)
        b += sharding_local_bytes(&p->reshards[r].r.steps[i].after, &p->mesh, p->reshards[r].tensor);
    return b;
}

void plan_estimate(const Plan *p, PlanEstimate *e)
{
    const Graph *g = p->g;
    const Mesh *m = &p->mesh;
    memset(e, 0, sizeof *e);
    int nn = g->nnodes;
    double *ready = calloc((size_t)g->ntensors + 1, sizeof(double)); /* when each value exists */
    double *done = calloc((size_t)p->nreshards + 1, sizeof(double));
    char *started = calloc((size_t)p->nreshards + 1, 1);
    int *last = malloc(sizeof(int) * ((size_t)g->ntensors + 1));
    if (!ready || !done || !started || !last)
        abort();
    double tc = 0, tm = 0;
    for (int ni = 0; ni < nn; ni++) {
        const Node *n = g->nodes[ni];
        const NodePlan *np = &p->nodes[ni];
        double start = tc;
        for (int k = 0; k < n->ninputs; k++) {
            const Tensor *t = n->inputs[k];
            if (!t)
                continue;
            double avail = ready[t->id];
            int r = np->in_reshard ? np->in_reshard[k] : -1;
            if (r >= 0) {
                if (!started[r]) {
                    double s0 = tm > avail ? tm : avail;
                    done[r] = s0 + p->reshards[r].r.seconds;
                    tm = done[r];
                    started[r] = 1;
                    e->comm_s += p->reshards[r].r.seconds;
                }
                avail = done[r];
            }
            if (avail > start)
                start = avail;
        }
        e->exposed_s += start - tc; /* the compute stream waited */
        double c = plan_node_planned_seconds(p, n);
        e->compute_s += c;
        tc = start + c;
        for (int k = 0; k < n->noutputs; k++)
            if (n->outputs[k])
                ready[n->outputs[k]->id] = tc;
    }
    double end = tc;
    for (int i = 0; p->out_reshard && i < g->noutputs; i++) {
        int r = p->out_reshard[i];
        if (r < 0 || started[r])
            continue;
        double avail = ready[g->outputs[i]->id];
        double s0 = tm > avail ? tm : avail;
        done[r] = s0 + p->reshards[r].r.seconds;
        tm = done[r];
        started[r] = 1;
        e->comm_s += p->reshards[r].r.seconds;
        if (tm > end)
            end = tm;
    }
    e->step_s = end;
    e->exposed_s += end - tc; /* the outputs' reductions after the last node */
    e->overlapped_s = e->comm_s - e->exposed_s;
    if (e->overlapped_s < 1e-9 * e->comm_s)
        e->overlapped_s = 0; /* rounding, not overlap */

    /* Memory: weights, then the peak of live values and reshard results. */
    for (int i = 0; i < g->ntensors; i++) {
        const Tensor *t = g->tensors[i];
        if (t->is_initializer && t->nconsumers && t->rank >= 0)
            e->weight_bytes += sharding_local_bytes(&p->tensors[i].sharding, m, t);
    }
    graph_last_readers(g, last);
    /* A sweep: a value is born at its producer's step (inputs at 0) and
     * dies after its last reader. */
    int64_t *born = calloc((size_t)nn + 2, sizeof(int64_t)), *dies = calloc((size_t)nn + 2, sizeof(int64_t));
    if (!born || !dies)
        abort();
    for (int i = 0; i < g->ntensors; i++) {
        const Tensor *t = g->tensors[i];
        if (t->rank < 0 || t->is_initializer || last[i] < 0 || (!t->producer && !t->is_input) || ir_in_place(t))
            continue;
        int64_t b = sharding_local_bytes(&p->tensors[i].sharding, m, t);
        int from = t->producer ? t->producer->id : 0;
        born[from] += b;
        dies[last[i] + 1] += b;
    }
    int64_t live = 0;
    for (int ni = 0; ni <= nn; ni++) {
        live += born[ni] - dies[ni];
        int64_t step = live;
        /* The buffers every reshard read here writes (each step's result),
         * and at the last step the reduced graph outputs. */
        if (ni < nn && p->nodes[ni].in_reshard)
            for (int k = 0; k < g->nodes[ni]->ninputs; k++)
                step += reshard_buf_bytes(p, p->nodes[ni].in_reshard[k]);
        if (ni == nn - 1)
            for (int i = 0; p->out_reshard && i < g->noutputs; i++)
                step += reshard_buf_bytes(p, p->out_reshard[i]);
        if (step > e->peak_activation_bytes)
            e->peak_activation_bytes = step;
    }
    e->memory_bytes = e->weight_bytes + e->peak_activation_bytes;
    free(born);
    free(dies);
    free(ready);
    free(done);
    free(started);
    free(last);
}
