// `unillm generate`: load a model dir, encode the prompt, stream generated text to stdout.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "core/error.h"
#include "cli/common.h"
#include "cli/sampling_flags.h"
#include "infer/engine_generate.h"
#include "infer/stop_matcher.h"
#include "models/causal_lm.h"

namespace unillm::cli {

namespace {

struct GenerateFlags {
  std::string model, prompt, prompt_ids;
  std::vector<std::string> adapters;
  SamplingFlags sampling;
  std::vector<std::string> stop;
  bool ignore_eos = false, output_ids = false, parse_special = false, quiet = false;
  std::string kv_dtype = "f32";
  RuntimeOptions runtime;
  InferenceOptions inference;
};

}  // namespace

int cmd_generate(const std::vector<std::string>& args) {
  GenerateFlags f;
  ArgParser p("generate", "Generate text from a Hugging Face model dir, streaming to stdout.");
  p.option("model", "model dir (config.json, safetensors, tokenizer files)", &f.model);
  p.option("prompt", "prompt text (BOS added when the tokenizer says so)", &f.prompt);
  p.option("prompt-ids", "comma-separated prompt token ids, used verbatim", &f.prompt_ids);
  p.repeated("adapter", "a PEFT LoRA adapter dir to apply (repeatable)", &f.adapters);
  add_sampling_options(p, f.sampling);
  p.repeated("stop", "stop when this string is generated (repeatable; not printed)", &f.stop);
  p.flag("ignore-eos", "keep generating after EOS", &f.ignore_eos);
  p.flag("output-ids", "print the generated ids as a JSON list on the last line", &f.output_ids);
  p.flag("parse-special", "treat special-token strings in --prompt as special tokens", &f.parse_special);
  p.flag("quiet", "no timing or pass lines on stderr", &f.quiet);
  add_kv_cache_dtype_option(p, f.kv_dtype);
  add_runtime_options(p, f.runtime);
  add_inference_options(p, f.inference);
  if (!p.parse(args)) return print_help(p);
  p.require("model");
  if (p.given("prompt") == p.given("prompt-ids"))
    UNILLM_THROW(ConfigError, "[generate] give exactly one of --prompt and --prompt-ids");
  const DType kv_dtype = parse_kv_cache_dtype(f.kv_dtype);  // before the slow load
  const Device device = setup_runtime(f.runtime);

  f.inference.quiet = f.quiet;
  auto [tok, model] = load_model(f.model, f.adapters, device, &f.inference);
  const auto& cfg = model->config();
  std::vector<int32_t> eos = cfg.eos_token_ids;
  if (eos.empty()) eos = tok->stop_ids();
  apply_generation_config(f.model, p, f.sampling, eos, cfg.vocab_size);
  validate_sampling(f.sampling, "generate");

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

  infer::GenerateOptions go = generate_options(f.sampling, eos);
  go.ignore_eos = f.ignore_eos;
  go.kv_dtype = kv_dtype;

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
  auto r = infer::engine_generate(*model, prompt, go, on_token);
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
