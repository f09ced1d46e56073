/* fuzz_frontend.c: libFuzzer target for the whole import pipeline
 * (protobuf decoding, graph construction, normalisation, shape inference).
 * Any input must either load or fail with exactly one diagnostic; crashes,
 * leaks and undefined behaviour are caught by the sanitizers. External
 * data is refused (no base folder), so the target touches no files. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "frontend/frontend.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const DimBinding dims[] = {{"batch", 2}};
    FrontendOptions opt = {.dims = dims, .ndims = 0};
    Diag d;
    Graph *g = NULL;
    diag_init(&d, "fuzz");
    int rc = frontend_load_buffer(data, size, "fuzz", NULL, &opt, &g, &d);
    if ((rc == 0) != (g != NULL) || (rc == 0 ? d.n != 0 : d.n != 1))
        abort();
    if (g) {
        /* Touch every shape so a bad rank or dim shows up here. */
        for (int i = 0; i < g->ntensors; i++)
            if (g->tensors[i]->rank > IR_MAX_RANK)
                abort();
    }
    graph_free(g);
    diag_free(&d);
    return 0;
}
