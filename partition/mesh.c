/* mesh.c: the device mesh, its link classes and device presets.
 *
 * A mesh is a list of named axes; rank r sits at the row-major coordinates
 * of the mesh (last axis fastest), as in jax.sharding.Mesh. Each axis has a
 * link class (latency alpha, bandwidth beta) that the cost model uses for
 * collectives over that axis; a group spanning several axes runs at the
 * pace of its slowest link. Preset numbers are per direction, from vendor
 * datasheets, rounded; they rank plans, they do not predict wall time.
 */
#include "partition.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

static const LinkClass link_presets[] = {
    {"nvlink", 3e-6, 450e9},   /* NVLink 4, H100/H200 SXM */
    {"pcie", 10e-6, 25e9},     /* PCIe 4.0 x16 */
    {"ib", 8e-6, 50e9},        /* InfiniBand NDR 400 Gb/s */
    {"ethernet", 30e-6, 12.5e9}, /* 100 GbE */
    {"shm", 1e-6, 10e9},       /* shared memory between processes on one host */
};

static const DeviceClass device_presets[] = {
    {"H100", 67e12, 3.35e12},
    {"H200", 67e12, 4.8e12},
    {"A100", 19.5e12, 2.0e12},
    {"cpu", 1e11, 2e10},
};

const LinkClass *link_preset_find(const char *name)
{
    for (size_t i = 0; i < sizeof link_presets / sizeof link_presets[0]; i++)
        if (strcmp(link_presets[i].name, name) == 0)
            return &link_presets[i];
    return NULL;
}

const DeviceClass *device_preset_find(const char *name)
{
    for (size_t i = 0; i < sizeof device_presets / sizeof device_presets[0]; i++)
        if (strcasecmp(device_presets[i].name, name) == 0)
            return &device_presets[i];
    return NULL;
}

static int valid_name(const char *s, size_t n)
{
    if (n == 0 || n > 31 || !(isalpha((unsigned char)s[0])))
        return 0;
    for (size_t i = 0; i < n; i++)
        if (!isalnum((unsigned char)s[i]) && s[i] != '_')
            return 0;
    return 1;
}

int mesh_parse(const char *spec, Mesh *m, Diag *d)
{
    memset(m, 0, sizeof(*m));
    m->nranks = 1;
    m->device = device_preset_find("H100");
    const char *p = spec;
    while (*p) {
        const char *eq = strchr(p, '='), *comma = strchr(p, ',');
        if (!comma)
            comma = p + strlen(p);
        if (!eq || eq > comma) {
            diag_add(d, "--mesh %s: expected NAME=SIZE[,NAME=SIZE...]", spec);
            return -1;
        }
        if (!valid_name(p, (size_t)(eq - p))) {
            diag_add(d, "--mesh %s: \"%.*s\" is not a valid axis name", spec, (int)(eq - p), p);
            return -1;
        }
        if (m->naxes == MESH_MAX_AXES) {
            diag_add(d, "--mesh %s: more than %d axes", spec, MESH_MAX_AXES);
            return -1;
        }
        char *end;
        long v = strtol(eq + 1, &end, 10);
        if (end != comma || end == eq + 1) {
            diag_add(d, "--mesh %s: size of axis \"%.*s\" is not a number", spec,
                     (int)(eq - p), p);
            return -1;
        }
        if (v < 1 || v > 65536) {
            diag_add(d, "--mesh %s: axis \"%.*s\" has size %ld (must be 1 to 65536)", spec,
                     (int)(eq - p), p, v);
            return -1;
        }
        MeshAxis *ax = &m->axes[m->naxes];
        char name[32];
        snprintf(name, sizeof name, "%.*s", (int)(eq - p), p);
        if (mesh_axis_find(m, name) >= 0) {
            diag_add(d, "--mesh %s: axis \"%s\" appears twice", spec, name);
            return -1;
        }
        snprintf(ax->name, sizeof ax->name, "%s", name);
        ax->size = (int)v;
        ax->link = link_preset_find("nvlink");
        m->naxes++;
        if (ck_mul_i64(m->nranks, v, &(int64_t){0}) || (int64_t)m->nranks * v > 65536) {
            diag_add(d, "--mesh %s: more than 65536 ranks", spec);
            return -1;
        }
        m->nranks *= (int)v;
        p = *comma ? comma + 1 : comma;
    }
    if (m->naxes == 0) {
        diag_add(d, "--mesh: no axes given (e.g. --mesh dp=2,tp=4)");
        return -1;
    }
    return 0;
}

int mesh_links_parse(Mesh *m, const char *spec, Diag *d)
{
    char *copy = strdup(spec), *save = NULL;
    int rc = 0;
    for (char *tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        char *eq = strchr(tok, '=');
        if (!eq) {
            diag_add(d, "--link %s: expected AXIS=CLASS (classes: nvlink, pcie, ib, ethernet, shm)", spec);
            rc = -1;
            break;
        }
        *eq = 0;
        int a = mesh_axis_find(m, tok);
        const LinkClass *lc = link_preset_find(eq + 1);
        if (a < 0) {
            diag_add(d, "--link %s: unknown mesh axis \"%s\"", spec, tok);
            rc = -1;
            break;
        }
        if (!lc) {
            diag_add(d, "--link %s: unknown link class \"%s\" (nvlink, pcie, ib, ethernet, shm)",
                     spec, eq + 1);
            rc = -1;
            break;
        }
        m->axes[a].link = lc;
    }
    free(copy);
    return rc;
}

int mesh_axis_find(const Mesh *m, const char *name)
{
    for (int i = 0; i < m->naxes; i++)
        if (strcmp(m->axes[i].name, name) == 0)
            return i;
    return -1;
}

int mesh_coord(const Mesh *m, int rank, int axis)
{
    int stride = 1;
    for (int i = m->naxes - 1; i > axis; i--)
        stride *= m->axes[i].size;
    return (rank / stride) % m->axes[axis].size;
}

int mesh_block_index(const Mesh *m, int rank, const unsigned char *axes, int naxes)
{
    int idx = 0;
    for (int k = 0; k < naxes; k++)
        idx = idx * m->axes[axes[k]].size + mesh_coord(m, rank, axes[k]);
    return idx;
}

const LinkClass *mesh_group_link(const Mesh *m, unsigned axes)
{
    const LinkClass *slow = NULL;
    for (int i = 0; i < m->naxes; i++)
        if ((axes & (1u << i)) && (!slow || m->axes[i].link->bandwidth_Bps < slow->bandwidth_Bps))
            slow = m->axes[i].link;
    return slow ? slow : link_preset_find("nvlink");
}

int mesh_group_size(const Mesh *m, unsigned axes)
{
    int n = 1;
    for (int i = 0; i < m->naxes; i++)
        if (axes & (1u << i))
            n *= m->axes[i].size;
    return n;
}

void mesh_str(const Mesh *m, char *buf, size_t cap)
{
    size_t off = 0;
    buf[0] = 0;
    for (int i = 0; i < m->naxes && off < cap; i++)
        off += (size_t)snprintf(buf + off, cap - off, "%s%s=%d", i ? "," : "", m->axes[i].name,
                                m->axes[i].size);
}
