/* emit_trace.c: the tables a rank program's traces name things by.
 *
 * While forward() is emitted, every node gets an entry in rt_nodes[]
 * (rt_enter(k) before its kernels) and every collective one in
 * rt_comms[] (rt_started(k, &req) after its start, rt_wait(&req, k) at
 * its wait). The tables are written before forward(), so emit_rank writes
 * forward() to memory first. Every model string reaches the tables as an
 * escaped C literal (esc_c_string); the indices are generated. The tables
 * being filled live in the rank file's Emitter (TraceTables).
 */
#include "codegen.h"

#include <stdlib.h>
#include <string.h>

void trace_tables_begin(TraceTables *tt)
{
    memset(tt, 0, sizeof *tt);
    tt->nodes = open_memstream(&tt->nodes_text, &tt->nodes_len);
    tt->comms = open_memstream(&tt->comms_text, &tt->comms_len);
    if (!tt->nodes || !tt->comms)
        abort();
}

int trace_node(TraceTables *tt, const Node *n, const int64_t *dims, int rank)
{
    char shape[128];
    fprintf(tt->nodes, "    {");
    esc_c_string(tt->nodes, n->label);
    fprintf(tt->nodes, ", ");
    esc_c_string(tt->nodes, node_op_name(n));
    fprintf(tt->nodes, ", \"%s\"}, /* %d */\n", shape_str(dims, rank, shape, sizeof shape), tt->nnodes);
    return tt->nnodes++;
}

int trace_comm(TraceTables *tt, const char *what, const char *kind, const char *tensor, const char *axes,
               const char *overlaps, long long bytes)
{
    fprintf(tt->comms, "    {");
    esc_c_string(tt->comms, what);
    fprintf(tt->comms, ", \"%s\", ", kind);
    esc_c_string(tt->comms, tensor);
    fprintf(tt->comms, ", ");
    esc_c_string(tt->comms, axes);
    fprintf(tt->comms, ",\n     ");
    esc_c_string(tt->comms, overlaps);
    fprintf(tt->comms, ", %lld}, /* %d */\n", bytes, tt->ncomms);
    return tt->ncomms++;
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

void trace_tables_write(TraceTables *tt, FILE *f)
{
    fclose(tt->nodes);
    fclose(tt->comms);
    fprintf(f, "\n/* ---- what traces name (--trace FILE): rt_enter(k) is rt_nodes[k], a collective's k rt_comms[k] ---- */\n\n"
               "static const RtNodeInfo rt_nodes[] = { /* name, op, local shape */\n");
    if (tt->nnodes)
        fwrite(tt->nodes_text, 1, tt->nodes_len, f);
    else
        fprintf(f, "    {\"(none)\", \"\", \"\"},\n");
    fprintf(f, "};\n\nstatic const RtCommInfo rt_comms[] = { /* what, kind, tensor, axes or peer, overlaps, bytes */\n");
    if (tt->ncomms)
        fwrite(tt->comms_text, 1, tt->comms_len, f);
    else
        fprintf(f, "    {\"(none)\", \"\", \"\", \"\", \"\", 0}, /* this program runs no collectives */\n");
    fprintf(f, "};\n");
    free(tt->nodes_text);
    free(tt->comms_text);
    memset(tt, 0, sizeof *tt);
}
