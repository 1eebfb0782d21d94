"""LLaMA-Factory's tool formats (src/llamafactory/data/tool_utils.py) re-implemented for
tools/make_template_goldens.py: the system text for a tools list, the assistant text of function
calls, and the extractor that reads calls back. Written from that file's behaviour, not imported.
Formats covered: all of its TOOLS (default, gemma4, glm4, glm4_moe, lfm2, ling, llama3, minimax1,
minimax2, mistral, qwen, qwen3_5, seed_oss)."""
import ast
import json
import re

TOOL_DATE = "26 Jul 2024"  # the llama3 prompt's "Today Date" (LLaMA-Factory uses today)


def dumps(v, indent=None):
    return json.dumps(v, ensure_ascii=False, indent=indent)


def _unwrap(t):
    return t.get("function", "") if t.get("type") == "function" else t


def _wrap(t):
    return t if t.get("type") == "function" else {"type": "function", "function": t}


QWEN_BODY = ("# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
             "You are provided with function signatures within <tools></tools> XML tags:\n<tools>%s"
             "\n</tools>\n\nFor each function call, return a json object with function name and arguments "
             "within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, "
             "\"arguments\": <args-json-object>}\n</tool_call>")


def _default_tools(tools):
    text, names = "", []
    for tool in map(_unwrap, tools):
        params = ""
        for name, p in tool["parameters"]["properties"].items():
            req = ", required" if name in tool["parameters"].get("required", []) else ""
            enum = ", should be one of [%s]" % ", ".join(p["enum"]) if p.get("enum") else ""
            items = ", where each item should be %s" % p["items"].get("type", "") if p.get("items") else ""
            params += f"  - {name} ({p.get('type', '')}{req}): {p.get('description', '')}{enum}{items}\n"
        text += f"> Tool Name: {tool['name']}\nTool Description: {tool.get('description', '')}\nTool Args:\n{params}\n"
        names.append(tool["name"])
    return ("You have access to the following tools:\n" + text + "Use the following format if using a tool:\n```\n"
            "Action: tool name (one of [" + ", ".join(names) + "])\nAction Input: the input to the tool, in a JSON "
            "format representing the kwargs (e.g. ```{\"input\": \"hello world\", \"num_beams\": 5}```)\n```\n")


def tool_text(fmt, tools):
    if fmt == "default":
        return _default_tools(tools)
    if fmt == "glm4":
        body = "".join(f"\n\n## {t['name']}\n\n{dumps(t, 4)}\n在调用上述函数时，请使用 Json 格式表示调用的参数。"
                       for t in map(_unwrap, tools))
        return ("你是一个名为 ChatGLM 的人工智能助手。你是基于智谱 AI 公司训练的语言模型 GLM-4 模型开发的，"
                "你的任务是针对用户的问题和要求提供适当的答复和支持。\n\n# 可用工具" + body)
    if fmt == "llama3":
        body = "".join(dumps(_wrap(t), 4) + "\n\n" for t in tools)
        return (f"Cutting Knowledge Date: December 2023\nToday Date: {TOOL_DATE}\n\nYou have access to the following "
                "functions. To call a function, please respond with JSON for a function call. Respond in the format "
                '{"name": function name, "parameters": dictionary of argument name and its value}. '
                "Do not use variables.\n\n" + body)
    if fmt == "mistral":
        return "[AVAILABLE_TOOLS] " + dumps([_wrap(t) for t in tools]) + "[/AVAILABLE_TOOLS]"
    joined = "".join("\n" + dumps(_wrap(t)) for t in tools)
    if fmt == "qwen":
        return "\n\n" + QWEN_BODY % joined
    if fmt == "ling":
        return QWEN_BODY % joined + "\ndetailed thinking off"
    if fmt == "glm4_moe":
        return ("\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided "
                "with function signatures within <tools></tools> XML tags:\n<tools>" + joined + "\n</tools>\n\nFor each "
                "function call, output the function name and arguments within the following XML format:\n<tool_call>"
                "{function-name}\n<arg_key>{arg-key-1}</arg_key>\n<arg_value>{arg-value-1}</arg_value>\n<arg_key>"
                "{arg-key-2}</arg_key>\n<arg_value>{arg-value-2}</arg_value>\n...\n</tool_call>\n")
    if fmt == "qwen3_5":
        body = "".join("\n" + dumps(t.get("function", t) if t.get("type") == "function" else t) for t in tools)
        return ("\n\n# Tools\n\nYou have access to the following functions:\n\n<tools>" + body + "\n</tools>\n\nIf you "
                "choose to call a function ONLY reply in the following format with NO suffix:\n\n<tool_call>\n"
                "<function=example_function_name>\n<parameter=example_parameter_1>\nvalue_1\n</parameter>\n"
                "<parameter=example_parameter_2>\nThis is the value for the second parameter\nthat can span\nmultiple "
                "lines\n</parameter>\n</function>\n</tool_call>\n\n<IMPORTANT>\nReminder:\n- Function calls MUST follow "
                "the specified format: an inner <function=...></function> block must be nested within "
                "<tool_call></tool_call> XML tags\n- Required parameters MUST be specified\n- You may provide optional "
                "reasoning for your function call in natural language BEFORE the function call, but NOT after\n- If "
                "there is no function call available, answer the question like normal with your current knowledge "
                "and do not tell the user about function calls\n</IMPORTANT>")
    if fmt == "seed_oss":
        return ("system\nYou are Doubao, a helpful AI assistant. You may call one or more functions to assist with the "
                "user query.Tool List:\nYou are authorized to use the following tools (described in JSON Schema "
                "format). Before performing any task, you must decide how to call them based on the descriptions and "
                "parameters of these tools." + "\n" + dumps(tools) + "\n工具调用请遵循如下格式:\n<seed:tool_call>\n"
                "<function=example_function_name>\n<parameter=example_parameter_1>value_1</parameter>\n"
                "<parameter=example_parameter_2>This is the value for the second parameter\nthat can span\nmultiple "
                "lines</parameter>\n</function>\n</seed:tool_call>\n")
    if fmt == "gemma4":
        return "\n".join(_gemma4_declaration(t) for t in tools)
    if fmt == "lfm2":
        return ("List of tools: <|tool_list_start|>" + dumps([t.get("function", t) if t.get("type") == "function"
                                                              else t for t in tools]) + "<|tool_list_end|>")
    if fmt == "minimax1":
        body = "".join(dumps(_unwrap(t)) + "\n" for t in tools)
        return ("You are provided with these tools:\n<tools>\n" + body + "</tools>\n\nIf you need to call tools, "
                "please respond with <tool_calls></tool_calls> XML tags, and provide tool-name and json-object of "
                "arguments, following the format below:\n<tool_calls>\n{\"name\": <tool-name-1>, \"arguments\": "
                "<args-json-object-1>}\n...\n</tool_calls>")
    if fmt == "minimax2":
        body = "".join("<tool>" + dumps(_unwrap(t)) + "</tool>\n" for t in tools)
        return ("\n\n# Tools\n\nYou may call one or more tools to assist with the user query.\nHere are the tools "
                "available in JSONSchema format:\n\n<tools>\n" + body + "</tools>\n\nWhen making tool calls, use XML "
                "format to invoke tools and pass parameters:\n\n<minimax:tool_call>\n<invoke name=\"tool-name-1\">\n"
                "<parameter name=\"param-key-1\">param-value-1</parameter>\n<parameter name=\"param-key-2\">"
                "param-value-2</parameter>\n...\n</invoke>\n</minimax:tool_call>")
    raise NotImplementedError(fmt)


Q = '<|"|>'  # Gemma 4's string quote


def _gemma4_declaration(tool):
    f = tool.get("function", tool) if tool.get("type") == "function" else tool
    out = f"declaration:{f['name']}{{description:{Q}{f.get('description', '')}{Q}"
    params = f.get("parameters")
    if params:
        parts = []
        if params.get("properties"):
            props = []
            for name, sch in params["properties"].items():
                item = ([f"description:{Q}{sch['description']}{Q}"] if sch.get("description") else []) + \
                       ([f"type:{Q}{str(sch['type']).upper()}{Q}"] if sch.get("type") else [])
                props.append(name + ":{" + ",".join(item) + "}")
            parts.append("properties:{" + ",".join(props) + "}")
        if params.get("required"):
            parts.append("required:[" + ",".join(Q + str(r) + Q for r in params["required"]) + "]")
        if params.get("type"):
            parts.append(f"type:{Q}{str(params['type']).upper()}{Q}")
        out += ",parameters:{" + ",".join(parts) + "}"
    resp = f.get("response")
    if resp:
        parts = [f"description:{Q}{resp['description']}{Q}"] if resp.get("description") else []
        if str(resp.get("type", "")).upper() == "OBJECT":
            parts.append(f"type:{Q}OBJECT{Q}")
        out += ",response:{" + ",".join(parts) + "}"
    return out + "}"


def _gemma4_value(v):
    if isinstance(v, str):
        return Q + v + Q
    if isinstance(v, bool):
        return str(v).lower()
    if v is None:
        return "null"
    if isinstance(v, dict):
        return "{" + ",".join(f"{k}:{_gemma4_value(v[k])}" for k in sorted(v)) + "}"
    if isinstance(v, list):
        return "[" + ",".join(map(_gemma4_value, v)) + "]"
    return repr(v)


def _gemma4_call(name, arguments):
    try:
        a = json.loads(arguments)
    except json.JSONDecodeError:
        a = arguments
    if isinstance(a, dict):
        inner = _gemma4_value(a)[1:-1]
    else:
        inner = a if isinstance(a, str) else _gemma4_value(a)
    return f"<|tool_call>call:{name}{{{inner}}}<tool_call|>"


def _lfm2_call(name, arguments):
    kw = ", ".join(f'{k}="{v}"' if isinstance(v, str) else f"{k}={dumps(v)}" for k, v in json.loads(arguments).items())
    return f"{name}({kw})"


def _kv(v):
    return v if isinstance(v, str) else dumps(v)


def function_text(fmt, calls):
    """calls: [(name, arguments_json_text)]."""
    if fmt == "default":
        return "\n".join(f"Action: {n}\nAction Input: {a}" for n, a in calls)
    if fmt == "glm4":
        assert len(calls) == 1
        return f"{calls[0][0]}\n{calls[0][1]}"
    if fmt == "llama3":
        objs = [{"name": n, "parameters": json.loads(a)} for n, a in calls]
        return dumps(objs[0] if len(objs) == 1 else objs)
    if fmt == "mistral":
        return dumps([{"name": n, "arguments": json.loads(a)} for n, a in calls])
    if fmt in ("qwen", "ling"):
        return "\n".join("<tool_call>\n" + dumps({"name": n, "arguments": json.loads(a)}) + "\n</tool_call>"
                         for n, a in calls)
    if fmt == "qwen3_5":
        return "\n".join(f"<tool_call>\n<function={n}>" + "".join(f"\n<parameter={k}>\n{_kv(v)}\n</parameter>"
                                                                   for k, v in json.loads(a).items())
                         + "\n</function>\n</tool_call>" for n, a in calls)
    if fmt == "glm4_moe":
        return "\n".join("\n<tool_call>" + n + "".join(f"\n<arg_key>{k}</arg_key>\n<arg_value>{_kv(v)}</arg_value>"
                                                       for k, v in json.loads(a).items()) for n, a in calls)
    if fmt == "seed_oss":
        return "\n".join(f"\n<seed:tool_call>\n<function={n}" + "".join(f"\n<parameter={k}>{_kv(v)}</parameter>"
                                                                        for k, v in json.loads(a).items())
                         + "\n</function>\n</seed:tool_call>" for n, a in calls)
    if fmt == "gemma4":
        return "".join(_gemma4_call(n, a) for n, a in calls)
    if fmt == "lfm2":
        return "<|tool_call_start|>[" + ", ".join(_lfm2_call(n, a) for n, a in calls) + "]<|tool_call_end|>"
    if fmt == "minimax1":
        return "<tool_calls>\n" + "\n".join(dumps({"name": n, "arguments": json.loads(a)}) for n, a in calls) + \
            "\n</tool_calls>"
    if fmt == "minimax2":
        return "\n".join(f'<invoke name="{n}">' + "".join(f'\n<parameter name="{k}">{_kv(v)}</parameter>'
                                                           for k, v in json.loads(a).items()) + "\n</invoke>"
                         for n, a in calls)
    raise NotImplementedError(fmt)


def parse_calls(text):
    """FunctionFormatter._parse_functions: one call object or a list -> [(name, arguments_json)]."""
    v = json.loads(text)
    v = v if isinstance(v, list) else [v]
    return [(c["name"], dumps(c["arguments"])) for c in v]


def extract(fmt, content):
    """tool_extractor: [(name, arguments_json)] or None when content is not a call."""
    try:
        if fmt == "default":
            found = re.findall(r"Action:\s*([a-zA-Z0-9_]+)\s*Action Input:\s*(.+?)(?=\s*Action:|\s*$)", content,
                               re.DOTALL)
            if not found:
                return None
            return [(n.strip(), dumps(json.loads(a.strip().strip('"').strip("```")))) for n, a in found]
        if fmt == "glm4":
            if "\n" not in content:
                return None
            n, a = content.split("\n", 1)
            return [(n, dumps(json.loads(a.strip())))]
        if fmt in ("llama3", "mistral"):
            key = "parameters" if fmt == "llama3" else "arguments"
            v = json.loads(content.strip())
            v = v if isinstance(v, list) else [v]
            return [(t["name"], dumps(t[key])) for t in v]
        if fmt in ("qwen", "ling", "glm4_moe"):
            found = re.findall(r"<tool_call>(.+?)</tool_call>(?=\s*<tool_call>|\s*$)", content, re.DOTALL)
            if not found:
                return None
            out = []
            for g in found:
                t = json.loads(g.strip())
                if "name" not in t or "arguments" not in t:
                    return None
                out.append((t["name"], dumps(t["arguments"])))
            return out
        if fmt in ("qwen3_5", "seed_oss"):
            tag, name = ("tool_call", r"[^\s<>]+") if fmt == "qwen3_5" else ("seed:tool_call", r"[^\s<]+")
            out = []
            for n, block in re.findall(rf"<{tag}>\s*<function=\s*({name})\s*(.*?)\s*</function>\s*</{tag}>", content,
                                       re.DOTALL):
                args = {}
                for k, raw in re.findall(r"<parameter=(.*?)>(.*?)</parameter>", block.strip(), re.DOTALL):
                    try:
                        args[k] = json.loads(raw.strip())
                    except json.JSONDecodeError:
                        args[k] = raw.strip() if fmt == "qwen3_5" else raw
                out.append((n.strip(), dumps(args)))
            return out or None
        if fmt == "gemma4":
            found = re.findall(r"<\|tool_call>call:([^{\s]+)\{(.*?)\}<tool_call\|>", content, re.DOTALL)
            return [(n.strip(), _gemma4_args(a)) for n, a in found] or None
        if fmt in ("minimax1", "minimax2"):
            tag = "tool_calls" if fmt == "minimax1" else "minimax:tool_call"
            block = re.search(rf"<{tag}>\s*(.+?)\s*</{tag}>", content, re.DOTALL)
            if block is None:
                return None
            return (_minimax1_calls if fmt == "minimax1" else _minimax2_calls)(block.group(1))
        if fmt == "lfm2":
            return _lfm2_extract(content)
    except (json.JSONDecodeError, KeyError, TypeError):
        return None
    raise NotImplementedError(fmt)


def _gemma4_args(text):
    text = text.strip()
    if not text:
        return "{}"
    norm = re.sub(r'<\|"\|>(.*?)<\|"\|>', lambda m: dumps(m.group(1)), "{" + text + "}", flags=re.DOTALL)
    norm = re.sub(r"(^|[{\s,])([A-Za-z_][A-Za-z0-9_]*)(\s*:)", r'\1"\2"\3', norm)
    for candidate in (norm, text):
        try:
            v = json.loads(candidate)
            return v if isinstance(v, str) else dumps(v)
        except json.JSONDecodeError:
            pass
    return text


def _minimax1_calls(block):
    out = []
    for line in block.split("\n"):
        if not line.strip():
            continue
        try:
            v = json.loads(line.strip())
        except json.JSONDecodeError:
            continue
        out.append((v["name"], dumps(v["arguments"])))  # KeyError/TypeError: the caller's None
    return out


def _minimax2_calls(block):
    out = []
    for name, body in re.findall(r'<invoke name="(.*?)">(.*?)</invoke>', block, re.DOTALL):
        args = {}
        for k, raw in re.findall(r'<parameter name="(.*?)">(.*?)</parameter>', body, re.DOTALL):
            try:
                args[k] = json.loads(raw.strip())
            except json.JSONDecodeError:
                args[k] = raw
        out.append((name.strip(), dumps(args)))
    return out


def _lfm2_value(node):
    if isinstance(node, ast.Name):
        return {"true": True, "false": False, "null": None}[node.id]  # KeyError: not a call
    return ast.literal_eval(node)


def _lfm2_extract(content):
    a = content.find("<|tool_call_start|>")
    e = content.find("<|tool_call_end|>", a) if a >= 0 else -1
    if e < 0:
        return None
    try:
        body = ast.parse(content[a + len("<|tool_call_start|>"):e].strip(), mode="eval").body
    except SyntaxError:
        return None
    nodes = body.elts if isinstance(body, ast.List) else [body] if isinstance(body, ast.Call) else []
    out = []
    for n in nodes:
        if not isinstance(n, ast.Call) or not isinstance(n.func, ast.Name):
            return None
        try:
            out.append((n.func.id, dumps({k.arg: _lfm2_value(k.value) for k in n.keywords})))
        except (ValueError, KeyError):
            return None
    return out or None
