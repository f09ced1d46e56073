/* json.c: the two JSON writers every report needs (inspect, plan).
 *
 * Strings are escaped as JSON requires (quote, backslash, control
 * characters); everything else in ONNX names passes through as UTF-8.
 */
#include "ir.h"

#include <stdio.h>

void json_write_str(FILE *f, const char *s)
{
    fputc('"', f);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            fprintf(f, "\\%c", c);
        else if (c < 0x20)
            fprintf(f, "\\u%04x", c);
        else
            fputc(c, f);
    }
    fputc('"', f);
}

void json_write_dims(FILE *f, const int64_t *dims, int rank)
{
    fputc('[', f);
    for (int i = 0; i < rank; i++)
        fprintf(f, "%s%lld", i ? ", " : "", (long long)dims[i]);
    fputc(']', f);
}
