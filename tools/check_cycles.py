#!/usr/bin/env python3
"""check_cycles.py [-v] DIR...: fails when the source files of a folder depend on
each other in a circle.

For each folder, a graph between its .c and .h files: A -> B when A
#includes B ("b.h", same folder), or when A uses (calls, or takes the
address of) a function, or reads a global object, that B defines without
`static` and A does not define itself. A use counts inside a function body
or an initializer (brace depth > 0), so a prototype is not a use. Comments,
strings and preprocessor lines are ignored: the op table's columns, which an
X-macro expands into dispatch tables (ir/ops.def: shape, rule, emit, fold),
are callbacks by design and not seen here. For each group of files that
reach each other, one cycle is printed, each edge with the names behind it,
and the exit status is 1. -v prints every edge.

Plain python3, no dependencies, no compiler: the C is read with a small
tokenizer that knows comments, strings, braces and parentheses, enough for
this code base's style (a function's name and its parameter list on its
first line, definitions at file level).
"""
import os
import re
import sys

IDENT = re.compile(r"[A-Za-z_]\w*")
KEYWORDS = {
    "if", "for", "while", "switch", "return", "sizeof", "do", "else", "case", "default", "goto", "break",
    "continue", "typedef", "struct", "union", "enum", "static", "extern", "const", "volatile", "inline",
    "_Alignof", "_Static_assert", "_Generic", "__attribute__", "defined",
}


def strip(text):
    """Comments, string and char literals blanked, preprocessor lines dropped
    (with their continuations); #include "x.h" names returned apart."""
    out, includes, i, n = [], [], 0, len(text)
    at_line_start = True
    while i < n:
        c = text[i]
        if at_line_start and c in " \t":
            out.append(c)
            i += 1
            continue
        if at_line_start and c == "#":
            j = i
            while True:  # to the end of the directive, across backslash-newlines
                k = text.find("\n", j)
                if k < 0:
                    k = n
                if k > 0 and text[k - 1] == "\\":
                    j = k + 1
                    continue
                break
            m = re.match(r'#\s*include\s*"([^"]+)"', text[i:k])
            if m:
                includes.append(m.group(1))
            out.append("\n" * text.count("\n", i, k))
            i = k
            continue
        at_line_start = False
        if text.startswith("/*", i):
            k = text.find("*/", i + 2)
            k = n if k < 0 else k + 2
            out.append("\n" * text.count("\n", i, k) or " ")
            i = k
            continue
        if text.startswith("//", i):
            k = text.find("\n", i)
            i = n if k < 0 else k
            continue
        if c in "\"'":
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == "\\" else 1
            out.append(" ")
            i = j + 1
            continue
        if c == "\n":
            at_line_start = True
        out.append(c)
        i += 1
    return "".join(out), includes


def scan(code):
    """(definitions, uses): definitions maps a file-level name to whether it
    is static; uses is the set of identifiers met in a function body or an
    initializer (not a struct's fields, not a member after . or ->)."""
    defs, uses = {}, set()
    depth, counting, member = 0, False, False
    stmt = []  # tokens of the current file-level declaration
    for m in re.finditer(r"[A-Za-z_]\w*|->|[{}();=\[\],.]", code):
        tok = m.group(0)
        if tok in (".", "->"):
            member = True
            continue
        was_member, member = member, False
        if tok == "{":
            if depth == 0:
                counting = declare(stmt, defs, body=True)
            depth += 1
            continue
        if tok == "}":
            depth -= 1
            if depth == 0:
                stmt, counting = [], False
            continue
        if depth > 0:
            if counting and not was_member and IDENT.fullmatch(tok):
                uses.add(tok)
            continue
        if tok == ";":
            declare(stmt, defs, body=False)
            stmt = []
            continue
        stmt.append(tok)
    return defs, uses


def declare(stmt, defs, body):
    """Records what a file-level declaration (its tokens up to `{` or `;`)
    defines: a function when `{` follows its parameter list, an object
    otherwise (unless extern or typedef); a prototype defines nothing.
    Returns whether the braces that follow hold code or an initializer
    (not a struct, union or enum body)."""
    code = body and "=" in stmt
    if not stmt or "typedef" in stmt or stmt[0] == "extern":
        return code
    static = "static" in stmt
    if "=" in stmt:
        stmt = stmt[: stmt.index("=")]
    if "(" in stmt:
        k = stmt.index("(")
        name = stmt[k - 1] if k > 0 else ""
        if body and not code and stmt[-1] == ")" and IDENT.fullmatch(name) and name not in KEYWORDS:
            defs[name] = static
            return True
        return code
    if stmt and stmt[0] in ("struct", "union", "enum") and (body and not code):
        return code  # a type's definition
    groups, cur = [], []
    for t in stmt + [","]:  # one name per declarator: `static FILE *a, *b`
        if t == ",":
            groups.append(cur)
            cur = []
        else:
            cur.append(t)
    for g in groups:
        if "[" in g:
            g = g[: g.index("[")]
        names = [t for t in g if IDENT.fullmatch(t) and t not in KEYWORDS]
        if names:
            defs[names[-1]] = static
    return code


def folder_graph(folder):
    files = sorted(f for f in os.listdir(folder) if f.endswith((".c", ".h")))
    info = {}
    for f in files:
        with open(os.path.join(folder, f), encoding="utf-8", errors="replace") as fh:
            code, includes = strip(fh.read())
        defs, uses = scan(code)
        info[f] = (defs, uses, [i for i in includes if "/" not in i and i in files])
    owner = {}
    for f in files:
        for name, static in info[f][0].items():
            if not static and f.endswith(".c"):
                owner.setdefault(name, f)
    edges = {f: {} for f in files}
    for f in files:
        defs, uses, includes = info[f]
        for inc in includes:
            edges[f].setdefault(inc, []).append("#include")
        for name in sorted(uses):
            g = owner.get(name)
            if g and g != f and name not in defs:
                edges[f].setdefault(g, []).append(name)
    return edges


def cycles(edges):
    """Per strongly connected group of two or more files (Tarjan), in file
    order: (the group, its shortest cycle through its first file, as a
    list of files with first == last)."""
    index, low, on, stack, groups = {}, {}, set(), [], []

    def connect(u):
        index[u] = low[u] = len(index)
        stack.append(u)
        on.add(u)
        for v in sorted(edges[u]):
            if v not in index:
                connect(v)
                low[u] = min(low[u], low[v])
            elif v in on:
                low[u] = min(low[u], index[v])
        if low[u] == index[u]:
            group = []
            while True:
                v = stack.pop()
                on.discard(v)
                group.append(v)
                if v == u:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for u in sorted(edges):
        if u not in index:
            connect(u)
    out = []
    for group in sorted(groups):
        inside = set(group)
        # shortest way back to the group's first file (breadth first)
        start, prev, queue = group[0], {group[0]: None}, [group[0]]
        while queue:
            u = queue.pop(0)
            for v in sorted(edges[u]):
                if v not in inside:
                    continue
                if v == start:
                    path = [u]
                    while prev[path[-1]] is not None:
                        path.append(prev[path[-1]])
                    out.append((group, list(reversed(path)) + [start]))
                    queue = []
                    break
                if v not in prev:
                    prev[v] = u
                    queue.append(v)
    return out


def main(argv):
    verbose = "-v" in argv
    argv = [a for a in argv if a != "-v"]
    if len(argv) < 2:
        print("usage: check_cycles.py [-v] DIR...", file=sys.stderr)
        return 2
    sys.setrecursionlimit(10000)
    bad = 0
    for folder in argv[1:]:
        edges = folder_graph(folder)
        nedges = sum(len(v) for v in edges.values())
        if verbose:
            for a in sorted(edges):
                for b in sorted(edges[a]):
                    print(f"    {a} -> {b}: {', '.join(edges[a][b])}")
        found = cycles(edges)
        if not found:
            print(f"check_cycles: {folder}: {len(edges)} files, {nedges} edges, no cycle")
            continue
        bad = 1
        for group, cycle in found:
            print(f"check_cycles: {folder}: cycle " + " -> ".join(cycle))
            if len(group) > len(cycle) - 1:
                print(f"    (files that reach each other: {', '.join(group)})")
            for a in group:  # every edge among them, so each circle is named
                for b in sorted(edges[a]):
                    if b in group:
                        why = edges[a][b]
                        more = f" (+{len(why) - 6} more)" if len(why) > 6 else ""
                        print(f"    {a} -> {b}: {', '.join(why[:6])}{more}")
    return bad


if __name__ == "__main__":
    sys.exit(main(sys.argv))
