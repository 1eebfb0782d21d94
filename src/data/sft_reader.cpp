// alpaca / sharegpt / PaddleNLP src-tgt records → Conversations (see sft_reader.h).
#include "data/sft_reader.h"

#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "data/error.h"
#include "data/json_records.h"
#include "io/json_file.h"

namespace unillm::data {
using nlohmann::json;

namespace {

constexpr size_t kMaxSkipMessages = 5;

// Thrown by the converters for a bad record; the reader adds file and line.
struct BadRecord {
  std::string what;
};

[[noreturn]] void bad(std::string what) { throw BadRecord{std::move(what)}; }

std::string quoted(const std::string& s) { return "'" + s + "'"; }

// obj[key] or nullptr when absent.
const json* find(const json& obj, const std::string& key) {
  auto it = obj.find(key);
  return it == obj.end() ? nullptr : &*it;
}

// A text value: a string, or null / absent ("" then) unless required.
std::string text_or_empty(const json& obj, const std::string& key, bool required) {
  const json* v = find(obj, key);
  if (!v) {
    if (required) bad("key " + quoted(key) + " missing");
    return "";
  }
  if (v->is_null()) return "";
  if (!v->is_string()) bad("key " + quoted(key) + " is not a string (got " + v->type_name() + ")");
  return v->get<std::string>();
}

// The response text: present, a string, non-empty.
std::string response_text(const json& obj, const std::string& key) {
  const json* v = find(obj, key);
  if (!v) bad("key " + quoted(key) + " missing");
  if (v->is_null()) bad("key " + quoted(key) + " is null (no response to train on)");
  if (!v->is_string()) bad("key " + quoted(key) + " is not a string (got " + v->type_name() + ")");
  if (v->get_ref<const std::string&>().empty())
    bad("key " + quoted(key) + " is empty (no response)");
  return v->get<std::string>();
}

// Tool definitions are not rendered yet: only an absent/null/empty tools value is accepted.
void check_no_tools(const json& obj, const std::optional<std::string>& key) {
  if (!key) return;
  const json* v = find(obj, *key);
  if (!v || v->is_null() || (v->is_string() && v->get_ref<const std::string&>().empty()) ||
      ((v->is_array() || v->is_object()) && v->empty()))
    return;
  bad("key " + quoted(*key) + " is non-empty: tool use is not implemented yet");
}

// LLaMA-Factory's AlpacaDatasetConverter.
void convert_alpaca(const json& obj, const DatasetAttr& attr, Conversation& conv) {
  const SftColumns& c = attr.columns;
  if (c.history) {
    const json* h = find(obj, *c.history);
    if (h && !h->is_null()) {
      if (!h->is_array())
        bad("key " + quoted(*c.history) + " is not a list (got " + h->type_name() + ")");
      for (size_t i = 0; i < h->size(); ++i) {
        const json& pair = (*h)[i];
        if (!pair.is_array() || pair.size() != 2 || !pair[0].is_string() || !pair[1].is_string())
          bad("key " + quoted(*c.history) + " item " + std::to_string(i + 1) +
              " is not a [user, assistant] pair of strings");
        conv.messages.push_back({Role::kUser, pair[0].get<std::string>()});
        conv.messages.push_back({Role::kAssistant, pair[1].get<std::string>()});
      }
    }
  }
  std::string user;
  if (c.prompt) user = text_or_empty(obj, *c.prompt, /*required=*/true);
  if (c.query) {
    const std::string q = text_or_empty(obj, *c.query, false);
    if (!q.empty()) user = user.empty() ? q : user + "\n" + q;
  }
  conv.messages.push_back({Role::kUser, std::move(user)});
  conv.messages.push_back({Role::kAssistant, response_text(obj, *c.response)});
  if (c.system) conv.system = text_or_empty(obj, *c.system, false);
  check_no_tools(obj, c.tools);
}

bool tag_is(const std::optional<std::string>& tag, const std::string& role) {
  return tag && *tag == role;
}

// The Role of a sharegpt turn at position idx (0-based after the system message), or throws.
Role sharegpt_role(const SharegptTags& t, const std::string& role, size_t idx, size_t turn) {
  if (idx % 2 == 0) {
    if (tag_is(t.user_tag, role)) return Role::kUser;
    if (tag_is(t.observation_tag, role)) return Role::kObservation;
    bad("sharegpt turn " + std::to_string(turn) + " has role " + quoted(role) +
        ", expected a user turn");
  }
  if (tag_is(t.assistant_tag, role)) return Role::kAssistant;
  if (tag_is(t.function_tag, role)) return Role::kFunction;
  bad("sharegpt turn " + std::to_string(turn) + " has role " + quoted(role) +
      ", expected an assistant turn");
}

// One turn's (role, content) strings.
std::pair<std::string, std::string> sharegpt_turn(const json& m, const SharegptTags& t,
                                                  size_t turn) {
  const std::string where = "sharegpt turn " + std::to_string(turn);
  if (!m.is_object()) bad(where + " is not an object (got " + std::string(m.type_name()) + ")");
  auto field = [&](const std::string& key) {
    const json* v = find(m, key);
    if (!v) bad(where + ": key " + quoted(key) + " missing");
    if (!v->is_string())
      bad(where + ": key " + quoted(key) + " is not a string (got " + v->type_name() + ")");
    return v->get<std::string>();
  };
  return {field(*t.role_tag), field(*t.content_tag)};
}

// LLaMA-Factory's SharegptDatasetConverter (non-ranking), broken examples reported.
void convert_sharegpt(const json& obj, const DatasetAttr& attr, Conversation& conv) {
  const SftColumns& c = attr.columns;
  const SharegptTags& t = attr.tags;
  const json* msgs = find(obj, *c.messages);
  if (!msgs) bad("key " + quoted(*c.messages) + " missing");
  if (!msgs->is_array())
    bad("key " + quoted(*c.messages) + " is not a list (got " + msgs->type_name() + ")");
  size_t start = 0;
  if (t.system_tag && !msgs->empty()) {
    auto [role, content] = sharegpt_turn((*msgs)[0], t, 1);
    if (role == *t.system_tag) {
      conv.system = std::move(content);
      start = 1;
    }
  }
  if (start == 0 && c.system) conv.system = text_or_empty(obj, *c.system, false);
  for (size_t k = start; k < msgs->size(); ++k) {
    auto [role, content] = sharegpt_turn((*msgs)[k], t, k + 1);
    conv.messages.push_back({sharegpt_role(t, role, k - start, k + 1), std::move(content)});
  }
  const size_t n = conv.messages.size();
  if (n == 0) bad("sharegpt conversation has no turns");
  if (n % 2 != 0)
    bad("sharegpt conversation has " + std::to_string(n) + " turns" +
        (start ? " after the system message" : "") +
        ", expected an even number ending with an assistant turn");
  if (conv.messages.back().content.empty())
    bad("sharegpt turn " + std::to_string(msgs->size()) + " is empty (no response)");
  check_no_tools(obj, c.tools);
}

// src or tgt: a string or a non-empty list of strings.
std::vector<std::string> rounds_of(const json& obj, const char* key) {
  const json* v = find(obj, key);
  if (!v) bad(std::string("key '") + key + "' missing");
  std::vector<std::string> out;
  if (v->is_string()) {
    out.push_back(v->get<std::string>());
  } else if (v->is_array() && !v->empty()) {
    for (const json& s : *v) {
      if (!s.is_string()) bad(std::string("key '") + key + "' has a non-string item");
      out.push_back(s.get<std::string>());
    }
  } else {
    bad(std::string("key '") + key + "' is not a string or a non-empty list of strings (got " +
        (v->is_array() ? "an empty list" : v->type_name()) + ")");
  }
  return out;
}

// PaddleNLP's {src, tgt} (tokenize_rounds_example: rounds = zip(src, tgt), equal lengths).
void convert_src_tgt(const json& obj, Conversation& conv) {
  const std::vector<std::string> src = rounds_of(obj, "src");
  const std::vector<std::string> tgt = rounds_of(obj, "tgt");
  if (src.size() != tgt.size())
    bad("'src' has " + std::to_string(src.size()) + " rounds but 'tgt' has " +
        std::to_string(tgt.size()));
  for (size_t i = 0; i < src.size(); ++i) {
    if (tgt[i].empty())
      bad(tgt.size() == 1 ? std::string("key 'tgt' is empty")
                          : "key 'tgt' round " + std::to_string(i + 1) + " is empty");
    conv.messages.push_back({Role::kUser, src[i]});
    conv.messages.push_back({Role::kAssistant, tgt[i]});
  }
}

using Converter = std::function<void(const json&, Conversation&)>;

class Reader {
 public:
  Reader(const ReadOptions& opts, ConversationSet& out) : opts_(opts), out_(out) {}

  bool full() const { return opts_.max_samples && out_.rows >= *opts_.max_samples; }

  void bad_record(const std::string& file, int64_t line, const std::string& what) {
    std::string msg = UNILLM_MSG("[data] ", file, line > 0 ? " line " : "",
                                 line > 0 ? std::to_string(line) : std::string(), ": ", what);
    if (!opts_.skip_bad_records) throw DataError(msg);
    ++out_.skipped_records;
    if (out_.skip_messages.size() < kMaxSkipMessages) out_.skip_messages.push_back(msg);
  }

  void read_file(const std::string& file, const Converter& convert) {
    std::string bytes;
    try {
      bytes = io::read_file_bytes(file);
    } catch (const IoError&) {
      throw DataError(UNILLM_MSG("[data] ", file, ": cannot read file"));
    }
    const JsonRecords recs = split_json_records(bytes);
    for (const JsonRecord& r : recs.records) {
      if (full()) return;
      ++out_.rows;
      add(file, r, convert);
    }
    if (recs.error_line > 0 && !full()) {
      ++out_.rows;
      return bad_record(file, recs.error_line, "invalid JSON array: " + recs.error);
    }
    if (recs.records.empty() && recs.error_line == 0)
      bad_record(file, 0, "empty file (no records)");
  }

 private:
  void add(const std::string& file, const JsonRecord& r, const Converter& convert) {
    json obj = json::parse(r.text, nullptr, /*allow_exceptions=*/false);
    if (obj.is_discarded()) return bad_record(file, r.line, "invalid JSON");
    if (!obj.is_object())
      return bad_record(file, r.line,
                        std::string("expected a JSON object (got ") + obj.type_name() + ")");
    Conversation conv;
    conv.source = UNILLM_MSG(file, " line ", r.line);
    try {
      convert(obj, conv);
    } catch (const BadRecord& b) {
      return bad_record(file, r.line, b.what);
    }
    out_.conversations.push_back(std::move(conv));
  }

  const ReadOptions& opts_;
  ConversationSet& out_;
};

}  // namespace

ConversationSet read_conversations(const DatasetAttr& attr, const ReadOptions& opts) {
  if (attr.file_type != "json")
    UNILLM_THROW(ConfigError, "[data] dataset '", attr.name,
                 "': stage sft reads .json or .jsonl files");
  Converter convert;
  if (attr.formatting == "alpaca") {
    if (!attr.columns.response)
      UNILLM_THROW(ConfigError, "[data] dataset '", attr.name, "': no response column");
    convert = [&attr](const json& o, Conversation& c) { convert_alpaca(o, attr, c); };
  } else if (attr.formatting == "sharegpt") {
    if (!attr.columns.messages || !attr.tags.role_tag || !attr.tags.content_tag)
      UNILLM_THROW(ConfigError, "[data] dataset '", attr.name,
                   "': sharegpt needs a messages column, a role tag and a content tag");
    convert = [&attr](const json& o, Conversation& c) { convert_sharegpt(o, attr, c); };
  } else {
    UNILLM_THROW(NotImplemented, "[data] dataset '", attr.name, "': formatting '", attr.formatting,
                 "' is not implemented");
  }
  ConversationSet out;
  Reader reader(opts, out);
  for (const auto& file : attr.files) {
    if (reader.full()) break;
    reader.read_file(file, convert);
  }
  return out;
}

ConversationSet read_src_tgt_file(const std::string& file, const ReadOptions& opts) {
  ConversationSet out;
  Reader reader(opts, out);
  reader.read_file(file, convert_src_tgt);
  return out;
}

SrcTgtData read_src_tgt(const std::string& dir_or_file, const ReadOptions& opts) {
  namespace fs = std::filesystem;
  SrcTgtData out;
  if (fs::is_regular_file(dir_or_file)) {
    out.train = read_src_tgt_file(dir_or_file, opts);
    return out;
  }
  const std::string train = (fs::path(dir_or_file) / "train.json").string();
  const std::string dev = (fs::path(dir_or_file) / "dev.json").string();
  if (!fs::is_directory(dir_or_file) || !fs::is_regular_file(train))
    UNILLM_THROW(ConfigError, "[data] dataset_name_or_path '", dir_or_file,
                 "': expected a directory with train.json (and optionally dev.json), or a file");
  out.train = read_src_tgt_file(train, opts);
  if (fs::is_regular_file(dev)) {
    out.dev = read_src_tgt_file(dev, opts);
    out.has_dev = true;
  }
  return out;
}

}  // namespace unillm::data
