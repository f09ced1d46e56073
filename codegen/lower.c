/* lower.c: lowers a Plan to one Program per rank, as the list of passes:
 * the buffers (program.c), the views and fusions found before the
 * schedule (views.c), the instruction order and collective fusion
 * (schedule.c), the aliases found after it (views.c), and the memory plan
 * (memplan.c). program_build retries with a shallower weight prefetch, and
 * without packed GEMM weights, until the rank fits --mem-limit.
 */
#include "codegen.h"

#include <stdint.h>

static Program *build_once(const Plan *p, int rank, const ProgramOptions *opt, int prefetch, int packs,
                           Diag *d)
{
    Program *pr = program_new(p, rank, opt);
    program_fold_views(pr, packs);
    program_schedule(pr, prefetch, opt->fuse_bytes, opt->bucket_bytes);
    program_fold_aliases(pr);
    if (program_plan_memory(pr, d)) {
        program_free(pr);
        return NULL;
    }
    return pr;
}

Program *program_build(const Plan *p, int rank, const ProgramOptions *opt, Diag *d)
{
    static const ProgramOptions none = {0};
    if (!opt)
        opt = &none;
    /* Deeper prefetch holds more gathered weights at once; back off until
     * the rank fits its memory limit. Packed GEMM weights are a copy,
     * made only where they fit too: each depth is tried with, then
     * without them. */
    for (int k = opt->prefetch; k >= 0; k--)
        for (int packs = 1; packs >= 0; packs--) {
            Program *pr = build_once(p, rank, opt, k, packs, d);
            if (!pr)
                return NULL;
            int64_t total;
            if (ck_add_i64(pr->arena_bytes, pr->weight_bytes, &total) || ck_add_i64(total, pr->input_bytes, &total) ||
                ck_add_i64(total, pr->packed_bytes, &total))
                total = INT64_MAX; /* over any limit */
            if (!opt->mem_limit || total <= opt->mem_limit) {
                pr->prefetch_used = k;
                return pr;
            }
            int last = !packs || !pr->npacks; /* without packs: the same program */
            if (k == 0 && last) {
                diag_add(d, "rank %d needs %lld bytes (arena %lld, weights %lld, inputs %lld), over --mem-limit %lld",
                         rank, (long long)total, (long long)pr->arena_bytes, (long long)pr->weight_bytes,
                         (long long)pr->input_bytes, (long long)opt->mem_limit);
                program_free(pr);
                return NULL;
            }
            program_free(pr);
            if (last)
                break;
        }
    return NULL;
}
