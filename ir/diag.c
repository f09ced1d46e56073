/* diag.c: diagnostics collected by library code and printed by main.c.
 *
 * Library code never prints or exits. A failing function appends one line
 * (already prefixed with the file it concerns) and returns -1; the caller
 * decides how to report it. Tests assert on these lines.
 */
#include "ir.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void diag_init(Diag *d, const char *context)
{
    memset(d, 0, sizeof(*d));
    d->context = context;
}

void diag_vadd(Diag *d, const char *fmt, va_list ap)
{
    char raw[1024], body[1024];
    vsnprintf(raw, sizeof(raw), fmt, ap);
    /* One line, safe to print, whatever the input names contain: newlines,
     * terminal escape codes and invalid UTF-8 come out as \xNN. */
    esc_term(raw, body, sizeof body);
    size_t len = strlen(body) + (d->context ? strlen(d->context) + 2 : 0) + 1;
    char *msg = malloc(len);
    if (!msg)
        abort();
    if (d->context)
        snprintf(msg, len, "%s: %s", d->context, body);
    else
        snprintf(msg, len, "%s", body);
    if (d->n == d->cap) {
        d->cap = d->cap ? 2 * d->cap : 4;
        d->msgs = realloc(d->msgs, (size_t)d->cap * sizeof(char *));
        if (!d->msgs)
            abort();
    }
    d->msgs[d->n++] = msg;
}

void diag_add(Diag *d, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    diag_vadd(d, fmt, ap);
    va_end(ap);
}

const char *diag_first(const Diag *d)
{
    return d->n ? d->msgs[0] : "";
}

void diag_free(Diag *d)
{
    for (int i = 0; i < d->n; i++)
        free(d->msgs[i]);
    free(d->msgs);
    d->msgs = NULL;
    d->n = d->cap = 0;
}
