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
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int add(AnnotationList *l, Arena *a, const Graph *g, const Mesh *m, const char *name,
               const char *spec, Origin origin, const char *what, Diag *d)
{
    const Tensor *t = graph_tensor_find(g, name);
    if (!t || t->rank < 0) {
        diag_add(d, "%s %s=%s: no tensor named \"%s\" in the model", what, name, spec, name);
        return -1;
    }
    Sharding s;
    char err[160];
    if (sharding_parse(spec, m, &s, err, sizeof err)) {
        diag_add(d, "%s %s=%s: %s", what, name, spec, err);
        return -1;
    }
    if (s.rank != t->rank) {
        diag_add(d, "%s %s=%s: spec has %d dims but tensor \"%s\" has rank %d", what, name, spec,
                 s.rank, name, t->rank);
        return -1;
    }
    if (s.partial) {
        diag_add(d, "%s %s=%s: annotations cannot be partial", what, name, spec);
        return -1;
    }
    Diag sub;
    diag_init(&sub, NULL);
    if (sharding_check(&s, m, t, &sub)) {
        diag_add(d, "%s %s=%s: %s", what, name, spec, diag_first(&sub));
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
    int seen = l->by_tensor[t->id] - 1;
    if (seen >= 0) {
        if (sharding_equal(&l->items[seen].sharding, &s))
            return 0;
        diag_add(d, "%s %s=%s: tensor \"%s\" is already annotated as %s", what, name, spec, name,
                 l->items[seen].spec);
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
    an->tensor = arena_strdup(a, name);
    char buf[160];
    an->spec = arena_strdup(a, sharding_str(&s, m, buf, sizeof buf));
    an->sharding = s;
    an->origin = origin;
    return 0;
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
    int rc = add(l, a, g, m, name, eq + 1, ORIGIN_USER, what, d);
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
        if (add(l, a, g, m, g->shard_specs[i].tensor, spec, ORIGIN_MODEL, what, d))
            return -1;
    }
    return 0;
}
