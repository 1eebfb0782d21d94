#!/usr/bin/env python3
"""LLaMA-Factory's chat template definitions as data: reads the register_template(...) calls of its
src/llamafactory/data/template.py with Python's ast (the file is parsed, never imported or run) and
writes tests/data/templates/lf_templates.json, the table that tools/make_template_goldens.py renders
and tools/gen_template_defs.py turns into src/data/template_defs_*.cpp rows.

  git -C LLaMA-Factory show HEAD:src/llamafactory/data/template.py > /tmp/template.py
  python tools/lf_templates.py /tmp/template.py --commit <sha>

Only the arguments as written are recorded (register_template's defaults are applied by the
readers, each on its own). Slots: a string, {"bos": true}, {"eos": true}, {"token": NAME} or
{"set": TEXT} (a set slot that is neither bos_token nor eos_token: rendered as nothing).
"""
import argparse
import ast
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "tests" / "data" / "templates" / "lf_templates.json"
CLASSES = {"Template": "plain", "Llama2Template": "llama2", "ReasoningTemplate": "reasoning",
           "Glm47ReasoningTemplate": "glm47", "MossVLTemplate": "moss_vl"}


def literal(node):
    """A literal value; sets {"bos_token"} / {"eos_token"} become {"bos": True} / {"eos": True}; any
    other set {"x"} becomes {"set": "x"} (LLaMA-Factory emits no id for it)."""
    if isinstance(node, ast.Set):
        (elt,) = node.elts
        if elt.value in ("bos_token", "eos_token"):
            return {elt.value.split("_")[0]: True}
        return {"set": elt.value}
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        return literal(node.left) + literal(node.right)
    return ast.literal_eval(node)


def formatter(node):
    """StringFormatter/EmptyFormatter(slots=[...]) or FunctionFormatter(slots, tool_format) or
    ToolFormatter(tool_format) -> dict."""
    kind = node.func.id
    args = {k.arg: k.value for k in node.keywords}
    if node.args:  # EmptyFormatter("<s>") style positional slots
        args["slots"] = node.args[0]
    out = {"kind": kind}
    if "slots" in args:
        out["slots"] = [literal(s) for s in args["slots"].elts]
    if "tool_format" in args:
        out["tool_format"] = literal(args["tool_format"])
    return out


def one(call):
    t = {}
    for k in call.keywords:
        v = k.value
        if k.arg == "mm_plugin":
            plugin = {kw.arg: literal(kw.value) for kw in v.keywords}
            if v.args:
                plugin["name"] = literal(v.args[0])
            t["mm_plugin"] = plugin["name"]
        elif k.arg == "template_class":
            t["template_class"] = CLASSES[v.id]
        elif k.arg.startswith("format_"):
            f = formatter(v)
            name = k.arg[len("format_"):]
            if name == "tools" and "tool_format" in f:
                t["tool_format"] = f["tool_format"]
            elif name == "tools":  # a StringFormatter: the raw tools JSON put into its slots
                t["tools"] = f["slots"]
            elif name == "function":
                t["function"] = f["slots"]
                t["function_tool_format"] = f.get("tool_format", "default")
            else:
                t[name] = f["slots"]
        else:
            t[k.arg] = literal(v)
    return t


def extract(source):
    tree = ast.parse(source)
    out = []
    for node in tree.body:
        if (isinstance(node, ast.Expr) and isinstance(node.value, ast.Call)
                and getattr(node.value.func, "id", "") == "register_template"):
            out.append(one(node.value))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("template_py")
    ap.add_argument("--commit", required=True, help="the LLaMA-Factory commit the file is from")
    ap.add_argument("--out", default=str(OUT))
    a = ap.parse_args()
    templates = extract(Path(a.template_py).read_text(encoding="utf-8"))
    doc = {"source": "hiyouga/LLaMA-Factory src/llamafactory/data/template.py", "commit": a.commit,
           "generator": "tools/lf_templates.py", "templates": templates}
    Path(a.out).write_text(json.dumps(doc, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    print(f"{a.out}: {len(templates)} templates")


if __name__ == "__main__":
    main()
