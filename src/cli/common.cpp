// Shared CLI helpers.
#include "cli/common.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>

#include "backends/cpu/register.h"
#include "backends/plugin/plugin_loader.h"
#include "core/error.h"
#include "core/parallel.h"
#include "core/registry.h"
#include "data/calibration.h"
#include "models/adapter.h"
#include "models/calibration.h"
#include "models/passes.h"
#include "ops/matmul_compute.h"
#include "ops/quant.h"

namespace unillm::cli {

void add_runtime_options(ArgParser& p, RuntimeOptions& o) {
  p.option("device", "cpu (default), or a plugin device NAME[:N] (see `unillm env`)", &o.device);
  p.option("threads", "threads for kernels and BLAS (default: cores in the affinity mask)", &o.threads);
  p.option("isa",
           "cap the CPU instruction set: auto (default; or $UNILLM_ISA), amx_bf16, avx512_bf16, avx512, "
           "avx2 or portable",
           &o.isa);
  p.option("bf16-compute",
           "a model stored in bf16: on (default) multiplies bf16 inputs with f32 accumulation "
           "where the CPU has AVX512-BF16; off converts to f32 first",
           &o.bf16_compute);
  p.option("device-fallback",
           "an op the device has no kernel for: warn (run it on the CPU with copies, warned once "
           "per op; default) or error",
           &o.device_fallback);
}

namespace {
plugin::LoadReport& plugin_report() {
  static plugin::LoadReport r;
  return r;
}

void load_plugins_once() {
  static bool done = false;
  if (done) return;
  done = true;
  const char* path = std::getenv("UNILLM_PLUGIN_PATH");
  if (!path || !*path) return;
  plugin_report() = plugin::load_plugins(path);
  for (const auto& f : plugin_report().failures)
    std::fprintf(stderr, "unillm: warning: %s\n", f.c_str());
}

// The CPU level cap: --isa, else $UNILLM_ISA, else auto. Asking for more than the CPU has
// warns (the kernels run at what it has).
cpu::IsaLevel isa_cap(const std::string& flag) {
  const char* env = std::getenv("UNILLM_ISA");
  const std::string text = !flag.empty() ? flag : env && *env ? env : "auto";
  const char* from = !flag.empty() ? "--isa" : env && *env ? "UNILLM_ISA" : "";
  cpu::IsaLevel cap;
  if (!cpu::parse_isa(text, &cap))
    UNILLM_THROW(ConfigError, "[cli] ", from, " must be auto, amx_bf16, avx512_bf16, avx512, avx2 or portable, got '",
                 text, "'");
  if (static_cast<int>(cap) > static_cast<int>(cpu::detected_isa()))
    std::fprintf(stderr, "unillm: warning: %s %s: this CPU has only %s; using %s\n", from, text.c_str(),
                 cpu::isa_name(cpu::detected_isa()), cpu::isa_name(cpu::detected_isa()));
  return cap;
}

void register_cpu(const std::string& isa_flag) { cpu::register_cpu_backend(isa_cap(isa_flag)); }

bool g_bf16_compute = true;  // --bf16-compute, applied by load_model

}  // namespace

const std::vector<std::string>& loaded_plugins() { return plugin_report().loaded; }
const std::vector<std::string>& plugin_failures() { return plugin_report().failures; }

Device setup_runtime(const RuntimeOptions& o) {
  register_cpu(o.isa);
  load_plugins_once();
  if (o.threads == 0 || o.threads < -1)
    UNILLM_THROW(ConfigError, "[cli] --threads must be >= 1, got ", o.threads);
  // More threads than cores only makes them wait for each other at every barrier (64 threads on
  // 2 cores ran 7x slower): cap at the cores this process may run on.
  const int64_t cores = affinity_cores();
  if (o.threads > cores)
    std::fprintf(stderr, "unillm: warning: --threads %lld is more than the %lld cores available; using %lld\n",
                 static_cast<long long>(o.threads), static_cast<long long>(cores),
                 static_cast<long long>(cores));
  cpu::set_num_threads(static_cast<int>(o.threads < 0 ? 0 : std::min(o.threads, cores)));
  if (o.bf16_compute != "on" && o.bf16_compute != "off")
    UNILLM_THROW(ConfigError, "[cli] --bf16-compute must be on or off, got '", o.bf16_compute, "'");
  g_bf16_compute = o.bf16_compute == "on";
  if (o.device_fallback != "warn" && o.device_fallback != "error")
    UNILLM_THROW(ConfigError, "[cli] --device-fallback must be warn or error, got '",
                 o.device_fallback, "'");
  kernel_registry().set_fallback(
      o.device_fallback == "error" ? KernelRegistry::Fallback::error : KernelRegistry::Fallback::warn,
      [](const std::string& s) { std::fprintf(stderr, "unillm: warning: %s\n", s.c_str()); });
  try {
    return parse_device(o.device);
  } catch (const ConfigError& e) {
    std::string why = e.what();
    for (const auto& f : plugin_failures()) why += "; " + f;
    throw ConfigError(why);
  }
}

void cpu_register_only() { register_cpu(""); }

bool take_runtime_flag(const std::vector<std::string>& args, size_t& i, RuntimeOptions& o) {
  for (auto [flag, out] : {std::pair<const char*, std::string*>{"--device", &o.device},
                           {"--device-fallback", &o.device_fallback},
                           {"--isa", &o.isa}}) {
    const std::string f = flag;
    if (args[i] == f) {
      if (i + 1 == args.size()) UNILLM_THROW(ConfigError, "[cli] ", f, " needs a value");
      *out = args[++i];
      return true;
    }
    if (args[i].rfind(f + "=", 0) == 0) {
      *out = args[i].substr(f.size() + 1);
      return true;
    }
  }
  return false;
}

int64_t parse_threads(const std::string& text) {
  size_t used = 0;
  long long v = 0;
  try {
    v = std::stoll(text, &used);
  } catch (const std::logic_error&) {
    used = 0;
  }
  if (used == 0 || used != text.size() || v < 1)
    UNILLM_THROW(ConfigError, "[cli] --threads: '", text, "' is not an integer >= 1");
  return v;
}

std::vector<int32_t> parse_id_list(const std::string& text, const std::string& flag) {
  if (!text.empty() && text.back() == ',')
    UNILLM_THROW(ConfigError, "[cli] --", flag, ": '", text, "' ends with a comma (an empty id)");
  std::vector<int32_t> ids;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    size_t b = item.find_first_not_of(" \t"), e = item.find_last_not_of(" \t");
    std::string t = b == std::string::npos ? "" : item.substr(b, e - b + 1);
    size_t used = 0;
    long long v = -1;
    try {
      v = std::stoll(t, &used);
    } catch (const std::logic_error&) {
      used = 0;
    }
    if (t.empty() || used != t.size() || v < 0 || v > INT32_MAX)
      UNILLM_THROW(ConfigError, "[cli] --", flag, ": '", t, "' is not a token id");
    ids.push_back(static_cast<int32_t>(v));
  }
  if (ids.empty()) UNILLM_THROW(ConfigError, "[cli] --", flag, " is empty");
  return ids;
}

std::string ids_json(const std::vector<int32_t>& ids) {
  std::string s = "[";
  for (size_t i = 0; i < ids.size(); ++i) s += (i ? ", " : "") + std::to_string(ids[i]);
  return s + "]";
}

std::string read_text_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) UNILLM_THROW(IoError, "[cli] cannot open ", path);
  std::ostringstream os;
  os << f.rdbuf();
  return os.str();
}

std::string hf_cache_root() {
  if (const char* c = std::getenv("HF_HUB_CACHE"); c && *c) return c;
  if (const char* h = std::getenv("HF_HOME"); h && *h) return std::string(h) + "/hub";
  const char* home = std::getenv("HOME");
  return std::string(home ? home : ".") + "/.cache/huggingface/hub";
}

void require_model_dir(const std::string& dir, const std::string& flag) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::exists(dir, ec))
    UNILLM_THROW(ConfigError, "[cli] --", flag, " '", dir, "' does not exist");
  if (!fs::is_directory(dir, ec))
    UNILLM_THROW(ConfigError, "[cli] --", flag, " '", dir,
                 "' is a file; expected a model directory (config.json, *.safetensors, tokenizer files)");
}

void refuse_token_classifier(const std::string& dir, const std::string& what) {
  namespace fs = std::filesystem;
  const fs::path config = fs::path(dir) / "config.json";
  const bool model = fs::exists(config) && models::load_model_config(config.string()).token_classification;
  if (model || models::is_token_classification_adapter(dir))
    UNILLM_THROW(NotImplemented, "[cli] ", dir, " is a token classifier (", model ? "*ForTokenClassification" : "a TOKEN_CLS adapter",
                 ": LLaMA-Factory v1's reward model, a score head and no lm_head); ", what,
                 " needs a causal language model. Train the reward model on with `unillm train` (stage=rm)");
}

void add_inference_options(ArgParser& p, InferenceOptions& o) {
  p.option("quant_type",
           "weight-only quantisation at load: weight_only_int8 (per output channel) or weight_only_int4 "
           "(group-wise); the decoder's linear layers, docs/export.md",
           &o.quant_type);
  p.option("group-size", "int4 group size along K (default 32: within 8 % perplexity on stories260K; 64 and 128 are smaller)", &o.group_size);
  p.flag("quant-symmetric", "int4: symmetric codes (default asymmetric: a scale and a minimum per group)",
         &o.symmetric);
  p.option("scale-dtype",
           "how quantised scales (and int4 minimums) are stored: f16 or f32 (default f16 for int4, a quarter fewer "
           "bytes at g32; f32 for int8)",
           &o.scale_dtype);
  p.option("quant-activations",
           "what the quantised layers multiply their codes by: int8 (default: the activations quantised per block of "
           "32 where the CPU has AVX512-VNNI, several times faster) or f32 (exact activations)",
           &o.quant_activations);
  p.option("keep-f32", "keep these dense: lm_head (quantised to int8 otherwise), embed (always dense)", &o.keep_f32);
  p.option("lm-head-quant",
           "the lm_head's format: int8 (default, per vocabulary row) or int4 (weight_only_int4 only: the layers' group "
           "and symmetry; fewer bytes a decode step than llama.cpp's Q6_K output, docs/export.md)",
           &o.lm_head_quant);
  p.option("passes", "run exactly these inference passes, comma-separated (default: quantize_weights when --quant_type is set, then the exact fusions fuse_residual_rms_norm, fuse_rope_into_qk)",
           &o.passes);
  p.repeated("no-pass", "skip this inference pass (repeatable)", &o.no_pass);
  p.option("calibration-data",
           "GPTQ: quantise with error compensation on this calibration text, a dataset name in --dataset_dir's "
           "dataset_info.json or a .txt/.json/.jsonl file with \"text\" records (LLaMA-Factory's export_quantization_dataset)",
           &o.calibration_data);
  p.option("calibration-samples", "GPTQ: calibration samples (default 128)", &o.calibration_samples);
  p.flag("gptq-act-order",
         "GPTQ: quantise the columns in order of falling input energy, groups fitted up front (AutoGPTQ's desc_act "
         "with static groups; helps symmetric int4 most, docs/export.md)",
         &o.gptq_act_order);
  p.option("calibration-len", "GPTQ: tokens per calibration sample (default 1024)", &o.calibration_len);
  p.option("dataset_dir", "where --calibration-data names a dataset (default data)", &o.dataset_dir);
}

namespace {
std::vector<std::string> split_commas(const std::string& s) {
  std::vector<std::string> out;
  size_t at = 0;
  while (at <= s.size() && !s.empty()) {
    const size_t end = s.find(',', at);
    out.push_back(s.substr(at, end == std::string::npos ? std::string::npos : end - at));
    if (end == std::string::npos) break;
    at = end + 1;
  }
  return out;
}
}  // namespace

void add_kv_cache_dtype_option(ArgParser& p, std::string& value) {
  p.option("kv-cache-dtype", "KV cache element type: f32 (default), bf16 or f16 (half the memory and the bytes decode reads)",
           &value);
}

DType parse_kv_cache_dtype(const std::string& name) {
  if (name == "f32" || name == "float32") return DType::f32;
  if (name == "bf16" || name == "bfloat16") return DType::bf16;
  if (name == "f16" || name == "float16") return DType::f16;
  UNILLM_THROW(ConfigError, "[cli] --kv-cache-dtype must be f32, bf16 or f16, got '", name, "'");
}

models::PassPlan inference_plan(const InferenceOptions& o) {
  std::optional<models::QuantizeOptions> quant;
  if (!o.quant_type.empty()) {
    quant.emplace();
    quant->type = ops::quant_type_from_name(o.quant_type);
    quant->group = o.group_size;
    quant->symmetric = o.symmetric;
  }
  if (!o.scale_dtype.empty()) {
    if (!quant) UNILLM_THROW(ConfigError, "[cli] --scale-dtype sets how quantised scales are stored: it needs --quant_type");
    quant->scale_dtype = ops::scale_dtype_from_name(o.scale_dtype);
  }
  for (const auto& part : split_commas(o.keep_f32)) {
    if (part != "lm_head" && part != "embed")
      UNILLM_THROW(ConfigError, "[cli] --keep-f32 takes lm_head and embed, got '", part, "'");
    if (part == "lm_head" && quant) quant->keep_lm_head = true;
  }
  if (!o.lm_head_quant.empty()) {
    if (o.lm_head_quant != "int8" && o.lm_head_quant != "int4")
      UNILLM_THROW(ConfigError, "[cli] --lm-head-quant must be int8 or int4, got '", o.lm_head_quant, "'");
    if (!quant || (o.lm_head_quant == "int4" && quant->type != ops::QuantType::int4))
      UNILLM_THROW(ConfigError, "[cli] --lm-head-quant ", o.lm_head_quant, " needs --quant_type ",
                   o.lm_head_quant == "int4" ? "weight_only_int4" : "weight_only_int8 or weight_only_int4");
    if (quant->keep_lm_head)
      UNILLM_THROW(ConfigError, "[cli] --lm-head-quant and --keep-f32 lm_head contradict each other: choose one");
    quant->lm_head = o.lm_head_quant == "int4" ? ops::QuantType::int4 : ops::QuantType::int8;
  }
  return models::make_pass_plan(quant, split_commas(o.passes), o.no_pass);
}

std::shared_ptr<models::InputHessians> calibrate(models::CausalLM& model, const io::Tokenizer& tok,
                                                 const std::string& source, const std::string& dataset_dir,
                                                 int64_t samples, int64_t len, bool quiet) {
  const auto t0 = std::chrono::steady_clock::now();
  const auto ids = data::calibration_samples(source, dataset_dir, samples, len, tok);
  auto h = std::make_shared<models::InputHessians>(models::collect_input_hessians(model, ids));
  h->source = source + ": " + std::to_string(ids.size()) + " × " + std::to_string(len) + " tokens";
  if (!quiet)
    std::fprintf(stderr, "[calibration] %s; input statistics of %zu layers in %.1f s\n", h->source.c_str(),
                 h->by_module.size(), std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  return h;
}

LoadedModel load_model(const std::string& dir, const std::vector<std::string>& adapter_dirs,
                       Device device, const InferenceOptions* inference, models::PassPlan* plan_out,
                       bool token_classifier_ok) {
  require_model_dir(dir);
  if (!token_classifier_ok) {
    refuse_token_classifier(dir, "running it");
    for (const auto& a : adapter_dirs) refuse_token_classifier(a, "running it");
  }
  LoadedModel out;
  out.tokenizer = io::Tokenizer::load(dir);
  const std::string config_path = dir + "/config.json";
  models::check_tokenizer_fits(*out.tokenizer, models::load_model_config(config_path), config_path);
  models::LoadOptions lo;
  lo.device = device;
  out.model = models::load_causal_lm(dir, lo);
  auto& model = out.model;
  std::vector<std::string> names;
  for (size_t i = 0; i < adapter_dirs.size(); ++i) {
    names.push_back("adapter" + std::to_string(i));
    models::load_adapter(*model, adapter_dirs[i], names.back());
  }
  model->set_active_adapters(names);
  // An adapter trained with new tokens (resize_vocab, add_special_tokens) grew the vocabulary;
  // its run saved the grown tokenizer beside it. Use the last such adapter's, else the new rows
  // could never be read or written as text.
  const int64_t rows = model->lm_head_weight().size(0);
  if (rows > out.tokenizer->vocab_size()) {
    for (auto it = adapter_dirs.rbegin(); it != adapter_dirs.rend(); ++it) {
      if (!std::filesystem::exists(*it + "/tokenizer_config.json")) continue;
      auto tok = io::Tokenizer::load(*it);
      if (tok->vocab_size() <= out.tokenizer->vocab_size()) continue;
      std::fprintf(stderr, "[model] the adapter %s grew the vocabulary to %lld rows: using its tokenizer (%d ids)\n",
                   it->c_str(), static_cast<long long>(rows), tok->vocab_size());
      out.tokenizer = std::move(tok);
      break;
    }
    if (rows > out.tokenizer->vocab_size())
      std::fprintf(stderr, "[model] warning: the adapters grew the vocabulary to %lld rows, but no adapter dir holds a "
                   "tokenizer with them: the new ids cannot be read or written as text\n", static_cast<long long>(rows));
  }
  if (inference) {
    if (inference->quant_activations != "int8" && inference->quant_activations != "f32")
      UNILLM_THROW(ConfigError, "[cli] --quant-activations must be int8 or f32, got '", inference->quant_activations, "'");
    ops::set_linear_q_int8_activations(inference->quant_activations == "int8");
    models::PassPlan plan = inference_plan(*inference);
    const bool quantize = std::find(plan.passes.begin(), plan.passes.end(), "quantize_weights") != plan.passes.end();
    if (!inference->calibration_data.empty() && !quantize)
      UNILLM_THROW(ConfigError, "[cli] --calibration-data calibrates a quantisation: it needs --quant_type");
    if (inference->gptq_act_order && inference->calibration_data.empty())
      UNILLM_THROW(ConfigError, "[cli] --gptq-act-order orders GPTQ's sweep: it needs --calibration-data");
    plan.quantize.act_order = inference->gptq_act_order;
    if (quantize) {
      for (size_t i = 0; i < names.size(); ++i) {  // quantised weights take no adapters: merge them
        models::merge_adapter(*model, names[i]);
        std::fprintf(stderr, "[passes] merged adapter %s into the base weights\n", adapter_dirs[i].c_str());
      }
    }
    if (quantize && !inference->calibration_data.empty())
      plan.quantize.hessians = calibrate(*model, *out.tokenizer, inference->calibration_data, inference->dataset_dir,
                                         inference->calibration_samples, inference->calibration_len, inference->quiet);
    const bool quiet = inference->quiet;
    models::run_passes(*model, plan, [quiet](const std::string& line) {
      if (!quiet) std::fprintf(stderr, "%s\n", line.c_str());
    });
    if (plan_out) *plan_out = plan;
  }
  // A bf16 model computes its GEMMs in bf16, as it would on a GPU (ops/matmul_compute.h).
  bool bf16 = false;
  for (const auto& [name, t] : model->named_parameters()) bf16 = bf16 || (t.ndim() == 2 && t.dtype() == DType::bf16);
  ops::set_matmul_compute(bf16 && g_bf16_compute ? ops::MatmulCompute::bf16 : ops::MatmulCompute::f32);
  return out;
}

}  // namespace unillm::cli
