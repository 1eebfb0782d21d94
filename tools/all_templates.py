"""Golden cases for every LLaMA-Factory template (tools/make_template_goldens.py uses this): each
template on the bundled tokenizer that fits it best, with single and multi-turn conversations,
system prompts, tools + function calls + observations, and thoughts with enable_thinking
true/false/None for reasoning templates; plus string goldens of each tool format."""
import json

import lf_tool_formats as tf

TOKENIZERS = ("llama2", "llama3", "qwen2", "qwen2_think")  # ties go to the earlier one
IMPLEMENTED = ("default", "gemma4", "glm4", "glm4_moe", "lfm2", "ling", "llama3", "minimax1", "minimax2", "mistral",
               "qwen", "qwen3_5", "seed_oss")
# Probe texts for the extractors of gemma4, minimax1/2 and lfm2 (every format reads every probe).
MORE_PROBES = [
    '<|tool_call>call:get_weather{city:<|"|>Paris, Texas: US<|"|>,days:[1,2]}<tool_call|>',
    '<|tool_call>call:f{}<tool_call|> and <|tool_call>call:g{"x": 1, y :{z:null}}<tool_call|>',
    '<|tool_call>call:bad name{a:1}<tool_call|><|tool_call>call:n{42}<tool_call|>',
    '<|tool_call>call:s{"str"}<tool_call|><|tool_call>call:h{<|"|>just text<|"|>}<tool_call|>',
    '<tool_calls>\n{"name": "a", "arguments": {"x": 1}}\nnot json\n  {"name": "b", "arguments": 2}  \n</tool_calls>',
    "<tool_calls> </tool_calls>", '<tool_calls>\n{"arguments": 1}\n</tool_calls>',
    '<minimax:tool_call>\n<invoke name="f">\n<parameter name="a"> 1 </parameter>\n<parameter name="b"> two '
    '</parameter>\n</invoke>\n<invoke name=" g "></invoke>\n</minimax:tool_call>',
    "x<minimax:tool_call>nothing</minimax:tool_call>",
    '<|tool_call_start|>[f(a=1, b="x\\n", c=true, d=[1, -2.5], e={"k": None, 2: (1,)}), g()]<|tool_call_end|>',
    "Sure.<|tool_call_start|>f(x, a=(1, 2), b='it\\'s', c=\"a\" r'\\d', d=0x1F, e=1_000)<|tool_call_end|> done",
    "<|tool_call_start|>[f(a=[true])]<|tool_call_end|>", "<|tool_call_start|>f(a=1<|tool_call_end|>",
    "<|tool_call_start|>obj.f(a=1)<|tool_call_end|>", "<|tool_call_start|>[]<|tool_call_end|>",
    "<|tool_call_start|>f(a=1, a=2, b=-0.0, c=1e400, d='''x\ny''', e=-7, f=+.5, g=\"\\u00e9\\x41\")<|tool_call_end|>",
]
SYS = "You are a terse assistant."

TOOLS = json.dumps([
    {"name": "get_weather", "description": "Weather of a city — today",
     "parameters": {"type": "object", "properties": {
         "city": {"type": "string", "description": "City name"},
         "unit": {"type": "string", "description": "Unit", "enum": ["celsius", "fahrenheit"]},
         "days": {"type": "array", "description": "Days ahead", "items": {"type": "integer"}}},
         "required": ["city"]}},
    {"type": "function", "function": {"name": "add", "description": "Adds two numbers",
                                      "parameters": {"type": "object", "properties": {
                                          "a": {"type": "number"}, "b": {"type": "number"}}, "required": ["a", "b"]}}},
], ensure_ascii=False)
CALL = '{"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius", "days": [1, 2]}}'
CALLS = '[{"name": "add", "arguments": {"a": 1.5, "b": 2}}, {"name": "get_weather", "arguments": {"city": "巴黎"}}]'


def msg(role, content):
    return {"role": role, "content": content}


def conversations(t):
    one = [msg("user", "Hello, who are you?"), msg("assistant", "I am a helpful assistant.")]
    multi = [msg("user", "Hi there"), msg("assistant", "Hello! How can I help?"), msg("user", " What is 2+2?\n"),
             msg("assistant", "2 + 2 = 4."), msg("user", "你好，世界 🌍"), msg("assistant", "再见！")]
    tool = [msg("user", "Weather in Paris?"), msg("function", CALL), msg("observation", '{"temp": 21}'),
            msg("assistant", "It is 21 degrees.")]
    a, b = t["thought"]
    cot = [msg("user", "What is 1+1?"), msg("assistant", f"{a}add them{b}1+1=2."), msg("user", "And 2+2?"),
           msg("assistant", f"{a}twice 2{b}4.")]
    parallel = [msg("user", "Add 1.5 and 2, and the weather in 巴黎"), msg("function", CALLS),
                msg("observation", "3.5"), msg("assistant", "3.5; sunny.")]
    c1, c2 = t["tool_call"]
    wrapped = [msg("user", "Weather?"), msg("function", f"Let me look.{c1}{CALL}{c2}"), msg("observation", "sunny"),
               msg("assistant", "Sunny.")]
    thought_call = [msg("user", "Weather?"), msg("function", f"{a}need a tool{b}{CALL}"), msg("observation", "sunny"),
                    msg("assistant", "Sunny.")]
    return one, multi, tool, cot, parallel, wrapped, thought_call


def requirements(t):
    need = [s[1] for k in ("user", "assistant", "system", "observation", "prefix", "function") for s in t[k]
            if isinstance(s, tuple) and s[0] == "token"]
    if t["replace_eos"]:
        need.append(t["stop_words"][0])
    return need


def template_text(t):
    parts = [s for k in ("user", "assistant", "system", "observation", "prefix", "function") for s in t[k]
             if isinstance(s, str)]
    thought = "".join(t["thought"]) if t["kind"] in ("reasoning", "glm47") else ""
    return "".join(parts) + "".join(t["stop_words"]) + thought


def choose_tokenizer(toks, t):
    """The bundled tokenizer that has every token the template needs and the most of the special
    tokens its text names; else the Qwen2 tokenizer with the missing special tokens added
    (qwen2_extra), if it has them all; None when none has them."""
    best = choose_from(toks, t, TOKENIZERS)
    return best if best is not None or "qwen2_extra" not in toks else choose_from(toks, t, ("qwen2_extra",))


def choose_from(toks, t, keys):
    best, best_score = None, -1
    text = template_text(t)
    for key in keys:
        tok = toks[key]
        vocab = tok.get_vocab()
        if any(w not in vocab for w in requirements(t)):
            continue
        if not t["replace_eos"] and tok.eos_token_id is None and "<|endoftext|>" not in vocab:
            continue
        score = sum(1 for s in tok.get_added_vocab() if s in text)
        if score > best_score:
            best, best_score = key, score
    return best


def entries(toks, template_entry, templates):
    out, skipped = [], {}
    for name, t in templates.items():
        tk = choose_tokenizer(toks, t)
        if tk is None:
            skipped[name] = "no bundled tokenizer has " + ", ".join(requirements(t))
            continue
        one, multi, tool, cot, parallel, wrapped, thought_call = conversations(t)
        out.append(template_entry(toks, name, tk, one, ""))
        out.append(template_entry(toks, name, tk, multi, SYS))
        tools_ok = t["tool_format"] in IMPLEMENTED or t["tools_slots"]
        if tools_ok and t["function_format"] in IMPLEMENTED:
            out.append(template_entry(toks, name, tk, tool, "", tools=TOOLS))
            out.append(template_entry(toks, name, tk, tool, SYS, tools=TOOLS))
            if t["function_format"] != "glm4":  # GLM-4 refuses parallel calls
                out.append(template_entry(toks, name, tk, parallel, SYS, tools=TOOLS))
            if t["kind"] != "llama2":  # Llama2Template parses calls without thought/tool-call words
                out.append(template_entry(toks, name, tk, wrapped, ""))
                out.append(template_entry(toks, name, tk, thought_call, "", tools="[]"))
        if t["kind"] in ("reasoning", "glm47"):
            for et in (True, False, None):
                out.append(template_entry(toks, name, tk, cot, "", et))
            out.append(template_entry(toks, name, tk, cot, SYS, True, True))
    return out, skipped


def tool_format_goldens():
    """Per implemented format: the tool prompt for TOOLS, the text of one and of two calls, and
    what the extractor reads back from texts (null = not a tool call)."""
    tools = json.loads(TOOLS)
    one, two = tf.parse_calls(CALL), tf.parse_calls(CALLS)
    out = {}
    for fmt in IMPLEMENTED:
        texts = [tf.function_text(fmt, one)]
        if fmt != "glm4":
            texts.append(tf.function_text(fmt, two))
        probes = texts + ["Just an answer.", "Action: x\nAction Input: {bad json", '{"name": "f"}',
                          "<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call> trailing",
                          "get_time\n{}", 'Action: a_1\nAction Input: "```{\\"k\\": 1}```"\nAction: b Action Input: 2',
                          "<tool_call>\n<function=f>\n<parameter=x>\n 7 \n</parameter>\n<parameter=y>hi</parameter>"
                          "\n</function>\n</tool_call>",
                          "<seed:tool_call>\n<function=g\n<parameter=q> a b </parameter>\n</function>\n</seed:tool_call>",
                          '[{"name": "f", "parameters": {"p": null}, "arguments": {"q": [true, 1e-07, 1e+20]}}]'] + MORE_PROBES
        out[fmt] = {"tools": tf.tool_text(fmt, tools), "calls": [texts[0], texts[1] if len(texts) > 1 else None],
                    "extract": [{"text": p, "calls": tf.extract(fmt, p)} for p in probes]}
    return out
