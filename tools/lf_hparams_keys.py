#!/usr/bin/env python3
"""Lists every field of LLaMA-Factory's argument dataclasses (src/llamafactory/hparams/*.py) as
`Class key` lines, for the key-table completeness test (tests/train/key_table_test.cpp).

  python3 tools/lf_hparams_keys.py LLAMA_FACTORY_CHECKOUT > tests/data/llamafactory_hparams/keys.txt

Reads the source with `ast` (nothing is imported: current LLaMA-Factory needs torch >= 2.4). The
first line records the checkout's commit id.
"""
import ast
import subprocess
import sys
from pathlib import Path


def fields(path):
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for node in tree.body:
        if not isinstance(node, ast.ClassDef):
            continue
        for stmt in node.body:
            if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
                if stmt.target.id.startswith("_") or not settable(stmt.value):
                    continue  # private, or field(init=False): not an argument a user can give
                yield node.name, stmt.target.id


def settable(value):
    """False for `field(..., init=False)`, which HfArgumentParser does not expose."""
    if isinstance(value, ast.Call):
        for kw in value.keywords:
            if kw.arg == "init" and isinstance(kw.value, ast.Constant) and kw.value.value is False:
                return False
    return True


def main():
    root = Path(sys.argv[1])
    commit = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True,
                            text=True, check=True).stdout.strip()
    print(f"# LLaMA-Factory {commit}: fields of src/llamafactory/hparams/*.py (tools/lf_hparams_keys.py)")
    for py in sorted((root / "src/llamafactory/hparams").glob("*.py")):
        for cls, key in fields(py):
            print(cls, key)


if __name__ == "__main__":
    main()
