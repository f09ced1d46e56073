/* test_util.h: helpers shared by the CMocka unit tests.
 *
 * Tests run from the repository root (the Makefile does so), so model
 * paths are relative to it. load_ok() and load_err() wrap the frontend:
 * the first requires success, the second requires failure with exactly
 * one diagnostic and returns it for the caller's substring checks.
 */
#ifndef ONNX2SPMD_TEST_UTIL_H
#define ONNX2SPMD_TEST_UTIL_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "frontend/frontend.h"
#include "ir/ir.h"

/* A hand-built node of op over a (and b, unless NULL) writing the tensor
 * `out`, and named after it; the caller sets the output's dtype and shape. */
static inline Node *test_node(Graph *g, OpKind op, Tensor *a, Tensor *b, const char *out)
{
    Node *n = graph_node_add(g, op, out);
    n->ninputs = b ? 2 : 1;
    n->inputs = arena_alloc(&g->arena, 2 * sizeof(Tensor *));
    n->inputs[0] = a;
    n->inputs[1] = b;
    n->noutputs = 1;
    n->outputs = arena_alloc(&g->arena, sizeof(Tensor *));
    n->outputs[0] = graph_tensor_get(g, out);
    n->outputs[0]->producer = n;
    return n;
}

static inline Graph *load_ok_dims(const char *path, const DimBinding *dims, int ndims)
{
    Diag d;
    Graph *g = NULL;
    FrontendOptions opt = {.dims = dims, .ndims = ndims};
    diag_init(&d, path);
    int rc = frontend_load_file(path, &opt, &g, &d);
    if (rc != 0)
        print_error("load %s failed: %s\n", path, diag_first(&d));
    assert_int_equal(rc, 0);
    assert_int_equal(d.n, 0);
    diag_free(&d);
    return g;
}

static inline Graph *load_ok(const char *path)
{
    return load_ok_dims(path, NULL, 0);
}

/* Loads a model that must fail; returns its single diagnostic (malloc'd). */
static inline char *load_err_dims(const char *path, const DimBinding *dims, int ndims)
{
    Diag d;
    Graph *g = NULL;
    FrontendOptions opt = {.dims = dims, .ndims = ndims};
    diag_init(&d, path);
    int rc = frontend_load_file(path, &opt, &g, &d);
    assert_int_equal(rc, -1);
    assert_null(g);
    assert_int_equal(d.n, 1);
    char *msg = strdup(d.msgs[0]);
    diag_free(&d);
    return msg;
}

static inline char *load_err(const char *path)
{
    return load_err_dims(path, NULL, 0);
}

/* Asserts that msg contains every given substring (NULL-terminated). */
static inline void assert_mentions(const char *msg, ...)
{
    va_list ap;
    va_start(ap, msg);
    for (const char *s = va_arg(ap, const char *); s; s = va_arg(ap, const char *)) {
        if (!strstr(msg, s))
            print_error("diagnostic \"%s\" does not mention \"%s\"\n", msg, s);
        assert_non_null(strstr(msg, s));
    }
    va_end(ap);
    assert_null(strchr(msg, '\n'));
}

#endif
