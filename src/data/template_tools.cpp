// Tool prompts and function-call text per LLaMA-Factory tool format (its tool_utils.py), with a
// json.dumps twin so every byte matches what the Python writes.
#include "data/template_tools.h"

#include <algorithm>
#include <charconv>
#include <cstdio>

#include "core/error.h"
#include "data/error.h"
#include "data/template_tools_internal.h"

namespace unillm::data {
namespace {

using ojson = nlohmann::ordered_json;

// ---- json.dumps --------------------------------------------------------------------------------

// json.dumps(str, ensure_ascii=False): only quote, backslash and control characters are escaped.
void dump_string(const std::string& s, std::string& out) {
  out += '"';
  for (unsigned char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof(buf), "\\u%04x", c);
          out += buf;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  out += '"';
}

// Python's float repr: the shortest round-trip digits, positional when -4 <= exponent < 16.
void dump_float(double v, std::string& out) {
  if (v != v) {
    out += "NaN";
    return;
  }
  if (v == 1.0 / 0.0) {
    out += "Infinity";
    return;
  }
  if (v == -1.0 / 0.0) {
    out += "-Infinity";
    return;
  }
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof(buf), v, std::chars_format::scientific);
  std::string sci(buf, r.ptr);  // "-d.ddde+XX"
  size_t e = sci.find('e');
  int exp = std::stoi(sci.substr(e + 1));
  std::string mant = sci.substr(0, e);
  const bool neg = mant[0] == '-';
  if (neg) mant.erase(0, 1);
  std::string digits;
  for (char c : mant)
    if (c != '.') digits += c;
  if (neg) out += '-';
  if (exp >= -4 && exp < 16) {
    if (exp < 0) {
      out += "0." + std::string(-exp - 1, '0') + digits;
    } else if (static_cast<int>(digits.size()) <= exp + 1) {
      out += digits + std::string(exp + 1 - digits.size(), '0') + ".0";
    } else {
      out += digits.substr(0, exp + 1) + "." + digits.substr(exp + 1);
    }
    return;
  }
  out += digits.substr(0, 1);
  if (digits.size() > 1) out += "." + digits.substr(1);
  char eb[16];
  std::snprintf(eb, sizeof(eb), "e%c%02d", exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
  out += eb;
}

void dump(const ojson& v, int indent, int depth, std::string& out) {
  auto newline = [&](int d) {
    out += '\n';
    out.append(static_cast<size_t>(indent * d), ' ');
  };
  switch (v.type()) {
    case ojson::value_t::object:
    case ojson::value_t::array: {
      const bool obj = v.is_object();
      if (v.empty()) {
        out += obj ? "{}" : "[]";
        return;
      }
      out += obj ? '{' : '[';
      bool first = true;
      for (auto it = v.begin(); it != v.end(); ++it) {
        if (!first) out += indent >= 0 ? "," : ", ";
        first = false;
        if (indent >= 0) newline(depth + 1);
        if (obj) {
          dump_string(it.key(), out);
          out += ": ";
        }
        dump(*it, indent, depth + 1, out);
      }
      if (indent >= 0) newline(depth);
      out += obj ? '}' : ']';
      return;
    }
    case ojson::value_t::string:
      dump_string(v.get_ref<const std::string&>(), out);
      return;
    case ojson::value_t::boolean:
      out += v.get<bool>() ? "true" : "false";
      return;
    case ojson::value_t::number_float:
      dump_float(v.get<double>(), out);
      return;
    case ojson::value_t::null:
      out += "null";
      return;
    default:
      out += v.dump();
      return;  // integers
  }
}

// ---- tool prompts (LLaMA-Factory's *_TOOL_PROMPT texts) ---------------------------------------

const char* const kDefaultPrompt =
    "You have access to the following tools:\n{tool_text}"
    "Use the following format if using a tool:\n```\n"
    "Action: tool name (one of [{tool_names}])\n"
    "Action Input: the input to the tool, in a JSON format representing the kwargs "
    "(e.g. ```{\"input\": \"hello world\", \"num_beams\": 5}```)\n```\n";
const char* const kGlm4Prompt =
    "你是一个名为 ChatGLM 的人工智能助手。你是基于智谱 AI 公司训练的语言模型 GLM-4 模型开发的，"
    "你的任务是针对用户的问题和要求提供适当的答复和支持。\n\n# 可用工具{tool_text}";
const char* const kGlm4MoePrompt =
    "\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>{tool_text}"
    "\n</tools>\n\nFor each function call, output the function name and arguments within the "
    "following XML format:\n<tool_call>{function-name}\n<arg_key>{arg-key-1}</arg_key>"
    "\n<arg_value>{arg-value-1}</arg_value>\n<arg_key>{arg-key-2}</arg_key>"
    "\n<arg_value>{arg-value-2}</arg_value>\n...\n</tool_call>\n";
const char* const kLlama3Prompt =
    "Cutting Knowledge Date: December 2023\nToday Date: {date}\n\n"
    "You have access to the following functions. To call a function, please respond with JSON for "
    "a function call. Respond in the format {\"name\": function name, \"parameters\": dictionary "
    "of argument name and its value}. Do not use variables.\n\n{tool_text}";
const char* const kQwenPromptBody =
    "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>{tool_text}"
    "\n</tools>\n\nFor each function call, return a json object with function name and arguments "
    "within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, "
    "\"arguments\": <args-json-object>}\n</tool_call>";
const char* const kQwen35Prompt =
    "\n\n# Tools\n\nYou have access to the following functions:\n\n<tools>{tool_text}"
    "\n</tools>\n\nIf you choose to call a function ONLY reply in the following format with NO "
    "suffix:\n\n<tool_call>\n<function=example_function_name>\n<parameter=example_parameter_1>\n"
    "value_1\n</parameter>\n<parameter=example_parameter_2>\nThis is the value for the second "
    "parameter\nthat can span\nmultiple lines\n</parameter>\n</function>\n</tool_call>\n\n"
    "<IMPORTANT>\nReminder:\n- Function calls MUST follow the specified format: an inner "
    "<function=...></function> block must be nested within <tool_call></tool_call> XML tags\n"
    "- Required parameters MUST be specified\n- You may provide optional reasoning for your "
    "function call in natural language BEFORE the function call, but NOT after\n- If there is no "
    "function call available, answer the question like normal with your current knowledge and do "
    "not tell the user about function calls\n</IMPORTANT>";
const char* const kSeedPrompt =
    "system\nYou are Doubao, a helpful AI assistant. You may call one or more functions to assist "
    "with the user query.Tool List:\nYou are authorized to use the following tools (described in "
    "JSON Schema format). Before performing any task, you must decide how to call them based on "
    "the descriptions and parameters of these tools.{tool_text}\n工具调用请遵循如下格式:\n"
    "<seed:tool_call>\n<function=example_function_name>\n<parameter=example_parameter_1>value_1"
    "</parameter>\n<parameter=example_parameter_2>This is the value for the second parameter\n"
    "that can span\nmultiple lines</parameter>\n</function>\n</seed:tool_call>\n";

// str.format on a prompt: each "{key}" of the prompt replaced in one pass (text put in is not
// searched again).
std::string fill(const std::string& prompt,
                 const std::vector<std::pair<std::string, std::string>>& values) {
  std::string out;
  for (size_t i = 0; i < prompt.size();) {
    bool hit = false;
    for (const auto& kv : values) {
      const std::string key = "{" + kv.first + "}";
      if (prompt.compare(i, key.size(), key) == 0) {
        out += kv.second;
        i += key.size();
        hit = true;
        break;
      }
    }
    if (!hit) out += prompt[i++];
  }
  return out;
}

const ojson& need(const ojson& obj, const char* key) {
  if (!obj.is_object() || !obj.contains(key))
    UNILLM_THROW(DataError, "[template] tool schema has no '", key, "': ", obj.dump());
  return obj[key];
}

std::string str_or_dump(const ojson& v) {
  return v.is_string() ? v.get<std::string>() : py_json_dumps(v);
}

std::string get_text(const ojson& obj, const char* key) {
  return obj.is_object() && obj.contains(key) ? str_or_dump(obj[key]) : "";
}

bool truthy(const ojson& obj, const char* key) {
  if (!obj.is_object() || !obj.contains(key)) return false;
  const ojson& v = obj[key];
  return !(v.is_null() || (v.is_boolean() && !v.get<bool>()) || (v.is_structured() && v.empty()) ||
           (v.is_string() && v.get_ref<const std::string&>().empty()));
}

// tool.get("function") of a {"type": "function"} wrapper, else the tool itself.
ojson unwrap(const ojson& tool) {
  if (tool.is_object() && tool.value("type", ojson()) == "function")
    return tool.value("function", ojson(""));
  return tool;
}
ojson wrap(const ojson& tool) {
  if (tool.is_object() && tool.value("type", ojson()) == "function") return tool;
  return ojson{{"type", "function"}, {"function", tool}};
}

std::string default_tools(const ojson& tools) {
  std::string tool_text, names;
  for (const ojson& raw : tools) {
    const ojson tool = unwrap(raw);
    const ojson& params = need(tool, "parameters");
    const ojson required = params.value("required", ojson::array());
    std::string param_text;
    for (auto it = need(params, "properties").begin(); it != params["properties"].end(); ++it) {
      const ojson& p = *it;
      std::string line = "  - " + it.key() + " (" + get_text(p, "type");
      if (std::find(required.begin(), required.end(), ojson(it.key())) != required.end())
        line += ", required";
      line += "): " + get_text(p, "description");
      if (truthy(p, "enum")) {
        std::string e;
        for (const ojson& x : p["enum"]) e += (e.empty() ? "" : ", ") + str_or_dump(x);
        line += ", should be one of [" + e + "]";
      }
      if (truthy(p, "items")) line += ", where each item should be " + get_text(p["items"], "type");
      param_text += line + "\n";
    }
    const std::string name = str_or_dump(need(tool, "name"));
    tool_text += "> Tool Name: " + name + "\nTool Description: " + get_text(tool, "description") +
                 "\nTool Args:\n" + param_text + "\n";
    names += (names.empty() ? "" : ", ") + name;
  }
  return fill(kDefaultPrompt, {{"tool_text", tool_text}, {"tool_names", names}});
}

std::string joined_tools(const ojson& tools, bool wrapped) {
  std::string text;
  for (const ojson& t : tools) text += "\n" + py_json_dumps(wrapped ? wrap(t) : unwrap(t));
  return text;
}

ojson parse_arguments(const FunctionCall& f) {
  try {
    return ojson::parse(f.arguments);
  } catch (const nlohmann::json::exception&) {
    UNILLM_THROW(DataError, "[template] function '", f.name,
                 "': arguments are not JSON: ", f.arguments);
  }
}

// The XML-like call layouts: open + name + after_name, then per argument kv_open + key + kv_mid +
// value (strings raw, other values as JSON) + kv_close, then close.
struct XmlStyle {
  const char *open, *after_name, *kv_open, *kv_mid, *kv_close, *close;
};
const XmlStyle kQwen35Xml = {"<tool_call>\n<function=", ">",
                             "\n<parameter=",           ">\n",
                             "\n</parameter>",          "\n</function>\n</tool_call>"};
const XmlStyle kGlm4MoeXml = {"\n<tool_call>", "", "\n<arg_key>", "</arg_key>\n<arg_value>",
                              "</arg_value>",  ""};
const XmlStyle kSeedXml = {
    "\n<seed:tool_call>\n<function=",  "", "\n<parameter=", ">", "</parameter>",
    "\n</function>\n</seed:tool_call>"};

std::string xml_call(const FunctionCall& f, const XmlStyle& x) {
  const ojson args = parse_arguments(f);
  if (!args.is_object())
    UNILLM_THROW(DataError, "[template] function '", f.name, "': arguments must be an object");
  std::string s = x.open + f.name + x.after_name;
  for (auto it = args.begin(); it != args.end(); ++it)
    s += x.kv_open + it.key() + x.kv_mid + str_or_dump(*it) + x.kv_close;
  return s + x.close;
}

}  // namespace

std::string py_json_dumps(const nlohmann::ordered_json& v, int indent) {
  std::string out;
  dump(v, indent, 0, out);
  return out;
}

const std::vector<std::string>& tool_format_names() {
  static const std::vector<std::string> names = {
      "default",  "gemma4",   "glm4",    "glm4_moe", "lfm2",    "ling",    "llama3",
      "minimax1", "minimax2", "mistral", "qwen",     "qwen3_5", "seed_oss"};
  return names;
}

bool is_known_tool_format(const std::string& f) {
  const auto& n = tool_format_names();
  return std::find(n.begin(), n.end(), f) != n.end();
}

void check_tool_format(const std::string& family, const std::string& what) {
  if (is_known_tool_format(family)) return;
  std::string known;
  for (const auto& n : tool_format_names()) known += (known.empty() ? "" : ", ") + n;
  UNILLM_THROW(ConfigError, "[template] ", what, ": unknown tool_format '", family,
               "'; known: ", known);
}

std::string format_tools(const std::string& f, const nlohmann::ordered_json& tools,
                         const std::string& date) {
  check_tool_format(f, "format_tools");
  if (!tools.is_array()) UNILLM_THROW(DataError, "[template] tools must be a JSON list");
  if (f == "default") return default_tools(tools);
  if (f == "gemma4") return detail::gemma4_tools(tools);
  if (f == "lfm2") return detail::lfm2_tools(tools);
  if (f == "minimax1" || f == "minimax2") return detail::minimax_tools(f == "minimax2", tools);
  if (f == "glm4") {
    std::string text;
    for (const ojson& raw : tools) {
      const ojson tool = unwrap(raw);
      text += "\n\n## " + str_or_dump(need(tool, "name")) + "\n\n" + py_json_dumps(tool, 4) +
              "\n在调用上述函数时，请使用 Json 格式表示调用的参数。";
    }
    return fill(kGlm4Prompt, {{"tool_text", text}});
  }
  if (f == "llama3") {
    std::string text;
    for (const ojson& t : tools) text += py_json_dumps(wrap(t), 4) + "\n\n";
    return fill(kLlama3Prompt, {{"date", date}, {"tool_text", text}});
  }
  if (f == "mistral") {
    ojson wrapped = ojson::array();
    for (const ojson& t : tools) wrapped.push_back(wrap(t));
    return "[AVAILABLE_TOOLS] " + py_json_dumps(wrapped) + "[/AVAILABLE_TOOLS]";
  }
  if (f == "qwen")
    return fill(std::string("\n\n") + kQwenPromptBody, {{"tool_text", joined_tools(tools, true)}});
  if (f == "ling")
    return fill(kQwenPromptBody, {{"tool_text", joined_tools(tools, true)}}) +
           "\ndetailed thinking off";
  if (f == "glm4_moe") return fill(kGlm4MoePrompt, {{"tool_text", joined_tools(tools, true)}});
  if (f == "qwen3_5") {  // tool.get("function", tool): a wrapper without "function" stays whole
    std::string text;
    for (const ojson& t : tools) {
      const bool w =
          t.is_object() && t.value("type", ojson()) == "function" && t.contains("function");
      text += "\n" + py_json_dumps(w ? t["function"] : t);
    }
    return fill(kQwen35Prompt, {{"tool_text", text}});
  }
  return fill(kSeedPrompt, {{"tool_text", "\n" + py_json_dumps(tools)}});  // seed_oss
}

std::string format_function_calls(const std::string& f, const std::vector<FunctionCall>& calls) {
  check_tool_format(f, "format_function_calls");
  if (f == "gemma4") return detail::gemma4_calls(calls);
  if (f == "lfm2") return detail::lfm2_calls(calls);
  if (f == "minimax1" || f == "minimax2") return detail::minimax_calls(f == "minimax2", calls);
  std::vector<std::string> parts;
  if (f == "default") {
    for (const auto& c : calls)
      parts.push_back("Action: " + c.name + "\nAction Input: " + c.arguments);
  } else if (f == "glm4") {
    if (calls.size() != 1)
      UNILLM_THROW(DataError, "[template] GLM-4 does not support parallel functions (",
                   calls.size(), " calls)");
    return calls[0].name + "\n" + calls[0].arguments;
  } else if (f == "llama3" || f == "mistral") {
    const char* key = f == "llama3" ? "parameters" : "arguments";
    ojson list = ojson::array();
    for (const auto& c : calls) list.push_back(ojson{{"name", c.name}, {key, parse_arguments(c)}});
    return py_json_dumps(f == "llama3" && list.size() == 1 ? list[0] : list);
  } else if (f == "qwen" || f == "ling") {
    for (const auto& c : calls)
      parts.push_back("<tool_call>\n" +
                      py_json_dumps(ojson{{"name", c.name}, {"arguments", parse_arguments(c)}}) +
                      "\n</tool_call>");
  } else if (f == "qwen3_5") {
    for (const auto& c : calls) parts.push_back(xml_call(c, kQwen35Xml));
  } else if (f == "glm4_moe") {
    for (const auto& c : calls) parts.push_back(xml_call(c, kGlm4MoeXml));
  } else {  // seed_oss
    for (const auto& c : calls) parts.push_back(xml_call(c, kSeedXml));
  }
  std::string out;
  for (size_t i = 0; i < parts.size(); ++i) out += (i ? "\n" : "") + parts[i];
  return out;
}

std::vector<FunctionCall> parse_function_message(const std::string& text,
                                                 const std::string& where) {
  ojson v;
  try {
    v = ojson::parse(text);
  } catch (const nlohmann::json::exception&) {
    UNILLM_THROW(DataError, "[template] ", where, ": invalid JSON in function message: ", text);
  }
  if (!v.is_array()) v = ojson::array({v});
  std::vector<FunctionCall> calls;
  for (const ojson& c : v) {
    if (!c.is_object() || !c.contains("name") || !c.contains("arguments") || !c["name"].is_string())
      UNILLM_THROW(DataError, "[template] ", where,
                   ": a function call needs a string 'name' and 'arguments': ", c.dump());
    calls.push_back({c["name"].get<std::string>(), py_json_dumps(c["arguments"])});
  }
  return calls;
}

}  // namespace unillm::data
