/* einsum.c: Einsum's equation, parsed once for shape inference, the factor
 * rule and the emitter (which parses it again over local dims).
 *
 * Every subscript letter is an index; an ellipsis stands for the leading
 * dims an operand has beyond its letters, right-aligned across operands
 * and broadcast where one has size 1 (as numpy does). Without "->", the
 * output is the ellipsis dims, then every letter used exactly once, in
 * alphabetical order. A letter repeated within one operand takes its
 * diagonal; a letter absent from the output is summed over.
 */
#include "ir.h"

#include <ctype.h>
#include <stdio.h>
#include <string.h>

/* Letter index: a-z 0..25, A-Z 26..51, ellipsis dims from 52 on. */
static int letter_index(char c)
{
    return c >= 'a' && c <= 'z' ? c - 'a' : c >= 'A' && c <= 'Z' ? 26 + c - 'A' : -1;
}

/* One subscript term into letter indices; ELL marks the ellipsis. */
#define ELL (-2)
static int parse_term(const char **p, int *out, int *n, char *err, size_t cap)
{
    *n = 0;
    while (**p && **p != ',' && **p != '-') {
        char c = **p;
        if (c == ' ') {
            (*p)++;
            continue;
        }
        if (*n == IR_MAX_RANK + 1) {
            snprintf(err, cap, "a term has more than %d subscripts", IR_MAX_RANK);
            return -1;
        }
        if (c == '.') {
            if (strncmp(*p, "...", 3) != 0) {
                snprintf(err, cap, "a lone '.' (an ellipsis is \"...\")");
                return -1;
            }
            for (int k = 0; k < *n; k++)
                if (out[k] == ELL) {
                    snprintf(err, cap, "two ellipses in one term");
                    return -1;
                }
            out[(*n)++] = ELL;
            *p += 3;
            continue;
        }
        if (letter_index(c) < 0) {
            snprintf(err, cap, "'%c' is not a subscript letter", isprint((unsigned char)c) ? c : '?');
            return -1;
        }
        out[(*n)++] = letter_index(c);
        (*p)++;
    }
    return 0;
}

int einsum_parse(const char *eq, int nin, const int *ranks, const int64_t (*dims)[IR_MAX_RANK], EinsumSpec *s,
                 char *err, size_t cap)
{
    int terms[EINSUM_MAX_INPUTS + 1][IR_MAX_RANK + 1], nterm[EINSUM_MAX_INPUTS + 1];
    const char *p = eq;
    int k = 0, explicit_out = 0;
    memset(s, 0, sizeof *s);
    if (nin < 1 || nin > EINSUM_MAX_INPUTS) {
        snprintf(err, cap, "%d inputs (1 to %d are supported)", nin, EINSUM_MAX_INPUTS);
        return -1;
    }
    for (;;) {
        if (k == nin) {
            snprintf(err, cap, "the equation has more terms than the node's %d inputs", nin);
            return -1;
        }
        if (parse_term(&p, terms[k], &nterm[k], err, cap))
            return -1;
        k++;
        if (*p == ',') {
            p++;
            continue;
        }
        break;
    }
    if (k != nin) {
        snprintf(err, cap, "the equation has %d terms for %d inputs", k, nin);
        return -1;
    }
    if (*p == '-') {
        if (p[1] != '>') {
            snprintf(err, cap, "'-' not followed by '>'");
            return -1;
        }
        p += 2;
        if (parse_term(&p, terms[nin], &nterm[nin], err, cap))
            return -1;
        if (*p) {
            snprintf(err, cap, "text after the output term");
            return -1;
        }
        explicit_out = 1;
    }
    /* Ellipsis width: the dims each operand has beyond its letters. */
    int ell_rank = 0, ell_of[EINSUM_MAX_INPUTS];
    for (int i = 0; i < nin; i++) {
        int letters = 0, has_ell = 0;
        for (int j = 0; j < nterm[i]; j++)
            terms[i][j] == ELL ? (has_ell = 1) : letters++;
        ell_of[i] = ranks[i] - letters;
        if ((!has_ell && ell_of[i] != 0) || ell_of[i] < 0) {
            snprintf(err, cap, "input %d has rank %d but its term has %d subscripts%s", i, ranks[i], letters,
                     has_ell ? " and an ellipsis" : "");
            return -1;
        }
        if (ell_of[i] > ell_rank)
            ell_rank = ell_of[i];
    }
    for (int l = 0; l < EINSUM_MAX_LETTERS; l++)
        s->size[l] = -1;
    int count[EINSUM_MAX_LETTERS] = {0};
    /* Operand dims to letters, sizes checked (ellipsis dims broadcast). */
    for (int i = 0; i < nin; i++) {
        int d = 0;
        s->rank[i] = ranks[i];
        for (int j = 0; j < nterm[i]; j++) {
            int span = terms[i][j] == ELL ? ell_of[i] : 1;
            for (int e = 0; e < span; e++, d++) {
                int l = terms[i][j] == ELL ? 52 + ell_rank - ell_of[i] + e : terms[i][j];
                int64_t n = dims[i][d];
                s->letter[i][d] = l;
                if (terms[i][j] != ELL)
                    count[l]++;
                if (s->size[l] < 0 || s->size[l] == 1)
                    s->size[l] = n > s->size[l] ? n : s->size[l];
                if (n != s->size[l] && !(terms[i][j] == ELL && n == 1)) {
                    snprintf(err, cap, "subscript %s of input %d has size %lld, elsewhere %lld",
                             terms[i][j] == ELL ? "in the ellipsis" : "letter", i, (long long)n, (long long)s->size[l]);
                    return -1;
                }
            }
        }
    }
    for (int l = 52; l < 52 + ell_rank; l++)
        if (s->size[l] < 0)
            s->size[l] = 1;
    s->nin = nin;
    /* Output letters. */
    int r = 0;
    if (explicit_out) {
        for (int j = 0; j < nterm[nin]; j++) {
            int l = terms[nin][j];
            if (l == ELL) {
                for (int e = 0; e < ell_rank; e++)
                    s->out[r++] = 52 + e;
                continue;
            }
            if (s->size[l] < 0) {
                snprintf(err, cap, "output letter '%c' is in no input", l < 26 ? 'a' + l : 'A' + l - 26);
                return -1;
            }
            for (int q = 0; q < r; q++)
                if (s->out[q] == l) {
                    snprintf(err, cap, "output letter repeated");
                    return -1;
                }
            s->out[r++] = l;
        }
    } else {
        for (int e = 0; e < ell_rank; e++)
            s->out[r++] = 52 + e;
        for (int l = 0; l < 52; l++)
            if (count[l] == 1)
                s->out[r++] = l;
    }
    if (r > IR_MAX_RANK) {
        snprintf(err, cap, "output rank %d exceeds %d", r, IR_MAX_RANK);
        return -1;
    }
    s->out_rank = r;
    s->nletters = 52 + ell_rank;
    return 0;
}

int shape_einsum(Graph *g, Node *n, Diag *d)
{
    (void)g;
    const char *eq = node_attr_str(n, "equation", NULL);
    if (!eq)
        return shape_fail(d, n, "attribute \"equation\" is missing");
    int ranks[EINSUM_MAX_INPUTS];
    int64_t dims[EINSUM_MAX_INPUTS][IR_MAX_RANK];
    if (n->ninputs > EINSUM_MAX_INPUTS)
        return shape_fail(d, n, "%d inputs (at most %d are supported)", n->ninputs, EINSUM_MAX_INPUTS);
    for (int i = 0; i < n->ninputs; i++) {
        const Tensor *t = n->inputs[i];
        if (!t || !n->inputs[0])
            return shape_fail(d, n, "input %d is empty: every Einsum operand is required", t ? 0 : i);
        if (!dtype_is_float(t->dtype) && !dtype_is_int(t->dtype))
            return shape_fail(d, n, "input \"%s\" has dtype %s; Einsum needs a number type", t->name,
                              dtype_name(t->dtype));
        if (t->dtype != n->inputs[0]->dtype)
            return shape_fail(d, n, "inputs differ in dtype");
        ranks[i] = t->rank;
        memcpy(dims[i], t->dims, sizeof dims[i]);
    }
    EinsumSpec s;
    char err[160];
    if (einsum_parse(eq, n->ninputs, ranks, (const int64_t(*)[IR_MAX_RANK])dims, &s, err, sizeof err))
        return shape_fail(d, n, "equation: %s", err);
    int64_t out[IR_MAX_RANK];
    for (int i = 0; i < s.out_rank; i++)
        out[i] = s.size[s.out[i]];
    return shape_set(d, n, n->outputs[0], n->inputs[0]->dtype, s.out_rank, out);
}
