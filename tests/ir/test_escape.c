/* test_escape.c: each writer of ir/escape.c against the strings that would
 * break out of its context. */
#include "tests/test_util.h"

#include <string.h>

/* What a FILE writer produced, as a NUL-terminated string. */
static char *capture(void (*fn)(FILE *, const char *), const char *s, char *buf, size_t cap)
{
    FILE *f = fmemopen(buf, cap, "w");
    assert_non_null(f);
    fn(f, s);
    fclose(f);
    return buf;
}

static void test_esc_c_comment_cannot_close_or_open(void **st)
{
    (void)st;
    char buf[256];
    esc_c_comment("a*/ system(\"x\"); /*b", buf, sizeof buf);
    assert_null(strstr(buf, "*/"));
    assert_null(strstr(buf, "/*"));
    assert_string_equal(buf, "a\\x2a/ system(\"x\"); /\\x2ab");
    /* No trigraph, no line splice, no raw newline or non-ASCII byte. */
    esc_c_comment("?\?/\n\\\xff\xc3\xa9", buf, sizeof buf);
    assert_string_equal(buf, "\\x3f\\x3f/\\x0a\\x5c\\xff\\xc3\\xa9");
    /* A trailing '/' cannot meet the comment's own closing star. */
    esc_c_comment("dir/", buf, sizeof buf);
    assert_string_equal(buf, "dir\\x2f");
    /* Long names are cut to fit, visibly. */
    char longname[10240];
    memset(longname, '*', sizeof longname - 1);
    longname[sizeof longname - 1] = 0;
    esc_c_comment(longname, buf, 64);
    assert_true(strlen(buf) < 64);
    assert_non_null(strstr(buf, "..."));
    assert_null(strstr(buf, "*"));
}

static void test_esc_c_string_exact_and_inert(void **st)
{
    (void)st;
    char buf[512];
    capture(esc_c_string, "\"); system(\"x\"); (\"", buf, sizeof buf);
    assert_string_equal(buf, "\"\\\"); system(\\\"x\\\"); (\\\"\"");
    capture(esc_c_string, "?\?/\\%n\n\xff" "7", buf, sizeof buf);
    /* '?' escaped (no trigraph), octal escapes are three digits so the
     * digit after them stays a digit. */
    assert_string_equal(buf, "\"\\?\\?/\\\\%n\\012\\3777\"");
}

static void test_esc_term_controls_bidi_and_bad_utf8(void **st)
{
    (void)st;
    char buf[256];
    size_t n = esc_term("ok \x1b[2J \xe2\x80\xae \xc2\x9b \xff caf\xc3\xa9 a\\b", buf, sizeof buf);
    assert_string_equal(buf, "ok \\x1b[2J \\xe2\\x80\\xae \\xc2\\x9b \\xff caf\xc3\xa9 a\\\\b");
    assert_int_equal(n, strlen(buf));
    /* snprintf-style: the full length even when the buffer is short. */
    assert_int_equal(esc_term("\x01\x02", buf, 3), 8);
    assert_string_equal(buf, "\\x");
    /* Overlong NUL, surrogate, truncated sequence. */
    esc_term("\xc0\x80\xed\xa0\x80\xe2\x82", buf, sizeof buf);
    assert_string_equal(buf, "\\xc0\\x80\\xed\\xa0\\x80\\xe2\\x82");
}

static void test_json_write_str_always_valid_utf8(void **st)
{
    (void)st;
    char buf[256];
    capture(json_write_str, "q\"b\\ \x1b \xe2\x80\xae \xff \xc3\xa9", buf, sizeof buf);
    assert_string_equal(buf, "\"q\\\"b\\\\ \\u001b \\u202e \\ufffd \xc3\xa9\"");
}

static void test_dot_write_str_stays_in_label(void **st)
{
    (void)st;
    char buf[256];
    capture(dot_write_str, "a\"];x[label=\"\n", buf, sizeof buf);
    assert_string_equal(buf, "a\\\"];x[label=\\\"\\\\x0a");
}

static void test_esc_label_shares_safe_names(void **st)
{
    (void)st;
    Arena a = {0};
    const char *safe = "layers.0/attn/MatMul_output_0";
    assert_ptr_equal(esc_label(&a, safe), safe);
    assert_string_equal(esc_label(&a, "a\nb"), "a\\x0ab");
    arena_free(&a);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_esc_c_comment_cannot_close_or_open),
        cmocka_unit_test(test_esc_c_string_exact_and_inert),
        cmocka_unit_test(test_esc_term_controls_bidi_and_bad_utf8),
        cmocka_unit_test(test_json_write_str_always_valid_utf8),
        cmocka_unit_test(test_dot_write_str_stays_in_label),
        cmocka_unit_test(test_esc_label_shares_safe_names),
    };
    return cmocka_run_group_tests_name("ir/escape", tests, NULL, NULL);
}
