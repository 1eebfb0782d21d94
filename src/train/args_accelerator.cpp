// HF's accelerator_config (transformers' AcceleratorConfig: a dict, a JSON string or the path of
// a JSON file) and its two deprecated top-level spellings, split_batches and dispatch_batches.
// split_batches is applied by the trainer (TrainArgs::split_batches: the batch sizes are global,
// divided over the data-parallel processes); the others describe how accelerate moves batches
// and are accepted where unillm's processes already do the same, refused where they would change
// the run.
#include <nlohmann/json.hpp>


#include "core/error.h"
#include "train/args_internal.h"

namespace unillm::train::detail {

namespace {

nlohmann::json accelerator_json(const Field& f) {
  if (f.node.IsMap()) return yaml_to_json(f.node);
  if (!f.node.IsScalar()) bad_value(f, "a mapping such as {split_batches: true}, or the path of a JSON file");
  std::string text = f.node.Scalar(), source = f.where;
  if (text.empty() || text[0] != '{') {  // HF: AcceleratorConfig.from_json_file(path)
    source = text;
    text = read_config_text(f, text);
  }
  try {
    nlohmann::json j = nlohmann::json::parse(text);
    if (!j.is_object()) throw std::runtime_error("not an object");
    return j;
  } catch (const std::exception& e) {
    UNILLM_THROW(ConfigError, "[config] ", f.where, ": accelerator_config: ", source, " is not a JSON object (",
                 e.what(), ")");
  }
}

bool json_bool(const Field& f, const std::string& key, const nlohmann::json& v) {
  if (!v.is_boolean())
    UNILLM_THROW(ConfigError, "[config] ", f.where, ": accelerator_config.", key, " is ", v.dump(), "; expected true or false");
  return v.get<bool>();
}

void set_dispatch_batches(TrainArgs& a, const std::string& where, bool on) {
  if (on)
    a.warnings.push_back("[config] " + where + ": dispatch_batches: true — accelerate's main process would read every "
                         "batch and send each process its slice; unillm's processes read their own slices of the same "
                         "batches, so each trains on what it would have been sent");
}

}  // namespace

void set_accelerator_config(TrainArgs& a, const Field& f) {
  if (is_off(f.node)) return;
  const nlohmann::json j = accelerator_json(f);
  for (const auto& [key, v] : j.items()) {
    if (key == "split_batches") {
      a.split_batches = json_bool(f, key, v);
    } else if (key == "dispatch_batches") {
      if (!v.is_null()) set_dispatch_batches(a, f.where, json_bool(f, key, v));
    } else if (key == "even_batches") {
      json_bool(f, key, v);  // docs/training.md: unillm never repeats examples to even out the last step
    } else if (key == "use_seedable_sampler") {
      if (!json_bool(f, key, v))
        a.warnings.push_back("[config] " + f.where + ": accelerator_config.use_seedable_sampler: false — unillm's "
                             "shuffle is always the seeded one (data_seed, else seed)");
    } else if (key == "non_blocking") {
      json_bool(f, key, v);  // host-to-device copies; the same values either way
    } else if (key == "gradient_accumulation_kwargs") {
      if (!v.is_null() && !(v.is_object() && v.empty()))
        UNILLM_THROW(NotImplemented, "[config] ", f.where, ": accelerator_config.gradient_accumulation_kwargs is not "
                     "implemented (use gradient_accumulation_steps)");
    } else if (key == "use_configured_state") {
      if (json_bool(f, key, v))
        UNILLM_THROW(NotImplemented, "[config] ", f.where, ": accelerator_config.use_configured_state: true needs an "
                     "accelerate state made before the Trainer, which a unillm run does not have");
    } else {
      UNILLM_THROW(ConfigError, "[config] ", f.where, ": accelerator_config: unknown entry '", key,
                   "' (transformers' AcceleratorConfig has split_batches, dispatch_batches, even_batches, "
                   "use_seedable_sampler, non_blocking, gradient_accumulation_kwargs, use_configured_state)");
    }
  }
}

bool set_accelerator_field(TrainArgs& a, const Field& f) {
  if (f.key == "accelerator_config") {
    set_accelerator_config(a, f);
  } else if (f.key == "split_batches" || f.key == "dispatch_batches") {
    const bool on = !is_off(f.node) && get_bool(f);
    a.warnings.push_back("[config] " + f.where + ": " + f.key + " is deprecated in transformers (use accelerator_config: {" +
                         f.key + ": " + (on ? "true" : "false") + "}); taken as that");
    if (f.key == "split_batches") a.split_batches = on;
    else set_dispatch_batches(a, f.where, on);
  } else {
    return false;
  }
  return true;
}

}  // namespace unillm::train::detail
