#!/usr/bin/env python3
"""Fails on an `#include <ctg/...>` (or "...") in include/ctg that goes against the layer order.

    core < graph < lower < exec < exec/{cpu,cuda}
    precision and nn above graph (nn may use precision)
    io and optim above exec (optim may use io), dist above exec, optim and io
    optim/cuda (the GPU's optimizer) above optim and exec/cuda

A header may include its own folder and the folders below it. The umbrella headers at
include/ctg/ (ctg.hpp, model.hpp) may include anything, and so may a forwarding header (one
whose second line starts with "// Forwarding header"), which only keeps an old include path
working.

    check_layers.py <repo>/include/ctg     check the tree; exit 1 and list every violation
    check_layers.py --self-test            prove the check rejects an upward include
"""
import os
import re
import sys
import tempfile

BELOW = {
    "core": set(),
    "graph": {"core"},
    "lower": {"core", "graph"},
    "precision": {"core", "graph"},
    "nn": {"core", "graph", "precision"},
    "exec": {"core", "graph", "lower"},
    "exec/cpu": {"core", "graph", "lower", "exec"},
    "exec/cuda": {"core", "graph", "lower", "exec"},
    "io": {"core", "graph", "lower", "exec"},
    "optim": {"core", "graph", "lower", "exec", "io"},
    "dist": {"core", "graph", "lower", "exec", "precision", "optim", "io"},
    "optim/cuda": {"core", "graph", "lower", "exec", "exec/cuda", "io", "optim"},
}
INCLUDE = re.compile(r'^\s*#\s*include\s*[<"](?:ctg/)?([^>"]+)[>"]')


def layer_of(rel):
    """The layer of a path relative to include/ctg ('exec/cpu/store.hpp' -> 'exec/cpu')."""
    parts = rel.split("/")
    if len(parts) == 1:
        return None  # an umbrella at the top
    if parts[0] in ("exec", "optim") and len(parts) > 2:
        return parts[0] + "/" + parts[1]
    return parts[0]


def violations(root):
    found = []
    for dirpath, _, files in os.walk(root):
        for name in sorted(files):
            path = os.path.join(dirpath, name)
            rel = os.path.relpath(path, root).replace(os.sep, "/")
            here = layer_of(rel)
            if here is None:
                continue
            if here not in BELOW:
                found.append(f"{rel}: folder '{here}' has no place in the layer order (add it to {__file__})")
                continue
            with open(path, encoding="utf-8") as f:
                lines = f.read().split("\n")
            if len(lines) > 1 and lines[1].startswith("// Forwarding header"):
                continue
            for lineno, line in enumerate(lines, 1):
                m = INCLUDE.match(line)
                if not m or not line.strip().startswith("#include <ctg/"):
                    continue
                target = layer_of(m.group(1))
                if target is None or target == here or target in BELOW[here]:
                    continue
                found.append(f"{rel}:{lineno}: '{here}' includes <ctg/{m.group(1)}> from '{target}', "
                             f"which is not below it")
    return found


def self_test():
    with tempfile.TemporaryDirectory() as d:
        os.makedirs(os.path.join(d, "graph"))
        os.makedirs(os.path.join(d, "exec"))
        with open(os.path.join(d, "exec", "ok.hpp"), "w") as f:
            f.write("#include <ctg/graph/node.hpp>\n")
        with open(os.path.join(d, "graph", "bad.hpp"), "w") as f:
            f.write("#pragma once\n#include <ctg/exec/ok.hpp>\n")
        v = violations(d)
        if len(v) != 1 or "graph/bad.hpp:2" not in v[0]:
            print("self-test FAILED: expected exactly the upward include graph -> exec, got:", v)
            return 1
    print("self-test passed: an upward include is reported")
    return 0


def main(argv):
    if argv[1:] == ["--self-test"]:
        return self_test()
    if len(argv) != 2:
        print(__doc__)
        return 2
    v = violations(argv[1])
    for line in v:
        print(line)
    if v:
        print(f"{len(v)} include(s) against the layer order")
        return 1
    print("layering ok")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
