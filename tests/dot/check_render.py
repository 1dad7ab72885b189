#!/usr/bin/env python3
"""Renders the demo's step graph (tiny_lm_dot) with Graphviz's dot and checks the picture.

    check_render.py --tool <tiny_lm_dot> --dir <scratch dir>

Fails unless `dot -Tsvg` renders the DOT text without errors or warnings, every node of the
step and of its stack's block is drawn once, under its id, with its index, op, dtype and grad
requirement (its first two lines: "#<index> <op>[ name]", "<dtype> [dims], grad|no grad"), no other
node is drawn (an edge to an undeclared id would add one), and there is one group cluster
per fusion group. Exits 77 (skipped) when dot is not installed: scripts/lib/deps.sh installs
it (Debian package graphviz).
"""
import argparse
import os
import re
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET

SVG = "{http://www.w3.org/2000/svg}"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tool", required=True)
    ap.add_argument("--dir", required=True)
    a = ap.parse_args()
    dot = shutil.which("dot")
    if not dot:
        print("dot.render_tiny_lm: skipped: Graphviz's dot is not installed (Debian package graphviz; "
              "scripts/lib/deps.sh installs it)")
        return 77
    os.makedirs(a.dir, exist_ok=True)
    dot_file = os.path.join(a.dir, "tiny_lm.dot")
    expected_file = os.path.join(a.dir, "tiny_lm.expected")
    svg_file = os.path.join(a.dir, "tiny_lm.svg")
    subprocess.run([a.tool, dot_file, expected_file], check=True)
    r = subprocess.run([dot, "-Tsvg", dot_file, "-o", svg_file], capture_output=True, text=True)
    if r.returncode != 0 or re.search(r"error|warning", r.stderr, re.IGNORECASE):
        print(f"dot -Tsvg failed (exit {r.returncode}):\n{r.stderr}")
        return 1

    drawn = {}  # node id -> its text lines
    clusters = []
    for g in ET.parse(svg_file).getroot().iter(SVG + "g"):
        title = g.find(SVG + "title")
        if g.get("class") == "node":
            if title.text in drawn:
                print(f"node {title.text} drawn twice")
                return 1
            drawn[title.text] = [t.text or "" for t in g.iter(SVG + "text")]
        elif g.get("class") == "cluster":
            clusters.append(title.text)

    errors = []
    nodes = 0
    with open(expected_file) as f:
        for line in f:
            kind, rest = line.rstrip("\n").split(" ", 1)
            if kind == "node":
                nodes += 1
                node_id, dtype, grad, label = rest.split(" ", 3)
                lines = drawn.get(node_id)
                if lines is None:
                    errors.append(f"node {node_id} ({label}) is not drawn")
                elif len(lines) < 2 or not (lines[0] == label or lines[0].startswith(label + " ")) or \
                        not lines[1].startswith(dtype + " [") or not lines[1].endswith(", " + grad.replace("-", " ")):
                    errors.append(f"node {node_id} is drawn as {lines}, expected '{label}', {dtype}, {grad}")
            else:
                prefix, count = rest.split(" ")
                found = sum(1 for c in clusters if re.fullmatch(f"cluster_{prefix}g[0-9]+", c))
                if found != int(count):
                    errors.append(f"{found} group clusters 'cluster_{prefix}g<g>', expected {count}")
    if len(drawn) != nodes:
        errors.append(f"{len(drawn)} nodes drawn, expected {nodes}")
    if errors:
        print("\n".join(errors[:50]))
        return 1
    print(f"dot -Tsvg drew all {nodes} nodes and their group clusters: {svg_file}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
