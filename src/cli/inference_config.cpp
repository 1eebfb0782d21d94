// LLaMA-Factory inference YAML → chat/serve flags (inference_config.h).
#include "cli/inference_config.h"

#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <sstream>
#include <tuple>

#include "cli/common.h"
#include "core/error.h"
#include "data/template.h"
#include "train/args.h"

namespace unillm::cli {

bool is_config_file(const std::string& arg) {
  auto ends = [&](const char* s) {
    const std::string x(s);
    return arg.size() > x.size() && arg.compare(arg.size() - x.size(), x.size(), x) == 0;
  };
  return arg.rfind("--", 0) != 0 && (ends(".yaml") || ends(".yml"));
}

namespace {

std::string number(double v) {
  std::ostringstream os;
  os.precision(17);
  os << v;
  return os.str();
}

// LLaMA-Factory v1's chat samples with transformers' generate: the model's generation_config.json
// and, for what it leaves out, generate's defaults — greedy unless do_sample is true, then
// temperature 1, top_p 1, top_k 50 — where unillm's `chat --model` would sample by default. Only
// the keys the file lacks become flags (chat reads the file for the rest).
void v1_sampling(const std::string& model_dir, std::vector<std::string>& out) {
  nlohmann::json j = nlohmann::json::object();
  const auto path = std::filesystem::path(model_dir) / "generation_config.json";
  if (std::filesystem::exists(path)) {
    try {
      j = nlohmann::json::parse(read_text_file(path.string()));
    } catch (const nlohmann::json::exception&) {  // chat reports the file itself
    }
  }
  if (!j.is_object()) return;
  if (!(j.contains("do_sample") && j["do_sample"].is_boolean() && j["do_sample"].get<bool>())) {
    out.insert(out.end(), {"--temperature", "0"});
    return;
  }
  for (const auto& [key, flag, value] : {std::tuple{"temperature", "--temperature", "1"}, {"top_p", "--top-p", "1"},
                                         {"top_k", "--top-k", "50"}, {"repetition_penalty", "--repetition-penalty", "1"}})
    if (!j.contains(key) || j[key].is_null()) out.insert(out.end(), {flag, value});
}

}  // namespace

std::vector<std::string> inference_flags_from_config(const std::vector<std::string>& args, bool serve) {
  const std::string& path = args.at(0);
  // key=value overrides come right after the file; from the first --flag on, everything is a
  // flag with its values (so `--system a=b` stays a flag's value).
  std::vector<std::string> overrides, flags;
  size_t i = 1;
  for (; i < args.size() && args[i].rfind("--", 0) != 0; ++i) {
    if (args[i].find('=') == std::string::npos)
      UNILLM_THROW(ConfigError, "[cli] after ", path, ": expected key=value or a --flag, got '", args[i], "'");
    overrides.push_back(args[i]);
  }
  flags.assign(args.begin() + static_cast<std::ptrdiff_t>(i), args.end());
  train::TrainArgs a = train::load_train_args(path, overrides, train::ConfigUse::kChat);
  for (const auto& w : a.warnings) std::fprintf(stderr, "unillm: warning: %s\n", w.c_str());
  const train::GeneratingKeys& g = a.generating;
  if (!a.adapter_tuning() && !a.adapter_name_or_path.empty())
    UNILLM_THROW(ConfigError, "[config] ", path, ": adapter_name_or_path needs finetuning_type lora or oft");
  if (!a.infer_backend.empty() && a.infer_backend != "huggingface" && a.infer_backend != "hf")
    std::fprintf(stderr, "unillm: note: infer_backend %s: unillm's own engine serves the model (paged KV, "
                 "continuous batching)\n", a.infer_backend.c_str());

  std::vector<std::string> out = {"--model", train::resolve_model_path(a.model_name_or_path, hf_cache_root())};
  for (const auto& d : a.adapter_name_or_path) {
    out.push_back(serve ? "--base-adapter" : "--adapter");
    out.push_back(d);
  }
  if (!a.template_name.empty()) out.insert(out.end(), {"--template", a.template_name});
  if (g.enable_thinking) out.insert(out.end(), {"--enable-thinking", *g.enable_thinking ? "true" : "false"});
  if (serve) {
    // Requests carry their own sampling (OpenAI's fields); LLaMA-Factory's api also takes them
    // per request. The config's sampling keys would only change the defaults: said, not hidden.
    if (g.do_sample || g.temperature || g.top_p || g.top_k || g.max_new_tokens || g.repetition_penalty ||
        g.default_system)
      std::fprintf(stderr, "unillm: warning: [config] %s: sampling keys and default_system are taken per "
                   "request by `unillm api` (OpenAI fields); the config's values are not used\n", path.c_str());
  } else if (a.v1_config) {  // v1's SampleArguments: max_new_tokens 128
    v1_sampling(out[1], out);
    out.insert(out.end(), {"--max-new-tokens", std::to_string(g.max_new_tokens.value_or(128))});
  } else {
    // LLaMA-Factory's GeneratingArguments defaults (its chat ignores generation_config.json).
    const bool sample = g.do_sample.value_or(true);
    out.insert(out.end(), {"--temperature", sample ? number(g.temperature.value_or(0.95)) : "0"});
    out.insert(out.end(), {"--top-p", number(g.top_p.value_or(0.7))});
    out.insert(out.end(), {"--top-k", std::to_string(g.top_k.value_or(50))});
    out.insert(out.end(), {"--max-new-tokens", std::to_string(g.max_new_tokens.value_or(1024))});
    out.insert(out.end(), {"--repetition-penalty", number(g.repetition_penalty.value_or(1.0))});
    if (g.default_system) out.insert(out.end(), {"--system", *g.default_system});
  }
  out.insert(out.end(), flags.begin(), flags.end());
  return out;
}

void apply_enable_thinking(const std::string& value, data::TemplateOptions& options) {
  if (value.empty()) return;
  if (value != "true" && value != "false")
    UNILLM_THROW(ConfigError, "[cli] --enable-thinking takes true or false, got '", value, "'");
  options.enable_thinking = value == "true";
}

}  // namespace unillm::cli
