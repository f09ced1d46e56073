/* annotate.c: where shardings come from before propagation.
 *
 * Three sources, all checked the same way (the tensor exists, the spec has
 * its rank, every split dim is divisible): --shard NAME=SPEC flags, a
 * --shardings file (one NAME=SPEC per line, # comments), and the model's
 * own ONNX sharding specs, which name devices rather than mesh axes: each
 * sharded dim is matched to the mesh axis whose size is its shard count
 * and whose rank stride is the stride of its devices, and the whole device
 * list is then checked against that mapping.
 */
#include "partition.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* The tensor an annotation lands on, and how errors call it: a tensor the
 * user named is its name; one a node pattern found also names the node
 * and input it was read at, so that an error points at the model's
 * structure the user wrote, not only at an exporter's opaque name. */
typedef struct Target {
    const Tensor *t;
    const Node *reader; /* NULL: named directly */
    int slot;
} Target;

static const char *target_str(const Target *tg, char *buf, size_t cap)
{
    if (tg->reader)
        snprintf(buf, cap, "tensor \"%s\" (input %d of node \"%s\")", tg->t->name, tg->slot,
                 tg->reader->name);
    else
        snprintf(buf, cap, "tensor \"%s\"", tg->t->name);
    return buf;
}

/* lhs is what the user wrote left of '=' (a name or NODE:SLOT), for error
 * lines; what says where ("--shard", "FILE:LINE:"). */
static int add(AnnotationList *l, Arena *a, const Graph *g, const Mesh *m, const Target *tg,
               const char *lhs, const char *spec, Origin origin, const char *what, Diag *d)
{
    const Tensor *t = tg->t;
    char subject[512];
    target_str(tg, subject, sizeof subject);
    Sharding s;
    char err[160];
    if (sharding_parse(spec, m, &s, err, sizeof err)) {
        diag_add(d, "%s %s=%s: %s", what, lhs, spec, err);
        return -1;
    }
    if (s.rank != t->rank) {
        diag_add(d, "%s %s=%s: spec has %d dims but %s has rank %d", what, lhs, spec, s.rank, subject,
                 t->rank);
        return -1;
    }
    if (s.partial) {
        diag_add(d, "%s %s=%s: annotations cannot be partial", what, lhs, spec);
        return -1;
    }
    Diag sub;
    diag_init(&sub, NULL);
    if (sharding_check(&s, m, t, &sub)) {
        diag_add(d, "%s %s=%s: %s", what, lhs, spec, diag_first(&sub));
        diag_free(&sub);
        return -1;
    }
    diag_free(&sub);
    /* A split over an axis of size 1 is no split: drop it, so plans never
     * carry do-nothing collectives over one rank (a dp=1 mesh with the
     * batch annotated over dp is plain tensor parallelism). */
    for (int i = 0; i < s.rank; i++) {
        int k = 0;
        for (int j = 0; j < s.naxes[i]; j++)
            if (m->axes[s.axes[i][j]].size > 1)
                s.axes[i][k++] = s.axes[i][j];
        s.naxes[i] = (unsigned char)k;
    }
    /* An index by tensor id keeps a long --shardings file linear. */
    if (l->by_n < g->ntensors) {
        int *idx = arena_alloc(a, (size_t)g->ntensors * sizeof(int));
        if (l->by_n)
            memcpy(idx, l->by_tensor, (size_t)l->by_n * sizeof(int));
        l->by_tensor = idx;
        l->by_n = g->ntensors;
    }
    /* The same layout twice is one annotation (a pattern matching every
     * reader of a shared weight, or a line repeated); a different one is a
     * contradiction, and naming both sources is what lets it be fixed. */
    int seen = l->by_tensor[t->id] - 1;
    if (seen >= 0) {
        if (sharding_equal(&l->items[seen].sharding, &s))
            return 0;
        diag_add(d, "%s %s=%s: %s is already annotated as %s by %s", what, lhs, spec, subject,
                 l->items[seen].spec, l->items[seen].from);
        return -1;
    }
    l->by_tensor[t->id] = l->n + 1;
    if (l->n == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 16;
        l->items = realloc(l->items, (size_t)l->cap * sizeof(Annotation));
        if (!l->items)
            abort();
    }
    Annotation *an = &l->items[l->n++];
    an->tensor = arena_strdup(a, t->name);
    char buf[160];
    an->spec = arena_strdup(a, sharding_str(&s, m, buf, sizeof buf));
    size_t len = strlen(what) + strlen(lhs) + 2;
    char *from = arena_alloc(a, len);
    snprintf(from, len, "%s %s", what, lhs);
    an->from = from;
    an->sharding = s;
    an->origin = origin;
    return 0;
}

/* The input slot of a NODE:SLOT left-hand side: the digits after its last
 * ':', or -1 when it has none (then it can only be a tensor's name). */
static int lhs_slot(const char *lhs, size_t *node_len)
{
    const char *colon = strrchr(lhs, ':');
    if (!colon || colon == lhs || !colon[1] || strlen(colon + 1) > 6)
        return -1;
    int slot = 0;
    for (const char *q = colon + 1; *q; q++) {
        if (!isdigit((unsigned char)*q))
            return -1;
        slot = slot * 10 + (*q - '0');
    }
    *node_len = (size_t)(colon - lhs);
    return slot;
}

/* Nodes the model has: the backward, recomputed and once-per-step nodes
 * --train adds (some named after their forward node) must not catch a
 * pattern written for the model's own structure. */
static int model_node(const Node *n)
{
    return !n->grad && !n->recomputed && !n->per_step && !n->folded;
}

/* NODE:SLOT: every model node whose name matches NODE gives the tensor it
 * reads at input SLOT. A pattern (one of "*?[") goes through fnmatch(3)
 * without FNM_PATHNAME, so '*' crosses the '/' of exporters' module
 * paths; a plain NODE is compared exactly (a '\' in a node name stays
 * literal). Every node matched must have that input: a pattern that
 * catches a node it was not meant for is better refused than obeyed. */
static int add_by_node(AnnotationList *l, Arena *a, const Graph *g, const Mesh *m, const char *lhs,
                       const char *pattern, int slot, const char *spec, const char *what, Diag *d)
{
    int glob = strpbrk(pattern, "*?[") != NULL, matched = 0;
    for (int i = 0; i < g->nnodes; i++) {
        const Node *n = g->nodes[i];
        /* A node's exact name matches itself even when it holds "[": a
         * path copied from inspect must never miss its own node. */
        if (!model_node(n) || (strcmp(pattern, n->name) != 0 && (!glob || fnmatch(pattern, n->name, 0) != 0)))
            continue;
        matched++;
        if (slot >= n->ninputs || !n->inputs[slot]) {
            if (slot < n->ninputs)
                diag_add(d, "%s %s=%s: node \"%s\" (%s) has no input %d (the model omits it)", what, lhs,
                         spec, n->name, node_op_name(n), slot);
            else
                diag_add(d, "%s %s=%s: node \"%s\" (%s) has no input %d (it has %d input%s)", what, lhs,
                         spec, n->name, node_op_name(n), slot, n->ninputs, n->ninputs == 1 ? "" : "s");
            return -1;
        }
        Target tg = {n->inputs[slot], n, slot};
        if (add(l, a, g, m, &tg, lhs, spec, ORIGIN_USER, what, d))
            return -1;
    }
    if (matched)
        return 0;
    if (glob)
        diag_add(d, "%s %s=%s: pattern \"%s\" matches no node in the model (inspect --nodes lists them)",
                 what, lhs, spec, pattern);
    else
        diag_add(d, "%s %s=%s: no tensor named \"%s\" and no node named \"%s\" in the model", what, lhs,
                 spec, lhs, pattern);
    return -1;
}

int annotate_add_flag(AnnotationList *l, Arena *a, const Graph *g, const Mesh *m,
                      const char *arg, const char *what, Diag *d)
{
    /* The spec starts at the last "=[": a tensor name may hold '='. */
    const char *eq = NULL;
    for (const char *q = strstr(arg, "=["); q; q = strstr(q + 1, "=["))
        eq = q;
    if (!eq)
        eq = strchr(arg, '=');
    if (!eq || eq == arg) {
        diag_add(d, "%s %s: expected NAME=SPEC, e.g. W1=[_,tp]", what, arg);
        return -1;
    }
    char *name = strndup(arg, (size_t)(eq - arg));
    if (!name)
        abort();
    const char *spec = eq + 1;
    int rc = -1;
    /* A tensor's exact name always means that tensor, as it did before
     * patterns existed, whatever it holds (onnx::MatMul_5091, a
     * tf2onnx "dense/MatMul:0", even '*'). Only a name no tensor has is
     * read as NODE:SLOT. */
    const Tensor *t = graph_tensor_find(g, name);
    size_t node_len = 0;
    int slot = -1;
    if (t && t->rank >= 0) {
        Target tg = {t, NULL, 0};
        rc = add(l, a, g, m, &tg, name, spec, ORIGIN_USER, what, d);
    } else if ((slot = lhs_slot(name, &node_len)) >= 0) {
        char *pattern = strndup(name, node_len);
        if (!pattern)
            abort();
        rc = add_by_node(l, a, g, m, name, pattern, slot, spec, what, d);
        free(pattern);
    } else if (strpbrk(name, "*?[")) {
        diag_add(d, "%s %s=%s: no tensor named \"%s\"; a node pattern needs the input it annotates, "
                 "e.g. %s:1 for the tensor matched nodes read at input 1", what, name, spec, name, name);
    } else {
        diag_add(d, "%s %s=%s: no tensor named \"%s\" in the model", what, name, spec, name);
    }
    free(name);
    return rc;
}

/* Opens the --shardings file only if it is a regular file: stat before
 * open, since opening a FIFO blocks until a writer comes and a folder
 * reads as an empty file; O_NONBLOCK in case it was swapped since (it does
 * nothing to a regular file), and fstat checks what was opened. */
static FILE *open_regular(const char *path, Diag *d)
{
    struct stat st;
    if (stat(path, &st) != 0) {
        diag_add(d, "--shardings %s: %s", path, strerror(errno));
        return NULL;
    }
    int fd = -1;
    if (S_ISREG(st.st_mode)) {
        fd = open(path, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
        if (fd < 0) {
            diag_add(d, "--shardings %s: %s", path, strerror(errno));
            return NULL;
        }
        if (fstat(fd, &st) != 0)
            st.st_mode = 0;
    }
    if (!S_ISREG(st.st_mode)) {
        diag_add(d, "--shardings %s: not a regular file (%s)", path,
                 S_ISDIR(st.st_mode) ? "a directory" : S_ISFIFO(st.st_mode) ? "a FIFO"
                 : S_ISCHR(st.st_mode) ? "a character device" : "not a plain file");
        if (fd >= 0)
            close(fd);
        return NULL;
    }
    FILE *f = fdopen(fd, "r");
    if (!f) {
        diag_add(d, "--shardings %s: %s", path, strerror(errno));
        close(fd);
    }
    return f;
}

int annotate_add_file(AnnotationList *l, Arena *a, const Graph *g, const Mesh *m,
                      const char *path, Diag *d)
{
    FILE *f = open_regular(path, d);
    if (!f)
        return -1;
    char line[1024], what[600];
    int lineno = 0, rc = 0;
    while (rc == 0 && fgets(line, sizeof line, f)) {
        lineno++;
        char *hash = strchr(line, '#');
        if (hash)
            *hash = 0;
        char *s = line, *e = line + strlen(line);
        while (isspace((unsigned char)*s))
            s++;
        while (e > s && isspace((unsigned char)e[-1]))
            *--e = 0;
        if (!*s)
            continue;
        snprintf(what, sizeof what, "%s:%d:", path, lineno);
        rc = annotate_add_flag(l, a, g, m, s, what, d);
    }
    if (rc == 0 && ferror(f)) {
        diag_add(d, "--shardings %s: read error", path);
        rc = -1;
    }
    fclose(f);
    return rc;
}

/* Rank stride of mesh axis ax (row-major, last axis fastest). */
static int axis_stride(const Mesh *m, int ax)
{
    int s = 1;
    for (int i = m->naxes - 1; i > ax; i--)
        s *= m->axes[i].size;
    return s;
}

static int map_spec(const Mesh *m, const Graph *g, const ModelShardSpec *ms, Sharding *s, Diag *d)
{
    const Tensor *t = graph_tensor_find(g, ms->tensor);
    if (!t) {
        diag_add(d, "node \"%s\": ONNX sharding spec names tensor \"%s\", which does not exist",
                 ms->node, ms->tensor);
        return -1;
    }
    sharding_replicated(s, t->rank);
    int64_t shards = 1;
    for (int i = 0; i < ms->nsharded; i++)
        if (ck_mul_i64(shards, ms->num_shards[i] < 1 ? -1 : ms->num_shards[i], &shards)) {
            diag_add(d, "node \"%s\": sharding spec of \"%s\" has an invalid num_shards", ms->node,
                     ms->tensor);
            return -1;
        }
    if (ms->ndevices < shards) {
        diag_add(d, "node \"%s\": sharding spec of \"%s\" lists %d devices for %lld shards",
                 ms->node, ms->tensor, ms->ndevices, (long long)shards);
        return -1;
    }
    int mapped[IR_MAX_RANK];
    int64_t stride = shards;
    unsigned used = 0;
    for (int i = 0; i < ms->nsharded; i++) {
        int64_t ax = ms->axis[i] < 0 ? ms->axis[i] + t->rank : ms->axis[i];
        if (ax < 0 || ax >= t->rank) {
            diag_add(d, "node \"%s\": sharding spec of \"%s\": axis %lld is out of range", ms->node,
                     ms->tensor, (long long)ms->axis[i]);
            return -1;
        }
        stride /= ms->num_shards[i];
        int64_t dev_step = ms->num_shards[i] > 1 ? ms->devices[stride] - ms->devices[0] : 0;
        mapped[i] = -1;
        for (int a = 0; a < m->naxes && mapped[i] < 0; a++)
            if (!(used & (1u << a)) && m->axes[a].size == ms->num_shards[i] &&
                axis_stride(m, a) == dev_step)
                mapped[i] = a;
        if (mapped[i] < 0) {
            diag_add(d, "node \"%s\": sharding spec of \"%s\": %lld shards of dim %lld on devices stepping by %lld match no axis of the mesh",
                     ms->node, ms->tensor, (long long)ms->num_shards[i], (long long)ax,
                     (long long)dev_step);
            return -1;
        }
        used |= 1u << mapped[i];
        s->axes[ax][s->naxes[ax]++] = (unsigned char)mapped[i];
    }
    /* Every shard must sit where the mapping says. */
    for (int64_t k = 0; k < shards; k++) {
        int64_t rest = k, expect = ms->devices[0], st = shards;
        for (int i = 0; i < ms->nsharded; i++) {
            st /= ms->num_shards[i];
            expect += (rest / st) * axis_stride(m, mapped[i]);
            rest %= st;
        }
        if (ms->devices[k] != expect) {
            diag_add(d, "node \"%s\": sharding spec of \"%s\": shard %lld is on device %lld, but the mesh puts it on %lld",
                     ms->node, ms->tensor, (long long)k, (long long)ms->devices[k], (long long)expect);
            return -1;
        }
    }
    return sharding_check(s, m, t, d);
}

int annotate_add_model(AnnotationList *l, Arena *a, const Graph *g, const Mesh *m, Diag *d)
{
    for (int i = 0; i < g->nshard_specs; i++) {
        Sharding s;
        char spec[160], what[300];
        if (map_spec(m, g, &g->shard_specs[i], &s, d))
            return -1;
        sharding_str(&s, m, spec, sizeof spec);
        snprintf(what, sizeof what, "node \"%s\" sharding spec", g->shard_specs[i].node);
        Target tg = {graph_tensor_find(g, g->shard_specs[i].tensor), NULL, 0};
        if (add(l, a, g, m, &tg, g->shard_specs[i].tensor, spec, ORIGIN_MODEL, what, d))
            return -1;
    }
    return 0;
}
