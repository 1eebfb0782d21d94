// save_pretrained, tokenizer file copies and HF-style initialisation.
#include "models/save.h"

#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>

#include "core/rng.h"
#include "io/json_file.h"
#include "io/safetensors_writer.h"

namespace unillm::models {

namespace fs = std::filesystem;

void copy_tokenizer_files(const std::string& src_dir, const std::string& dst_dir) {
  static const char* files[] = {"tokenizer.json", "tokenizer.model", "tokenizer_config.json",
                                "special_tokens_map.json", "added_tokens.json", "vocab.json", "merges.txt"};
  for (const char* f : files) {
    fs::path src = fs::path(src_dir) / f;
    if (fs::exists(src)) io::write_file_atomic((fs::path(dst_dir) / f).string(), io::read_file_bytes(src.string()));
  }
}

void save_pretrained(const CausalLM& model, const std::string& dir, const SaveOptions& o) {
  fs::create_directories(dir);
  nlohmann::ordered_json cfg = nlohmann::ordered_json::parse(model.config().raw_json);
  cfg["torch_dtype"] = "float32";
  nn::NamedTensors tensors = model.named_parameters();
  std::string arch = model.config().architecture;  // LlamaForCausalLM -> Llama
  if (const size_t at = arch.find("For"); at != std::string::npos) arch.resize(at);
  if (arch.empty()) {  // no architectures in config.json: HF's class prefix of the model type
    static const std::map<std::string, std::string> prefix = {
        {"llama", "Llama"}, {"mistral", "Mistral"}, {"qwen2", "Qwen2"},
        {"qwen3", "Qwen3"}, {"qwen2_moe", "Qwen2Moe"}, {"qwen3_moe", "Qwen3Moe"}};
    const auto it = prefix.find(model.config().model_type);
    arch = it != prefix.end() ? it->second : "Llama";
  }
  // The mixture-of-depth package renames the class it converts (LlamaForCausalLM ->
  // LlamaMoDForCausalLM), which is how its loader and unillm know a routed checkpoint.
  if (model.config().mixture_of_depths)
    cfg["architectures"] = {arch + (arch.ends_with("MoD") ? "" : "MoD") + "ForCausalLM"};
  if (!o.token_classification_head.empty()) {
    cfg["architectures"] = {arch + "ForTokenClassification"};
    cfg["id2label"] = {{"0", "LABEL_0"}};
    cfg["label2id"] = {{"LABEL_0", 0}};
    cfg["classifier_dropout"] = 0.0;
    std::erase_if(tensors, [](const auto& nt) { return nt.first == "lm_head.weight"; });
    tensors.insert(tensors.end(), o.token_classification_head.begin(), o.token_classification_head.end());
  }
  io::write_file_atomic((fs::path(dir) / "config.json").string(), cfg.dump(2) + "\n");
  io::save_sharded(dir, tensors, o.max_shard_bytes, o.before_read);
  if (!o.tokenizer_dir.empty()) copy_tokenizer_files(o.tokenizer_dir, dir);
  if (!o.generation_config_dir.empty()) {
    fs::path g = fs::path(o.generation_config_dir) / "generation_config.json";
    if (fs::exists(g)) io::write_file_atomic((fs::path(dir) / "generation_config.json").string(), io::read_file_bytes(g.string()));
  }
}

namespace {
bool is_norm(const std::string& n) { return n.find("norm") != std::string::npos; }
}  // namespace

void init_weights(CausalLM& model, double std, uint64_t seed, int32_t pad_token_id) {
  Rng rng(seed);
  for (auto& [name, t] : model.named_parameters()) {
    Tensor v = t;
    if (name.size() > 5 && name.compare(name.size() - 5, 5, ".bias") == 0) {
      v.fill(0.0);
    } else if (is_norm(name)) {
      v.fill(1.0);
    } else {
      std::vector<float> vals(static_cast<size_t>(v.numel()));
      for (auto& x : vals) x = static_cast<float>(rng.normal() * std);
      if (name == "model.embed_tokens.weight" && pad_token_id >= 0 && pad_token_id < v.size(0))
        std::fill_n(vals.begin() + static_cast<int64_t>(pad_token_id) * v.size(1), v.size(1), 0.0f);
      v.copy_from(Tensor::from_vector(vals, v.shape()));
    }
  }
}

}  // namespace unillm::models
