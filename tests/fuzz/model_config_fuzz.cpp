// Fuzz target for config.json (models::load_model_config, src/models/model_config.cpp): it must
// give positive, consistent sizes (heads, kv heads, an even rotary dim within head_dim) or throw
// unillm::Error. See docs/fuzzing.md.
#include <cstdint>
#include <nlohmann/json.hpp>

#include "fuzz_support.h"
#include "models/model_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace unillm;
  if (size > (1 << 16)) return 0;  // real config.json files are < 4 KB
  const std::string path = fuzz::scratch().file("config.json");
  fuzz::write_bytes(path, fuzz::bytes_of(data, size));
  models::ModelConfig c;
  try {
    c = models::load_model_config(path);
  } catch (const Error& e) {
    fuzz::expect_input_error(e);
    return 0;
  }
  fuzz::require(c.vocab_size > 0 && c.hidden_size > 0 && c.intermediate_size > 0 &&
                    c.num_layers > 0 && c.num_heads > 0,
                "required sizes > 0");
  fuzz::require(c.num_kv_heads > 0 && c.num_heads % c.num_kv_heads == 0,
                "num_attention_heads a multiple of num_key_value_heads");
  fuzz::require(c.head_dim > 0, "head_dim > 0");
  fuzz::require(c.rope.rot_dim > 0 && c.rope.rot_dim % 2 == 0 && c.rope.rot_dim <= c.head_dim,
                "rotary dim even and within head_dim");
  fuzz::require(c.rope.scaling_type.empty() || c.rope.factor > 0, "rope scaling factor > 0");
  bool supported = false;
  for (const auto& t : models::supported_model_types()) supported |= t == c.model_type;
  fuzz::require(supported, "model_type is a supported one");
  fuzz::require(nlohmann::json::parse(c.raw_json, nullptr, false).is_object(),
                "raw_json is the config object");
  return 0;
}
