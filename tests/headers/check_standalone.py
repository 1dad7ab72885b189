#!/usr/bin/env python3
"""Fails on a header of include/ctg that does not compile alone.

Each .hpp is the only line of a translation unit, checked with the C++
compiler's -fsyntax-only. A header that names a type or constant of another
header without including it compiles today only where some earlier include
brought that header in; it breaks the next file that includes it first
(a CUDA test did, for lower/node_table.hpp). .cuh headers need nvcc and are
compiled by the CUDA tests instead; a header whose third-party library is
not installed (mpi.h without Open MPI) is listed as not checked.

    check_standalone.py --cxx C++ --root <repo>/include [-I DIR ...]
                        check every header (in parallel); exit 1 and name each failure
    check_standalone.py --cxx C++ --self-test
                        prove the check rejects a header that uses an undeclared name
"""
import argparse
import concurrent.futures
import os
import subprocess
import sys
import tempfile


def compile_alone(cxx, include_dirs, root, rel):
    """The compiler's first error for <rel> included alone, or None."""
    with tempfile.NamedTemporaryFile("w", suffix=".cpp", delete=False) as f:
        f.write(f"#include <{rel}>\n")
        source = f.name
    try:
        args = [cxx, "-std=gnu++20", "-fsyntax-only", "-I", root] + [a for d in include_dirs for a in ("-I", d)]
        r = subprocess.run(args + [source], capture_output=True, text=True)
    finally:
        os.unlink(source)
    if r.returncode == 0:
        return None
    errors = [line for line in r.stderr.splitlines() if "error" in line]
    return errors[0] if errors else r.stderr.strip()[:300]


def missing_dependency(error):
    """The third-party header a failure could not find (mpi.h without Open MPI's include path), or None."""
    if "fatal error:" not in error or "No such file or directory" not in error:
        return None
    name = error.split("fatal error:")[1].split(":")[0].strip()
    return None if name.startswith("ctg/") else name


def failures(cxx, include_dirs, root):
    headers = []
    for dirpath, _, files in os.walk(os.path.join(root, "ctg")):
        for name in files:
            if name.endswith(".hpp"):
                headers.append(os.path.relpath(os.path.join(dirpath, name), root).replace(os.sep, "/"))
    headers.sort()
    with concurrent.futures.ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        results = pool.map(lambda rel: (rel, compile_alone(cxx, include_dirs, root, rel)), headers)
        return len(headers), [(rel, err) for rel, err in results if err is not None]


def self_test(cxx):
    with tempfile.TemporaryDirectory() as d:
        os.makedirs(os.path.join(d, "ctg", "graph"))
        with open(os.path.join(d, "ctg", "graph", "kinds.hpp"), "w") as f:
            f.write("#pragma once\nnamespace ctg { enum class kinds { a, b }; }\n")
        with open(os.path.join(d, "ctg", "graph", "ok.hpp"), "w") as f:
            f.write("#pragma once\n#include <ctg/graph/kinds.hpp>\nnamespace ctg { inline kinds first = kinds::a; }\n")
        with open(os.path.join(d, "ctg", "graph", "bad.hpp"), "w") as f:
            f.write("#pragma once\nnamespace ctg { inline kinds first = kinds::a; }\n")  # kinds.hpp not included
        n, found = failures(cxx, [], d)
        if n != 3 or [rel for rel, _ in found] != ["ctg/graph/bad.hpp"]:
            print("self-test FAILED: expected exactly ctg/graph/bad.hpp of 3 headers to fail, got:", n, found)
            return 1
    print("self-test passed: a header using a name it does not include is reported")
    return 0


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cxx", required=True)
    p.add_argument("--root")
    p.add_argument("-I", dest="include_dirs", action="append", default=[])
    p.add_argument("--self-test", action="store_true")
    a = p.parse_args()
    if a.self_test:
        return self_test(a.cxx)
    if not a.root:
        p.error("--root is required")
    n, found = failures(a.cxx, [d for d in a.include_dirs if d], a.root)
    skipped = [(rel, missing_dependency(err)) for rel, err in found if missing_dependency(err)]
    found = [(rel, err) for rel, err in found if not missing_dependency(err)]
    for rel, dep in skipped:
        print(f"{rel}: not checked: {dep} is not installed here")
    for rel, err in found:
        print(f"{rel}: does not compile alone: {err}")
    if found:
        print(f"{len(found)} of {n} headers do not compile alone")
        return 1
    print(f"{n - len(skipped)} of {n} headers compile alone ({len(skipped)} need a library not installed here)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
