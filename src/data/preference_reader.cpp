// alpaca / sharegpt ranking records → PreferenceExamples (see preference_reader.h).
#include "data/preference_reader.h"

#include <functional>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "data/converter.h"
#include "data/num_samples.h"

namespace unillm::data {
using nlohmann::json;

namespace {

using Converter = std::function<void(const json&, PreferenceExample&)>;

// An alpaca chosen/rejected value: a non-empty string, an assistant turn.
Message alpaca_response(const json& obj, const std::string& key) {
  return {Role::kAssistant, response_text(obj, key)};
}

// LLaMA-Factory's AlpacaDatasetConverter, pairwise branch.
void convert_alpaca(const json& obj, const DatasetAttr& attr, PreferenceExample& ex) {
  const SftColumns& c = attr.columns;
  ex.prompt = alpaca_prompt(obj, c);
  ex.chosen = alpaca_response(obj, *c.chosen);
  ex.rejected = alpaca_response(obj, *c.rejected);
  if (c.system) ex.system = text_or_empty(obj, *c.system, false);
  check_no_tools(obj, c.tools);
}

// A sharegpt chosen/rejected value: one message object with the assistant (or function) tag and
// non-empty content.
Message sharegpt_response(const json& obj, const std::string& key, const SharegptTags& t) {
  const json* v = find_key(obj, key);
  const std::string where = "key " + quoted(key);
  if (!v) bad(where + " missing");
  if (v->is_null()) bad(where + " is null (no response to train on)");
  if (!v->is_object()) bad(where + " is not a message object (got " + v->type_name() + ")");
  auto [role, content] = sharegpt_message(*v, t, where);
  Message m{sharegpt_response_role(t, role, where), std::move(content)};
  if (m.content.empty()) bad(where + " is empty (no response)");
  return m;
}

// LLaMA-Factory's SharegptDatasetConverter, pairwise branch.
void convert_sharegpt(const json& obj, const DatasetAttr& attr, PreferenceExample& ex) {
  SharegptTurns turns = message_turns(obj, attr);
  const size_t n = turns.messages.size();
  if (n == 0) bad(attr.formatting + " prompt has no turns");
  if (n % 2 == 0)
    bad(attr.formatting + " prompt has " + std::to_string(n) + " turns" +
        (turns.had_system_message ? " after the system message" : "") +
        ", expected an odd number ending with a user turn");
  ex.prompt = std::move(turns.messages);
  ex.system = std::move(turns.system);
  openai_system_prompt(obj, attr, ex.system);
  ex.chosen = sharegpt_response(obj, *attr.columns.chosen, attr.tags);
  ex.rejected = sharegpt_response(obj, *attr.columns.rejected, attr.tags);
  check_no_tools(obj, attr.columns.tools);
}

// Both formattings: a pair with nothing to prefer is refused.
void check_distinct(const PreferenceExample& ex, const SftColumns& c) {
  if (ex.chosen.role == ex.rejected.role && ex.chosen.content == ex.rejected.content)
    bad("keys " + quoted(*c.chosen) + " and " + quoted(*c.rejected) +
        " are identical (nothing to prefer)");
}

}  // namespace

PreferenceSet read_preferences(const DatasetAttr& attr, const ReadOptions& opts) {
  if (attr.file_type != "json")
    UNILLM_THROW(ConfigError, "[data] dataset '", attr.name,
                 "': preference data is read from .json or .jsonl files");
  if (!attr.ranking)
    UNILLM_THROW(ConfigError, "[data] dataset '", attr.name,
                 "' is not a ranking dataset (ranking: true in dataset_info.json)");
  if (!attr.columns.chosen || !attr.columns.rejected)
    UNILLM_THROW(ConfigError, "[data] dataset '", attr.name,
                 "': a ranking dataset needs columns.chosen and columns.rejected");
  const Converter convert = converter_for<PreferenceExample>(attr, convert_alpaca, convert_sharegpt);
  PreferenceSet out;
  const ReadOptions all = read_all_rows_if_sampled(attr, opts);
  RecordLoop loop(all);
  std::vector<int64_t> item_rows;  // the row of each example read
  for (const auto& file : attr.files) {
    if (loop.full()) break;
    loop.read_file(file, [&](const json& obj, const std::string& source) {
      PreferenceExample ex;
      ex.source = source;
      convert(obj, ex);
      check_distinct(ex, attr.columns);
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
