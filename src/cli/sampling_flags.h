// The sampling flags `generate` and `chat` share, their defaults from generation_config.json
// (as HF applies them), and validation.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "cli/args.h"
#include "infer/generator.h"

namespace unillm::cli {

struct SamplingFlags {
  int64_t max_new_tokens = 256, top_k = 0, seed = 42;
  double temperature = 1.0, top_p = 1.0, min_p = 0.0, repetition_penalty = 1.0;
};

void add_sampling_options(ArgParser& p, SamplingFlags& f);
// Flags the user did not give take generation_config.json's values (dir may lack the file);
// its eos_token_id replaces eos when present. Throws ConfigError naming the file and key for a
// value of the wrong type, a non-finite number or an eos_token_id outside [0, vocab_size).
void apply_generation_config(const std::string& dir, const ArgParser& p, SamplingFlags& f,
                             std::vector<int32_t>& eos, int64_t vocab_size);
// Throws ConfigError naming the flag (command names the sub-command in messages).
void validate_sampling(const SamplingFlags& f, const std::string& command);
infer::GenerateOptions generate_options(const SamplingFlags& f, const std::vector<int32_t>& eos);

}  // namespace unillm::cli
