// Single-sequence generation over the paged KV cache: prefill the prompt in one forward, then
// decode one token per forward, computing the lm_head only for the last position.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "infer/block_pool.h"
#include "infer/sampler.h"
#include "models/causal_lm.h"

namespace unillm::infer {

struct GenerateOptions {
  int64_t max_new_tokens = 256;
  SamplingParams sampling;
  uint64_t seed = 42;
  bool ignore_eos = false;
  std::vector<int32_t> eos_ids;
  int64_t block_size = 16;
  int64_t prefill_chunk = 512;  // prompt tokens per forward (chunked prefill)
  DType kv_dtype = DType::f32;  // the KV cache: f32, bf16 or f16 (EngineConfig::kv_dtype)
};

enum class StopReason { length, eos, callback };

struct GenerateResult {
  std::vector<int32_t> tokens;  // generated ids, prompt excluded
  StopReason reason = StopReason::length;
  int64_t prompt_tokens = 0;
  double prefill_seconds = 0, decode_seconds = 0;
};

// on_token(id) is called for every generated id (EOS included when it ends the run); returning
// false stops generation (e.g. a stop string matched).
GenerateResult generate(models::CausalLM& model, const std::vector<int32_t>& prompt,
                        const GenerateOptions& options,
                        const std::function<bool(int32_t)>& on_token);

}  // namespace unillm::infer
