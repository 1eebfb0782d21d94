// PEFT 0.17's OFT adapter_config.json (peft_type "OFT"): written and read for models/adapter.cpp,
// which stores OFT adapters beside LoRA ones (the weights: "<module>.oft_R.weight").
#pragma once

#include <set>

#include <string>

#include <nlohmann/json.hpp>

#include "models/adapter.h"
#include "nn/lora.h"

namespace unillm::models {

// OFTConfig's fields as PEFT 0.17.1 writes them (sorted keys).
nlohmann::ordered_json oft_config_json(const nn::LoraConfig& c, const AdapterSaveOptions& o,
                                       const std::set<std::string>& present);

// An OFT adapter_config.json (path names it in errors). NotImplemented for what unillm does not
// reproduce (coft, block_share, bias, fan_in_fan_out, layers_to_transform, exclude_modules,
// init_weights false is fine: the file's weights replace the init); ConfigError for bad values,
// including a config from before PEFT 0.14 (no oft_block_size), which PEFT refuses too.
nn::LoraConfig parse_oft_config(const nlohmann::json& j, const std::string& path);

// Shared by the LoRA and OFT readers of adapter_config.json: a key's value (nullptr when absent or
// null), and PEFT's target_modules — a list (sorted), "all-linear", or a regex — into c
// (ConfigError naming path when missing; tag: "[lora]" or "[oft]").
const nlohmann::json* peft_field(const nlohmann::json& j, const char* key);
void read_target_modules(const nlohmann::json& j, const std::string& path, const char* tag, nn::LoraConfig& c);

}  // namespace unillm::models
