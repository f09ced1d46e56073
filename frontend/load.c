/* load.c: decodes an ONNX ModelProto (protobuf-c, generated at build time
 * from the onnx package's onnx.proto) and builds the IR.
 *
 * The pipeline is: decode, check opsets, import initializers, graph
 * inputs (binding symbolic dims from --dim), nodes (ops, attributes,
 * Constant values), graph outputs and value_info, then topological order,
 * opset normalisation and shape inference. The first problem found stops
 * the import with one diagnostic naming the file and the node, tensor or
 * field at fault; no partial graph is returned.
 */
#include "frontend.h"

#include <errno.h>
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "onnx.pb-c.h"

typedef struct Loader {
    Graph *g;
    const Onnx__ModelProto *m;
    const char *base_dir;
    const FrontendOptions *opt;
    int *dim_used; /* per --dim binding */
    /* compile --decode: dims bound by their input's role (decode_dim) */
    struct { const char *name; int64_t value; } role[16];
    int nrole;
    Diag *d;
    /* Op types the compiler does not support, in order of first use. */
    struct { char name[128]; int count; } *unsup;
    int nunsup, nunsup_nodes;
} Loader;

/* compile --decode: the value a symbolic dim of a decoding input takes
 * from its role, or -1: one new position (input_ids, position_ids),
 * max_seq positions in all (attention_mask), max_seq - 1 past ones (a
 * cache input: "past" in its name, the positions second to last). */
static int64_t decode_dim(const Loader *L, const char *input, size_t rank, size_t i)
{
    int64_t s = L->opt->decode_max_seq;
    if (s <= 0 || i == 0)
        return -1;
    if ((strcmp(input, "input_ids") == 0 || strcmp(input, "position_ids") == 0) && i == 1)
        return 1;
    if (strcmp(input, "attention_mask") == 0 && i == 1)
        return s;
    if (rank >= 3 && i == rank - 2 && (strstr(input, "past") || strstr(input, "PAST") || strstr(input, "Past")))
        return s - 1;
    return -1;
}

/* Binds a symbolic dim by its role, once per name; -1 with an error when
 * two roles disagree. Returns the value, or -1 with no error for none. */
static int64_t bind_role(Loader *L, const char *input, const char *param, size_t rank, size_t i, int *err)
{
    for (int k = 0; k < L->nrole; k++)
        if (strcmp(L->role[k].name, param) == 0) {
            int64_t v = decode_dim(L, input, rank, i);
            if (v >= 0 && v != L->role[k].value) {
                diag_add(L->d, "--decode: input \"%s\": dim \"%s\" would be both %lld and %lld; bind it with --dim",
                         input, param, (long long)L->role[k].value, (long long)v);
                *err = 1;
                return -1;
            }
            return L->role[k].value;
        }
    int64_t v = decode_dim(L, input, rank, i);
    if (v >= 0 && L->nrole < (int)(sizeof L->role / sizeof L->role[0])) {
        L->role[L->nrole].name = param;
        L->role[L->nrole++].value = v;
    }
    return v;
}

static void note_unsupported(Loader *L, const char *domain, const char *op)
{
    char name[128];
    snprintf(name, sizeof name, "%s%s%s", domain && *domain ? domain : "", domain && *domain ? ":" : "", op);
    L->nunsup_nodes++;
    for (int i = 0; i < L->nunsup; i++)
        if (strcmp(L->unsup[i].name, name) == 0) {
            L->unsup[i].count++;
            return;
        }
    if (!(L->nunsup & (L->nunsup - 1))) { /* grow at powers of two */
        void *p = realloc(L->unsup, (size_t)(L->nunsup ? 2 * L->nunsup : 8) * sizeof(*L->unsup));
        if (!p)
            abort();
        L->unsup = p;
    }
    snprintf(L->unsup[L->nunsup].name, sizeof L->unsup[0].name, "%s", name);
    L->unsup[L->nunsup++].count = 1;
}

/* One line naming every unsupported op type with its count. */
static int report_unsupported(Loader *L)
{
    char list[1024] = "";
    size_t off = 0;
    for (int i = 0; i < L->nunsup && off < sizeof list - 40; i++)
        off += (size_t)snprintf(list + off, sizeof list - off, "%s%s (%d)", i ? ", " : "", L->unsup[i].name,
                                L->unsup[i].count);
    if (off >= sizeof list - 40)
        snprintf(list + off, sizeof list - off, ", ...");
    diag_add(L->d, "%d node%s use%s %d op type%s the compiler does not support: %s (`onnx2spmd inspect --nodes` "
             "shows where)", L->nunsup_nodes, L->nunsup_nodes == 1 ? "" : "s", L->nunsup_nodes == 1 ? "s" : "",
             L->nunsup, L->nunsup == 1 ? "" : "s", list);
    return -1;
}

static void proto_free(void *p)
{
    onnx__model_proto__free_unpacked(p, NULL);
}

static int is_default_domain(const char *dom)
{
    return !dom || !*dom || strcmp(dom, "ai.onnx") == 0;
}

static int load_opsets(Loader *L)
{
    const Onnx__ModelProto *m = L->m;
    Graph *g = L->g;
    g->ir_version = m->has_ir_version ? m->ir_version : 0;
    g->producer = arena_strdup(&g->arena, m->producer_name ? m->producer_name : "");
    g->opsets = arena_alloc(&g->arena, (m->n_opset_import + 1) * sizeof(OpsetImport));
    g->opset = -1;
    for (size_t i = 0; i < m->n_opset_import; i++) {
        const Onnx__OperatorSetIdProto *o = m->opset_import[i];
        g->opsets[i].domain = arena_strdup(&g->arena, o->domain ? o->domain : "");
        g->opsets[i].version = o->has_version ? o->version : 0;
        if (is_default_domain(o->domain))
            g->opset = g->opsets[i].version;
    }
    g->nopsets = (int)m->n_opset_import;
    if (g->opset < 0) {
        diag_add(L->d, "model imports no default-domain (ai.onnx) opset");
        return -1;
    }
    if (g->opset < FRONTEND_OPSET_MIN || g->opset > FRONTEND_OPSET_MAX) {
        diag_add(L->d, "opset_import: ai.onnx opset %lld is not supported (%d to %d)",
                 (long long)g->opset, FRONTEND_OPSET_MIN, FRONTEND_OPSET_MAX);
        return -1;
    }
    return 0;
}

/* Reads a declared tensor type: dtype and (optionally) shape. `bind` says
 * whether symbolic dims must be bound (graph inputs) or may stay unknown. */
static int load_type(Loader *L, const Onnx__ValueInfoProto *vi, Tensor *t,
                     int is_input)
{
    const char *what = is_input ? "graph input" : "graph output";
    const Onnx__TypeProto *tp = vi->type;
    if (!tp || tp->value_case != ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE) {
        if (!is_input && !tp)
            return 0; /* outputs may leave their type to inference */
        diag_add(L->d, "%s \"%s\": only tensor types are supported", what, t->name);
        return -1;
    }
    const Onnx__TypeProto__Tensor *tt = tp->tensor_type;
    int et = tt->has_elem_type ? tt->elem_type : 0;
    if (is_input && !dtype_supported(et)) {
        diag_add(L->d, "%s \"%s\": dtype %s is not supported (" DTYPE_SUPPORTED_LIST ")", what,
                 t->name, dtype_onnx_name(et));
        return -1;
    }
    if (!tt->shape) {
        if (is_input) {
            diag_add(L->d, "%s \"%s\": has no shape; static shapes are required", what, t->name);
            return -1;
        }
        return 0;
    }
    if (tt->shape->n_dim > IR_MAX_RANK) {
        diag_add(L->d, "%s \"%s\": rank %zu is more than %d", what, t->name,
                 tt->shape->n_dim, IR_MAX_RANK);
        return -1;
    }
    int64_t dims[IR_MAX_RANK], numel = 1;
    for (size_t i = 0; i < tt->shape->n_dim; i++) {
        const Onnx__TensorShapeProto__Dimension *dm = tt->shape->dim[i];
        dims[i] = -1;
        if (dm->value_case == ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE) {
            dims[i] = dm->dim_value;
            if (dims[i] < 0) {
                diag_add(L->d, "%s \"%s\": dim %zu is negative (%lld)", what, t->name, i,
                         (long long)dims[i]);
                return -1;
            }
        } else if (dm->value_case == ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM &&
                   dm->dim_param) {
            for (int b = 0; b < L->opt->ndims; b++)
                if (strcmp(L->opt->dims[b].name, dm->dim_param) == 0) {
                    dims[i] = L->opt->dims[b].value;
                    L->dim_used[b] = 1;
                }
            if (dims[i] < 0 && is_input) {
                int err = 0;
                dims[i] = bind_role(L, t->name, dm->dim_param, tt->shape->n_dim, i, &err);
                if (err)
                    return -1;
            }
            if (dims[i] < 0 && is_input) {
                diag_add(L->d, "%s \"%s\": dim %zu is symbolic (\"%s\"); bind it with --dim %s=VALUE",
                         what, t->name, i, dm->dim_param, dm->dim_param);
                return -1;
            }
        } else if (is_input) {
            diag_add(L->d, "%s \"%s\": dim %zu has no value; static shapes are required", what,
                     t->name, i);
            return -1;
        }
        if (is_input && ck_mul_i64(numel, dims[i], &numel)) {
            diag_add(L->d, "%s \"%s\": element count overflows int64", what, t->name);
            return -1;
        }
    }
    if (is_input) {
        if (ck_mul_i64(numel, (int64_t)dtype_size((DType)et), &t->nbytes)) {
            diag_add(L->d, "%s \"%s\": byte size overflows int64", what, t->name);
            return -1;
        }
        t->dtype = (DType)et;
        t->rank = (int)tt->shape->n_dim;
        memcpy(t->dims, dims, (size_t)t->rank * sizeof(int64_t));
    } else {
        t->decl_rank = (int)tt->shape->n_dim;
        memcpy(t->decl_dims, dims, (size_t)t->decl_rank * sizeof(int64_t));
    }
    return 0;
}

static int load_initializers(Loader *L)
{
    const Onnx__GraphProto *gp = L->m->graph;
    if (gp->n_sparse_initializer) {
        diag_add(L->d, "sparse initializer \"%s\": sparse tensors are not supported",
                 gp->sparse_initializer[0]->values && gp->sparse_initializer[0]->values->name
                     ? gp->sparse_initializer[0]->values->name : "");
        return -1;
    }
    for (size_t i = 0; i < gp->n_initializer; i++) {
        const Onnx__TensorProto *tp = gp->initializer[i];
        if (!tp->name || !*tp->name) {
            diag_add(L->d, "initializer %zu has no name", i);
            return -1;
        }
        if (graph_tensor_find(L->g, tp->name)) {
            diag_add(L->d, "initializer \"%s\" is defined twice", tp->name);
            return -1;
        }
        Tensor *t = graph_tensor_get(L->g, tp->name);
        t->is_initializer = 1;
        if (frontend_tensor_import(L->g, tp, t, L->base_dir, "initializer", L->d))
            return -1;
    }
    return 0;
}

static int load_inputs(Loader *L)
{
    const Onnx__GraphProto *gp = L->m->graph;
    Graph *g = L->g;
    g->inputs = arena_alloc(&g->arena, (gp->n_input + 1) * sizeof(Tensor *));
    for (size_t i = 0; i < gp->n_input; i++) {
        const Onnx__ValueInfoProto *vi = gp->input[i];
        const char *name = vi->name ? vi->name : "";
        Tensor *t = graph_tensor_find(g, name);
        if (t && t->is_initializer)
            continue; /* IR < 4 lists initializers as inputs too */
        if (t) {
            diag_add(L->d, "graph input \"%s\" is listed twice", name);
            return -1;
        }
        if (!*name) {
            diag_add(L->d, "graph input %zu has no name", i);
            return -1;
        }
        t = graph_tensor_get(g, name);
        t->is_input = 1;
        if (load_type(L, vi, t, 1))
            return -1;
        g->inputs[g->ninputs++] = t;
    }
    return 0;
}

static int load_attr(Loader *L, Node *n, const Onnx__AttributeProto *ap, Attr *a)
{
    Graph *g = L->g;
    a->name = arena_strdup(&g->arena, ap->name ? ap->name : "");
    if (ap->ref_attr_name && *ap->ref_attr_name) {
        diag_add(L->d, "node \"%s\" (%s): attribute \"%s\" refers to a function attribute",
                 n->name, node_op_name(n), a->name);
        return -1;
    }
    int type = ap->has_type ? (int)ap->type : 0;
    if (!type) /* IR 1 had no type field: infer it from the field in use */
        type = ap->has_f ? ATTR_FLOAT : ap->has_i ? ATTR_INT : ap->has_s ? ATTR_STRING
             : ap->t ? ATTR_TENSOR : ap->g ? ATTR_GRAPH : ap->n_floats ? ATTR_FLOATS
             : ap->n_ints ? ATTR_INTS : ap->n_strings ? ATTR_STRINGS : ATTR_OTHER;
    switch (type) {
    case ATTR_FLOAT: a->f = ap->f; break;
    case ATTR_INT: a->i = ap->i; break;
    case ATTR_STRING:
        a->s = arena_strndup(&g->arena, (const char *)ap->s.data, ap->s.len);
        break;
    case ATTR_FLOATS:
        if (ap->n_floats > (1u << 24))
            goto too_long;
        a->n = (int)ap->n_floats;
        a->floats = arena_alloc(&g->arena, (ap->n_floats + 1) * sizeof(float));
        if (ap->n_floats)
            memcpy(a->floats, ap->floats, ap->n_floats * sizeof(float));
        break;
    case ATTR_INTS:
        if (ap->n_ints > (1u << 24))
            goto too_long;
        a->n = (int)ap->n_ints;
        a->ints = arena_alloc(&g->arena, (ap->n_ints + 1) * sizeof(int64_t));
        if (ap->n_ints)
            memcpy(a->ints, ap->ints, ap->n_ints * sizeof(int64_t));
        break;
    case ATTR_TENSOR: {
        if (!ap->t) {
            diag_add(L->d, "node \"%s\" (%s): tensor attribute \"%s\" has no value", n->name,
                     node_op_name(n), a->name);
            return -1;
        }
        char what[512];
        snprintf(what, sizeof(what), "node \"%s\" (%s): attribute \"%s\", tensor", n->name,
                 node_op_name(n), a->name);
        a->t = arena_alloc(&g->arena, sizeof(Tensor));
        a->t->name = arena_strdup(&g->arena, ap->t->name && *ap->t->name ? ap->t->name : a->name);
        a->t->label = esc_label(&g->arena, a->t->name);
        a->t->decl_rank = -1;
        if (frontend_tensor_import(g, ap->t, a->t, L->base_dir, what, L->d))
            return -1;
        break;
    }
    default:
        type = ATTR_OTHER;
        break;
    }
    a->type = (AttrType)type;
    return 0;
too_long:
    diag_add(L->d, "node \"%s\" (%s): attribute \"%s\" is too long", n->name,
             node_op_name(n), a->name);
    return -1;
}

/* Constant's value arrives in one of several attributes; all become data
 * of the output tensor. */
static int load_constant(Loader *L, Node *n)
{
    Tensor *out = n->outputs[0];
    for (int i = 0; i < n->nattrs; i++) {
        const Attr *a = &n->attrs[i];
        if (strcmp(a->name, "value") == 0 && a->type == ATTR_TENSOR) {
            out->dtype = a->t->dtype;
            out->rank = a->t->rank;
            memcpy(out->dims, a->t->dims, sizeof(out->dims));
            out->data = a->t->data;
            out->nbytes = a->t->nbytes;
            return 0;
        }
        if (strcmp(a->name, "value_float") == 0 || strcmp(a->name, "value_int") == 0) {
            int is_f = a->type == ATTR_FLOAT;
            void *p = arena_alloc(&L->g->arena, 8);
            if (is_f)
                memcpy(p, &a->f, 4);
            else
                memcpy(p, &a->i, 8);
            out->dtype = is_f ? DT_F32 : DT_I64;
            out->rank = 0;
            out->data = p;
            out->nbytes = is_f ? 4 : 8;
            return 0;
        }
        if (strcmp(a->name, "value_floats") == 0 || strcmp(a->name, "value_ints") == 0) {
            int is_f = a->type == ATTR_FLOATS;
            out->dtype = is_f ? DT_F32 : DT_I64;
            out->rank = 1;
            out->dims[0] = a->n;
            out->data = is_f ? (const void *)a->floats : (const void *)a->ints;
            out->nbytes = (int64_t)a->n * (is_f ? 4 : 8);
            return 0;
        }
    }
    diag_add(L->d, "node \"%s\" (Constant): has no supported value attribute (value, value_float(s), value_int(s))",
             n->name);
    return -1;
}

/* Keeps the node's ONNX sharding specs (multi-device configurations). */
static int load_shard_specs(Loader *L, const Onnx__NodeProto *np, const Node *n)
{
    Graph *g = L->g;
    for (size_t c = 0; c < np->n_device_configurations; c++) {
        const Onnx__NodeDeviceConfigurationProto *dc = np->device_configurations[c];
        for (size_t k = 0; k < dc->n_sharding_spec; k++) {
            const Onnx__ShardingSpecProto *sp = dc->sharding_spec[k];
            const char *tn = sp->tensor_name ? sp->tensor_name : "";
            if (sp->n_sharded_dim > IR_MAX_RANK || sp->n_device > 65536) {
                diag_add(L->d, "node \"%s\" (%s): sharding spec of \"%s\" is too large", n->name,
                         node_op_name(n), tn);
                return -1;
            }
            ModelShardSpec ms = {.tensor = arena_strdup(&g->arena, tn), .node = n->name};
            ms.ndevices = (int)sp->n_device;
            ms.devices = arena_alloc(&g->arena, (sp->n_device + 1) * sizeof(int64_t));
            for (size_t i = 0; i < sp->n_device; i++) {
                int64_t dev = sp->device[i];
                /* With a group map, the entry is a group id: take its first device. */
                for (size_t gm = 0; gm < sp->n_index_to_device_group_map; gm++) {
                    const Onnx__IntIntListEntryProto *e = sp->index_to_device_group_map[gm];
                    if (e->has_key && e->key == dev && e->n_value)
                        dev = e->value[0];
                }
                ms.devices[i] = dev;
            }
            for (size_t i = 0; i < sp->n_sharded_dim; i++) {
                const Onnx__ShardedDimProto *sd = sp->sharded_dim[i];
                if (sd->n_simple_sharding != 1 || !sd->simple_sharding[0]->has_num_shards) {
                    diag_add(L->d, "node \"%s\" (%s): sharding spec of \"%s\": dim %lld must have exactly one simple sharding with num_shards",
                             n->name, node_op_name(n), tn, (long long)sd->axis);
                    return -1;
                }
                ms.axis[i] = sd->axis;
                ms.num_shards[i] = sd->simple_sharding[0]->num_shards;
            }
            ms.nsharded = (int)sp->n_sharded_dim;
            if (g->nshard_specs % 16 == 0) {
                ModelShardSpec *na = arena_alloc(&g->arena, (size_t)(g->nshard_specs + 16) * sizeof(ModelShardSpec));
                if (g->nshard_specs)
                    memcpy(na, g->shard_specs, (size_t)g->nshard_specs * sizeof(ModelShardSpec));
                g->shard_specs = na;
            }
            g->shard_specs[g->nshard_specs++] = ms;
        }
    }
    return 0;
}

static int node_is_function(const Onnx__ModelProto *m, const Onnx__NodeProto *np, const char *op)
{
    for (size_t i = 0; i < m->n_functions; i++) {
        const Onnx__FunctionProto *f = m->functions[i];
        if (f->name && strcmp(f->name, op) == 0 &&
            strcmp(f->domain ? f->domain : "", np->domain ? np->domain : "") == 0)
            return 1;
    }
    return 0;
}

static int load_nodes(Loader *L)
{
    const Onnx__GraphProto *gp = L->m->graph;
    Graph *g = L->g;
    /* Pass 1: create nodes and their outputs, so inputs may refer to
     * tensors produced later in an unsorted graph. */
    for (size_t i = 0; i < gp->n_node; i++) {
        const Onnx__NodeProto *np = gp->node[i];
        const char *op = np->op_type ? np->op_type : "";
        const char *label = np->name && *np->name ? np->name : NULL;
        char fallback[96];
        if (!label) {
            snprintf(fallback, sizeof(fallback), "%s_%zu", op, i);
            label = fallback;
        }
        /* Control flow, model-local functions and unknown ops are
         * collected, so the error lists every one of them (inspect keeps
         * them as OP_UNSUPPORTED nodes). */
        int kind = is_default_domain(np->domain) ? op_from_name(op) : -1;
        if (kind < 0 && is_default_domain(np->domain) && strcmp(op, "CastLike") == 0)
            kind = OP_CAST; /* normalize.c takes "to" from the second input's dtype */
        if (!*op || strcmp(op, "If") == 0 || strcmp(op, "Loop") == 0 || strcmp(op, "Scan") == 0 ||
            node_is_function(L->m, np, op))
            kind = -1;
        if (kind < 0 || kind == OP_UNSUPPORTED) {
            note_unsupported(L, is_default_domain(np->domain) ? NULL : np->domain, *op ? op : "(no op_type)");
            if (!L->opt->allow_unsupported)
                continue;
            kind = OP_UNSUPPORTED;
        } else if (g->opset < op_table[kind].since_opset) {
            diag_add(L->d, "node \"%s\" (%s): needs opset %d but the model imports opset %lld",
                     label, op, op_table[kind].since_opset, (long long)g->opset);
            return -1;
        }
        Node *n = graph_node_add(g, (OpKind)kind, np->name);
        if (kind == OP_UNSUPPORTED) {
            char t[160];
            snprintf(t, sizeof t, "%s%s%s", is_default_domain(np->domain) ? "" : np->domain,
                     is_default_domain(np->domain) ? "" : ":", *op ? op : "(no op_type)");
            n->op_type = arena_strdup(&g->arena, t);
            g->nunsupported++;
        }
        n->noutputs = (int)np->n_output;
        n->outputs = arena_alloc(&g->arena, (np->n_output + 1) * sizeof(Tensor *));
        for (size_t k = 0; k < np->n_output; k++) {
            const char *nm = np->output[k];
            if (!nm || !*nm)
                continue;
            Tensor *t = graph_tensor_find(g, nm);
            if (t && (t->producer || t->is_input || t->is_initializer)) {
                diag_add(L->d, "node \"%s\" (%s): output \"%s\" is already defined%s", n->name,
                         op, nm, t->producer ? " by another node" : " as a graph input or initializer");
                return -1;
            }
            t = graph_tensor_get(g, nm);
            t->producer = n;
            n->outputs[k] = t;
        }
        /* An unsupported node's attributes are not read (they may hold
         * subgraphs or types the compiler does not know). */
        n->nattrs = kind == OP_UNSUPPORTED ? 0 : (int)np->n_attribute;
        n->attrs = arena_alloc(&g->arena, (np->n_attribute + 1) * sizeof(Attr));
        for (size_t k = 0; k < (size_t)n->nattrs; k++)
            if (load_attr(L, n, np->attribute[k], &n->attrs[k]))
                return -1;
        if (n->op == OP_CONSTANT && n->noutputs >= 1 && n->outputs[0] && load_constant(L, n))
            return -1;
        if (load_shard_specs(L, np, n))
            return -1;
    }
    if (L->nunsup && !L->opt->allow_unsupported)
        return report_unsupported(L);
    /* Pass 2: resolve inputs. */
    for (size_t i = 0; i < gp->n_node; i++) {
        const Onnx__NodeProto *np = gp->node[i];
        Node *n = g->nodes[i];
        n->ninputs = (int)np->n_input;
        n->inputs = arena_alloc(&g->arena, (np->n_input + 1) * sizeof(Tensor *));
        for (size_t k = 0; k < np->n_input; k++) {
            const char *nm = np->input[k];
            if (!nm || !*nm)
                continue;
            Tensor *t = graph_tensor_find(g, nm);
            if (!t || !(t->producer || t->is_input || t->is_initializer)) {
                diag_add(L->d, "node \"%s\" (%s): input \"%s\" is not produced by any node, graph input or initializer",
                         n->name, node_op_name(n), nm);
                return -1;
            }
            n->inputs[k] = t;
        }
    }
    return 0;
}

static int load_outputs(Loader *L)
{
    const Onnx__GraphProto *gp = L->m->graph;
    Graph *g = L->g;
    g->outputs = arena_alloc(&g->arena, (gp->n_output + 1) * sizeof(Tensor *));
    for (size_t i = 0; i < gp->n_output; i++) {
        const char *nm = gp->output[i]->name ? gp->output[i]->name : "";
        Tensor *t = graph_tensor_find(g, nm);
        if (!t) {
            diag_add(L->d, "graph output \"%s\" is not produced by any node, graph input or initializer", nm);
            return -1;
        }
        if (load_type(L, gp->output[i], t, 0))
            return -1;
        t->is_output = 1;
        g->outputs[g->noutputs++] = t;
    }
    if (g->noutputs == 0) {
        diag_add(L->d, "graph has no outputs");
        return -1;
    }
    for (size_t i = 0; i < gp->n_value_info; i++) {
        Tensor *t = gp->value_info[i]->name ? graph_tensor_find(g, gp->value_info[i]->name) : NULL;
        if (t && t->producer && t->decl_rank < 0 && load_type(L, gp->value_info[i], t, 0))
            return -1;
    }
    return 0;
}

static int load_model(Loader *L)
{
    if (!L->m->graph) {
        diag_add(L->d, "model has no graph");
        return -1;
    }
    if (L->m->n_training_info) {
        diag_add(L->d, "training_info is not supported");
        return -1;
    }
    L->g->name = arena_strdup(&L->g->arena, L->m->graph->name);
    if (load_opsets(L) || load_initializers(L) || load_inputs(L) || frontend_bind_consts(L->g, L->opt, L->d) ||
        load_nodes(L) || load_outputs(L))
        return -1;
    for (int b = 0; b < L->opt->ndims; b++)
        if (!L->dim_used[b]) {
            diag_add(L->d, "--dim %s: no graph input has a symbolic dim of that name",
                     L->opt->dims[b].name);
            return -1;
        }
    if (graph_toposort(L->g, L->d) || frontend_moe_eager(L->g, L->d))
        return -1;
    /* Node by node: a node's constant inputs may come from shape arithmetic
     * folded just before it (Shape -> Concat -> Reshape's shape). */
    for (int i = 0; i < L->g->nnodes; i++) {
        Node *n = L->g->nodes[i];
        int unknown = n->op == OP_UNSUPPORTED;
        for (int k = 0; k < n->ninputs; k++)
            unknown |= n->inputs[k] && n->inputs[k]->rank < 0;
        if (unknown)
            continue; /* inspect of an unsupported model: shapes after it stay unknown */
        if (frontend_normalize_node(L->g, n, L->d) || ir_infer_node(L->g, n, L->d) ||
            ir_fold_node(L->g, n, L->d) < 0)
            return -1;
    }
    ir_fold_sweep(L->g);
    if (!L->g->nunsupported)
        ir_fuse_activations(L->g);
    graph_link_consumers(L->g);
    return 0;
}

int frontend_load_buffer(const void *buf, size_t len, const char *name,
                         const char *base_dir, const FrontendOptions *opt,
                         Graph **out, Diag *d)
{
    static const FrontendOptions none = {0};
    Loader L = {.base_dir = base_dir, .opt = opt ? opt : &none, .d = d};
    *out = NULL;
    L.g = graph_new(name);
    L.dim_used = calloc((size_t)L.opt->ndims + 1, sizeof(int));
    if (!L.dim_used)
        abort();
    /* protobuf-c recurses per nested message: bound the depth first. */
    if (frontend_wire_check(buf, len, d))
        goto fail;
    Onnx__ModelProto *m = onnx__model_proto__unpack(NULL, len, buf);
    if (!m) {
        diag_add(d, "not a valid ONNX model (protobuf decoding failed; truncated or corrupt file?)");
        goto fail;
    }
    L.g->proto = m;
    L.g->proto_free = proto_free;
    L.m = m;
    if (load_model(&L))
        goto fail;
    free(L.dim_used);
    free(L.unsup);
    *out = L.g;
    return 0;
fail:
    free(L.dim_used);
    free(L.unsup);
    graph_free(L.g);
    return -1;
}

int frontend_load_file(const char *path, const FrontendOptions *opt, Graph **out,
                       Diag *d)
{
    int fd = -1, rc = -1;
    void *map = MAP_FAILED;
    size_t size = 0;
    char dir[PATH_MAX];
    *out = NULL;
    fd = frontend_file_open(path, NULL, &size, d);
    if (fd < 0)
        goto cleanup;
    if (size == 0) {
        diag_add(d, "file is empty");
        goto cleanup;
    }
    map = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (map == MAP_FAILED) {
        diag_add(d, "cannot map: %s", strerror(errno));
        goto cleanup;
    }
    if (snprintf(dir, sizeof(dir), "%s", path) >= (int)sizeof(dir)) {
        diag_add(d, "path is too long");
        goto cleanup;
    }
    rc = frontend_load_buffer(map, size, path, dirname(dir), opt, out, d);
cleanup:
    if (map != MAP_FAILED)
        munmap(map, size);
    if (fd >= 0)
        close(fd);
    return rc;
}
