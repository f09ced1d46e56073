/* cbc.c: COIN-OR CBC through its C API (Cbc_C_Interface.h), loaded at run
 * time.
 *
 * --auto solves its integer program with CBC when libCbcSolver can be
 * loaded, and with GLPK (linked in) otherwise. The reason for dlopen
 * rather than linking is that CBC is a chain of C++ libraries; linking
 * them would end the compiler's libc-only build, which is what lets
 * tests/gpu carry it to a machine without them.
 *
 * The choice of default was measured with bench/auto_bench.py. On the
 * 64-rank Llama-7B program (17148 rows x 135762 columns), CBC in process
 * takes 2.8-3.1 s and GLPK 8.9 s. Both reach the same optimum. On the
 * small programs CBC costs about 0.1 s of set-up.
 *
 * Only the handful of entry points used here are looked up, with the
 * signatures of CBC 2.10's header. They are declared here so the build
 * needs no CBC header.
 */
#include "partition.h"

#include <dlfcn.h>
#include <float.h>
#include <stdio.h>
#include <stdlib.h>

typedef void Cbc_Model;

static struct {
    int tried, ok;
    void *lib;
    Cbc_Model *(*newModel)(void);
    void (*deleteModel)(Cbc_Model *);
    void (*loadProblem)(Cbc_Model *, int, int, const int *, const int *, const double *, const double *,
                        const double *, const double *, const double *, const double *);
    void (*setInteger)(Cbc_Model *, int);
    void (*setLogLevel)(Cbc_Model *, int);
    void (*setMaximumSeconds)(Cbc_Model *, double);
    void (*setMaximumNodes)(Cbc_Model *, int);
    int (*getNodeCount)(Cbc_Model *);
    int (*solve)(Cbc_Model *);
    int (*isProvenOptimal)(Cbc_Model *);
    int (*isProvenInfeasible)(Cbc_Model *);
    double *(*bestSolution)(Cbc_Model *);
    double (*getObjValue)(Cbc_Model *);
    double (*getBestPossibleObjValue)(Cbc_Model *);
} cbc;

int cbc_available(void)
{
    if (cbc.tried)
        return cbc.ok;
    cbc.tried = 1;
    static const char *const names[] = {"libCbcSolver.so.3", "libCbcSolver.so", NULL};
    for (int i = 0; names[i] && !cbc.lib; i++)
        cbc.lib = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
    if (!cbc.lib)
        return 0;
#define SYM(field, name) (*(void **)&cbc.field = dlsym(cbc.lib, name))
    cbc.ok = SYM(newModel, "Cbc_newModel") && SYM(deleteModel, "Cbc_deleteModel") &&
             SYM(loadProblem, "Cbc_loadProblem") && SYM(setInteger, "Cbc_setInteger") &&
             SYM(setLogLevel, "Cbc_setLogLevel") && SYM(setMaximumSeconds, "Cbc_setMaximumSeconds") &&
             SYM(setMaximumNodes, "Cbc_setMaximumNodes") && SYM(getNodeCount, "Cbc_getNodeCount") &&
             SYM(solve, "Cbc_solve") && SYM(isProvenOptimal, "Cbc_isProvenOptimal") &&
             SYM(isProvenInfeasible, "Cbc_isProvenInfeasible") && SYM(bestSolution, "Cbc_bestSolution") &&
             SYM(getObjValue, "Cbc_getObjValue") && SYM(getBestPossibleObjValue, "Cbc_getBestPossibleObjValue");
#undef SYM
    return cbc.ok;
}

int cbc_solve(const MipProblem *mp, double time_limit_s, int max_nodes, MipResult *res)
{
    if (!cbc_available())
        return -1;
    Cbc_Model *model = cbc.newModel();
    if (!model)
        return -1;
    cbc.loadProblem(model, mp->ncols, mp->nrows, mp->start, mp->index, mp->value, mp->collb, mp->colub, mp->obj,
                    mp->rowlb, mp->rowub);
    for (int j = 0; j < mp->ncols; j++)
        if (mp->is_int[j])
            cbc.setInteger(model, j);
    cbc.setLogLevel(model, getenv("O2S_AUTO_VERBOSE") ? 1 : 0);
    cbc.setMaximumSeconds(model, time_limit_s);
    if (max_nodes > 0)
        cbc.setMaximumNodes(model, max_nodes);
    cbc.solve(model);
    if (getenv("O2S_AUTO_VERBOSE"))
        fprintf(stderr, "cbc: %d nodes\n", cbc.getNodeCount(model));
    const double *x = cbc.bestSolution(model);
    res->x = NULL;
    if (cbc.isProvenInfeasible(model)) {
        res->status = MIP_INFEASIBLE;
    } else if (!x) {
        res->status = MIP_NONE;
    } else {
        res->status = cbc.isProvenOptimal(model) ? MIP_OPTIMAL : MIP_FEASIBLE;
        res->objective = cbc.getObjValue(model);
        res->bound = cbc.getBestPossibleObjValue(model);
        res->x = malloc(sizeof(double) * (size_t)(mp->ncols ? mp->ncols : 1));
        if (!res->x)
            abort();
        for (int j = 0; j < mp->ncols; j++)
            res->x[j] = x[j];
    }
    cbc.deleteModel(model);
    return 0;
}
