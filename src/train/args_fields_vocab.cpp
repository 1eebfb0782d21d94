// Setters for the vocabulary keys (resize_vocab, add_tokens, add_special_tokens,
// new_special_tokens_config, init_special_tokens, split_special_tokens) and additional_target, as LLaMA-Factory's
// ModelArguments.__post_init__ / LoraArguments parse them.
#include <yaml-cpp/yaml.h>

#include <map>
#include <utility>

#include "core/error.h"
#include "train/args_internal.h"

namespace unillm::train::detail {

namespace {

// LLaMA-Factory: `token.strip() for token in value.split(",")`; a YAML list is taken as is.
std::vector<std::string> token_list(const Field& f) {
  std::vector<std::string> out;
  for (const std::string& t : get_list(f)) {
    if (t.empty()) bad_value(f, "comma-separated non-empty tokens");
    out.push_back(t);
  }
  return out;
}

// The {token: description} pairs of a new_special_tokens_config YAML file, in file order (the
// tokens become add_special_tokens; desc_init reads the descriptions).
std::vector<std::pair<std::string, std::string>> config_tokens(const Field& f,
                                                               const std::string& path) {
  YAML::Node n;
  try {
    n = YAML::LoadFile(path);
  } catch (const YAML::Exception& e) {
    UNILLM_THROW(ConfigError, "[config] ", f.where, ": new_special_tokens_config '", path,
                 "' cannot be read: ", e.what());
  }
  if (!n.IsMap() || n.size() == 0)
    UNILLM_THROW(ConfigError, "[config] ", f.where, ": new_special_tokens_config '", path,
                 "' must be a YAML mapping {token: description}");
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& kv : n) {
    const std::string t = kv.first.as<std::string>();
    if (t.empty())
      UNILLM_THROW(ConfigError, "[config] ", path, " line ", kv.first.Mark().line + 1,
                   ": empty token");
    // LLaMA-Factory tokenizes the value as text: a list, a mapping or null cannot be one.
    if (!kv.second.IsScalar())
      UNILLM_THROW(ConfigError, "[config] ", path, " line ", kv.first.Mark().line + 1,
                   ": the description of token '", t, "' must be text");
    out.emplace_back(t, kv.second.Scalar());
  }
  return out;
}

using Setter = void (*)(TrainArgs&, const Field&);

const std::map<std::string, Setter>& vocab_setters() {
  static const std::map<std::string, Setter> m = {
      {"resize_vocab", [](TrainArgs& a, const Field& f) { a.resize_vocab = get_bool(f); }},
      {"split_special_tokens", [](TrainArgs& a, const Field& f) { a.split_special_tokens = get_bool(f); }},
      {"add_tokens",
       [](TrainArgs& a, const Field& f) {
         a.add_tokens = f.node.IsNull() ? std::vector<std::string>{} : token_list(f);
       }},
      {"add_special_tokens",
       [](TrainArgs& a, const Field& f) {
         if (f.node.IsNull()) return;
         if (a.new_special_tokens_config.empty()) a.add_special_tokens = token_list(f);
       }},
      {"new_special_tokens_config",
       [](TrainArgs& a, const Field& f) {
         if (f.node.IsNull()) return;
         a.new_special_tokens_config = get_string(f);  // takes precedence over add_special_tokens
         a.special_token_descriptions = config_tokens(f, a.new_special_tokens_config);
         a.add_special_tokens.clear();
         for (const auto& td : a.special_token_descriptions)
           a.add_special_tokens.push_back(td.first);
       }},
      {"init_special_tokens",
       [](TrainArgs& a, const Field& f) {
         a.init_special_tokens = get_choice(f, {"noise_init", "desc_init", "desc_init_w_noise"});
       }},
      {"additional_target",
       [](TrainArgs& a, const Field& f) {
         a.additional_target = f.node.IsNull() ? std::vector<std::string>{} : token_list(f);
       }},
  };
  return m;
}

}  // namespace

bool set_vocab_field(TrainArgs& a, const Field& f) {
  const auto& m = vocab_setters();
  auto it = m.find(f.key);
  if (it == m.end()) return false;
  it->second(a, f);
  return true;
}

// LLaMA-Factory's ModelArguments.__post_init__: the description methods without descriptions
// fall back to noise_init with a warning.
void finish_vocab_args(TrainArgs& a, const std::string& where) {
  if (a.init_special_tokens != "noise_init" && a.special_token_descriptions.empty()) {
    a.warnings.push_back("[config] " + where + ": init_special_tokens '" + a.init_special_tokens +
                         "' needs new_special_tokens_config (the descriptions); using noise_init");
    a.init_special_tokens = "noise_init";
  }
}

}  // namespace unillm::train::detail
