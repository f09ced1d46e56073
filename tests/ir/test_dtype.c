/* test_dtype.c: the storage types' element conversions (ir/graph.c).
 *
 * float16 and bfloat16 rounding against numpy and ml_dtypes (the values in
 * the table were printed by them: round to nearest even, overflow to
 * infinity, float16 subnormals kept), and dtype_load/dtype_store over
 * every storage type (integers wrap or saturate as documented).
 */
#include "tests/test_util.h"

#include <math.h>

static void test_half_and_bf16_rounding(void **s)
{
    (void)s;
    static const struct { float v; uint16_t h, b; } cases[] = {
        {0.0f, 0x0000, 0x0000},          {-0.0f, 0x8000, 0x8000},      {1.0f, 0x3c00, 0x3f80},
        {65504.0f, 0x7bff, 0x4780},      {65519.9883f, 0x7bff, 0x4780}, {65520.0f, 0x7c00, 0x4780},
        {9.99999994e-09f, 0x0000, 0x322c}, {5.96046448e-08f, 0x0001, 0x3380}, {2.98000007e-08f, 0x0000, 0x3300},
        {1.00097656f, 0x3c01, 0x3f80},   {1.00048828f, 0x3c00, 0x3f80}, {1.00146484f, 0x3c02, 0x3f80},
        {-2.49999994e-05f, 0x81a3, 0xb7d2}, {INFINITY, 0x7c00, 0x7f80}, {3.00000001e+38f, 0x7c00, 0x7f62},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        assert_int_equal(float_to_half(cases[i].v), cases[i].h);
        assert_int_equal(float_to_bf16(cases[i].v), cases[i].b);
    }
    /* Every finite half survives the round trip through float. */
    for (uint32_t h = 0; h < 0x10000; h++)
        if ((h & 0x7c00) != 0x7c00)
            assert_int_equal(float_to_half(half_to_float((uint16_t)h)), h);
    assert_true(isnan(half_to_float(float_to_half(NAN))));
    assert_true(isnan(bf16_to_float(float_to_bf16(NAN))));
    assert_true(bf16_to_float(0x3f80) == 1.0f);
}

static void test_load_store_every_type(void **s)
{
    (void)s;
    static const DType types[] = {DT_F32, DT_F16, DT_BF16, DT_F64, DT_I64, DT_I32, DT_I16, DT_I8,
                                  DT_U32, DT_U16, DT_U8, DT_BOOL};
    unsigned char buf[64];
    for (size_t k = 0; k < sizeof types / sizeof types[0]; k++) {
        DType t = types[k];
        assert_true(dtype_supported((int)t));
        dtype_store(t, buf, 3, 5.0);
        assert_true(dtype_load(t, buf, 3) == (t == DT_BOOL ? 1.0 : 5.0));
        assert_int_equal(dtype_compute(t), dtype_is_float(t) ? DT_F32 : t == DT_BOOL ? DT_BOOL : DT_I64);
    }
    dtype_store(DT_U8, buf, 0, 256 + 7); /* integers wrap to the type's width */
    assert_true(dtype_load(DT_U8, buf, 0) == 7);
    dtype_store(DT_I16, buf, 0, -1);
    assert_true(dtype_load(DT_I16, buf, 0) == -1);
    dtype_store(DT_U16, buf, 0, -1);
    assert_true(dtype_load(DT_U16, buf, 0) == 65535);
    dtype_store(DT_I64, buf, 0, NAN); /* NaN is 0, out of range saturates */
    assert_true(dtype_load(DT_I64, buf, 0) == 0);
    dtype_store(DT_I64, buf, 0, 1e300);
    assert_true(dtype_load(DT_I64, buf, 0) == 9223372036854775807.0);
    assert_false(dtype_supported(13)); /* uint64 */
    assert_false(dtype_supported(17)); /* float8e4m3fn */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_half_and_bf16_rounding),
        cmocka_unit_test(test_load_store_every_type),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
