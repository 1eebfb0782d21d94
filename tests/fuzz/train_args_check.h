// What a parsed TrainArgs must satisfy in the train-argument fuzz targets (YAML and PaddleNLP
// JSON), and the input layout they share: the argument file, then optionally a line
// "#--overrides" followed by one key=value override per line.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "fuzz_support.h"
#include "train/args.h"

namespace unillm::fuzz {

struct ArgsInput {
  std::string text;
  std::vector<std::string> overrides;
};

inline ArgsInput split_args_input(std::string_view bytes) {
  static const std::string_view kMarker = "\n#--overrides\n";
  ArgsInput in;
  size_t at = bytes.find(kMarker);
  in.text = std::string(bytes.substr(0, at));
  if (at == std::string_view::npos) return in;
  std::string_view rest = bytes.substr(at + kMarker.size());
  for (size_t pos = 0; pos < rest.size() && in.overrides.size() < 16;) {
    size_t nl = rest.find('\n', pos);
    if (nl == std::string_view::npos) nl = rest.size();
    in.overrides.emplace_back(rest.substr(pos, nl - pos));
    pos = nl + 1;
  }
  return in;
}

// The cross-key rules finish_args promises, and the derived values the trainer computes from
// them (intervals and warmup for a run of 1000 steps) without UB.
inline void check_train_args(const train::TrainArgs& a) {
  require(!a.model_name_or_path.empty(), "model_name_or_path set");
  require(a.stage == "pt" || a.stage == "sft", "stage pt or sft");
  require(
      a.finetuning_type == "lora" || a.finetuning_type == "freeze" || a.finetuning_type == "full",
      "finetuning_type lora, freeze or full");
  require(a.data_cutoff_len() >= 1, "data_cutoff_len >= 1");
  require(!(a.bf16 && a.fp16), "not both bf16 and fp16");
  require(a.eval_strategy == "no" || a.do_eval, "an eval_strategy implies do_eval");
  require(a.eval_strategy != "steps" || a.eval_steps.has_value(), "eval by steps has eval_steps");
  require(a.per_device_train_batch_size >= 1 && a.gradient_accumulation_steps >= 1,
          "batch size and accumulation >= 1");
  for (int64_t total : {1, 1000}) {
    require(train::resolve_interval(a.logging_steps, total) >= 0, "logging interval >= 0");
    require(train::resolve_interval(a.save_steps, total) >= 0, "save interval >= 0");
    if (a.eval_steps) require(train::resolve_interval(*a.eval_steps, total) >= 0, "eval interval");
    require(a.num_warmup_steps(total) >= 0, "warmup steps >= 0");
  }
  data::SftOptions o = train::sft_options(a);
  require(o.data.cutoff_len == a.data_cutoff_len(), "data options carry data_cutoff_len");
}

}  // namespace unillm::fuzz
