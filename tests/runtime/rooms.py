#!/usr/bin/env python3
"""The runtime's rooms keep their one-way order (docs/runtime.md).

usage: rooms.py RUNTIME_DIR ROOMS LIB.a...

ROOMS lists the room folders from the top down, separated by ';' (CMake's
SHARD_RT_ROOMS). A file may include, and call, only files of its own room
or of rooms below it. Two things are read:

  - every #include "..." of runtime/*/*.{c,h}: a bare name is the room
    that holds that header (a name the runtime does not hold, a kernel's
    header, is outside); a path is taken relative to the file;
  - every symbol an object of the built libraries leaves undefined, matched
    to the object that defines it (nm): calls and data through a
    declaration that sits in a lower room's header are seen too;
  - every function a header declares: a header declares only what its own
    room or a lower one defines.

Besides, no two files may call each other in a circle, inside a room or
across. Prints what it counted; exits 1 on any breach, naming it.
"""
import os
import re
import subprocess
import sys


def main():
    root, rooms, libs = sys.argv[1], sys.argv[2].split(';'), sys.argv[3:]
    rank = {r: i for i, r in enumerate(rooms)}
    home = {}  # file name -> room
    bad = []
    for dirpath, _, names in os.walk(root):
        rel = os.path.relpath(dirpath, root)
        for n in names:
            if not n.endswith(('.c', '.h')):
                continue
            if rel not in rank:
                bad.append(f"{os.path.join(rel, n)}: in no room (the rooms: {' '.join(rooms)})")
                continue
            if n in home:
                bad.append(f"{n}: in two rooms, {home[n]} and {rel}")
            home[n] = rel

    includes = 0
    for n, room in sorted(home.items()):
        path = os.path.join(root, room, n)
        for line in open(path, encoding='utf-8'):
            m = re.match(r'\s*#\s*include\s+"([^"]+)"', line)
            if not m:
                continue
            inc = m.group(1)
            if '/' in inc:
                target = os.path.relpath(os.path.normpath(os.path.join(root, room, inc)), root)
                there = target.split(os.sep)[0] if not target.startswith('..') else None
            else:
                there = home.get(inc)
            includes += 1
            if there is not None and there in rank and rank[there] < rank[room]:
                bad.append(f"{room}/{n} includes {inc} of the higher room {there}")

    # Which object defines each symbol, and which it leaves undefined.
    defines, needs = {}, {}
    for lib in libs:
        out = subprocess.run(['nm', '-A', '--defined-only', lib], capture_output=True,
                             text=True, check=True).stdout
        for line in out.splitlines():  # LIB:OBJECT:ADDRESS TYPE NAME
            obj, rest = line[len(lib) + 1:].split(':', 1)
            parts = rest.split()
            if len(parts) == 3 and parts[1] in 'TDBRC':
                defines.setdefault(parts[2], obj)
        out = subprocess.run(['nm', '-A', '--undefined-only', lib], capture_output=True,
                             text=True, check=True).stdout
        for line in out.splitlines():  # LIB:OBJECT: U NAME
            obj, rest = line[len(lib) + 1:].split(':', 1)
            parts = rest.split()
            if len(parts) == 2 and parts[0] == 'U':
                needs.setdefault(obj, set()).add(parts[1])

    def source(obj):  # "exec.c.o" -> "exec.c"
        return obj[:-2] if obj.endswith('.o') else obj

    calls, edges = 0, {}
    for obj, syms in sorted(needs.items()):
        me = source(obj)
        for s in sorted(syms):
            other = defines.get(s)
            if other is None or other == obj:
                continue
            them = source(other)
            if me not in home or them not in home:
                continue
            calls += 1
            edges.setdefault(me, {}).setdefault(them, []).append(s)
            if rank[home[them]] < rank[home[me]]:
                bad.append(f"{home[me]}/{me} uses {s} of {home[them]}/{them}, a higher room")

    # A header declares only what its own room or a lower one defines.
    decls = 0
    for n, room in sorted(home.items()):
        if not n.endswith('.h'):
            continue
        for line in open(os.path.join(root, room, n), encoding='utf-8'):
            m = re.match(r'(?!static|typedef|return|#)[A-Za-z_][\w \t*]*?\b(\w+)\s*\(', line)
            if not m or m.group(1) not in defines:
                continue
            decls += 1
            them = source(defines[m.group(1)])
            if them in home and rank[home[them]] < rank[room]:
                bad.append(f"{room}/{n} declares {m.group(1)} of {home[them]}/{them}, a higher room")

    # Circles between files: Tarjan's strongly connected components.
    index, low, stack, on, circles = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in edges.get(v, {}):
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
                circles.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(edges):
        if v not in index:
            visit(v)
    for comp in circles:
        ties = [f"{a} -> {b} ({', '.join(edges[a][b][:3])})"
                for a in comp for b in comp if b in edges.get(a, {})]
        bad.append("a circle: " + "; ".join(ties))

    print(f"rooms: {len(rooms)} ({' > '.join(rooms)}), files: {len(home)}, "
          f"includes read: {includes}, declarations: {decls}, uses between files: {calls}, "
          f"circles: {len(circles)}, "
          f"breaches: {len(bad)}")
    for b in bad:
        print("  " + b)
    if not home or not calls:
        print("rooms: nothing read; the paths are wrong")
        return 1
    return 1 if bad else 0


if __name__ == '__main__':
    sys.exit(main())
