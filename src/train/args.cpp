// Loading a training config: YAML file + key=value overrides, key-table dispatch (args.h).
#include "train/args.h"

#include <cmath>
#include <fstream>
#include <iterator>
#include <map>
#include <set>

#include "core/error.h"
#include "train/args_internal.h"
#include "train/key_table.h"

namespace unillm::train {

using detail::Field;

namespace {

std::string where_of(const std::string& source, const YAML::Node& n) {
  if (source == "command line") return source;
  return UNILLM_MSG(source, " line ", n.Mark().line + 1);
}

YAML::Node parse_yaml(const std::string& text, const std::string& source) {
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::ParserException& e) {
    UNILLM_THROW(ConfigError, "[config] ", source, " line ", e.mark.line + 1, ", column ",
                 e.mark.column + 1, ": YAML syntax error: ", e.msg);
  }
  if (root.IsNull()) return YAML::Node(YAML::NodeType::Map);
  if (!root.IsMap())
    UNILLM_THROW(ConfigError, "[config] ", source, ": expected a mapping of `key: value` lines");
  return root;
}

YAML::Node parse_override_value(const std::string& v) {
  if (v.empty()) return YAML::Node(YAML::NodeType::Null);
  try {
    return YAML::Load(v);
  } catch (const YAML::Exception&) {
    return YAML::Node(v);  // not YAML: take the text as a string
  }
}

// Collects (key → field) from the file, then lets overrides replace or extend entries.
std::map<std::string, Field> collect_fields(const YAML::Node& root, const std::string& source,
                                            const std::vector<std::string>& overrides) {
  std::map<std::string, Field> fields;
  for (const auto& kv : root) {
    if (!kv.first.IsScalar())
      UNILLM_THROW(ConfigError, "[config] ", where_of(source, kv.first),
                   ": keys must be plain names");
    std::string key = kv.first.as<std::string>();
    if (fields.count(key))
      UNILLM_THROW(ConfigError, "[config] ", where_of(source, kv.first), ": key '", key,
                   "' appears twice");
    fields[key] = Field{key, kv.second, where_of(source, kv.first)};
  }
  for (const auto& ov : overrides) {
    size_t eq = ov.find('=');
    std::string key = ov.substr(0, eq);
    if (eq == std::string::npos || key.empty())
      UNILLM_THROW(ConfigError, "[config] command line: expected key=value, got '", ov, "'");
    YAML::Node value = parse_override_value(ov.substr(eq + 1));
    size_t dot = key.find('.');
    if (dot != std::string::npos) {  // parent.child=value edits one entry of a mapping
      std::string parent = key.substr(0, dot), child = key.substr(dot + 1);
      YAML::Node map = fields.count(parent) && fields[parent].node.IsMap()
                           ? YAML::Clone(fields[parent].node)
                           : YAML::Node(YAML::NodeType::Map);
      map[child] = value;
      key = parent;
      value = map;
    }
    fields[key] = Field{key, value, "command line"};
  }
  return fields;
}

[[noreturn]] void unknown_key(const Field& f) {
  std::string near = nearest_key(f.key);
  if (near.empty()) UNILLM_THROW(ConfigError, "[config] ", f.where, ": unknown key '", f.key, "'");
  UNILLM_THROW(ConfigError, "[config] ", f.where, ": unknown key '", f.key, "' (did you mean '",
               near, "'?)");
}

}  // namespace

namespace detail {

TrainArgs apply_fields(const std::map<std::string, Field>& fields, const std::string& source,
                       const std::map<std::string, Field>& direct) {
  TrainArgs a;
  a.config_path = source;
  std::set<std::string> given;
  for (const auto& [key, f] : fields) {
    given.insert(key);
    const KeyInfo* info = find_key(key);
    if (!info) unknown_key(f);
    switch (info->status) {
      case KeyStatus::kImplemented:
        UNILLM_CHECK(detail::set_field(a, f), "no setter for implemented key ", key);
        break;
      case KeyStatus::kIgnored:
        if (!detail::is_off(f.node))
          a.warnings.push_back(UNILLM_MSG("[config] ", f.where, ": key '", key,
                                          "' is accepted and ignored by unillm"));
        break;
      case KeyStatus::kNotImplemented:
        if (!detail::is_off(f.node))
          UNILLM_THROW(NotImplemented, "[config] ", f.where, ": key '", key,
                       "' is not implemented yet");
        break;
    }
  }
  for (const auto& [key, f] : direct) {
    given.insert(key);
    UNILLM_CHECK(detail::set_field(a, f), "no setter for PaddleNLP key ", key);
  }
  detail::finish_args(a, source, given);
  return a;
}

}  // namespace detail

TrainArgs parse_train_args(const std::string& yaml_text, const std::string& source,
                           const std::vector<std::string>& overrides) {
  YAML::Node root = parse_yaml(yaml_text, source);
  return detail::apply_fields(collect_fields(root, source, overrides), source);
}

TrainArgs load_train_args(const std::string& path, const std::vector<std::string>& overrides) {
  std::ifstream in(path, std::ios::binary);
  if (!in) UNILLM_THROW(ConfigError, "[config] ", path, ": cannot open the file");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  // A .json file is a PaddleNLP argument file (llm/run_finetune.py), read through its key map.
  if (path.size() > 5 && path.compare(path.size() - 5, 5, ".json") == 0)
    return parse_paddle_args(text, path, overrides);
  return parse_train_args(text, path, overrides);
}

int64_t TrainArgs::data_cutoff_len() const {
  if (!dataset_name_or_path.empty()) return max_length;  // PaddleNLP: rows of max_length
  return packing && packing_given ? cutoff_len - 1 : cutoff_len;
}

int64_t resolve_interval(double steps, int64_t total_steps) {
  if (steps >= 1.0) return static_cast<int64_t>(steps);
  return static_cast<int64_t>(std::ceil(steps * static_cast<double>(total_steps)));
}

int64_t TrainArgs::num_warmup_steps(int64_t total_steps) const {
  if (warmup_steps > 0) return resolve_interval(warmup_steps, total_steps);
  return static_cast<int64_t>(std::ceil(warmup_ratio * static_cast<double>(total_steps)));
}

data::DataOptions data_options(const TrainArgs& a) {
  data::DataOptions o;
  o.dataset = a.dataset;
  o.eval_dataset = a.eval_dataset;
  o.dataset_dir = a.dataset_dir;
  o.cutoff_len = a.data_cutoff_len();
  o.packing = a.packing;
  o.max_samples = a.max_samples;
  o.val_size = a.val_size;
  o.seed = static_cast<uint64_t>(a.seed);
  o.template_name = a.template_name;
  o.preprocessing_batch_size = a.preprocessing_batch_size;
  o.skip_bad_records = a.skip_bad_records;
  o.input_dir = a.input_dir;
  o.split = a.split;
  return o;
}

data::SftOptions sft_options(const TrainArgs& a) {
  data::SftOptions o;
  o.data = data_options(a);
  o.train_on_prompt = a.train_on_prompt;
  o.mask_history = a.mask_history;
  o.neat_packing = a.neat_packing;
  o.dataset_name_or_path = a.dataset_name_or_path;
  o.src_length = a.src_length;
  o.max_length = a.max_length;
  o.zero_padding = a.zero_padding;
  return o;
}

}  // namespace unillm::train
