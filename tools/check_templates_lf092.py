#!/usr/bin/env python3
"""Cross-check of tests/data/templates/goldens.json against the real LLaMA-Factory 0.9.2 (installed
in bench/.venv-lf): for every golden case whose template 0.9.2 has, its get_template_and_fix_tokenizer
+ encode_multiturn / encode_oneturn run on the same tokenizer and conversation, and the ids are
compared. Run by hand (the bench venv is not in CI):

  bench/.venv-lf/bin/python tools/check_templates_lf092.py [--verbose]

Outcomes per case: same; lf_added_tokens (0.9.2 added stop words or an EOS the bundled tokenizer
lacks as new special tokens, so its ids differ by design: unillm keeps the vocabulary and encodes
them as text); differs (a real difference: a change between 0.9.2 and the current template.py,
listed in tests/data/templates/README.md); lf_error (0.9.2 cannot render the case, e.g. a tool format
it does not have). Templates that 0.9.2 lacks are counted apart.
"""
import argparse
import collections
import copy
import datetime as _dt
import json
import sys
import tempfile
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).resolve().parent))
import lf_tool_formats  # noqa: E402
import make_template_goldens as mg  # noqa: E402


class FixedDate(_dt.datetime):
    @classmethod
    def now(cls, tz=None):
        day, mon, year = lf_tool_formats.TOOL_DATE.split()
        return _dt.datetime.strptime(f"{day} {mon} {year}", "%d %b %Y")


def lf_template(tok, name):
    """0.9.2's template (a copy) fixed for tok, and whether that added tokens or replaced EOS."""
    import llamafactory.data.template as lt
    args = SimpleNamespace(template="_check", train_on_prompt=False, tool_format=None, default_system=None)
    before, eos = len(tok), tok.eos_token
    lt.TEMPLATES["_check"] = copy.deepcopy(lt.TEMPLATES[name])
    t = lt.get_template_and_fix_tokenizer(tok, args)
    return t, len(tok) != before or (tok.eos_token != eos and tok.convert_tokens_to_ids(tok.eos_token) is None)


def lf_case(t, tok, c):
    msgs, system, tools = c["messages"], c["system"] or None, c.get("tools") or None
    pairs = t.encode_multiturn(tok, copy.deepcopy(msgs), system, tools)
    prompt = t.encode_oneturn(tok, copy.deepcopy(msgs[:-1]) + [{"role": "assistant", "content": ""}], system,
                              tools)[0]
    return [[list(p), list(q)] for p, q in pairs], list(prompt)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--verbose", action="store_true")
    ap.add_argument("--show", default="", help="print the decoded texts of this template's differing cases")
    a = ap.parse_args()
    import llamafactory
    import llamafactory.data.template as lt
    import llamafactory.data.tool_utils as lu
    lu.datetime = FixedDate  # the llama3 tool prompt's date, as the goldens fix it
    goldens = json.loads((mg.DATA / "templates" / "goldens.json").read_text(encoding="utf-8"))
    counts, per_template, absent = collections.Counter(), collections.defaultdict(collections.Counter), set()
    examples = {}
    with tempfile.TemporaryDirectory() as tmp:
        toks = mg.load_tokenizers(tmp)
        fixed = {}
        for c in goldens["templates"]:
            name = c["template"]
            if name not in lt.TEMPLATES:
                absent.add(name)
                continue
            if c.get("discard_history_thought") or c.get("preserve_thinking"):
                continue  # 0.9.2 has no reasoning-template options
            if name not in fixed:
                tok = copy.deepcopy(toks[c["tokenizer"]])
                fixed[name] = (*lf_template(tok, name), tok)
            t, added, tok = fixed[name]
            try:
                pairs, prompt = lf_case(t, tok, c)
            except Exception as e:  # noqa: BLE001 - any failure of 0.9.2 on the case is reported
                outcome, why = "lf_error", f"{type(e).__name__}: {e}"[:160]
            else:
                same = pairs == c["pairs"] and prompt == c["prompt"]
                outcome = "same" if same else ("lf_added_tokens" if added else "differs")
                why = ""
                if outcome == "differs":
                    k = next((i for i, (p, q) in enumerate(zip(pairs, c["pairs"])) if p != q), None)
                    why = f"turn {k} differs" if k is not None else "generation prompt differs"
                    if name == a.show:
                        print("---", name, c["system"][:20], c.get("tools", "")[:20], [m["role"] for m in c["messages"]])
                        ours = [x for p in c["pairs"] for x in p[0] + p[1]]
                        theirs = [x for p in pairs for x in p[0] + p[1]]
                        print("golden:", repr(tok.decode(ours)))
                        print("lf092: ", repr(tok.decode(theirs)))
            counts[outcome] += 1
            per_template[name][outcome] += 1
            if outcome != "same":
                key = (name, outcome)
                if key not in examples:
                    desc = f"{len(c['messages'])} msgs, system {bool(c['system'])}, tools {c.get('tools', '')[:8]!r}"
                    examples[key] = f"{desc}: {why}"
    print(f"LLaMA-Factory {llamafactory.__version__}: {len(lt.TEMPLATES)} templates; goldens from "
          f"{goldens['lf_commit'][:12]}")
    print("cases:", dict(counts))
    print(f"templates compared: {len(per_template)}; absent from 0.9.2: {len(absent)}")
    by = collections.Counter()
    for name, cnt in per_template.items():
        worst = "differs" if cnt["differs"] else ("lf_error" if cnt["lf_error"] else
                                                 ("lf_added_tokens" if cnt["lf_added_tokens"] else "same"))
        by[worst] += 1
    print("templates by worst outcome:", dict(by))
    for (name, outcome), ex in sorted(examples.items()):
        if outcome == "differs" or a.verbose:
            print(f"  {outcome:16} {name:24} {ex}  {dict(per_template[name])}")
    if a.verbose:
        print("absent:", ", ".join(sorted(absent)))


if __name__ == "__main__":
    main()
