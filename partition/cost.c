/* cost.c: the node cost model, the roofline time of one node on its shard.
 *
 * A node's compute time under a factor sharding is the roofline
 * max(FLOPs / peak, bytes / memory bandwidth) of the mesh's device preset
 * on the local shard: a contraction (MatMul, Gemm, Conv, Einsum,
 * Attention) does two FLOPs per point of its split iteration space, any
 * other op one per result element; the bytes are every operand and result
 * at their local size (a Gather reads the rows it picks, not its table).
 *
 * Everything that costs a plan calls this file: the --auto search
 * (auto_strategy.c) for each strategy, propagation's conflict resolution,
 * estimate.c's schedule simulation, pipeline.c's stage cuts and codegen's
 * program estimate. It depends on nothing above sharding and rules.
 */
#include "partition.h"

/* Does the op contract its reduction factors with multiply-adds (so its
 * FLOPs are twice its iteration space), rather than move or map values? */
static int op_is_contraction(OpKind op)
{
    switch (op) {
    case OP_MATMUL: case OP_GEMM: case OP_CONV: case OP_CONV_TRANSPOSE: case OP_EINSUM: case OP_ATTENTION:
        return 1;
    default:
        return 0;
    }
}

/* Roofline time of node n on its local shard under factor sharding fn/fa. */
double plan_node_seconds(const Plan *p, const Node *n, const FactorRule *r, const unsigned char *fn,
                         const unsigned char (*fa)[MESH_MAX_AXES])
{
    const Mesh *m = &p->mesh;
    double flops = 0, bytes = 0;
    if (op_is_contraction(n->op)) {
        flops = 2;
        for (int f = 0; f < r->nfactors; f++) {
            double split = 1;
            for (int k = 0; k < fn[f]; k++)
                split *= m->axes[fa[f][k]].size;
            flops *= (double)r->size[f] / split;
        }
    }
    for (int t = 0; t < r->ntensors; t++) {
        const Tensor *tt = r->tensors[t];
        if (!tt || tt->rank < 0)
            continue;
        Sharding s;
        rule_project(r, t, fn, fa, m, &s);
        double b = (double)sharding_local_bytes(&s, m, tt);
        if (t >= n->ninputs && !op_is_contraction(n->op))
            flops += b / (double)dtype_size(tt->dtype);
        /* A gather reads the rows it picks, not its whole table. */
        if (n->op == OP_GATHER && t == 0)
            continue;
        bytes += b;
    }
    if (n->op == OP_GATHER && n->noutputs)
        bytes += bytes; /* the picked rows: as many bytes as the result */
    double tc = flops / m->device->flops, tm = bytes / m->device->mem_Bps;
    return tc > tm ? tc : tm;
}
double plan_node_planned_seconds(const Plan *p, const Node *n)
{
    const NodePlan *np = &p->nodes[n->id];
    return plan_node_seconds(p, n, &np->rule, np->fnaxes, (const unsigned char (*)[MESH_MAX_AXES])np->faxes);
}
