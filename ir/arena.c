/* arena.c: bump allocation by lifetime, and checked arithmetic.
 *
 * Every object in a Graph (and later in a Plan or Program) comes from one
 * arena and is released with it; nothing is freed one object at a time.
 * Blocks are malloc'd in 64 KiB steps (bigger requests get a block of their
 * own); allocation failure aborts, since no stage can continue without
 * memory and partial results must never be written.
 */
#include "ir.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct ArenaBlock {
    ArenaBlock *next;
    size_t used, cap;
    max_align_t data[];
};

enum { ARENA_BLOCK = 64 * 1024 };

void ir_assert_fail(const char *expr, const char *file, int line)
{
    fprintf(stderr, "onnx2spmd: internal error: %s:%d: assertion '%s' failed\n",
            file, line, expr);
    abort();
}

void *arena_alloc(Arena *a, size_t size)
{
    size = (size + sizeof(max_align_t) - 1) & ~(sizeof(max_align_t) - 1);
    if (size == 0)
        size = sizeof(max_align_t);
    ArenaBlock *b = a->head;
    if (!b || b->cap - b->used < size) {
        size_t cap = size > ARENA_BLOCK ? size : ARENA_BLOCK;
        b = malloc(sizeof(ArenaBlock) + cap);
        if (!b) {
            fprintf(stderr, "onnx2spmd: out of memory (%zu bytes)\n", cap);
            abort();
        }
        b->used = 0;
        b->cap = cap;
        /* A big one-off block goes behind the current head so the head's
         * free space stays usable for small allocations. */
        if (a->head && cap == size) {
            b->next = a->head->next;
            a->head->next = b;
        } else {
            b->next = a->head;
            a->head = b;
        }
    }
    void *p = (char *)b->data + b->used;
    b->used += size;
    memset(p, 0, size);
    return p;
}

char *arena_strndup(Arena *a, const char *s, size_t n)
{
    char *p = arena_alloc(a, n + 1);
    if (n)
        memcpy(p, s, n);
    p[n] = 0;
    return p;
}

char *arena_strdup(Arena *a, const char *s)
{
    return arena_strndup(a, s ? s : "", s ? strlen(s) : 0);
}

void arena_free(Arena *a)
{
    ArenaBlock *b = a->head;
    while (b) {
        ArenaBlock *next = b->next;
        free(b);
        b = next;
    }
    a->head = NULL;
}

int ck_mul_i64(int64_t a, int64_t b, int64_t *out)
{
    int64_t r;
    if (__builtin_mul_overflow(a, b, &r) || r < 0)
        return -1;
    *out = r;
    return 0;
}

int ck_add_i64(int64_t a, int64_t b, int64_t *out)
{
    int64_t r;
    if (__builtin_add_overflow(a, b, &r) || r < 0)
        return -1;
    *out = r;
    return 0;
}

int ck_mul_size(size_t a, size_t b, size_t *out)
{
    return __builtin_mul_overflow(a, b, out) ? -1 : 0;
}
