"""Every `ctg:` message phrase in include/ has an entry in docs/diagnostics.md,
every entry's phrase exists in include/, and every `ctg:` phrase the README
quotes exists in include/ (so no document promises a message no code emits).

What a phrase is
----------------
The headers are scanned as C++ tokens: comments are skipped, adjacent string
literals are joined into one. A message is a literal that begins with `ctg: `;
its phrase is the text after `ctg: ` up to the first of
    ": "  (a colon that ends a clause; "ctg::sum" does not end it),
    a trailing ":", a double quote, a single quote that opens a name (after a
    space: "file '"; an apostrophe as in "leaf's" does not end it), or " ("
    (an aside),
with surrounding spaces removed:
    "ctg: shape mismatch: matmul inner dims ..."         -> shape mismatch
    "ctg: loss must be a scalar (reduce it with ...)"    -> loss must be a scalar
    "ctg: safetensors file '" + path + "': ..."          -> safetensors file
When that is empty (the message begins with a computed part, as in
`"ctg: " + what + " is fed a null pointer"`), the phrase is "… " followed by
the next literal of the same statement, cut the same way after its leading
quotes and spaces: "… is fed a null pointer". A "ctg: " literal with no literal
after it in its statement (`s.starts_with("ctg: ")`) is not a message.

A docs entry is a line of docs/diagnostics.md starting with "### "; every
`ctg: <phrase>` in backquotes on it is a documented phrase (one entry may
document several). In the README every backquoted `ctg: ...` (line breaks
inside it read as spaces) is cut to its phrase by the rule above.

    python3 tests/docs/check_diagnostics.py [--root DIR] [--list]
"""
import argparse
import os
import re
import sys

CUT = re.compile(r": |:$|\"| '|^'| \(")


def cut(text):
    m = CUT.search(text)
    return (text[:m.start()] if m else text).strip()


def tokens(src):
    """(kind, text) for string literals ('s', the joined contents) and ';' ('end'), comments skipped."""
    out, i, n = [], 0, len(src)
    while i < n:
        c = src[i]
        if src.startswith("//", i):
            i = src.find("\n", i)
            i = n if i < 0 else i
        elif src.startswith("/*", i):
            i = src.find("*/", i + 2)
            i = n if i < 0 else i + 2
        elif c == "'":  # a character literal ('"' must not open a string)
            j = i + 1
            while j < n and src[j] != "'":
                j += 2 if src[j] == "\\" else 1
            i = j + 1
        elif c == '"':
            j, buf = i + 1, []
            while j < n and src[j] != '"':
                if src[j] == "\\":
                    buf.append(src[j + 1] if src[j + 1] in "\"\\'" else src[j:j + 2])
                    j += 2
                else:
                    buf.append(src[j])
                    j += 1
            text = "".join(buf)
            if out and out[-1][0] == "s" and out[-1][2]:  # adjacent literals join
                out[-1] = ("s", out[-1][1] + text, True)
            else:
                out.append(("s", text, True))
            i = j + 1
            continue
        elif c == ";":
            out.append(("end", ";", False))
        elif not c.isspace() and out and out[-1][0] == "s":
            out[-1] = (out[-1][0], out[-1][1], False)  # something between: the next literal stands alone
        i += 1
    return [(k, t) for k, t, _ in out]


def include_phrases(root):
    """{phrase: [file:literal, ...]} of every message in include/."""
    found = {}
    inc = os.path.join(root, "include")
    for d, _, files in os.walk(inc):
        for f in sorted(files):
            if not f.endswith((".hpp", ".cuh", ".h")):
                continue
            path = os.path.join(d, f)
            with open(path, encoding="utf-8") as fh:
                toks = tokens(fh.read())
            for k, (kind, text) in enumerate(toks):
                if kind != "s" or not text.startswith("ctg: "):
                    continue
                phrase = cut(text[5:])
                if not phrase:
                    nxt = next((t for t in toks[k + 1:] if t[0] == "end" or t[0] == "s"), None)
                    if nxt is None or nxt[0] == "end":
                        continue  # not a message
                    phrase = "… " + cut(nxt[1].lstrip("'\" "))
                found.setdefault(phrase, []).append(os.path.relpath(path, root) + ": " + text.strip())
    return found


def quoted(text):
    """Every `ctg: ...` in backquotes, line breaks read as spaces."""
    return [re.sub(r"\s+", " ", m) for m in re.findall(r"`(ctg: [^`]*)`", text)]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
    ap.add_argument("--list", action="store_true", help="print every phrase of include/ and where it is")
    args = ap.parse_args()
    root = os.path.abspath(args.root)
    have = include_phrases(root)
    if args.list:
        for p in sorted(have):
            print(f"{p}\n    " + "\n    ".join(have[p]))
        return 0

    with open(os.path.join(root, "docs", "diagnostics.md"), encoding="utf-8") as f:
        doc_lines = f.read().splitlines()
    documented = {}
    for n, line in enumerate(doc_lines, 1):
        if line.startswith("### "):
            for q in quoted(line):
                documented.setdefault(q[5:].strip(), n)
    with open(os.path.join(root, "README.md"), encoding="utf-8") as f:
        readme = [cut(q[5:]) for q in quoted(f.read())]

    problems = []
    for p in sorted(set(have) - set(documented)):
        problems.append(f"no entry in docs/diagnostics.md for `ctg: {p}` (emitted by {have[p][0]})")
    for p in sorted(set(documented) - set(have), key=documented.get):
        problems.append(f"docs/diagnostics.md:{documented[p]}: `ctg: {p}` is emitted by nothing in include/")
    for p in sorted(set(readme) - set(have)):
        problems.append(f"README.md quotes `ctg: {p}`, which nothing in include/ emits")
    for p in problems:
        print(p)
    print(f"{len(have)} phrases in include/, {len(documented)} documented, {len(set(readme))} quoted by the README: "
          + (f"{len(problems)} problem(s)" if problems else "all consistent"))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
