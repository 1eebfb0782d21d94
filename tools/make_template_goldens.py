#!/usr/bin/env python3
"""Golden token ids for unillm's chat templates and supervised (SFT) encoder.

An independent Python re-implementation of LLaMA-Factory's template rendering
(src/llamafactory/data/template.py, formatter.py) and supervised example encoding
(data/processor/supervised.py, processor_utils.infer_seqlen), written from those definitions and
run on Hugging Face tokenizers. unillm's C++ (src/data/template*.cpp, sft_encode.cpp) must
reproduce every id. See tests/data/templates/README.md.

  python tools/make_template_goldens.py            # writes tests/data/templates/goldens.json

Needs transformers==4.46.3 tokenizers==0.20.3 sentencepiece protobuf tiktoken jinja2.
"""
import argparse
import copy
import json
import re
import shutil
import tempfile
from pathlib import Path

import all_templates
import lf_tool_formats as tf

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data"
IGNORE = -100

# ---- template definitions (LLaMA-Factory's register_template calls, as data) -------------------
# tests/data/templates/lf_templates.json holds the arguments of every register_template call of
# LLaMA-Factory's template.py (tools/lf_templates.py reads them with ast); register() applies its
# defaults.
BOS, EOS = ("bos",), ("eos",)  # LF's {"bos_token"} / {"eos_token"} slots
NOTHING = ("nothing",)  # a set slot naming neither: LF emits no id


def slots_of(raw):
    out = []
    for s in raw:
        if isinstance(s, str):
            out.append(s)
        elif s.get("bos"):
            out.append(BOS)
        elif s.get("eos"):
            out.append(EOS)
        elif "token" in s:
            out.append(("token", s["token"]))
        else:
            out.append(NOTHING)
    return out


def register(t):
    """LF's register_template defaults: assistant = content (+ eos unless efficient_eos), system =
    content, observation = user, function = the assistant slots as given in the default tool format."""
    eff = t.get("efficient_eos", False)
    default_slots = ["{{content}}"] if eff else ["{{content}}", EOS]
    get = lambda k: slots_of(t[k]) if k in t else None  # noqa: E731
    user, assistant = get("user"), get("assistant")
    return dict(
        user=user or ["{{content}}"], assistant=assistant or default_slots, system=get("system") or ["{{content}}"],
        observation=get("observation") or user or ["{{content}}"], prefix=get("prefix") or [],
        function=get("function") or assistant or default_slots,
        function_format=t.get("function_tool_format", "default"), tool_format=t.get("tool_format", "default"),
        tools_slots=get("tools"), default_system=t.get("default_system", ""), stop_words=t.get("stop_words", []),
        efficient_eos=eff, replace_eos=t.get("replace_eos", False), kind=t.get("template_class", "plain"),
        thought=tuple(t.get("thought_words", ("<think>\n", "\n</think>\n\n"))),
        tool_call=tuple(t.get("tool_call_words", ("<tool_call>", "</tool_call>"))))


LF_TEMPLATES = json.loads((DATA / "templates" / "lf_templates.json").read_text(encoding="utf-8"))
TEMPLATES = {t["name"]: register(t) for t in LF_TEMPLATES["templates"]}
REASONING = ("reasoning", "glm47")


# ---- rendering ---------------------------------------------------------------------------------
class Renderer:
    """One template bound to one HF tokenizer, with LF's fix_special_tokens effect on EOS."""

    def __init__(self, name, tok, enable_thinking=True, preserve_thinking=False):
        self.t, self.tok, self.enable_thinking = TEMPLATES[name], tok, enable_thinking
        self.preserve_thinking = preserve_thinking
        self.eos = tok.eos_token_id
        if self.t["replace_eos"]:
            self.eos = self.token_id(self.t["stop_words"][0])
        if self.eos is None:
            self.eos = self.token_id("<|endoftext|>")

    def token_id(self, token):
        i = self.tok.convert_tokens_to_ids(token)
        if i is None or i == self.tok.unk_token_id:
            raise SystemExit(f"tokenizer lacks {token!r}")
        return i

    def stop_ids(self):  # LF get_stop_token_ids; stop words the vocabulary lacks are skipped
        ids = {self.eos}
        for w in self.t["stop_words"]:
            i = self.tok.convert_tokens_to_ids(w)
            if i is not None and i != self.tok.unk_token_id:
                ids.add(i)
        return sorted(ids)

    def text(self, s):
        return self.tok.encode(s, add_special_tokens=False) if s else []

    def apply(self, slots, **kw):  # StringFormatter.apply: first occurrence of each {{name}}, in order
        out = []
        for s in slots:
            if isinstance(s, str):
                for k, v in kw.items():
                    s = s.replace("{{" + k + "}}", v, 1)
            out.append(s)
        return out

    def ids(self, elements):
        out = []
        for e in elements:
            if isinstance(e, str):
                out += self.text(e)
            elif e == BOS:
                out += [self.tok.bos_token_id] if self.tok.bos_token_id is not None else []
            elif e == EOS:
                out += [self.eos]
            elif e[0] == "token":
                out += [self.token_id(e[1])]
        return out

    def tool_text(self, tools):
        if not tools:
            return ""
        if self.t["tools_slots"]:  # a StringFormatter takes the raw JSON
            return self.apply(self.t["tools_slots"], content=tools)[0]
        parsed = json.loads(tools)
        return tf.tool_text(self.t["tool_format"], parsed) if len(parsed) else ""

    def function_text(self, content):
        """FunctionFormatter.apply's content (Llama2Template passes no thought/tool-call words)."""
        t, words = self.t, self.t["kind"] != "llama2"
        fmt = t["function_format"]
        call = words and re.search(re.escape(t["tool_call"][0]) + "(.*?)" + re.escape(t["tool_call"][1]), content,
                                   re.DOTALL)
        if call:
            return content.replace(call.group(0), "") + tf.function_text(fmt, tf.parse_calls(call.group(1)))
        thought = words and re.search(re.escape(t["thought"][0]) + "(.*?)" + re.escape(t["thought"][1]), content,
                                      re.DOTALL)
        body = content.replace(thought.group(0), "") if thought else content
        text = tf.function_text(fmt, tf.parse_calls(body))
        return thought.group(0) + text if thought else text

    def encode_messages(self, messages, system, tools=""):
        t, system = self.t, system or self.t["default_system"]
        encoded = []
        for i, m in enumerate(messages):
            el, sys_text = [], ""
            if i == 0:
                el += t["prefix"]
                if system or tools:
                    tt = self.tool_text(tools)
                    if t["kind"] == "moss_vl" and tools and not system:
                        tt = tt.lstrip("\n")
                    if t["kind"] == "llama2":
                        sys_text = self.apply(t["system"], content=system + tt)[0]
                    else:
                        el += self.apply(t["system"], content=system + tt)
            role = m["role"]
            if role == "user":
                kw = {"content": sys_text + m["content"]}
                if t["kind"] != "llama2":
                    kw["idx"] = str(i // 2)
                el += self.apply(t["user"], **kw)
            elif role == "assistant":
                el += self.apply(t["assistant"], content=m["content"])
            elif role == "observation":
                el += self.apply(t["observation"], content=m["content"])
            elif role == "function":
                el += self.apply(t["function"], content=self.function_text(m["content"]))
            else:
                raise SystemExit(f"role {role} not covered")
            encoded.append(self.ids(el))
        return encoded

    # ReasoningTemplate helpers
    def remove_thought(self, s):
        a, b = self.t["thought"]
        return re.sub(re.escape(a) + "(.*?)" + re.escape(b), "", s, flags=re.DOTALL).lstrip("\n")

    def has_thought(self, s):
        a, b = self.t["thought"]
        return a.strip() in s or b.strip() in s

    def empty_thought_ids(self):  # Glm47ReasoningTemplate.add_thought(""): the close word alone
        return self.text(self.t["thought"][1] if self.t["kind"] == "glm47" else "".join(self.t["thought"]))

    def multiturn(self, messages, system, discard_history_thought=False, tools=""):
        messages = copy.deepcopy(messages)
        reasoning = self.t["kind"] in REASONING
        if reasoning and self.enable_thinking is False:
            for i in range(1, len(messages), 2):
                messages[i]["content"] = self.remove_thought(messages[i]["content"])
        if reasoning and discard_history_thought:
            for i in range(1, len(messages) - 2, 2):
                messages[i]["content"] = self.remove_thought(messages[i]["content"])
        enc = self.encode_messages(messages, system, tools)
        if reasoning:
            turns = [len(messages) - 2] if discard_history_thought else range(0, len(messages), 2)
            for i in turns:
                if not self.has_thought(messages[i + 1]["content"]):
                    if not self.enable_thinking:
                        enc[i] = enc[i] + self.empty_thought_ids()
                    else:
                        enc[i + 1] = self.empty_thought_ids() + enc[i + 1]
        return [(enc[i], enc[i + 1]) for i in range(0, len(enc), 2)]

    def oneturn(self, messages, system, tools=""):  # Template / ReasoningTemplate.encode_oneturn
        messages = copy.deepcopy(messages)
        reasoning = self.t["kind"] in REASONING
        if reasoning and not self.preserve_thinking:
            for i in range(1, len(messages) - 2, 2):
                messages[i]["content"] = self.remove_thought(messages[i]["content"])
        if reasoning and self.enable_thinking is False:
            messages[-1]["content"] = self.remove_thought(messages[-1]["content"])
        enc = self.encode_messages(messages, system, tools)
        prompt, response = [x for e in enc[:-1] for x in e], enc[-1]
        if reasoning and not self.has_thought(messages[-1]["content"]):
            if not self.enable_thinking:
                prompt = prompt + self.empty_thought_ids()
            else:
                response = self.empty_thought_ids() + response
        return prompt, response

    def prompt(self, messages, system, tools=""):  # encode_oneturn(messages + [assistant ""])[0]
        return self.oneturn(copy.deepcopy(messages) + [{"role": "assistant", "content": ""}], system, tools)[0]


def infer_seqlen(source_len, target_len, cutoff_len):
    if target_len * 2 < cutoff_len:
        max_target = cutoff_len
    elif source_len * 2 < cutoff_len:
        max_target = cutoff_len - source_len
    else:
        max_target = int(cutoff_len * (target_len / (source_len + target_len)))
    new_target = min(max_target, target_len)
    new_source = min(max(cutoff_len - new_target, 0), source_len)
    return new_source, new_target


def supervised(r, messages, system, cutoff_len, train_on_prompt, mask_history, tools=""):
    efficient = r.t["efficient_eos"]
    pairs = r.multiturn(messages, system, discard_history_thought=mask_history, tools=tools)
    total = 1 if efficient else 0
    if mask_history:
        pairs = pairs[::-1]
    input_ids, labels = [], []
    for turn, (src, tgt) in enumerate(pairs):
        if total >= cutoff_len:
            break
        sl, tl = infer_seqlen(len(src), len(tgt), cutoff_len - total)
        src, tgt = src[:sl], tgt[:tl]
        total += sl + tl
        if train_on_prompt:
            src_lab = list(src)
        elif efficient and turn != 0 and sl > 0:
            src_lab = [r.eos] + [IGNORE] * (sl - 1)
        else:
            src_lab = [IGNORE] * sl
        tgt_lab = [IGNORE] * tl if (mask_history and turn != 0) else list(tgt)
        if mask_history:
            input_ids, labels = src + tgt + input_ids, src_lab + tgt_lab + labels
        else:
            input_ids, labels = input_ids + src + tgt, labels + src_lab + tgt_lab
    if efficient:
        input_ids, labels = input_ids + [r.eos], labels + [r.eos]
    return input_ids, labels


# ---- tokenizers --------------------------------------------------------------------------------
def load_tokenizers(tmp):
    from transformers import AutoTokenizer, LlamaTokenizer, LlamaTokenizerFast, PreTrainedTokenizerFast
    from transformers.convert_slow_tokenizer import TikTokenConverter

    toks = {}
    spm = str(DATA / "llama2-tokenizer" / "tokenizer.model")
    # add_prefix_space=True gives the normalizer of Meta's Llama-2 tokenizer.json (Prepend "▁" + Replace).
    toks["llama2"] = LlamaTokenizerFast(vocab_file=spm, add_prefix_space=True, legacy=True)
    toks["llama2_slow"] = LlamaTokenizer(vocab_file=spm, legacy=True)
    specials = ["<|begin_of_text|>", "<|end_of_text|>"] + [f"<|reserved_special_token_{i}|>" for i in range(4)]
    specials += ["<|start_header_id|>", "<|end_header_id|>", "<|reserved_special_token_4|>", "<|eot_id|>"]
    specials += [f"<|reserved_special_token_{i}|>" for i in range(5, 251)]
    pattern = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
               r"|\s*[\r\n]+|\s+(?!\S)|\s+")
    conv = TikTokenConverter(vocab_file=str(DATA / "llama3-tokenizer" / "tokenizer.model"), pattern=pattern,
                             additional_special_tokens=specials)
    toks["llama3"] = PreTrainedTokenizerFast(tokenizer_object=conv.converted(), bos_token="<|begin_of_text|>",
                                             eos_token="<|end_of_text|>")
    assert toks["llama3"].encode("Hello world", add_special_tokens=False) == [9906, 1917]
    assert toks["llama3"].convert_tokens_to_ids("<|eot_id|>") == 128009
    toks["qwen2"] = AutoTokenizer.from_pretrained(str(DATA / "qwen2-tokenizer"))
    toks["qwen2_think"] = AutoTokenizer.from_pretrained(make_think_tokenizer(tmp))
    assert toks["qwen2_think"].encode("<think>a</think>", add_special_tokens=False)[0] == THINK_IDS[0]
    toks["qwen2_extra"] = AutoTokenizer.from_pretrained(make_think_tokenizer(tmp, "qwen2_extra", EXTRA_TOKENS))
    assert toks["qwen2_extra"].convert_tokens_to_ids("<turn|>") == EXTRA_TOKENS["<turn|>"]
    return toks


# Qwen3's <think>/</think> are added (non-special) tokens; the Qwen2 files lack them, so the
# "qwen2_think" tokenizer is the Qwen2 files plus these two, at the next free ids (Qwen3 itself has
# them at 151667/151668). tests/data_layer/template_test.cpp builds the same directory.
THINK_IDS = (151646, 151647)


# The special tokens of the templates no bundled tokenizer has (gemma's <end_of_turn>, phi's
# <|end|>, ...), added as special tokens after the think ids to make "qwen2_extra": the tokenizer
# of last resort for those templates only (all_templates.choose_tokenizer). template_test.cpp
# builds the same directory from goldens.json's extra_tokens.
EXTRA_TOKENS = {t: 151648 + k for k, t in enumerate([
    "<|user|>", "<|assistant|>", "<|system|>", "<|observation|>", "[gMASK]", "sop", "<｜hy_eos｜>",
    "<｜hy_User｜>", "<｜hy_Assistant｜>", "<|end_of_sentence|>", "<start_of_turn>", "<end_of_turn>",
    "<|turn>", "<turn|>", "<|channel>", "<channel|>", "<|think|>", "<|tool>", "<tool|>", "<|tool_call>",
    "<tool_call|>", '<|"|>', "<|header_start|>", "<|header_end|>", "<|eot|>", "<|eom|>", "<|end|>", "<sep>",
    "<eod>"])}


def make_think_tokenizer(tmp, name="qwen2_think", extra=None):
    src, dst = DATA / "qwen2-tokenizer", Path(tmp) / name
    dst.mkdir()
    for f in ("vocab.json", "merges.txt", "special_tokens_map.json"):
        shutil.copy(src / f, dst / f)
    cfg = json.loads((src / "tokenizer_config.json").read_text())
    added = json.loads((src / "added_tokens.json").read_text())
    news = [(tok, i, False) for tok, i in zip(("<think>", "</think>"), THINK_IDS)]
    news += [(tok, i, True) for tok, i in (extra or {}).items()]
    for tok, i, special in news:
        cfg["added_tokens_decoder"][str(i)] = {"content": tok, "lstrip": False, "normalized": False,
                                               "rstrip": False, "single_word": False, "special": special}
        added[tok] = i
    (dst / "tokenizer_config.json").write_text(json.dumps(cfg, indent=2))
    (dst / "added_tokens.json").write_text(json.dumps(added))
    return str(dst)


# ---- cases -------------------------------------------------------------------------------------
def msgs(*pairs):
    roles = ["user", "assistant"]
    out = []
    for i, p in enumerate(pairs):
        role, content = (p if isinstance(p, tuple) else (roles[i % 2], p))
        out.append({"role": role, "content": content})
    return out


ONE = msgs("Hello, who are you?", "I am a helpful assistant.")
MULTI = msgs("Hi there", "Hello! How can I help?", " What is 2+2?\n", "2 + 2 = 4.", "你好，世界 🌍", "再见！")
OBS = msgs("Weather in Paris?", "Let me check.", ("observation", '{"temp": 21}'), "It is 21 degrees.")
SPECIAL = msgs("say <|im_end|> please", "<|im_end|>")
COT = msgs("What is 1+1?", "<think>\nadd them\n</think>\n\n1+1=2.", "And 2+2?", "<think>\ntwice 2\n</think>\n\n4.")
SYS = "You are a terse assistant."

TEMPLATE_CASES = [  # (template, tokenizer, messages, system)
    *[(n, "llama2", m, s) for n in ("default", "empty", "alpaca", "vicuna", "llama2", "mistral", "solar")
      for m in (ONE, MULTI) for s in ("", SYS)],
    *[("llama3", "llama3", m, s) for m in (ONE, MULTI, OBS) for s in ("", SYS)],
    *[(n, "qwen2", m, s) for n in ("qwen", "chatml") for m in (ONE, MULTI, OBS, SPECIAL) for s in ("", SYS)],
]
QWEN3_CASES = [(tk, m, s, et) for tk in ("qwen2", "qwen2_think") for m in (ONE, MULTI, COT) for s in ("", SYS)
               for et in (True, False, None)]

SFT_CASES = [  # (template, tokenizer, messages, system, cutoff_len, train_on_prompt, mask_history)
    ("llama2", "llama2", MULTI, SYS, 1024, False, False),
    ("llama2", "llama2", MULTI, SYS, 40, False, False),
    ("llama2", "llama2", MULTI, SYS, 40, True, False),
    ("llama2", "llama2", MULTI, SYS, 40, False, True),
    ("llama2", "llama2", MULTI, "", 7, False, False),
    ("default", "llama2", MULTI, "", 1024, True, True),
    ("solar", "llama2", MULTI, SYS, 1024, False, False),
    ("solar", "llama2", MULTI, SYS, 30, False, False),
    ("solar", "llama2", MULTI, SYS, 30, False, True),
    ("llama3", "llama3", MULTI, SYS, 1024, False, False),
    ("llama3", "llama3", MULTI, SYS, 33, False, True),
    ("qwen", "qwen2", MULTI, "", 1024, False, False),
    ("qwen", "qwen2", MULTI, "", 25, False, False),
    ("qwen", "qwen2", MULTI, "", 25, True, False),
    ("qwen", "qwen2", MULTI, "", 60, False, True),
    ("qwen", "qwen2", ONE, SYS, 3, False, False),
    ("qwen3", "qwen2_think", COT, "", 1024, False, False),
    ("qwen3", "qwen2_think", COT, "", 1024, False, True),
    ("qwen3", "qwen2_think", MULTI, "", 40, False, True),
]


# Records of data/glaive_toolcall_en_demo.json (sharegpt, from/value, a tools string) encoded as SFT
# examples: record 0 has one function call and its observation, record 3 three of them, record 1
# has tools "[]" (LLaMA-Factory then renders the system format even with no system prompt).
GLAIVE_CASES = [("qwen", "qwen2", 0), ("llama3", "llama3", 0), ("mistral", "llama2", 0),
                ("default", "llama2", 0), ("glm4", "llama2", 0), ("qwen3", "qwen2_think", 0),
                ("qwen", "qwen2", 3), ("chatml", "qwen2", 1)]
GLAIVE_ROLES = {"human": "user", "gpt": "assistant", "function_call": "function", "observation": "observation"}


def glaive_record(k):
    rec = json.loads((ROOT / "data" / "glaive_toolcall_en_demo.json").read_text(encoding="utf-8"))[k]
    return [{"role": GLAIVE_ROLES[t["from"]], "content": t["value"]} for t in rec["conversations"]], rec["tools"]


# Meta Llama 3 Instruct's chat_template (it trims message content; LLaMA-Factory's llama3 does not).
LLAMA3_JINJA = (
    "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = "
    "'<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + "
    "'<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}"
    "{{ content }}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}")


def jinja_checkable(name, messages, system):
    if any(m["role"] == "observation" for m in messages):
        return False
    if name == "qwen":  # the Qwen2 Jinja's default system differs from LF's qwen default
        return system != ""
    if name == "llama3":  # no default system on either side; Jinja trims content
        return all(m["content"] == m["content"].strip() for m in messages)
    return False


def hf_cross_check(name, tok, messages, system, pairs, prompt):
    """The model's own Jinja chat template (HF apply_chat_template) gives the same ids:
    qwen with the Qwen2 tokenizer's template, llama3 with Meta's Llama 3 Instruct template."""
    chat = ([{"role": "system", "content": system}] if system else []) + [dict(m) for m in messages]
    kw = {"chat_template": LLAMA3_JINJA} if name == "llama3" else {}
    full = tok.apply_chat_template(chat, tokenize=True, **kw)
    assert full == [x for p in pairs for x in p[0] + p[1]], f"{name} ids differ from apply_chat_template"
    gen = tok.apply_chat_template(chat[:-1], tokenize=True, add_generation_prompt=True, **kw)
    assert gen == prompt, f"{name} prompt differs from apply_chat_template"


def template_entry(toks, name, tk, m, s, enable_thinking=True, discard=False, tools="", preserve=False):
    r = Renderer(name, toks[tk], enable_thinking, preserve)
    pairs = r.multiturn(m, s, discard_history_thought=discard, tools=tools)
    prompt = r.prompt(m[:-1], s, tools)
    if tk == "llama2":  # the slow (sentencepiece) tokenizer must agree with the fast one
        slow = Renderer(name, toks["llama2_slow"], enable_thinking, preserve)
        assert (slow.multiturn(m, s, discard_history_thought=discard, tools=tools) == pairs
                and slow.prompt(m[:-1], s, tools) == prompt), name
    checked = jinja_checkable(name, m, s)
    if checked:
        hf_cross_check(name, toks[tk], m, s, pairs, prompt)
    e = {"template": name, "tokenizer": tk, "system": s, "messages": m,
         "pairs": [[p, q] for p, q in pairs], "prompt": prompt, "eos_id": r.eos, "stop_ids": r.stop_ids()}
    if TEMPLATES[name]["kind"] in REASONING:
        e["enable_thinking"], e["discard_history_thought"] = enable_thinking, discard
        if preserve:
            e["preserve_thinking"] = True
    if tools:
        e["tools"] = tools
    if checked:
        e["hf_jinja_checked"] = True
    return e


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=str(DATA / "templates" / "goldens.json"))
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        toks = load_tokenizers(tmp)
        entries = [template_entry(toks, *c) for c in TEMPLATE_CASES]
        entries += [template_entry(toks, "qwen3", tk, m, s, et) for tk, m, s, et in QWEN3_CASES]
        entries += [template_entry(toks, "qwen3", "qwen2_think", COT, "", et, True) for et in (True, False)]
        entries += [template_entry(toks, "qwen3", "qwen2_think", COT, "", et, preserve=True) for et in (True, False)]
        every, skipped = all_templates.entries(toks, template_entry, TEMPLATES)
        entries += every
        sft = []
        for name, tk, m, s, cutoff, top, mh in SFT_CASES:
            ids, labels = supervised(Renderer(name, toks[tk]), m, s, cutoff, top, mh)
            sft.append({"template": name, "tokenizer": tk, "system": s, "messages": m, "cutoff_len": cutoff,
                        "train_on_prompt": top, "mask_history": mh, "input_ids": ids, "labels": labels})
        for name, tk, record in GLAIVE_CASES:  # the bundled glaive_toolcall demo, tools column
            m, tools = glaive_record(record)
            ids, labels = supervised(Renderer(name, toks[tk]), m, "", 4096, False, False, tools)
            sft.append({"template": name, "tokenizer": tk, "system": "", "messages": m, "tools": tools,
                        "glaive_record": record, "cutoff_len": 4096, "train_on_prompt": False,
                        "mask_history": False, "input_ids": ids, "labels": labels})
    doc = {"generator": "tools/make_template_goldens.py", "lf_commit": LF_TEMPLATES["commit"],
           "think_ids": list(THINK_IDS), "extra_tokens": EXTRA_TOKENS, "tool_date": tf.TOOL_DATE, "templates": entries, "supervised": sft,
           "skipped": skipped, "tool_formats": all_templates.tool_format_goldens()}
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    with open(a.out, "w", encoding="utf-8") as f:
        json.dump(doc, f, ensure_ascii=False, separators=(",", ":"))
        f.write("\n")
    print(f"{a.out}: {len(entries)} template cases, {len(sft)} supervised cases")


if __name__ == "__main__":
    main()
