#!/usr/bin/env python3
"""Lists import circles between the modules of each crate (issue #14: the dependency arrows
inside a crate go one way). A module is a file under src/ (mod.rs and lib.rs name their
directory); an arrow a -> b is a `crate::b...` path in a's code (tests and comments excluded)
or `super::x` resolving to a sibling file. Exit 1 when a circle exists.

Usage: scripts/import-cycles.py [CRATE_DIR ...]   (default: every workspace crate)
"""
import os
import re
import sys

def modules(src):
    out = {}
    for root, _, files in os.walk(src):
        for f in files:
            if not f.endswith('.rs'):
                continue
            path = os.path.join(root, f)
            rel = os.path.relpath(path, src)[:-3].split(os.sep)
            if rel[-1] in ('mod', 'lib', 'main'):
                rel = rel[:-1]
            out['::'.join(rel)] = path
    return out

def code(path):
    text = open(path, encoding='utf-8').read()
    text = text.split('#[cfg(test)]')[0]
    return '\n'.join(l for l in text.splitlines() if not l.lstrip().startswith('//'))

def resolve(mods, parts):
    for n in range(len(parts), 0, -1):
        name = '::'.join(parts[:n])
        if name in mods:
            return name
    return None

def edges(mods):
    g = {m: set() for m in mods}
    for m, path in mods.items():
        body = code(path)
        here = m.split('::') if m else []
        for hit in re.finditer(r'\bcrate((?:::\w+)+)', body):
            t = resolve(mods, hit.group(1).strip(':').split('::'))
            # A module using its own parent's items is not an arrow between rooms.
            if t and t != m and not m.startswith(t + '::'):
                g[m].add(t)
        is_dir = os.path.basename(path) in ('mod.rs', 'lib.rs', 'main.rs')
        parent = here if is_dir else here[:-1]
        for hit in re.finditer(r'\bsuper((?:::\w+)+)', body):
            base = parent[:-1] if is_dir else parent
            t = resolve(mods, base + hit.group(1).strip(':').split('::'))
            if t is not None and t != m and t != '::'.join(base) and not m.startswith(t + '::'):
                g[m].add(t)
    return g

def cycles(g):
    index, low, stack, on, out, n = {}, {}, [], set(), [], [0]
    def visit(v):
        index[v] = low[v] = n[0]; n[0] += 1; stack.append(v); on.add(v)
        for w in g[v]:
            if w not in index:
                visit(w); low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop(); on.discard(w); comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))
    sys.setrecursionlimit(10000)
    for v in g:
        if v not in index:
            visit(v)
    return out

def main():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    crates = sys.argv[1:] or [d for d in ('wire', 'store', 'meta', 'raft', 'http', 'node', 'client', 'cli', 'testkit', 'chaos-tests', 'chaos-tests/lazyfs') if os.path.isdir(os.path.join(root, d, 'src'))]
    found = False
    for c in crates:
        mods = modules(os.path.join(root, c, 'src'))
        for comp in cycles(edges(mods)):
            found = True
            print(f'{c}: ' + ' <-> '.join(comp))
    if not found:
        print('no import circles')
    return 1 if found else 0

if __name__ == '__main__':
    sys.exit(main())
