// accelerate's launch config (`accelerate launch --config_file F`, LLaMA-Factory's
// examples/accelerate/*.yaml) read by `unillm launch --config_file F`: the process count, and the
// training keys its FSDP or DeepSpeed plugin stands for, passed to `train` as key=value overrides.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace unillm::cli {

struct AccelerateLaunch {
  int64_t num_processes = 0;  // 0: not given
  int64_t num_machines = 1;
  std::vector<std::string> train_overrides;  // key=value, after the training config's own keys
  std::string mixed_precision;               // bf16 or fp16: for a training config that sets neither
  std::vector<std::string> notes;            // what the launch says it took or left aside
};

// ConfigError naming the file (and line) for an unknown key, a bad value or a distributed_type
// unillm does not run; IoError when the file cannot be read.
AccelerateLaunch read_accelerate_config(const std::string& path);

}  // namespace unillm::cli
