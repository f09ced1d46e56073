/* escape.c: untrusted strings, one writer per place they land.
 *
 * A model is untrusted input and what the compiler writes is code people
 * run, so no string taken from a model (tensor and node names, producer,
 * attribute strings) or from a path is ever written raw. Each destination
 * has exactly one function here, and each function is strict enough that
 * what it writes cannot end its context, start another one, or be read as
 * a format:
 *
 *   terminal / text reports  esc_term, esc_label   control characters,
 *                            C1 controls, bidi overrides and invalid UTF-8
 *                            as \xNN; a backslash doubled
 *   C and CUDA comments      esc_c_comment   printable ASCII only; '*', '?'
 *                            and '\' escaped so no comment can close, open
 *                            or form a trigraph; bounded length
 *   C string literals        esc_c_string    exact bytes: '"', '\' and '?'
 *                            backslash-escaped, anything else outside
 *                            printable ASCII as a three-digit octal escape
 *   JSON strings             json_write_str  quote, backslash, control
 *                            characters, C1 and bidi as \uXXXX; invalid
 *                            UTF-8 as U+FFFD, so the file is always UTF-8
 *   Graphviz labels          dot_write_str   the terminal form, with '"' and
 *                            '\\' escaped (inside a quoted label)
 *
 * Nothing from a model reaches run.sh or the generated Makefile: their
 * only names (rank<k>) are generated.
 */
#include "ir.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Length of the valid UTF-8 sequence at s (1-4), 0 if s does not start
 * one (stray continuation byte, overlong form, surrogate, > U+10FFFF). */
static int utf8_decode(const unsigned char *s, uint32_t *cp)
{
    if (s[0] < 0x80) {
        *cp = s[0];
        return 1;
    }
    int n = s[0] >= 0xF0 ? 4 : s[0] >= 0xE0 ? 3 : s[0] >= 0xC0 ? 2 : 0;
    if (n == 0 || s[0] > 0xF4)
        return 0;
    uint32_t c = s[0] & (0x7F >> n);
    for (int i = 1; i < n; i++) {
        if ((s[i] & 0xC0) != 0x80)
            return 0; /* also stops at the terminating NUL */
        c = (c << 6) | (s[i] & 0x3F);
    }
    static const uint32_t min[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (c < min[n] || c > 0x10FFFF || (c >= 0xD800 && c <= 0xDFFF))
        return 0;
    *cp = c;
    return n;
}

/* Code points a terminal or an editor would act on or display misleadingly:
 * C0 and C1 controls, DEL, and the invisible or direction-changing marks
 * of the "Trojan Source" attacks. */
static int unsafe_cp(uint32_t c)
{
    return c < 0x20 || (c >= 0x7F && c <= 0x9F) || c == 0x061C || (c >= 0x200B && c <= 0x200F) ||
           (c >= 0x2028 && c <= 0x202E) || (c >= 0x2060 && c <= 0x2069) || c == 0xFEFF;
}

static const char hexdig[] = "0123456789abcdef";

size_t esc_term(const char *s, char *out, size_t cap)
{
    const unsigned char *p = (const unsigned char *)s;
    size_t n = 0;
#define PUT(ch) (n + 1 < cap ? (void)(out[n] = (char)(ch)) : (void)0, n++)
    while (*p) {
        uint32_t c;
        int len = utf8_decode(p, &c);
        if (len == 0 || unsafe_cp(c)) {
            int k = len ? len : 1;
            for (int i = 0; i < k; i++) {
                PUT('\\');
                PUT('x');
                PUT(hexdig[p[i] >> 4]);
                PUT(hexdig[p[i] & 15]);
            }
            p += k;
            continue;
        }
        if (c == '\\')
            PUT('\\');
        for (int i = 0; i < len; i++)
            PUT(p[i]);
        p += len;
    }
#undef PUT
    if (cap)
        out[n < cap ? n : cap - 1] = 0;
    return n;
}

const char *esc_label(Arena *a, const char *s)
{
    size_t n = esc_term(s, NULL, 0);
    if (n == strlen(s))
        return s; /* already safe (the common case): share the name */
    char *buf = arena_alloc(a, n + 1);
    esc_term(s, buf, n + 1);
    return buf;
}

const char *esc_c_comment(const char *s, char *buf, size_t cap)
{
    IR_ASSERT(cap >= 16);
    const unsigned char *p = (const unsigned char *)s;
    size_t n = 0;
    for (; *p; p++) {
        /* Room for the widest escape, "..." and the NUL. */
        if (n + 4 + 3 + 1 > cap) {
            memcpy(buf + n, "...", 3);
            n += 3;
            break;
        }
        unsigned char c = *p;
        int plain = c >= 0x20 && c < 0x7F && c != '*' && c != '?' && c != '\\' &&
                    !(c == '/' && p[1] == 0); /* a trailing '/' could meet the closing "*" + "/" */
        if (plain) {
            buf[n++] = (char)c;
        } else {
            buf[n++] = '\\';
            buf[n++] = 'x';
            buf[n++] = hexdig[c >> 4];
            buf[n++] = hexdig[c & 15];
        }
    }
    buf[n] = 0;
    return buf;
}

void esc_c_string(FILE *f, const char *s)
{
    fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        unsigned char c = *p;
        if (c == '"' || c == '\\' || c == '?') /* '?': no trigraph can form */
            fprintf(f, "\\%c", c);
        else if (c >= 0x20 && c < 0x7F)
            fputc(c, f);
        else /* octal takes at most three digits, so the next char is safe */
            fprintf(f, "\\%03o", c);
    }
    fputc('"', f);
}

void json_write_str(FILE *f, const char *s)
{
    const unsigned char *p = (const unsigned char *)s;
    fputc('"', f);
    while (*p) {
        uint32_t c;
        int len = utf8_decode(p, &c);
        if (len == 0) {
            fputs("\\ufffd", f);
            p++;
            continue;
        }
        if (c == '"' || c == '\\')
            fprintf(f, "\\%c", (int)c);
        else if (unsafe_cp(c))
            fprintf(f, "\\u%04x", (unsigned)c);
        else
            fwrite(p, 1, (size_t)len, f);
        p += len;
    }
    fputc('"', f);
}

void dot_write_str(FILE *f, const char *s)
{
    char small[256];
    size_t n = esc_term(s, small, sizeof small);
    char *t = small;
    if (n >= sizeof small) {
        t = malloc(n + 1);
        if (!t)
            abort();
        esc_term(s, t, n + 1);
    }
    for (const char *q = t; *q; q++) {
        if (*q == '"' || *q == '\\')
            fputc('\\', f);
        fputc(*q, f);
    }
    if (t != small)
        free(t);
}

void json_write_dims(FILE *f, const int64_t *dims, int rank)
{
    if (rank < 0) { /* unknown (after an unsupported op) */
        fputs("null", f);
        return;
    }
    fputc('[', f);
    for (int i = 0; i < rank; i++)
        fprintf(f, "%s%lld", i ? ", " : "", (long long)dims[i]);
    fputc(']', f);
}
