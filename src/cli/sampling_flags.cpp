// Sampling flags shared by generate and chat.
#include "cli/sampling_flags.h"

#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "cli/common.h"
#include "core/error.h"

namespace unillm::cli {

void add_sampling_options(ArgParser& p, SamplingFlags& f) {
  p.option("max-new-tokens", "tokens to generate (default 256)", &f.max_new_tokens);
  p.option("temperature", "sampling temperature; 0 = greedy (default 1, or generation_config.json)",
           &f.temperature);
  p.option("top-k", "keep the k most likely tokens (0 = off)", &f.top_k);
  p.option("top-p", "nucleus sampling mass (1 = off)", &f.top_p);
  p.option("min-p", "drop tokens below min-p × the top probability (0 = off)", &f.min_p);
  p.option("repetition-penalty", "HF repetition penalty (1 = off)", &f.repetition_penalty);
  p.option("seed", "sampling seed (default 42)", &f.seed);
}

void apply_generation_config(const std::string& dir, const ArgParser& p, SamplingFlags& f,
                             std::vector<int32_t>& eos, int64_t vocab_size) {
  auto path = std::filesystem::path(dir) / "generation_config.json";
  if (!std::filesystem::exists(path)) return;
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(read_text_file(path.string()));
  } catch (const nlohmann::json::exception& e) {
    UNILLM_THROW(ConfigError, "[generate] ", path.string(), ": invalid JSON (", e.what(), ")");
  }
  if (!j.is_object()) UNILLM_THROW(ConfigError, "[generate] ", path.string(), ": expected a JSON object");
  auto bad = [&](const char* key, const std::string& what) {
    UNILLM_THROW(ConfigError, "[generate] ", path.string(), ": key '", key, "' ", what, ", got ",
                 j[key].dump());
  };
  auto given = [&](const char* key) { return j.contains(key) && !j[key].is_null(); };
  auto num = [&](const char* key, double& out, const char* flag) {
    if (!given(key)) return;
    if (!j[key].is_number() || !std::isfinite(j[key].get<double>())) bad(key, "must be a finite number");
    if (!p.given(flag)) out = j[key].get<double>();
  };
  if (given("do_sample") && !j["do_sample"].is_boolean()) bad("do_sample", "must be true or false");
  bool do_sample = j.value("do_sample", true);
  if (!do_sample && !p.given("temperature")) f.temperature = 0.0;
  if (do_sample) num("temperature", f.temperature, "temperature");
  num("top_p", f.top_p, "top-p");
  num("min_p", f.min_p, "min-p");
  num("repetition_penalty", f.repetition_penalty, "repetition-penalty");
  if (given("top_k")) {
    if (!j["top_k"].is_number_integer()) bad("top_k", "must be an integer");
    if (!p.given("top-k")) f.top_k = j["top_k"].get<int64_t>();
  }
  if (!given("eos_token_id")) return;
  const nlohmann::json& e = j["eos_token_id"];
  const nlohmann::json list = e.is_array() ? e : nlohmann::json::array({e});
  eos.clear();
  for (const auto& v : list) {
    if (!v.is_number_integer()) bad("eos_token_id", "must be a token id or a list of them");
    if (v.get<int64_t>() < 0 || v.get<int64_t>() >= vocab_size)
      bad("eos_token_id", UNILLM_MSG("must hold token ids in [0, ", vocab_size, ") (the model's vocab_size)"));
    eos.push_back(v.get<int32_t>());
  }
}

void validate_sampling(const SamplingFlags& f, const std::string& command) {
  const std::string c = "[" + command + "] ";
  // Values from generation_config.json are checked too (the flags are finite by the parser).
  if (!(f.temperature >= 0 && std::isfinite(f.temperature)))
    UNILLM_THROW(ConfigError, c, "--temperature must be a finite number >= 0");
  if (f.top_k < 0) UNILLM_THROW(ConfigError, c, "--top-k must be >= 0");
  if (!(f.top_p > 0 && f.top_p <= 1)) UNILLM_THROW(ConfigError, c, "--top-p must be in (0, 1]");
  if (!(f.min_p >= 0 && f.min_p <= 1)) UNILLM_THROW(ConfigError, c, "--min-p must be in [0, 1]");
  if (!(f.repetition_penalty > 0))
    UNILLM_THROW(ConfigError, c, "--repetition-penalty must be > 0");
  if (f.max_new_tokens < 0) UNILLM_THROW(ConfigError, c, "--max-new-tokens must be >= 0");
}

infer::GenerateOptions generate_options(const SamplingFlags& f, const std::vector<int32_t>& eos) {
  infer::GenerateOptions go;
  go.max_new_tokens = f.max_new_tokens;
  go.sampling = {static_cast<float>(f.temperature), static_cast<int>(f.top_k),
                 static_cast<float>(f.top_p), static_cast<float>(f.min_p),
                 static_cast<float>(f.repetition_penalty)};
  go.seed = static_cast<uint64_t>(f.seed);
  go.eos_ids = eos;
  return go;
}

}  // namespace unillm::cli
