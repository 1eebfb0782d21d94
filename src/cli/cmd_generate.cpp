// `unillm generate`: load a model dir, encode the prompt, stream generated text to stdout.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "core/error.h"
#include "cli/common.h"
#include "infer/generator.h"
#include "infer/stop_matcher.h"
#include "models/causal_lm.h"

namespace unillm::cli {

namespace {

struct GenerateFlags {
  std::string model, prompt, prompt_ids;
  int64_t max_new_tokens = 256, top_k = 0, seed = 42;
  double temperature = 1.0, top_p = 1.0, min_p = 0.0, repetition_penalty = 1.0;
  std::vector<std::string> stop;
  bool ignore_eos = false, output_ids = false, parse_special = false, quiet = false;
  RuntimeOptions runtime;
};

// generation_config.json supplies defaults for flags the user did not give, as HF does.
void apply_generation_config(const std::string& dir, const ArgParser& p, GenerateFlags& f,
                             std::vector<int32_t>& eos) {
  auto path = std::filesystem::path(dir) / "generation_config.json";
  if (!std::filesystem::exists(path)) return;
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(read_text_file(path.string()));
  } catch (const nlohmann::json::exception& e) {
    UNILLM_THROW(ConfigError, "[generate] ", path.string(), ": invalid JSON (", e.what(), ")");
  }
  auto num = [&](const char* key, double& out, const char* flag) {
    if (j.contains(key) && j[key].is_number() && !p.given(flag)) out = j[key].get<double>();
  };
  bool do_sample = j.value("do_sample", true);
  if (!do_sample && !p.given("temperature")) f.temperature = 0.0;
  if (do_sample) num("temperature", f.temperature, "temperature");
  num("top_p", f.top_p, "top-p");
  num("min_p", f.min_p, "min-p");
  num("repetition_penalty", f.repetition_penalty, "repetition-penalty");
  if (j.contains("top_k") && j["top_k"].is_number_integer() && !p.given("top-k"))
    f.top_k = j["top_k"].get<int64_t>();
  if (j.contains("eos_token_id")) {
    eos.clear();
    if (j["eos_token_id"].is_number_integer()) eos.push_back(j["eos_token_id"].get<int32_t>());
    if (j["eos_token_id"].is_array())
      for (auto& v : j["eos_token_id"])
        if (v.is_number_integer()) eos.push_back(v.get<int32_t>());
  }
}

void validate(const GenerateFlags& f) {
  if (f.temperature < 0) UNILLM_THROW(ConfigError, "[generate] --temperature must be >= 0");
  if (f.top_k < 0) UNILLM_THROW(ConfigError, "[generate] --top-k must be >= 0");
  if (!(f.top_p > 0 && f.top_p <= 1)) UNILLM_THROW(ConfigError, "[generate] --top-p must be in (0, 1]");
  if (!(f.min_p >= 0 && f.min_p <= 1)) UNILLM_THROW(ConfigError, "[generate] --min-p must be in [0, 1]");
  if (!(f.repetition_penalty > 0)) UNILLM_THROW(ConfigError, "[generate] --repetition-penalty must be > 0");
  if (f.max_new_tokens < 0) UNILLM_THROW(ConfigError, "[generate] --max-new-tokens must be >= 0");
}

}  // namespace

int cmd_generate(const std::vector<std::string>& args) {
  GenerateFlags f;
  ArgParser p("generate", "Generate text from a Hugging Face model dir, streaming to stdout.");
  p.option("model", "model dir (config.json, safetensors, tokenizer files)", &f.model);
  p.option("prompt", "prompt text (BOS added when the tokenizer says so)", &f.prompt);
  p.option("prompt-ids", "comma-separated prompt token ids, used verbatim", &f.prompt_ids);
  p.option("max-new-tokens", "tokens to generate (default 256)", &f.max_new_tokens);
  p.option("temperature", "sampling temperature; 0 = greedy (default 1, or generation_config.json)", &f.temperature);
  p.option("top-k", "keep the k most likely tokens (0 = off)", &f.top_k);
  p.option("top-p", "nucleus sampling mass (1 = off)", &f.top_p);
  p.option("min-p", "drop tokens below min-p × the top probability (0 = off)", &f.min_p);
  p.option("repetition-penalty", "HF repetition penalty (1 = off)", &f.repetition_penalty);
  p.option("seed", "sampling seed (default 42)", &f.seed);
  p.repeated("stop", "stop when this string is generated (repeatable; not printed)", &f.stop);
  p.flag("ignore-eos", "keep generating after EOS", &f.ignore_eos);
  p.flag("output-ids", "print the generated ids as a JSON list on the last line", &f.output_ids);
  p.flag("parse-special", "treat special-token strings in --prompt as special tokens", &f.parse_special);
  p.flag("quiet", "no timing line on stderr", &f.quiet);
  add_runtime_options(p, f.runtime);
  if (!p.parse(args)) return print_help(p);
  p.require("model");
  if (p.given("prompt") == p.given("prompt-ids"))
    UNILLM_THROW(ConfigError, "[generate] give exactly one of --prompt and --prompt-ids");
  setup_runtime(f.runtime);

  auto tok = io::Tokenizer::load(f.model);
  auto model = models::load_causal_lm(f.model);
  const auto& cfg = model->config();
  std::vector<int32_t> eos = cfg.eos_token_ids;
  if (eos.empty()) eos = tok->stop_ids();
  apply_generation_config(f.model, p, f, eos);
  validate(f);

  std::vector<int32_t> prompt;
  if (p.given("prompt-ids")) {
    prompt = parse_id_list(f.prompt_ids, "prompt-ids");
  } else {
    io::EncodeOptions eo;
    eo.parse_special = f.parse_special;
    prompt = tok->encode(f.prompt, eo);
    if (prompt.empty()) UNILLM_THROW(ConfigError, "[generate] --prompt encodes to no tokens");
  }
  for (int32_t id : prompt)
    if (id >= cfg.vocab_size)
      UNILLM_THROW(ConfigError, "[generate] prompt token id ", id, " is outside the vocabulary (", cfg.vocab_size, ")");

  infer::GenerateOptions go;
  go.max_new_tokens = f.max_new_tokens;
  go.sampling = {static_cast<float>(f.temperature), static_cast<int>(f.top_k), static_cast<float>(f.top_p),
                 static_cast<float>(f.min_p), static_cast<float>(f.repetition_penalty)};
  go.seed = static_cast<uint64_t>(f.seed);
  go.ignore_eos = f.ignore_eos;
  go.eos_ids = eos;

  io::StreamDecoder decoder(*tok, /*skip_special_tokens=*/true);
  infer::StopMatcher stops(f.stop);
  bool warned = false;
  auto limit = static_cast<size_t>(cfg.max_position_embeddings);
  std::vector<int32_t> generated;
  auto emit = [](const std::string& s) {
    std::fwrite(s.data(), 1, s.size(), stdout);
    std::fflush(stdout);
  };
  auto on_token = [&](int32_t id) {
    generated.push_back(id);
    if (!warned && prompt.size() + generated.size() > limit) {
      warned = true;
      std::fprintf(stderr, "unillm: warning: sequence length passed max_position_embeddings (%zu); "
                   "output quality may degrade\n", limit);
    }
    emit(stops.push(decoder.push(id)));
    return !stops.stopped();
  };
  if (prompt.size() > limit)
    std::fprintf(stderr, "unillm: warning: prompt (%zu tokens) is longer than max_position_embeddings (%zu)\n",
                 prompt.size(), limit), warned = true;
  auto r = infer::generate(*model, prompt, go, on_token);
  if (!stops.stopped()) emit(stops.push(decoder.finish()) + stops.flush());
  emit("\n");
  if (f.output_ids) emit(ids_json(r.tokens) + "\n");
  if (!f.quiet)
    std::fprintf(stderr, "[generate] prompt %lld tokens in %.3f s (%.1f tok/s); %zu new tokens in %.3f s (%.1f tok/s)\n",
                 static_cast<long long>(r.prompt_tokens), r.prefill_seconds,
                 r.prompt_tokens / std::max(r.prefill_seconds, 1e-9), r.tokens.size(), r.decode_seconds,
                 r.tokens.size() / std::max(r.decode_seconds, 1e-9));
  return 0;
}

}  // namespace unillm::cli
