// alpaca / sharegpt / PaddleNLP src-tgt records → Conversations (see sft_reader.h).
#include "data/sft_reader.h"

#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "data/converter.h"
#include "data/error.h"
#include "data/num_samples.h"

namespace unillm::data {
using nlohmann::json;

namespace {

// LLaMA-Factory's _tools: the tools column's JSON list of tool schemas ("" when the column is
// absent, null or empty). A list value is taken as that JSON (LLaMA-Factory expects the text).
std::string tools_text(const json& obj, const std::optional<std::string>& key) {
  if (!key) return "";
  const json* v = find_key(obj, *key);
  if (!v || v->is_null()) return "";
  std::string text;
  if (v->is_string())
    text = v->get<std::string>();
  else if (v->is_array())
    text = v->empty() ? "" : v->dump();
  else
    bad("key '" + *key + "' is not a string or a list of tool schemas (got " + v->type_name() +
        ")");
  if (text.empty()) return "";
  json parsed;
  try {
    parsed = json::parse(text);
  } catch (const json::exception&) {
    bad("key '" + *key + "' is not valid JSON");
  }
  if (!parsed.is_array()) bad("key '" + *key + "' is not a JSON list of tool schemas");
  return text;
}

// LLaMA-Factory's AlpacaDatasetConverter.
void convert_alpaca(const json& obj, const DatasetAttr& attr, Conversation& conv) {
  const SftColumns& c = attr.columns;
  conv.messages = alpaca_prompt(obj, c);
  conv.messages.push_back({Role::kAssistant, response_text(obj, *c.response)});
  if (c.system) conv.system = text_or_empty(obj, *c.system, false);
  conv.tools = tools_text(obj, c.tools);
}

// LLaMA-Factory's SharegptDatasetConverter (non-ranking), broken examples reported.
void convert_sharegpt(const json& obj, const DatasetAttr& attr, Conversation& conv) {
  SharegptTurns turns = message_turns(obj, attr);
  conv.system = std::move(turns.system);
  conv.messages = std::move(turns.messages);
  const size_t n = conv.messages.size();
  if (n == 0) bad(attr.formatting + " conversation has no turns");
  if (n % 2 != 0)
    bad(attr.formatting + " conversation has " + std::to_string(n) + " turns" +
        (turns.had_system_message ? " after the system message" : "") +
        ", expected an even number ending with an assistant turn");
  if (conv.messages.back().content.empty())
    bad(attr.formatting + " turn " + std::to_string(turns.list_size) + " is empty (no response)");
  conv.tools = tools_text(obj, attr.columns.tools);
  openai_system_prompt(obj, attr, conv.system);
}

// src or tgt: a string or a non-empty list of strings.
std::vector<std::string> rounds_of(const json& obj, const char* key) {
  const json* v = find_key(obj, key);
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

// Reads files record by record into out (rows and skips included).
class Reader {
 public:
  Reader(const ReadOptions& opts, ConversationSet& out) : loop_(opts), out_(out) {}

  bool full() const { return loop_.full(); }

  void read_file(const std::string& file, const Converter& convert) {
    loop_.read_file(file, [&](const json& obj, const std::string& source) {
      Conversation conv;
      conv.source = source;
      convert(obj, conv);
      out_.conversations.push_back(std::move(conv));
      item_rows.push_back(loop_.tally().rows - 1);
    });
    out_.rows = loop_.tally().rows;
    out_.skipped_records = loop_.tally().skipped_records;
    out_.skip_messages = loop_.tally().skip_messages;
  }

 std::vector<int64_t> item_rows;  // the row of each conversation read

 private:
  RecordLoop loop_;
  ConversationSet& out_;
};

}  // namespace

ConversationSet read_conversations(const DatasetAttr& attr, const ReadOptions& opts) {
  if (attr.file_type != "json")
    UNILLM_THROW(ConfigError, "[data] dataset '", attr.name,
                 "': stage sft reads .json or .jsonl files");
  if (attr.ranking)
    UNILLM_THROW(ConfigError, "[data] dataset '", attr.name,
                 "' is a ranking dataset: read it with read_preferences (stages rm, dpo)");
  Converter convert;
  if (attr.formatting == "alpaca") {
    if (!attr.columns.response)
      UNILLM_THROW(ConfigError, "[data] dataset '", attr.name, "': no response column");
    convert = [&attr](const json& o, Conversation& c) { convert_alpaca(o, attr, c); };
  } else if (attr.formatting == "sharegpt" || attr.formatting == "openai") {
    if (!attr.columns.messages || !attr.tags.role_tag || !attr.tags.content_tag)
      UNILLM_THROW(ConfigError, "[data] dataset '", attr.name, "': ", attr.formatting,
                   " needs a messages column, a role tag and a content tag");
    convert = [&attr](const json& o, Conversation& c) { convert_sharegpt(o, attr, c); };
  } else {
    UNILLM_THROW(NotImplemented, "[data] dataset '", attr.name, "': formatting '", attr.formatting,
                 "' is not implemented");
  }
  ConversationSet out;
  const ReadOptions all = read_all_rows_if_sampled(attr, opts);
  Reader reader(all, out);
  for (const auto& file : attr.files) {
    if (reader.full()) break;
    reader.read_file(file, convert);
  }
  apply_num_samples(attr, opts, out.conversations, reader.item_rows, out.rows);
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
