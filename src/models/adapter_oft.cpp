// OFT adapter_config.json (see adapter_oft.h).
#include "models/adapter_oft.h"

#include <algorithm>

namespace unillm::models {

namespace {

const nlohmann::json* field(const nlohmann::json& j, const char* key) { return peft_field(j, key); }

void refuse_if(bool bad, const std::string& path, const std::string& what) {
  if (bad) UNILLM_THROW(NotImplemented, "[oft] ", path, ": ", what, " is not supported");
}

}  // namespace

const nlohmann::json* peft_field(const nlohmann::json& j, const char* key) {
  auto it = j.find(key);
  return it == j.end() || it->is_null() ? nullptr : &*it;
}

void read_target_modules(const nlohmann::json& j, const std::string& path, const char* tag, nn::LoraConfig& c) {
  const nlohmann::json* t = peft_field(j, "target_modules");
  if (t == nullptr) UNILLM_THROW(ConfigError, tag, " ", path, ": target_modules missing");
  if (t->is_string()) {
    const auto s = t->get<std::string>();
    if (s == "all-linear")
      c.target_modules = {"all"};
    else
      c.target_regex = s;
  } else {
    c.target_modules = t->get<std::vector<std::string>>();
    std::sort(c.target_modules.begin(), c.target_modules.end());
  }
}

nlohmann::ordered_json oft_config_json(const nn::LoraConfig& c, const AdapterSaveOptions& o,
                                       const std::set<std::string>& present) {
  nlohmann::ordered_json j;
  j["auto_mapping"] = nullptr;
  j["base_model_name_or_path"] = o.base_model_name_or_path;
  j["bias"] = "none";
  j["block_share"] = false;
  j["coft"] = false;
  j["eps"] = 6e-05;
  j["exclude_modules"] = nullptr;
  j["fan_in_fan_out"] = false;
  j["inference_mode"] = true;
  j["init_weights"] = true;
  j["layers_pattern"] = nullptr;
  j["layers_to_transform"] = nullptr;
  j["module_dropout"] = c.oft.module_dropout;
  if (o.modules_to_save.empty())
    j["modules_to_save"] = nullptr;
  else
    j["modules_to_save"] = o.modules_to_save;
  j["num_cayley_neumann_terms"] = c.oft.num_cayley_neumann_terms;
  j["oft_block_size"] = c.oft.block_size;
  j["peft_type"] = "OFT";
  j["r"] = c.oft.rank;
  j["revision"] = nullptr;
  if (c.target_regex.empty())
    j["target_modules"] = nn::expanded_targets(c, present);
  else
    j["target_modules"] = c.target_regex;
  j["task_type"] = "CAUSAL_LM";
  j["use_cayley_neumann"] = c.oft.use_cayley_neumann;
  return j;
}

nn::LoraConfig parse_oft_config(const nlohmann::json& j, const std::string& path) {
  nn::LoraConfig c;
  c.is_oft = true;
  if (field(j, "oft_block_size") == nullptr)  // PEFT's check_kwargs refuses these too
    UNILLM_THROW(ConfigError, "[oft] ", path, ": no oft_block_size: an OFT adapter from PEFT < 0.14, whose "
                 "format PEFT 0.17 no longer loads (retrain it)");
  c.oft.block_size = j.at("oft_block_size").get<int64_t>();
  c.oft.rank = field(j, "r") ? j.at("r").get<int64_t>() : 0;
  c.oft.module_dropout = field(j, "module_dropout") ? j.at("module_dropout").get<double>() : 0.0;
  c.oft.use_cayley_neumann = field(j, "use_cayley_neumann") ? j.at("use_cayley_neumann").get<bool>() : true;
  c.oft.num_cayley_neumann_terms =
      field(j, "num_cayley_neumann_terms") ? j.at("num_cayley_neumann_terms").get<int64_t>() : 5;
  read_target_modules(j, path, "[oft]", c);
  const nlohmann::json* bias = field(j, "bias");
  refuse_if(bias && *bias != "none", path, "bias " + (bias ? bias->dump() : std::string()));
  refuse_if(field(j, "coft") && j.at("coft").get<bool>(), path, "coft (constrained OFT)");
  refuse_if(field(j, "block_share") && j.at("block_share").get<bool>(), path, "block_share");
  refuse_if(field(j, "fan_in_fan_out") && j.at("fan_in_fan_out").get<bool>(), path, "fan_in_fan_out");
  refuse_if(field(j, "layers_to_transform") != nullptr, path, "layers_to_transform");
  refuse_if(field(j, "exclude_modules") != nullptr && !j.at("exclude_modules").empty(), path, "exclude_modules");
  try {
    nn::validate_lora_config(c);
  } catch (const ConfigError& e) {
    UNILLM_THROW(ConfigError, path, ": ", e.what());
  }
  return c;
}

}  // namespace unillm::models
