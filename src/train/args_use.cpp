// Which keys each command reads (args.h, ConfigUse), and the GeneratingArguments keys that `chat`
// and `api` configs carry (LLaMA-Factory's inference YAML).
#include <algorithm>
#include <string_view>

#include "train/args_internal.h"

namespace unillm::train {

const char* config_use_name(ConfigUse use) {
  switch (use) {
    case ConfigUse::kTrain: return "train";
    case ConfigUse::kExport: return "export";
    case ConfigUse::kChat: return "chat";
  }
  return "?";
}

namespace detail {

namespace {

bool in(std::string_view key, std::initializer_list<std::string_view> names) {
  return std::find(names.begin(), names.end(), key) != names.end();
}

// (Megatron Bridge's export_hf_on_finish is a training key.)
bool export_key(std::string_view key) { return key.rfind("export_", 0) == 0 && key != "export_hf_on_finish"; }

}  // namespace

bool used_by(ConfigUse use, const KeyInfo& k) {
  switch (use) {
    case ConfigUse::kTrain:
      return !export_key(k.name);
    case ConfigUse::kExport:  // LLaMA-Factory's export_model: the model, its adapters, the template
      return export_key(k.name) ||
             in(k.name, {"model_name_or_path", "adapter_name_or_path", "adapter_folder", "template",
                         "finetuning_type", "dataset_dir", "skip_bad_records", "mixture_of_depths", "seed"});
    case ConfigUse::kChat:  // its ChatModel: the model, adapters and template (generating keys aside)
      return in(k.name, {"model_name_or_path", "adapter_name_or_path", "adapter_folder", "template",
                         "finetuning_type", "default_system", "enable_thinking"});
  }
  return false;
}

bool set_generating_field(TrainArgs& a, const Field& f) {
  GeneratingKeys& g = a.generating;
  const std::string& k = f.key;
  if (f.node.IsNull()) return k == "do_sample" || k == "temperature" || k == "top_p" || k == "top_k" ||
                              k == "num_beams" || k == "max_new_tokens" || k == "repetition_penalty" ||
                              k == "length_penalty" || k == "default_system" || k == "skip_special_tokens" ||
                              k == "enable_thinking" || k == "infer_backend";
  if (k == "do_sample") g.do_sample = get_bool(f);
  else if (k == "skip_special_tokens") g.skip_special_tokens = get_bool(f);
  else if (k == "enable_thinking") g.enable_thinking = get_bool(f);
  else if (k == "temperature") g.temperature = get_number_in(f, 0, 1e9, false, false);
  else if (k == "top_p") g.top_p = get_number_in(f, 0, 1, true, false);
  else if (k == "repetition_penalty") g.repetition_penalty = get_number_in(f, 0, 1e9, true, false);
  else if (k == "length_penalty") g.length_penalty = get_number(f, "");
  else if (k == "top_k") g.top_k = get_int(f, 0);
  else if (k == "num_beams") {
    g.num_beams = get_int(f, 1);
    if (*g.num_beams > 1) not_implemented(f, "num_beams > 1 (beam search; unillm samples or decodes greedily)");
  }
  else if (k == "max_new_tokens") g.max_new_tokens = get_int(f, 1);
  else if (k == "default_system") g.default_system = get_string(f);
  else if (k == "infer_backend") a.infer_backend = get_choice(f, {"huggingface", "hf", "vllm", "sglang", "ktransformers"});
  else return false;
  return true;
}

}  // namespace detail
}  // namespace unillm::train
