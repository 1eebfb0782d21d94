#include "train/rope_scaling.h"

#include <cmath>
#include <nlohmann/json.hpp>

#include "core/error.h"

namespace unillm::train {

std::string apply_rope_scaling(models::ModelConfig& cfg, const std::string& type, int64_t model_max_length,
                               const std::string& config_path) {
  nlohmann::ordered_json j = nlohmann::ordered_json::parse(cfg.raw_json);
  int64_t old_max = cfg.max_position_embeddings;
  const auto rs = j.find("rope_scaling");
  if (rs != j.end() && rs->is_object() && rs->contains("original_max_position_embeddings") &&
      (*rs)["original_max_position_embeddings"].is_number_integer())
    old_max = (*rs)["original_max_position_embeddings"].get<int64_t>();
  if (old_max <= 0 || model_max_length <= old_max)
    return UNILLM_MSG("rope_scaling ", type, ": cutoff_len ", model_max_length, " is within the model's ", old_max,
                      " positions; rope scaling disabled (as LLaMA-Factory)");
  const double factor = std::ceil(static_cast<double>(model_max_length) / static_cast<double>(old_max));
  nlohmann::ordered_json s = {{"rope_type", type}, {"factor", factor}};
  if (type != "linear") s["original_max_position_embeddings"] = old_max;
  if (type == "llama3") {
    s["low_freq_factor"] = 1.0;
    s["high_freq_factor"] = 4.0;
  }
  const auto enlarged = static_cast<int64_t>(static_cast<double>(old_max) * factor);
  j["rope_scaling"] = s;
  j["max_position_embeddings"] = enlarged;
  cfg = models::parse_model_config(j.dump(2), config_path);
  // HF's dynamic NTK rescales only past max_position_embeddings, which now covers cutoff_len:
  // training sees the plain table, longer inference the rescaled one (LLaMA-Factory warns too).
  const char* note = type == "dynamic" ? "; dynamic NTK scaling may not work well with fine-tuning" : "";
  return UNILLM_MSG("rope_scaling ", type, ": factor ", factor, "; max model length enlarged from ", old_max, " to ",
                    enlarged, " (written to the saved config.json)", note);
}

}  // namespace unillm::train
