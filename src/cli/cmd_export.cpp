// `unillm export CONFIG.yaml [key=value ...]`: LLaMA-Factory's `llamafactory-cli export` for
// LoRA: loads model_name_or_path, merges the adapters of adapter_name_or_path in order, and
// writes a Hugging Face dir to export_dir in shards of export_size GB.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <memory>

#include "cli/commands.h"
#include "cli/common.h"
#include "core/error.h"
#include "data/sft.h"
#include "data/template_export.h"
#include "io/json_file.h"
#include "io/tokenizer.h"
#include "models/adapter.h"
#include "models/inference_bundle.h"
#include "models/passes.h"
#include "models/save.h"
#include "models/value_head.h"
#include "train/mixture_of_depths_config.h"
#include "train/args.h"
#include "train/output_dir.h"

namespace unillm::cli {

namespace fs = std::filesystem;

namespace {
// The value of --format (as "--format X" or "--format=X"), "" when absent.
std::string format_flag(const std::vector<std::string>& args) {
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "--format") {
      if (i + 1 == args.size()) UNILLM_THROW(ConfigError, "[export] --format needs a value (gguf)");
      return args[i + 1];
    }
    if (args[i].rfind("--format=", 0) == 0) return args[i].substr(9);
  }
  return "";
}

// LLaMA-Factory's export also writes the template: as the Jinja chat_template of
// tokenizer_config.json (when a template is named and the tokenizer has none, or the template is
// one that replaces it) and as an Ollama Modelfile.
void write_template_files(const train::TrainArgs& a, const std::string& tokenizer_dir, const std::string& out) {
  auto tok = io::Tokenizer::load(tokenizer_dir);
  const auto choice = data::choose_template(a.template_name, tokenizer_dir);
  if (choice.name == data::kJinjaTemplateName) return;  // the model's own chat_template stays
  auto tmpl = data::ChatTemplate::by_name(choice.name, *tok, train::template_options(a, choice.options));
  const fs::path cfg = fs::path(out) / "tokenizer_config.json";
  if (!a.template_name.empty()) {
    nlohmann::ordered_json j = fs::exists(cfg) ? nlohmann::ordered_json::parse(io::read_file_bytes(cfg.string()))
                                               : nlohmann::ordered_json::object();
    if (!j.contains("chat_template") || data::replaces_jinja_template(choice.name)) {
      if (auto jinja = data::jinja_chat_template(*tmpl, *tok)) {
        j["chat_template"] = *jinja;
        io::write_file_atomic(cfg.string(), j.dump(2) + "\n");
        std::fprintf(stderr, "[export] chat_template of template '%s' written to %s\n", choice.name.c_str(), cfg.c_str());
      } else {
        std::fprintf(stderr, "[export] template '%s' names a token in its slots: no Jinja chat_template written "
                     "(as LLaMA-Factory)\n", choice.name.c_str());
      }
    }
  }
  io::write_file_atomic((fs::path(out) / "Modelfile").string(), data::ollama_modelfile(*tmpl, *tok));
}
}  // namespace

int cmd_export(const std::vector<std::string>& args) {
  // Flag-style exports (`--format gguf`) have their own parser; the YAML path is below.
  if (!args.empty() && args[0].rfind("--", 0) == 0 && args[0] != "--help") {
    const std::string format = format_flag(args);
    if (format == "gguf") return export_gguf(args);
    if (format.empty() && std::find(args.begin(), args.end(), "--inference_model") != args.end())
      return export_inference_model(args);
    if (!format.empty()) UNILLM_THROW(ConfigError, "[export] --format '", format, "' is not supported (gguf is)");
  }
  if (args.empty() || args[0] == "--help" || args[0] == "-h") {
    std::printf("usage: unillm export CONFIG.yaml [key=value ...]\n"
                "Merges adapter_name_or_path into model_name_or_path and writes export_dir\n"
                "(keys: model_name_or_path, adapter_name_or_path, template, finetuning_type,\n"
                "export_dir, export_size in GB per shard, export_quantization_bit 8|4 for an inference\n"
                "bundle; see docs/finetuning.md and docs/export.md).\n");
    return args.empty() ? 2 : 0;
  }
  RuntimeOptions runtime;
  std::vector<std::string> overrides;
  for (size_t i = 1; i < args.size(); ++i) {
    if (args[i] == "--threads" && i + 1 == args.size())
      UNILLM_THROW(ConfigError, "[cli] --threads needs a value");
    else if (args[i] == "--threads")
      runtime.threads = parse_threads(args[++i]);
    else if (args[i].rfind("--threads=", 0) == 0)
      runtime.threads = parse_threads(args[i].substr(10));
    else if (take_runtime_flag(args, i, runtime))
      continue;
    else
      overrides.push_back(args[i].rfind("--", 0) == 0 ? args[i].substr(2) : args[i]);
  }
  setup_runtime(runtime);
  train::TrainArgs a = train::load_train_args(args[0], overrides, train::ConfigUse::kExport);
  for (const auto& w : a.warnings) std::fprintf(stderr, "unillm: warning: %s\n", w.c_str());
  if (a.export_dir.empty())
    UNILLM_THROW(ConfigError, "[export] ", args[0], ": export_dir is required");
  if (a.quantization_bit > 0)  // QLoRA (docs/qlora.md): LLaMA-Factory's export_model refuses it too
    UNILLM_THROW(ConfigError, "[export] ", args[0], ": quantization_bit ", a.quantization_bit, ": ",
                 a.adapter_name_or_path.empty() ? "exporting a bitsandbytes-quantised model is not implemented (export_quantization_bit writes a quantised bundle)"
                                                : "Cannot merge adapters to a quantized model. Drop quantization_bit: the adapter merges into the base loaded unquantised");
  const std::string base = train::resolve_model_path(a.model_name_or_path, hf_cache_root());
  // Writing the merged model over the base (or an adapter) would destroy the input.
  std::vector<std::pair<std::string, std::string>> inputs = {{"model_name_or_path", base}};
  for (const auto& d : a.adapter_name_or_path) inputs.emplace_back("adapter_name_or_path", d);
  train::refuse_input_dirs("export_dir", a.export_dir, args[0], inputs);
  refuse_token_classifier(base, "exporting it");
  // A TOKEN_CLS adapter (LLaMA-Factory v1's reward model) merges into a token classifier: its
  // score head written in place of the lm_head. Only the last adapter may carry one.
  const bool classifier = !a.adapter_name_or_path.empty() &&
                          models::is_token_classification_adapter(a.adapter_name_or_path.back());
  for (size_t i = 0; i + (classifier ? 1 : 0) < a.adapter_name_or_path.size(); ++i)
    refuse_token_classifier(a.adapter_name_or_path[i], "merging it before another adapter");
  if (classifier && a.export_quantization_bit != 0)
    UNILLM_THROW(NotImplemented, "[export] ", args[0], ": export_quantization_bit with a token classifier's adapter (",
                 a.adapter_name_or_path.back(), "): inference bundles hold causal language models");
  models::LoadOptions lo;
  // mixture_of_depths: convert routes the base as training did, its routers drawn from the same
  // seed (an adapter does not hold them).
  lo.adjust_config = [&](models::ModelConfig& c) { train::apply_mixture_of_depths(a, c, base, false); };
  auto model = models::load_causal_lm(base, lo);
  for (size_t i = 0; i < a.adapter_name_or_path.size(); ++i) {
    const std::string name = "adapter" + std::to_string(i);
    models::load_adapter(*model, a.adapter_name_or_path[i], name);
    models::merge_adapter(*model, name);
    std::fprintf(stderr, "[export] merged %s\n", a.adapter_name_or_path[i].c_str());
  }
  if (a.export_quantization_bit != 0) {
    // LLaMA-Factory writes a GPTQ checkpoint for its own loader; unillm writes an inference
    // bundle (docs/export.md), with GPTQ when export_quantization_dataset is set.
    models::PassPlan plan;
    plan.passes = {"quantize_weights"};
    plan.quantize.type = a.export_quantization_bit == 8 ? ops::QuantType::int8 : ops::QuantType::int4;
    std::fprintf(stderr, "[export] export_quantization_bit %lld: writing an inference bundle (weight-only %s, %s)\n",
                 static_cast<long long>(a.export_quantization_bit), a.export_quantization_bit == 8 ? "int8" : "int4 g32",
                 a.export_quantization_dataset.empty() ? "round to nearest" : "GPTQ");
    if (!a.export_quantization_dataset.empty())
      plan.quantize.hessians = calibrate(*model, *io::Tokenizer::load(base), a.export_quantization_dataset, a.dataset_dir,
                                         a.export_quantization_nsamples, a.export_quantization_maxlen, false);
    models::run_passes(*model, plan, [](const std::string& line) { std::fprintf(stderr, "%s\n", line.c_str()); });
    models::BundleOptions bo;
    bo.source_dir = base;
    bo.max_shard_bytes = static_cast<size_t>(a.export_size * 1e9);
    models::save_inference_bundle(*model, plan, a.export_dir, bo);
    write_template_files(a, base, a.export_dir);
    std::printf("exported %s%s -> %s (inference bundle)\n", base.c_str(),
                a.adapter_name_or_path.empty() ? "" : " + adapters", a.export_dir.c_str());
    return 0;
  }
  models::SaveOptions so;
  so.max_shard_bytes = static_cast<size_t>(a.export_size * 1e9);  // HF: "5GB" = 5e9 bytes
  // LLaMA-Factory saves the tokenizer with the adapter; prefer that copy when it is there.
  so.tokenizer_dir = base;
  if (!a.adapter_name_or_path.empty()) {
    const std::string last = a.adapter_name_or_path.back();
    for (const char* f : {"tokenizer.json", "tokenizer.model", "vocab.json"})
      if (fs::exists(fs::path(last) / f)) so.tokenizer_dir = last;
  }
  so.generation_config_dir = base;
  std::unique_ptr<models::ValueHead> head;
  if (classifier) {
    Rng rng(0);
    head = std::make_unique<models::ValueHead>(model->config().hidden_size, rng, Device{}, models::ValueHead::Kind::kScore);
    if (!head->load(a.adapter_name_or_path.back()))
      UNILLM_THROW(IoError, "[export] ", a.adapter_name_or_path.back(),
                   ": a TOKEN_CLS adapter without base_model.model.score.weight in adapter_model.safetensors");
    so.token_classification_head = head->tensors();
    std::fprintf(stderr, "[export] writing a token classifier (the adapter's score head, no lm_head)\n");
  }
  models::save_pretrained(*model, a.export_dir, so);
  write_template_files(a, so.tokenizer_dir, a.export_dir);
  std::printf("exported %s%s -> %s\n", base.c_str(),
              a.adapter_name_or_path.empty() ? "" : " + adapters", a.export_dir.c_str());
  return 0;
}

}  // namespace unillm::cli
