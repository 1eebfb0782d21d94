#!/usr/bin/env python3
"""A model's own chat_template (data::JinjaChatTemplate) against transformers 4.46.

The bundled Qwen2 tokenizer (byte-level BPE) is copied into one tokenizer dir per template (its
own Jinja, a few of tests/data/jinja/ and one inline template put into tokenizer_config.json's
chat_template); stories260K's tokenizer (SentencePiece-style, a prepended dummy space) gets a few
of them too. On each conversation (single turn, system + multi-turn, tool call and result with
tools, non-ASCII, thoughts):
- prompt ids: unillm's encode_prompt (jinja_chat_dump, one process for all cases) must equal
  tokenizer.apply_chat_template(messages, tools=..., add_generation_prompt=True, tokenize=True,
  enable_thinking=...);
- SFT: unillm's encode_supervised ids must equal the tokenisation of the rendered conversation,
  and its labels the mask this script derives independently: prompt_i = render(messages up to
  user i, add_generation_prompt=True), full_i = render(messages up to reply i); reply i's span is
  full_i minus the prefix prompt_i; a token (by the fast tokenizer's character offsets) that
  overlaps a reply span is scored. When a template breaks the prefix property, or raises, unillm
  must fail too.
Messages are converted from unillm's roles here, independently of the C++ (function -> an
assistant message with tool_calls, observation -> a tool message, LLaMA-Factory-style tool
schemas -> OpenAI tools).
"""
import argparse
import json
import os
import shutil
import subprocess
import sys

from transformers import AutoTokenizer

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
QWEN2 = os.path.join(ROOT, "tests", "data", "qwen2-tokenizer")
STORIES = os.path.join(ROOT, "assets", "stories260K")
STORIES_FILES = ["tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"]
JINJA = os.path.join(ROOT, "tests", "data", "jinja")
TEMPLATES = [  # tests/data/jinja/*.jinja, None = the tokenizer's own
    None, "Qwen-Qwen2.5-7B-Instruct", "meta-llama-Llama-3.1-8B-Instruct",
    "NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use", "microsoft-Phi-3.5-mini-instruct",
    "Qwen-Qwen3-0.6B", "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B", "google-gemma-2-2b-it",
    "mistral-7b-instruct-v0.2", "vicuna-13b", "space-boundary",
]
STORIES_TEMPLATES = ["meta-llama-Llama-2-7b-chat-hf", "vicuna-13b", "space-boundary",
                     "meta-llama-Llama-3.1-8B-Instruct"]
# A generation prompt ending in a space: the tokenizer merges it with the reply's first word, so
# unillm must split the whole text's tokens by offsets (the merged token is scored).
INLINE = {"space-boundary": (
    "{% for m in messages %}{% if m.role == 'user' %}USER: {{ m.content }}\n"
    "{% elif m.role == 'assistant' %}ASSISTANT: {{ m.content }}{{ eos_token }}\n{% endif %}"
    "{% endfor %}{% if add_generation_prompt %}ASSISTANT: {% endif %}")}
WEATHER = {"name": "get_weather", "description": "Get the current weather in a city.",
           "parameters": {"type": "object", "properties": {
               "location": {"type": "string", "description": "City name"}},
               "required": ["location"]}}
ADD_OPENAI = {"type": "function", "function": {
    "name": "add", "description": "Add two numbers.",
    "parameters": {"type": "object", "properties": {"a": {"type": "number"},
                                                    "b": {"type": "number"}}}}}
CALL = json.dumps({"name": "get_weather", "arguments": {"location": "Paris"}})


def u(text):
    return {"role": "user", "content": text}


def a(text):
    return {"role": "assistant", "content": text}


CONVERSATIONS = {  # name: (system, tools, messages in unillm's roles)
    "single": ("", "", [u("Hello, who are you?"), a("I am a helpful bot.")]),
    "multi": ("You are terse.", "", [u("What is 2+2?"), a("4."), u("  And 3+3?  "), a("6.")]),
    "tools": ("", json.dumps([WEATHER]), [
        u("What's the weather in Paris?"), {"role": "function", "content": CALL},
        {"role": "observation", "content": "{\"temperature\": 22}"}, a("It is 22°C in Paris.")]),
    "openai_tools": ("Use tools.", json.dumps([ADD_OPENAI, WEATHER]),
                     [u("Add 1 and 2."), a("3")]),
    "unicode": ("", "", [u("Bonjour — ça va? 你好\n"), a("Très bien, merci! 😀")]),
    "thoughts": ("", "", [u("2+2?"), a("<think>\nA sum.\n</think>\n\n4"), u("3+3?"),
                          a("<think>\nAnother.\n</think>\n\n6")]),
}


def hf_messages(system, messages):
    out = [{"role": "system", "content": system}] if system else []
    for m in messages:
        if m["role"] == "function":
            calls = json.loads(m["content"])
            calls = calls if isinstance(calls, list) else [calls]
            out.append({"role": "assistant", "content": "", "tool_calls": [
                {"type": "function", "function": {"name": c["name"], "arguments": c["arguments"]}}
                for c in calls]})
        elif m["role"] == "observation":
            out.append({"role": "tool", "content": m["content"]})
        else:
            out.append(dict(m))
    return out


def hf_tools(tools):
    if not tools:
        return None
    return [t if t.get("type") == "function" and "function" in t
            else {"type": "function", "function": t} for t in json.loads(tools)]


def expect_prompt(tok, system, tools, messages, thinking):
    return tok.apply_chat_template(hf_messages(system, messages), tools=hf_tools(tools),
                                   add_generation_prompt=True, tokenize=True,
                                   enable_thinking=thinking)


def expect_sft(tok, system, tools, messages, thinking):
    """(ids, labels) by the prefix-diff rule, or ("prefix", None) when a turn breaks it."""
    hf, t = hf_messages(system, messages), hf_tools(tools)
    head = len(hf) - len(messages)
    text, spans = "", []
    for i in range(len(messages) // 2):
        prompt = tok.apply_chat_template(hf[:head + 2 * i + 1], tools=t, tokenize=False,
                                         add_generation_prompt=True, enable_thinking=thinking)
        full = tok.apply_chat_template(hf[:head + 2 * i + 2], tools=t, tokenize=False,
                                       add_generation_prompt=False, enable_thinking=thinking)
        if not prompt.startswith(text) or not full.startswith(prompt):
            return "prefix", None
        spans.append((len(prompt), len(full)))
        text = full
    enc = tok(text, add_special_tokens=False, return_offsets_mapping=True)
    labels = []
    for tid, (s, e) in zip(enc["input_ids"], enc["offset_mapping"]):
        scored = any(s < re_ and e > rs for rs, re_ in spans)
        labels.append(tid if scored else -100)
    return enc["input_ids"], labels


def template_source(name, own):
    if name in INLINE:
        return INLINE[name]
    if name:
        return open(os.path.join(JINJA, name + ".jinja"), encoding="utf-8").read()
    return own


def make_dirs(work, family, src, files, names):
    """{(family, name): (tokenizer dir, model dir, Jinja)}: src's files with each template."""
    dirs = {}
    config = json.load(open(os.path.join(src, "tokenizer_config.json"), encoding="utf-8"))
    for name in names:
        d = os.path.join(work, family, name or "own")
        shutil.rmtree(d, ignore_errors=True)
        os.makedirs(d)
        for f in files or os.listdir(src):
            shutil.copy(os.path.join(src, f), d)
        cfg = dict(config, chat_template=template_source(name, config.get("chat_template")))
        json.dump(cfg, open(os.path.join(d, "tokenizer_config.json"), "w", encoding="utf-8"),
                  ensure_ascii=False, indent=2)
        dirs[(family, name)] = (src, d, cfg["chat_template"])
    return dirs


def build_cases(dirs, toks):
    cases, expected = [], []
    for (family, name), (tok_dir, d, source) in dirs.items():
        tok = toks[family]
        tok.chat_template = source
        for conv, (system, tools, messages) in CONVERSATIONS.items():
            for thinking in ([True, False] if conv == "thoughts" else [True]):
                base = {"tokenizer_dir": tok_dir, "model_dir": d, "system": system,
                        "tools": tools, "enable_thinking": thinking}
                label = f"{family}/{name or 'own'}/{conv}/thinking={thinking}"
                for kind in ("prompt", "sft"):
                    msgs = messages[:-1] if kind == "prompt" else messages
                    try:
                        if kind == "prompt":
                            want = (expect_prompt(tok, system, tools, msgs, thinking), None)
                        else:
                            want = expect_sft(tok, system, tools, msgs, thinking)
                    except Exception as e:  # the template raised: unillm must fail too
                        want = ("raise", str(e))
                    cases.append(dict(base, kind=kind, messages=msgs))
                    expected.append((label + "/" + kind, want))
    return cases, expected


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dump", required=True)
    ap.add_argument("--work", required=True)
    args = ap.parse_args()
    os.makedirs(args.work, exist_ok=True)
    toks = {"qwen2": AutoTokenizer.from_pretrained(QWEN2),
            "stories": AutoTokenizer.from_pretrained(STORIES)}
    for tok in toks.values():
        tok.model_max_length = 1 << 30  # long renders are fine here: no length warning
    dirs = make_dirs(args.work, "qwen2", QWEN2, None, TEMPLATES)
    dirs.update(make_dirs(args.work, "stories", STORIES, STORIES_FILES, STORIES_TEMPLATES))
    cases, expected = build_cases(dirs, toks)
    inp, outp = os.path.join(args.work, "cases.json"), os.path.join(args.work, "out.json")
    json.dump({"cases": cases}, open(inp, "w", encoding="utf-8"), ensure_ascii=False)
    subprocess.run([args.dump, inp, outp], check=True)
    got = json.load(open(outp, encoding="utf-8"))
    counts = {"ids": 0, "labels": 0, "both fail": 0}
    bad = []
    for (label, (want, want_labels)), g in zip(expected, got):
        if want in ("raise", "prefix"):
            ok = not g["ok"] and (want == "raise" or "prefix" in g["error"])
            counts["both fail"] += ok
        else:
            ok = g["ok"] and g["ids"] == want and (want_labels is None or g["labels"] == want_labels)
            counts["labels" if want_labels is not None else "ids"] += ok
        if not ok:
            bad.append(f"{label}: want {want if want in ('raise', 'prefix') else 'ids'}"
                       f" {want_labels if want == 'raise' else ''}, got {json.dumps(g)[:400]}")
    print(f"{len(cases)} cases: {counts['ids']} prompt ids equal, {counts['labels']} SFT ids+labels"
          f" equal, {counts['both fail']} fail in both, {len(bad)} disagree")
    for b in bad:
        print("DISAGREE", b)
    learnt = sum(1 for _, (w, lab) in expected if lab is not None and any(x != -100 for x in lab))
    if bad or counts["labels"] < 10 or learnt < 10:
        sys.exit(1)


if __name__ == "__main__":
    main()
