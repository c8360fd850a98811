#!/usr/bin/env python3
"""Finds import loops between the modules of each crate (`make lint` runs it).

A module imports another when its code names a path into it (`use crate::a::b`, `super::x`,
`crate::a::f()`); a re-export (`pub use child::X`) is an import too, and so is `super::` from a
child. A loop is two or more modules that reach each other that way, a module and its own
children included. Inline `#[cfg(test)] mod tests` blocks are left out (they only look back at
their file). Exits 1 and names each loop when there is one.
"""

import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SKIP = {"target", "node_modules", ".git", ".tools", ".venv", "fuzz"}


def crates():
    for dirpath, dirnames, filenames in os.walk(ROOT):
        dirnames[:] = [d for d in dirnames if d not in SKIP and not d.startswith(".")]
        if "Cargo.toml" in filenames and os.path.isdir(os.path.join(dirpath, "src")):
            yield os.path.join(dirpath, "src")


def module_of(src, path):
    rel = os.path.relpath(path, src)[: -len(".rs")].split(os.sep)
    if rel[-1] == "mod":
        rel = rel[:-1]
    if rel in (["lib"], ["main"]):
        return ()
    return tuple(rel)


def code(path):
    text = open(path, encoding="utf-8").read()
    cut = re.search(r"#\[cfg\(test\)\]\s*mod \w+\s*\{", text)
    if cut:
        text = text[: cut.start()]
    text = re.sub(r"//[^\n]*", "", text)
    return re.sub(r'"(?:\\.|[^"\\])*"', '""', text)


def use_paths(text):
    """Every path a `use` names, its braces expanded."""
    for m in re.finditer(r"\buse\s+([^;]+);", text):
        yield from expand(re.sub(r"\s+", "", m.group(1)))


def expand(tree):
    if "{" not in tree:
        yield re.sub(r"\bas\w+$", "", tree.split(" as ")[0])
        return
    head, _, rest = tree.partition("{")
    inner = rest[: rest.rfind("}")]
    depth, part = 0, ""
    for ch in inner + ",":
        if ch == "," and depth == 0:
            if part:
                yield from expand(head + part)
            part = ""
            continue
        depth += ch == "{"
        depth -= ch == "}"
        part += ch
    return


def resolve(here, path, modules):
    segs = path.split("::")
    if segs[0] == "crate":
        at, segs = (), segs[1:]
    elif segs[0] in ("super", "self"):
        at = here
        while segs and segs[0] in ("super", "self"):
            if segs[0] == "super":
                at = at[:-1]
            segs = segs[1:]
    elif here + (segs[0],) in modules:
        at = here  # a child module, named from its parent
    else:
        return None
    for s in segs:
        if at + (s,) in modules:
            at = at + (s,)
        else:
            break
    return at


def loops(src):
    files = {}
    for dirpath, _, filenames in os.walk(src):
        for f in filenames:
            if f.endswith(".rs"):
                p = os.path.join(dirpath, f)
                files[module_of(src, p)] = p
    modules = set(files)
    edges = {m: set() for m in modules}
    for m, p in files.items():
        text = code(p)
        paths = set(use_paths(text))
        paths |= set(re.findall(r"(?<![\w:])(?:crate|super|self)(?:::\w+)+", text))
        # A child module named from its parent (`batch::SCHEME` in the crate root).
        paths |= {
            p
            for p in re.findall(r"(?<![\w:])[a-z_]\w*(?:::\w+)+", text)
            if m + (p.split("::")[0],) in modules
        }
        for path in paths:
            t = resolve(m, path, modules)
            if t is not None and t != m:
                edges[m].add(t)
    # Tarjan's strongly connected components.
    global EDGES
    EDGES = edges
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(modules):
        if v not in index:
            visit(v)
    return out


EDGES = {}


def main():
    found = 0
    for src in sorted(crates()):
        for comp in loops(src):
            found += 1
            names = ", ".join("::".join(c) or "(crate root)" for c in comp)
            print(f"{os.path.relpath(src, ROOT)}: modules import each other: {names}")
            for a in comp:
                for b in sorted(EDGES[a] & set(comp)):
                    print(f"    {'::'.join(a) or '(crate root)'} -> {'::'.join(b) or '(crate root)'}")
    if found:
        sys.exit(1)
    print("module_cycles: no module imports one that imports it back")


if __name__ == "__main__":
    main()
