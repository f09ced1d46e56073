/* sharding.c: sharding specs, their text form and local shapes.
 *
 * Text form, like JAX's PartitionSpec: one entry per tensor dim in
 * brackets, "_" for replicated, "a+b" for a dim split over axes a (major)
 * then b (minor); a trailing " partial(a,b)" marks unreduced axes.
 *
 * Uneven splits: a dim of size N over K = n1*...*nk shards that K does not
 * divide is cut into blocks of L = ceil(N/K), and every rank stores a
 * full block of L, the part past N (on the last ranks) being padding.
 * Blocks are made of whole units of the dim (Tensor.split_unit, units.c):
 * a dim of 12 heads x 64 over 8 shards is cut into blocks of 2 heads, 128
 * elements, so a Reshape can keep it split; the last two shards are all
 * padding. An even split is the same in any unit.
 * Padding rather than ragged blocks keeps every rank's local shape, and so
 * every collective's count, the same, which NCCL needs (it has no
 * all-gatherv) and which lets one emitter serve all ranks. Padding is
 * never observed: it is zero in weights and inputs, dropped by gathers and
 * output writes, and zeroed before a node sums over the dim (see
 * emit_ops.c); rules that cannot tolerate it (a dim cut inside a unit, a
 * non-linear reduction) refuse the split (rule_factor_can_pad). More
 * shards than the dim has units leave the last ranks all padding: 4
 * heads over tp=8 run on ranks 0-3 (XLA pads alike).
 */
#include "partition.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

void sharding_replicated(Sharding *s, int rank)
{
    memset(s, 0, sizeof(*s));
    s->rank = rank;
}

int sharding_equal(const Sharding *a, const Sharding *b)
{
    if (a->rank != b->rank || a->partial != b->partial)
        return 0;
    for (int i = 0; i < a->rank; i++) {
        if (a->naxes[i] != b->naxes[i])
            return 0;
        for (int k = 0; k < a->naxes[i]; k++)
            if (a->axes[i][k] != b->axes[i][k])
                return 0;
    }
    return 1;
}

int sharding_is_replicated(const Sharding *s)
{
    return sharding_used_axes(s) == 0 && s->partial == 0;
}

unsigned sharding_used_axes(const Sharding *s)
{
    unsigned used = 0;
    for (int i = 0; i < s->rank; i++)
        for (int k = 0; k < s->naxes[i]; k++)
            used |= 1u << s->axes[i][k];
    return used;
}

int64_t sharding_dim_shards(const Sharding *s, const Mesh *m, int dim)
{
    int64_t n = 1;
    for (int k = 0; k < s->naxes[dim]; k++)
        n *= m->axes[s->axes[dim][k]].size;
    return n;
}

static int parse_axis(const char **pp, const Mesh *m, char *err, size_t errcap)
{
    const char *p = *pp;
    size_t n = 0;
    while (isalnum((unsigned char)p[n]) || p[n] == '_')
        n++;
    char name[64];
    snprintf(name, sizeof name, "%.*s", (int)(n < 63 ? n : 63), p);
    int a = n ? mesh_axis_find(m, name) : -1;
    if (a < 0) {
        snprintf(err, errcap, n ? "unknown mesh axis \"%s\"" : "expected a mesh axis name", name);
        return -1;
    }
    *pp = p + n;
    return a;
}

int sharding_parse(const char *text, const Mesh *m, Sharding *s, char *err, size_t errcap)
{
    memset(s, 0, sizeof(*s));
    const char *p = text;
    unsigned used = 0;
    while (*p == ' ')
        p++;
    if (*p++ != '[') {
        snprintf(err, errcap, "expected \"[\"");
        return -1;
    }
    while (*p == ' ')
        p++;
    if (*p == ']') {
        p++; /* a scalar */
    } else {
        for (;;) {
            if (s->rank == IR_MAX_RANK) {
                snprintf(err, errcap, "more than %d dims", IR_MAX_RANK);
                return -1;
            }
            int dim = s->rank++;
            while (*p == ' ')
                p++;
            if (*p == '_') {
                p++;
            } else {
                for (;;) {
                    int a = parse_axis(&p, m, err, errcap);
                    if (a < 0)
                        return -1;
                    if (used & (1u << a)) {
                        snprintf(err, errcap, "axis \"%s\" is used twice", m->axes[a].name);
                        return -1;
                    }
                    used |= 1u << a;
                    s->axes[dim][s->naxes[dim]++] = (unsigned char)a;
                    if (*p != '+')
                        break;
                    p++;
                }
            }
            while (*p == ' ')
                p++;
            if (*p == ']') {
                p++;
                break;
            }
            if (*p++ != ',') {
                snprintf(err, errcap, "expected \",\" or \"]\"");
                return -1;
            }
        }
    }
    while (*p == ' ')
        p++;
    if (strncmp(p, "partial(", 8) == 0) {
        p += 8;
        for (;;) {
            int a = parse_axis(&p, m, err, errcap);
            if (a < 0)
                return -1;
            if ((used | s->partial) & (1u << a)) {
                snprintf(err, errcap, "axis \"%s\" is used twice", m->axes[a].name);
                return -1;
            }
            s->partial |= 1u << a;
            if (*p == ')')
                break;
            if (*p++ != ',') {
                snprintf(err, errcap, "expected \",\" or \")\" in partial(...)");
                return -1;
            }
        }
        p++;
    }
    while (*p == ' ')
        p++;
    if (*p) {
        snprintf(err, errcap, "unexpected \"%s\"", p);
        return -1;
    }
    return 0;
}

char *sharding_str(const Sharding *s, const Mesh *m, char *buf, size_t cap)
{
    size_t off = 0;
#define PUT(...) (off += (off < cap ? (size_t)snprintf(buf + off, cap - off, __VA_ARGS__) : 0))
    PUT("[");
    for (int i = 0; i < s->rank; i++) {
        PUT("%s", i ? "," : "");
        if (!s->naxes[i])
            PUT("_");
        for (int k = 0; k < s->naxes[i]; k++)
            PUT("%s%s", k ? "+" : "", m->axes[s->axes[i][k]].name);
    }
    PUT("]");
    if (s->partial) {
        PUT(" partial(");
        for (int a = 0, first = 1; a < m->naxes; a++)
            if (s->partial & (1u << a)) {
                PUT("%s%s", first ? "" : ",", m->axes[a].name);
                first = 0;
            }
        PUT(")");
    }
#undef PUT
    return buf;
}

int sharding_check(const Sharding *s, const Mesh *m, const Tensor *t, Diag *d)
{
    char buf[128];
    if (s->rank != t->rank) {
        diag_add(d, "tensor \"%s\": sharding %s has %d dims but the tensor has rank %d", t->name,
                 sharding_str(s, m, buf, sizeof buf), s->rank, t->rank);
        return -1;
    }
    (void)m;
    return 0;
}

void sharding_local_dims(const Sharding *s, const Mesh *m, const Tensor *t, int64_t *out)
{
    for (int i = 0; i < t->rank; i++)
        out[i] = sharding_block_of(t->dims[i], t->split_unit[i], m, s->axes[i], s->naxes[i]);
}

int64_t sharding_block_of(int64_t n, int64_t u, const Mesh *m, const unsigned char *axes, int naxes)
{
    if (u <= 1 || n % u)
        u = 1;
    int64_t k = 1, left = n / u, minor = u;
    int even = 1;
    for (int j = 0; j < naxes; j++) {
        int64_t a = m->axes[axes[j]].size;
        k *= a;
        if (left > 1 ? left % a != 0 : minor % a != 0)
            even = 0;
        else if (left > 1)
            left /= a;
        else
            minor /= a;
    }
    return even ? n / k : (n / u + k - 1) / k * u;
}

int sharding_dim_uneven(const Sharding *s, const Mesh *m, const Tensor *t, int dim)
{
    return sharding_block_of(t->dims[dim], t->split_unit[dim], m, s->axes[dim], s->naxes[dim]) *
               sharding_dim_shards(s, m, dim) != t->dims[dim];
}

int sharding_is_uneven(const Sharding *s, const Mesh *m, const Tensor *t)
{
    for (int i = 0; i < s->rank; i++)
        if (sharding_dim_uneven(s, m, t, i))
            return 1;
    return 0;
}

int64_t sharding_local_bytes(const Sharding *s, const Mesh *m, const Tensor *t)
{
    int64_t n = (int64_t)dtype_size(t->dtype);
    for (int i = 0; i < t->rank; i++)
        n *= sharding_block_of(t->dims[i], t->split_unit[i], m, s->axes[i], s->naxes[i]);
    return n;
}
