/* emit_moe.c: what a program with mixture-of-experts layers (ir/moe.c)
 * adds around forward(): the counters its dispatches set and the --stats
 * report of them. The kernels are emit_index.c's. */
#include "codegen.h"

/* The counters and what --stats says of each layer. */
void emit_moe_state(Emitter *e, FILE *f)
{
    const Graph *g = e->pr->g;
    int layers = moe_layers(g);
    if (!layers)
        return;
    fprintf(f, "\n/* ---- mixture of experts: what --stats reports ---- */\n\n"
               "#define MOE_LAYERS %d\n"
               "/* Per layer, the (token, expert) pairs this rank's experts had no room for in\n"
               " * the last forward(), counted by one rank of those holding the same block. */\n"
               "static int64_t *g_moe_dropped;\n"
               "static const RtMoeInfo rt_moe[MOE_LAYERS] = { /* dispatch, pairs, capacity, groups */\n",
            layers);
    for (int i = 0; i < g->nnodes; i++) {
        const Node *n = g->nodes[i];
        if (n->folded || n->op != OP_MOE_DISPATCH)
            continue;
        const Tensor *ids = n->inputs[1];
        fprintf(f, "    {");
        esc_c_string(f, n->label); /* printed to a terminal */
        fprintf(f, ", %lld, %lld, %lld},\n", (long long)(ids->dims[0] * ids->dims[1] * ids->dims[2]),
                (long long)node_attr_int(n, "capacity", 0), (long long)ids->dims[0]);
    }
    fprintf(f, "};\n");
}

/* In main: the counters before the first forward(). */
void emit_moe_init(Emitter *e)
{
    if (moe_layers(e->pr->g))
        fprintf(e->f, "    g_moe_dropped = rt_counters(MOE_LAYERS);\n");
}

/* In main, after the passes: --stats. */
void emit_moe_stats(Emitter *e)
{
    if (moe_layers(e->pr->g))
        fprintf(e->f, "    if (args.stats) /* every MoE layer's dropped pairs in the last forward() */\n"
                      "        rt_moe_stats(rt_moe, g_moe_dropped, MOE_LAYERS);\n");
}
