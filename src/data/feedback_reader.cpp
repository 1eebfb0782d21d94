// alpaca / sharegpt records with a kto_tag → FeedbackExamples (see feedback_reader.h).
#include "data/feedback_reader.h"

#include <functional>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "data/converter.h"
#include "data/num_samples.h"

namespace unillm::data {
using nlohmann::json;

namespace {

using Converter = std::function<void(const json&, FeedbackExample&)>;

// The kto_tag value: a JSON bool (LLaMA-Factory: isinstance(example[kto_tag], bool)).
bool kto_tag_of(const json& obj, const std::string& key) {
  const json* v = find_key(obj, key);
  const std::string where = "key " + quoted(key);
  if (!v) bad(where + " missing (the kto_tag: true or false)");
  if (!v->is_boolean())
    bad(where + " is not a bool (got " + v->type_name() + "), expected true or false");
  return v->get<bool>();
}

// LLaMA-Factory's AlpacaDatasetConverter, kto branch.
void convert_alpaca(const json& obj, const DatasetAttr& attr, FeedbackExample& ex) {
  const SftColumns& c = attr.columns;
  ex.prompt = alpaca_prompt(obj, c);
  ex.response = {Role::kAssistant, response_text(obj, *c.response)};
  if (c.system) ex.system = text_or_empty(obj, *c.system, false);
  ex.desirable = kto_tag_of(obj, *c.kto_tag);
  check_no_tools(obj, c.tools);
}

// LLaMA-Factory's SharegptDatasetConverter, kto branch: prompt = aligned[:-1], response =
// aligned[-1:] of a non-ranking (even-length) conversation.
void convert_sharegpt(const json& obj, const DatasetAttr& attr, FeedbackExample& ex) {
  SharegptTurns turns = message_turns(obj, attr);
  const size_t n = turns.messages.size();
  if (n == 0) bad(attr.formatting + " conversation has no turns");
  if (n % 2 != 0)
    bad(attr.formatting + " conversation has " + std::to_string(n) + " turns" +
        (turns.had_system_message ? " after the system message" : "") +
        ", expected an even number ending with an assistant turn");
  if (turns.messages.back().content.empty())
    bad(attr.formatting + " turn " + std::to_string(turns.list_size) + " is empty (no response)");
  ex.response = std::move(turns.messages.back());
  turns.messages.pop_back();
  ex.prompt = std::move(turns.messages);
  ex.system = std::move(turns.system);
  openai_system_prompt(obj, attr, ex.system);
  ex.desirable = kto_tag_of(obj, *attr.columns.kto_tag);
  check_no_tools(obj, attr.columns.tools);
}

}  // namespace

FeedbackSet read_feedback(const DatasetAttr& attr, const ReadOptions& opts) {
  if (attr.file_type != "json")
    UNILLM_THROW(ConfigError, "[data] dataset '", attr.name,
                 "': feedback data is read from .json or .jsonl files");
  if (attr.ranking)
    UNILLM_THROW(ConfigError, "[data] dataset '", attr.name,
                 "' is a ranking dataset: not applicable to stage kto");
  if (!attr.columns.kto_tag)
    UNILLM_THROW(ConfigError, "[data] dataset '", attr.name,
                 "': stage kto needs columns.kto_tag (a bool column)");
  if (attr.formatting == "alpaca" && !attr.columns.response)
    UNILLM_THROW(ConfigError, "[data] dataset '", attr.name, "': no response column");
  const Converter convert = converter_for<FeedbackExample>(attr, convert_alpaca, convert_sharegpt);
  FeedbackSet out;
  const ReadOptions all = read_all_rows_if_sampled(attr, opts);
  RecordLoop loop(all);
  std::vector<int64_t> item_rows;  // the row of each example read
  for (const auto& file : attr.files) {
    if (loop.full()) break;
    loop.read_file(file, [&](const json& obj, const std::string& source) {
      FeedbackExample ex;
      ex.source = source;
      convert(obj, ex);
      out.examples.push_back(std::move(ex));
      item_rows.push_back(loop.tally().rows - 1);
    });
  }
  out.rows = loop.tally().rows;
  apply_num_samples(attr, opts, out.examples, item_rows, out.rows);
  out.skipped_records = loop.tally().skipped_records;
  out.skip_messages = std::move(loop.tally().skip_messages);
  return out;
}

}  // namespace unillm::data
