// Pieces shared by the sub-commands: runtime set-up (threads, device) and tokenizer/model
// loading with the rules of the CLI contract.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "cli/args.h"
#include "core/device.h"
#include "io/tokenizer.h"
#include "models/causal_lm.h"
#include "models/passes.h"

namespace unillm::cli {

struct RuntimeOptions {
  std::string device = "cpu";
  std::string device_fallback = "warn";  // warn | error: an op the device lacks
  int64_t threads = -1;  // -1: not given (cores in the affinity mask); a given value must be >= 1
  std::string isa;  // --isa: "" = $UNILLM_ISA, else auto
  std::string bf16_compute = "on";  // on | off: GEMMs of a bf16 model on bf16 inputs (load_model)
};

void add_runtime_options(ArgParser& p, RuntimeOptions& o);
// Registers the CPU backend and the plugins of UNILLM_PLUGIN_PATH (once per process; a plugin
// that fails to load is a warning), sets the thread count, resolves the device (throws when
// unavailable, naming the plugins that failed to load).
Device setup_runtime(const RuntimeOptions& o);
// The plugins loaded and those that failed (for `unillm env`).
const std::vector<std::string>& loaded_plugins();
const std::vector<std::string>& plugin_failures();
// Registers the CPU backend with default threads (commands that do no heavy compute).
void cpu_register_only();

// For the commands that parse their own flags (train, export): takes --device / --device-fallback / --isa
// (as "--flag VALUE" or "--flag=VALUE") at args[i] into o, advancing i past a separate value;
// false when args[i] is neither.
bool take_runtime_flag(const std::vector<std::string>& args, size_t& i, RuntimeOptions& o);
// The value of --threads N (train and export parse their own flags): an integer >= 1.
int64_t parse_threads(const std::string& text);

// "1,2,3" → ids; throws ConfigError naming the flag on a bad entry (an empty one too: "1,,2",
// "1,2,").
std::vector<int32_t> parse_id_list(const std::string& text, const std::string& flag);
std::string ids_json(const std::vector<int32_t>& ids);
std::string read_text_file(const std::string& path);
// The Hugging Face hub cache as huggingface_hub resolves it ($HF_HUB_CACHE, $HF_HOME/hub,
// ~/.cache/huggingface/hub).
std::string hf_cache_root();

// Throws ConfigError unless dir is a directory (--model naming a file or nothing).
void require_model_dir(const std::string& dir, const std::string& flag = "model");
// Throws NotImplemented when dir is a token classifier (LLaMA-Factory v1's reward model: a score
// head, no lm_head) or a TOKEN_CLS adapter: `what` (generating, merging, …) needs a causal LM.
void refuse_token_classifier(const std::string& dir, const std::string& what);

// Inference passes (models/passes.h) for the commands that load a model to run it.
struct InferenceOptions {
  std::string quant_type;  // --quant_type: "" (dense), weight_only_int8, weight_only_int4
  int64_t group_size = 32;  // --group-size (int4)
  bool symmetric = false;  // --quant-symmetric (int4; asymmetric by default: lower error)
  std::string scale_dtype;  // --scale-dtype f16|f32 ("": f16 for int4, f32 for int8)
  std::string lm_head_quant;  // --lm-head-quant int8|int4 (models::QuantizeOptions::lm_head)
  std::string keep_f32;  // --keep-f32 lm_head,embed: left dense (the embedding always is)
  std::string passes;  // --passes a,b: exactly these
  std::vector<std::string> no_pass;  // --no-pass NAME (repeatable)
  // GPTQ calibration (LLaMA-Factory's export_quantization_dataset / _nsamples / _maxlen).
  std::string calibration_data;  // --calibration-data NAME|FILE
  int64_t calibration_samples = 128;  // --calibration-samples
  int64_t calibration_len = 1024;  // --calibration-len
  std::string dataset_dir = "data";  // --dataset_dir, where NAME is looked up
  bool gptq_act_order = false;  // --gptq-act-order (with --calibration-data)
  std::string quant_activations = "int8";  // --quant-activations int8|f32 (ops::linear_q_int8_activations)
  bool quiet = false;  // no pass log (generate --quiet)
};
void add_inference_options(ArgParser& p, InferenceOptions& o);
// --kv-cache-dtype: f32, bf16 or f16 (ConfigError naming the flag otherwise).
void add_kv_cache_dtype_option(ArgParser& p, std::string& value);
DType parse_kv_cache_dtype(const std::string& name);
// The pass plan the options ask for (ConfigError for unknown names or values).
models::PassPlan inference_plan(const InferenceOptions& o);

struct LoadedModel {
  std::unique_ptr<io::Tokenizer> tokenizer;
  std::unique_ptr<models::CausalLM> model;
};
// GPTQ's input statistics of model's linear layers on calibration text (a dataset name in
// dataset_dir or a file, data/calibration.h), logged on stderr unless quiet.
std::shared_ptr<models::InputHessians> calibrate(models::CausalLM& model, const io::Tokenizer& tok,
                                                 const std::string& source, const std::string& dataset_dir,
                                                 int64_t samples, int64_t len, bool quiet);
// The tokenizer and model of dir (checked to fit each other before the weights are read), with
// the PEFT LoRA adapters of adapter_dirs loaded and all of them active (named adapter0,
// adapter1, … in the order given).
// With inference options the plan's passes run, each logged on stderr; when it quantises, the
// adapters are merged into the base first (quantised weights take no adapters) and a calibration
// source, if given, is run through the dense model for GPTQ. plan_out receives the plan as run
// (with its calibration statistics). A token classifier (refuse_token_classifier) is refused
// unless token_classifier_ok (`eval reward`, which reads its score head).
LoadedModel load_model(const std::string& dir, const std::vector<std::string>& adapter_dirs,
                       Device device, const InferenceOptions* inference = nullptr,
                       models::PassPlan* plan_out = nullptr, bool token_classifier_ok = false);

}  // namespace unillm::cli
