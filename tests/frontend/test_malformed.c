/* test_malformed.c: the malformed-input corpus. Every case must fail with
 * exactly one diagnostic that names the file and the node, tensor or field
 * at fault (run under ASan/UBSan by `make asan`, so none may crash). */
#include "tests/test_util.h"

#include <sys/stat.h>
#include <unistd.h>

#define BAD "tests/models/bad/"

static void expect(const char *file, const char *a, const char *b)
{
    char *msg = load_err(file);
    assert_mentions(msg, file, a, b, NULL);
    free(msg);
}

static void test_load_truncated(void **s) { (void)s; expect(BAD "truncated.onnx", "not a valid ONNX model", "truncated"); }
static void test_load_random_bytes(void **s) { (void)s; expect(BAD "random_bytes.onnx", "not a valid ONNX model", "corrupt"); }
static void test_load_dangling_input(void **s) { (void)s; expect(BAD "dangling_input.onnx", "node \"add_ghost\" (Add)", "input \"ghost\" is not produced"); }
static void test_load_cycle(void **s)
{
    (void)s;
    char *msg = load_err(BAD "cycle.onnx");
    assert_mentions(msg, "cycle", NULL);
    /* The named node must really be on the cycle, not just downstream. */
    assert_true(strstr(msg, "\"cyc_add\"") || strstr(msg, "\"cyc_relu\""));
    free(msg);
}
static void test_load_negative_dim(void **s) { (void)s; expect(BAD "negative_dim.onnx", "graph input \"x\"", "dim 1 is negative"); }
static void test_load_dims_overflow(void **s) { (void)s; expect(BAD "dims_overflow.onnx", "graph input \"x\"", "overflows int64"); }
/* Unsupported ops: one line listing every op type with its count. */
static void test_load_unknown_op(void **s) { (void)s; expect(BAD "unknown_op.onnx", "op type the compiler does not support", "FooBar (1)"); }
static void test_load_loop(void **s) { (void)s; expect(BAD "loop.onnx", "does not support", "Loop (1)"); }
static void test_load_unsupported_dtype(void **s) { (void)s; expect(BAD "unsupported_dtype.onnx", "graph input \"x\"", "complex64 is not supported"); }
static void test_load_shape_mismatch(void **s) { (void)s; expect(BAD "shape_mismatch.onnx", "node \"bad_add\" (Add)", "do not broadcast"); }
static void test_load_symbolic_dim_unbound(void **s) { (void)s; expect(BAD "symbolic_dim.onnx", "graph input \"x\"", "--dim batch=VALUE"); }
static void test_load_external_escape(void **s) { (void)s; expect(BAD "external_escape.onnx", "initializer \"w\"", "\"../outside.bin\""); }
static void test_load_external_absolute(void **s) { (void)s; expect(BAD "external_absolute.onnx", "initializer \"w\"", "\"/etc/passwd\""); }
static void test_load_external_past_end(void **s) { (void)s; expect(BAD "external_past_end.onnx", "initializer \"w\"", "past the end of \"weights.bin\""); }

static void test_load_unused_dim_binding(void **s)
{
    (void)s;
    DimBinding b[] = {{"batch", 4}, {"seq", 7}};
    char *msg = load_err_dims(BAD "symbolic_dim.onnx", b, 2);
    assert_mentions(msg, "--dim seq", NULL);
    free(msg);
}

/* A link inside the model folder that points outside it must be refused
 * even though its name looks harmless. */
static void test_load_external_symlink_escape(void **s)
{
    (void)s;
    char dir[] = "/tmp/onnx2spmd_test_XXXXXX";
    assert_non_null(mkdtemp(dir));
    char path[512], model[512], outside[512];
    snprintf(outside, sizeof outside, "%s.outside", dir);
    FILE *f = fopen(outside, "wb");
    assert_non_null(f);
    float zeros[16] = {0};
    fwrite(zeros, sizeof zeros, 1, f);
    fclose(f);
    snprintf(path, sizeof path, "%s/weights.bin", dir);
    assert_int_equal(symlink(outside, path), 0);
    /* external_ok refers to weights.bin: copy it next to the link. */
    snprintf(model, sizeof model, "%s/model.onnx", dir);
    FILE *in = fopen("tests/models/external/external_ok.onnx", "rb"), *out = fopen(model, "wb");
    assert_non_null(in);
    assert_non_null(out);
    char buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, in)) > 0)
        fwrite(buf, 1, n, out);
    fclose(in);
    fclose(out);
    char *msg = load_err(model);
    assert_mentions(msg, "initializer \"w\"", "resolves outside the model's folder", NULL);
    free(msg);
    unlink(path);
    unlink(model);
    unlink(outside);
    rmdir(dir);
}

/* Every prefix of a valid model either loads or fails with one line. */
static void test_load_every_truncation(void **s)
{
    (void)s;
    FILE *f = fopen("tests/models/mlp.onnx", "rb");
    assert_non_null(f);
    static unsigned char buf[1 << 20];
    size_t len = fread(buf, 1, sizeof buf, f);
    fclose(f);
    for (size_t cut = 0; cut < len; cut += 1 + cut / 16) {
        Diag d;
        Graph *g = NULL;
        diag_init(&d, "prefix");
        int rc = frontend_load_buffer(buf, cut, "prefix", NULL, NULL, &g, &d);
        assert_true(rc == 0 ? d.n == 0 && g != NULL : d.n == 1 && g == NULL);
        graph_free(g);
        diag_free(&d);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_load_truncated),
        cmocka_unit_test(test_load_random_bytes),
        cmocka_unit_test(test_load_dangling_input),
        cmocka_unit_test(test_load_cycle),
        cmocka_unit_test(test_load_negative_dim),
        cmocka_unit_test(test_load_dims_overflow),
        cmocka_unit_test(test_load_unknown_op),
        cmocka_unit_test(test_load_loop),
        cmocka_unit_test(test_load_unsupported_dtype),
        cmocka_unit_test(test_load_shape_mismatch),
        cmocka_unit_test(test_load_symbolic_dim_unbound),
        cmocka_unit_test(test_load_external_escape),
        cmocka_unit_test(test_load_external_absolute),
        cmocka_unit_test(test_load_external_past_end),
        cmocka_unit_test(test_load_unused_dim_binding),
        cmocka_unit_test(test_load_external_symlink_escape),
        cmocka_unit_test(test_load_every_truncation),
    };
    return cmocka_run_group_tests_name("frontend/malformed", tests, NULL, NULL);
}
