/* emit_trace.c: the tables a rank program's traces name things by.
 *
 * While forward() is emitted, every node gets an entry in rt_nodes[]
 * (rt_enter(k) before its kernels) and every collective one in
 * rt_comms[] (rt_started(k, &req) after its start, rt_wait(&req, k) at
 * its wait). The tables are written before forward(), so emit_c writes
 * forward() to memory first. Every model string reaches the tables as an
 * escaped C literal (esc_c_string); the indices are generated.
 */
#include "codegen.h"

#include <stdlib.h>
#include <string.h>

static FILE *g_nodes, *g_comms;
static char *g_nodes_text, *g_comms_text;
static size_t g_nodes_len, g_comms_len;
static int g_nnodes, g_ncomms;

void trace_tables_begin(void)
{
    g_nodes = open_memstream(&g_nodes_text, &g_nodes_len);
    g_comms = open_memstream(&g_comms_text, &g_comms_len);
    if (!g_nodes || !g_comms)
        abort();
    g_nnodes = g_ncomms = 0;
}

int trace_node(const Node *n, const int64_t *dims, int rank)
{
    char shape[128];
    fprintf(g_nodes, "    {");
    esc_c_string(g_nodes, n->label);
    fprintf(g_nodes, ", ");
    esc_c_string(g_nodes, node_op_name(n));
    fprintf(g_nodes, ", \"%s\"}, /* %d */\n", shape_str(dims, rank, shape, sizeof shape), g_nnodes);
    return g_nnodes++;
}

int trace_comm(const char *what, const char *kind, const char *tensor, const char *axes, const char *overlaps,
               long long bytes)
{
    fprintf(g_comms, "    {");
    esc_c_string(g_comms, what);
    fprintf(g_comms, ", \"%s\", ", kind);
    esc_c_string(g_comms, tensor);
    fprintf(g_comms, ", ");
    esc_c_string(g_comms, axes);
    fprintf(g_comms, ",\n     ");
    esc_c_string(g_comms, overlaps);
    fprintf(g_comms, ", %lld}, /* %d */\n", bytes, g_ncomms);
    return g_ncomms++;
}

/* What the schedule runs between instruction `from` (a start) and the
 * wait of the same reshard: "a, b, c", or "a .. z (12 nodes)". */
void trace_overlaps(const Program *pr, int from, char *buf, size_t cap)
{
    int r = pr->insts[from].reshard, first = -1, last = -1, count = 0;
    for (int i = from + 1; i < pr->ninsts; i++) {
        const Inst *in = &pr->insts[i];
        if (in->kind == INST_WAIT && in->reshard == r)
            break;
        if (in->kind != INST_COMPUTE)
            continue;
        if (first < 0)
            first = i;
        last = i;
        count++;
    }
    if (!count) {
        snprintf(buf, cap, "nothing: it is waited for at once");
        return;
    }
    if (count <= 3) {
        size_t n = 0;
        buf[0] = 0;
        for (int i = first; i <= last && n < cap; i++)
            if (pr->insts[i].kind == INST_COMPUTE)
                n += (size_t)snprintf(buf + n, cap - n, "%s%s", n ? ", " : "", pr->insts[i].node->label);
        return;
    }
    snprintf(buf, cap, "%s .. %s (%d nodes)", pr->insts[first].node->label, pr->insts[last].node->label, count);
}

void trace_tables_write(FILE *f)
{
    fclose(g_nodes);
    fclose(g_comms);
    fprintf(f, "\n/* ---- what traces name (--trace FILE): rt_enter(k) is rt_nodes[k], a collective's k rt_comms[k] ---- */\n\n"
               "static const RtNodeInfo rt_nodes[] = { /* name, op, local shape */\n");
    if (g_nnodes)
        fwrite(g_nodes_text, 1, g_nodes_len, f);
    else
        fprintf(f, "    {\"(none)\", \"\", \"\"},\n");
    fprintf(f, "};\n\nstatic const RtCommInfo rt_comms[] = { /* what, kind, tensor, axes or peer, overlaps, bytes */\n");
    if (g_ncomms)
        fwrite(g_comms_text, 1, g_comms_len, f);
    else
        fprintf(f, "    {\"(none)\", \"\", \"\", \"\", \"\", 0}, /* this program runs no collectives */\n");
    fprintf(f, "};\n");
    free(g_nodes_text);
    free(g_comms_text);
    g_nodes_text = g_comms_text = NULL;
    g_nodes = g_comms = NULL;
}
