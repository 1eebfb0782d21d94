// Request bodies → ParsedRequest, with OpenAI's value ranges; every failure is an ApiError.
#include "serve/api.h"

#include <cmath>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "infer/json_schema.h"

namespace unillm::serve {

// Ordered: a json_schema's properties are generated in the order the client wrote them.
using json = nlohmann::ordered_json;

std::string error_body(const ApiError& e) {
  json err = {{"message", e.what()}, {"type", e.type}};
  err["param"] = e.param.empty() ? json(nullptr) : json(e.param);
  err["code"] = e.code.empty() ? json(nullptr) : json(e.code);
  return json{{"error", err}}.dump();
}

namespace {

[[noreturn]] void bad(const std::string& param, const std::string& what) {
  throw ApiError(400, "'" + param + "' " + what, param);
}

bool present(const json& j, const char* key) { return j.contains(key) && !j[key].is_null(); }

double number(const json& j, const char* key, double lo, double hi, double def) {
  if (!present(j, key)) return def;
  const json& v = j[key];
  if (!v.is_number()) bad(key, "must be a number");
  const double x = v.get<double>();
  if (!(x >= lo && x <= hi)) bad(key, "must be between " + json(lo).dump() + " and " + json(hi).dump());
  return x;
}

int64_t integer(const json& j, const char* key, int64_t lo, int64_t hi, int64_t def) {
  if (!present(j, key)) return def;
  const json& v = j[key];
  if (!v.is_number_integer()) bad(key, "must be an integer");
  // Unsigned values above INT64_MAX are out of range too.
  if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX))
    bad(key, "is out of range");
  const int64_t x = v.get<int64_t>();
  if (x < lo || x > hi) bad(key, "must be between " + std::to_string(lo) + " and " + std::to_string(hi));
  return x;
}

bool boolean(const json& j, const char* key, bool def) {
  if (!present(j, key)) return def;
  if (!j[key].is_boolean()) bad(key, "must be true or false");
  return j[key].get<bool>();
}

std::vector<int32_t> token_ids(const json& v, const char* key, int64_t vocab) {
  if (!v.is_array() || v.empty()) bad(key, "must be a non-empty list of token ids");
  std::vector<int32_t> out;
  for (const json& t : v) {
    if (!t.is_number_integer()) bad(key, "must hold integer token ids");
    const int64_t id = t.is_number_unsigned() && t.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX) ? -1 : t.get<int64_t>();
    if (id < 0 || (vocab > 0 && id >= vocab))
      bad(key, "holds token id " + t.dump() + ", outside the vocabulary (" + std::to_string(vocab) + ")");
    out.push_back(static_cast<int32_t>(id));
  }
  return out;
}

std::string message_text(const json& content, const std::string& param) {
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array()) bad(param, "must be a string or a list of text parts");
  std::string text;
  for (const json& part : content) {
    if (!part.is_object() || !part.contains("type") || part["type"] != "text" || !part.contains("text") ||
        !part["text"].is_string())
      bad(param, "parts must be {\"type\": \"text\", \"text\": ...} (no images or audio)");
    text += part["text"].get<std::string>();
  }
  return text;
}

// An assistant message's tool_calls as a function message's content: the JSON list of
// {"name", "arguments"}. OpenAI sends arguments as a JSON string; it is decoded back into the
// JSON value (the call as training data such as glaive_toolcall holds it) when it parses.
// LLaMA-Factory's api/chat.py keeps the string, so its template renders it quoted a second time.
std::string function_content(const json& calls, const std::string& p) {
  if (!calls.is_array()) bad(p, "must be a list of tool calls");
  json out = json::array();
  for (size_t k = 0; k < calls.size(); ++k) {
    const std::string q = p + "[" + std::to_string(k) + "]";
    const json& c = calls[k];
    if (!c.is_object()) bad(q, "must be an object");
    if (present(c, "type") && c["type"] != "function") bad(q + ".type", "must be \"function\"");
    if (present(c, "id") && !c["id"].is_string()) bad(q + ".id", "must be a string");
    if (!present(c, "function") || !c["function"].is_object())
      bad(q + ".function", "is required (an object with 'name' and 'arguments')");
    const json& f = c["function"];
    if (!present(f, "name") || !f["name"].is_string())
      bad(q + ".function.name", "must be a string");
    if (!present(f, "arguments") || !f["arguments"].is_string())
      bad(q + ".function.arguments", "must be a string (the arguments as JSON)");
    const std::string args = f["arguments"].get<std::string>();
    json value = json::parse(args, nullptr, /*allow_exceptions=*/false);
    if (value.is_discarded()) value = args;
    out.push_back({{"name", f["name"]}, {"arguments", value}});
  }
  return out.dump();
}

// Turns alternate user|tool and assistant (LLaMA-Factory's api: "u/a/u/a/u"), after an optional
// system message.
void parse_messages(const json& j, ParsedRequest& r) {
  if (!present(j, "messages")) bad("messages", "is required");
  const json& ms = j["messages"];
  if (!ms.is_array() || ms.empty()) bad("messages", "must be a non-empty list");
  for (size_t i = 0; i < ms.size(); ++i) {
    const std::string p = "messages[" + std::to_string(i) + "]";
    const json& m = ms[i];
    if (!m.is_object() || !m.contains("role") || !m["role"].is_string())
      bad(p, "must be an object with a 'role'");
    const std::string role = m["role"].get<std::string>();
    const bool calls = role == "assistant" && present(m, "tool_calls") &&
                       !(m["tool_calls"].is_array() && m["tool_calls"].empty());
    std::string text;
    if (calls) {
      text = function_content(m["tool_calls"], p + ".tool_calls");
    } else {
      if (!m.contains("content")) bad(p + ".content", "is required");
      text = message_text(m["content"], p + ".content");
    }
    if (role == "system" || role == "developer") {
      if (i != 0) bad(p, "a system message is only allowed first");
      r.system = text;
      continue;
    }
    if (role == "function")
      bad(p + ".role",
          "'function' (the legacy function-call API) is not supported: use 'tool' messages");
    const bool prompt_side = role == "user" || role == "tool";
    if (!prompt_side && role != "assistant")
      bad(p + ".role", "must be system, user, assistant or tool");
    if (role == "tool" && present(m, "tool_call_id") && !m["tool_call_id"].is_string())
      bad(p + ".tool_call_id", "must be a string");
    const bool want_prompt = r.messages.size() % 2 == 0;
    if (prompt_side != want_prompt)
      bad(p + ".role",
          want_prompt ? "must be user or tool: turns alternate, starting with user"
                      : "must be assistant: turns alternate (one tool result per assistant turn)");
    const data::Role dr = role == "user"   ? data::Role::kUser
                          : role == "tool" ? data::Role::kObservation
                          : calls          ? data::Role::kFunction
                                           : data::Role::kAssistant;
    r.messages.push_back({dr, text});
  }
  if (r.messages.empty() || r.messages.size() % 2 == 0)
    bad("messages", "must end with a user or tool message");
}

// `tools` as the template's tools JSON: the list of each tool's function, as
// {"name", "description", "parameters"} in that order (LLaMA-Factory's FunctionDefinition;
// other keys dropped). OpenAI lets description and parameters be left out; they become "" and
// an object schema without properties, which every tool format can render.
std::string parse_tools(const json& tools) {
  if (!tools.is_array())
    bad("tools", "must be a list of {\"type\": \"function\", \"function\": {...}}");
  json out = json::array();
  for (size_t k = 0; k < tools.size(); ++k) {
    const std::string q = "tools[" + std::to_string(k) + "]";
    const json& t = tools[k];
    if (!t.is_object()) bad(q, "must be an object");
    if (!present(t, "type") || t["type"] != "function")
      bad(q + ".type", "must be \"function\" (the only tool type supported)");
    if (!present(t, "function") || !t["function"].is_object())
      bad(q + ".function", "is required (an object with a 'name')");
    const json& f = t["function"];
    if (!present(f, "name") || !f["name"].is_string() || f["name"].get<std::string>().empty())
      bad(q + ".function.name", "must be a non-empty string");
    if (present(f, "description") && !f["description"].is_string())
      bad(q + ".function.description", "must be a string");
    if (present(f, "parameters") && !f["parameters"].is_object())
      bad(q + ".function.parameters", "must be a JSON Schema object");
    if (present(f, "strict") && !f["strict"].is_boolean())
      bad(q + ".function.strict", "must be true or false");
    json params = present(f, "parameters")
                      ? f["parameters"]
                      : json{{"type", "object"}, {"properties", json::object()}};
    if (params.contains("properties") && !params["properties"].is_object())
      bad(q + ".function.parameters.properties", "must be an object");
    out.push_back({{"name", f["name"]},
                   {"description", present(f, "description") ? f["description"] : json("")},
                   {"parameters", params}});
  }
  return out.empty() ? "" : out.dump();
}

// tool_choice: "auto" renders the tools, "none" leaves them out; "required" and a named function
// render them and force a call (r.force_tool_call / r.forced_tool). Returns whether the tools are
// rendered.
bool tool_choice(const json& j, const std::string& tools, ParsedRequest& r) {
  if (!present(j, "tool_choice")) return true;
  const json& c = j["tool_choice"];
  if (c == "auto") return true;
  if (c == "none") return false;
  const char* q = "tool_choice";
  if (c != "required" && !c.is_object())
    bad(q, "must be \"auto\", \"none\", \"required\" or "
           "{\"type\": \"function\", \"function\": {\"name\": ...}}");
  if (tools.empty()) bad(q, "forces a tool call, but the request has no 'tools'");
  r.force_tool_call = true;
  if (c.is_object()) {
    if (!present(c, "type") || c["type"] != "function")
      bad("tool_choice.type", "must be \"function\"");
    if (!present(c, "function") || !c["function"].is_object() || !present(c["function"], "name") ||
        !c["function"]["name"].is_string())
      bad("tool_choice.function.name", "must be a string");
    r.forced_tool = c["function"]["name"].get<std::string>();
    bool found = false;
    for (const json& t : json::parse(tools)) found = found || t["name"] == r.forced_tool;
    if (!found)
      bad("tool_choice.function.name", "names '" + r.forced_tool + "', which is not in 'tools'");
  }
  return true;
}

// {"type": "text" | "json_object" | "json_schema", "json_schema": {"name", "schema", "strict"}}.
std::shared_ptr<const infer::Grammar> response_format(const json& f) {
  const char* param = "response_format";
  if (!f.is_object() || !f.contains("type") || !f["type"].is_string())
    bad(param, "must be an object with a 'type'");
  const std::string type = f["type"].get<std::string>();
  if (type == "text") return nullptr;
  if (type == "json_object") return infer::json_object_grammar();
  if (type != "json_schema") bad(param, "has type '" + type + "'; expected text, json_object or json_schema");
  if (!present(f, "json_schema") || !f["json_schema"].is_object())
    bad("response_format.json_schema", "is required (an object with 'name' and 'schema') for type json_schema");
  const json& js = f["json_schema"];
  if (!present(js, "name") || !js["name"].is_string()) bad("response_format.json_schema.name", "must be a string");
  if (present(js, "strict") && !js["strict"].is_boolean()) bad("response_format.json_schema.strict", "must be true or false");
  const json schema = present(js, "schema") ? js["schema"] : json::object();  // absent: any JSON value
  if (!schema.is_object() && !schema.is_boolean()) bad("response_format.json_schema.schema", "must be a JSON Schema object");
  try {
    return infer::json_schema_grammar(schema);
  } catch (const ConfigError& e) {
    throw ApiError(400, std::string("'response_format.json_schema.schema': ") + e.what(), "response_format.json_schema.schema");
  }
}

}  // namespace

ParsedRequest parse_request(const std::string& body, Endpoint endpoint, const RequestLimits& lim) {
  const json j = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) throw ApiError(400, "the body is not valid JSON");
  if (!j.is_object()) throw ApiError(400, "the body must be a JSON object");
  ParsedRequest r;
  r.endpoint = endpoint;
  try {
    if (present(j, "model")) {
      if (!j["model"].is_string()) bad("model", "must be a string");
      r.model = j["model"].get<std::string>();
    }
    if (endpoint == Endpoint::completions) {
      if (!present(j, "prompt")) bad("prompt", "is required");
      const json& p = j["prompt"];
      if (p.is_string()) {
        r.prompt = p.get<std::string>();
      } else if (p.is_array() && p.size() == 1 && p[0].is_string()) {
        r.prompt = p[0].get<std::string>();
      } else if (p.is_array() && !p.empty() && p[0].is_number()) {
        r.prompt_ids = token_ids(p, "prompt", lim.vocab_size);
        r.prompt_is_ids = true;
      } else {
        bad("prompt", "must be a string or a list of token ids (one prompt per request)");
      }
      if (!r.prompt_is_ids && r.prompt.empty()) bad("prompt", "is empty");
      if (boolean(j, "echo", false)) bad("echo", "is not supported");
      if (present(j, "suffix")) bad("suffix", "is not supported");
      if (integer(j, "best_of", 1, 1, 1) != 1) bad("best_of", "is not supported");
      r.logprobs = static_cast<int>(integer(j, "logprobs", 0, 5, -1));
      r.max_tokens = integer(j, "max_tokens", 1, INT32_MAX, 16);  // OpenAI's completions default
    } else {
      parse_messages(j, r);
      const int64_t mt = integer(j, "max_tokens", 1, INT32_MAX, -1);
      r.max_tokens = integer(j, "max_completion_tokens", 1, INT32_MAX, mt);
      const bool lp = boolean(j, "logprobs", false);
      const int64_t top = integer(j, "top_logprobs", 0, 20, -1);
      if (top >= 0 && !lp) bad("top_logprobs", "needs 'logprobs': true");
      r.logprobs = lp ? static_cast<int>(std::max<int64_t>(top, 0)) : -1;
      if (present(j, "functions") || present(j, "function_call"))
        bad(present(j, "functions") ? "functions" : "function_call",
            "(the legacy function-call API) is not supported: use 'tools'");
      const std::string tools = present(j, "tools") ? parse_tools(j["tools"]) : "";
      if (tool_choice(j, tools, r)) r.tools = tools;
      if (present(j, "parallel_tool_calls") && !j["parallel_tool_calls"].is_boolean())
        bad("parallel_tool_calls", "must be true or false");
    }
    if (present(j, "logit_bias") && !(j["logit_bias"].is_object() && j["logit_bias"].empty()))
      bad("logit_bias", "is not supported");
    if (present(j, "response_format")) r.grammar = response_format(j["response_format"]);
    if (r.force_tool_call && r.grammar)
      bad("response_format", "cannot be combined with a forced tool call (tool_choice)");
    r.n = static_cast<int>(integer(j, "n", 1, lim.max_n, 1));
    r.sampling.temperature = static_cast<float>(number(j, "temperature", 0, 2, 1));
    r.sampling.top_p = static_cast<float>(number(j, "top_p", 1e-9, 1, 1));
    r.sampling.top_k = static_cast<int>(std::max<int64_t>(integer(j, "top_k", -1, INT32_MAX, 0), 0));
    r.sampling.min_p = static_cast<float>(number(j, "min_p", 0, 1, 0));
    r.sampling.repetition_penalty = static_cast<float>(number(j, "repetition_penalty", 1e-6, 100, 1));
    r.sampling.presence_penalty = static_cast<float>(number(j, "presence_penalty", -2, 2, 0));
    r.sampling.frequency_penalty = static_cast<float>(number(j, "frequency_penalty", -2, 2, 0));
    if (present(j, "seed")) {
      if (!j["seed"].is_number_integer()) bad("seed", "must be an integer");
      r.seed = j["seed"].is_number_unsigned() ? j["seed"].get<uint64_t>()
                                               : static_cast<uint64_t>(j["seed"].get<int64_t>());
    }
    if (present(j, "stop")) {
      const json& s = j["stop"];
      const json list = s.is_array() ? s : json::array({s});
      if (list.size() > 16) bad("stop", "may hold at most 16 strings");
      for (const json& v : list) {
        if (!v.is_string() || v.get<std::string>().empty()) bad("stop", "must be a non-empty string or a list of them");
        r.stop.push_back(v.get<std::string>());
      }
    }
    if (present(j, "stop_token_ids")) r.stop_token_ids = token_ids(j["stop_token_ids"], "stop_token_ids", lim.vocab_size);
    r.ignore_eos = boolean(j, "ignore_eos", false);
    r.stream = boolean(j, "stream", false);
    if (present(j, "stream_options")) {
      const json& so = j["stream_options"];
      if (!r.stream) bad("stream_options", "is only allowed with 'stream': true");
      if (!so.is_object()) bad("stream_options", "must be an object");
      r.include_usage = boolean(so, "include_usage", false);
    }
  } catch (const json::exception& e) {  // a type the checks above missed: still a 400
    throw ApiError(400, std::string("invalid request: ") + e.what());
  }
  return r;
}

}  // namespace unillm::serve
