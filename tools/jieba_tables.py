#!/usr/bin/env python3
"""Converts the PyPI `jieba` package's data into assets/jieba/ (read by src/eval/jieba.cpp).

  python3 tools/jieba_tables.py JIEBA_PKG_DIR assets/jieba

JIEBA_PKG_DIR is the `jieba/` folder of the unpacked sdist (pip download --no-deps jieba==0.42.1).
dict.txt is copied byte for byte. finalseg's prob_start/prob_trans/prob_emit tables (Python
literals) become hmm.tsv, one probability a line, so C++ reads them without a Python parser:
  start<TAB>STATE<TAB>LOGP
  trans<TAB>FROM<TAB>TO<TAB>LOGP
  emit<TAB>STATE<TAB>CODEPOINT_HEX<TAB>LOGP
LOGP is repr(float): it round-trips exactly through strtod.
"""
import ast
import hashlib
import os
import shutil
import sys


def load_table(path):
    # The files are `P={...}` after a __future__ import; read the literal without executing code.
    tree = ast.parse(open(path, encoding="utf-8").read())
    for node in tree.body:
        if isinstance(node, ast.Assign) and node.targets[0].id == "P":
            return ast.literal_eval(node.value)
    raise SystemExit(f"{path}: no P = {{...}} table")


def main():
    if len(sys.argv) != 3:
        raise SystemExit(__doc__)
    pkg, out = sys.argv[1], sys.argv[2]
    fs = os.path.join(pkg, "finalseg")
    start = load_table(os.path.join(fs, "prob_start.py"))
    trans = load_table(os.path.join(fs, "prob_trans.py"))
    emit = load_table(os.path.join(fs, "prob_emit.py"))
    os.makedirs(out, exist_ok=True)
    lines = []
    for s in "BMES":
        lines.append(f"start\t{s}\t{start[s]!r}")
    for s in "BMES":
        for t in sorted(trans[s]):
            lines.append(f"trans\t{s}\t{t}\t{trans[s][t]!r}")
    for s in "BMES":
        for ch in sorted(emit[s]):
            if len(ch) != 1:
                raise SystemExit(f"emit[{s}] key {ch!r} is not one character")
            lines.append(f"emit\t{s}\t{ord(ch):X}\t{emit[s][ch]!r}")
    with open(os.path.join(out, "hmm.tsv"), "w", encoding="utf-8", newline="\n") as f:
        f.write("\n".join(lines) + "\n")
    shutil.copyfile(os.path.join(pkg, "dict.txt"), os.path.join(out, "dict.txt"))
    for name in ("dict.txt", "hmm.tsv", "finalseg/prob_start.py", "finalseg/prob_trans.py",
                 "finalseg/prob_emit.py"):
        src = os.path.join(out, name) if name == "hmm.tsv" else os.path.join(pkg, name)
        print(hashlib.sha256(open(src, "rb").read()).hexdigest(), name)


if __name__ == "__main__":
    main()
