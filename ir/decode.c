/* decode.c: compile --decode, a language model's step turned into a
 * decoder that keeps its key-value cache in place.
 *
 * An exported model with a cache ("with past": Optimum's and the
 * exporters' past_key_values.N.key / present.N.key) computes, per layer,
 * present = Concat(past, new) along the positions and attends over it;
 * run one step per launch, the whole cache is copied in and out each
 * token. Here the model is loaded for one new position after max_seq - 1
 * past ones (frontend/load.c binds the dims), and each such Concat becomes
 * a KvCacheWrite: the new position is written into a cache of max_seq
 * slots at the decoding position, and the cache is the value the
 * attention reads, kept by the program from one forward() to the next
 * (codegen/memplan.c keeps it live throughout). The past inputs and the
 * present outputs leave the graph.
 *
 * Slot order is position order, which is not the Concat's (past first,
 * the new position last). Attention does not depend on the order of its
 * keys as long as the mask follows them, and the program writes the mask
 * in slot order: 1 up to the current position, 0 after it, so the
 * unwritten slots (zeros) get the model's own masked-out score and no
 * weight. The causal part of the model's mask allows every key to the one
 * query of a step, whose position the model takes as the last.
 */
#include "ir.h"

#include <stdlib.h>
#include <string.h>

static const Tensor *past_source(const Tensor *t)
{
    /* Through Identity and one-input Concat (what exporters put on a cache) */
    while (t && t->producer && !t->is_input &&
           (t->producer->op == OP_IDENTITY || (t->producer->op == OP_CONCAT && t->producer->ninputs == 1)))
        t = t->producer->inputs[0];
    return t && t->is_input && !t->is_initializer ? t : NULL;
}

/* Is output o = Concat(past..., new) along the cache's axis? Sets *axis. */
static Node *cache_concat(const Tensor *o, const Tensor **past, int *axis)
{
    Node *n = o->producer;
    if (!n || n->op != OP_CONCAT || n->ninputs != 2 || !n->inputs[0] || !n->inputs[1])
        return NULL;
    const Tensor *p = past_source(n->inputs[0]), *x = n->inputs[1];
    int64_t ax = node_attr_int(n, "axis", 0);
    if (ax < 0)
        ax += o->rank;
    if (!p || ax < 0 || ax >= o->rank || p->rank != o->rank || x->rank != o->rank)
        return NULL;
    for (int i = 0; i < o->rank; i++)
        if (i != ax && (p->dims[i] != o->dims[i] || x->dims[i] != o->dims[i]))
            return NULL;
    *past = p;
    *axis = (int)ax;
    return n;
}

static Tensor *find_input(Graph *g, const char *name)
{
    for (int i = 0; i < g->ninputs; i++)
        if (strcmp(g->inputs[i]->name, name) == 0)
            return g->inputs[i];
    return NULL;
}

/* --kv-cache's next IN=OUT item from s: its length in *n; returns where
 * the one after it starts. */
static const char *kv_item(const char *s, size_t *n)
{
    const char *end = strchr(s, ',');
    *n = end ? (size_t)(end - s) : strlen(s);
    return s + *n + (end != NULL);
}

/* Is item (n bytes) "IN=OUT" for input in and output o? */
static int item_is(const char *item, size_t n, const Tensor *in, const Tensor *o)
{
    size_t li = strlen(in->name), lo = strlen(o->name);
    return n == li + 1 + lo && memcmp(item, in->name, li) == 0 && item[li] == '=' &&
           memcmp(item + li + 1, o->name, lo) == 0;
}

/* Is output o named as in's pair by --kv-cache? (NULL kv: any pair) */
static int named_pair(const char *kv, const Tensor *in, const Tensor *o)
{
    size_t n;
    for (const char *s = kv, *next; s && *s; s = next) {
        next = kv_item(s, &n);
        if (item_is(s, n, in, o))
            return 1;
    }
    return !kv;
}

/* Drops the nodes nothing reads any more (the caches' past chains). */
static int check_step_input(const Tensor *t, int64_t batch, int64_t len, const char *what, Diag *d)
{
    if (!t)
        return 0;
    if (t->rank != 2 || t->dims[0] != batch || t->dims[1] != len || (t->dtype != DT_I64 && t->dtype != DT_I32)) {
        char buf[64];
        diag_add(d, "--decode: graph input \"%s\" is %s %s; the %s of one step is int64 [%lld, %lld]", t->label,
                 dtype_name(t->dtype), shape_str(t->dims, t->rank, buf, sizeof buf), what, (long long)batch,
                 (long long)len);
        return -1;
    }
    return 0;
}

int ir_build_decode(Graph *g, const DecodeOptions *o, Diag *d)
{
    int npairs = 0, kept = 0;
    const Tensor **pairs = malloc((size_t)(2 * g->noutputs + 2) * sizeof *pairs); /* past, present of each */
    if (!pairs)
        abort();
    graph_link_consumers(g);
    for (int i = 0; i < g->noutputs; i++) {
        Tensor *out = g->outputs[i];
        const Tensor *past = NULL;
        int axis = 0;
        Node *n = cache_concat(out, &past, &axis);
        if (!n || !named_pair(o->kv, past, out)) {
            g->outputs[kept++] = out;
            continue;
        }
        if (out->dims[axis] != o->max_seq) {
            diag_add(d, "--decode: cache output \"%s\" holds %lld positions, not --max-seq %lld (bind the past "
                     "length to %lld)", out->label, (long long)out->dims[axis], (long long)o->max_seq,
                     (long long)o->max_seq - 1);
            free(pairs);
            return -1;
        }
        if (n->inputs[1]->dims[axis] != 1) {
            diag_add(d, "--decode: node \"%s\" adds %lld positions to the cache; a decoding step adds one",
                     n->label, (long long)n->inputs[1]->dims[axis]);
            free(pairs);
            return -1;
        }
        n->op = OP_KV_CACHE_WRITE;
        n->op_type = NULL;
        n->inputs[0] = n->inputs[1];
        n->ninputs = 1;
        n->nattrs = 0;
        node_attr_set_int(g, n, "axis", axis);
        node_attr_set_int(g, n, "slots", o->max_seq);
        out->is_output = 0;
        pairs[2 * npairs] = past;
        pairs[2 * npairs++ + 1] = out;
    }
    g->noutputs = kept;
    size_t len; /* --kv-cache: every pair named must have been found */
    for (const char *s = o->kv, *next; s && *s; s = next) {
        next = kv_item(s, &len);
        int found = 0;
        for (int i = 0; i < npairs && !found; i++)
            found = item_is(s, len, pairs[2 * i], pairs[2 * i + 1]);
        if (!found) {
            free(pairs);
            diag_add(d, "--kv-cache %.*s: no graph output of that name is a Concat of that input and one new "
                     "position", (int)(len > 200 ? 200 : len), s);
            return -1;
        }
    }
    free(pairs);
    if (!npairs) {
        diag_add(d, "--decode: no key-value cache found (no graph output is a Concat of a graph input and the new "
                 "position); name the pairs with --kv-cache PAST=PRESENT,...");
        return -1;
    }
    ir_drop_dead(g);

    /* The past inputs: nothing may read them now. */
    kept = 0;
    for (int i = 0; i < g->ninputs; i++) {
        Tensor *t = g->inputs[i];
        int live = 0;
        for (int c = 0; c < t->nconsumers; c++)
            live |= !t->consumers[c]->folded;
        if (live || strcmp(t->name, "input_ids") == 0 || strcmp(t->name, "position_ids") == 0 ||
            strcmp(t->name, "attention_mask") == 0)
            g->inputs[kept++] = t;
        else
            t->is_input = 0;
    }
    g->ninputs = kept;
    g->decode_ids = find_input(g, "input_ids");
    g->decode_positions = find_input(g, "position_ids");
    g->decode_mask = find_input(g, "attention_mask");
    if (!g->decode_ids) {
        diag_add(d, "--decode: the model has no graph input named input_ids (the token ids the program feeds)");
        return -1;
    }
    for (int i = 0; i < g->ninputs; i++) {
        const Tensor *t = g->inputs[i];
        if (t != g->decode_ids && t != g->decode_positions && t != g->decode_mask) {
            diag_add(d, "--decode: graph input \"%s\" is neither the token ids, the positions, the attention mask "
                     "nor a cache the program keeps (name its pair with --kv-cache)", t->label);
            return -1;
        }
    }
    int64_t batch = g->decode_ids->dims[0];
    if (check_step_input(g->decode_ids, batch, 1, "token ids", d) ||
        check_step_input(g->decode_positions, batch, 1, "positions", d) ||
        check_step_input(g->decode_mask, batch, o->max_seq, "attention mask", d))
        return -1;
    if (g->noutputs != 1) {
        diag_add(d, "--decode: the model has %d outputs besides its caches; it must have one, the logits", g->noutputs);
        return -1;
    }
    const Tensor *lg = g->outputs[0];
    if (!(lg->rank == 3 && lg->dims[0] == batch && lg->dims[1] == 1) && !(lg->rank == 2 && lg->dims[0] == batch)) {
        char buf[64];
        diag_add(d, "--decode: output \"%s\" is %s; the logits of one step are [%lld, 1, vocab]", lg->label,
                 shape_str(lg->dims, lg->rank, buf, sizeof buf), (long long)batch);
        return -1;
    }
    if (lg->dtype != DT_F32) {
        diag_add(d, "--decode: output \"%s\" is %s; the logits must be float32", lg->label, dtype_name(lg->dtype));
        return -1;
    }
    g->decode_logits = lg;
    g->decode_slots = o->max_seq;
    g->decode_generate = o->generate;
    g->decode_temperature = o->temperature;
    g->decode_seed = o->seed;
    return 0;
}
