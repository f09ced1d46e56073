/* report_train.c: plan --train's memory tables, per rank.
 *
 * Two trades a user makes without recompiling: the ZeRO stage (--auto
 * --train tries them under --mem-limit, driver.c) and the --recompute mode.
 * Every figure is from the rank programs' own memory plan (codegen's
 * program_memory_split over the rank that holds the most): what compile
 * would allocate, not an estimate. The driver fills the trials in
 * PlanFacts; this file only prints them.
 */
#include "partition.h"

static const char *recompute_name(int mode)
{
    return mode == RECOMPUTE_SELECTIVE ? "selective" : mode == RECOMPUTE_FULL ? "full" : "none";
}

static void print_zero_trials(const PlanFacts *x, FILE *f)
{
    if (x->mem_limit)
        fprintf(f, "\nZeRO stage (--auto --train: the first that fits --mem-limit %lld; per rank, the rank that "
                   "holds the most)\n", (long long)x->mem_limit);
    else
        fprintf(f, "\nZeRO stage (--auto --train: no --mem-limit, stage 0 is the fastest; per rank, the rank that "
                   "holds the most)\n");
    fprintf(f, "  %-10s %12s %12s %16s %12s %12s  %s\n", "zero stage", "weights", "grads", "optimizer state",
            "activations", "total", "fits");
    for (int i = 0; i < x->nzero_trials; i++) {
        const ZeroTrial *t = &x->zero_trials[i];
        fprintf(f, "  %-10d %12lld %12lld %16lld %12lld %12lld  %s%s\n", t->stage, (long long)t->mem.weights,
                (long long)t->mem.grads, (long long)t->mem.state, (long long)t->mem.activations,
                (long long)t->mem.total, t->fits ? "yes" : "no", i == x->zero_chosen ? "  <- chosen" : "");
    }
}

static void print_recompute_trials(const PlanFacts *x, FILE *f)
{
    fprintf(f, "\nrecompute (--recompute, per rank, the rank that holds the most; forward peak: the most the "
               "arena holds of values that are not gradients)\n");
    fprintf(f, "  %-10s %12s %12s %12s\n", "mode", "forward peak", "arena", "total");
    for (int i = 0; i < x->nrecompute; i++) {
        const RecomputeTrial *t = &x->recompute[i];
        const char *mark = i == x->recompute_chosen ? "  <- chosen" : "";
        if (!t->planned)
            fprintf(f, "  %-10s %12s %12s %12s%s\n", recompute_name(t->mode), "-", "-", "no plan", mark);
        else
            fprintf(f, "  %-10s %12lld %12lld %12lld%s\n", recompute_name(t->mode), (long long)t->mem.forward_peak,
                    (long long)t->mem.arena, (long long)t->mem.total, mark);
    }
}

/* --precision: what the autocast (ir/precision.c) made of the model. */
void plan_print_precision(const Plan *p, FILE *f)
{
    const Graph *g = p->g;
    int casts = 0, low16 = 0;
    DType low = DT_UNDEFINED;
    for (int i = 0; i < g->nnodes; i++) {
        const Node *n = g->nodes[i];
        if (n->op == OP_CAST && !n->grad && n->inputs[0]->is_initializer && n->outputs[0] &&
            (n->outputs[0]->dtype == DT_BF16 || n->outputs[0]->dtype == DT_F16)) {
            casts++;
            low = n->outputs[0]->dtype;
        }
    }
    if (!casts)
        return;
    for (int i = 0; i < g->ntensors; i++)
        low16 += g->tensors[i]->producer && g->tensors[i]->dtype == low;
    fprintf(f, "\nprecision %s (--precision, as torch.autocast): %d weights read through a Cast each step, %d values "
               "stored as %s; float32 master weights and optimizer state",
            low == DT_BF16 ? "bf16" : "fp16", casts, low16, dtype_name(low));
    if (g->loss_scale)
        fprintf(f, "; loss scaled dynamically from %g (GradScaler's rule, state \"%s\" kept with the weights)",
                (double)((const float *)g->loss_scale->data)[0], g->loss_scale->label);
    fprintf(f, "\n");
}

void plan_print_train_memory(const PlanFacts *x, FILE *f)
{
    if (!x)
        return;
    if (x->nzero_trials)
        print_zero_trials(x, f);
    if (x->nrecompute)
        print_recompute_trials(x, f);
}

static void json_split(const MemorySplit *m, FILE *f)
{
    fprintf(f, "\"weights\": %lld, \"grads\": %lld, \"optimizer_state\": %lld, \"activations\": %lld, "
               "\"total\": %lld, \"arena\": %lld, \"forward_peak\": %lld",
            (long long)m->weights, (long long)m->grads, (long long)m->state, (long long)m->activations,
            (long long)m->total, (long long)m->arena, (long long)m->forward_peak);
}

void plan_print_train_memory_json(const PlanFacts *x, FILE *f)
{
    if (!x)
        return;
    if (x->nzero_trials) {
        fprintf(f, ",\n  \"zero_stages\": {\"mem_limit\": %lld, \"chosen\": %d, \"tried\": [", (long long)x->mem_limit,
                x->zero_trials[x->zero_chosen].stage);
        for (int i = 0; i < x->nzero_trials; i++) {
            fprintf(f, "%s\n    {\"stage\": %d, \"fits\": %s, ", i ? "," : "", x->zero_trials[i].stage,
                    x->zero_trials[i].fits ? "true" : "false");
            json_split(&x->zero_trials[i].mem, f);
            fprintf(f, "}");
        }
        fprintf(f, "]}");
    }
    if (x->nrecompute) {
        fprintf(f, ",\n  \"recompute\": {\"chosen\": \"%s\", \"modes\": [",
                recompute_name(x->recompute[x->recompute_chosen].mode));
        for (int i = 0; i < x->nrecompute; i++) {
            const RecomputeTrial *t = &x->recompute[i];
            fprintf(f, "%s\n    {\"mode\": \"%s\", \"planned\": %s", i ? "," : "", recompute_name(t->mode),
                    t->planned ? "true" : "false");
            if (t->planned) {
                fprintf(f, ", ");
                json_split(&t->mem, f);
            }
            fprintf(f, "}");
        }
        fprintf(f, "]}");
    }
}
