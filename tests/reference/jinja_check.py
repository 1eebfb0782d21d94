#!/usr/bin/env python3
"""unillm::jinja against transformers' own chat-template renderer, byte for byte.

Every template under --templates (*.jinja) and every bundled tokenizer's chat_template
(tests/data/*/tokenizer_config.json) is rendered on a set of conversations (single and multi
turn, with and without a system prompt, tools with tool calls and tool results, reasoning
content, non-ASCII text), add_generation_prompt true and false, and enable_thinking unset, true
and false where the template reads it. Python renders with transformers 4.46's
_compile_jinja_template (ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks,
loopcontrols, its tojson / raise_exception / strftime_now, the generation tag) and the same
keyword arguments apply_chat_template passes; unillm renders the same cases in one process
(jinja_render). A case agrees when both texts are equal or both raise. Every template must
render at least one case, and no case may disagree.
"""
import argparse
import glob
import json
import os
import subprocess
import sys

from transformers.utils.chat_template_utils import _compile_jinja_template

TOOLS = [
    {"type": "function", "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city.",
        "parameters": {"type": "object", "properties": {
            "location": {"type": "string", "description": "City name, e.g. Paris"},
            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
            "required": ["location"]}}},
    {"type": "function", "function": {
        "name": "add",
        "description": "Add two numbers.",
        "parameters": {"type": "object", "properties": {
            "a": {"type": "number"}, "b": {"type": "integer", "default": 1}},
            "required": ["a", "b"]}}},
]
SYSTEM = {"role": "system", "content": "You are a helpful assistant."}
CALL = {"role": "assistant", "content": "", "tool_calls": [{
    "id": "call12345", "type": "function",
    "function": {"name": "get_weather", "arguments": {"location": "Paris", "unit": "celsius"}}}]}
RESULT = {"role": "tool", "tool_call_id": "call12345", "name": "get_weather",
          "content": "{\"temperature\": 22, \"sky\": \"clear\"}"}

CONVERSATIONS = {
    "single": [{"role": "user", "content": "Hello, who are you?"}],
    "system": [SYSTEM, {"role": "user", "content": "What is 2+2?"}],
    "multi": [SYSTEM, {"role": "user", "content": "What is 2+2?"},
              {"role": "assistant", "content": "2+2 is 4."},
              {"role": "user", "content": "  And 3+3?  "}],
    "multi_nosys": [{"role": "user", "content": "Hi!"},
                    {"role": "assistant", "content": "Hello! How can I help?"},
                    {"role": "user", "content": "Tell me a joke."}],
    "unicode": [{"role": "user", "content":
                 "Bonjour — ça va? 你好 \"quotes\" 'single' \\backslash\n\tnew line\n"}],
    "reasoning": [{"role": "user", "content": "What is 2+2?"},
                  {"role": "assistant", "content": "<think>\nSimple sum.\n</think>\n\nIt is 4."},
                  {"role": "user", "content": "And 3+3?"}],
    "tools_ask": [SYSTEM, {"role": "user", "content": "What's the weather in Paris?"}],
    "tools_full": [SYSTEM, {"role": "user", "content": "What's the weather in Paris?"}, CALL,
                   RESULT, {"role": "assistant", "content": "It is 22°C and clear in Paris."}],
}
# OpenAI style: arguments as a JSON string, content None beside tool_calls, two parallel calls.
CALLS2 = {"role": "assistant", "content": None, "tool_calls": [
    {"id": "call00001", "type": "function",
     "function": {"name": "add", "arguments": "{\"a\": 1.5, \"b\": 2}"}},
    {"id": "call00002", "type": "function",
     "function": {"name": "get_weather", "arguments": "{\"location\": \"Zürich\"}"}}]}
CONVERSATIONS["tools_parallel"] = [
    {"role": "user", "content": "Add 1.5 and 2, and tell me the weather in Zürich."}, CALLS2,
    {"role": "tool", "tool_call_id": "call00001", "name": "add", "content": "3.5"},
    {"role": "tool", "tool_call_id": "call00002", "name": "get_weather", "content": "sunny"},
    {"role": "assistant", "content": "3.5, and it is sunny."},
    {"role": "user", "content": "Thanks!"}]
CONVERSATIONS["reasoning_field"] = [
    {"role": "user", "content": "Hi"},
    {"role": "assistant", "content": "Hello.", "reasoning_content": "Greet back."},
    {"role": "user", "content": "Bye"}]
# Multimodal-style content parts: templates iterate them, or print the list's Python repr.
CONVERSATIONS["content_parts"] = [
    {"role": "system", "content": [{"type": "text", "text": "Be brief."}]},
    {"role": "user", "content": [{"type": "text", "text": "Describe this: "},
                                 {"type": "text", "text": "it's a \"cat\"\n"}]}]
TOOL_CONVERSATIONS = {"tools_ask", "tools_full", "tools_parallel"}


# Synthetic snippets: single constructs and edge cases, rendered on the "tools_full" context
# (a failure in both counts as agreement, as for the real templates).
SNIPPETS = [
    "{{ 1 }}{{ -1.5 }}{{ 1e16 }}{{ 1e-7 }}{{ 123456789.125 }}{{ 2**62 }}{{ 10/4 }}{{ 9//2.0 }}",
    "{{ 5 % -3 }}{{ -5 % 3 }}{{ 5.5 % 2 }}{{ 1/0 }}",
    "{{ [1, 2.0, 'x', none, true, [], {}, ('a',)] }}{{ {'k': [1, {'n': none}]} }}",
    "{{ \"it's\" }}{{ ['it\\'s', \"q\\\"\", 'tab\\t', 'nl\\n', 'é'] }}",
    "{{ messages|length }}{{ messages[0].content|length }}{{ tools|length }}{{ messages[-1]['role'] }}",
    "{{ messages|map(attribute='role')|join(',') }}|{{ messages|selectattr('tool_calls', 'defined')|list|length }}",
    "{{ messages|selectattr('role', 'in', ['user', 'tool'])|map(attribute='role')|list }}",
    "{{ tools|map(attribute='function.name')|list }}{{ tools|tojson }}",
    "{{ tools[0]|tojson(indent=4) }}{{ tools[0].function.parameters|tojson(separators=(',', ':')) }}",
    "{{ tools|tojson(sort_keys=true) }}{{ 'é\\u2028'|tojson }}{{ 'é'|tojson(ensure_ascii=true) }}",
    "{{ messages[2].tool_calls[0].function.arguments|tojson }}{{ messages[2].tool_calls[0].function.arguments.location }}",
    "{% for k, v in tools[0].function.parameters.properties|dictsort %}{{ k }}:{{ v.type }};{% endfor %}",
    "{% for k, v in tools[0].function.parameters.properties.items() %}{{ loop.index }}{{ k }}{% endfor %}",
    "{% for m in messages if m.role != 'system' %}{{ loop.index }}/{{ loop.length }}{{ m.role[0] }}"
    "{% if not loop.last %},{% endif %}{% endfor %}",
    "{% for m in messages %}{{ loop.previtem.role if loop.previtem is defined else '-' }}{% endfor %}",
    "{% for i in range(10, 0, -3) %}{{ i }}{% endfor %}{{ range(3)|list }}{{ range(2, 5)|sum }}",
    "{{ 'Hello World'.lower().split() }}{{ ' a b '.split(' ') }}{{ 'a,b,,c'.split(',', 2) }}",
    "{{ '  x\\n'.rstrip() }}|{{ 'xyx'.strip('x') }}|{{ '--a--'.lstrip('-') }}|{{ 'abc'.upper() }}",
    "{{ 'hello world-foo'|title }}|{{ 'hello world-foo'.title() }}|{{ 'hELLO wORLD'|capitalize }}",
    "{{ 'aaa'.replace('a', 'b', 2) }}{{ 'abc'|replace('', '-') }}{{ 'abcabc'.count('b') }}{{ 'abc'.find('z') }}",
    "{{ 'ab' in 'cab' }}{{ 'x' in ['x'] }}{{ 'role' in messages[0] }}{{ 1 in [1.0] }}{{ none in [none] }}",
    "{{ 'x'|center(9) }}|{{ 'xy'|center(7) }}|{{ 'a\\nb\\n\\nc'|indent(3, true) }}|{{ 'a\\n\\nb'|indent(2, blank=true) }}",
    "{{ [3, 1, 2]|sort(reverse=true)|list }}{{ ['b', 'A', 'a']|sort|list }}{{ ['b', 'A', 'a']|unique|list }}",
    "{{ messages|sort(attribute='role')|map(attribute='role')|list }}{{ [1, 5, 3]|max }}{{ ['b', 'a']|min }}",
    "{{ [1, 2, 3]|first }}{{ 'abc'|last }}{{ []|first }}{{ [1, 2]|reverse|list }}{{ 'abc'|reverse }}",
    "{{ '42'|int }}{{ ' 7 '|int }}{{ '4.7'|int }}{{ 'x'|int(-1) }}{{ 3.9|int }}{{ '1.5'|float }}{{ 'x'|float }}",
    "{{ 2.675|round(2) }}{{ 0.5|round }}{{ 1.5|round }}{{ 2.5|round(0, 'floor') }}{{ -2.5|abs }}{{ 7|round }}",
    "{{ x|default('d') }}{{ none|default('d') }}{{ ''|default('d', true) }}{{ x|d('e') }}",
    "{{ 1 is odd }}{{ 2 is even }}{{ 9 is divisibleby(3) }}{{ 'a' is lower }}{{ 'A' is upper }}{{ 1.0 is float }}",
    "{{ true is boolean }}{{ 1 is boolean }}{{ none is none }}{{ [] is sequence }}{{ 'x' is iterable }}{{ {} is mapping }}",
    "{{ 3 is gt 2 }}{{ 3 is lt(2) }}{{ 3 is ge 3 }}{{ 'a' is in 'abc' }}{{ 2 is ne 2 }}{{ range is callable }}",
    "{% set ns = namespace(a=1, b=[]) %}{% set ns.a = ns.a + 1 %}{{ ns.a }}{{ ns.b }}",
    "{% macro tag(name, cls='c', *args) %}<{{ name }} {{ cls }}>{% endmacro %}{{ tag('p') }}{{ tag('a', cls='x') }}",
    "{% macro outer() %}[{{ caller(1) }}]{% endmacro %}{% call(n) outer() %}n={{ n }}{% endcall %}",
    "{% filter trim %}   padded   {% endfilter %}|{% set b %}  x  {% endset %}{{ b|length }}",
    "{% if messages %}A{% elif tools %}B{% else %}C{% endif %}{% if [] %}D{% elif none %}E{% else %}F{% endif %}",
    "{{ (messages|length > 2) and 'many' or 'few' }}{{ not messages }}{{ 'y' if tools is not none else 'n' }}",
    "{{ messages[1:3]|map(attribute='role')|list }}{{ messages[::-2]|length }}{{ 'hello'[-3:] }}{{ 'hello'[10:] }}",
    "{{ messages[99] is defined }}{{ messages[0].nope is undefined }}{{ messages[0]['nope'] }}",
    "{{ x.y }}",
    "{{ messages.append(1) }}",
    "{{ messages|map(attribute='role')|tojson }}",
    "{{ messages|selectattr('role')|length }}",
    "{{ 'a' + 1 }}",
    "{{ 'a' < 1 }}",
    "{% for a, b in [[1, 2], [3, 4]] %}{{ a + b }}{% endfor %}{% set p, q = 'xy' %}{{ q }}{{ p }}",
    "{% set d = {0: 'zero', 1.5: 'f', true: 'T', none: 'N', 'k': 2} %}{{ d }}{{ d[0] }}{{ d[1] }}"
    "{{ d[1.5] }}{{ d[none] }}{{ d|tojson }}{{ 0 in d }}{{ d.get(0) }}{{ d.items()|list }}",
    "{{ '%s' % 1 }}{{ '%s-%d|%5.2f|%-4s|%r|%%' % ('a', 3, 2.5, 'x', 'q') }}{{ '%3d' % 7 }}",
    "{{ '%s %s' % ('only one',) }}",
    "{{ [1, 2][0, ::-1] }}",
    "{% if false %}{{ x|no_such_filter }}{% endif %}ok",
    "{% if false %}{{ x is no_such_test }}{% endif %}ok",
    "{% for x in [] %}{{ x|no_such_filter }}{% endfor %}ok",
    "{{ 'a' if false else x|no_such_filter }}ok",
    "{% if true %}{% for x in [1] %}{{ x|no_such_filter }}{% endfor %}{% endif %}ok",
    "{% for x in [1, 2] %}{% set y = x %}{% endfor %}{{ y }}|{{ 7 // 0 }}",
    "{% macro m() %}{{ varargs }}{{ kwargs }}{% endmacro %}{{ m(1, 2, k=3) }}",
    "{{ strftime_now('%Y') | length }}{{ raise_exception('boom') }}",
    "{# comment {{ x }} #}a  {#- trimmed -#}  b\n  {% if true %}\n    c\n  {% endif %}\nd  {{- ' e ' -}}  f",
    "{% generation %}{{ messages[0].content }}{% endgeneration %}{%- for x in [1] -%} {{ x }} {%- endfor -%}",
    "{{ messages[2]|items|list|length }}{{ {'b': 1, 'a': 2}|dictsort(by='value', reverse=true) }}",
    "{{ messages[0].content|wordcount }}{{ '<a href=\"x\">&'|e }}{{ ('<b>'|safe + '<i>') }}{{ '<b>'|safe|e }}",
]


def load_templates(templates_dir, data_dir):
    out = {}
    for path in sorted(glob.glob(os.path.join(templates_dir, "*.jinja"))):
        with open(path, encoding="utf-8") as f:
            out[os.path.basename(path)[:-len(".jinja")]] = f.read()
    for path in sorted(glob.glob(os.path.join(data_dir, "*", "tokenizer_config.json"))):
        with open(path, encoding="utf-8") as f:
            tmpl = json.load(f).get("chat_template")
        if isinstance(tmpl, str):
            out[os.path.relpath(path, data_dir)] = tmpl
    return out


def make_cases(templates):
    cases = []
    for i, snippet in enumerate(SNIPPETS):
        ctx = {"messages": CONVERSATIONS["tools_full"], "tools": TOOLS, "documents": None,
               "add_generation_prompt": True, "bos_token": "<s>", "eos_token": "</s>"}
        cases.append({"template": f"snippet{i}", "label": snippet[:40], "context": ctx})
    for name, source in templates.items():
        thinking = [None, True, False] if "enable_thinking" in source else [None]
        for conv_name, messages in CONVERSATIONS.items():
            for agp in (True, False):
                for think in thinking:
                    ctx = {"messages": messages,
                           "tools": TOOLS if conv_name in TOOL_CONVERSATIONS else None,
                           "documents": None, "add_generation_prompt": agp,
                           "bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>",
                           "pad_token": "<pad>"}
                    if think is not None:
                        ctx["enable_thinking"] = think
                    label = f"{conv_name} agp={agp}" + ("" if think is None else f" think={think}")
                    cases.append({"template": name, "label": label, "context": ctx})
    return cases


def render_python(templates, cases):
    compiled, results = {}, []
    for name, source in templates.items():
        try:
            compiled[name] = _compile_jinja_template(source)
        except Exception as e:  # noqa: BLE001 - a parse error is a result to compare
            compiled[name] = e
    for c in cases:
        t = compiled[c["template"]]
        if isinstance(t, Exception):
            results.append({"ok": False, "error": f"{type(t).__name__}: {t}"})
            continue
        try:
            results.append({"ok": True, "text": t.render(**c["context"])})
        except Exception as e:  # noqa: BLE001
            results.append({"ok": False, "error": f"{type(e).__name__}: {e}"})
    return results


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--render", required=True, help="path of the jinja_render driver")
    ap.add_argument("--templates", required=True)
    ap.add_argument("--data", default=None, help="tests/data (bundled tokenizers)")
    ap.add_argument("--work", required=True)
    ap.add_argument("--verbose", action="store_true")
    args = ap.parse_args()
    data_dir = args.data or os.path.dirname(os.path.abspath(args.templates))
    templates = load_templates(args.templates, data_dir)
    snippets = {f"snippet{i}": s for i, s in enumerate(SNIPPETS)}
    cases = make_cases(templates)
    templates.update(snippets)
    os.makedirs(args.work, exist_ok=True)
    batch = os.path.join(args.work, "batch.json")
    out = os.path.join(args.work, "unillm.json")
    with open(batch, "w", encoding="utf-8") as f:
        json.dump({"templates": templates,
                   "cases": [{"template": c["template"], "context": c["context"]} for c in cases]},
                  f, ensure_ascii=False)
    subprocess.run([args.render, batch, out], check=True)
    with open(out, encoding="utf-8") as f:
        ours = json.load(f)
    theirs = render_python(templates, cases)

    same_text = same_error = 0
    bad = []
    rendered_per_template = {name: 0 for name in templates}
    for c, a, b in zip(cases, theirs, ours):
        if a["ok"] and b["ok"] and a["text"] == b["text"]:
            same_text += 1
            rendered_per_template[c["template"]] += 1
        elif not a["ok"] and not b["ok"]:
            same_error += 1
            if args.verbose:
                print(f"both raise: {c['template']} [{c['label']}]\n  py: {a['error']}\n  cc: {b['error']}")
        else:
            bad.append((c, a, b))
    shown = set()
    for c, a, b in bad:
        if c["template"] in shown:  # one example per template keeps the log readable
            continue
        shown.add(c["template"])
        print(f"MISMATCH {c['template']} [{c['label']}] "
              f"({sum(1 for x in bad if x[0]['template'] == c['template'])} cases)")
        if a["ok"] and b["ok"]:
            at = next((i for i, (x, y) in enumerate(zip(a["text"], b["text"])) if x != y),
                      min(len(a["text"]), len(b["text"])))
            print(f"  first difference at character {at}:")
            print("  python:", json.dumps(a["text"][max(0, at - 80):at + 80], ensure_ascii=False))
            print("  unillm:", json.dumps(b["text"][max(0, at - 80):at + 80], ensure_ascii=False))
        else:
            print("  python:", json.dumps(a, ensure_ascii=False)[:300])
            print("  unillm:", json.dumps(b, ensure_ascii=False)[:300])
    never = [n for n, k in rendered_per_template.items() if k == 0 and n not in snippets]
    print(f"jinja_check: {len(templates) - len(snippets)} templates + {len(snippets)} snippets, "
          f"{len(cases)} cases: {same_text} rendered "
          f"identically, {same_error} raise in both, {len(bad)} disagree")
    if never:
        print("templates that never rendered:", ", ".join(never))
    return 1 if bad or never else 0


if __name__ == "__main__":
    sys.exit(main())
