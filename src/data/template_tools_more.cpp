// Tool prompts and call texts of LLaMA-Factory's gemma4, lfm2, minimax1 and minimax2 tool formats
// (tool_utils.py's Gemma4/LFM2/MiniMaxM1/MiniMaxM2ToolUtils), split from template_tools.cpp
// because gemma4 writes Python str() values, not JSON, and needs its own printer.
#include <algorithm>

#include "core/error.h"
#include "data/error.h"
#include "data/template_tools_internal.h"

namespace unillm::data::detail {
namespace {

using ojson = nlohmann::ordered_json;

// Python's repr of a str: single quotes unless the text has ' and no ". Non-ASCII bytes are kept
// as they are (Python escapes the few non-printable code points above U+007F; not mirrored).
std::string py_repr_string(const std::string& s) {
  const bool dq = s.find('\'') != std::string::npos && s.find('"') == std::string::npos;
  const char q = dq ? '"' : '\'';
  std::string out(1, q);
  for (unsigned char c : s) {
    if (c == '\\' || c == static_cast<unsigned char>(q)) {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c == 0x7f) {
      const char* hex = "0123456789abcdef";
      out += "\\x";
      out += hex[c >> 4];
      out += hex[c & 15];
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + q;
}

std::string py_repr(const ojson& v);

// Python's str(v) for a JSON-loaded value: strings as they are, containers as their repr.
std::string py_str(const ojson& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_boolean()) return v.get<bool>() ? "True" : "False";
  if (v.is_null()) return "None";
  if (v.is_number()) return py_json_dumps(v);  // ints as digits, floats as repr
  std::string out = v.is_object() ? "{" : "[";
  bool first = true;
  for (auto it = v.begin(); it != v.end(); ++it) {
    if (!first) out += ", ";
    first = false;
    if (v.is_object()) out += py_repr_string(it.key()) + ": ";
    out += py_repr(*it);
  }
  return out + (v.is_object() ? "}" : "]");
}

std::string py_repr(const ojson& v) {
  return v.is_string() ? py_repr_string(v.get<std::string>()) : py_str(v);
}

// Python truthiness: null, false, 0, 0.0, "", [] and {} are false.
bool py_truthy(const ojson& v) {
  if (v.is_null()) return false;
  if (v.is_boolean()) return v.get<bool>();
  if (v.is_number()) return v.get<double>() != 0.0;
  if (v.is_string()) return !v.get_ref<const std::string&>().empty();
  return !v.empty();
}

// d.get(key) of a Python dict; DataError when d is not one (Python: AttributeError).
ojson get(const ojson& d, const char* key, const std::string& what) {
  if (!d.is_object())
    UNILLM_THROW(DataError, "[template] ", what, " must be a JSON object: ", d.dump());
  return d.contains(key) ? d[key] : ojson();
}

std::string upper(std::string s) {  // str.upper(), ASCII letters only
  for (char& c : s)
    if (c >= 'a' && c <= 'z') c = static_cast<char>(c - 'a' + 'A');
  return s;
}

std::string quoted(const std::string& s) { return "<|\"|>" + s + "<|\"|>"; }

// tool.get("function", <fallback>) if tool.get("type") == "function" else tool.
ojson unwrap(const ojson& tool, bool keep_whole) {
  if (get(tool, "type", "a tool") == "function")
    return tool.contains("function") ? tool["function"] : (keep_whole ? tool : ojson(""));
  return tool;
}

std::string join(const std::vector<std::string>& parts, const std::string& sep) {
  std::string out;
  for (size_t i = 0; i < parts.size(); ++i) out += (i ? sep : "") + parts[i];
  return out;
}

std::string gemma4_properties(const ojson& props) {
  std::vector<std::string> parts;
  if (!props.is_object()) UNILLM_THROW(DataError, "[template] tool 'properties' must be an object");
  for (auto it = props.begin(); it != props.end(); ++it) {
    std::vector<std::string> item;
    const ojson desc = get(*it, "description", "property '" + it.key() + "'");
    if (py_truthy(desc)) item.push_back("description:" + quoted(py_str(desc)));
    const ojson type = get(*it, "type", "property '" + it.key() + "'");
    if (py_truthy(type)) item.push_back("type:" + quoted(upper(py_str(type))));
    parts.push_back(it.key() + ":{" + join(item, ",") + "}");
  }
  return join(parts, ",");
}

std::string gemma4_declaration(const ojson& tool) {
  const ojson f = unwrap(tool, true);
  const ojson name = get(f, "name", "a tool's function");
  if (name.is_null() && !f.contains("name"))
    UNILLM_THROW(DataError, "[template] tool schema has no 'name': ", f.dump());
  const ojson desc = f.contains("description") ? f["description"] : ojson("");
  std::string d = "declaration:" + py_str(name) + "{description:" + quoted(py_str(desc));
  const ojson params = f.contains("parameters") ? f["parameters"] : ojson();
  if (py_truthy(params)) {
    std::vector<std::string> parts;
    const ojson props = get(params, "properties", "a tool's parameters");
    if (py_truthy(props)) parts.push_back("properties:{" + gemma4_properties(props) + "}");
    const ojson req = params.value("required", ojson());
    if (py_truthy(req)) {
      std::vector<std::string> names;
      for (const ojson& r : req) names.push_back(quoted(py_str(r)));
      parts.push_back("required:[" + join(names, ",") + "]");
    }
    const ojson type = params.value("type", ojson());
    if (py_truthy(type)) parts.push_back("type:" + quoted(upper(py_str(type))));
    d += ",parameters:{" + join(parts, ",") + "}";
  }
  const ojson resp = f.contains("response") ? f["response"] : ojson();
  if (py_truthy(resp)) {
    std::vector<std::string> parts;
    const ojson rd = get(resp, "description", "a tool's response");
    if (py_truthy(rd)) parts.push_back("description:" + quoted(py_str(rd)));
    const std::string rt = upper(py_str(resp.value("type", ojson(""))));
    if (rt == "OBJECT") parts.push_back("type:" + quoted(rt));
    d += ",response:{" + join(parts, ",") + "}";
  }
  return d + "}";
}

// Gemma4's _format_argument(escape_keys=False): strings in <|"|> quotes, dict keys sorted.
std::string gemma4_value(const ojson& v) {
  if (v.is_string()) return quoted(v.get<std::string>());
  if (v.is_boolean()) return v.get<bool>() ? "true" : "false";
  if (v.is_null()) return "null";
  if (v.is_number()) return py_json_dumps(v);
  std::vector<std::string> parts;
  if (v.is_array()) {
    for (const ojson& x : v) parts.push_back(gemma4_value(x));
    return "[" + join(parts, ",") + "]";
  }
  std::vector<std::string> keys;
  for (auto it = v.begin(); it != v.end(); ++it) keys.push_back(it.key());
  std::sort(keys.begin(), keys.end());  // UTF-8 byte order = Python's code point order
  for (const auto& k : keys) parts.push_back(k + ":" + gemma4_value(v[k]));
  return "{" + join(parts, ",") + "}";
}

ojson json_arguments(const FunctionCall& c) {
  try {
    return ojson::parse(c.arguments);
  } catch (const nlohmann::json::exception&) {
    UNILLM_THROW(DataError, "[template] function '", c.name,
                 "': arguments are not JSON: ", c.arguments);
  }
}

ojson object_arguments(const FunctionCall& c) {
  const ojson args = json_arguments(c);
  if (!args.is_object())
    UNILLM_THROW(DataError, "[template] function '", c.name, "': arguments must be an object");
  return args;
}

std::string str_or_dump(const ojson& v) {
  return v.is_string() ? v.get<std::string>() : py_json_dumps(v);
}

}  // namespace

std::string gemma4_tools(const nlohmann::ordered_json& tools) {
  std::vector<std::string> decls;
  for (const ojson& t : tools) decls.push_back(gemma4_declaration(t));
  return join(decls, "\n");
}

std::string gemma4_calls(const std::vector<FunctionCall>& calls) {
  std::string out;
  for (const auto& c : calls) {
    ojson args;
    bool parsed = true;
    try {
      args = ojson::parse(c.arguments);
    } catch (const nlohmann::json::exception&) {
      parsed = false;  // LLaMA-Factory writes text that is not JSON as it is
    }
    out += "<|tool_call>call:" + c.name + "{";
    if (!parsed) {
      out += c.arguments;
    } else if (args.is_object()) {
      out += gemma4_value(args).substr(1, std::string::npos);
      out.pop_back();  // the braces of the object are the call's own
    } else {
      out += args.is_string() ? args.get<std::string>() : gemma4_value(args);
    }
    out += "}<tool_call|>";
  }
  return out;
}

std::string lfm2_tools(const nlohmann::ordered_json& tools) {
  ojson list = ojson::array();
  for (const ojson& t : tools) list.push_back(unwrap(t, true));
  return "List of tools: <|tool_list_start|>" + py_json_dumps(list) + "<|tool_list_end|>";
}

std::string lfm2_calls(const std::vector<FunctionCall>& calls) {
  std::vector<std::string> texts;
  for (const auto& c : calls) {
    const ojson args = object_arguments(c);
    std::vector<std::string> kw;
    for (auto it = args.begin(); it != args.end(); ++it)  // strings unescaped, as LLaMA-Factory
      kw.push_back(it.key() + "=" +
                   (it->is_string() ? "\"" + it->get<std::string>() + "\"" : py_json_dumps(*it)));
    texts.push_back(c.name + "(" + join(kw, ", ") + ")");
  }
  return "<|tool_call_start|>[" + join(texts, ", ") + "]<|tool_call_end|>";
}

std::string minimax_tools(bool m2, const nlohmann::ordered_json& tools) {
  std::string text;
  for (const ojson& t : tools) {
    const std::string one = py_json_dumps(unwrap(t, false));
    text += m2 ? "<tool>" + one + "</tool>\n" : one + "\n";
  }
  if (!m2)
    return "You are provided with these tools:\n<tools>\n" + text +
           "</tools>\n\nIf you need to call tools, please respond with <tool_calls></tool_calls> "
           "XML "
           "tags, and provide tool-name and json-object of arguments, following the format "
           "below:\n<tool_calls>\n{\"name\": <tool-name-1>, \"arguments\": <args-json-object-1>}\n"
           "...\n</tool_calls>";
  return "\n\n# Tools\n\nYou may call one or more tools to assist with the user query.\nHere are "
         "the tools available in JSONSchema format:\n\n<tools>\n" +
         text +
         "</tools>\n\nWhen making tool calls, use XML format to invoke tools and pass "
         "parameters:\n\n<minimax:tool_call>\n<invoke name=\"tool-name-1\">\n<parameter "
         "name=\"param-key-1\">param-value-1</parameter>\n<parameter "
         "name=\"param-key-2\">param-value-2</parameter>\n...\n</invoke>\n</minimax:tool_call>";
}

std::string minimax_calls(bool m2, const std::vector<FunctionCall>& calls) {
  std::vector<std::string> texts;
  for (const auto& c : calls) {
    if (!m2) {
      texts.push_back(py_json_dumps(ojson{{"name", c.name}, {"arguments", json_arguments(c)}}));
      continue;
    }
    const ojson args = object_arguments(c);
    std::string s = "<invoke name=\"" + c.name + "\">";
    for (auto it = args.begin(); it != args.end(); ++it)
      s += "\n<parameter name=\"" + it.key() + "\">" + str_or_dump(*it) + "</parameter>";
    texts.push_back(s + "\n</invoke>");
  }
  return m2 ? join(texts, "\n") : "<tool_calls>\n" + join(texts, "\n") + "\n</tool_calls>";
}

}  // namespace unillm::data::detail
