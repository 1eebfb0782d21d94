// Loading a training config: YAML file + key=value overrides, key-table dispatch (args.h).
#include "train/args.h"

#include <algorithm>
#include <climits>
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

// Collects (key → field) from the file, then lets overrides replace or extend entries. Malformed
// keys go into problems and are left out.
std::map<std::string, Field> collect_fields(const YAML::Node& root, const std::string& source,
                                            const std::vector<std::string>& overrides,
                                            detail::Problems& problems) {
  std::map<std::string, Field> fields;
  for (const auto& kv : root) {
    if (!kv.first.IsScalar()) {
      problems.add(UNILLM_MSG("[config] ", where_of(source, kv.first), ": keys must be plain names"), true);
      continue;
    }
    std::string key = kv.first.as<std::string>();
    if (fields.count(key)) {
      problems.add(UNILLM_MSG("[config] ", where_of(source, kv.first), ": key '", key,
                              "' appears twice (first at ", fields[key].where, ")"),
                   true);
      continue;
    }
    fields[key] = Field{key, kv.second, where_of(source, kv.first)};
  }
  for (const auto& ov : overrides) {
    size_t eq = ov.find('=');
    std::string key = ov.substr(0, eq);
    if (eq == std::string::npos || key.empty()) {
      problems.add(UNILLM_MSG("[config] command line: expected key=value, got '", ov, "'"), true);
      continue;
    }
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

// The line number in "cfg.yaml line 12" (command-line values sort after the file's lines).
int64_t line_of(const std::string& where) {
  const size_t at = where.rfind(" line ");
  if (at == std::string::npos) return INT64_MAX;
  try {
    return std::stoll(where.substr(at + 6));
  } catch (const std::exception&) {
    return INT64_MAX;
  }
}

[[noreturn]] void unknown_key(const Field& f) {
  std::string near = nearest_key(f.key);
  if (near.empty()) UNILLM_THROW(ConfigError, "[config] ", f.where, ": unknown key '", f.key, "'");
  UNILLM_THROW(ConfigError, "[config] ", f.where, ": unknown key '", f.key, "' (did you mean '",
               near, "'?)");
}

}  // namespace

namespace detail {

void Problems::add(std::string message, bool config_error) {
  any_config_error_ = any_config_error_ || config_error;
  messages_.push_back(std::move(message));
}

void Problems::raise_if_any(const std::string& source) const {
  if (messages_.empty()) return;
  if (messages_.size() == 1) {
    if (any_config_error_) throw ConfigError(messages_[0]);
    throw NotImplemented(messages_[0]);
  }
  std::string text = UNILLM_MSG("[config] ", source, ": ", messages_.size(), " problems");
  for (const auto& m : messages_) text += "\n  " + m;
  if (any_config_error_) throw ConfigError(text);
  throw NotImplemented(text);
}

// Keys are visited in the file's line order, so the listed problems read top to bottom.
TrainArgs apply_fields(const std::map<std::string, Field>& fields, const std::string& source,
                       const std::map<std::string, Field>& direct, Problems problems, ConfigUse use) {
  TrainArgs a;
  a.config_path = source;
  a.use = use;
  std::set<std::string> given;
  std::vector<const Field*> generating_given;  // by a train/export config
  std::vector<const Field*> ordered;
  for (const auto& kv : fields) ordered.push_back(&kv.second);
  std::stable_sort(ordered.begin(), ordered.end(), [](const Field* x, const Field* y) {
    return line_of(x->where) < line_of(y->where);
  });
  for (const Field* fp : ordered) {
    const Field& f = *fp;
    const std::string& key = f.key;
    given.insert(key);
    problems.attempt([&] {
      const KeyInfo* info = find_key(key);
      if (!info) unknown_key(f);
      // GeneratingArguments (and, for chat, infer_backend) go to TrainArgs::generating.
      if ((use == ConfigUse::kChat || info->source == "generating") && set_generating_field(a, f)) {
        if (use != ConfigUse::kChat) generating_given.push_back(&f);
        return;
      }
      switch (info->status) {
        case KeyStatus::kImplemented:
          UNILLM_CHECK(detail::set_field(a, f), "no setter for implemented key ", key);
          if (!used_by(use, *info) && !detail::is_off(f.node))
            a.warnings.push_back(UNILLM_MSG("[config] ", f.where, ": key '", key, "' is not used by `unillm ",
                                            config_use_name(use), "`; ignored"));
          break;
        case KeyStatus::kIgnored:
          if (!detail::is_off(f.node))
            a.warnings.push_back(UNILLM_MSG("[config] ", f.where, ": key '", key,
                                            "' is accepted and ignored by unillm"));
          break;
        case KeyStatus::kNotImplemented:
          if (!detail::is_off(f.node)) {
            const std::string_view why = not_implemented_reason(key);
            UNILLM_THROW(NotImplemented, "[config] ", f.where, ": key '", key, "' is not implemented yet",
                         why.empty() ? std::string() : " (" + std::string(why) + ")");
          }
          break;
      }
    });
  }
  for (const auto& kv : direct) {
    const Field& f = kv.second;
    given.insert(f.key);
    problems.attempt([&] { UNILLM_CHECK(detail::set_field(a, f), "no setter for PaddleNLP key ", f.key); });
  }
  detail::finish_args(a, source, given, problems);
  const bool generates = use == ConfigUse::kTrain && a.do_predict && a.predict_with_generate;
  for (const Field* f : generating_given)
    if (!generates && !detail::is_off(f->node))
      a.warnings.push_back(UNILLM_MSG("[config] ", f->where, ": key '", f->key,
                                      "' is a generation key (train's do_predict with predict_with_generate, "
                                      "chat, api); not used by this `unillm ", config_use_name(use), "`; ignored"));
  problems.raise_if_any(source);
  return a;
}

}  // namespace detail

TrainArgs parse_train_args(const std::string& yaml_text, const std::string& source,
                           const std::vector<std::string>& overrides, ConfigUse use) {
  YAML::Node root = parse_yaml(yaml_text, source);
  if (detail::is_v1_config(root)) return detail::parse_v1_args(root, source, overrides, use);
  detail::Problems problems;
  auto fields = collect_fields(root, source, overrides, problems);
  return detail::apply_fields(fields, source, {}, std::move(problems), use);
}

TrainArgs load_train_args(const std::string& path, const std::vector<std::string>& overrides,
                          ConfigUse use) {
  std::ifstream in(path, std::ios::binary);
  if (!in) UNILLM_THROW(ConfigError, "[config] ", path, ": cannot open the file");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  // A .json file is a PaddleNLP argument file (llm/run_finetune.py), read through its key map.
  if (path.size() > 5 && path.compare(path.size() - 5, 5, ".json") == 0) {
    if (use != ConfigUse::kTrain)
      UNILLM_THROW(ConfigError, "[config] ", path, ": PaddleNLP argument files (.json) configure training; `unillm ",
                   config_use_name(use), "` reads a LLaMA-Factory YAML file");
    return parse_paddle_args(text, path, overrides);
  }
  return parse_train_args(text, path, overrides, use);
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

data::TemplateOptions template_options(const TrainArgs& a, data::TemplateOptions o) {
  if (a.generating.enable_thinking) o.enable_thinking = *a.generating.enable_thinking;
  if (a.generating.default_system) o.default_system = *a.generating.default_system;
  if (a.tool_format) o.tool_format = *a.tool_format;
  o.preserve_thinking = a.preserve_thinking;
  return o;
}

data::DataOptions data_options(const TrainArgs& a) {
  data::DataOptions o;
  o.dataset = a.dataset;
  o.eval_dataset = a.eval_dataset;
  o.dataset_dir = a.dataset_dir;
  o.cutoff_len = a.data_cutoff_len();
  o.packing = a.packing;
  o.max_samples = a.max_samples;
  o.mix_strategy = a.mix_strategy;
  o.interleave_probs = a.interleave_probs;
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
