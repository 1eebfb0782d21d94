// LLaMA-Factory's OpenAIDatasetConverter (formatting: openai in dataset_info.json; see
// converter.h): the messages list of an OpenAI-style record aligned as its converter aligns it.
#include <nlohmann/json.hpp>

#include "data/converter.h"
#include "data/template_tools.h"  // py_json_dumps

namespace unillm::data {
using nlohmann::json;

namespace {

std::string where_of(size_t k) { return "openai message " + std::to_string(k + 1); }

// An assistant (or function) message's non-empty tool_calls as LLaMA-Factory writes them into the
// function turn: json.dumps([call["function"] for call in tool_calls], ensure_ascii=False).
std::optional<std::string> tool_calls_text(const json& m, size_t k) {
  const json* calls = find_key(m, "tool_calls");
  if (!calls || calls->is_null()) return std::nullopt;
  if (!calls->is_array()) bad(where_of(k) + ": key 'tool_calls' is not a list (got " + calls->type_name() + ")");
  if (calls->empty()) return std::nullopt;
  nlohmann::ordered_json functions = nlohmann::ordered_json::array();
  for (size_t i = 0; i < calls->size(); ++i) {
    const json* f = (*calls)[i].is_object() ? find_key((*calls)[i], "function") : nullptr;
    if (!f || !f->is_object())
      bad(where_of(k) + ": tool_calls item " + std::to_string(i + 1) + " has no 'function' object");
    // OpenAI's key order (name, arguments) first. nlohmann's json has already sorted any other
    // keys, and those of arguments given as an object (OpenAI's own format has a string): the
    // templates read only name and arguments, so only such an object's key order can differ
    // from LLaMA-Factory's text.
    nlohmann::ordered_json fn;
    for (const char* key : {"name", "arguments"})
      if (const json* v = find_key(*f, key)) fn[key] = nlohmann::ordered_json::parse(v->dump());
    for (const auto& [key, v] : f->items())
      if (key != "name" && key != "arguments") fn[key] = nlohmann::ordered_json::parse(v.dump());
    functions.push_back(std::move(fn));
  }
  return py_json_dumps(functions);
}

std::string content_of(const json& m, const SharegptTags& t, size_t k) {
  const json* v = find_key(m, *t.content_tag);
  if (!v) bad(where_of(k) + ": key " + data::quoted(*t.content_tag) + " missing");
  if (!v->is_string()) bad(where_of(k) + ": key " + data::quoted(*t.content_tag) + " is not a string (got " + v->type_name() + ")");
  return v->get<std::string>();
}

}  // namespace

SharegptTurns openai_turns(const json& obj, const DatasetAttr& attr) {
  const SftColumns& c = attr.columns;
  const SharegptTags& t = attr.tags;
  const json* msgs = find_key(obj, *c.messages);
  if (!msgs) bad("key " + data::quoted(*c.messages) + " missing");
  if (!msgs->is_array()) bad("key " + data::quoted(*c.messages) + " is not a list (got " + msgs->type_name() + ")");
  SharegptTurns out;
  out.list_size = msgs->size();
  size_t start = 0;
  if (t.system_tag && !msgs->empty()) {
    auto [role, content] = sharegpt_message((*msgs)[0], t, where_of(0));
    if (role == *t.system_tag) {
      out.system = std::move(content);
      out.had_system_message = true;
      start = 1;
    }
  }
  if (start == 0 && c.system) out.system = text_or_empty(obj, *c.system, false);
  // Consecutive tool results become one observation turn, joined as LLaMA-Factory joins them.
  std::vector<std::string> results;
  size_t last_result = 0;
  for (size_t k = start; k < msgs->size(); ++k) {
    const json& m = (*msgs)[k];
    if (!m.is_object()) bad(where_of(k) + " is not an object (got " + std::string(m.type_name()) + ")");
    const json* r = find_key(m, *t.role_tag);
    if (!r || !r->is_string()) bad(where_of(k) + ": key " + data::quoted(*t.role_tag) + (r ? " is not a string" : " missing"));
    std::string role = r->get<std::string>();
    std::string content;
    std::optional<std::string> calls;
    if (tag_is(t.assistant_tag, role) || tag_is(t.function_tag, role)) calls = tool_calls_text(m, k);
    if (calls) {
      if (!t.function_tag) bad(where_of(k) + " has tool_calls, but the dataset's tags name no function_tag");
      content = std::move(*calls);
      role = *t.function_tag;
    } else {
      content = content_of(m, t, k);
    }
    if (tag_is(t.observation_tag, role)) {
      results.push_back(std::move(content));
      last_result = k;
      continue;
    }
    if (!results.empty()) {
      std::string joined = results[0];
      for (size_t i = 1; i < results.size(); ++i) joined += "\n</tool_response>\n<tool_response>\n" + results[i];
      out.messages.push_back({Role::kObservation, std::move(joined)});
      results.clear();
    }
    Role mapped;
    if (tag_is(t.user_tag, role)) mapped = Role::kUser;
    else if (tag_is(t.assistant_tag, role)) mapped = Role::kAssistant;
    else if (tag_is(t.function_tag, role)) mapped = Role::kFunction;
    else if (tag_is(t.system_tag, role)) mapped = Role::kSystem;
    else bad(where_of(k) + " has role " + data::quoted(role) + ", which none of the dataset's tags names");
    out.messages.push_back({mapped, std::move(content)});
  }
  // LLaMA-Factory would drop tool results after the last turn without a word.
  if (!results.empty()) bad(where_of(last_result) + ": tool results after the last turn (nothing follows them)");
  for (size_t i = 0; i < out.messages.size(); ++i) {
    const Role r = out.messages[i].role;
    const bool ok = i % 2 == 0 ? (r == Role::kUser || r == Role::kObservation) : (r == Role::kAssistant || r == Role::kFunction);
    if (!ok)
      bad("openai turn " + std::to_string(i + 1) + " (after merging tool results) is " +
          (i % 2 == 0 ? "not a user or tool turn" : "not an assistant turn") + ": the roles must alternate");
  }
  return out;
}

SharegptTurns message_turns(const json& obj, const DatasetAttr& attr) {
  return attr.formatting == "openai" ? openai_turns(obj, attr) : sharegpt_turns(obj, attr);
}

void openai_system_prompt(const json& obj, const DatasetAttr& attr, std::string& system) {
  if (attr.formatting != "openai") return;
  bool tools = false;  // LLaMA-Factory tests the tools value's truth after json.dumps of a list
  if (attr.columns.tools) {
    const json* v = find_key(obj, *attr.columns.tools);
    tools = v && !v->is_null() && !(v->is_string() && v->get_ref<const std::string&>().empty());
  }
  constexpr const char* kOff = "detailed thinking off";
  if (system.empty()) {
    if (!tools) system = kOff;
  } else if (tools) {
    system += "\n";
  } else if (system.find("detailed thinking on") == std::string::npos && system.find(kOff) == std::string::npos) {
    system += std::string("\n") + kOff;
  }
}

}  // namespace unillm::data
