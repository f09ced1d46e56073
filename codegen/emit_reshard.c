/* emit_reshard.c: forward()'s instructions, the collectives above all.
 *
 * A reshard runs as steps (partition/reshard.c): a local step (a slice, or
 * turning a value partial) is a copy on this rank; the others are
 * collectives over the communicator of their ordered mesh axes, started at
 * the reshard's start instruction and waited for at its first reader
 * (program.c's schedule), with any later steps run at the wait. Packing
 * and unpacking (blocks that are not contiguous, padded blocks of an
 * uneven split) is written here, the same for both targets; the call
 * itself, its request or events and its wait are the target's
 * (EmitTarget.collective, .wait). An MoE layer's all-to-alls of its
 * dispatch buffer and back are the target's whole (EmitTarget.moe_move:
 * counts first, then only the filled columns; emit_moe.c says which).
 * Small all-reduces ready together go as
 * one fused call over a packed buffer. Every collective names its tensor,
 * its axes and the reshard that caused it; every wait says what it waits
 * for and why there; each gets an rt_comms[] entry (emit_trace.c).
 */
#include "codegen.h"

#include <stdlib.h>
#include <string.h>

int emit_step_axes(const Program *pr, int r, int j, unsigned char *out)
{
    const PlanReshard *rr = &pr->plan->reshards[r];
    const ReshardStep *s = &rr->r.steps[j];
    const Sharding *before = j ? &rr->r.steps[j - 1].after : &rr->src;
    int n = 0;
    switch (s->kind) {
    case COLL_ALL_GATHER:
        for (int k = s->after.naxes[s->dim]; k < before->naxes[s->dim]; k++)
            out[n++] = before->axes[s->dim][k];
        break;
    case COLL_SLICE:
    case COLL_REDUCE_SCATTER: /* the axes it appends to its dim, in order */
        for (int k = before->naxes[s->dim]; k < s->after.naxes[s->dim]; k++)
            out[n++] = s->after.axes[s->dim][k];
        break;
    default:
        for (int a = 0; a < pr->plan->mesh.naxes; a++)
            if (s->axes & (1u << a))
                out[n++] = (unsigned char)a;
    }
    return n;
}

void emit_comm_name(const Program *pr, const unsigned char *axes, int n, char *buf, size_t cap)
{
    size_t off = (size_t)snprintf(buf, cap, "comm");
    for (int i = 0; i < n; i++)
        off += (size_t)snprintf(buf + off, cap - off, "_%s", pr->plan->mesh.axes[axes[i]].name);
}

static int is_local(CollKind k)
{
    return k == COLL_SLICE || k == COLL_PARTIALIZE;
}

int emit_reshard_calls(const Program *pr, int r)
{
    int comm_steps = 0;
    for (int j = 0; pr->reshards[r].here && j < pr->plan->reshards[r].r.nsteps; j++)
        comm_steps += !is_local(pr->plan->reshards[r].r.steps[j].kind);
    return comm_steps && (pr->reshards[r].fused_leader < 0 || pr->reshards[r].fused_leader == r);
}

static const Sharding *step_before(const Program *pr, int r, int j)
{
    const PlanReshard *pr_r = &pr->plan->reshards[r];
    return j ? &pr_r->r.steps[j - 1].after : &pr_r->src;
}

/* Does step j of reshard r move a padded dim (an uneven split, sharding.c)?
 * Then the reshard search made it a whole-dim move (reshard.c), and the
 * blocks are cut to their valid part on the way. */
static int step_padded(const Program *pr, int r, int j)
{
    const PlanReshard *rr = &pr->plan->reshards[r];
    const ReshardStep *s = &rr->r.steps[j];
    const Mesh *m = &pr->plan->mesh;
    return s->dim >= 0 && (sharding_dim_uneven(step_before(pr, r, j), m, rr->tensor, s->dim) ||
                           sharding_dim_uneven(&s->after, m, rr->tensor, s->dim));
}

/* Opens the loop over the p blocks of a padded dim (a dim of n elements
 * in blocks of len) that packs or unpacks them: valid[q] is block q's part
 * inside the tensor, strides those of the whole tensor, strides_blk those
 * of one block (bdims), and dims block q's valid extent. The caller writes
 * the body and closes both braces. */
static void emit_block_loop(FILE *f, const char *what, int64_t n, int64_t len, int p, int dim, int rank,
                            const int64_t *bdims, const int64_t *swhole, const int64_t *sblk)
{
    fprintf(f, "    { /* %s */\n        static const int64_t valid[] = {", what);
    for (int q = 0; q < p; q++)
        fprintf(f, "%s%lld", q ? ", " : "", (long long)sharding_block_valid(n, len, q));
    fprintf(f, "}, strides[] = ");
    emit_dims(f, swhole, rank);
    fprintf(f, ", strides_blk[] = ");
    emit_dims(f, sblk, rank);
    fprintf(f, ";\n        for (int q = 0; q < %d; q++) {\n            int64_t dims[] = ", p);
    emit_dims(f, bdims, rank);
    fprintf(f, ";\n            dims[%d] = valid[q];\n", dim);
}

static int64_t numel(const Buffer *b)
{
    return b->bytes / (int64_t)dtype_size(b->dtype);
}

/* The mesh axes of a step, as a trace names them: "dp,tp". */
static void axes_list(const Program *pr, const unsigned char *axes, int n, char *buf, size_t cap)
{
    size_t off = 0;
    buf[0] = 0;
    for (int i = 0; i < n && off < cap; i++)
        off += (size_t)snprintf(buf + off, cap - off, "%s%s", i ? "," : "", pr->plan->mesh.axes[axes[i]].name);
}

/* A copy that traces show on targets that time them (rt_copy). */
static void trace_copy(Emitter *e, const char *event, int comm_id)
{
    if (e->t->traces_copies)
        fprintf(e->f, "    rt_copy(%s, %d);\n", event, comm_id);
}

/* Registers step j of reshard r in rt_comms[]; `overlaps` says what the
 * schedule runs while it is in flight. A local step (a slice) is
 * registered only where traces time copies, which then name it. */
static int step_comm(Emitter *e, int r, int j, const char *overlaps)
{
    const Program *pr = e->pr;
    const PlanReshard *rr = &pr->plan->reshards[r];
    const ReshardStep *s = &rr->r.steps[j];
    if (is_local(s->kind)) {
        if (!e->t->traces_copies)
            return -1;
        char what[ESC_TEXT_CAP];
        snprintf(what, sizeof what, "%s of %s (reshard %d, local)", coll_name(s->kind), rr->tensor->label, r);
        return trace_comm(&e->trace, what, coll_name(s->kind), rr->tensor->label, "", "nothing: a copy on this rank",
                          0);
    }
    unsigned char axes[MESH_MAX_AXES];
    int na = emit_step_axes(pr, r, j, axes);
    char what[ESC_TEXT_CAP], al[96];
    if (rr->r.nsteps > 1)
        snprintf(what, sizeof what, "%s of %s (reshard %d, step %d of %d)", coll_name(s->kind), rr->tensor->label, r,
                 j + 1, rr->r.nsteps);
    else
        snprintf(what, sizeof what, "%s of %s (reshard %d)", coll_name(s->kind), rr->tensor->label, r);
    axes_list(pr, axes, na, al, sizeof al);
    return trace_comm(&e->trace, what, coll_name(s->kind), rr->tensor->label, al, overlaps, (long long)s->bytes);
}

/* Step j of reshard r is a blocking all-reduce (pr->blocking). */
static int blocking_all_reduce(const Program *pr, int r, int j)
{
    return j == 0 && pr->reshards[r].blocking;
}

/* A local step: this rank's block of the whole dim (a slice), or the
 * value on coordinate 0 and zeros elsewhere (partialize). */
static void emit_local_step(Emitter *e, int r, int j, const unsigned char *axes, int na)
{
    const Program *pr = e->pr;
    FILE *f = e->f;
    const PlanReshard *rr = &pr->plan->reshards[r];
    const ReshardStep *s = &rr->r.steps[j];
    const Buffer *in = &pr->bufs[pr->reshards[r].steps[j].in], *out = &pr->bufs[pr->reshards[r].steps[j].out];
    int key = mesh_block_index(&pr->plan->mesh, pr->vrank, axes, na), p = mesh_group_size(&pr->plan->mesh, s->axes);
    size_t es = dtype_size(in->dtype);
    int64_t sin[IR_MAX_RANK], sout[IR_MAX_RANK];
    emit_strides(in->dims, in->rank, sin);
    emit_strides(out->dims, out->rank, sout);
    if (s->kind == COLL_PARTIALIZE) {
        if (key == 0)
            fprintf(f, "    k_copy(%s, %s, %lld); /* this rank keeps the value */\n", out->name, in->name,
                    (long long)in->bytes);
        else
            fprintf(f, "    k_zero(%s, %lld); /* coordinate %d holds zeros */\n", out->name, (long long)out->bytes,
                    key);
        return;
    }
    if (step_padded(pr, r, j)) { /* from the whole dim: the block's valid part, then zeros */
        int64_t len = out->dims[s->dim], dims[IR_MAX_RANK];
        int64_t valid = sharding_block_valid(rr->tensor->dims[s->dim], len, key);
        memcpy(dims, out->dims, sizeof dims);
        dims[s->dim] = valid;
        fprintf(f, "    { /* block %d of %d: %lld of its %lld along dim %d are inside the tensor */\n"
                   "        static const int64_t dims[] = ", key, p, (long long)valid, (long long)len, s->dim);
        emit_dims(f, dims, out->rank);
        fprintf(f, ", strides[] = ");
        emit_dims(f, sout, out->rank);
        fprintf(f, ", strides_in[] = ");
        emit_dims(f, sin, in->rank);
        fprintf(f, ";\n        k_strided_move(%s, strides, 0, %s, strides_in, %lld, %zu, %d, dims);\n", out->name,
                in->name, (long long)(key * len * sin[s->dim]), es, in->rank);
        if (valid < len) {
            dims[s->dim] = len - valid;
            fprintf(f, "        static const int64_t pad[] = ");
            emit_dims(f, dims, out->rank);
            fprintf(f, ";\n        k_strided_zero(%s, %zu, %d, pad, strides, %lld); /* padding */\n", out->name, es,
                    out->rank, (long long)(valid * sout[s->dim]));
        }
        fprintf(f, "    }\n");
        return;
    }
    fprintf(f, "    {\n        static const int64_t dims[] = ");
    emit_dims(f, out->dims, out->rank);
    fprintf(f, ", strides[] = ");
    emit_dims(f, sin, in->rank);
    fprintf(f, ";\n        k_strided_copy(%s, %s, %zu, %d, dims, strides, %lld); /* block %d of %d */\n    }\n",
            out->name, in->name, es, in->rank, (long long)(key * out->dims[s->dim] * sin[s->dim]), key, p);
}

/* Starts step j of reshard r (a local step runs to completion here);
 * `comm_id` is its rt_comms[] entry. */
static void emit_step_start(Emitter *e, int r, int j, int comm_id)
{
    const Program *pr = e->pr;
    FILE *f = e->f;
    const PlanReshard *rr = &pr->plan->reshards[r];
    const ReshardStep *s = &rr->r.steps[j];
    const StepBufs *sb = &pr->reshards[r].steps[j];
    const Buffer *in = &pr->bufs[sb->in], *out = &pr->bufs[sb->out];
    unsigned char axes[MESH_MAX_AXES];
    int na = emit_step_axes(pr, r, j, axes), p = mesh_group_size(&pr->plan->mesh, s->axes);
    char comm[96], bs[128], as[128], nm[ESC_NAME_CAP];
    emit_comm_name(pr, axes, na, comm, sizeof comm);
    size_t es = dtype_size(in->dtype);
    int64_t sin[IR_MAX_RANK];
    emit_strides(in->dims, in->rank, sin);
    fprintf(f, "    /* %s of %s over %s: %s -> %s, %lld bytes sent per rank */\n", coll_name(s->kind),
            CMT(rr->tensor->name, nm), comm + 5, sharding_str(step_before(pr, r, j), &pr->plan->mesh, bs, sizeof bs),
            sharding_str(&s->after, &pr->plan->mesh, as, sizeof as), (long long)s->bytes);
    if (is_local(s->kind)) {
        trace_copy(e, "RT_EV_LOCAL", comm_id);
        emit_local_step(e, r, j, axes, na);
        return;
    }
    MoeMove m;
    if (j == 0 && e->t->moe_move && emit_moe_move(e->pr, r, &m)) { /* (the bytes above are its worst case) */
        e->t->moe_move(e, r, &m, comm_id, 0);
        return;
    }
    if (sb->pack >= 0)
        trace_copy(e, "RT_EV_PACK", comm_id);
    CollCall c = {s->kind, r, comm_id, comm, in->name, out->name, numel(in), in->dtype, p, 0};
    switch (s->kind) {
    case COLL_ALL_REDUCE:
        c.blocking = blocking_all_reduce(pr, r, j);
        break;
    case COLL_ALL_GATHER:
        c.recv = sb->unpack >= 0 ? pr->bufs[sb->unpack].name : out->name;
        break;
    case COLL_REDUCE_SCATTER:
    case COLL_ALL_TO_ALL: {
        int dim = s->kind == COLL_ALL_TO_ALL ? s->dim_to : s->dim;
        int64_t bdims[IR_MAX_RANK];
        memcpy(bdims, in->dims, sizeof bdims);
        bdims[dim] /= p;
        c.count = numel(in) / p;
        if (s->kind == COLL_ALL_TO_ALL)
            c.recv = pr->bufs[sb->unpack].name;
        if (step_padded(pr, r, j)) { /* reduce-scatter from the whole dim: p zero-padded blocks */
            int64_t len = out->dims[dim], sblk[IR_MAX_RANK];
            c.count = numel(out);
            c.send = pr->bufs[sb->pack].name;
            emit_strides(out->dims, out->rank, sblk);
            char what[128];
            snprintf(what, sizeof what, "pack: block q of dim %d (valid[q] of its %lld, then zeros) goes to group rank q",
                     dim, (long long)len);
            emit_block_loop(f, what, rr->tensor->dims[s->dim], len, p, dim, in->rank, out->dims, sin, sblk);
            fprintf(f, "            if (valid[q] < %lld)\n                k_zero(%s + q * %lld, %lld);\n"
                       "            k_strided_move(%s + q * %lld, strides_blk, 0, %s, strides, q * %lld, %zu, %d, dims);\n"
                       "        }\n    }\n",
                    (long long)len, c.send, (long long)c.count, (long long)(c.count * (int64_t)es), c.send,
                    (long long)c.count, in->name, (long long)(len * sin[dim]), es, in->rank);
        } else if (sb->pack >= 0) {
            c.send = pr->bufs[sb->pack].name;
            fprintf(f, "    { /* pack: block q of dim %d goes to group rank q */\n"
                       "        static const int64_t dims[] = ", dim);
            emit_dims(f, bdims, in->rank);
            fprintf(f, ", strides[] = ");
            emit_dims(f, sin, in->rank);
            fprintf(f, ";\n        for (int q = 0; q < %d; q++)\n"
                       "            k_strided_copy(%s + q * %lld, %s, %zu, %d, dims, strides, q * %lld);\n    }\n",
                    p, c.send, (long long)c.count, in->name, es, in->rank, (long long)(bdims[dim] * sin[dim]));
        }
        break;
    }
    default:
        return;
    }
    e->t->collective(e, &c);
}

/* Completes step j of reshard r (wait and unpack); local steps are no-ops. */
static void emit_step_finish(Emitter *e, int r, int j, int comm_id)
{
    const Program *pr = e->pr;
    FILE *f = e->f;
    const ReshardStep *s = &pr->plan->reshards[r].r.steps[j];
    const StepBufs *sb = &pr->reshards[r].steps[j];
    if (is_local(s->kind))
        return;
    MoeMove m;
    if (j == 0 && e->t->moe_move && emit_moe_move(e->pr, r, &m)) {
        e->t->moe_move(e, r, &m, comm_id, 1);
        return;
    }
    const Buffer *in = &pr->bufs[sb->in], *out = &pr->bufs[sb->out];
    e->t->wait(e, r, comm_id, blocking_all_reduce(pr, r, j));
    if (sb->unpack < 0)
        return;
    trace_copy(e, "RT_EV_UNPACK", comm_id);
    int p = mesh_group_size(&pr->plan->mesh, s->axes);
    size_t es = dtype_size(in->dtype);
    int64_t sout[IR_MAX_RANK], bdims[IR_MAX_RANK];
    emit_strides(out->dims, out->rank, sout);
    if (s->kind == COLL_ALL_GATHER && step_padded(pr, r, j)) {
        int64_t len = in->dims[s->dim], sin[IR_MAX_RANK];
        emit_strides(in->dims, in->rank, sin);
        char what[128];
        snprintf(what, sizeof what, "unpack: the block from group rank q lands at q * %lld of dim %d, its padding dropped",
                 (long long)len, s->dim);
        emit_block_loop(f, what, pr->plan->reshards[r].tensor->dims[s->dim], len, p, s->dim, in->rank, in->dims, sout,
                        sin);
        fprintf(f, "            k_strided_move(%s, strides, q * %lld, %s + q * %lld, strides_blk, 0, %zu, %d, dims);\n"
                   "        }\n    }\n",
                out->name, (long long)(len * sout[s->dim]), pr->bufs[sb->unpack].name, (long long)numel(in), es,
                in->rank);
        return;
    }
    memcpy(bdims, in->dims, sizeof bdims);
    if (s->kind == COLL_ALL_TO_ALL)
        bdims[s->dim_to] /= p;
    int64_t blk = s->kind == COLL_ALL_GATHER ? numel(in) : numel(in) / p;
    fprintf(f, "    { /* unpack: the block from group rank q lands at position q of dim %d */\n"
               "        static const int64_t dims[] = ", s->dim);
    emit_dims(f, bdims, in->rank);
    fprintf(f, ", strides[] = ");
    emit_dims(f, sout, out->rank);
    fprintf(f, ";\n        for (int q = 0; q < %d; q++)\n"
               "            k_strided_store(%s, %s + q * %lld, %zu, %d, dims, strides, q * %lld);\n    }\n",
            p, out->name, pr->bufs[sb->unpack].name, (long long)blk, es, in->rank,
            (long long)(in->dims[s->dim] * sout[s->dim]));
}

/* Members of each fused call in reshard order: fused_next[m] is the next
 * member after m (-1 at the end), built once per file so a program with
 * many fused calls stays linear; comm_of[r], reshard r's rt_comms[] entry,
 * is set where it starts and read where it is waited for. */
void emit_reshards_begin(Emitter *e)
{
    const Program *pr = e->pr;
    int n = pr->plan->nreshards;
    e->fused_next = malloc((size_t)(n + 1) * sizeof(int));
    e->comm_of = malloc((size_t)(n + 1) * sizeof(int));
    int *last = malloc((size_t)(n + 1) * sizeof(int));
    if (!e->fused_next || !e->comm_of || !last)
        abort();
    for (int m = 0; m <= n; m++)
        e->fused_next[m] = last[m] = e->comm_of[m] = -1;
    for (int m = 0; m < n; m++) {
        int l = pr->reshards[m].fused_leader;
        if (l < 0 || l == m)
            continue;
        e->fused_next[last[l] >= 0 ? last[l] : l] = m;
        last[l] = m;
    }
    free(last);
}

void emit_reshards_end(Emitter *e)
{
    free(e->fused_next);
    free(e->comm_of);
    e->fused_next = e->comm_of = NULL;
}

/* A fused all-reduce: members packed into one buffer, one call, unpacked
 * at the wait. */
static void emit_fused(Emitter *e, int leader, int start, int at)
{
    const Program *pr = e->pr;
    const Plan *p = pr->plan;
    FILE *f = e->f;
    const Buffer *send = &pr->bufs[pr->reshards[leader].fused_send], *recv = &pr->bufs[pr->reshards[leader].fused_recv];
    unsigned char axes[MESH_MAX_AXES];
    int na = emit_step_axes(pr, leader, 0, axes);
    char comm[96], nm[ESC_NAME_CAP];
    emit_comm_name(pr, axes, na, comm, sizeof comm);
    if (start) {
        char what[ESC_TEXT_CAP], tensors[ESC_TEXT_CAP], al[96], overlaps[ESC_TEXT_CAP];
        size_t n = 0;
        int64_t bytes = 0;
        tensors[0] = 0;
        for (int m = leader; m >= 0 && n < sizeof tensors; m = e->fused_next[m]) {
            n += (size_t)snprintf(tensors + n, sizeof tensors - n, "%s%s", n ? ", " : "", p->reshards[m].tensor->label);
            bytes += p->reshards[m].r.steps[0].bytes;
        }
        snprintf(what, sizeof what, "%s (reshard %d)", pr->reshards[leader].bucket ? "gradient bucket" : "fused all-reduce",
                 leader);
        axes_list(pr, axes, na, al, sizeof al);
        trace_overlaps(pr, at, overlaps, sizeof overlaps);
        e->comm_of[leader] = trace_comm(&e->trace, what, "all-reduce", tensors, al, overlaps, (long long)bytes);
        if (pr->reshards[leader].bucket) {
            const Node *first = pr->insts[pr->reshards[leader].wait_at].node;
            fprintf(f, "\n    /* start gradient bucket (reshard %d): all-reduce over %s of %lld bytes, the gradients of",
                    leader, comm + 5, (long long)bytes);
            for (int m = leader; m >= 0; m = e->fused_next[m]) {
                const Node *upd = NULL; /* the update that reads it */
                for (int i = 0; !upd && i < pr->g->nnodes; i++)
                    if (ir_output_in_place(pr->g->nodes[i], 0) >= 0 && p->nodes[i].in_reshard[1] == m)
                        upd = pr->g->nodes[i];
                fprintf(f, "\n     *   %s", CMT(p->reshards[m].tensor->name, nm));
                if (upd)
                    fprintf(f, " (of %s)", CMT(upd->inputs[0]->name, nm));
            }
            fprintf(f, "\n     * now that the last of them is computed (--bucket-mb); backward goes on meanwhile,\n"
                       "     * and it is waited for at the first update that reads it, node %s */\n",
                    first ? CMT(first->name, nm) : "(end)");
        } else {
            fprintf(f, "\n    /* start fused all-reduce over %s of", comm + 5);
            for (int m = leader; m >= 0; m = e->fused_next[m])
                fprintf(f, " %s", CMT(p->reshards[m].tensor->name, nm));
            fprintf(f, ": small all-reduces ready together, one call over a packed buffer (--fuse-bytes) */\n");
        }
    } else {
        fprintf(f, "\n    /* wait for the %s of reshard %d here: its first member's reader is next */\n",
                pr->reshards[leader].bucket ? "gradient bucket" : "fused all-reduce", leader);
        e->t->wait(e, leader, e->comm_of[leader], 0);
    }
    trace_copy(e, start ? "RT_EV_PACK" : "RT_EV_UNPACK", e->comm_of[leader]);
    int64_t off = 0;
    for (int m = leader; m >= 0; m = e->fused_next[m]) {
        const Buffer *in = &pr->bufs[pr->reshards[m].steps[0].in], *out = &pr->bufs[pr->reshards[m].steps[0].out];
        if (start)
            fprintf(f, "    k_copy((char *)%s + %lld, %s, %lld);\n", send->name, (long long)off, in->name,
                    (long long)in->bytes);
        else
            fprintf(f, "    k_copy(%s, (char *)%s + %lld, %lld);\n", out->name, recv->name, (long long)off,
                    (long long)out->bytes);
        off += in->bytes;
    }
    if (start) {
        CollCall c = {COLL_ALL_REDUCE, leader, e->comm_of[leader], comm, send->name, recv->name,
                      off / (int64_t)dtype_size(send->dtype), send->dtype, 0, 0};
        e->t->collective(e, &c);
    }
}

/* `rt_node = "...";`: the node the runtime names in its errors. */
static void emit_rt_node(FILE *f, const char *label)
{
    fputs("    rt_node = ", f);
    esc_c_string(f, label);
    fputs(";\n", f);
}

static void emit_inst_body(Emitter *e, int i);

void emit_inst(Emitter *e, int i)
{
    const Program *pr = e->pr;
    FILE *f = e->f;
    const Inst *in = &pr->insts[i];
    if (in->kind == INST_COMPUTE) {
        if (emit_node(pr, in->node, &e->trace, f, e->d))
            e->rc = -1;
        int a = pr->nodes[in->node->id].accum_buf;
        if (a >= 0) {
            const Buffer *y = &pr->bufs[pr->tensor_buf[in->node->outputs[0]->id]], *acc = &pr->bufs[a];
            fprintf(f, "    /* --accum: summed over the microbatches; the last leaves the mean in %s */\n"
                       "    k_accumulate_f32(%s, %s, %lld, g_micro, ACCUM);\n",
                    y->name, y->name, acc->name, (long long)(y->bytes / 4));
        }
        return;
    }
    /* (a fused member's line is a comment; optimizer_step() runs once, after the last microbatch) */
    if (in->reshard < 0 || !pr->reshards[in->reshard].last_micro || i >= pr->first_update) {
        emit_inst_body(e, i);
        return;
    }
    fprintf(f, "\n    if (g_micro == ACCUM) { /* the last microbatch only (--accum) */");
    emit_inst_body(e, i);
    fprintf(f, "    }\n");
}

static void emit_inst_body(Emitter *e, int i)
{
    const Program *pr = e->pr;
    FILE *f = e->f;
    const Inst *in = &pr->insts[i];
    if (in->reshard < 0) {
        int m = -1 - in->reshard;
        char nm[ESC_NAME_CAP];
        fprintf(f, "\n    /* reshard %d of %s: %s in the fused call of reshard %d */\n", m,
                CMT(pr->plan->reshards[m].tensor->name, nm), in->kind == INST_START ? "started" : "completed",
                pr->reshards[m].fused_leader);
        return;
    }
    const PlanReshard *rr = &pr->plan->reshards[in->reshard];
    int r = in->reshard;
    if (in->kind == INST_START && e->t->reshard_check && e->t->reshard_check(e, r)) {
        e->rc = -1;
        return;
    }
    if (pr->reshards[r].fused_leader == r) {
        emit_fused(e, r, in->kind == INST_START, i);
        return;
    }
    char nm[ESC_NAME_CAP], why[ESC_TEXT_CAP], who[ESC_NAME_CAP];
    if (in->kind == INST_START) {
        fprintf(f, "\n    /* start reshard %d of %s: %s */\n", r, CMT(rr->tensor->name, nm), CMT(rr->reason, why));
        emit_rt_node(f, in->node ? in->node->label : "(start)");
        char overlaps[ESC_TEXT_CAP];
        trace_overlaps(pr, i, overlaps, sizeof overlaps);
        e->comm_of[r] = step_comm(e, r, 0, overlaps);
        emit_step_start(e, r, 0, e->comm_of[r]);
        return;
    }
    fprintf(f, "\n    /* wait for reshard %d of %s here: %s is its first reader */\n", r, CMT(rr->tensor->name, nm),
            in->node ? CMT(in->node->name, who) : "the graph output");
    emit_rt_node(f, in->node ? in->node->label : "(outputs)");
    emit_step_finish(e, r, 0, e->comm_of[r]);
    for (int j = 1; j < rr->r.nsteps; j++) {
        int c = step_comm(e, r, j, "nothing: a later step, run at the wait of the first");
        emit_step_start(e, r, j, c);
        emit_step_finish(e, r, j, c);
    }
}
