// Many prompts through one serving engine (continuous batching over the paged KV cache): what
// do_predict with predict_with_generate runs. Each request has its own RNG (seed + its index),
// so a prompt's tokens do not depend on what it was batched with.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "infer/generator.h"

namespace unillm::infer {

struct BatchGenerateOptions {
  GenerateOptions generate;  // max_new_tokens, sampling, seed (request i gets seed + i), eos_ids
  int64_t max_num_seqs = 8;  // sequences decoded together
  int64_t max_num_batched_tokens = 256;
  // When given (one per prompt), request i's seed instead of seed + i: a share of a larger set
  // keeps the seeds its prompts have in the whole (do_predict over several processes).
  std::vector<uint64_t> seeds;
};

// The generated ids of every prompt (prompt excluded; the stop id that ended one is kept, as
// generate() reports it). progress(done, total) after each finished prompt (may be empty).
std::vector<std::vector<int32_t>> batch_generate(models::CausalLM& model,
                                                 const std::vector<std::vector<int32_t>>& prompts,
                                                 const BatchGenerateOptions& options,
                                                 const std::function<void(int64_t, int64_t)>& progress = {});

}  // namespace unillm::infer
