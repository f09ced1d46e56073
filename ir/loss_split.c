/* loss_split.c: a mean loss as a sum over a count, so that the batch can
 * stay split.
 *
 * SoftmaxCrossEntropyLoss and NegativeLogLikelihoodLoss with reduction
 * "mean" divide by the count of labels that are not ignore_index (all of
 * them without one). A rank holding a block of the batch does not know
 * that count, so the planner would gather the whole batch of scores (a
 * causal LM's logits: tokens x vocabulary floats) to every rank first.
 * Written as
 *
 *   loss = SCE(x, labels, reduction="sum") / ReduceSum(Cast(Not(Equal(labels, ignore_index))))
 *
 * (the divisor a constant when there is no ignore_index), the sum and the
 * count are both partial sums over the batch's split: one all-reduce of
 * two scalars, then the division, as Megatron and PyTorch's DDP losses do.
 * The result is the same number, and autodiff builds the backward from
 * this form: the gradient of the scores is scaled by 1 / count and stays
 * split. The loss tensor keeps its name (it is the Div's output now).
 *
 * Left as they are: class weights (the divisor would be the weights of
 * the counted labels), a log_prob output that something reads, and other
 * reductions.
 */
#include "ir.h"

#include <stdio.h>
#include <string.h>

static Tensor *scalar(Graph *g, const char *name, DType dt, const void *val)
{
    Tensor *t = graph_tensor_fresh(g, name);
    size_t bytes = dtype_size(dt);
    void *p = arena_alloc(&g->arena, bytes);
    memcpy(p, val, bytes);
    t->data = p;
    t->nbytes = (int64_t)bytes;
    t->dtype = dt;
    t->rank = 0;
    t->is_initializer = 1;
    return t;
}

/* Is n a mean loss this pass rewrites? */
static int splittable(const Node *n)
{
    if (n->folded || (n->op != OP_SCE_LOSS && n->op != OP_NLL_LOSS))
        return 0;
    if (strcmp(node_attr_str(n, "reduction", "mean"), "mean") != 0)
        return 0;
    if (n->ninputs > 2 && n->inputs[2])
        return 0; /* class weights */
    const Tensor *lp = n->noutputs > 1 ? n->outputs[1] : NULL;
    if (lp && (lp->is_output || lp->nconsumers))
        return 0;
    const Tensor *lab = n->inputs[1], *loss = n->outputs[0];
    /* (a float16 loss would count in float16: inexact past 2048 labels) */
    return (loss->dtype == DT_F32 || loss->dtype == DT_F64) && (lab->dtype == DT_I64 || lab->dtype == DT_I32) &&
           tensor_numel(lab) > 1;
}

int ir_split_mean_losses(Graph *g, Diag *d)
{
    graph_link_consumers(g);
    int nnodes = g->nnodes, ntouched = 0;
    Node *touched[64 * 6];
    for (int i = 0; i < nnodes && ntouched + 6 <= (int)(sizeof touched / sizeof *touched); i++) {
        Node *n = g->nodes[i];
        if (!splittable(n))
            continue;
        Tensor *loss = n->outputs[0], *lab = n->inputs[1];
        DType ft = loss->dtype;
        char name[300];
        /* The loss node now sums; its output is a fresh tensor. */
        node_attr_set_str(g, n, "reduction", "sum");
        snprintf(name, sizeof name, "%.250s/sum", n->name);
        n->outputs[0] = graph_tensor_fresh(g, name);
        n->outputs[0]->producer = n;
        Tensor *count;
        const Attr *ign = node_attr(n, "ignore_index");
        if (ign) {
            snprintf(name, sizeof name, "%.250s/ignore_index", n->name);
            int64_t v64 = ign->i;
            int32_t v32 = (int32_t)ign->i;
            Tensor *iv = scalar(g, name, lab->dtype, lab->dtype == DT_I64 ? (const void *)&v64 : (const void *)&v32);
            snprintf(name, sizeof name, "%.250s/ignored", n->name);
            Node *eq = graph_node_make(g, OP_EQUAL, name, (Tensor *[]){lab, iv}, 2);
            snprintf(name, sizeof name, "%.250s/counted", n->name);
            Node *nt = graph_node_make(g, OP_NOT, name, (Tensor *[]){eq->outputs[0]}, 1);
            snprintf(name, sizeof name, "%.250s/counted_float", n->name);
            Node *ca = graph_node_make(g, OP_CAST, name, (Tensor *[]){nt->outputs[0]}, 1);
            node_attr_set_int(g, ca, "to", ft);
            snprintf(name, sizeof name, "%.250s/count", n->name);
            Node *rs = graph_node_make(g, OP_REDUCE_SUM, name, (Tensor *[]){ca->outputs[0]}, 1);
            int64_t axes[IR_MAX_RANK];
            for (int a = 0; a < lab->rank; a++)
                axes[a] = a;
            node_attr_set_ints(g, rs, "axes", axes, lab->rank);
            node_attr_set_int(g, rs, "keepdims", 0);
            count = rs->outputs[0];
            touched[ntouched++] = eq;
            touched[ntouched++] = nt;
            touched[ntouched++] = ca;
            touched[ntouched++] = rs;
        } else { /* every label counts: their number, an int64 constant (a float one would train) */
            snprintf(name, sizeof name, "%.250s/labels", n->name);
            int64_t numel = tensor_numel(lab);
            Tensor *nc = scalar(g, name, DT_I64, &numel);
            snprintf(name, sizeof name, "%.250s/count", n->name);
            Node *ca = graph_node_make(g, OP_CAST, name, (Tensor *[]){nc}, 1);
            node_attr_set_int(g, ca, "to", ft);
            count = ca->outputs[0];
            touched[ntouched++] = ca;
        }
        /* The original loss tensor, by name, is the quotient. */
        snprintf(name, sizeof name, "%.250s/mean", n->name);
        Node *dv = graph_node_add(g, OP_DIV, name);
        dv->inputs = arena_alloc(&g->arena, 2 * sizeof(Tensor *));
        dv->inputs[0] = n->outputs[0];
        dv->inputs[1] = count;
        dv->ninputs = 2;
        dv->outputs = arena_alloc(&g->arena, sizeof(Tensor *));
        dv->outputs[0] = loss;
        loss->producer = dv;
        dv->noutputs = 1;
        touched[ntouched++] = n;
        touched[ntouched++] = dv;
    }
    if (!ntouched)
        return 0;
    graph_link_consumers(g);
    if (graph_toposort(g, d))
        return -1;
    for (int i = 0; i < g->nnodes; i++)
        for (int j = 0; j < ntouched; j++)
            if (touched[j] == g->nodes[i] && ir_infer_node(g, g->nodes[i], d))
                return -1;
    return 0;
}
