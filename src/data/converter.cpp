// The record loop and converter pieces shared by the LLaMA-Factory readers (see converter.h).
#include "data/converter.h"

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "data/error.h"
#include "data/json_records.h"
#include "io/json_file.h"

namespace unillm::data {
using nlohmann::json;

namespace {

constexpr size_t kMaxSkipMessages = 5;

// The Role of a sharegpt turn at position idx (0-based after the system message), or throws.
Role sharegpt_role(const SharegptTags& t, const std::string& role, size_t idx, size_t turn) {
  const std::string where = "sharegpt turn " + std::to_string(turn);
  if (idx % 2 == 1) return sharegpt_response_role(t, role, where);
  if (tag_is(t.user_tag, role)) return Role::kUser;
  if (tag_is(t.observation_tag, role)) return Role::kObservation;
  bad(where + " has role " + quoted(role) + ", expected a user turn");
}

}  // namespace

void bad(std::string what) { throw BadRecord{std::move(what)}; }

std::string quoted(const std::string& s) { return "'" + s + "'"; }

const json* find_key(const json& obj, const std::string& key) {
  auto it = obj.find(key);
  return it == obj.end() ? nullptr : &*it;
}

std::string text_or_empty(const json& obj, const std::string& key, bool required) {
  const json* v = find_key(obj, key);
  if (!v) {
    if (required) bad("key " + quoted(key) + " missing");
    return "";
  }
  if (v->is_null()) return "";
  if (!v->is_string()) bad("key " + quoted(key) + " is not a string (got " + v->type_name() + ")");
  return v->get<std::string>();
}

std::string response_text(const json& obj, const std::string& key) {
  const json* v = find_key(obj, key);
  if (!v) bad("key " + quoted(key) + " missing");
  if (v->is_null()) bad("key " + quoted(key) + " is null (no response to train on)");
  if (!v->is_string()) bad("key " + quoted(key) + " is not a string (got " + v->type_name() + ")");
  if (v->get_ref<const std::string&>().empty())
    bad("key " + quoted(key) + " is empty (no response)");
  return v->get<std::string>();
}

void check_no_tools(const json& obj, const std::optional<std::string>& key) {
  if (!key) return;
  const json* v = find_key(obj, *key);
  if (!v || v->is_null() || (v->is_string() && v->get_ref<const std::string&>().empty()) ||
      ((v->is_array() || v->is_object()) && v->empty()))
    return;
  bad("key " + quoted(*key) + " is non-empty: tool use is not implemented yet");
}

std::vector<Message> alpaca_prompt(const json& obj, const SftColumns& c) {
  std::vector<Message> out;
  if (c.history) {
    const json* h = find_key(obj, *c.history);
    if (h && !h->is_null()) {
      if (!h->is_array())
        bad("key " + quoted(*c.history) + " is not a list (got " + h->type_name() + ")");
      for (size_t i = 0; i < h->size(); ++i) {
        const json& pair = (*h)[i];
        if (!pair.is_array() || pair.size() != 2 || !pair[0].is_string() || !pair[1].is_string())
          bad("key " + quoted(*c.history) + " item " + std::to_string(i + 1) +
              " is not a [user, assistant] pair of strings");
        out.push_back({Role::kUser, pair[0].get<std::string>()});
        out.push_back({Role::kAssistant, pair[1].get<std::string>()});
      }
    }
  }
  std::string user;
  if (c.prompt) user = text_or_empty(obj, *c.prompt, /*required=*/true);
  if (c.query) {
    const std::string q = text_or_empty(obj, *c.query, false);
    if (!q.empty()) user = user.empty() ? q : user + "\n" + q;
  }
  out.push_back({Role::kUser, std::move(user)});
  return out;
}

std::pair<std::string, std::string> sharegpt_message(const json& m, const SharegptTags& t,
                                                     const std::string& where) {
  if (!m.is_object()) bad(where + " is not an object (got " + std::string(m.type_name()) + ")");
  auto field = [&](const std::string& key) {
    const json* v = find_key(m, key);
    if (!v) bad(where + ": key " + quoted(key) + " missing");
    if (!v->is_string())
      bad(where + ": key " + quoted(key) + " is not a string (got " + v->type_name() + ")");
    return v->get<std::string>();
  };
  return {field(*t.role_tag), field(*t.content_tag)};
}

Role sharegpt_response_role(const SharegptTags& t, const std::string& role,
                            const std::string& where) {
  if (tag_is(t.assistant_tag, role)) return Role::kAssistant;
  if (tag_is(t.function_tag, role)) return Role::kFunction;
  bad(where + " has role " + quoted(role) + ", expected an assistant turn");
}

SharegptTurns sharegpt_turns(const json& obj, const DatasetAttr& attr) {
  const SftColumns& c = attr.columns;
  const SharegptTags& t = attr.tags;
  const json* msgs = find_key(obj, *c.messages);
  if (!msgs) bad("key " + quoted(*c.messages) + " missing");
  if (!msgs->is_array())
    bad("key " + quoted(*c.messages) + " is not a list (got " + msgs->type_name() + ")");
  SharegptTurns out;
  out.list_size = msgs->size();
  size_t start = 0;
  if (t.system_tag && !msgs->empty()) {
    auto [role, content] = sharegpt_message((*msgs)[0], t, "sharegpt turn 1");
    if (role == *t.system_tag) {
      out.system = std::move(content);
      out.had_system_message = true;
      start = 1;
    }
  }
  if (start == 0 && c.system) out.system = text_or_empty(obj, *c.system, false);
  for (size_t k = start; k < msgs->size(); ++k) {
    auto [role, content] =
        sharegpt_message((*msgs)[k], t, "sharegpt turn " + std::to_string(k + 1));
    out.messages.push_back({sharegpt_role(t, role, k - start, k + 1), std::move(content)});
  }
  return out;
}

void RecordLoop::bad_record(const std::string& file, int64_t line, const std::string& what) {
  std::string msg = UNILLM_MSG("[data] ", file, line > 0 ? " line " : "",
                               line > 0 ? std::to_string(line) : std::string(), ": ", what);
  if (!opts_.skip_bad_records) throw DataError(msg);
  ++tally_.skipped_records;
  if (tally_.skip_messages.size() < kMaxSkipMessages) tally_.skip_messages.push_back(msg);
}

void RecordLoop::read_file(const std::string& file, const Visit& visit) {
  std::string bytes;
  try {
    bytes = io::read_file_bytes(file);
  } catch (const IoError&) {
    throw DataError(UNILLM_MSG("[data] ", file, ": cannot read file"));
  }
  const JsonRecords recs = split_json_records(bytes);
  for (const JsonRecord& r : recs.records) {
    if (full()) return;
    ++tally_.rows;
    add(file, r.text, r.line, visit);
  }
  if (recs.error_line > 0 && !full()) {
    ++tally_.rows;
    return bad_record(file, recs.error_line, "invalid JSON array: " + recs.error);
  }
  if (recs.records.empty() && recs.error_line == 0) bad_record(file, 0, "empty file (no records)");
}

void RecordLoop::add(const std::string& file, std::string_view text, int64_t line,
                     const Visit& visit) {
  json obj = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (obj.is_discarded()) return bad_record(file, line, "invalid JSON");
  if (!obj.is_object())
    return bad_record(file, line,
                      std::string("expected a JSON object (got ") + obj.type_name() + ")");
  try {
    visit(obj, UNILLM_MSG(file, " line ", line));
  } catch (const BadRecord& b) {
    return bad_record(file, line, b.what);
  }
}

}  // namespace unillm::data
